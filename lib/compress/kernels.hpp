// The compressors' inner loops over raw float arrays, and their random numbers.
//
// No LibTorch here: these loops are what makes encoding run near memory speed.
// On x86-64 CPUs with AVX2 and F16C the hot loops use those instructions, and QSGD
// AVX-512 where present (chosen at run time); the portable loops give bit-identical
// results everywhere else, and tests compare every level the CPU offers. Payload layouts are little-endian byte arrays that may
// start at any byte offset (payloads of several tensors are packed back to back).
#pragma once

#include "base/splitmix64.hpp"

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

namespace acc::compress::kernels {

/// The instruction sets the loops can use, in increasing order.
enum class SimdLevel { portable, avx2, avx512 };
/// What this CPU offers (avx2 means AVX2 and F16C; avx512 adds AVX-512F).
SimdLevel detected_simd();
/// Caps the level the loops use (tests run each one); returns the previous cap. The
/// environment variable ACC_SIMD (portable, avx2 or avx512) sets the cap at start-up.
SimdLevel limit_simd(SimdLevel cap);

// ---------------------------------------------------------------- random numbers

/// SplitMix64's finalizer: a bijective 64-bit mix.
std::uint64_t mix64(std::uint64_t x);

/// stream_key's `rank` of the stream every worker shares (randomk's indices).
inline constexpr std::uint64_t kSharedStream = ~0ull;
/// One key per (seed, step, parameter, rank): the stream a stochastic compressor draws from.
std::uint64_t stream_key(std::uint64_t seed, std::uint64_t step, std::uint64_t parameter, std::uint64_t rank);

/// The uniform number in [0, 1) that element `index` of stream `key` uses (24 random bits).
/// Stateless, so that vector and scalar loops draw the same numbers.
float uniform_at(std::uint64_t key, std::int64_t index);

/// A small sequential generator (SplitMix64) for sampling positions.
class Rng {
public:
    explicit Rng(std::uint64_t seed) : generator_(seed) {}
    std::uint64_t next();
    /// Uniform integer in [0, bound), bound >= 1.
    std::uint64_t below(std::uint64_t bound);

private:
    SplitMix64 generator_;
};

/// NumPy's legacy RandomState (MT19937) for what PyTorch's powerSGD_hook draws from it:
/// RandomState(seed).randint(high). Reproduced so that the same seed gives the same
/// sequence of torch seeds, hence the same initial Q matrices.
class NumpyRandomState {
public:
    static constexpr int kWords = 624;
    explicit NumpyRandomState(std::uint32_t seed = 0) { seed_with(seed); }
    void seed_with(std::uint32_t seed);
    std::uint32_t next_u32();
    /// numpy.random.RandomState.randint(high) for 1 <= high <= 2^32 (masked rejection sampling).
    std::int64_t randint(std::int64_t high);
    /// The whole state (kWords words, then the position), for checkpoints.
    std::vector<std::int64_t> state() const;
    /// Restores state(); returns false if the vector is not a valid state.
    bool set_state(const std::vector<std::int64_t>& words);

private:
    std::array<std::uint32_t, kWords> mt_{};
    int pos_ = kWords;
};

// ---------------------------------------------------------------- dense helpers

/// dst += src; returns false if a result is NaN or infinite.
bool add_into(float* dst, const float* src, std::int64_t n);
/// dst = src; returns false if a value is NaN or infinite.
bool copy_checked(float* dst, const float* src, std::int64_t n);
/// Whether every value is finite.
bool all_finite(const float* x, std::int64_t n);
/// out[i] = x[i] / divisor.
void divide(const float* x, std::int64_t n, float divisor, float* out);

// ---------------------------------------------------------------- fp16

/// IEEE half precision, round to nearest even (the F16C instruction's rounding).
std::uint16_t float_to_half(float value);
float half_to_float(std::uint16_t value);
/// out[i] = half(x[i] / divisor). Returns false (and the output is unusable) if a value
/// is not finite or its quotient overflows half precision (|x / divisor| >= 65520).
bool to_half(const float* x, std::int64_t n, float divisor, std::uint16_t* out);
void from_half(const std::uint16_t* h, std::int64_t n, float* out);

// ---------------------------------------------------------------- signs

/// Bytes of n signs packed into 32-bit words: 4 ceil(n / 32).
inline std::int64_t sign_bytes(std::int64_t n) { return 4 * ((n + 31) / 32); }
/// Packs one bit per value, 1 for x < 0 (so 0 counts as positive), bit i of word i/32,
/// words little-endian; the unused bits of the last word are 0. Returns false if a
/// value is not finite.
bool pack_signs(const float* x, std::int64_t n, std::uint8_t* out);
/// The same, and t[i] -= scale * sign(t[i]) (error feedback of a scaled sign).
bool pack_signs_update(float* t, std::int64_t n, float scale, std::uint8_t* out);
/// out[i] (= if first, else +=) weight * (bit i ? -1 : +1).
void add_signs(const std::uint8_t* packed, std::int64_t n, float weight, bool first, float* out);
/// x[i] = sign(x[i]) in {-1, 0, +1}.
void sign_in_place(float* x, std::int64_t n);
/// Sum of |x[i]| in double precision.
double abs_sum(const float* x, std::int64_t n);

// ---------------------------------------------------------------- QSGD

inline constexpr std::int64_t kQsgdBucket = 128;
/// Payload: ceil(n / 128) float32 bucket norms, then n codes (int8 if levels < 128, else int16).
std::int64_t qsgd_bytes(std::int64_t n, int levels);
/// Stochastic rounding to `levels` levels per bucket of 128 values:
/// norm = ||bucket||_2, scale = levels / norm (float32), l = |x| * scale,
/// q = min(levels, floor(l) + (u < l - floor(l))), code = sign(x) q,
/// with u = uniform_at(key, i). A zero bucket gets zero codes; where levels / norm
/// overflows (a norm below levels / FLT_MAX, subnormal values) l = |x| / norm * levels.
/// Returns false if a value is not finite.
bool qsgd_encode(const float* x, std::int64_t n, int levels, std::uint64_t key, std::uint8_t* out);
/// out[i] (= if first, else +=) weight * code[i] * (norm / levels).
void qsgd_add(const std::uint8_t* payload, std::int64_t n, int levels, float weight, bool first, float* out);
/// The same for `count` values from a bucket boundary on: `norms` and `codes` point at
/// that bucket's norm and first code inside a payload.
void qsgd_add_range(const std::uint8_t* norms, const std::uint8_t* codes, std::int64_t count, int levels, float weight,
                    bool first, float* out);

// ---------------------------------------------------------------- TernGrad

/// Payload: one float32 scale, then 2-bit codes (code + 1), four per byte, value i in
/// bits 2 (i % 4) of byte i / 4.
inline std::int64_t terngrad_bytes(std::int64_t n) { return 4 + (n + 3) / 4; }
/// Clips to 2.5 standard deviations, s = max |clipped|, code = sign(x) Bernoulli(|clipped| / s):
/// QSGD's rounding of |x| / s with one level and u = uniform_at(key, i). Returns false if a
/// value is not finite.
bool terngrad_encode(const float* x, std::int64_t n, std::uint64_t key, std::uint8_t* out);
void terngrad_add(const std::uint8_t* payload, std::int64_t n, float weight, bool first, float* out);
/// out[i] (= if first, else +=) scale * code[i] for `count` values whose codes start at a
/// whole byte (`codes`); the scale is the payload's times the weight.
void terngrad_add_codes(const std::uint8_t* codes, std::int64_t count, float scale, bool first, float* out);

// ---------------------------------------------------------------- sparsification

/// Working memory reused across calls, so that steady-state steps allocate nothing.
struct SelectScratch {
    std::vector<std::uint32_t> keys;
    std::vector<std::int32_t> candidates;
    std::vector<std::uint32_t> candidate_keys;
};

/// The indices (ascending) of the k entries of t with the largest magnitude: exact, ties
/// broken by position. NaN counts as larger than infinity. A threshold taken from a strided
/// sample keeps the candidates few; nth_element on them finds the k-th magnitude.
void top_k_exact(const float* t, std::int64_t n, std::int64_t k, std::uint64_t key, std::int32_t* indices,
                 SelectScratch& scratch);

/// Deep gradient compression's selection: a threshold from a strided sample (1% of the
/// entries, at least 2 / fraction), lowered by 0.8x while fewer than 0.8 k entries pass
/// (at most 10 times), exact top-k among the candidates if more than 1.3 k pass, and at
/// most k entries kept (the first in index order). Returns how many it chose (<= k), in
/// ascending order.
std::int64_t top_k_sampled(const float* t, std::int64_t n, std::int64_t k, std::uint64_t key,
                           std::int32_t* indices, SelectScratch& scratch);

/// k distinct indices out of n (ascending), the same for every caller with the same key.
void random_indices(std::uint64_t key, std::int64_t n, std::int64_t k, std::int32_t* indices,
                    std::vector<std::uint64_t>& bitmap);

/// out[indices[j]] += weight * values[j], with values and indices read from a payload at
/// any alignment. Returns false if an index is outside [0, n).
bool scatter_add(const std::uint8_t* values, const std::uint8_t* indices, std::int64_t k, std::int64_t n,
                 float weight, float* out);

// ---------------------------------------------------------------- PowerSGD's products
// Matrices are row-major. t is rows x cols; p is rows x r; qt is Q transposed, r x cols.

/// If g is given, t += g row by row first; then p = t Q (p[i][c] = <t_i, qt_c>).
/// Returns false if t holds a NaN or infinity.
bool project_rows(float* t, const float* g, std::int64_t rows, std::int64_t cols, const float* qt, int r, float* p);
/// qt = (t^T p)^T: qt[c][j] = sum_i p[i][c] t[i][j].
void project_columns(const float* t, std::int64_t rows, std::int64_t cols, const float* p, int r, float* qt);
/// out = p qt (= P Q^T); if memory is given, memory -= out as well.
void expand_low_rank(const float* p, const float* qt, std::int64_t rows, std::int64_t cols, int r, float* out,
                     float* memory);
/// Modified Gram-Schmidt on the columns of the n x r matrix m, in place (PyTorch's
/// _orthogonalize_gram_schmidt): each column is divided by its norm (+ epsilon when
/// epsilon > 0), then its projection is removed from the later columns. A zero column
/// stays zero instead of becoming NaN.
void gram_schmidt(float* m, std::int64_t n, int r, float epsilon);

// ---------------------------------------------------------------- unaligned access

inline float load_f32(const std::uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
}
inline void store_f32(std::uint8_t* p, float v) { std::memcpy(p, &v, 4); }
inline std::int32_t load_i32(const std::uint8_t* p) {
    std::int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
inline void store_i32(std::uint8_t* p, std::int32_t v) { std::memcpy(p, &v, 4); }

}  // namespace acc::compress::kernels
