// Helpers shared by the tokenizer tests: shared-data paths and file reading.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "base/shared_dir.h"

namespace lumen::tok::testing {

inline std::string shared_path(const std::string& rel) { return lumen::shared_dir() + "/" + rel; }

inline bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

}  // namespace lumen::tok::testing
