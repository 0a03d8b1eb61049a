#include "base/cpu_affinity.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <set>

#ifdef LUMEN_HAVE_NUMA
#include <numa.h>
#endif

namespace lumen {
namespace {

constexpr int kMaxCpu = CPU_SETSIZE - 1;  // what a cpu_set_t can name (1023)

bool parse_int(std::string_view s, int* out) {
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

Result<std::vector<int>> parse_cpu_list(std::string_view text) {
  std::set<int> cpus;
  if (text.empty()) return error("an empty CPU list");
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (comma != std::string_view::npos && text.empty()) return error("a CPU list ends with ','");
    const size_t dash = item.find('-');
    int lo = 0, hi = 0;
    const bool ok = dash == std::string_view::npos
                        ? parse_int(item, &lo) && (hi = lo, true)
                        : parse_int(item.substr(0, dash), &lo) && parse_int(item.substr(dash + 1), &hi);
    if (!ok || lo < 0 || hi < lo)
      return error("'" + std::string(item) + "' is not a CPU number or range like 0-3");
    if (hi > kMaxCpu) return error("CPU " + std::to_string(hi) + " is beyond " + std::to_string(kMaxCpu));
    for (int c = lo; c <= hi; ++c) cpus.insert(c);
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c <= kMaxCpu; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

Status pin_to_cpus(std::span<const int> cpus) {
  const std::vector<int> allowed = allowed_cpus();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (!std::binary_search(allowed.begin(), allowed.end(), c))
      return error("CPU " + std::to_string(c) + " is not available to this process (available: " +
                   format_cpu_list(allowed) + ")");
    CPU_SET(c, &set);
  }
  if (cpus.empty()) return error("no CPUs to run on");
  if (sched_setaffinity(0, sizeof set, &set) != 0) return error("sched_setaffinity failed for " + format_cpu_list(cpus));
  return Status();
}

Result<std::vector<int>> cpus_of_numa_node(int node) {
  // sysfs works with or without libnuma, and says which nodes exist.
  std::ifstream in("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist");
  std::string line;
  if (node < 0 || !in || !std::getline(in, line)) return error("there is no NUMA node " + std::to_string(node));
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  if (line.empty()) return error("NUMA node " + std::to_string(node) + " has no CPUs");
  return parse_cpu_list(line);
}

std::string place_memory_near(std::span<const int> cpus) {
#ifdef LUMEN_HAVE_NUMA
  if (numa_available() < 0) return "no NUMA support in this kernel: memory placement left to the kernel";
  std::set<int> nodes;
  for (int c : cpus)
    if (const int n = numa_node_of_cpu(c); n >= 0) nodes.insert(n);
  if (numa_num_configured_nodes() <= 1) return "one NUMA node: memory is local already";
  if (nodes.size() == 1) {
    numa_set_preferred(*nodes.begin());
    return "memory prefers NUMA node " + std::to_string(*nodes.begin());
  }
  bitmask* mask = numa_allocate_nodemask();
  std::string names;
  for (int n : nodes) {
    numa_bitmask_setbit(mask, static_cast<unsigned>(n));
    names += (names.empty() ? "" : ",") + std::to_string(n);
  }
  numa_set_interleave_mask(mask);
  numa_free_nodemask(mask);
  return "memory interleaved over NUMA nodes " + names;
#else
  (void)cpus;
  return "built without libnuma: memory placement left to the kernel's first touch";
#endif
}

std::string format_cpu_list(std::span<const int> cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace lumen
