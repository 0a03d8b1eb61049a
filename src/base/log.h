// Minimal leveled logging to stderr. The threshold is set once at start-up by the CLI
// (the one piece of process-wide mutable state besides the CPU-feature snapshot; it is an
// atomic, read-only after start-up in practice).
#pragma once

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace lumen {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kSilent = 4 };

inline std::atomic<int>& log_threshold() {
  static std::atomic<int> level{static_cast<int>(LogLevel::kWarn)};
  return level;
}
inline void set_log_level(LogLevel level) { log_threshold().store(static_cast<int>(level)); }

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
inline void log_msg(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) < log_threshold().load(std::memory_order_relaxed)) return;
  static const char* kNames[] = {"debug", "info", "warn", "error", ""};
  std::fprintf(stderr, "lumen [%s] ", kNames[static_cast<int>(level)]);
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fputc('\n', stderr);
}

}  // namespace lumen

#define LUMEN_LOG_DEBUG(...) ::lumen::log_msg(::lumen::LogLevel::kDebug, __VA_ARGS__)
#define LUMEN_LOG_INFO(...) ::lumen::log_msg(::lumen::LogLevel::kInfo, __VA_ARGS__)
#define LUMEN_LOG_WARN(...) ::lumen::log_msg(::lumen::LogLevel::kWarn, __VA_ARGS__)
#define LUMEN_LOG_ERROR(...) ::lumen::log_msg(::lumen::LogLevel::kError, __VA_ARGS__)
