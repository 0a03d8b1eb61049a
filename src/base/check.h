// Checks for internal invariants (never for bad external input: use Status for that).
// LUMEN_CHECK is always on; LUMEN_DCHECK only in debug builds (NDEBUG unset).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace lumen::detail {
[[noreturn]] inline void check_failed(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "lumen: internal check failed at %s:%d: %s%s%s\n", file, line, cond,
               msg ? " — " : "", msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}
}  // namespace lumen::detail

#define LUMEN_CHECK(cond) \
  do { if (!(cond)) ::lumen::detail::check_failed(__FILE__, __LINE__, #cond, nullptr); } while (0)
#define LUMEN_CHECK_MSG(cond, msg) \
  do { if (!(cond)) ::lumen::detail::check_failed(__FILE__, __LINE__, #cond, (msg)); } while (0)

#ifdef NDEBUG
#define LUMEN_DCHECK(cond) do { (void)sizeof(cond); } while (0)
#else
#define LUMEN_DCHECK(cond) LUMEN_CHECK(cond)
#endif

// Unrecoverable start-up failure: print a message that says the remedy, exit(1).
#define LUMEN_FATAL(...) \
  do { std::fprintf(stderr, "lumen: error: "); std::fprintf(stderr, __VA_ARGS__); \
       std::fprintf(stderr, "\n"); std::exit(1); } while (0)
