// Where this process runs: the CPUs its threads may use and the NUMA nodes its memory
// comes from (`lumen serve --cpus LIST` / `--numa-node N`), so that replicas sharing a box
// do not fight over cores and memory controllers.
//
// Pinning is process-wide and must happen before any thread starts: sched_setaffinity
// applies to the calling thread, and every thread created afterwards (the engine's pool,
// the HTTP threads) inherits the mask. Memory placement uses libnuma when lumen was built
// with it (LUMEN_HAVE_NUMA; Debian's libnuma-dev): pages allocated afterwards (the KV
// cache, scratch, the model's page cache as it is first read) prefer the nodes of the
// chosen CPUs. Without libnuma the CPUs of a node come from sysfs and memory is left to
// the kernel's first-touch policy, which pinned threads already make mostly local.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace lumen {

// "0-3,8,10-11" -> {0, 1, 2, 3, 8, 10, 11} (sorted, unique). Errors name the bad element.
Result<std::vector<int>> parse_cpu_list(std::string_view text);
// The CPUs the calling thread may run on now.
std::vector<int> allowed_cpus();
// Pins the calling thread (and the threads it creates from now on) to `cpus`. Errors: a CPU
// this process may not use, named.
Status pin_to_cpus(std::span<const int> cpus);
// The CPUs of NUMA node `node`. Errors: no such node.
Result<std::vector<int>> cpus_of_numa_node(int node);
// Makes memory allocated from now on prefer the NUMA nodes of `cpus`; returns what was
// done, for the start-up log ("memory on node 1", "one NUMA node: nothing to do", ...).
std::string place_memory_near(std::span<const int> cpus);
// "0-3,8": the compact form of a sorted CPU list.
std::string format_cpu_list(std::span<const int> cpus);

}  // namespace lumen
