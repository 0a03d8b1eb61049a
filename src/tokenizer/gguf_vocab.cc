// Tokenizer from GGUF tokenizer.ggml.* metadata (GGUF files and llama2.c checkpoints), with
// llama.cpp's defaults per vocab type.
#include <algorithm>
#include <cctype>

#include "base/log.h"
#include "tokenizer/tokenizer_impl.h"

namespace lumen::tok {
namespace {

// llama.cpp's defaults for a tokenizer.ggml.model; false for models lumen does not support.
bool set_family_defaults(std::string_view model, TokenizerImpl* impl) {
  Vocab& vocab = impl->vocab;
  if (model == "llama") {  // SentencePiece BPE
    impl->family = Family::kSpm;
    vocab.bos_id = 1;
    vocab.eos_id = 2;
    vocab.unk_id = 0;
    vocab.add_bos = true;
    vocab.add_space_prefix = true;
    vocab.piece_style = PieceStyle::kMetaspace;
  } else if (model == "gpt2") {  // byte-level BPE; add_bos / clean_spaces come with the pre set
    impl->family = Family::kBpe;
    vocab.bos_id = 11;
    vocab.eos_id = 11;
    vocab.piece_style = PieceStyle::kByteLevel;
  } else if (model == "bert") {  // WordPiece: [CLS] text [SEP]
    impl->family = Family::kWpm;
    vocab.bos_id = 101;
    vocab.unk_id = 100;
    vocab.sep_id = 102;
    vocab.pad_id = 0;
    vocab.add_bos = true;
    vocab.add_sep = true;
    vocab.clean_spaces = true;
    vocab.piece_style = PieceStyle::kMetaspace;
  } else {
    return false;
  }
  return true;
}

TokenType token_type_from_gguf(int64_t v) {
  return v >= 0 && v <= 6 ? static_cast<TokenType>(v) : TokenType::kUndefined;
}

Status read_tokens(const gguf::ModelFile& file, const std::string& where, Vocab* vocab) {
  const auto* tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty()) return error("tokenizer: 'tokenizer.ggml.tokens' is missing or empty" + where);
  const auto* scores = file.get_float_array("tokenizer.ggml.scores");
  if (scores && scores->size() != tokens->size()) {
    return error("tokenizer: 'tokenizer.ggml.scores' has " + std::to_string(scores->size()) + " entries, tokens " +
                 std::to_string(tokens->size()) + where);
  }
  const auto* types = file.get_int_array("tokenizer.ggml.token_type");
  if (types && types->size() != tokens->size()) {
    return error("tokenizer: 'tokenizer.ggml.token_type' has " + std::to_string(types->size()) +
                 " entries, tokens " + std::to_string(tokens->size()) + where);
  }
  if (tokens->size() > (size_t{1} << 31) - 1) return error("tokenizer: too many tokens" + where);
  vocab->tokens.resize(tokens->size());
  vocab->text_to_id.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) {
    TokenData& t = vocab->tokens[i];
    t.text = (*tokens)[i];
    t.score = scores ? static_cast<float>((*scores)[i]) : 0.0f;
    t.type = types ? token_type_from_gguf((*types)[i]) : TokenType::kNormal;
    vocab->text_to_id.insert_or_assign(t.text, static_cast<int32_t>(i));  // duplicates: last wins, as llama.cpp
  }
  return Status();
}

// Reads an id; absent keeps the default, out-of-range ids (e.g. 0xFFFFFFFF = "none" as some
// converters write it) keep the default too, as llama.cpp does.
void read_special_id(const gguf::ModelFile& file, const char* key, int32_t n_tokens, int32_t* id) {
  const auto value = file.get_int(key);
  if (!value) return;
  if (*value < 0 || *value >= n_tokens) {
    LUMEN_LOG_DEBUG("tokenizer: %s = %lld is out of range, keeping %d", key, static_cast<long long>(*value), *id);
    return;
  }
  *id = static_cast<int32_t>(*value);
}

void read_special_ids(const gguf::ModelFile& file, Family family, Vocab* vocab) {
  const int32_t n = vocab->n_tokens();
  read_special_id(file, "tokenizer.ggml.bos_token_id", n, &vocab->bos_id);
  if (family == Family::kWpm) read_special_id(file, "tokenizer.ggml.cls_token_id", n, &vocab->bos_id);
  read_special_id(file, "tokenizer.ggml.eos_token_id", n, &vocab->eos_id);
  read_special_id(file, "tokenizer.ggml.eot_token_id", n, &vocab->eot_id);
  read_special_id(file, "tokenizer.ggml.unknown_token_id", n, &vocab->unk_id);
  read_special_id(file, "tokenizer.ggml.seperator_token_id", n, &vocab->sep_id);
  read_special_id(file, "tokenizer.ggml.padding_token_id", n, &vocab->pad_id);
  for (const char* key : {"tokenizer.ggml.eom_token_id", "tokenizer.ggml.fim_pad_token_id",
                          "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id"}) {
    int32_t id = -1;
    read_special_id(file, key, n, &id);
    if (id >= 0) vocab->extra_eog_ids.push_back(id);
  }
  for (int32_t* id : {&vocab->bos_id, &vocab->eos_id, &vocab->unk_id, &vocab->sep_id, &vocab->pad_id}) {
    if (*id >= n) *id = -1;  // a default beyond a small vocab
  }
}

// Old converters wrote no token types: byte tokens and the special ids are still recognisable.
void infer_token_types(Family family, Vocab* vocab) {
  for (TokenData& t : vocab->tokens) {
    if (family == Family::kSpm && parse_byte_token(t.text) >= 0) t.type = TokenType::kByte;
  }
  for (int32_t id : {vocab->bos_id, vocab->eos_id}) {
    if (id >= 0) vocab->tokens[id].type = TokenType::kControl;
  }
  if (vocab->unk_id >= 0) vocab->tokens[vocab->unk_id].type = TokenType::kUnknown;
}

Status load_bpe(const gguf::ModelFile& file, const std::string& where, TokenizerImpl* impl) {
  bool known = true;
  LUMEN_ASSIGN_OR_RETURN(impl->bpe_pre, make_bpe_pre_tokenizer(impl->pre_name, &known));
  if (!known) {
    LUMEN_LOG_WARN("tokenizer: unknown tokenizer.ggml.pre '%s'%s; using the gpt-2 pre-tokenizer",
                   impl->pre_name.c_str(), where.c_str());
  }
  impl->vocab.add_bos = impl->bpe_pre.add_bos;
  impl->vocab.clean_spaces = impl->bpe_pre.clean_spaces;
  if (impl->pre_name == "chatglm-bpe") impl->vocab.bos_id = -1;
  const auto* merges = file.get_string_array("tokenizer.ggml.merges");
  if (!merges) return error("tokenizer: 'tokenizer.ggml.merges' is missing (needed by gpt2 vocabs)" + where);
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const std::string_view m = (*merges)[rank];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string_view::npos) continue;  // malformed entry: no merge
    impl->bpe_ranks.add(impl->vocab, m.substr(0, sp), m.substr(sp + 1), static_cast<int32_t>(rank));
  }
  return Status();
}

// Per-token strip attributes that GGUF does not store; llama.cpp sets them by model name.
void apply_strip_quirks(const gguf::ModelFile& file, const std::string& pre_name, Vocab* vocab) {
  std::string model_name(file.get_string("general.name").value_or(""));
  for (char& c : model_name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto set_strip = [&](std::string_view text, bool lstrip, bool rstrip) {
    if (const int32_t id = vocab->find(text); id >= 0) {
      vocab->tokens[id].lstrip = lstrip;
      vocab->tokens[id].rstrip = rstrip;
    }
  };
  if (pre_name == "jina-v2-de" || pre_name == "jina-v2-es" || pre_name == "jina-v2-code") {
    set_strip("<mask>", true, false);
  } else if (model_name.find("phi-3") != std::string::npos || model_name.find("phi3") != std::string::npos) {
    for (TokenData& t : vocab->tokens) {
      if (t.type == TokenType::kControl || t.type == TokenType::kUserDefined || t.type == TokenType::kUnknown) {
        t.rstrip = true;
      }
    }
    set_strip("</s>", false, true);
    for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) set_strip(text, false, false);
  }
}

}  // namespace

Result<std::unique_ptr<TokenizerImpl>> load_from_gguf_metadata(const gguf::ModelFile& file) {
  const std::string where = " in '" + file.path() + "'";
  const auto model = file.get_string("tokenizer.ggml.model");
  if (!model) return error("tokenizer: metadata 'tokenizer.ggml.model' is missing" + where);
  auto impl = std::make_unique<TokenizerImpl>();
  impl->model_name = std::string(*model);
  if (!set_family_defaults(*model, impl.get())) {
    return error("tokenizer: unsupported tokenizer.ggml.model '" + std::string(*model) + "'" + where +
                 " (lumen supports 'llama' (SentencePiece BPE), 'gpt2' (byte-level BPE) and 'bert' (WordPiece))");
  }
  Vocab& vocab = impl->vocab;
  LUMEN_TRY(read_tokens(file, where, &vocab));
  read_special_ids(file, impl->family, &vocab);
  if (!file.get_int_array("tokenizer.ggml.token_type")) infer_token_types(impl->family, &vocab);
  if (auto pre = file.get_string("tokenizer.ggml.pre")) impl->pre_name = std::string(*pre);
  if (impl->family == Family::kBpe) {
    LUMEN_TRY(load_bpe(file, where, impl.get()));
  } else if (impl->family == Family::kWpm) {
    LUMEN_ASSIGN_OR_RETURN(impl->wpm_classifier, make_wpm_classifier());
  }

  if (auto v = file.get_bool("tokenizer.ggml.add_bos_token")) vocab.add_bos = *v;
  if (auto v = file.get_bool("tokenizer.ggml.add_eos_token")) vocab.add_eos = *v;
  if (auto v = file.get_bool("tokenizer.ggml.add_space_prefix")) vocab.add_space_prefix = *v;
  vocab.decode_strip_space = vocab.add_space_prefix;
  if (vocab.add_bos && vocab.bos_id < 0) vocab.add_bos = false;
  if (vocab.add_eos && vocab.eos_id < 0) vocab.add_eos = false;
  if (auto tmpl = file.get_string("tokenizer.chat_template")) impl->chat_template = std::string(*tmpl);

  finish_loading(impl.get());
  apply_strip_quirks(file, impl->pre_name, &vocab);
  return impl;
}

}  // namespace lumen::tok
