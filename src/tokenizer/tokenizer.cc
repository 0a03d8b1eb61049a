#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <charconv>

#include "base/check.h"

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace lumen::tok {

// ---- TokenizerImpl ----

TokenizerImpl::TokenizerImpl() = default;
TokenizerImpl::~TokenizerImpl() = default;

void finish_loading(TokenizerImpl* impl) {
  Vocab& vocab = impl->vocab;
  vocab.finalize();  // may turn end-of-turn tokens into control tokens: do it first
  std::vector<int32_t> ids;
  if (impl->family == Family::kHf) {
    for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
      if (vocab.tokens[id].added) ids.push_back(id);
    }
  } else {
    for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
      const TokenType t = vocab.tokens[id].type;
      if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined) ids.push_back(id);
    }
  }
  impl->special.build(vocab, ids);
  // Word-by-word merging is exact when no mergeable token spans a word's leading "▁".
  if (impl->family == Family::kSpm || impl->family == Family::kHf) {
    std::vector<std::string> texts;
    for (const TokenData& t : vocab.tokens) {
      if (impl->family == Family::kSpm || t.in_model) texts.push_back(t.text);
    }
    vocab.split_before_metaspace = vocab.find("\xE2\x96\x81") >= 0 && no_inner_metaspace(texts);
  }
  impl->max_token_bytes = 0;
  for (const TokenData& t : vocab.tokens) {
    impl->max_token_bytes = std::max(impl->max_token_bytes, static_cast<int32_t>(t.text.size()));
  }
}

std::vector<int32_t> TokenizerImpl::encode(std::string_view text, bool add_special, bool parse_special) const {
  if (family == Family::kHf) return hf_encode(*this, text, add_special, parse_special);
  return encode_llama(text, add_special, parse_special);
}

// llama.cpp's llama_tokenize_impl: split out special tokens, then run the family's encoder
// on each text fragment.
std::vector<int32_t> TokenizerImpl::encode_llama(std::string_view text, bool add_special,
                                                 bool parse_special) const {
  std::vector<Fragment> fragments;
  if (!special.empty()) {
    // Control and unknown tokens only when asked; user-defined tokens always (as HF does).
    special.partition_by_length(
        vocab, text,
        [&](int32_t id) { return parse_special || vocab.tokens[id].type == TokenType::kUserDefined; },
        &fragments);
  } else if (!text.empty()) {
    fragments.push_back({-1, 0, text.size()});
  }

  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  switch (family) {
    case Family::kSpm: {
      bool prev_special = true;  // the first fragment gets the space prefix
      if (add_special && vocab.add_bos && vocab.bos_id >= 0) out.push_back(vocab.bos_id);
      std::string buf;
      for (const Fragment& f : fragments) {
        if (f.token_id >= 0) {
          out.push_back(f.token_id);
          prev_special = true;
          continue;
        }
        buf.clear();
        if (vocab.add_space_prefix && prev_special) buf.push_back(' ');
        buf.append(text.substr(f.begin, f.end - f.begin));
        spm_encode(vocab, escape_metaspace(buf), &out);
        prev_special = false;
      }
      if (add_special && vocab.add_eos && vocab.eos_id >= 0) out.push_back(vocab.eos_id);
      break;
    }
    case Family::kBpe:
      if (add_special && vocab.add_bos && vocab.bos_id >= 0) out.push_back(vocab.bos_id);
      for (const Fragment& f : fragments) {
        if (f.token_id >= 0) {
          out.push_back(f.token_id);
        } else {
          bpe_encode(vocab, bpe_ranks, bpe_pre, text.substr(f.begin, f.end - f.begin), &out);
        }
      }
      if (add_special && vocab.add_eos && vocab.eos_id >= 0) out.push_back(vocab.eos_id);
      break;
    case Family::kWpm:
      if (add_special && vocab.add_bos && vocab.bos_id >= 0) out.push_back(vocab.bos_id);  // [CLS]
      for (const Fragment& f : fragments) {
        if (f.token_id >= 0) {
          out.push_back(f.token_id);
        } else {
          wpm_encode(vocab, wpm_classifier, max_token_bytes, text.substr(f.begin, f.end - f.begin), &out);
        }
      }
      if (add_special && vocab.add_sep && vocab.sep_id >= 0) out.push_back(vocab.sep_id);  // [SEP]
      if (add_special && vocab.add_eos && vocab.eos_id >= 0) out.push_back(vocab.eos_id);
      break;
    case Family::kHf:
      break;  // handled by hf_encode
  }
  return out;
}

// ---- Tokenizer ----

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}

Result<Tokenizer> Tokenizer::from_model_file(const gguf::ModelFile& file) {
  if (file.container() == "safetensors") {
    if (file.hf_tokenizer_json().empty()) {
      return error("tokenizer: the Hugging Face model in '" + file.path() + "' has no tokenizer.json");
    }
    LUMEN_ASSIGN_OR_RETURN(auto impl, load_from_hf_json(file.hf_tokenizer_json(), file.hf_tokenizer_config_json()));
    if (impl->chat_template.empty()) {
      // A reader may carry a separate chat_template.jinja as GGUF-style metadata.
      if (auto tmpl = file.get_string("tokenizer.chat_template")) impl->chat_template = std::string(*tmpl);
    }
    return Tokenizer(std::move(impl));
  }
  LUMEN_ASSIGN_OR_RETURN(auto impl, load_from_gguf_metadata(file));
  return Tokenizer(std::move(impl));
}

Result<Tokenizer> Tokenizer::from_hf_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  LUMEN_ASSIGN_OR_RETURN(auto impl, load_from_hf_json(tokenizer_json, tokenizer_config_json));
  return Tokenizer(std::move(impl));
}

const TokenizerImpl& Tokenizer::impl() const {
  LUMEN_CHECK_MSG(impl_ != nullptr, "use of a default-constructed or moved-from Tokenizer");
  return *impl_;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  return impl().encode(text, add_special, parse_special);
}

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  return std::string(impl().vocab.piece(id, special));
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool remove_special) const {
  return impl().vocab.detokenize(ids, remove_special);
}

int32_t Tokenizer::n_vocab() const { return impl().vocab.n_tokens(); }
int32_t Tokenizer::bos_id() const { return impl().vocab.bos_id; }
int32_t Tokenizer::eos_id() const { return impl().vocab.eos_id; }
int32_t Tokenizer::eot_id() const { return impl().vocab.eot_id; }
int32_t Tokenizer::unk_id() const { return impl().vocab.unk_id; }
int32_t Tokenizer::pad_id() const { return impl().vocab.pad_id; }
bool Tokenizer::add_bos() const { return impl().vocab.add_bos; }
bool Tokenizer::add_eos() const { return impl().vocab.add_eos; }
bool Tokenizer::is_eog(int32_t id) const { return impl().vocab.valid_id(id) && impl().vocab.eog[id] != 0; }
bool Tokenizer::is_control(int32_t id) const {
  return impl().vocab.valid_id(id) && impl().vocab.tokens[id].type == TokenType::kControl;
}
std::string_view Tokenizer::token_text(int32_t id) const {
  return impl().vocab.valid_id(id) ? std::string_view(impl().vocab.tokens[id].text) : std::string_view();
}
TokenType Tokenizer::token_type(int32_t id) const {
  return impl().vocab.valid_id(id) ? impl().vocab.tokens[id].type : TokenType::kUndefined;
}
int32_t Tokenizer::find_token(std::string_view text) const { return impl().vocab.find(text); }
std::string_view Tokenizer::model_name() const { return impl().model_name; }
std::string_view Tokenizer::pre_name() const { return impl().pre_name; }
const std::string& Tokenizer::chat_template() const { return impl().chat_template; }

// ---- StreamingDetokenizer ----

namespace {

// Moves the complete prefix of *pending (valid sequences, invalid bytes as U+FFFD) to the
// result; an incomplete sequence at the end stays unless `final`.
std::string drain_utf8(std::string* pending, bool final) {
  std::string out;
  size_t i = 0;
  while (i < pending->size()) {
    const int len = utf8_valid_seq_len(*pending, i);
    if (len > 0) {
      out.append(*pending, i, static_cast<size_t>(len));
      i += static_cast<size_t>(len);
    } else if (len == 0) {
      append_utf8(kReplacementChar, &out);
      ++i;
    } else if (final) {  // truncated sequence: one U+FFFD for all of it
      append_utf8(kReplacementChar, &out);
      i = pending->size();
    } else {
      break;
    }
  }
  pending->erase(0, i);
  return out;
}

}  // namespace

std::string StreamingDetokenizer::push(int32_t id) {
  const bool special = std::binary_search(keep_special_.begin(), keep_special_.end(), id);
  pending_.append(tokenizer_->token_to_piece(id, special));
  return drain_utf8(&pending_, /*final=*/false);
}

std::string StreamingDetokenizer::flush() { return drain_utf8(&pending_, /*final=*/true); }

// ---- test vector files ----

std::vector<std::string> read_vocab_test_inputs(std::string_view inp_file_text) {
  static constexpr std::string_view kSep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  size_t pos = 0;
  while (pos <= inp_file_text.size()) {
    const size_t hit = inp_file_text.find(kSep, pos);
    if (hit == std::string_view::npos) {
      if (pos < inp_file_text.size()) inputs.emplace_back(inp_file_text.substr(pos));
      break;
    }
    inputs.emplace_back(inp_file_text.substr(pos, hit - pos));
    pos = hit + kSep.size();
  }
  return inputs;
}

std::vector<std::vector<int32_t>> read_vocab_test_outputs(std::string_view out_file_text) {
  std::vector<std::vector<int32_t>> outputs;
  size_t pos = 0;
  while (pos < out_file_text.size()) {
    size_t eol = out_file_text.find('\n', pos);
    if (eol == std::string_view::npos) eol = out_file_text.size();
    std::vector<int32_t> ids;
    const char* p = out_file_text.data() + pos;
    const char* end = out_file_text.data() + eol;
    while (p < end) {
      if (*p == ' ' || *p == '\r') {
        ++p;
        continue;
      }
      int32_t id = 0;
      auto [next, ec] = std::from_chars(p, end, id);
      if (ec != std::errc()) break;  // not a number: stop reading this line
      ids.push_back(id);
      p = next;
    }
    outputs.push_back(std::move(ids));
    pos = eol + 1;
  }
  return outputs;
}

}  // namespace lumen::tok
