// The one list of device codecs, by compressor name. Not self-registering globals, for
// the reason compress/registry.cpp gives. A compressor missing here runs its host codec
// on a host copy of the tensors (make_staging_codec), so a new compressor works on
// device tensors before it has a device section.
#include "base/error.hpp"
#include "compress/compressors/common.hpp"
#include "compress/device_codec.hpp"

#include <cstring>

namespace acc::compress {
namespace {

struct DeviceEntry {
    const char* name;
    DeviceCodecFactory make;
};

const std::vector<DeviceEntry>& device_codecs() {
    static const std::vector<DeviceEntry> list = {
        {"none", make_none_device_codec},       {"fp16", make_fp16_device_codec},
        {"powersgd", make_powersgd_device_codec}, {"topk", make_topk_device_codec},
        {"randomk", make_randomk_device_codec}, {"dgc", make_dgc_device_codec},
        {"signsgd", make_signsgd_device_codec}, {"efsignsgd", make_efsignsgd_device_codec},
        {"qsgd", make_qsgd_device_codec},       {"terngrad", make_terngrad_device_codec},
    };
    return list;
}

const DeviceEntry* find_device_codec(const std::string& name) {
    for (const auto& e : device_codecs())
        if (name == e.name) return &e;
    return nullptr;
}

}  // namespace

bool has_device_codec(const std::string& compressor) { return find_device_codec(compressor) != nullptr; }

std::unique_ptr<DeviceCodec> make_device_codec(const Spec& spec, const std::vector<std::int64_t>& shape,
                                               const CodecOptions& options) {
    std::unique_ptr<TensorCodec> host = make_codec(spec, shape, options);
    if (const DeviceEntry* e = find_device_codec(spec.name)) return e->make(std::move(host), spec, options);
    return make_staging_codec(std::move(host));
}

}  // namespace acc::compress
