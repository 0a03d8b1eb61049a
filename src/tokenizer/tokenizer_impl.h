// TokenizerImpl: what a Tokenizer holds. One vocab, one family, and that family's data.
// Internal to the tokenizer layer; immutable after loading.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/encoders.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/vocab.h"

namespace lumen::tok {

struct HfPipeline;  // hf_tokenizer.h

enum class Family : uint8_t { kSpm, kBpe, kWpm, kHf };

// A plain holder: the loaders fill the public fields, then encode() only reads them.
class TokenizerImpl {
 public:
  TokenizerImpl();
  ~TokenizerImpl();

  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  Family family = Family::kSpm;
  std::string model_name;  // "llama", "gpt2", "bert", "hf-bpe"
  std::string pre_name;
  std::string chat_template;
  Vocab vocab;
  // Tokens split out of the text before the model runs: control / unknown (when
  // parse_special) and user-defined (always). For HF: the added tokens.
  SpecialTokenMatcher special;

  // kBpe
  BpeRanks bpe_ranks;
  BpePreTokenizer bpe_pre;
  // kWpm
  Regex wpm_classifier;
  int32_t max_token_bytes = 0;
  // kHf
  std::unique_ptr<HfPipeline> hf;

 private:
  std::vector<int32_t> encode_llama(std::string_view text, bool add_special, bool parse_special) const;
};

// Builds the special-token matcher and the vocab's derived tables; call once after loading.
void finish_loading(TokenizerImpl* impl);

// Loaders (gguf_vocab.cc, hf_tokenizer.cc).
Result<std::unique_ptr<TokenizerImpl>> load_from_gguf_metadata(const gguf::ModelFile& file);
Result<std::unique_ptr<TokenizerImpl>> load_from_hf_json(std::string_view tokenizer_json,
                                                         std::string_view tokenizer_config_json);

}  // namespace lumen::tok
