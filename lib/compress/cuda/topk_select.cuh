// The exact top k by magnitude on a CUDA device, by radix selection: three histogram
// passes find the k-th largest magnitude key (11, 11 and 10 bits of the float's bits
// without the sign), then one pass counts, per tile, the entries above it and equal to
// it, and a last pass writes the chosen entries in ascending index order. Entries equal
// to the k-th largest are taken first by position, as the host's top_k_exact takes
// them, so the payload is the host codec's byte for byte. A NaN's key lies above
// infinity's, so NaN counts as the largest magnitude, as on the host. No step reads
// anything back to the host: the selection's state stays in device memory.
//
// The kernels use only blocks, shared memory, __syncthreads, atomicAdd, __ballot_sync
// and __popc, with every __syncthreads and __ballot_sync reached by all threads of a
// block, so that the CPU tests run this same text with each block's threads
// as fibers (tests/unit/cuda_emulation.hpp).
#pragma once

#include <cstdint>
#include <cstring>

namespace acc::compress::cuda::topk {

constexpr int kThreads = 256;  // per block, every kernel
constexpr int kWarps = kThreads / 32;
constexpr int kItems = 16;  // per thread in a tile
constexpr std::int64_t kTile = std::int64_t{kThreads} * kItems;
constexpr int kBins = 2048;  // the widest digit's
constexpr int kPasses = 3;
constexpr int kHistogramBlocks = 1024;  // at most, looping over the values

// Pass p's digit: `width` bits from `shift`; the bits above it are the selection's prefix.
__device__ __forceinline__ int digit_shift(int pass) { return pass == 0 ? 21 : pass == 1 ? 10 : 0; }
__device__ __forceinline__ int digit_width(int pass) { return pass == 2 ? 10 : 11; }

__device__ __forceinline__ std::uint32_t magnitude_key(float v) {
    return __float_as_uint(v) & 0x7fffffffu;
}

/// The selection so far, in device memory: the key's bits decided (after the last pass,
/// the k-th largest key) and how many of the entries that share them are still to take.
struct Selection {
    std::uint32_t prefix;
    std::uint32_t remaining;
};

/// Scratch of a selection over n values, in bytes (4-byte aligned parts).
inline std::int64_t tiles_of(std::int64_t n) { return (n + kTile - 1) / kTile; }
inline std::int64_t scratch_bytes(std::int64_t n) {
    return 4 * (std::int64_t{kPasses} * kBins + 2 + 4 * tiles_of(n));
}

// Counts the keys of the entries that share the selection's prefix, by pass p's digit.
__global__ void histogram_kernel(const float* x, std::int64_t n, int pass, const Selection* selection,
                                 std::uint32_t* histogram) {
    __shared__ std::uint32_t bins[kBins];
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) bins[b] = 0;
    __syncthreads();
    const int shift = digit_shift(pass), above = shift + digit_width(pass);
    const std::uint32_t mask = (1u << digit_width(pass)) - 1u;
    const std::uint32_t prefix = pass == 0 ? 0u : selection->prefix;
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const std::uint32_t key = magnitude_key(x[i]);
        if (pass == 0 || (key >> above) == prefix) atomicAdd(&bins[(key >> shift) & mask], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < kBins; b += blockDim.x)
        if (bins[b] != 0) atomicAdd(&histogram[b], bins[b]);
}

// One block: the digit of the k-th largest among the entries sharing the prefix. Thread
// t sums a run of bins from the top down; one thread then walks the runs and the bins.
__global__ void select_kernel(const std::uint32_t* histogram, int pass, std::uint32_t k, Selection* selection) {
    __shared__ std::uint32_t runs[kThreads];
    const int bins = 1 << digit_width(pass), per = bins / kThreads;
    const int top = bins - static_cast<int>(threadIdx.x) * per;  // this thread's bins: [top - per, top)
    std::uint32_t sum = 0;
    for (int b = top - 1; b >= top - per; --b) sum += histogram[b];
    runs[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x != 0) return;  // no barrier follows
    std::uint32_t remaining = pass == 0 ? k : selection->remaining;
    const std::uint32_t prefix = pass == 0 ? 0u : selection->prefix;
    int run = 0;
    while (run < kThreads - 1 && runs[run] < remaining) remaining -= runs[run++];
    int b = bins - run * per - 1;
    while (b > 0 && histogram[b] < remaining) remaining -= histogram[b--];
    selection->prefix = (prefix << digit_width(pass)) | static_cast<std::uint32_t>(b);
    selection->remaining = remaining;
}

// Per tile of kTile entries: how many lie above the k-th largest key, how many equal it.
__global__ void count_kernel(const float* x, std::int64_t n, const Selection* selection, std::uint32_t* counts) {
    __shared__ std::uint32_t totals[2];
    if (threadIdx.x == 0) totals[0] = totals[1] = 0;
    __syncthreads();
    const std::uint32_t kth = selection->prefix;
    const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * kTile;
    std::uint32_t greater = 0, equal = 0;
    for (int j = 0; j < kItems; ++j) {
        const std::int64_t i = base + std::int64_t{j} * kThreads + threadIdx.x;
        if (i >= n) break;
        const std::uint32_t key = magnitude_key(x[i]);
        greater += key > kth ? 1u : 0u;
        equal += key == kth ? 1u : 0u;
    }
    if (greater != 0) atomicAdd(&totals[0], greater);
    if (equal != 0) atomicAdd(&totals[1], equal);
    __syncthreads();
    if (threadIdx.x == 0) {
        counts[2 * blockIdx.x] = totals[0];
        counts[2 * blockIdx.x + 1] = totals[1];
    }
}

// One block: each tile's counts summed over the tiles before it (both kinds).
__global__ void scan_kernel(const std::uint32_t* counts, std::int64_t tiles, std::uint32_t* before) {
    __shared__ std::uint32_t runs[2 * kThreads];
    const std::int64_t per = (tiles + kThreads - 1) / kThreads;
    const std::int64_t first = per * threadIdx.x;
    const std::int64_t last = first + per < tiles ? first + per : tiles;
    std::uint32_t greater = 0, equal = 0;
    for (std::int64_t t = first; t < last; ++t) {
        greater += counts[2 * t];
        equal += counts[2 * t + 1];
    }
    runs[2 * threadIdx.x] = greater;
    runs[2 * threadIdx.x + 1] = equal;
    __syncthreads();
    if (threadIdx.x == 0) {
        std::uint32_t g = 0, e = 0;
        for (int r = 0; r < kThreads; ++r) {
            const std::uint32_t rg = runs[2 * r], re = runs[2 * r + 1];
            runs[2 * r] = g;
            runs[2 * r + 1] = e;
            g += rg;
            e += re;
        }
    }
    __syncthreads();
    greater = runs[2 * threadIdx.x];
    equal = runs[2 * threadIdx.x + 1];
    for (std::int64_t t = first; t < last; ++t) {
        before[2 * t] = greater;
        before[2 * t + 1] = equal;
        greater += counts[2 * t];
        equal += counts[2 * t + 1];
    }
}

// Per tile, in index order (kThreads entries at a time): an entry above the k-th largest
// key is chosen, one equal to it while the quota lasts; its place among the chosen is
// the count of chosen entries before it. Chosen entries are cleared where `clear`, and
// a NaN or infinity among them makes *ok false.
__global__ void write_kernel(float* x, std::int64_t n, const Selection* selection, const std::uint32_t* before,
                             bool clear, float* values, std::int32_t* indices, bool* ok) {
    __shared__ std::uint32_t warp_counts[2 * kWarps];
    const std::uint32_t kth = selection->prefix, quota = selection->remaining;
    std::uint32_t greater_before = before[2 * blockIdx.x], equal_before = before[2 * blockIdx.x + 1];
    const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
    const std::uint32_t lanes_below = (1u << lane) - 1u;
    const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * kTile;
    bool bad = false;
    for (int j = 0; j < kItems; ++j) {
        const std::int64_t i = base + std::int64_t{j} * kThreads + threadIdx.x;
        const bool inside = i < n;
        const float v = inside ? x[i] : 0.0f;
        const std::uint32_t key = magnitude_key(v);
        const bool greater = inside && key > kth, equal = inside && key == kth;
        const unsigned greater_lanes = __ballot_sync(0xffffffffu, greater);
        const unsigned equal_lanes = __ballot_sync(0xffffffffu, equal);
        if (lane == 0) {
            warp_counts[2 * warp] = static_cast<std::uint32_t>(__popc(greater_lanes));
            warp_counts[2 * warp + 1] = static_cast<std::uint32_t>(__popc(equal_lanes));
        }
        __syncthreads();
        std::uint32_t g = greater_before + static_cast<std::uint32_t>(__popc(greater_lanes & lanes_below));
        std::uint32_t e = equal_before + static_cast<std::uint32_t>(__popc(equal_lanes & lanes_below));
        for (int w = 0; w < kWarps; ++w) {
            if (w < warp) {
                g += warp_counts[2 * w];
                e += warp_counts[2 * w + 1];
            }
            greater_before += warp_counts[2 * w];
            equal_before += warp_counts[2 * w + 1];
        }
        if (greater || (equal && e < quota)) {
            const std::uint32_t place = g + (e < quota ? e : quota);
            values[place] = v;
            indices[place] = static_cast<std::int32_t>(i);
            if (clear) x[i] = 0.0f;
            bad = bad || key >= 0x7f800000u;
        }
        __syncthreads();  // warp_counts is written again in the next round
    }
    if (bad) *ok = false;
}

/// The whole selection: `launch(blocks, threads, kernel, arguments...)` runs a kernel,
/// `zero(pointer, bytes)` clears device memory and `set_true(ok)` sets a device bool, each
/// in order on one stream. `scratch` holds scratch_bytes(n) bytes, 4-byte aligned. Needs
/// 1 <= k <= n < 2^31; writes k values and their indices, ascending.
template <class Launch, class Zero, class SetTrue>
void select_top_k(Launch&& launch, Zero&& zero, SetTrue&& set_true, float* x, std::int64_t n, std::int64_t k,
                  bool clear, float* values, std::int32_t* indices, void* scratch, bool* ok) {
    auto* histograms = static_cast<std::uint32_t*>(scratch);
    auto* selection = reinterpret_cast<Selection*>(histograms + kPasses * kBins);
    std::uint32_t* counts = histograms + kPasses * kBins + 2;
    const std::int64_t tiles = tiles_of(n);
    std::uint32_t* before = counts + 2 * tiles;
    zero(histograms, 4 * (kPasses * kBins + 2));
    set_true(ok);
    const auto histogram_blocks = static_cast<unsigned>(tiles < kHistogramBlocks ? tiles : kHistogramBlocks);
    for (int pass = 0; pass < kPasses; ++pass) {
        launch(histogram_blocks, kThreads, histogram_kernel, static_cast<const float*>(x), n, pass,
               static_cast<const Selection*>(selection), histograms + pass * kBins);
        launch(1u, kThreads, select_kernel, static_cast<const std::uint32_t*>(histograms + pass * kBins), pass,
               static_cast<std::uint32_t>(k), selection);
    }
    launch(static_cast<unsigned>(tiles), kThreads, count_kernel, static_cast<const float*>(x), n,
           static_cast<const Selection*>(selection), counts);
    launch(1u, kThreads, scan_kernel, static_cast<const std::uint32_t*>(counts), tiles, before);
    launch(static_cast<unsigned>(tiles), kThreads, write_kernel, x, n, static_cast<const Selection*>(selection),
           static_cast<const std::uint32_t*>(before), clear, values, indices, ok);
}

}  // namespace acc::compress::cuda::topk
