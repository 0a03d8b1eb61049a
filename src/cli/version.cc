#include "cli/version.h"

#include "base/cpu_features.h"
#include "kernels/ops.h"

namespace lumen::cli {

std::string version_text() {
  std::string s = std::string("lumen ") + kVersion + " (commit " + kCommit + ")\n";
  s += "kernels: " + std::string(kernels::kernel_table_name(kernels::best_kernel_table())) +
       " (CPU: " + cpu_features().describe() + "; --reference-kernels picks the scalar reference)\n";
#if defined(__clang__)
  s += "built with clang " __clang_version__ "\n";
#elif defined(__GNUC__)
  s += "built with gcc " __VERSION__ "\n";
#endif
  return s;
}

}  // namespace lumen::cli
