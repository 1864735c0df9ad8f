// How much memory this process can still take, for checks made before a large allocation.
#pragma once

#include <cstdint>
#include <optional>

namespace acc {

/// Bytes of memory available to this process now: the kernel's MemAvailable, lowered
/// by the limit of its cgroup (v2 memory.max, or v1 memory.limit_in_bytes, less what
/// the group uses) and by an address-space limit (ulimit -v, less what this process
/// maps). Empty when none of them can be read.
std::optional<std::int64_t> available_memory_bytes();

}  // namespace acc
