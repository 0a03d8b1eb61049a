#pragma once

#include <chrono>

namespace lumen {

// Monotonic wall-clock milliseconds since an arbitrary epoch.
inline double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace lumen
