#include "convert/tokenizer_to_gguf.h"

#include <sys/stat.h>

#include <algorithm>
#include <exception>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "gguf/json_util.h"

namespace lumen::convert {
namespace {

using gguf::MetaValue;
using gguf::ValueType;
using nlohmann::json;

constexpr int64_t kMaxTokens = int64_t{1} << 24;

// GGUF token types (tokenizer.ggml.token_type).
enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// The special token roles SpecialVocab knows, in its order, with their GGUF key names.
struct SpecialRole {
  const char* name;      // tokenizer_config.json: "<name>_token", "add_<name>_token"
  const char* gguf_key;  // tokenizer.ggml.<key>
};
constexpr SpecialRole kRoles[] = {
    {"bos", "tokenizer.ggml.bos_token_id"},       {"eos", "tokenizer.ggml.eos_token_id"},
    {"unk", "tokenizer.ggml.unknown_token_id"},   {"sep", "tokenizer.ggml.seperator_token_id"},
    {"pad", "tokenizer.ggml.padding_token_id"},   {"cls", "tokenizer.ggml.cls_token_id"},
    {"mask", "tokenizer.ggml.mask_token_id"},
};
constexpr size_t kNumRoles = std::size(kRoles);

// Split regexes of known byte-level pre-tokenizers -> llama.cpp's tokenizer.ggml.pre.
constexpr std::pair<std::string_view, std::string_view> kKnownSplitRegexes[] = {
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+",
     "qwen2"},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "llama-bpe"},
};

struct AddedToken {
  std::string content;
  bool special = false;
};

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error("cannot open '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) return error("cannot read '" + path + "'");
  return ss.str();
}

const json* field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string string_field(const json& obj, const char* key) {
  const json* v = field(obj, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

// A token named in tokenizer_config.json: "text" or {"content": "text"}.
std::optional<std::string> token_text(const json* v) {
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) {
    if (const json* c = field(*v, "content"); c && c->is_string()) return c->get<std::string>();
  }
  return std::nullopt;
}

// convert_hf_to_gguf.py's does_token_look_special.
bool looks_special(std::string_view t) {
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (t.starts_with("<|") && t.ends_with("|>")) return true;
  if (t.starts_with("<\xEF\xBD\x9C") && t.ends_with("\xEF\xBD\x9C>")) return true;  // <｜ ... ｜>
  return t.starts_with("<unused") && t.ends_with(">");
}

bool is_byte_token(std::string_view t) {  // "<0xXX>"
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); };
  return t.size() == 6 && t.starts_with("<0x") && t.back() == '>' && hex(t[3]) && hex(t[4]);
}

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The 256 single-byte tokens of a GPT-2 byte-level vocabulary: printable bytes stand for
// themselves, the others for code points 256, 257, ... in byte order.
std::vector<std::string> byte_level_alphabet() {
  std::vector<std::string> out(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    append_utf8(out[b], printable ? b : next++);
  }
  return out;
}

// Picks tokenizer.ggml.pre for a byte-level BPE from its pre_tokenizer.
Result<std::string> detect_bpe_pre(const json& pre) {
  std::vector<const json*> steps;
  if (string_field(pre, "type") == "Sequence") {
    const json* list = field(pre, "pretokenizers");
    if (!list || !list->is_array()) return error("tokenizer.json: pre_tokenizer Sequence without 'pretokenizers'");
    for (const json& s : *list) steps.push_back(&s);
  } else {
    steps.push_back(&pre);
  }
  std::string split_regex;
  bool byte_level = false, byte_level_regex = false, digits = false;
  for (const json* s : steps) {
    const std::string type = string_field(*s, "type");
    if (type == "ByteLevel") {
      byte_level = true;
      const json* use_regex = field(*s, "use_regex");
      byte_level_regex = !use_regex || (use_regex->is_boolean() && use_regex->get<bool>());
    } else if (type == "Split") {
      const json* pattern = field(*s, "pattern");
      if (pattern) split_regex = string_field(*pattern, "Regex");
    } else if (type == "Digits") {
      digits = true;
    } else {
      return error("tokenizer.json: pre-tokenizer step '" + type + "' is not supported for byte-level BPE");
    }
  }
  if (!byte_level) return error("tokenizer.json: byte-level BPE without a ByteLevel pre-tokenizer");
  if (!split_regex.empty()) {
    for (const auto& [regex, name] : kKnownSplitRegexes)
      if (split_regex == regex) return std::string(name);
    return error("tokenizer.json: unknown pre-tokenizer regex '" + split_regex +
                 "' (known: the Qwen2 and Llama 3 regexes, Digits + ByteLevel, ByteLevel)");
  }
  if (digits && byte_level_regex) return std::string("smollm");
  if (byte_level_regex && steps.size() == 1) return std::string("gpt-2");
  return error("tokenizer.json: unsupported byte-level pre-tokenizer combination");
}

// add_bos / add_eos and a default bos from a TemplateProcessing post-processor
// ({"single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}]}).
void read_post_processor(const json& tokenizer, const std::optional<std::string>& bos_text,
                         const std::optional<std::string>& eos_text, std::optional<bool>* add_bos,
                         std::optional<bool>* add_eos) {
  const json* pp = field(tokenizer, "post_processor");
  if (!pp) return;
  std::vector<const json*> processors;
  if (const json* list = field(*pp, "processors"); list && list->is_array()) {
    for (const json& p : *list) processors.push_back(&p);
  } else {
    processors.push_back(pp);
  }
  for (const json* p : processors) {
    if (string_field(*p, "type") != "TemplateProcessing") continue;
    const json* single = field(*p, "single");
    if (!single || !single->is_array() || single->size() < 2) continue;
    auto special_id = [](const json& item) -> std::string {
      const json* st = field(item, "SpecialToken");
      return st ? string_field(*st, "id") : std::string();
    };
    if (const std::string first = special_id(single->front()); !first.empty())
      *add_bos = bos_text && first == *bos_text;
    if (const std::string last = special_id(single->back()); !last.empty())
      *add_eos = eos_text && last == *eos_text;
  }
}

class Converter {
 public:
  Converter(const HfTokenizerTexts& texts, const TokenizerGgufOptions& options) : texts_(texts), opt_(options) {}

  Result<TokenizerGguf> run() {
    LUMEN_ASSIGN_OR_RETURN(const json tok, gguf::parse_json(texts_.tokenizer_json, "tokenizer.json"));
    json config = json::object();
    if (!texts_.tokenizer_config_json.empty()) {
      LUMEN_ASSIGN_OR_RETURN(config, gguf::parse_json(texts_.tokenizer_config_json, "tokenizer_config.json"));
      if (!config.is_object()) return error("tokenizer_config.json is not a JSON object");
    }
    LUMEN_TRY(read_vocab(tok));
    LUMEN_TRY(choose_family(tok));
    LUMEN_TRY(renumber());
    read_special_tokens(tok, config);
    build_tokens();
    if (out_.model == "gpt2") LUMEN_TRY(read_merges());
    emit(config);
    return std::move(out_);
  }

 private:
  Status read_vocab(const json& tok) {
    const json* model = field(tok, "model");
    if (!model || !model->is_object()) return error("tokenizer.json: missing object 'model'");
    model_ = model;
    const std::string type = string_field(*model, "type");
    if (!type.empty() && type != "BPE")
      return error("tokenizer.json: model type '" + type + "' is not supported (only BPE)");
    const json* vocab = field(*model, "vocab");
    if (!vocab || !vocab->is_object()) return error("tokenizer.json: model.vocab must be an object");
    for (const auto& [text, id] : vocab->items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokens)
        return error("tokenizer.json: model.vocab['" + text + "'] is not a token id below 2^24");
      set_token(id.get<int64_t>(), text);
    }
    n_base_ = static_cast<int64_t>(texts_by_id_.size());
    if (const json* added = field(tok, "added_tokens"); added && added->is_array()) {
      for (const json& a : *added) {
        const json* id = field(a, "id");
        const json* content = field(a, "content");
        if (!id || !id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() >= kMaxTokens ||
            !content || !content->is_string())
          return error("tokenizer.json: an added_tokens entry lacks a valid 'id' or 'content'");
        const int64_t i = id->get<int64_t>();
        const json* special = field(a, "special");
        added_[i] = AddedToken{content->get<std::string>(), special && special->is_boolean() && special->get<bool>()};
        set_token(i, content->get<std::string>());
      }
    }
    if (texts_by_id_.empty()) return error("tokenizer.json: empty vocabulary");
    n_tokenizer_ = static_cast<int64_t>(texts_by_id_.size());
    return Status();
  }

  void set_token(int64_t id, const std::string& text) {
    if (id >= static_cast<int64_t>(texts_by_id_.size())) {
      texts_by_id_.resize(id + 1);
      present_.resize(id + 1, false);
    }
    texts_by_id_[id] = text;
    present_[id] = true;
  }

  Status choose_family(const json& tok) {
    const json* byte_fallback = field(*model_, "byte_fallback");
    const json* decoder = field(tok, "decoder");
    const bool spm_like = byte_fallback && byte_fallback->is_boolean() && byte_fallback->get<bool>() && decoder &&
                          string_field(*decoder, "type") == "Sequence";
    if (spm_like) {
      out_.model = "llama";
      out_.pre = "default";
      return Status();
    }
    const json* pre = field(tok, "pre_tokenizer");
    if (!pre) return error("tokenizer.json: a BPE without byte_fallback needs a ByteLevel pre_tokenizer");
    out_.model = "gpt2";
    LUMEN_ASSIGN_OR_RETURN(out_.pre, detect_bpe_pre(*pre));
    return Status();
  }

  // Old id -> new id. Identity unless the model's vocabulary is smaller than the tokenizer's.
  Status renumber() {
    new_id_.assign(texts_by_id_.size(), -1);
    const int64_t n_target = opt_.n_vocab > 0 ? opt_.n_vocab : n_tokenizer_;
    if (n_target >= n_tokenizer_) {
      for (size_t i = 0; i < new_id_.size(); ++i) new_id_[i] = present_[i] ? static_cast<int64_t>(i) : -1;
      n_out_ = n_target;
      return Status();
    }
    // Truncate: regular tokens first (ids below the added block), then the added block.
    std::vector<int64_t> tail;  // added tokens beyond the base vocabulary, in id order
    for (const auto& [id, a] : added_)
      if (id >= n_base_) tail.push_back(id);
    const int64_t n_regular = n_target - static_cast<int64_t>(tail.size());
    if (n_regular < 1)
      return error("model vocabulary " + std::to_string(n_target) + " is too small for the tokenizer's " +
                   std::to_string(tail.size()) + " added tokens");
    int64_t next = 0;
    for (int64_t id = 0; id < n_base_ && next < n_regular; ++id)
      if (present_[id]) new_id_[id] = next++;
    for (int64_t id : tail) new_id_[id] = next++;
    n_out_ = n_target;
    if (out_.model == "gpt2") {
      std::unordered_set<std::string_view> kept;
      for (size_t i = 0; i < new_id_.size(); ++i)
        if (new_id_[i] >= 0) kept.insert(texts_by_id_[i]);
      int n_missing = 0;
      for (const std::string& b : byte_level_alphabet()) n_missing += kept.count(b) ? 0 : 1;
      if (n_missing > 0)
        return error("model vocabulary " + std::to_string(n_target) + " is too small for this tokenizer: " +
                     std::to_string(n_missing) + " of the 256 byte tokens would be dropped");
    }
    return Status();
  }

  int64_t id_of_added(const std::string& text) const {  // llama.cpp looks in added_tokens only
    for (const auto& [id, a] : added_)
      if (a.content == text) return new_id_[id];
    return -1;
  }

  void read_special_tokens(const json& tok, const json& config) {
    std::optional<std::string> role_text[kNumRoles];
    for (size_t r = 0; r < kNumRoles; ++r)
      role_text[r] = token_text(field(config, (std::string(kRoles[r].name) + "_token").c_str()));
    read_post_processor(tok, role_text[0], role_text[1], &add_bos_, &add_eos_);
    if (const json* v = field(config, "add_bos_token"); v && v->is_boolean()) add_bos_ = v->get<bool>();
    if (const json* v = field(config, "add_eos_token"); v && v->is_boolean()) add_eos_ = v->get<bool>();
    const int64_t fallback[kNumRoles] = {opt_.bos_id, opt_.eos_id, -1, -1, opt_.pad_id, -1, -1};
    for (size_t r = 0; r < kNumRoles; ++r) {
      int64_t id = role_text[r] ? id_of_added(*role_text[r]) : -1;
      if (id < 0 && fallback[r] >= 0 && fallback[r] < static_cast<int64_t>(new_id_.size())) id = new_id_[fallback[r]];
      if (id >= 0 && id < n_out_) role_id_[r] = id;
    }
    // transformers' all_special_ids: the role tokens plus additional_special_tokens.
    for (size_t r = 0; r < kNumRoles; ++r)
      if (role_id_[r] >= 0) special_ids_.insert(role_id_[r]);
    if (const json* extra = field(config, "additional_special_tokens"); extra && extra->is_array()) {
      for (const json& e : *extra)
        if (auto t = token_text(&e)) {
          const int64_t id = id_of_added(*t);
          if (id >= 0) special_ids_.insert(id);
        }
    }
  }

  void build_tokens() {
    tokens_.assign(n_out_, std::string());
    types_.assign(n_out_, kUnused);
    std::vector<bool> filled(n_out_, false);
    for (size_t old_id = 0; old_id < new_id_.size(); ++old_id) {
      const int64_t id = new_id_[old_id];
      if (id < 0) continue;
      std::string text = texts_by_id_[old_id];
      const auto added = added_.find(static_cast<int64_t>(old_id));
      int64_t type = kNormal;
      if (out_.model == "gpt2") {
        if (added != added_.end()) {
          if (added->second.special || looks_special(text)) {
            type = kControl;
          } else {
            type = kUserDefined;
            // pre-normalize user-defined spaces ("▁" -> " "), as the converter does
            for (size_t p = 0; (p = text.find("\xE2\x96\x81", p)) != std::string::npos;) text.replace(p, 3, " ");
          }
        }
      } else if (is_byte_token(text)) {
        type = kByte;
      } else if (special_ids_.count(id)) {
        type = kControl;
      } else if (added != added_.end() && static_cast<int64_t>(old_id) >= n_base_) {
        type = kUserDefined;
      }
      tokens_[id] = std::move(text);
      types_[id] = type;
      filled[id] = true;
    }
    for (int64_t id = 0; id < n_out_; ++id) {
      if (filled[id]) continue;
      tokens_[id] = "[PAD" + std::to_string(id) + "]";
      types_[id] = kUnused;
      ++out_.n_tokens_padded;
    }
  }

  Status read_merges() {
    const json* merges = field(*model_, "merges");
    if (!merges || !merges->is_array()) return error("tokenizer.json: byte-level BPE without model.merges");
    const bool truncated = n_out_ < n_tokenizer_;
    std::unordered_set<std::string_view> kept;
    if (truncated)
      for (size_t i = 0; i < new_id_.size(); ++i)
        if (new_id_[i] >= 0) kept.insert(texts_by_id_[i]);
    merges_.reserve(merges->size());
    for (const json& m : *merges) {
      std::string left, right;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) return error("tokenizer.json: merge '" + s + "' is not 'a b'");
        left = s.substr(0, sp);
        right = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        // [a, b] (transformers >= 4.45); a space inside a part is written as U+0120 like
        // the converter does, so "a b" stays splittable.
        auto enc = [](std::string s) {
          for (size_t p = 0; (p = s.find(' ', p)) != std::string::npos;) s.replace(p, 1, "\xC4\xA0");
          return s;
        };
        left = enc(m[0].get<std::string>());
        right = enc(m[1].get<std::string>());
      } else {
        return error("tokenizer.json: unknown merges format");
      }
      if (truncated && (!kept.count(left) || !kept.count(right) || !kept.count(left + right))) continue;
      merges_.push_back(left + " " + right);
    }
    return Status();
  }

  void emit(const json& config) {
    auto& md = out_.metadata;
    md.emplace_back("tokenizer.ggml.model", MetaValue::of_string(out_.model));
    md.emplace_back("tokenizer.ggml.pre", MetaValue::of_string(out_.pre));
    md.emplace_back("tokenizer.ggml.tokens", MetaValue::of_string_array(std::move(tokens_)));
    if (out_.model == "llama")
      md.emplace_back("tokenizer.ggml.scores",
                      MetaValue::of_float_array(ValueType::kF32, std::vector<double>(n_out_, -1000.0)));
    md.emplace_back("tokenizer.ggml.token_type", MetaValue::of_int_array(ValueType::kI32, std::move(types_)));
    if (out_.model == "gpt2") md.emplace_back("tokenizer.ggml.merges", MetaValue::of_string_array(std::move(merges_)));
    for (size_t r = 0; r < kNumRoles; ++r)
      if (role_id_[r] >= 0) md.emplace_back(kRoles[r].gguf_key, MetaValue::of_u32(static_cast<uint32_t>(role_id_[r])));
    if (add_bos_) md.emplace_back("tokenizer.ggml.add_bos_token", MetaValue::of_bool(*add_bos_));
    if (add_eos_) md.emplace_back("tokenizer.ggml.add_eos_token", MetaValue::of_bool(*add_eos_));
    // Chat template: tokenizer_config.json's (a string, or a list of named templates), else
    // chat_template.jinja.
    bool have_template = false;
    if (const json* t = field(config, "chat_template")) {
      if (t->is_string()) {
        md.emplace_back("tokenizer.chat_template", MetaValue::of_string(t->get<std::string>()));
        have_template = true;
      } else if (t->is_array()) {
        for (const json& e : *t) {
          const std::string name = string_field(e, "name");
          const json* text = field(e, "template");
          if (name.empty() || !text || !text->is_string()) continue;
          md.emplace_back(name == "default" ? "tokenizer.chat_template" : "tokenizer.chat_template." + name,
                          MetaValue::of_string(text->get<std::string>()));
          have_template |= name == "default";
        }
      }
    }
    if (!have_template && !texts_.chat_template.empty())
      md.emplace_back("tokenizer.chat_template", MetaValue::of_string(texts_.chat_template));
    out_.n_tokens_tokenizer = n_tokenizer_;
    out_.n_tokens_kept = 0;
    for (int64_t id : new_id_) out_.n_tokens_kept += id >= 0 ? 1 : 0;
  }

  const HfTokenizerTexts& texts_;
  const TokenizerGgufOptions& opt_;
  const json* model_ = nullptr;
  std::vector<std::string> texts_by_id_;  // by tokenizer id
  std::vector<bool> present_;
  std::map<int64_t, AddedToken> added_;   // by tokenizer id
  int64_t n_base_ = 0;       // size of model.vocab's id range
  int64_t n_tokenizer_ = 0;  // max id + 1
  std::vector<int64_t> new_id_;  // tokenizer id -> output id, -1 when dropped
  int64_t n_out_ = 0;
  int64_t role_id_[kNumRoles] = {-1, -1, -1, -1, -1, -1, -1};
  std::unordered_set<int64_t> special_ids_;  // output ids
  std::optional<bool> add_bos_;
  std::optional<bool> add_eos_;
  std::vector<std::string> tokens_;
  std::vector<int64_t> types_;
  std::vector<std::string> merges_;
  TokenizerGguf out_;
};

}  // namespace

Result<HfTokenizerTexts> read_hf_tokenizer_files(const std::string& path) {
  HfTokenizerTexts t;
  LUMEN_ASSIGN_OR_RETURN(t.tokenizer_json, read_file(path));
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (file_exists(dir + "/tokenizer_config.json")) {
    LUMEN_ASSIGN_OR_RETURN(t.tokenizer_config_json, read_file(dir + "/tokenizer_config.json"));
  }
  if (file_exists(dir + "/chat_template.jinja")) {
    LUMEN_ASSIGN_OR_RETURN(t.chat_template, read_file(dir + "/chat_template.jinja"));
  }
  return t;
}

Result<TokenizerGguf> hf_tokenizer_to_gguf(const HfTokenizerTexts& texts, const TokenizerGgufOptions& options) {
  try {
    return Converter(texts, options).run();
  } catch (const std::exception& e) {  // nlohmann type errors, bad_alloc: never escape the layer
    return error(std::string("tokenizer.json: ") + e.what());
  }
}

}  // namespace lumen::convert
