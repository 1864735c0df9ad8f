// none: every value as float32 in the flat allreduce.
#include "compress/compressors/common.hpp"

#ifndef ACC_COMPRESS_DEVICE  // ------------------------------------------ host section

namespace acc::compress {
namespace {
namespace k = kernels;

class DenseCodec : public TensorCodec {
public:
    DenseCodec(const Spec& spec, std::int64_t n, bool error_feedback = false)
        : TensorCodec(spec, n), error_feedback_(error_feedback) {}
    Channel channel() const override { return Channel::fp32_sum; }
    std::int64_t payload_bytes() const override { return 4 * numel_; }
    bool error_feedback() const override { return error_feedback_; }
    bool encode(float* t, bool, std::uint64_t, std::uint8_t* payload) override {
        return k::copy_checked(reinterpret_cast<float*>(payload), t, numel_);
    }
    void decode_sum(const std::uint8_t* sum, int world, float* out, float* memory) const override {
        k::divide(reinterpret_cast<const float*>(sum), numel_, static_cast<float>(world), out);
        // PyTorch's hook's error for a tensor sent uncompressed: local input minus the mean.
        if (memory)
            for (std::int64_t j = 0; j < numel_; ++j) memory[j] -= out[j];
    }

private:
    bool error_feedback_;
};

std::int64_t wire(double, const std::vector<std::int64_t>& shape) { return 4 * shape_numel(shape); }

}  // namespace

std::unique_ptr<TensorCodec> codec_util::make_dense_codec(const Spec& spec, std::int64_t n, bool error_feedback) {
    return std::make_unique<DenseCodec>(spec, n, error_feedback);
}

const CompressorInfo& none_compressor() {
    static const CompressorInfo info = [] {
        CompressorInfo c;
        c.name = "none";
        c.summary = "fp32 allreduce, no compression";
        c.collective = Collective::allreduce;
        c.wire_bytes = wire;
        c.make_codec = codec_util::make<DenseCodec>;
        c.residual_model = ResidualModel::exact;
        return c;
    }();
    return info;
}

const Spec& no_compression() {
    static const Spec spec{none_compressor().name, 0};
    return spec;
}

}  // namespace acc::compress

#else  // -------------------------------------------------------------- device section
// Compiled into the LibTorch library only (acc_compress_device): the device codec.

namespace acc::compress {

namespace {

class DenseDeviceCodec : public DeviceCodec {
public:
    explicit DenseDeviceCodec(std::unique_ptr<TensorCodec> host) : DeviceCodec(std::move(host)) {}
    bool sends_values() const override { return true; }
    at::Tensor encode(at::Tensor& t, bool, std::uint64_t, at::Tensor& payload) override {
        payload.copy_(t);
        return device::all_finite(t);
    }
    void decode_sum(const at::Tensor& sum, int world, at::Tensor& out, at::Tensor* memory) override {
        at::div_out(out, sum, at::scalar_tensor(static_cast<float>(world), sum.options()));
        if (memory) memory->sub_(out);
    }
};

}  // namespace

std::unique_ptr<DeviceCodec> codec_util::make_dense_device_codec(std::unique_ptr<TensorCodec> host) {
    return std::make_unique<DenseDeviceCodec>(std::move(host));
}

std::unique_ptr<DeviceCodec> make_none_device_codec(std::unique_ptr<TensorCodec> host, const Spec&,
                                                    const CodecOptions&) {
    return codec_util::make_dense_device_codec(std::move(host));
}

}  // namespace acc::compress

#endif  // ACC_COMPRESS_DEVICE
