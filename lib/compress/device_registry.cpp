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
    const CompressorInfo& (*compressor)();
    DeviceCodecFactory make;
};

// Each factory beside its compressor's registration function: no compressor is named here.
const std::vector<DeviceEntry>& device_codecs() {
    static const std::vector<DeviceEntry> list = {
        {none_compressor, make_none_device_codec},           {fp16_compressor, make_fp16_device_codec},
        {powersgd_compressor, make_powersgd_device_codec},   {topk_compressor, make_topk_device_codec},
        {randomk_compressor, make_randomk_device_codec},     {dgc_compressor, make_dgc_device_codec},
        {signsgd_compressor, make_signsgd_device_codec},     {efsignsgd_compressor, make_efsignsgd_device_codec},
        {qsgd_compressor, make_qsgd_device_codec},           {terngrad_compressor, make_terngrad_device_codec},
    };
    return list;
}

const DeviceEntry* find_device_codec(const std::string& name) {
    for (const auto& e : device_codecs())
        if (name == e.compressor().name) return &e;
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
