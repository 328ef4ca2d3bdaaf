// The memory a reader may still ask for (include/cnn/idx_reader.hpp): under Linux's overcommit an
// allocation larger than this does not fail, the OOM killer ends the rank later, so the readers
// compare a declared size with it before allocating.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "cnn/idx_reader.hpp"

namespace cnn {
namespace {

constexpr std::uint64_t kUnknown = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint64_t kKiB = 1024;

// The first number in a file ("max", an absent or unreadable file: kUnknown).
std::uint64_t read_number(const std::string& path) {
  std::ifstream in(path);
  std::uint64_t value = 0;
  if (!(in >> value)) return kUnknown;
  return value;
}

// MemAvailable in /proc/meminfo, in bytes.
std::uint64_t meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * kKiB;
  }
  return kUnknown;
}

// The room left under a cgroup's memory limit: limit minus usage, in the directory `dir` of a
// cgroup v2 (memory.max, memory.current) or v1 (memory.limit_in_bytes, memory.usage_in_bytes)
// hierarchy. kUnknown without a limit.
std::uint64_t cgroup_room(const std::string& dir, const char* limit_file, const char* usage_file) {
  const std::uint64_t limit = read_number(dir + "/" + limit_file);
  if (limit == kUnknown) return kUnknown;
  const std::uint64_t usage = read_number(dir + "/" + usage_file);
  if (usage == kUnknown) return kUnknown;
  return limit > usage ? limit - usage : 0;
}

// This process's cgroup path in a hierarchy of /proc/self/cgroup ("0::/a/b" for v2, "N:memory:/a/b"
// for v1's memory controller); "" if absent.
std::string own_cgroup(bool v2) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t first = line.find(':');
    const std::size_t second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const bool match = v2 ? line.compare(0, first, "0") == 0 && controllers.empty()
                          : ("," + controllers + ",").find(",memory,") != std::string::npos;
    if (match) return line.substr(second + 1);
  }
  return "";
}

// The smallest room in the cgroup and each of its ancestors below the mount point: a limit on any of
// them applies. In a container the path in /proc/self/cgroup may not exist under the mount (the
// mount shows the container's own cgroup at its root), so missing directories are skipped.
std::uint64_t cgroup_tree_room(const std::string& mount, bool v2) {
  const char* limit_file = v2 ? "memory.max" : "memory.limit_in_bytes";
  const char* usage_file = v2 ? "memory.current" : "memory.usage_in_bytes";
  std::uint64_t room = kUnknown;
  std::string path = own_cgroup(v2);
  while (true) {
    room = std::min(room, cgroup_room(mount + path, limit_file, usage_file));
    const std::size_t slash = path.rfind('/');
    if (path.empty() || slash == std::string::npos) break;
    path.erase(slash);
  }
  return room;
}

}  // namespace

std::uint64_t memory_available_bytes() {
  std::uint64_t room = meminfo_available();
  room = std::min(room, cgroup_tree_room("/sys/fs/cgroup", true));
  room = std::min(room, cgroup_tree_room("/sys/fs/cgroup/memory", false));
  return room;
}

}  // namespace cnn
