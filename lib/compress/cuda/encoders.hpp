// Encoders in one pass each on a CUDA device, where ATen takes many (ACC_CUDA_KERNELS),
// and the finite check of a buffer's parts. They take raw device pointers and a
// cudaStream_t passed as void*, so that no C++ file of the toolkit needs CUDA's headers.
// Payloads are byte-identical to the host codecs' (compress/kernels.hpp) wherever those
// accept the input (a refused fp16 payload holds CUDA's NaN, 0x7fff); they may start
// at any byte (fp16's at any half), as in the channels' buffers.
#pragma once

#include "compress/cuda/powersgd_layout.hpp"

#include <cstdint>

namespace acc::compress::cuda {

/// Whether these kernels run on CUDA device `device`: the build holds code for its
/// architecture, or PTX the driver can compile for it (ACC_CUDA_ARCHITECTURES). `major`
/// and `minor` receive its compute capability. The current device stays as it was.
bool kernels_run_on(int device, int& major, int& minor);

/// The architectures the kernels were built for, as configured ("75-real,80-real,...").
const char* built_architectures();

/// signSGD: bit i of `packed` (byte i / 8, bit i % 8) is 1 where x[i] < 0; the bits up
/// to the next multiple of 32 are zero ((n + 31) / 32 * 4 bytes). `*ok` (one byte on
/// the device, a bool) becomes whether every x[i] is finite.
void sign_bits(const float* x, std::int64_t n, std::uint8_t* packed, bool* ok, void* stream);

/// fp16: out[i] is the float32 quotient x[i] / divisor rounded to nearest even in half
/// precision (IEEE binary16 bits, the host's float_to_half). `*ok` becomes whether every
/// quotient is finite and below 65520 in magnitude (from there it rounds to infinity).
void half_quotients(const float* x, std::int64_t n, float divisor, std::uint16_t* out, bool* ok, void* stream);

/// QSGD with `levels` levels (1..32767) over buckets of 128 values: each bucket's norm
/// (float32, from the sum of squares in double over eight lanes combined as the host
/// combines them), then a code per value (int8 below 128 levels, else int16), rounded
/// stochastically with uniform_from(key32, index). `*ok` becomes whether every bucket's
/// sum of squares is finite.
void qsgd_codes(const float* x, std::int64_t n, int levels, std::uint32_t key32, std::uint8_t* payload, bool* ok,
                void* stream);

/// Whether each part of x is finite: flags[p] (a device bool) becomes false where part p,
/// values ends[p - 1] + 1 .. ends[p] (int64 on the device, ascending), holds a NaN or an
/// infinity; values past the last part count in none. `ends` null: one part, the whole
/// of x. One read of x.
void finite_parts(const float* x, std::int64_t n, const std::int64_t* ends, std::int64_t parts, bool* flags,
                  void* stream);

/// Top-k by magnitude (topk's and DGC's selection, compress/cuda/topk_select.cuh): the k
/// entries of x of largest magnitude (NaN the largest; among equal magnitudes the first
/// by position, as the host's top_k_exact), their values into `values` and their indices
/// into `indices`, in ascending index order; x cleared there where `clear`. `*ok` becomes
/// whether every chosen value is finite (a NaN or an infinity anywhere in x is chosen).
/// `scratch`: top_k_scratch_bytes(n) bytes of device memory, 4-byte aligned. Needs
/// 1 <= k <= n < 2^31.
std::int64_t top_k_scratch_bytes(std::int64_t n);
void top_k(float* x, std::int64_t n, std::int64_t k, bool clear, float* values, std::int32_t* indices, void* scratch,
           bool* ok, void* stream);

/// PowerSGD's rounds over every matrix of `layout` (compress/cuda/powersgd.cuh), whose
/// table `matrices` lies in device memory: P = M Q, Gram-Schmidt on P's matrices
/// (columns false) or Q's (columns true) in place, Q = M^T P, and approx = P Q^T with
/// memory -= approx where memory is not null. Ranks up to powersgd::kMaxRank.
void powersgd_project_rows(const powersgd::Layout& layout, const powersgd::Matrix* matrices, const float* m,
                           const float* q, float* p, void* stream);
void powersgd_orthogonalize(const powersgd::Layout& layout, const powersgd::Matrix* matrices, float* buffer,
                            bool columns, float epsilon, void* stream);
void powersgd_project_columns(const powersgd::Layout& layout, const powersgd::Matrix* matrices, const float* m,
                              const float* p, float* q, void* stream);
void powersgd_expand(const powersgd::Layout& layout, const powersgd::Matrix* matrices, const float* p, const float* q,
                     float* memory, float* approx, void* stream);

}  // namespace acc::compress::cuda
