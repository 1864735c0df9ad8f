// Runs the toolkit's CUDA kernels (lib/compress/cuda/*.cuh) on the CPU, so that the
// tests check the kernels' own text where no GPU is: the blocks of a launch one after
// another, each block's threads as fibers (ucontext) on the calling thread, resumed in
// turn up to their next __syncthreads, so that a run is deterministic. It covers what
// those kernels use and promise: shared memory (a static per kernel, which one block at
// a time uses), atomicAdd, the vector types they load and store, the explicitly rounded
// intrinsics (IEEE operations on the host, which has no FMA unless asked), and the warp
// intrinsics (__ballot_sync, __any_sync, __shfl_sync, __shfl_xor_sync) reached by every
// thread of the block the same number of times, each emulated with the block's barrier.
// Loads and stores keep their types, so that the alignment sanitizer sees each one.
// Slow: for tests only.
#pragma once

#include "compress/kernels.hpp"

#include <math.h>  // isfinite, fabsf, floorf, fminf and sqrt unqualified, as in device code
#include <ucontext.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct EmulatedDim3 {
    unsigned x = 0, y = 1, z = 1;
};

inline EmulatedDim3 threadIdx, blockIdx, blockDim, gridDim;

// Aligned as CUDA's types are: built with -fsanitize=alignment (tests/unit/CMakeLists.txt),
// the tests stop at a vector access the GPU would fault on ("misaligned address").
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(2) __half {
    std::uint16_t bits;
};

namespace acc::test::cuda_emulation {

struct Fiber {
    ucontext_t context;
    std::vector<char> stack;
    bool done = false;
};

struct Block {
    ucontext_t scheduler;
    std::vector<Fiber> threads;
    std::vector<unsigned> votes;       // one per thread, for __ballot_sync
    std::vector<std::uint64_t> lanes;  // one per thread, for the shuffles
    std::function<void()> body;   // the kernel with its arguments
    unsigned current = 0;
};
inline Block* block = nullptr;

inline void run_thread() {
    block->body();
    block->threads[block->current].done = true;
}  // returns to the scheduler (uc_link)

// Makes a thread ready to run the block's body from its start.
[[gnu::noinline]] inline void prepare(Block& b, Fiber& f) {
    f.stack.resize(64 * 1024);
    f.done = false;
    if (getcontext(&f.context) != 0) throw std::runtime_error("getcontext failed");
    f.context.uc_stack.ss_sp = f.stack.data();
    f.context.uc_stack.ss_size = f.stack.size();
    f.context.uc_link = &b.scheduler;
    makecontext(&f.context, run_thread, 0);
}

// Runs thread t of the block up to its next barrier or its end. These two apart, so that
// no local variable of launch() lives across getcontext or swapcontext (which return as
// setjmp does).
[[gnu::noinline]] inline void resume(Block& b, unsigned t) {
    b.current = t;
    threadIdx.x = t;
    swapcontext(&b.scheduler, &b.threads[t].context);
}

/// Runs kernel<<<blocks, threads>>>(arguments...) to completion.
template <class... Parameters, class... Arguments>
void launch(unsigned blocks, int threads, void (*kernel)(Parameters...), Arguments... arguments) {
    Block b;
    b.threads.resize(static_cast<size_t>(threads));
    b.votes.resize(static_cast<size_t>(threads));
    b.lanes.resize(static_cast<size_t>(threads));
    b.body = [&] { kernel(static_cast<Parameters>(arguments)...); };
    block = &b;
    blockDim.x = static_cast<unsigned>(threads);
    gridDim.x = blocks;
    for (unsigned id = 0; id < blocks; ++id) {
        blockIdx.x = id;
        for (Fiber& f : b.threads) prepare(b, f);
        // Each round takes every live thread to its next barrier (or its end).
        for (bool live = true; live;) {
            live = false;
            for (unsigned t = 0; t < b.threads.size(); ++t) {
                if (b.threads[t].done) continue;
                resume(b, t);
                live = true;
            }
        }
    }
    block = nullptr;
}

}  // namespace acc::test::cuda_emulation

inline void __syncthreads() {
    auto& b = *acc::test::cuda_emulation::block;
    swapcontext(&b.threads[b.current].context, &b.scheduler);
    threadIdx.x = b.current;
}

inline unsigned __ballot_sync(unsigned, bool predicate) {
    auto& b = *acc::test::cuda_emulation::block;
    b.votes[threadIdx.x] = predicate ? 1u : 0u;
    __syncthreads();
    unsigned mask = 0;
    const unsigned first = threadIdx.x / 32 * 32;
    for (unsigned lane = 0; lane < 32 && first + lane < blockDim.x; ++lane) mask |= b.votes[first + lane] << lane;
    __syncthreads();  // every thread has read the votes before they change
    return mask;
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }

inline unsigned __float_as_uint(float v) {
    unsigned bits;
    std::memcpy(&bits, &v, sizeof bits);
    return bits;
}

inline unsigned atomicAdd(unsigned* address, unsigned value) {
    const unsigned old = *address;
    *address = old + value;
    return old;
}

inline bool __any_sync(unsigned mask, bool predicate) { return __ballot_sync(mask, predicate) != 0; }

// `value` of lane `source` of this thread's warp.
template <class T>
T __shfl_sync(unsigned, T value, int source) {
    static_assert(sizeof(T) <= sizeof(std::uint64_t), "a shuffled value fits in 64 bits");
    auto& b = *acc::test::cuda_emulation::block;
    std::memcpy(&b.lanes[threadIdx.x], &value, sizeof(T));
    __syncthreads();
    T out;
    std::memcpy(&out, &b.lanes[threadIdx.x / 32 * 32 + static_cast<unsigned>(source) % 32], sizeof(T));
    __syncthreads();  // every thread has read the values before they change
    return out;
}

template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask) {
    return __shfl_sync(mask, value, static_cast<int>(threadIdx.x % 32) ^ lane_mask);
}

inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }

// Rounded to nearest even, as the host codec rounds (compress/kernels.hpp): the emulated
// fp16 kernel is checked for what it computes around this rounding, which the GPU tests
// check against CUDA's own.
inline __half __float2half_rn(float v) { return {acc::compress::kernels::float_to_half(v)}; }
inline std::uint16_t __half_as_ushort(__half h) { return h.bits; }
