#include "gguf/model_file.h"

namespace lumen::gguf {

Result<ModelFile> open_llama2c(const std::string& bin_path, const std::string& tokenizer_path) {
  return error("llama2c: reader not implemented yet ('" + bin_path + "')");
}

}  // namespace lumen::gguf
