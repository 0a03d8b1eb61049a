// `lumen --version`: what this binary is and which kernels it would run on this CPU.
#pragma once

#include <string>

namespace lumen::cli {

// Defined in the build tree's generated/version.cc (cmake/version.cmake).
extern const char* const kVersion;  // the CMake project version, "0.9.0"
extern const char* const kCommit;   // the git commit built ("1c7ea8e4f2ab", "-dirty" if edited), or "unknown"

// Three lines: version and commit; the kernels chosen and the CPU features they rest on;
// the compiler.
std::string version_text();

}  // namespace lumen::cli
