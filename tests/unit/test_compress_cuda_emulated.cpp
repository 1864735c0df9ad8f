// The toolkit's CUDA kernels (lib/compress/cuda/*.cuh), run on the CPU
// (cuda_emulation.hpp: each block's threads as fibers) against the host codecs: the same
// payloads byte for byte, the same residuals and the same flags, ties, NaN and infinity
// included, with inputs and payloads at every alignment the exchange gives them. On a
// GPU, gpu.unit checks the same kernels compiled by nvcc.
#include "cuda_emulation.hpp"

#include "compress/cuda/elementwise.cuh"
#include "compress/cuda/powersgd.cuh"
#include "compress/cuda/topk_select.cuh"

#include "compress/codecs.hpp"
#include "compress/kernels.hpp"
#include "compress/spec.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace topk = acc::compress::cuda::topk;

// The kernel headers' launcher: the kernel run on the CPU (cuda_emulation.hpp).
const auto emulated_launch = [](unsigned blocks, int threads, auto kernel, auto... arguments) {
    acc::test::cuda_emulation::launch(blocks, threads, kernel, arguments...);
};

struct Selected {
    std::vector<std::uint8_t> payload;  // k values, then k indices (int32), as the codec's
    std::vector<float> residual;
    bool ok = false;
};

Selected select_emulated(std::vector<float> x, std::int64_t k, bool clear) {
    const auto n = static_cast<std::int64_t>(x.size());
    std::vector<std::uint32_t> scratch(static_cast<size_t>(topk::scratch_bytes(n) / 4), 0xdeadbeefu);
    std::vector<float> values(static_cast<size_t>(k), -1.0f);
    std::vector<std::int32_t> indices(static_cast<size_t>(k), -1);
    bool ok = false;
    topk::select_top_k(
        emulated_launch, [](void* p, std::int64_t bytes) { std::memset(p, 0, static_cast<size_t>(bytes)); },
        [](bool* flag) { *flag = true; }, x.data(), n, k, clear, values.data(), indices.data(), scratch.data(), &ok);
    Selected s;
    s.payload.resize(static_cast<size_t>(8 * k));
    std::memcpy(s.payload.data(), values.data(), static_cast<size_t>(4 * k));
    std::memcpy(s.payload.data() + 4 * k, indices.data(), static_cast<size_t>(4 * k));
    s.residual = std::move(x);
    s.ok = ok;
    return s;
}

// Bit patterns, so that NaN equals NaN and -0 differs from 0.
std::vector<std::uint32_t> bits(const std::vector<float>& v) {
    std::vector<std::uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), 4 * v.size());
    return b;
}

void expect_as_host(const std::vector<float>& x, const std::string& level, const std::string& what) {
    const auto n = static_cast<std::int64_t>(x.size());
    auto host = acc::compress::make_codec(acc::compress::parse_spec(level), {n}, acc::compress::CodecOptions());
    const std::int64_t k = host->buffer_bytes() / 8;
    ASSERT_GE(k, 1) << what;
    for (const bool clear : {false, true}) {
        const std::string case_ = what + ", " + level + (clear ? ", residual kept" : "");
        std::vector<float> residual = x;
        std::vector<std::uint8_t> expected(static_cast<size_t>(host->buffer_bytes()));
        const bool host_ok = host->encode(residual.data(), clear, 7, expected.data());
        const Selected got = select_emulated(x, k, clear);
        EXPECT_EQ(host_ok, got.ok) << case_;
        if (!host_ok) continue;  // the host stops at the first NaN it meets
        EXPECT_EQ(expected, got.payload) << case_;
        EXPECT_EQ(bits(residual), bits(got.residual)) << case_;
    }
}

TEST(CudaTopkEmulated, ChoosesWhatTheHostCodecChooses) {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    // One value to several tiles (a tile is 4,096 values), the last one partial.
    for (const std::int64_t n : {1, 2, 33, 4096, 4097, 20000}) {
        std::vector<float> x(static_cast<size_t>(n));
        for (auto& v : x) v = normal(rng);
        for (const std::string level : {"topk:0.001", "topk:0.01", "topk:0.3", "topk:1"})
            expect_as_host(x, level, std::to_string(n) + " normal values");
    }
}

TEST(CudaTopkEmulated, TakesTiesFirstByPosition) {
    // Many equal magnitudes of both signs around the k-th largest, zeros of both signs,
    // subnormals, and all values equal: which of the equal ones go is the host's choice.
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> small(-3, 3);
    const auto n = std::int64_t{3} * topk::kTile + 123;
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = static_cast<float>(small(rng));
    for (const std::string level : {"topk:0.01", "topk:0.2", "topk:0.5"})
        expect_as_host(x, level, "values -3..3");
    for (auto& v : x) v = small(rng) > 0 ? std::numeric_limits<float>::denorm_min() * 3 : -0.0f;
    expect_as_host(x, "topk:0.1", "subnormals and zeros");
    std::vector<float> same(5000, -2.5f);
    expect_as_host(same, "topk:0.1", "all equal");
    std::vector<float> zeros(5000, 0.0f);
    expect_as_host(zeros, "topk:0.01", "all zero");
}

TEST(CudaTopkEmulated, FlagsNaNAndInfinityWhereverTheyLie) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::int64_t n = 9000;
    for (const float bad : {nan, -nan, inf, -inf})
        for (const std::int64_t at : {std::int64_t{0}, n / 2, n - 1}) {
            std::vector<float> x(static_cast<size_t>(n));
            for (std::int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::sin(static_cast<float>(i)) * 100.0f;
            x[static_cast<size_t>(at)] = bad;
            const std::string what = std::to_string(bad) + " at " + std::to_string(at);
            const Selected got = select_emulated(x, 90, false);
            EXPECT_FALSE(got.ok) << what;
            // It is among the chosen: a NaN's magnitude counts as the largest.
            std::vector<std::int32_t> indices(90);
            std::memcpy(indices.data(), got.payload.data() + 4 * 90, 4 * 90);
            EXPECT_NE(std::find(indices.begin(), indices.end(), static_cast<std::int32_t>(at)), indices.end()) << what;
            x[static_cast<size_t>(at)] = 1.0f;
            EXPECT_TRUE(select_emulated(x, 90, false).ok) << what << " replaced by 1";
        }
}

// ------------------------------------------------------------ signSGD, fp16, QSGD

namespace elementwise = acc::compress::cuda::elementwise;

const auto emulated_set_true = [](bool* flags, std::int64_t count) {
    std::fill(flags, flags + count, true);
};

// Values of all kinds: normal, zero of both signs, a subnormal quotient for fp16, and
// runs of zeros (a QSGD bucket of zeros codes to zeros).
std::vector<float> mixed_values(std::int64_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = normal(rng);
    for (std::int64_t i = 0; i < n; i += 97) x[static_cast<size_t>(i)] = i % 2 == 0 ? 0.0f : -0.0f;
    if (n > 2) x[1] = 1e-6f;
    for (std::int64_t i = 256; i < n && i < 384; ++i) x[static_cast<size_t>(i)] = 0.0f;
    return x;
}

// The floats around an input: a value read there (past n, or before x) changes the
// payload and the flags, as what lies past a tensor on a GPU would.
const float kOutside = -std::numeric_limits<float>::quiet_NaN();

// What a kernel writes into the payload, read as the codec's bytes; bytes around the
// payload are guards that must keep their value.
struct Encoded {
    std::vector<std::uint8_t> payload;
    bool ok = false;
    bool guards_kept = true;
};

// Runs the emulated kernel for `level` on x placed `x_shift` floats after a 16-byte
// boundary, writing a payload that starts `payload_shift` bytes after one.
Encoded encode_emulated(const std::string& level, const std::vector<float>& values, int x_shift, int payload_shift,
                        std::uint64_t key, int world) {
    const auto n = static_cast<std::int64_t>(values.size());
    auto host = acc::compress::make_codec(acc::compress::parse_spec(level), {n}, acc::compress::CodecOptions());
    const auto bytes = static_cast<size_t>(host->buffer_bytes());
    std::vector<float> x_store(values.size() + 8, kOutside);
    float* x = x_store.data() + (4 - reinterpret_cast<std::uintptr_t>(x_store.data()) % 16 / 4) % 4 + x_shift;
    std::copy(values.begin(), values.end(), x);
    std::vector<std::uint64_t> out_store(bytes / 8 + 4, 0x5a5a5a5a5a5a5a5aull);  // 8-byte aligned
    std::uint8_t* out = reinterpret_cast<std::uint8_t*>(out_store.data()) + 8 + payload_shift;
    bool ok = false;
    if (level == "signsgd") {
        elementwise::sign_bits(emulated_launch, emulated_set_true, x, n, out, &ok);
    } else if (level == "fp16") {
        elementwise::half_quotients(emulated_launch, emulated_set_true, x, n, static_cast<float>(world),
                                    reinterpret_cast<std::uint16_t*>(out), &ok);
    } else {
        const int levels = std::stoi(level.substr(level.find(':') + 1));
        elementwise::qsgd_codes(emulated_launch, emulated_set_true, x, n, levels, static_cast<std::uint32_t>(key), out,
                                &ok);
    }
    Encoded e;
    e.payload.assign(out, out + bytes);
    e.ok = ok;
    const auto* raw = reinterpret_cast<const std::uint8_t*>(out_store.data());
    const auto end = static_cast<size_t>(out - raw) + bytes;
    for (size_t i = 0; i < out_store.size() * 8; ++i)
        if ((i < static_cast<size_t>(out - raw) || i >= end) && raw[i] != 0x5a) e.guards_kept = false;
    return e;
}

// The emulated kernel against the host codec, at each alignment of input and payload
// (fp16's payload lies at whole halves), or at one of each kind (vector and scalar).
void expect_encoded_as_host(const std::string& level, const std::vector<float>& x, const std::string& what,
                            bool every_alignment = true) {
    const auto n = static_cast<std::int64_t>(x.size());
    const std::uint64_t key = 0x1234567890abcdefull;
    const int world = 3;
    acc::compress::CodecOptions o;
    o.world = world;
    auto host = acc::compress::make_codec(acc::compress::parse_spec(level), {n}, o);
    std::vector<std::uint8_t> expected(static_cast<size_t>(host->buffer_bytes()));
    std::vector<float> values = x;
    const bool host_ok = host->encode(values.data(), false, key, expected.data());
    std::vector<int> payload_shifts = level == "fp16" ? std::vector<int>{0, 2, 6} : std::vector<int>{0, 1, 4, 6};
    std::vector<int> x_shifts = {0, 1, 2};
    if (!every_alignment) {
        payload_shifts = {0, level == "fp16" ? 2 : 1};
        x_shifts = {0, 1};
    }
    for (const int x_shift : x_shifts)
        for (const int payload_shift : payload_shifts) {
            const std::string case_ = level + ", " + what + ", input " + std::to_string(4 * x_shift) +
                                      " bytes past 16, payload " + std::to_string(payload_shift) + " past 8";
            const Encoded got = encode_emulated(level, x, x_shift, payload_shift, key, world);
            EXPECT_EQ(host_ok, got.ok) << case_;
            EXPECT_TRUE(got.guards_kept) << case_ << ": a byte outside the payload was written";
            if (host_ok) {
                EXPECT_EQ(expected, got.payload) << case_;
            }
        }
}

TEST(CudaElementwiseEmulated, PayloadsEqualTheHostCodecs) {
    // Within a word, a warp's chunk, a block, and several blocks with a partial last one.
    for (const std::int64_t n : {1, 3, 31, 33, 127, 129, 4099, 9001})
        for (const std::string level : {"signsgd", "fp16", "qsgd:2", "qsgd:127", "qsgd:32767"})
            expect_encoded_as_host(level, mixed_values(n, static_cast<unsigned>(n)), std::to_string(n) + " values");
}

TEST(CudaElementwiseEmulated, SubnormalBucketsEqualTheHostCodecs) {
    // QSGD buckets whose levels / norm overflows float32 (one subnormal among zeros, only
    // the smallest subnormals) beside normal ones: the kernel divides first, as the host.
    const float tiny = std::numeric_limits<float>::denorm_min();
    std::vector<float> x = mixed_values(4099, 7);
    std::fill(x.begin(), x.begin() + 256, 0.0f);
    x[5] = 2e-39f;
    for (int i = 128; i < 256; i += 3) x[static_cast<size_t>(i)] = i % 2 ? -tiny : tiny;
    for (const std::string level : {"qsgd:1", "qsgd:127", "qsgd:32767"})
        expect_encoded_as_host(level, x, "subnormal buckets", false);
}

TEST(CudaElementwiseEmulated, RefuseWhatTheHostRefuses) {
    // NaN and infinity (either sign) at a block's first value, inside, and at the end; a
    // quotient beyond fp16's range; a QSGD bucket whose norm overflows float32.
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::int64_t n = 5000;
    for (const float bad : {nan, -nan, inf, -inf, 2e5f, 3e38f})
        for (const std::int64_t at : {std::int64_t{0}, std::int64_t{4096}, n / 3, n - 1}) {
            std::vector<float> x = mixed_values(n, 3);
            x[static_cast<size_t>(at)] = bad;
            if (bad == 3e38f)  // a whole bucket of them: its norm overflows float32
                for (std::int64_t i = at / 128 * 128; i < n && i < at / 128 * 128 + 128; ++i)
                    x[static_cast<size_t>(i)] = bad;
            const std::string what = std::to_string(bad) + " at " + std::to_string(at);
            for (const std::string level : {"signsgd", "fp16", "qsgd:127", "qsgd:32767"})
                expect_encoded_as_host(level, x, what, false);
        }
}

// The emulated finite check of a buffer's parts (no ends: one part).
std::vector<bool> finite_parts_emulated(const std::vector<float>& values, int x_shift,
                                        const std::vector<std::int64_t>& ends) {
    std::vector<float> x_store(values.size() + 8, kOutside);
    float* x = x_store.data() + (4 - reinterpret_cast<std::uintptr_t>(x_store.data()) % 16 / 4) % 4 + x_shift;
    std::copy(values.begin(), values.end(), x);
    const auto parts = static_cast<std::int64_t>(ends.empty() ? 1 : ends.size());
    std::unique_ptr<bool[]> flags(new bool[static_cast<size_t>(parts)]);
    std::fill(flags.get(), flags.get() + parts, false);
    elementwise::finite_parts(emulated_launch, emulated_set_true, x, static_cast<std::int64_t>(values.size()),
                              ends.empty() ? nullptr : ends.data(), parts, flags.get());
    return std::vector<bool>(flags.get(), flags.get() + parts);
}

TEST(CudaElementwiseEmulated, FiniteFlagsPerPartOfOneBuffer) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    std::vector<float> small(10, 1.0f);
    small[0] = nan;
    small[6] = -inf;
    for (const int shift : {0, 1, 3}) {
        EXPECT_EQ(std::vector<bool>({false, true, true, false, true}),
                  finite_parts_emulated(small, shift, {0, 3, 5, 6, 9}));
        EXPECT_EQ(std::vector<bool>({false}), finite_parts_emulated(small, shift, {}));
    }
    // Parts of random lengths over several blocks, some of them holding NaN or infinity.
    std::mt19937 rng(17);
    std::uniform_int_distribution<std::int64_t> length(1, 700);
    std::vector<std::int64_t> ends;
    for (std::int64_t end = -1; end < 30000;) ends.push_back(end += length(rng));
    const std::int64_t n = ends.back() + 1;
    std::vector<float> x = mixed_values(n, 29);
    std::vector<bool> expected(ends.size(), true);
    std::uniform_int_distribution<std::int64_t> place(0, n - 1);
    for (int k = 0; k < 12; ++k) {
        const std::int64_t at = k == 0 ? 0 : k == 1 ? n - 1 : place(rng);
        x[static_cast<size_t>(at)] = k % 3 == 0 ? nan : k % 3 == 1 ? inf : -inf;
        expected[static_cast<size_t>(std::lower_bound(ends.begin(), ends.end(), at) - ends.begin())] = false;
    }
    for (const int shift : {0, 2}) {
        EXPECT_EQ(expected, finite_parts_emulated(x, shift, ends)) << "input " << 4 * shift << " bytes past 16";
        EXPECT_EQ(std::vector<bool>({false}), finite_parts_emulated(x, shift, {}));
    }
    // Values past the last part belong to none, as in the ATen operations.
    std::vector<float> longer = small;
    longer.push_back(nan);
    EXPECT_EQ(std::vector<bool>({false, true, true, false, true}), finite_parts_emulated(longer, 0, {0, 3, 5, 6, 9}));
    std::vector<float> clean = mixed_values(n, 31);
    EXPECT_EQ(std::vector<bool>(ends.size(), true), finite_parts_emulated(clean, 1, ends));
    EXPECT_EQ(std::vector<bool>({true}), finite_parts_emulated(clean, 0, {}));
}

// ------------------------------------------------------------ PowerSGD's rounds

namespace powersgd = acc::compress::cuda::powersgd;
namespace kernels = acc::compress::kernels;

// Matrices of every kind the kernels meet: ranks 1 to 4, one row or one column, rows
// and columns across a warp's and a block's width; P and Q with gaps between matrices
// (the exchange's groups lie apart), M back to back.
struct LowRankStep {
    powersgd::Layout layout;
    std::vector<float> m, p, q;
};

LowRankStep low_rank_step(unsigned seed) {
    const std::vector<std::array<std::int64_t, 3>> shapes = {
        {64, 27, 2}, {1, 40, 1}, {70, 1, 1}, {33, 130, 4}, {5, 300, 3}, {128, 64, 2}, {40, 33, 4}};
    LowRankStep s;
    std::int64_t p = 3, q = 5;
    for (const auto& [rows, cols, rank] : shapes) {
        s.layout.append(p, q, rows, cols, rank);
        p += rows * rank + 7;
        q += cols * rank + 2;
    }
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    s.m.resize(static_cast<size_t>(s.layout.values));
    for (auto& v : s.m) v = normal(rng);
    s.p.assign(static_cast<size_t>(p), 0.0f);
    s.q.assign(static_cast<size_t>(q), 0.0f);
    for (auto& v : s.q) v = normal(rng);
    return s;
}

void expect_near_each(const std::vector<float>& expected, const float* got, double tolerance, const std::string& what) {
    double worst = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
        const double e = expected[i], g = got[i];
        ASSERT_TRUE(std::isfinite(g)) << what << ", element " << i;
        worst = std::max(worst, std::abs(e - g) / (1.0 + std::abs(e)));
    }
    EXPECT_LE(worst, tolerance) << what;
}

// |got - exact| within `tolerance` of the sum of the magnitudes of the exact sum's terms
// (a float sum of n terms strays by about sqrt(n) units of rounding of that).
void expect_sum_within(double exact, double magnitudes, float got, const std::string& what) {
    ASSERT_TRUE(std::isfinite(got)) << what;
    EXPECT_LE(std::abs(got - exact), 1e-6 * magnitudes + 1e-30) << what << ": " << got << " against " << exact;
}

// Each of `outputs` values got(i) against the exact sum of term(i, 0..length - 1).
template <class Term, class Got>
void expect_sums(std::int64_t outputs, std::int64_t length, Term term, Got got, const std::string& what) {
    for (std::int64_t i = 0; i < outputs; ++i) {
        double exact = 0, magnitudes = 0;
        for (std::int64_t j = 0; j < length; ++j) {
            const double t = term(i, j);
            exact += t;
            magnitudes += std::abs(t);
        }
        expect_sum_within(exact, magnitudes, got(i), what + " " + std::to_string(i));
    }
}

TEST(CudaPowerSgdEmulated, ProductsEqualTheExactSumsWithinRounding) {
    LowRankStep s = low_rank_step(3);
    const LowRankStep start = low_rank_step(3);
    const auto* table = s.layout.matrices.data();
    powersgd::project_rows(emulated_launch, s.layout, table, s.m.data(), s.q.data(), s.p.data());
    powersgd::project_columns(emulated_launch, s.layout, table, s.m.data(), s.p.data(), s.q.data());
    for (const powersgd::Matrix& a : s.layout.matrices) {
        const std::string what =
            std::to_string(a.rows) + "x" + std::to_string(a.cols) + " rank " + std::to_string(a.rank);
        const auto m = [&](std::int64_t row, std::int64_t c) { return double(s.m[size_t(a.m + row * a.cols + c)]); };
        for (std::int64_t k = 0; k < a.rank; ++k) {
            // P = M Q from the Q the step started with; Q = M^T P from the kernels' own P.
            const std::string column = "[" + std::to_string(k) + "]";
            const auto q_term = [&](std::int64_t row, std::int64_t c) {
                return m(row, c) * start.q[size_t(a.q + c * a.rank + k)];
            };
            const auto p_term = [&](std::int64_t c, std::int64_t row) {
                return m(row, c) * s.p[size_t(a.p + row * a.rank + k)];
            };
            expect_sums(a.rows, a.cols, q_term, [&](std::int64_t row) { return s.p[size_t(a.p + row * a.rank + k)]; },
                        what + ": P" + column + ", row");
            expect_sums(a.cols, a.rows, p_term, [&](std::int64_t c) { return s.q[size_t(a.q + c * a.rank + k)]; },
                        what + ": Q" + column + ", column");
        }
    }
    // Nothing outside the matrices was written: the gaps keep their zeros (P) and draws (Q).
    std::vector<bool> in_p(s.p.size()), in_q(s.q.size());
    for (const powersgd::Matrix& a : s.layout.matrices) {
        std::fill(in_p.begin() + a.p, in_p.begin() + a.p + a.rows * a.rank, true);
        std::fill(in_q.begin() + a.q, in_q.begin() + a.q + a.cols * a.rank, true);
    }
    for (size_t i = 0; i < s.p.size(); ++i) {
        if (!in_p[i]) {
            EXPECT_EQ(s.p[i], 0.0f) << "P's gap at " << i;
        }
    }
    for (size_t i = 0; i < s.q.size(); ++i) {
        if (!in_q[i]) {
            EXPECT_EQ(s.q[i], start.q[i]) << "Q's gap at " << i;
        }
    }
}

TEST(CudaPowerSgdEmulated, GramSchmidtAsTheHostWithinRounding) {
    for (const float epsilon : {0.0f, 0.5f})  // 0.5: large enough to change every column
        for (const bool columns : {false, true}) {
            LowRankStep s = low_rank_step(7);
            std::vector<float>& buffer = columns ? s.q : s.p;
            std::mt19937 rng(11);
            std::normal_distribution<float> normal(0.0f, 1.0f);
            for (auto& v : buffer) v = normal(rng);
            // A matrix whose first column is zero: it stays zero, and the next is normalized alone.
            const powersgd::Matrix& z = s.layout.matrices[3];
            const std::int64_t z_at = columns ? z.q : z.p, z_n = columns ? z.cols : z.rows;
            for (std::int64_t row = 0; row < z_n; ++row) buffer[static_cast<size_t>(z_at + row * z.rank)] = 0.0f;
            const std::vector<float> before = buffer;
            powersgd::orthogonalize(emulated_launch, s.layout, s.layout.matrices.data(), buffer.data(), columns,
                                    epsilon);
            for (const powersgd::Matrix& a : s.layout.matrices) {
                const std::int64_t at = columns ? a.q : a.p, n = columns ? a.cols : a.rows;
                std::vector<float> host(before.begin() + at, before.begin() + at + n * a.rank);
                kernels::gram_schmidt(host.data(), n, static_cast<int>(a.rank), epsilon);
                expect_near_each(host, buffer.data() + at, 1e-5,
                                 std::string(columns ? "Q " : "P ") + std::to_string(n) + "x" + std::to_string(a.rank) +
                                     ", epsilon " + std::to_string(epsilon));
            }
            for (std::int64_t row = 0; row < z_n; ++row)
                EXPECT_EQ(buffer[static_cast<size_t>(z_at + row * z.rank)], 0.0f) << "row " << row;
        }
}

// A NaN in the first column stays where it lies, as on the host and the ATen path: the
// column's other values become zero (divided by infinity) and every later column NaN, so
// that a NaN gradient is not orthogonalized away.
TEST(CudaPowerSgdEmulated, GramSchmidtKeepsANaNAsTheHost) {
    for (const bool columns : {false, true}) {
        LowRankStep s = low_rank_step(9);
        std::vector<float>& buffer = columns ? s.q : s.p;
        const powersgd::Matrix& a = s.layout.matrices[3];  // rank 4
        const std::int64_t at = columns ? a.q : a.p, n = columns ? a.cols : a.rows;
        const int rank = static_cast<int>(a.rank);
        buffer[static_cast<size_t>(at + 5 * rank)] = std::numeric_limits<float>::quiet_NaN();  // row 5, column 0
        const std::vector<float> before = buffer;
        powersgd::orthogonalize(emulated_launch, s.layout, s.layout.matrices.data(), buffer.data(), columns, 0.0f);
        std::vector<float> host(before.begin() + at, before.begin() + at + n * rank);
        kernels::gram_schmidt(host.data(), n, rank, 0.0f);
        const std::string what = columns ? "Q" : "P";
        for (std::int64_t row = 0; row < n; ++row)
            for (int k = 0; k < rank; ++k) {
                const float got = buffer[static_cast<size_t>(at + row * rank + k)];
                const float want = host[static_cast<size_t>(row * rank + k)];
                const std::string where = what + " row " + std::to_string(row) + " column " + std::to_string(k);
                EXPECT_EQ(std::isnan(got), std::isnan(want)) << where;
                if (k > 0 || row == 5)
                    EXPECT_TRUE(std::isnan(got)) << where;
                else
                    EXPECT_EQ(got, 0.0f) << where;
            }
        // The other matrices are untouched by it.
        const powersgd::Matrix& b = s.layout.matrices[0];
        const std::int64_t b_at = columns ? b.q : b.p, b_n = columns ? b.cols : b.rows;
        for (std::int64_t i = 0; i < b_n * b.rank; ++i)
            EXPECT_TRUE(std::isfinite(buffer[static_cast<size_t>(b_at + i)])) << what << " of another matrix, " << i;
    }
}

TEST(CudaPowerSgdEmulated, ExpansionIsTheHostsSumInItsOrder) {
    LowRankStep s = low_rank_step(5);
    std::mt19937 rng(13);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& v : s.p) v = normal(rng);
    std::vector<float> memory = s.m, approx(s.m.size(), -1.0f);
    powersgd::expand(emulated_launch, s.layout, s.layout.matrices.data(), s.p.data(), s.q.data(), memory.data(),
                     approx.data());
    std::vector<float> approx_only(s.m.size(), -1.0f);
    powersgd::expand(emulated_launch, s.layout, s.layout.matrices.data(), s.p.data(), s.q.data(), nullptr,
                     approx_only.data());
    for (const powersgd::Matrix& a : s.layout.matrices)
        for (std::int64_t row = 0; row < a.rows; ++row)
            for (std::int64_t c = 0; c < a.cols; ++c) {
                const float* pr = s.p.data() + a.p + row * a.rank;
                const float* qc = s.q.data() + a.q + c * a.rank;
                float o = pr[0] * qc[0];
                for (std::int64_t k = 1; k < a.rank; ++k) o += pr[k] * qc[k];
                const auto e = static_cast<size_t>(a.m + row * a.cols + c);
                ASSERT_EQ(o, approx[e]) << "matrix at " << a.m << ", row " << row << ", column " << c;
                ASSERT_EQ(s.m[e] - o, memory[e]) << "matrix at " << a.m << ", row " << row << ", column " << c;
                ASSERT_EQ(o, approx_only[e]);
            }
}


// ------------------------------------------------------------------------ the emulation itself

// Kernels that show how the emulation schedules: every thread counts itself in, then
// after one shuffle (a barrier of its warp only) lane 0 of each warp notes how many had
// counted in by then.
__global__ void note_arrivals(unsigned* arrived, unsigned* noted) {
    ++*arrived;
    __shfl_sync(acc::compress::cuda::kAllLanes, 0u, 0);
    if (threadIdx.x % 32 == 0) noted[threadIdx.x / 32] = *arrived;
}

// Does nothing: for launches refused before they run.
__global__ void note_arrivals_of_none(unsigned*) {}

// Lanes 16 to 31 of each warp have exited when the others shuffle.
__global__ void shuffle_after_lanes_exit(unsigned* out) {
    if (threadIdx.x % 32 >= 16) return;
    out[threadIdx.x] = __shfl_sync(acc::compress::cuda::kAllLanes, static_cast<unsigned>(threadIdx.x), 0);
}

// Lanes 0 to 15 of each warp wait at a shuffle of the whole warp, lanes 16 to 31 at
// __syncthreads.
__global__ void barriers_of_two_kinds(unsigned* out) {
    if (threadIdx.x % 32 < 16)
        out[threadIdx.x] = __shfl_sync(acc::compress::cuda::kAllLanes, static_cast<unsigned>(threadIdx.x), 0);
    else
        __syncthreads();
}

// Lanes 0 to 15 of each warp shuffle, lanes 16 to 31 vote: two intrinsics, undefined
// on a GPU even though every lane arrives at one.
__global__ void intrinsics_of_two_kinds(unsigned* out) {
    if (threadIdx.x % 32 < 16)
        out[threadIdx.x] = __shfl_sync(acc::compress::cuda::kAllLanes, static_cast<unsigned>(threadIdx.x), 0);
    else
        out[threadIdx.x] = __ballot_sync(acc::compress::cuda::kAllLanes, true);
}

// The same shuffle at two calls.
__global__ void shuffles_at_two_calls(unsigned* out) {
    if (threadIdx.x % 2 == 0)
        out[threadIdx.x] = __shfl_sync(acc::compress::cuda::kAllLanes, 1u, 0);
    else
        out[threadIdx.x] = __shfl_sync(acc::compress::cuda::kAllLanes, 2u, 0);
}

// The threads of the second half exit before the first half's __syncthreads.
__global__ void barrier_after_threads_exit(unsigned* out) {
    if (threadIdx.x >= blockDim.x / 2) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

// A shuffle with a partial mask, which the kernels do not use.
__global__ void shuffle_of_half_a_warp(unsigned* out) {
    out[threadIdx.x] = __shfl_sync(0x0000ffffu, 1u, 0);
}

// Each thread notes its index and its block's in y and z: 0 on a GPU for 1-D launches.
__global__ void note_other_dimensions(unsigned* out) {
    out[threadIdx.x] = threadIdx.y + threadIdx.z + blockIdx.y + blockIdx.z + (blockDim.y * blockDim.z - 1) +
                       (gridDim.y * gridDim.z - 1);
}

// A warp goes on past its own intrinsic once its lanes arrive, not when the block's do:
// in forward (and reverse) order the first (last) warp goes on before any other thread
// has started, so a missing __syncthreads shows. (Shuffled, every thread may have
// started by the time a released lane runs again.)
TEST(CudaEmulation, AWarpGoesOnOnceItsOwnLanesArrive) {
    namespace e = acc::test::cuda_emulation;
    unsigned arrived = 0;
    std::vector<unsigned> noted(8, 0);
    e::launch(1, 256, note_arrivals, &arrived, noted.data());
    EXPECT_EQ(arrived, 256u);
    EXPECT_GE(*std::min_element(noted.begin(), noted.end()), 32u) << "a warp went on before its lanes arrived";
    if (e::order() == e::Order::forward) {
        EXPECT_EQ(noted.front(), 32u) << "warp 0 waited for other warps";
    } else if (e::order() == e::Order::reverse) {
        EXPECT_EQ(noted.back(), 32u) << "warp 7 waited for other warps";
    }
}

// What would hang a GPU ends the emulated launch with an error.
TEST(CudaEmulation, BarriersThatWouldHangAGpuAreErrors) {
    std::vector<unsigned> out(256, 0);
    EXPECT_THROW(acc::test::cuda_emulation::launch(1, 64, shuffle_after_lanes_exit, out.data()), std::runtime_error);
    EXPECT_THROW(acc::test::cuda_emulation::launch(1, 64, barriers_of_two_kinds, out.data()), std::runtime_error);
}

// What CUDA leaves undefined or refuses is an error too, so that no kernel passes here
// that a GPU would run otherwise.
TEST(CudaEmulation, WhatCudaDoesNotDefineIsAnError) {
    namespace e = acc::test::cuda_emulation;
    std::vector<unsigned> out(2048, 0);
    auto message = [&](void (*kernel)(unsigned*), unsigned blocks, int threads) {
        try {
            e::launch(blocks, threads, kernel, out.data());
        } catch (const std::runtime_error& error) {
            return std::string(error.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(message(intrinsics_of_two_kinds, 1, 64).find("lanes of one warp at different warp intrinsics: "),
              std::string::npos);
    EXPECT_NE(message(shuffles_at_two_calls, 1, 32).find("at different warp intrinsics"), std::string::npos);
    EXPECT_NE(message(barrier_after_threads_exit, 1, 64).find("__syncthreads waits for threads of the block that "
                                                              "have exited"),
              std::string::npos);
    EXPECT_EQ(message(shuffle_of_half_a_warp, 1, 32), "__shfl_sync with a partial mask is not emulated");
    EXPECT_EQ(message(note_arrivals_of_none, 0, 32), "invalid launch: 0 blocks of 32 threads (CUDA allows 1 to "
                                                      "2^31 - 1 of 1 to 1024)");
    EXPECT_NE(message(note_arrivals_of_none, 1, 2048).find("invalid launch: 1 blocks of 2048 threads"),
              std::string::npos);
    EXPECT_EQ(message(note_other_dimensions, 3, 64), "no error");
    EXPECT_EQ(std::count(out.begin(), out.begin() + 64, 0u), 64) << "y and z indices and sizes as on a GPU";
}

}  // namespace
