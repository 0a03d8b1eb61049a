// Where the shared read-only test data lives: $LUMEN_SHARED, default "../shared".
// Used by tests and benchmarks only.
#pragma once

#include <cstdlib>
#include <string>

namespace lumen {

inline std::string shared_dir() {
  const char* env = std::getenv("LUMEN_SHARED");
  return env && *env ? std::string(env) : std::string("../shared");
}

}  // namespace lumen
