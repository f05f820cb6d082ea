// Host memory of this process (host_memory.h).
#include "common/host_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/log.h"

namespace trainer {
namespace {

constexpr double kNoLimit = 1e18;  // v1 writes "no limit" as ~2^63, v2 as "max"

// The first number in a small file ("max" counts as no limit); -1 when unreadable.
double ReadNumber(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word)) return -1;
  if (word == "max") return kNoLimit;
  try {
    return std::stod(word);
  } catch (...) {
    return -1;
  }
}

// The value of `key` in a "key value" (memory.stat) or "Key: value kB" (/proc/meminfo) file,
// times `unit`; -1 when missing.
double ReadKeyed(const std::string& path, const std::string& key, double unit) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    double value = 0;
    if (!(fields >> name >> value)) continue;
    if (!name.empty() && name.back() == ':') name.pop_back();
    if (name == key) return value * unit;
  }
  return -1;
}

struct CgroupLevel {
  std::string limit_file, usage_file, stat_file, inactive_key;
};

// The files of the cgroup `path` and of each of its parents, v2 (unified) or v1 (memory).
std::vector<std::pair<std::string, CgroupLevel>> CgroupLevels(const std::string& root) {
  std::vector<std::pair<std::string, CgroupLevel>> levels;
  std::ifstream in(root + "/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    // "0::/path" (v2) or "4:memory:/path" (v1)
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    const bool v2 = line.compare(0, first, "0") == 0 && controllers.empty();
    const bool v1 = (',' + controllers + ',').find(",memory,") != std::string::npos;
    if (!v2 && !v1) continue;
    const std::string base = root + (v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory");
    while (true) {
      const std::string dir = base + (path == "/" ? "" : path);
      levels.push_back(
          {path, v2 ? CgroupLevel{dir + "/memory.max", dir + "/memory.current",
                                  dir + "/memory.stat", "inactive_file"}
                    : CgroupLevel{dir + "/memory.limit_in_bytes", dir + "/memory.usage_in_bytes",
                                  dir + "/memory.stat", "total_inactive_file"}});
      if (path == "/" || path.empty()) break;
      const size_t slash = path.rfind('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
  }
  return levels;
}

}  // namespace

HostMemoryFacts QueryHostMemory(const std::string& root) {
  HostMemoryFacts facts;
  facts.available_bytes = ReadKeyed(root + "/proc/meminfo", "MemAvailable", 1024);
  facts.total_bytes = ReadKeyed(root + "/proc/meminfo", "MemTotal", 1024);
  if (facts.available_bytes >= 0) facts.source = "MemAvailable";
  for (const auto& [path, level] : CgroupLevels(root)) {
    const double limit = ReadNumber(level.limit_file);
    const double usage = ReadNumber(level.usage_file);
    if (limit < 0 || limit >= kNoLimit || usage < 0) continue;
    if (facts.total_bytes < 0 || limit < facts.total_bytes) facts.total_bytes = limit;
    const double inactive = std::max(0.0, ReadKeyed(level.stat_file, level.inactive_key, 1));
    const double left = std::max(0.0, limit - std::max(0.0, usage - inactive));
    if (facts.available_bytes >= 0 && left >= facts.available_bytes) continue;
    facts.available_bytes = left;
    facts.source =
        StrFormat("cgroup %s: limit %.1f GiB", path.c_str(), limit / (1024.0 * 1024.0 * 1024.0));
  }
  return facts;
}

bool HostCopyFits(double bytes, int ranks, const HostMemoryFacts& host) {
  return host.available_bytes < 0 || bytes * ranks <= 0.9 * host.available_bytes;
}

}  // namespace trainer
