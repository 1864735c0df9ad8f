// A hash that gives the same number on every machine and compiler, for
// comparing data across ranks (option fingerprints, weight checksums).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace acc {

inline constexpr std::uint64_t kFnv1aStart = 14695981039346656037ull;

/// 64-bit FNV-1a of `size` bytes, continuing from `hash` (kFnv1aStart to begin).
inline std::uint64_t fnv1a(const void* data, std::size_t size, std::uint64_t hash = kFnv1aStart) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < size; ++i) {
        hash ^= bytes[i];
        hash *= 1099511628211ull;
    }
    return hash;
}

inline std::uint64_t fnv1a(const std::string& text, std::uint64_t hash = kFnv1aStart) {
    return fnv1a(text.data(), text.size(), hash);
}

}  // namespace acc
