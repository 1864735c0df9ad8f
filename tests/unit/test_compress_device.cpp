// The device codecs (compress/device_codec.hpp) on CPU tensors against the host codecs:
// the same payload bytes where the encoding is deterministic, the same decoded values
// and error memories to the host tests' tolerances, NaN and infinity refused alike; the
// allgather decoders equal to the host's bit for bit, whatever order a scatter adds in,
// and in memory of a few times n at 64 workers; the
// batched PowerSGD pieces against the per-matrix host ones; and the whole exchange's
// device path (forced on CPU) against its host path on 1-3 thread ranks.
#include "base/error.hpp"
#include "compress/codecs.hpp"
#include "compress/device_codec.hpp"
#include "compress/kernels.hpp"
#include "compress/shapes.hpp"
#include "exchange/gradient_exchange.hpp"
#include "support/thread_collectives.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/library.h>

#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#ifdef __GLIBC__
#include <malloc.h>
#endif

using namespace acc::compress;
using namespace acc::exchange;

namespace {

const std::vector<std::vector<std::int64_t>> kShapes = {{1}, {37}, {1000}, {33, 7}, {5, 6, 7}, {300, 130}};

const std::vector<std::string> kLevels = {"none",     "fp16",      "powersgd:2", "topk:0.1", "randomk:0.1",
                                          "signsgd",  "efsignsgd", "qsgd:127",   "qsgd:300", "terngrad"};

std::vector<float> normal(std::int64_t n, std::uint64_t seed, float scale = 1.0f) {
    at::Tensor t = at::randn({n}, at::make_generator<at::CPUGeneratorImpl>(seed), at::kFloat) * scale;
    return {t.data_ptr<float>(), t.data_ptr<float>() + n};
}

at::Tensor tensor_of(const std::vector<float>& v) {
    return at::from_blob(const_cast<float*>(v.data()), {static_cast<std::int64_t>(v.size())}, at::kFloat).clone();
}

std::vector<std::uint8_t> bytes_of(const at::Tensor& t) {
    at::Tensor b = device::bytes_of(t);
    return {b.data_ptr<std::uint8_t>(), b.data_ptr<std::uint8_t>() + b.numel()};
}

at::Tensor payload_buffer(const DeviceCodec& codec) {
    const Channel c = codec.channel();
    const std::int64_t size = channel_element_bytes(c);
    at::ScalarType type = c == Channel::gather ? at::kByte : (c == Channel::fp16_sum ? at::kHalf : at::kFloat);
    return at::zeros({codec.host().buffer_bytes() / size}, type);
}

void expect_near(const std::vector<float>& host, const at::Tensor& device, float tolerance, const std::string& what) {
    ASSERT_EQ(static_cast<std::int64_t>(host.size()), device.numel()) << what;
    at::Tensor d = device.contiguous();
    const float* p = d.data_ptr<float>();
    for (size_t i = 0; i < host.size(); ++i)
        ASSERT_NEAR(host[i], p[i], tolerance * (1.0f + std::fabs(host[i]))) << what << " at " << i;
}

// One worker's encode on both sides (several steps of error feedback), then the decode
// of W workers' payloads on both sides.
struct Pair {
    std::unique_ptr<TensorCodec> host;
    std::unique_ptr<DeviceCodec> dev;
};

Pair make_pair_of(const std::string& level, const std::vector<std::int64_t>& shape, int world = 3) {
    CodecOptions o;
    o.world = world;
    Spec spec = parse_spec(level);
    return {make_codec(spec, shape, o), make_device_codec(spec, shape, o)};
}

// compensate()'s flag, or true where encode()'s flag tells instead (finite_in_encode()).
bool compensated_finite(DeviceCodec& c, const at::Tensor& g, at::Tensor& memory, bool memory_zero) {
    at::Tensor ok = c.compensate(g, memory, memory_zero);
    EXPECT_EQ(ok.defined(), !c.finite_in_encode());
    return !ok.defined() || ok.item<bool>();
}

void check_level(const std::string& level, const std::vector<std::int64_t>& shape) {
    const std::int64_t n = acc::shape_numel(shape);
    const std::string what = level + " on " + std::to_string(n) + " values";
    Pair c = make_pair_of(level, shape);
    if (c.host->channel() == Channel::low_rank) return;  // both rounds live in the exchange
    const bool ef = c.host->error_feedback();
    std::vector<float> memory(static_cast<size_t>(n), 0.0f);
    at::Tensor dmemory = at::zeros({n}, at::kFloat);
    std::vector<std::uint8_t> host_payload(static_cast<size_t>(c.host->buffer_bytes()));
    at::Tensor dpayload = payload_buffer(*c.dev);
    for (int step = 0; step < 3; ++step) {
        std::vector<float> g = normal(n, 10 + static_cast<std::uint64_t>(step));
        const std::uint64_t key = kernels::stream_key(7, static_cast<std::uint64_t>(step), 1, 0);
        ASSERT_TRUE(c.host->compensate(g.data(), memory.data(), step == 0)) << what;
        ASSERT_TRUE(compensated_finite(*c.dev, tensor_of(g), dmemory, step == 0)) << what;
        expect_near(memory, dmemory, 1e-5f, what + " compensated memory");
        ASSERT_TRUE(c.host->encode(memory.data(), ef, key, host_payload.data())) << what;
        ASSERT_TRUE(c.dev->encode(dmemory, ef, key, dpayload).item<bool>()) << what;
        EXPECT_EQ(host_payload, bytes_of(dpayload)) << what << " payload at step " << step;
        expect_near(memory, dmemory, 1e-5f, what + " error memory");
        // Keep both sides on the same memory, so that rounding differences cannot grow.
        dmemory.copy_(tensor_of(memory));
    }
    // Decode: W different payloads (made by the host), the same bytes on both sides.
    // Both codecs encode each (randomk decodes at the indices of its last encode).
    std::vector<std::vector<std::uint8_t>> payloads;
    for (int w = 0; w < 3; ++w) {
        std::vector<float> x = normal(n, 100 + static_cast<std::uint64_t>(w));
        std::vector<std::uint8_t> p(static_cast<size_t>(c.host->buffer_bytes()));
        const std::uint64_t key = kernels::stream_key(1, 2, 3, static_cast<std::uint64_t>(w));
        at::Tensor t = tensor_of(x), scratch = payload_buffer(*c.dev);
        c.dev->encode(t, false, key, scratch);
        c.host->encode(x.data(), false, key, p.data());
        payloads.push_back(p);
    }
    std::vector<float> host_out(static_cast<size_t>(n));
    at::Tensor dout = at::full({n}, 42.0f);
    if (c.host->channel() == Channel::gather) {
        std::vector<const std::uint8_t*> pointers;
        std::vector<at::Tensor> tensors;
        for (auto& p : payloads) {
            pointers.push_back(p.data());
            tensors.push_back(at::from_blob(p.data(), {static_cast<std::int64_t>(p.size())}, at::kByte).clone());
        }
        ASSERT_TRUE(c.host->decode(pointers, host_out.data())) << what;
        ASSERT_TRUE(c.dev->decode(tensors, dout).item<bool>()) << what;
    } else {
        std::vector<float> host_memory = normal(n, 5), device_memory_values = host_memory;
        at::Tensor dmem = tensor_of(host_memory);
        at::Tensor sum = payload_buffer(*c.dev);
        if (sum.numel() > 0) device::bytes_of(sum).copy_(at::from_blob(payloads[0].data(), {static_cast<std::int64_t>(sum.nbytes())}, at::kByte));
        c.host->decode_sum(payloads[0].data(), 3, host_out.data(), ef ? host_memory.data() : nullptr);
        c.dev->decode_sum(sum, 3, dout, ef ? &dmem : nullptr);
        expect_near(host_memory, dmem, 1e-6f, what + " memory after decode");
    }
    expect_near(host_out, dout, 1e-6f, what + " decoded");
}

}  // namespace

TEST(DeviceCodec, EveryCompressorMatchesItsHostCodec) {
    for (const auto& level : kLevels)
        for (const auto& shape : kShapes) check_level(level, shape);
}

TEST(DeviceCodec, DeterministicPayloadsAreByteIdentical) {
    // The stochastic ones too: the device draws the host's counter-based stream.
    for (const std::string level : {"qsgd:2", "qsgd:127", "qsgd:32767", "terngrad", "signsgd", "fp16", "randomk:0.3"}) {
        Pair c = make_pair_of(level, {4099});
        std::vector<float> x = normal(4099, 3, 7.0f);
        x[17] = 0.0f;
        std::vector<std::uint8_t> host(static_cast<size_t>(c.host->buffer_bytes()));
        at::Tensor dev = payload_buffer(*c.dev);
        at::Tensor t = tensor_of(x);
        const std::uint64_t key = 0x1234567890abcdefull;
        c.host->encode(x.data(), false, key, host.data());
        c.dev->encode(t, false, key, dev);
        EXPECT_EQ(host, bytes_of(dev)) << level;
    }
}

TEST(DeviceCodec, SubnormalBucketsAreByteIdentical) {
    // Where levels / norm (QSGD) or 1 / s (TernGrad) overflows float32, the device divides
    // first as the host does; a zero bucket beside them stays zero.
    const float tiny = std::numeric_limits<float>::denorm_min();
    for (const std::string level : {"qsgd:1", "qsgd:127", "qsgd:32767", "terngrad"}) {
        Pair c = make_pair_of(level, {700});
        std::vector<float> x(700, 0.0f);
        x[5] = 2e-39f;
        for (int i = 128; i < 256; i += 3) x[static_cast<size_t>(i)] = i % 2 ? -tiny : tiny;
        if (level != "terngrad")  // a bucket of normal values too (TernGrad has one s for all)
            for (int i = 512; i < 640; ++i) x[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i % 13 - 6);
        std::vector<std::uint8_t> host(static_cast<size_t>(c.host->buffer_bytes()));
        at::Tensor dev = payload_buffer(*c.dev);
        at::Tensor t = tensor_of(x);
        ASSERT_TRUE(c.host->encode(x.data(), false, 11, host.data())) << level;
        ASSERT_TRUE(c.dev->encode(t, false, 11, dev).item<bool>()) << level;
        EXPECT_EQ(host, bytes_of(dev)) << level;
    }
}

TEST(DeviceCodec, UniformNumbersEqualTheHostStream) {
    for (std::uint64_t key : {0ull, 1ull, 0xfedcba9876543210ull}) {
        const std::int64_t begin = 4294967000LL;  // crosses 2^32, where the host's index wraps
        at::Tensor u = device::uniform(key, begin, 600, at::kCPU);
        for (std::int64_t i = 0; i < 600; ++i)
            ASSERT_EQ(kernels::uniform_at(key, begin + i), u[i].item<float>()) << key << " " << i;
    }
}

TEST(DeviceCodec, RefusesNaNAndInfinityAsTheHostDoes) {
    for (const auto& level : kLevels) {
        Pair c = make_pair_of(level, {70});
        if (c.host->channel() == Channel::low_rank) continue;
        for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
            std::vector<float> x = normal(70, 4);
            x[40] = bad;
            std::vector<float> memory(70, 0.0f);
            at::Tensor dmemory = at::zeros({70});
            const bool host_compensated = c.host->compensate(x.data(), memory.data(), false);
            at::Tensor compensated = c.dev->compensate(tensor_of(x), dmemory, false);
            std::vector<std::uint8_t> p(static_cast<size_t>(c.host->buffer_bytes()));
            at::Tensor dp = payload_buffer(*c.dev);
            at::Tensor t = tensor_of(x);
            const bool host_ok = c.host->encode(x.data(), false, 1, p.data());
            const bool dev_ok = c.dev->encode(t, false, 1, dp).item<bool>();
            if (c.dev->finite_in_encode()) {
                // Top-k: encode() tells for both (its choice holds the NaN or infinity).
                EXPECT_FALSE(host_compensated) << level;
                EXPECT_FALSE(compensated.defined()) << level;
                EXPECT_FALSE(dev_ok) << level;
                continue;
            }
            EXPECT_EQ(host_compensated, compensated.item<bool>()) << level;
            EXPECT_FALSE(c.dev->compensate(tensor_of(x), dmemory, true).item<bool>()) << level;
            EXPECT_EQ(host_ok, dev_ok) << level;
            if (c.host->checks_finite()) {
                EXPECT_FALSE(host_ok) << level;
            }
        }
    }
}

TEST(DeviceCodec, Fp16RefusesValuesThatOverflowAfterDividing) {
    Pair c = make_pair_of("fp16", {4}, 2);
    at::Tensor dp = payload_buffer(*c.dev);
    at::Tensor ok = at::tensor(std::vector<float>{1, 2, 131000, 4});  // 65500 after dividing by 2
    EXPECT_TRUE(c.dev->encode(ok, false, 0, dp).item<bool>());
    at::Tensor bad = at::tensor(std::vector<float>{1, 2, 131100, 4});  // 65550 rounds to infinity
    EXPECT_FALSE(c.dev->encode(bad, false, 0, dp).item<bool>());
}

TEST(DeviceCodec, MalformedSparsePayloadIsReported) {
    Pair c = make_pair_of("topk:0.5", {10});
    std::vector<float> x = normal(10, 1);
    at::Tensor t = tensor_of(x), p = payload_buffer(*c.dev);
    c.dev->encode(t, false, 0, p);
    at::Tensor out = at::zeros({10});
    EXPECT_TRUE(c.dev->decode({p}, out).item<bool>());
    at::Tensor broken = p.clone();
    device::bytes_of(broken).narrow(0, 20, 4).copy_(device::bytes_of(at::tensor(std::vector<std::int32_t>{10})));
    EXPECT_FALSE(c.dev->decode({broken}, out).item<bool>());
}

namespace {

// index_add_ on CPU tensors in the order a GPU's atomics may take: the last element
// first (ATen's CPU kernel goes first to last, which is also the host decoders' order).
at::Tensor& index_add_last_first(at::Tensor& self, std::int64_t dim, const at::Tensor& index,
                                 const at::Tensor& source, const at::Scalar& alpha) {
    TORCH_CHECK(self.dim() == 1 && dim == 0 && self.scalar_type() == at::kFloat && self.is_contiguous(),
                "the test's index_add_ takes a contiguous 1-D float32 tensor");
    at::Tensor i = index.to(at::kLong).contiguous(), s = source.contiguous();
    const std::int64_t* at = i.data_ptr<std::int64_t>();
    const float* v = s.data_ptr<float>();
    float* out = self.data_ptr<float>();
    const auto a = alpha.to<float>();
    for (std::int64_t j = i.numel() - 1; j >= 0; --j) out[at[j]] += v[j] * a;
    return self;
}

// While alive, CPU index_add_ runs index_add_last_first.
class ScatterLastFirst {
public:
    ScatterLastFirst() { library_.impl("index_add_", TORCH_FN(index_add_last_first)); }

private:
    torch::Library library_{torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__};
};

std::vector<std::uint32_t> float_bits(const float* p, std::int64_t n) {
    std::vector<std::uint32_t> bits(static_cast<size_t>(n));
    std::memcpy(bits.data(), p, bits.size() * 4);
    return bits;
}

std::vector<std::uint32_t> float_bits(const at::Tensor& t) {
    at::Tensor c = t.contiguous();
    return float_bits(c.data_ptr<float>(), c.numel());
}

// W payloads of a sparse codec (k pairs each) that all pick the same k indices, with
// values of such different magnitudes that the order of the sum shows in its rounding.
std::vector<std::vector<std::uint8_t>> colliding_sparse_payloads(int workers, std::int64_t k,
                                                                 const std::vector<std::int32_t>& indices) {
    const float magnitudes[] = {1.0f, 1e8f, -1e8f, 0.75f, 3e7f, -2.5f, -3e7f, 1.25f};
    std::vector<std::vector<std::uint8_t>> payloads;
    for (int w = 0; w < workers; ++w) {
        std::vector<std::uint8_t> p(static_cast<size_t>(8 * k));
        for (std::int64_t j = 0; j < k; ++j) {
            const float v = magnitudes[(w + 3 * j) % 8];
            std::memcpy(p.data() + 4 * j, &v, 4);
            std::memcpy(p.data() + 4 * (k + j), &indices[static_cast<size_t>(j)], 4);
        }
        payloads.push_back(p);
    }
    return payloads;
}

}  // namespace

TEST(DeviceCodec, SparseDecodeAddsWorkersInOrderWhateverTheScatterOrder) {
    // topk and dgc (the same decoder): every worker sends entries 2, 5, 9 and 14 of 16.
    const std::int64_t n = 16;
    const std::vector<std::int32_t> indices = {2, 5, 9, 14};
    for (const std::string level : {"topk:0.25", "dgc:0.25"}) {
        for (int workers : {3, 4, 8}) {
            const std::string what = level + " on " + std::to_string(workers) + " workers";
            Pair c = make_pair_of(level, {n}, workers);
            const auto k = static_cast<std::int64_t>(indices.size());
            ASSERT_EQ(c.host->payload_bytes(), 8 * k);
            auto payloads = colliding_sparse_payloads(workers, k, indices);
            // The sum as the host takes it: each term v / W, added worker after worker.
            const float weight = 1.0f / static_cast<float>(workers);
            std::vector<float> in_order(static_cast<size_t>(n), 0.0f), reversed(static_cast<size_t>(n), 0.0f);
            for (int w = 0; w < workers; ++w)
                for (std::int64_t j = 0; j < k; ++j) {
                    float first, last;
                    std::memcpy(&first, payloads[static_cast<size_t>(w)].data() + 4 * j, 4);
                    std::memcpy(&last, payloads[static_cast<size_t>(workers - 1 - w)].data() + 4 * j, 4);
                    in_order[static_cast<size_t>(indices[static_cast<size_t>(j)])] += weight * first;
                    reversed[static_cast<size_t>(indices[static_cast<size_t>(j)])] += weight * last;
                }
            ASSERT_NE(float_bits(in_order.data(), n), float_bits(reversed.data(), n))
                << what << ": the values must make the order of the sum matter";
            std::vector<const std::uint8_t*> pointers;
            std::vector<at::Tensor> tensors;
            for (auto& p : payloads) {
                pointers.push_back(p.data());
                tensors.push_back(at::from_blob(p.data(), {8 * k}, at::kByte).clone());
            }
            std::vector<float> host_out(static_cast<size_t>(n));
            ASSERT_TRUE(c.host->decode(pointers, host_out.data())) << what;
            EXPECT_EQ(float_bits(in_order.data(), n), float_bits(host_out.data(), n)) << what << ": host decoder";
            at::Tensor out = at::full({n}, 42.0f);
            ASSERT_TRUE(c.dev->decode(tensors, out).item<bool>()) << what;
            EXPECT_EQ(float_bits(in_order.data(), n), float_bits(out)) << what;
            {
                // As on a GPU, where a scatter adds colliding terms in no fixed order.
                ScatterLastFirst last_first;
                at::Tensor check = at::zeros({1});
                check.index_add_(0, at::zeros({3}, at::kLong), at::tensor(std::vector<float>{1e8f, -1e8f, 1.0f}));
                ASSERT_EQ(check.item<float>(), 0.0f) << "the test's index_add_ does not run";
                out.fill_(42.0f);
                ASSERT_TRUE(c.dev->decode(tensors, out).item<bool>()) << what;
                EXPECT_EQ(float_bits(in_order.data(), n), float_bits(out)) << what << " (scatter last first)";
            }
        }
    }
}

namespace {

// W workers' buffers holding several sparse payloads at 4-aligned offsets, with a gap of
// 4 bytes between them and 3 bytes after the last (a buffer of whole words no more).
struct SparseBuffers {
    std::vector<device::SparseBatch::Part> parts;
    std::vector<std::vector<at::Tensor>> payloads;  // [part][worker]
    at::Tensor rows;                                // [W, bytes]
};

SparseBuffers sparse_buffers(const std::vector<Pair>& codecs, int workers) {
    SparseBuffers b;
    std::int64_t bytes = 0;
    for (size_t i = 0; i < codecs.size(); ++i) {
        const DeviceCodec& c = *codecs[i].dev;
        b.parts.push_back({bytes, c.sparse_pairs(), c.numel()});
        bytes += c.payload_bytes() + 4;
        std::vector<at::Tensor> mine;
        if (i == 0) {
            // Every worker picks the same entries, with values whose sum shows its order.
            auto colliding = colliding_sparse_payloads(workers, c.sparse_pairs(), {2, 5, 9, 14});
            for (auto& p : colliding) mine.push_back(at::from_blob(p.data(), {c.payload_bytes()}, at::kByte).clone());
        } else {
            for (int w = 0; w < workers; ++w) {
                at::Tensor t = tensor_of(normal(c.numel(), 50 + 10 * i + static_cast<std::uint64_t>(w)));
                at::Tensor p = payload_buffer(c);
                codecs[i].dev->encode(t, false, 0, p);
                mine.push_back(p);
            }
        }
        b.payloads.push_back(mine);
    }
    b.rows = at::full({workers, bytes + 3}, 0xee, at::kByte);
    for (size_t i = 0; i < codecs.size(); ++i)
        for (int w = 0; w < workers; ++w)
            b.rows[w].narrow(0, b.parts[i].offset, codecs[i].dev->payload_bytes()).copy_(b.payloads[i][static_cast<size_t>(w)]);
    return b;
}

}  // namespace

TEST(DeviceCodec, SparseBatchEqualsEachTensorsDecodeBitForBit) {
    // Top-k and DGC tensors of 16 (all workers choosing the same 4 entries), 10, 1 and 300
    // values, decoded as one batch and one by one, also scattering as a GPU may.
    const std::vector<std::pair<std::string, std::int64_t>> tensors = {
        {"topk:0.25", 16}, {"dgc:0.5", 10}, {"topk:0.5", 1}, {"topk:0.01", 300}};
    for (int workers : {1, 3, 4, 8}) {
        const std::string what = std::to_string(workers) + " workers";
        std::vector<Pair> codecs;
        for (const auto& [level, n] : tensors) codecs.push_back(make_pair_of(level, {n}, workers));
        SparseBuffers b = sparse_buffers(codecs, workers);
        device::SparseBatch batch(b.parts, at::kCPU);
        ASSERT_EQ(batch.numel(), 16 + 10 + 1 + 300);
        for (bool last_first : {false, true}) {
            std::unique_ptr<ScatterLastFirst> scatter;
            if (last_first) scatter = std::make_unique<ScatterLastFirst>();
            at::Tensor means = at::full({batch.numel()}, 42.0f);
            at::Tensor flags = batch.decode(b.rows, means);
            ASSERT_EQ(flags.sizes(), at::IntArrayRef({4})) << what;
            EXPECT_TRUE(flags.all().item<bool>()) << what;
            std::vector<at::Tensor> parts = means.split_with_sizes(batch.sizes());
            for (size_t i = 0; i < codecs.size(); ++i) {
                const std::string where = what + ", tensor " + std::to_string(i) + (last_first ? " (scatter last first)" : "");
                at::Tensor one = at::full({codecs[i].dev->numel()}, 42.0f);
                ASSERT_TRUE(codecs[i].dev->decode(b.payloads[i], one).item<bool>()) << what;
                EXPECT_EQ(float_bits(one), float_bits(parts[i])) << where;
                // The host's sum, worker after worker.
                std::vector<const std::uint8_t*> pointers;
                for (const at::Tensor& p : b.payloads[i]) pointers.push_back(p.data_ptr<std::uint8_t>());
                std::vector<float> host(static_cast<size_t>(codecs[i].host->numel()));
                ASSERT_TRUE(codecs[i].host->decode(pointers, host.data())) << where;
                EXPECT_EQ(float_bits(host.data(), codecs[i].host->numel()), float_bits(parts[i])) << where << " (host)";
            }
        }
    }
}

TEST(DeviceCodec, SparseBatchNamesTheTensorWhosePayloadIsMalformed) {
    for (std::int32_t bad : {-1, 10, std::numeric_limits<std::int32_t>::max()}) {
        std::vector<Pair> codecs;
        for (std::int64_t n : {16, 10, 300}) codecs.push_back(make_pair_of("topk:0.25", {n}, 3));
        SparseBuffers b = sparse_buffers(codecs, 3);
        device::SparseBatch batch(b.parts, at::kCPU);
        at::Tensor good = at::empty({batch.numel()});
        ASSERT_TRUE(batch.decode(b.rows, good).all().item<bool>());
        // Worker 2's last index of the 10-value tensor (k = 2) points outside it.
        at::Tensor rows = b.rows.clone();
        const std::int64_t k = b.parts[1].pairs;
        rows[2].narrow(0, b.parts[1].offset + 4 * (2 * k - 1), 4).copy_(device::bytes_of(at::tensor(std::vector<std::int32_t>{bad})));
        at::Tensor means = at::empty({batch.numel()});
        at::Tensor flags = batch.decode(rows, means);
        EXPECT_TRUE(flags[0].item<bool>() && !flags[1].item<bool>() && flags[2].item<bool>()) << bad << ": " << flags;
        // The other tensors decode as before; the broken one stays inside its own values.
        std::vector<at::Tensor> want = good.split_with_sizes(batch.sizes()), got = means.split_with_sizes(batch.sizes());
        EXPECT_EQ(float_bits(want[0]), float_bits(got[0])) << bad;
        EXPECT_EQ(float_bits(want[2]), float_bits(got[2])) << bad;
    }
    EXPECT_THROW(device::SparseBatch({{2, 1, 8}}, at::kCPU), acc::Error);  // not a whole word
}

namespace {

// Top-k codecs of these sizes and levels, their payloads at 4-aligned offsets of one
// buffer with 4 bytes between them and 3 after the last.
struct TopkBatchCase {
    std::vector<Pair> codecs;
    std::vector<device::TopkBatch::Part> parts;
    std::int64_t bytes = 0;
};

TopkBatchCase topk_batch_case(const std::vector<std::pair<std::string, std::int64_t>>& tensors) {
    TopkBatchCase c;
    for (const auto& [level, n] : tensors) {
        c.codecs.push_back(make_pair_of(level, {n}));
        const DeviceCodec& d = *c.codecs.back().dev;
        c.parts.push_back({c.bytes, d.sparse_pairs(), n});
        c.bytes += d.payload_bytes() + 4;
    }
    c.bytes += 3;
    return c;
}

}  // namespace

TEST(DeviceCodec, TopkBatchSendsWhatEachTensorsCodecSends) {
    // Tensors of 1 to 1,000 values, k from 1 to 100 (their rows padded to 1,000).
    TopkBatchCase c = topk_batch_case({{"topk:0.5", 1}, {"topk:0.1", 37}, {"topk:0.01", 300}, {"topk:0.1", 1000},
                                       {"topk:0.25", 64}});
    device::TopkBatch batch(c.parts, at::kCPU);
    for (bool update_error : {false, true}) {
        std::vector<at::Tensor> inputs, alone;
        at::Tensor want = at::full({c.bytes}, 0xee, at::kByte);
        for (size_t i = 0; i < c.codecs.size(); ++i) {
            inputs.push_back(tensor_of(normal(c.parts[i].numel, 70 + i)));
            alone.push_back(inputs.back().clone());
            at::Tensor p = payload_buffer(*c.codecs[i].dev);
            ASSERT_TRUE(c.codecs[i].dev->encode(alone.back(), update_error, 0, p).item<bool>());
            want.narrow(0, c.parts[i].offset, p.numel()).copy_(p);
        }
        at::Tensor t = at::cat(inputs), buffer = at::full({c.bytes}, 0xee, at::kByte);
        at::Tensor finite = batch.encode(t, update_error, buffer);
        EXPECT_TRUE(finite.equal(at::ones({5}, at::kBool))) << finite;
        EXPECT_EQ(bytes_of(want), bytes_of(buffer)) << "update_error " << update_error;
        EXPECT_TRUE(t.equal(at::cat(alone))) << "update_error " << update_error;
    }
}

TEST(DeviceCodec, TopkBatchFlagsTheTensorsHoldingNaNOrInfinity) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    TopkBatchCase c = topk_batch_case({{"topk:0.5", 1}, {"topk:0.1", 37}, {"topk:0.01", 300}, {"topk:0.25", 64}});
    device::TopkBatch batch(c.parts, at::kCPU);
    // (tensor, where, how many, value): at the start, the end, more of them than k.
    const std::vector<std::tuple<int, std::int64_t, int, float>> cases = {
        {0, 0, 1, nan}, {1, 36, 1, -inf}, {2, 0, 1, inf}, {2, 150, 10, nan}, {3, 63, 1, -nan}, {3, 5, 30, inf}};
    for (const auto& [tensor, where, many, bad] : cases) {
        std::vector<at::Tensor> inputs;
        for (size_t i = 0; i < c.parts.size(); ++i) inputs.push_back(tensor_of(normal(c.parts[i].numel, 90 + i, 1e3f)));
        for (int j = 0; j < many; ++j) inputs[static_cast<size_t>(tensor)][(where + j) % c.parts[static_cast<size_t>(tensor)].numel] = bad;
        at::Tensor t = at::cat(inputs), buffer = at::zeros({c.bytes}, at::kByte);
        at::Tensor finite = batch.encode(t, true, buffer);
        at::Tensor want = at::ones({4}, at::kBool);
        want[tensor] = false;
        EXPECT_TRUE(finite.equal(want)) << "tensor " << tensor << " at " << where << ", " << many << " x " << bad << ": "
                                        << finite;
    }
}

TEST(DeviceCodec, GatherDecodersEqualTheHostBitForBitAt64Workers) {
    // Sums over 64 workers, decoded in one block (1000 values) and in several (40000);
    // both sizes end in a partial QSGD bucket.
    const int workers = 64;
    for (const std::string level : {"qsgd:127", "qsgd:300", "terngrad", "signsgd", "efsignsgd", "topk:0.1", "dgc:0.1"})
        for (std::int64_t n : {1000, 40000}) {
            const std::string what = level + " on " + std::to_string(n) + " values";
            Pair c = make_pair_of(level, {n}, workers);
            std::vector<std::vector<std::uint8_t>> payloads;
            for (int w = 0; w < workers; ++w) {
                // Scales 2^(w % 7) apart, so that rounding differs between orders of the sum.
                std::vector<float> x = normal(n, 200 + static_cast<std::uint64_t>(w), std::ldexp(1.0f, w % 7));
                std::vector<std::uint8_t> p(static_cast<size_t>(c.host->payload_bytes()));
                ASSERT_TRUE(c.host->encode(x.data(), false, kernels::stream_key(1, 2, 3, static_cast<std::uint64_t>(w)),
                                           p.data()))
                    << what;
                payloads.push_back(p);
            }
            std::vector<const std::uint8_t*> pointers;
            std::vector<at::Tensor> tensors;
            for (auto& p : payloads) {
                pointers.push_back(p.data());
                tensors.push_back(at::from_blob(p.data(), {static_cast<std::int64_t>(p.size())}, at::kByte).clone());
            }
            std::vector<float> host_out(static_cast<size_t>(n));
            ASSERT_TRUE(c.host->decode(pointers, host_out.data())) << what;
            at::Tensor out = at::full({n}, 42.0f);
            ASSERT_TRUE(c.dev->decode(tensors, out).item<bool>()) << what;
            EXPECT_EQ(float_bits(host_out.data(), n), float_bits(out)) << what;
        }
}

namespace {

// A line "Key:   123 kB" of /proc/self/status, in bytes (-1 where there is none).
std::int64_t status_bytes(const std::string& key) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind(key + ":", 0) == 0) {
            std::istringstream fields(line.substr(key.size() + 1));
            std::int64_t kb = -1;
            fields >> kb;
            return kb * 1024;
        }
    return -1;
}

// Starts a new peak: the peak resident set (VmHWM) becomes the current one, after
// returning freed heap memory, so that the next peak counts what is allocated anew.
// False where the kernel does not let the process reset it (the peak then includes
// the setup's, which can only hide growth, never invent it).
bool reset_peak_memory() {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.close();
    return clear.good();
}

class GatherDecodeMemory : public testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(GatherDecodeMemory, StaysWithinEightTimesNFloatsAt64Workers) {
    // Decoding 64 workers' payloads of n = 2.1 M values may take at most 8 n floats
    // (67 MB) beyond the payloads and the output, where a [W, n] float tensor alone
    // would take 64 n floats (538 MB). The old stacked decoders grew by 0.7-1.6 GB;
    // the blocked ones by 8-17 MB with LibTorch 1.13 and up to 46 MB with 2.11,
    // whose allocator keeps more. Each test runs in its own process under CTest,
    // so the peak resident set is this decode's.
    if (status_bytes("VmHWM") < 0) GTEST_SKIP() << "no VmHWM in /proc/self/status";
    const std::string level = GetParam();
    const int workers = 64;
    const std::int64_t n = 2100000;
    const std::int64_t bound = 8 * 4 * n;
    Pair c = make_pair_of(level, {n}, workers);
    // Four different payloads, each sent by 16 of the workers.
    std::vector<at::Tensor> distinct;
    for (int d = 0; d < 4; ++d) {
        std::vector<float> x = normal(n, 300 + static_cast<std::uint64_t>(d), static_cast<float>(d + 1));
        at::Tensor p = at::zeros({c.host->payload_bytes()}, at::kByte);
        ASSERT_TRUE(c.host->encode(x.data(), false, static_cast<std::uint64_t>(d), p.data_ptr<std::uint8_t>()));
        distinct.push_back(p);
    }
    std::vector<at::Tensor> payloads;
    std::vector<const std::uint8_t*> pointers;
    for (int w = 0; w < workers; ++w) {
        payloads.push_back(distinct[static_cast<size_t>(w % 4)]);
        pointers.push_back(payloads.back().data_ptr<std::uint8_t>());
    }
    std::vector<float> host_out(static_cast<size_t>(n));
    ASSERT_TRUE(c.host->decode(pointers, host_out.data()));
    at::Tensor out = at::full({n}, 42.0f);
    // A first decode starts what stays (ATen's threads and their heaps); the second is measured.
    ASSERT_TRUE(c.dev->decode(payloads, out).item<bool>());
    const bool reset = reset_peak_memory();
    const std::int64_t before = status_bytes("VmHWM");
    ASSERT_TRUE(c.dev->decode(payloads, out).item<bool>());
    const std::int64_t growth = status_bytes("VmHWM") - before;
    std::cout << level << ": peak resident set grew by " << growth / 1000000.0 << " MB decoding " << workers
              << " workers' payloads of " << n << " values (bound " << bound / 1000000.0 << " MB"
              << (reset ? "" : ", peak not reset") << ")\n";
    EXPECT_LT(growth, bound) << level;
    EXPECT_EQ(float_bits(host_out.data(), n), float_bits(out)) << level;
}

INSTANTIATE_TEST_SUITE_P(DeviceCodec, GatherDecodeMemory,
                         testing::Values("qsgd:127", "qsgd:300", "terngrad", "signsgd", "efsignsgd"),
                         [](const testing::TestParamInfo<std::string>& info) {
                             std::string name = info.param;
                             for (char& ch : name)
                                 if (ch == ':') ch = '_';
                             return name;
                         });

TEST(DeviceCodec, DgcSendsTheExactTopKOfItsMomentumCorrectedMemory) {
    CodecOptions o;
    o.dgc.momentum = 0.5;
    auto dev = make_device_codec(parse_spec("dgc:0.1"), {200}, o);
    at::Tensor memory = at::zeros({200}), u = at::zeros({200});
    at::Tensor payload = payload_buffer(*dev);
    for (int step = 0; step < 3; ++step) {
        at::Tensor g = tensor_of(normal(200, 20 + static_cast<std::uint64_t>(step)));
        u = u * 0.5f + g;
        at::Tensor expected = memory + u;
        ASSERT_TRUE(compensated_finite(*dev, g, memory, false));
        ASSERT_TRUE(at::allclose(memory, expected));
        at::Tensor before = memory.clone();
        dev->encode(memory, true, 0, payload);
        at::Tensor indices = device::read_as(device::bytes_of(payload), 80, 20, at::kInt).to(at::kLong);
        at::Tensor values = device::read_as(device::bytes_of(payload), 0, 20, at::kFloat);
        at::Tensor top = std::get<0>(at::sort(std::get<1>(at::topk(before.abs(), 20))));
        EXPECT_TRUE(at::equal(indices, top));
        EXPECT_TRUE(at::equal(values, before.index_select(0, top)));
        // Sent entries leave the memory and the momentum (momentum factor masking).
        EXPECT_EQ(memory.index_select(0, top).abs().sum().item<float>(), 0.0f);
        u.index_fill_(0, top, 0.0);
        EXPECT_TRUE(at::allclose(*dev->state().front().second, u));
    }
}

TEST(DeviceCodec, StagingCodecRunsTheHostCodec) {
    CodecOptions o;
    Spec spec = parse_spec("qsgd:5");
    auto host = make_codec(spec, {300}, o);
    auto staged = make_staging_codec(make_codec(spec, {300}, o));
    std::vector<float> x = normal(300, 8);
    std::vector<std::uint8_t> p(static_cast<size_t>(host->payload_bytes()));
    host->encode(x.data(), false, 9, p.data());
    at::Tensor t = tensor_of(x), dp = at::zeros({host->payload_bytes()}, at::kByte);
    EXPECT_TRUE(staged->encode(t, false, 9, dp).item<bool>());
    EXPECT_EQ(p, bytes_of(dp));
    std::vector<float> out(300);
    host->decode({p.data()}, out.data());
    at::Tensor dout = at::zeros({300});
    EXPECT_TRUE(staged->decode({dp}, dout).item<bool>());
    expect_near(out, dout, 0, "staged decode");
    EXPECT_TRUE(has_device_codec("qsgd"));
    EXPECT_FALSE(has_device_codec("no-such-compressor"));
}

TEST(DeviceCodec, BatchedOrthogonalizationEqualsThePerMatrixHostOne) {
    for (int r : {1, 2, 4}) {
        at::Tensor m = at::randn({3, 50, r}, at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(r)));
        m[1].select(1, 0).zero_();  // a zero column stays zero
        at::Tensor batched = m.clone();
        device::orthogonalize(batched, true, 0.0f);
        for (std::int64_t b = 0; b < 3; ++b) {
            at::Tensor one = m[b].contiguous().clone();
            kernels::gram_schmidt(one.data_ptr<float>(), 50, r, 0.0f);
            EXPECT_TRUE(at::allclose(one, batched[b], 1e-5, 1e-6)) << "rank " << r << " matrix " << b;
        }
        at::Tensor qr = m.clone();
        device::orthogonalize(qr, false, 0.0f);
        for (std::int64_t b = 0; b < 3; ++b)
            EXPECT_TRUE(at::allclose(std::get<0>(at::linalg_qr(m[b])), qr[b], 1e-5, 1e-6)) << "QR " << b;
    }
}

// A NaN keeps its place on both paths (the CUDA kernel's too, tests/unit's emulated
// test): the rest of its column becomes zero and every later column NaN.
TEST(DeviceCodec, OrthogonalizationKeepsANaNAsTheHost) {
    at::Tensor m = at::randn({2, 40, 3}, at::make_generator<at::CPUGeneratorImpl>(5));
    m[1][7][0] = std::numeric_limits<float>::quiet_NaN();
    at::Tensor batched = m.clone();
    device::orthogonalize(batched, true, 0.0f);
    at::Tensor one = m[1].contiguous().clone();
    kernels::gram_schmidt(one.data_ptr<float>(), 40, 3, 0.0f);
    EXPECT_TRUE(at::equal(at::isnan(one), at::isnan(batched[1])));
    EXPECT_TRUE(at::isnan(batched[1][7][0]).item<bool>());
    EXPECT_EQ(at::count_nonzero(batched[1].select(1, 0)).item<std::int64_t>(), 1);  // the NaN alone
    EXPECT_TRUE(at::isnan(batched[1].narrow(1, 1, 2)).all().item<bool>());
    EXPECT_TRUE(at::isfinite(batched[0]).all().item<bool>());  // the other matrix untouched by it
}

// The kernels' choice is the process's, set without touching the environment (which
// CUDA's and NCCL's threads read); ACC_CUDA_KERNELS gives it where nothing set it.
TEST(DeviceCodec, CudaKernelChoiceIsSetWithoutTheEnvironment) {
    EXPECT_EQ(device::cuda_kernels_from(nullptr), device::CudaKernels::measured);
    EXPECT_EQ(device::cuda_kernels_from("0"), device::CudaKernels::none);
    EXPECT_EQ(device::cuda_kernels_from("all"), device::CudaKernels::all);
    EXPECT_EQ(device::cuda_kernels_from("1"), device::CudaKernels::measured);
    const device::CudaKernels was = device::cuda_kernels();
    const char* env = std::getenv("ACC_CUDA_KERNELS");
    const std::string env_before = env ? env : "(unset)";
    for (const auto choice : {device::CudaKernels::none, device::CudaKernels::all, device::CudaKernels::measured}) {
        device::set_cuda_kernels(choice);
        EXPECT_EQ(device::cuda_kernels(), choice);
        env = std::getenv("ACC_CUDA_KERNELS");
        EXPECT_EQ(env ? env : "(unset)", env_before);
    }
    device::set_cuda_kernels(was);
    // On a CPU tensor no kernel runs, whatever the choice.
    EXPECT_FALSE(device::cuda_kernels_for(at::zeros({4})));
}

// ---------------------------------------------------------------- the whole exchange

namespace {

std::vector<TensorInfo> exchange_tensors() {
    return {{"conv", {8, 3, 3, 3}}, {"fc", {20, 30}}, {"fc2", {20, 30}}, {"bias", {37}},
            {"one", {1}},           {"wide", {10, 60}}};
}

// Runs `steps` steps on W thread ranks, host or device path; rank r's gradients are
// seeded by (r, step). Returns rank 0's aggregates of every step, and its last state.
struct ExchangeRun {
    std::vector<std::vector<at::Tensor>> aggregates;
    std::vector<std::pair<std::string, at::Tensor>> state;
};

ExchangeRun run_exchange(int world, const std::vector<std::string>& levels, bool device_path, int steps,
                 PowerSgdVariant variant = PowerSgdVariant::pytorch_hook) {
    ExchangeRun out;
    std::mutex lock;
    acc::test::ThreadGroup group(world, 60);
    group.run([&](int rank, acc::comm::Collectives& comm) {
        std::vector<Spec> specs;
        for (const auto& l : levels) specs.push_back(parse_spec(l));
        ExchangeOptions o;
        o.device_path_on_cpu = device_path;
        o.compressors.powersgd.variant = variant;
        o.seed = 3;
        GradientExchange ex(exchange_tensors(), specs, comm, o);
        for (int step = 0; step < steps; ++step) {
            std::vector<at::Tensor> grads;
            for (const auto& t : exchange_tensors())
                grads.push_back(at::randn(t.shape, at::make_generator<at::CPUGeneratorImpl>(
                                                       static_cast<std::uint64_t>(1000 * rank + 10 * step + grads.size()))));
            ex.step(grads);
            if (rank == 0) {
                std::lock_guard<std::mutex> g(lock);
                out.aggregates.push_back(grads);
            }
        }
        if (rank == 0) out.state = ex.state();
    });
    return out;
}

void expect_same_runs(const ExchangeRun& host, const ExchangeRun& dev, double tolerance, const std::string& what) {
    ASSERT_EQ(host.aggregates.size(), dev.aggregates.size());
    for (size_t s = 0; s < host.aggregates.size(); ++s)
        for (size_t i = 0; i < host.aggregates[s].size(); ++i)
            EXPECT_TRUE(at::allclose(host.aggregates[s][i], dev.aggregates[s][i], tolerance, tolerance))
                << what << ": step " << s << " tensor " << i << " differs by "
                << (host.aggregates[s][i] - dev.aggregates[s][i]).abs().max().item<float>();
    ASSERT_EQ(host.state.size(), dev.state.size()) << what;
    for (size_t i = 0; i < host.state.size(); ++i) {
        EXPECT_EQ(host.state[i].first, dev.state[i].first) << what;
        EXPECT_TRUE(at::allclose(host.state[i].second.to(at::kDouble), dev.state[i].second.to(at::kDouble), tolerance,
                                 tolerance))
            << what << ": state " << host.state[i].first;
    }
}

// Rank 0's gradients after each of `steps` steps of two ranks, on the host path [0] and
// the device path on the CPU [1]: every tensor at `level`, from step `switch_step` on at
// `later` (if given). Rank r's gradients are seeded by (r, step, tensor).
std::array<std::vector<at::Tensor>, 2> on_both_paths(const std::vector<TensorInfo>& tensors, const std::string& level,
                                                     int steps, const std::string& later = "", int switch_step = -1) {
    std::array<std::vector<at::Tensor>, 2> results;
    acc::test::ThreadGroup group(2, 60);
    for (int device_path = 0; device_path < 2; ++device_path)
        group.run([&](int rank, acc::comm::Collectives& comm) {
            ExchangeOptions o;
            o.device_path_on_cpu = device_path == 1;
            GradientExchange ex(tensors, std::vector<Spec>(tensors.size(), parse_spec(level)), comm, o);
            std::vector<at::Tensor> out;
            for (int step = 0; step < steps; ++step) {
                if (step == switch_step) ex.set_levels(std::vector<Spec>(tensors.size(), parse_spec(later)));
                std::vector<at::Tensor> g;
                for (size_t i = 0; i < tensors.size(); ++i)
                    g.push_back(at::randn(tensors[i].shape,
                                          at::make_generator<at::CPUGeneratorImpl>(100 * rank + 10 * step + i)));
                ex.step(g);
                for (auto& t : g) out.push_back(t.clone());
            }
            if (rank == 0) results[static_cast<size_t>(device_path)] = out;
        });
    return results;
}

void expect_paths_agree(const std::array<std::vector<at::Tensor>, 2>& results, size_t tensors, double rtol,
                        double atol) {
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i)
        EXPECT_TRUE(at::allclose(results[0][i], results[1][i], rtol, atol))
            << "step " << i / tensors << " tensor " << i % tensors << " differs by "
            << (results[0][i] - results[1][i]).abs().max().item<float>();
}

}  // namespace

TEST(DeviceExchange, DevicePathEqualsHostPathForEveryCompressor) {
    for (const std::string level : {"none", "fp16", "topk:0.2", "randomk:0.2", "signsgd", "efsignsgd", "qsgd:127",
                                    "terngrad", "powersgd:1", "powersgd:2"}) {
        std::vector<std::string> levels(exchange_tensors().size(), level);
        for (int world : {1, 3}) {
            ExchangeRun host = run_exchange(world, levels, false, 3);
            ExchangeRun dev = run_exchange(world, levels, true, 3);
            expect_same_runs(host, dev, 1e-4, level + " on " + std::to_string(world) + " ranks");
        }
    }
}

TEST(DeviceExchange, SparseTensorsDecodedTogetherOrAloneEqualTheHostPath) {
    // conv, fc and fc2 decode as one batch; QSGD's 41 bytes for bias leave the payloads of
    // one and wide off 4-byte boundaries, so that they decode one by one.
    const std::vector<std::string> levels = {"topk:0.2", "topk:0.1", "topk:0.3", "qsgd:3", "topk:0.2", "topk:0.5"};
    for (int world : {1, 3}) {
        ExchangeRun host = run_exchange(world, levels, false, 3);
        ExchangeRun dev = run_exchange(world, levels, true, 3);
        expect_same_runs(host, dev, 1e-4, "sparse tensors on " + std::to_string(world) + " ranks");
    }
}

TEST(DeviceExchange, SmallTopkAndDgcTensorsEncodedTogetherEqualEachAlone) {
    // The exchange encodes these tensors in one batch (DGC's momenta in one tensor too);
    // on one rank its mean is what each tensor's own codec sends, step after step, and its
    // state what each codec keeps.
    const std::vector<TensorInfo> tensors = {{"conv", {8, 3, 3, 3}}, {"fc", {20, 30}}, {"bias", {37}}, {"one", {1}}};
    for (const std::string level : {"topk:0.1", "dgc:0.1"}) {
        acc::test::ThreadGroup group(1, 30);
        group.run([&](int, acc::comm::Collectives& comm) {
            ExchangeOptions o;
            o.device_path_on_cpu = true;
            GradientExchange ex(tensors, std::vector<Spec>(tensors.size(), parse_spec(level)), comm, o);
            CodecOptions co;
            co.world = 1;
            std::vector<std::unique_ptr<DeviceCodec>> alone;
            std::vector<at::Tensor> memories;
            for (const auto& t : tensors) {
                alone.push_back(make_device_codec(parse_spec(level), t.shape, co));
                memories.push_back(at::zeros({acc::shape_numel(t.shape)}));
            }
            for (int step = 0; step < 4; ++step) {
                std::vector<at::Tensor> grads;
                for (size_t i = 0; i < tensors.size(); ++i)
                    grads.push_back(at::randn(tensors[i].shape, at::make_generator<at::CPUGeneratorImpl>(10 * step + i)));
                std::vector<at::Tensor> mine;
                for (auto& g : grads) mine.push_back(g.clone());
                ex.step(mine);
                for (size_t i = 0; i < tensors.size(); ++i) {
                    DeviceCodec& c = *alone[i];
                    c.compensate(grads[i].view({-1}), memories[i], step == 0);
                    at::Tensor payload = payload_buffer(c), out = at::empty({c.numel()});
                    ASSERT_TRUE(c.encode(memories[i], true, 0, payload).item<bool>());
                    ASSERT_TRUE(c.decode({payload}, out).item<bool>());
                    EXPECT_EQ(float_bits(out), float_bits(mine[i])) << level << ", step " << step << ", " << tensors[i].name;
                }
            }
            std::map<std::string, at::Tensor> state;
            for (auto& [name, t] : ex.state()) state[name] = t;
            for (size_t i = 0; i < tensors.size(); ++i) {
                const std::string& name = tensors[i].name;
                EXPECT_EQ(float_bits(memories[i]), float_bits(state.at(name + "/error"))) << level << " " << name;
                for (auto& [what, t] : alone[i]->state())
                    EXPECT_EQ(float_bits(*t), float_bits(state.at(name + "/" + what))) << level << " " << name;
            }
        });
    }
}

TEST(DeviceExchange, MixedLevelsAndBothPowerSgdVariants) {
    // Two tensors of one shape share a batched product; QR above rank 2.
    const std::vector<std::string> levels = {"powersgd:4", "powersgd:4", "powersgd:4", "qsgd:3", "signsgd", "powersgd:2"};
    for (auto variant : {PowerSgdVariant::pytorch_hook, PowerSgdVariant::accordion}) {
        ExchangeRun host = run_exchange(2, levels, false, 3, variant);
        ExchangeRun dev = run_exchange(2, levels, true, 3, variant);
        expect_same_runs(host, dev, 1e-4, "mixed");
    }
}

TEST(DeviceExchange, PowerSgdMatricesOfVeryDifferentLengthsEqualTheHostPath) {
    // P's matrices are orthogonalized in zero-padded batches; a tall matrix beside short
    // ones would pad too much, so they go in batches of their own. (Its 600,000-term sums
    // differ from the host's in float rounding.)
    const std::vector<TensorInfo> tensors = {{"tall", {600000, 3}}, {"s1", {40, 30}}, {"s2", {50, 30}}, {"s3", {40, 30}}};
    expect_paths_agree(on_both_paths(tensors, "powersgd:1", 2), tensors.size(), 1e-4, 1e-4);
}

namespace {

// ATen operations our code calls in one step (the ones they call inside not counted):
// on a GPU each costs a launch or more, which at ResNet-18's size is most of the time.
thread_local int operation_depth = 0;
thread_local std::int64_t operations = 0;

std::int64_t operations_per_step(const std::string& level) {
    std::int64_t counted = -1;
    acc::test::ThreadGroup group(1, 60);
    group.run([&](int, acc::comm::Collectives& comm) {
        const auto tensors = acc::compress::preset_shapes("resnet18");
        ExchangeOptions o;
        o.device_path_on_cpu = true;
        GradientExchange ex(tensors, std::vector<Spec>(tensors.size(), parse_spec(level)), comm, o);
        std::vector<at::Tensor> grads;
        for (const auto& t : tensors) grads.push_back(at::randn(t.shape));
        ex.step(grads);  // the first step lays out buffers and draws Q
        operations = 0;
        auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(
            [](const at::RecordFunction&) -> std::unique_ptr<at::ObserverContext> {
                if (operation_depth++ == 0) ++operations;
                return nullptr;
            },
            [](const at::RecordFunction&, at::ObserverContext*) { --operation_depth; }));
        ex.step(grads);
        at::removeCallback(handle);
        counted = operations;
    });
    return counted;
}

}  // namespace

TEST(DeviceExchange, ResNet18StepTakesFewOperations) {
    // Batched: PowerSGD's orthogonalizations in one padded batch per round, its memories
    // added in one multi-tensor operation, and the 41 small tensors sent as values in one
    // run; per tensor one kernel or so remains (2,000 operations per step before).
    // Top-k and DGC: the 49 tensors up to 65,536 values encode in a few batches of similar
    // sizes and decode in one (about 20 operations each, and a copy out per tensor where
    // LibTorch has no multi-tensor copy); each of the 13 larger ones takes about 20 to
    // encode and 25 to decode (on a GPU they decode in the batch too, and the encode
    // batches are fewer). Top-k took 2,550 operations before.
    const std::int64_t powersgd = operations_per_step("powersgd:2"), none = operations_per_step("none"),
                       topk = operations_per_step("topk:0.01"), dgc = operations_per_step("dgc:0.01");
    std::cout << "operations per step over ResNet-18's 62 tensors: powersgd:2 " << powersgd << ", none " << none
              << ", topk:0.01 " << topk << ", dgc:0.01 " << dgc << std::endl;
    EXPECT_LE(powersgd, 400);
    EXPECT_LE(none, 460);
    EXPECT_LE(topk, 760);
    EXPECT_LE(dgc, 760 + 13 * 4);  // DGC's momentum: a few more for each larger tensor
}

TEST(DeviceExchange, RefusesNaNAndNamesTheTensor) {
    acc::test::ThreadGroup group(1, 30);
    for (const std::string level : {"signsgd", "topk:0.1", "powersgd:2", "fp16"}) {
        std::string message;
        group.run([&](int, acc::comm::Collectives& comm) {
            ExchangeOptions o;
            o.device_path_on_cpu = true;
            GradientExchange ex({{"w", {6, 5}}}, {parse_spec(level)}, comm, o);
            at::Tensor g = at::ones({6, 5});
            g[2][3] = std::numeric_limits<float>::quiet_NaN();
            try {
                ex.step({g});
            } catch (const acc::Error& e) {
                message = e.what();
            }
        });
        EXPECT_NE(message.find("w: gradient holds NaN or infinity"), std::string::npos) << level << ": " << message;
    }
}

TEST(DeviceExchange, TopkFindsNaNAndInfinityAmongWhatItChooses) {
    // Top-k checks only the k magnitudes it chose: wherever a NaN or an infinity lies,
    // however many there are, in the first step or once the error memory holds values.
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    acc::test::ThreadGroup group(1, 30);
    for (const std::string level : {"topk:0.05", "dgc:0.05"})
        for (int bad_step : {0, 2})
            for (int many : {1, 40})
                for (float bad : {nan, inf, -inf}) {
                    std::string message;
                    group.run([&](int, acc::comm::Collectives& comm) {
                        ExchangeOptions o;
                        o.device_path_on_cpu = true;
                        GradientExchange ex({{"a", {200}}, {"w", {6, 5}}}, {parse_spec(level), parse_spec(level)},
                                            comm, o);
                        try {
                            for (int step = 0; step <= bad_step; ++step) {
                                at::Tensor a = at::randn({200}), w = at::randn({6, 5});
                                if (step == bad_step)
                                    for (int j = 0; j < many; ++j) w.view({-1})[(7 * j + 29) % 30] = bad;
                                ex.step({a, w});
                            }
                            ex.settle();
                        } catch (const acc::Error& e) {
                            message = e.what();
                        }
                    });
                    const std::string expected = "w: gradient holds NaN or infinity at step " + std::to_string(bad_step);
                    EXPECT_NE(message.find(expected), std::string::npos)
                        << level << ", step " << bad_step << ", " << many << " x " << bad << ": " << message;
                }
}

TEST(DeviceExchange, SmallTensorsSentAsTheyAreNameTheOneThatHoldsNaN) {
    // Small tensors sent as values go as one run (one copy, one finiteness check with a
    // flag per tensor); the NaN's tensor is named, read at once or a step later.
    acc::test::ThreadGroup group(1, 30);
    const std::vector<TensorInfo> tensors = {{"a", {5}}, {"b", {6}}, {"m", {12, 9}}, {"c", {7}}};
    for (const std::string level : {"none", "powersgd:2"})
        for (auto timing : {ExchangeOptions::CheckTiming::immediate, ExchangeOptions::CheckTiming::deferred}) {
            std::string message;
            group.run([&](int, acc::comm::Collectives& comm) {
                ExchangeOptions o;
                o.device_path_on_cpu = true;
                o.check_timing = timing;
                GradientExchange ex(tensors, std::vector<Spec>(tensors.size(), parse_spec(level)), comm, o);
                auto grads = [&] {
                    std::vector<at::Tensor> g;
                    for (const auto& t : tensors) g.push_back(at::ones(t.shape));
                    return g;
                };
                try {
                    ex.step(grads());
                    auto bad = grads();
                    bad[3][4] = std::numeric_limits<float>::infinity();
                    ex.step(bad);
                    ex.settle();
                } catch (const acc::Error& e) {
                    message = e.what();
                }
            });
            EXPECT_NE(message.find("c: gradient holds NaN or infinity at step 1"), std::string::npos)
                << level << ": " << message;
        }
}

TEST(DeviceExchange, SmallTensorsLeavingErrorFeedbackSendTheirMemoryFirst) {
    // topk keeps error memories; under none the next step sends them (one by one, then as
    // a run again), as the host path does.
    const std::vector<TensorInfo> tensors = {{"a", {15}}, {"b", {16}}, {"c", {17}}};
    expect_paths_agree(on_both_paths(tensors, "topk:0.2", 4, "none", 2), tensors.size(), 1e-5, 1e-6);
}

TEST(DeviceCodec, FiniteFlagsPerPartOfOneBuffer) {
    at::Tensor v = at::ones({10});
    v[0] = std::numeric_limits<float>::quiet_NaN();
    v[6] = -std::numeric_limits<float>::infinity();
    at::Tensor flags = acc::compress::device::finite_parts(v, at::tensor(std::vector<std::int64_t>{0, 3, 5, 6, 9}));
    EXPECT_EQ(std::vector<bool>({false, true, true, false, true}),
              std::vector<bool>(flags.data_ptr<bool>(), flags.data_ptr<bool>() + flags.numel()));
}

TEST(DeviceExchange, DeferredChecksNameTheStepWhenTheNextStepStartsOrAtSettle) {
    // As on a GPU: a step's flags are read when the next step starts, or at settle().
    acc::test::ThreadGroup group(1, 30);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (const std::string level : {"signsgd", "topk:0.1", "powersgd:2", "fp16", "qsgd:15"}) {
        std::string at_next_start, at_settle, clean;
        bool first_step_threw = false;
        group.run([&](int, acc::comm::Collectives& comm) {
            ExchangeOptions o;
            o.device_path_on_cpu = true;
            o.check_timing = ExchangeOptions::CheckTiming::deferred;
            auto expect_error = [&](const std::function<void()>& run, std::string& message) {
                try {
                    run();
                } catch (const acc::Error& e) {
                    message = e.what();
                }
            };
            for (int end = 0; end < 2; ++end) {
                GradientExchange ex({{"w", {6, 5}}}, {parse_spec(level)}, comm, o);
                at::Tensor clean_step = at::ones({6, 5});
                ex.step({clean_step});
                at::Tensor bad = at::ones({6, 5});
                bad[2][3] = nan;
                try {
                    ex.step({bad});  // step 1: sent, its flag not read yet
                } catch (const acc::Error&) {
                    first_step_threw = true;
                }
                at::Tensor next = at::ones({6, 5});
                if (end == 0)
                    expect_error([&] { ex.step({next}); }, at_next_start);
                else
                    expect_error([&] { ex.settle(); }, at_settle);
            }
            GradientExchange ex({{"w", {6, 5}}}, {parse_spec(level)}, comm, o);
            for (int step = 0; step < 3; ++step) {
                at::Tensor g = at::ones({6, 5});
                expect_error([&] { ex.step({g}); }, clean);
            }
            expect_error([&] { ex.settle(); }, clean);
        });
        EXPECT_FALSE(first_step_threw) << level << ": the NaN was read in its own step";
        EXPECT_NE(at_next_start.find("w: gradient holds NaN or infinity at step 1"), std::string::npos)
            << level << ": " << at_next_start;
        EXPECT_NE(at_settle.find("w: gradient holds NaN or infinity at step 1"), std::string::npos)
            << level << ": " << at_settle;
        EXPECT_EQ(clean, "") << level;
    }
}

TEST(DeviceExchange, DeferredChecksGiveTheSameGradients) {
    acc::test::ThreadGroup group(2, 30);
    const std::vector<std::string> levels = {"topk:0.2", "signsgd", "powersgd:2", "qsgd:15", "fp16"};
    std::vector<std::vector<at::Tensor>> results(2);
    for (int timing = 0; timing < 2; ++timing) {
        group.run([&](int rank, acc::comm::Collectives& comm) {
            ExchangeOptions o;
            o.device_path_on_cpu = true;
            o.check_timing = timing ? ExchangeOptions::CheckTiming::deferred : ExchangeOptions::CheckTiming::immediate;
            std::vector<TensorInfo> tensors;
            std::vector<Spec> specs;
            for (size_t i = 0; i < levels.size(); ++i) {
                tensors.push_back({"t" + std::to_string(i), {8, 7}});
                specs.push_back(parse_spec(levels[i]));
            }
            GradientExchange ex(tensors, specs, comm, o);
            std::vector<at::Tensor> out;
            for (int step = 0; step < 3; ++step) {
                std::vector<at::Tensor> g;
                for (size_t i = 0; i < levels.size(); ++i)
                    g.push_back(at::randn({8, 7}, at::make_generator<at::CPUGeneratorImpl>(100 * rank + 10 * step + i)));
                ex.step(g);
                for (auto& t : g) out.push_back(t.clone());
            }
            ex.settle();
            if (rank == 0) results[static_cast<size_t>(timing)] = out;
        });
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i) EXPECT_TRUE(at::equal(results[0][i], results[1][i])) << i;
}

TEST(DeviceExchange, StateMovesBetweenThePaths) {
    // A checkpoint of the device path restores into the host path and goes on alike.
    acc::test::ThreadGroup group(1, 30);
    group.run([&](int, acc::comm::Collectives& comm) {
        std::vector<Spec> specs = {parse_spec("powersgd:2"), parse_spec("topk:0.3")};
        std::vector<TensorInfo> tensors = {{"m", {12, 9}}, {"v", {50}}};
        ExchangeOptions on_device;
        on_device.device_path_on_cpu = true;
        GradientExchange a(tensors, specs, comm, on_device), b(tensors, specs, comm);
        auto grads = [](int step) {
            return std::vector<at::Tensor>{at::randn({12, 9}, at::make_generator<at::CPUGeneratorImpl>(step)),
                                           at::randn({50}, at::make_generator<at::CPUGeneratorImpl>(100 + step))};
        };
        auto ga = grads(0);
        a.step(ga);
        b.load_state(a.state());
        for (int step = 1; step < 3; ++step) {
            auto x = grads(step), y = grads(step);
            a.step(x);
            b.step(y);
            for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(at::allclose(x[i], y[i], 1e-4, 1e-4)) << step << " " << i;
        }
    });
}

TEST(DeviceExchange, DgcKeepsItsMomentumAndSendsKEntries) {
    acc::test::ThreadGroup group(1, 30);
    group.run([&](int, acc::comm::Collectives& comm) {
        ExchangeOptions o;
        o.device_path_on_cpu = true;
        GradientExchange ex({{"v", {100}}}, {parse_spec("dgc:0.1")}, comm, o);
        for (int step = 0; step < 2; ++step) {
            at::Tensor g = at::randn({100}, at::make_generator<at::CPUGeneratorImpl>(step + 1));
            ex.step({g});
            EXPECT_EQ(g.ne(0).sum().item<std::int64_t>(), 10);
            EXPECT_EQ(ex.last_step().bytes, wire_bytes(parse_spec("dgc:0.1"), {100}));
        }
        bool found = false;
        for (const auto& [name, value] : ex.state())
            if (name == "v/dgc_momentum") {
                found = true;
                EXPECT_EQ(value.numel(), 100);
                EXPECT_EQ(value.eq(0).sum().item<std::int64_t>(), 10);  // masked where last sent
            }
        EXPECT_TRUE(found);
    });
}
