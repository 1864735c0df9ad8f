#include "base/memory.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace acc {
namespace {

// The first number in a file (cgroup files hold one; "max" means no limit).
std::optional<std::int64_t> read_number(const std::string& path) {
    std::ifstream in(path);
    long long value = 0;
    if (in >> value && value >= 0) return value;
    return std::nullopt;
}

// A "Key:   123 kB" line of a /proc file, in bytes.
std::optional<std::int64_t> proc_field(const std::string& path, const std::string& key) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        if (line.compare(0, key.size() + 1, key + ":") != 0) continue;
        std::istringstream fields(line.substr(key.size() + 1));
        long long kib = 0;
        if (fields >> kib) return static_cast<std::int64_t>(kib) * 1024;
    }
    return std::nullopt;
}

// What this process's memory cgroup still allows: its limit less its usage. A
// container sees its own group at the mount point's root; a host, under the path
// /proc/self/cgroup names.
std::optional<std::int64_t> cgroup_room() {
    std::ifstream in("/proc/self/cgroup");
    std::string line, v2, v1;
    while (std::getline(in, line)) {
        if (line.compare(0, 3, "0::") == 0) v2 = line.substr(3);
        const size_t memory = line.find(":memory:");
        if (memory != std::string::npos) v1 = line.substr(memory + 8);
    }
    const struct {
        std::string dir, limit, usage;
    } groups[] = {{"/sys/fs/cgroup" + v2, "memory.max", "memory.current"},
                  {"/sys/fs/cgroup", "memory.max", "memory.current"},
                  {"/sys/fs/cgroup/memory" + v1, "memory.limit_in_bytes", "memory.usage_in_bytes"},
                  {"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"}};
    for (const auto& g : groups) {
        const auto limit = read_number(g.dir + "/" + g.limit);
        const auto usage = read_number(g.dir + "/" + g.usage);
        if (limit && usage && *limit < (std::int64_t{1} << 60)) return std::max<std::int64_t>(0, *limit - *usage);
    }
    return std::nullopt;
}

}  // namespace

std::optional<std::int64_t> available_memory_bytes() {
    std::optional<std::int64_t> room = proc_field("/proc/meminfo", "MemAvailable");
    auto lower = [&room](std::optional<std::int64_t> other) {
        if (other) room = room ? std::min(*room, *other) : *other;
    };
    lower(cgroup_room());
    struct rlimit as {};
    if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
        const std::int64_t mapped = proc_field("/proc/self/status", "VmSize").value_or(0);
        lower(std::max<std::int64_t>(0, static_cast<std::int64_t>(as.rlim_cur) - mapped));
    }
    return room;
}

}  // namespace acc
