// Runs the toolkit's CUDA kernels (lib/compress/cuda/*.cuh) on the CPU, so that the
// tests check the kernels' own text where no GPU is: the blocks of a launch one after
// another, each block's threads as fibers (ucontext) on the calling thread, resumed one
// at a time up to their next barrier, in an order the environment chooses (Order) and
// the same in every run. It covers what
// those kernels use and promise: shared memory (a static per kernel, which one block at
// a time uses), atomicAdd, the vector types they load and store, the explicitly rounded
// intrinsics (IEEE operations on the host, which has no FMA unless asked), and the warp
// intrinsics (__ballot_sync, __any_sync, __shfl_sync, __shfl_xor_sync), each a barrier
// of the 32 lanes of one warp only, as on a GPU, reached by every lane of the warp at
// the same call, with the full mask (the only one the kernels use). Launches outside
// CUDA's limits, a __syncthreads that a thread of the block has exited before, and
// lanes of a warp at different intrinsics are errors, as they are (or are undefined)
// on a GPU. Loads and stores keep their types, so that the alignment sanitizer sees
// each one. What it cannot show: a thread runs undisturbed between barriers, so a
// plain read-modify-write where atomicAdd belongs loses no update here, and shared
// memory (a static) is not made garbage between blocks. Slow: for tests only.
#pragma once

#include "compress/kernels.hpp"

#include <math.h>  // isfinite, fabsf, floorf, fminf and sqrt unqualified, as in device code
#include <ucontext.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

struct EmulatedDim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct EmulatedIndex {
    unsigned x = 0, y = 0, z = 0;
};

inline EmulatedIndex threadIdx, blockIdx;
inline EmulatedDim3 blockDim, gridDim;

// Aligned as CUDA's types are: built with -fsanitize=alignment (tests/unit/CMakeLists.txt),
// the tests stop at a vector access the GPU would fault on ("misaligned address").
struct alignas(16) float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(2) __half {
    std::uint16_t bits;
};

namespace acc::test::cuda_emulation {

// Where a thread waits: for its block (__syncthreads) or only for its warp (the warp
// intrinsics, which synchronise the 32 lanes of one warp and nothing else).
enum class Wait { none, block, warp };

struct Fiber {
    ucontext_t context;
    std::vector<char> stack;
    bool done = false;
    Wait waiting = Wait::none;
    const char* site_file = nullptr;  // where it waits at a warp intrinsic, and which one
    int site_line = 0;
    const char* site_call = nullptr;
};

struct Block {
    ucontext_t scheduler;
    std::vector<Fiber> threads;
    std::vector<unsigned> votes;       // one per thread, for __ballot_sync
    std::vector<std::uint64_t> lanes;  // one per thread, for the shuffles
    std::function<void()> body;   // the kernel with its arguments
    unsigned current = 0;
    std::string fault;  // what a thread did that CUDA does not define; thrown by the scheduler
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
    f.waiting = Wait::none;
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

/// The order in which the blocks of a launch run, and in which the threads of a block
/// free to run are resumed, one at a time, each up to its next barrier. CUDA promises
/// none (lanes of one warp included), so a kernel that works in one order only has a
/// race; the tests run in three, chosen by ACC_EMULATED_ORDER: forward (the default:
/// blocks in order, always the lowest thread free to run), reverse (the highest), or
/// shuffled (blocks permuted, a pseudo-random thread each time, from a fixed seed). A
/// warp goes on as soon as all its lanes reach its intrinsic, so one warp may run ahead
/// of the others up to the block's next __syncthreads, as on a GPU.
enum class Order { forward, reverse, shuffled };

inline Order order() {
    static const Order chosen = [] {
        const char* v = std::getenv("ACC_EMULATED_ORDER");
        const std::string text = v == nullptr ? "forward" : v;
        if (text == "forward") return Order::forward;
        if (text == "reverse") return Order::reverse;
        if (text == "shuffled") return Order::shuffled;
        throw std::runtime_error("ACC_EMULATED_ORDER: '" + text + "' is not forward, reverse or shuffled");
    }();
    return chosen;
}

// The threads free to run, one bit each.
class Ready {
public:
    explicit Ready(unsigned n) : words_((n + 63) / 64, 0), n_(n) {}
    void set(unsigned t) { words_[t / 64] |= std::uint64_t{1} << (t % 64); }
    void clear(unsigned t) { words_[t / 64] &= ~(std::uint64_t{1} << (t % 64)); }
    bool any() const {
        return std::any_of(words_.begin(), words_.end(), [](std::uint64_t w) { return w != 0; });
    }
    // The next thread to run (any() must hold).
    unsigned pick(std::mt19937& bits) const {
        const auto count = static_cast<unsigned>(words_.size());
        if (order() == Order::reverse) {
            for (unsigned w = count; w-- > 0;)
                if (words_[w] != 0) return 64 * w + 63 - static_cast<unsigned>(__builtin_clzll(words_[w]));
        }
        // forward from thread 0; shuffled from a random thread on, round to the start
        const unsigned from = order() == Order::shuffled ? static_cast<unsigned>(bits() % n_) : 0;
        for (unsigned k = 0; k <= count; ++k) {
            const unsigned w = (from / 64 + k) % count;
            std::uint64_t word = words_[w];
            if (k == 0) word &= ~std::uint64_t{0} << (from % 64);  // at or after `from` only
            if (word != 0) return 64 * w + static_cast<unsigned>(__builtin_ctzll(word));
        }
        throw std::logic_error("no thread is free to run");
    }

private:
    std::vector<std::uint64_t> words_;
    unsigned n_;
};

// Thread t has stopped (at a barrier or its end): its warp goes on once every lane waits
// at the warp's intrinsic. One that waits for a lane that has exited would hang a GPU.
inline void settle_warp(Block& b, Ready& ready, unsigned t) {
    const auto n = static_cast<unsigned>(b.threads.size());
    const unsigned first = t / 32 * 32, end = std::min(n, first + 32);
    bool all_wait = true, some_wait = false, some_done = false;
    for (unsigned u = first; u < end; ++u) {
        const Fiber& f = b.threads[u];
        some_done = some_done || f.done;
        some_wait = some_wait || f.waiting == Wait::warp;
        all_wait = all_wait && (f.done || f.waiting == Wait::warp);
    }
    if (!some_wait || !all_wait) return;
    if (some_done) throw std::runtime_error("a warp intrinsic waits for a lane of its warp that has exited");
    const Fiber& lead = b.threads[first];
    for (unsigned u = first; u < end; ++u) {
        const Fiber& f = b.threads[u];
        if (f.site_line != lead.site_line || std::strcmp(f.site_file, lead.site_file) != 0 ||
            std::strcmp(f.site_call, lead.site_call) != 0)
            throw std::runtime_error(std::string("lanes of one warp at different warp intrinsics: ") + lead.site_call +
                                     " at " + lead.site_file + ":" + std::to_string(lead.site_line) + ", " +
                                     f.site_call + " at " + f.site_file + ":" + std::to_string(f.site_line));
    }
    for (unsigned u = first; u < end; ++u) {
        b.threads[u].waiting = Wait::none;
        ready.set(u);
    }
}

// No thread is free to run: the block's barrier lets every live thread go on once all
// wait at it. Returns false when every thread is done. Threads waiting at different
// kinds of barrier would hang a GPU.
inline bool settle_block(Block& b, Ready& ready) {
    bool live = false, exited = false;
    for (const Fiber& f : b.threads) {
        exited = exited || f.done;
        if (f.done) continue;
        live = true;
        if (f.waiting != Wait::block)
            throw std::runtime_error("threads wait at __syncthreads while others of the block wait at a warp "
                                     "intrinsic");
    }
    if (live && exited)
        throw std::runtime_error("__syncthreads waits for threads of the block that have exited (every thread "
                                 "must reach it)");
    for (unsigned t = 0; t < b.threads.size(); ++t) {
        if (b.threads[t].done) continue;
        b.threads[t].waiting = Wait::none;
        ready.set(t);
    }
    return live;
}

/// Runs kernel<<<blocks, threads>>>(arguments...) to completion.
template <class... Parameters, class... Arguments>
void launch(unsigned blocks, int threads, void (*kernel)(Parameters...), Arguments... arguments) {
    // cudaErrorInvalidConfiguration on a GPU.
    if (blocks < 1 || blocks > 0x7fffffffu || threads < 1 || threads > 1024)
        throw std::runtime_error("invalid launch: " + std::to_string(blocks) + " blocks of " +
                                 std::to_string(threads) + " threads (CUDA allows 1 to 2^31 - 1 of 1 to 1024)");
    Block b;
    b.threads.resize(static_cast<size_t>(threads));
    b.votes.resize(static_cast<size_t>(threads));
    b.lanes.resize(static_cast<size_t>(threads));
    b.body = [&] { kernel(static_cast<Parameters>(arguments)...); };
    block = &b;
    blockDim.x = static_cast<unsigned>(threads);
    gridDim.x = blocks;
    std::mt19937 bits(2024);
    std::vector<unsigned> block_order(blocks);
    std::iota(block_order.begin(), block_order.end(), 0u);
    if (order() == Order::reverse) std::reverse(block_order.begin(), block_order.end());
    if (order() == Order::shuffled) std::shuffle(block_order.begin(), block_order.end(), bits);
    for (unsigned id : block_order) {
        blockIdx.x = id;
        Ready ready(static_cast<unsigned>(threads));
        for (unsigned t = 0; t < b.threads.size(); ++t) {
            prepare(b, b.threads[t]);
            ready.set(t);
        }
        while (ready.any() || settle_block(b, ready)) {
            if (!ready.any()) continue;
            const unsigned t = ready.pick(bits);
            resume(b, t);  // returns when t waits or is done
            if (!b.fault.empty()) throw std::runtime_error(b.fault);  // not from a fiber: its stack is apart
            ready.clear(t);
            settle_warp(b, ready, t);
        }
    }
    block = nullptr;
}

}  // namespace acc::test::cuda_emulation

namespace acc::test::cuda_emulation {
// This thread waits (for its block or its warp) until the scheduler lets it go on; at a
// warp intrinsic, `call` at file:line.
inline void wait_at(Wait kind, const char* call = "", const char* file = "", int line = 0) {
    auto& b = *block;
    b.threads[b.current].waiting = kind;
    b.threads[b.current].site_call = call;
    b.threads[b.current].site_file = file;
    b.threads[b.current].site_line = line;
    swapcontext(&b.threads[b.current].context, &b.scheduler);
    threadIdx.x = b.current;
}
}  // namespace acc::test::cuda_emulation

inline void __syncthreads() { acc::test::cuda_emulation::wait_at(acc::test::cuda_emulation::Wait::block); }

namespace acc::test::cuda_emulation {
// A fault ends the launch: the thread hands it to the scheduler and never runs again.
inline void fault(const std::string& what) {
    auto& b = *block;
    b.fault = what;
    swapcontext(&b.threads[b.current].context, &b.scheduler);
}

inline void full_mask(unsigned mask, const char* call) {
    if (mask != 0xffffffffu) fault(std::string(call) + " with a partial mask is not emulated");
}
}  // namespace acc::test::cuda_emulation

// The call site's file and line default from the caller's, so that lanes of one warp
// at different calls are found.
inline unsigned __ballot_sync(unsigned mask, bool predicate, const char* call = "__ballot_sync",
                              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    auto& b = *acc::test::cuda_emulation::block;
    namespace e = acc::test::cuda_emulation;
    e::full_mask(mask, call);
    b.votes[threadIdx.x] = predicate ? 1u : 0u;
    e::wait_at(e::Wait::warp, call, file, line);
    unsigned votes = 0;
    const unsigned first = threadIdx.x / 32 * 32;
    for (unsigned lane = 0; lane < 32 && first + lane < blockDim.x; ++lane) votes |= b.votes[first + lane] << lane;
    e::wait_at(e::Wait::warp, call, file, line);  // every lane has read the votes before they change
    return votes;
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

inline bool __any_sync(unsigned mask, bool predicate, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
    return __ballot_sync(mask, predicate, "__any_sync", file, line) != 0;
}

// `value` of lane `source` of this thread's warp.
template <class T>
T __shfl_sync(unsigned mask, T value, int source, const char* call = "__shfl_sync",
              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    static_assert(sizeof(T) <= sizeof(std::uint64_t), "a shuffled value fits in 64 bits");
    auto& b = *acc::test::cuda_emulation::block;
    namespace e = acc::test::cuda_emulation;
    e::full_mask(mask, call);
    std::memcpy(&b.lanes[threadIdx.x], &value, sizeof(T));
    e::wait_at(e::Wait::warp, call, file, line);
    T out;
    std::memcpy(&out, &b.lanes[threadIdx.x / 32 * 32 + static_cast<unsigned>(source) % 32], sizeof(T));
    e::wait_at(e::Wait::warp, call, file, line);  // every lane has read the values before they change
    return out;
}

template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
    return __shfl_sync(mask, value, static_cast<int>(threadIdx.x % 32) ^ lane_mask, "__shfl_xor_sync", file, line);
}

inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }

// Rounded to nearest even, as the host codec rounds (compress/kernels.hpp): the emulated
// fp16 kernel is checked for what it computes around this rounding, which the GPU tests
// check against CUDA's own. A NaN becomes CUDA's one NaN, 0x7fff (the host keeps its
// sign: 0x7e00 or 0xfe00); the codec refuses a NaN either way.
inline __half __float2half_rn(float v) {
    if (std::isnan(v)) return {std::uint16_t{0x7fff}};
    return {acc::compress::kernels::float_to_half(v)};
}
inline std::uint16_t __half_as_ushort(__half h) { return h.bits; }
