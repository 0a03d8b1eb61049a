#include "gguf/model_file.h"

namespace lumen::gguf {

Result<ModelFile> open_hf_dir(const std::string& dir) {
  return error("hf: reader not implemented yet ('" + dir + "')");
}

}  // namespace lumen::gguf
