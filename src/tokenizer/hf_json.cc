// Loading a Hugging Face tokenizer.json (+ tokenizer_config.json) into a TokenizerImpl.
// nlohmann::json exceptions stay inside this file: every failure becomes a Status that names
// the field at fault.
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "tokenizer/hf_tokenizer.h"

namespace lumen::tok {
namespace {

using json = nlohmann::json;

// Token ids from the file must stay below this and below 2 x (number of tokens) + 64Ki, so a
// hostile file cannot make the vocab table huge with a few sparse ids.
constexpr int32_t kMaxVocab = 1 << 22;

bool plausible_id(int64_t id, size_t n_entries) {
  return id >= 0 && id < kMaxVocab && static_cast<uint64_t>(id) < 2 * static_cast<uint64_t>(n_entries) + 65536;
}
// HF's ByteLevel pre-tokenizer regex (GPT-2 with a final \s+).
constexpr const char* kHfByteLevelRegex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

const json* field(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}
std::string get_string(const json& obj, const char* key, const std::string& def = "") {
  const json* v = field(obj, key);
  return v && v->is_string() ? v->get<std::string>() : def;
}
bool get_bool(const json& obj, const char* key, bool def) {
  const json* v = field(obj, key);
  return v && v->is_boolean() ? v->get<bool>() : def;
}
// A token given as "text" or {"content": "text"} (tokenizer_config.json).
std::string token_content(const json* v) {
  if (!v) return "";
  if (v->is_string()) return v->get<std::string>();
  return get_string(*v, "content");
}

// Split / Replace patterns: {"String": "..."} (literal) or {"Regex": "..."}.
Result<Regex> parse_pattern(const json& obj, const std::string& where) {
  const json* pattern = field(obj, "pattern");
  if (!pattern) return error(where + ": 'pattern' is missing");
  if (const json* s = field(*pattern, "String"); s && s->is_string()) return Regex::compile(s->get<std::string>(), true);
  if (const json* r = field(*pattern, "Regex"); r && r->is_string()) return Regex::compile(r->get<std::string>());
  return error(where + ": 'pattern' must be {\"String\": ...} or {\"Regex\": ...}");
}

Result<SplitBehavior> parse_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return error(where + ": unknown split behavior '" + name + "'");
}

Status parse_normalizer(const json& n, std::vector<HfNormalizer>* out) {
  const std::string type = get_string(n, "type");
  const std::string where = "tokenizer.json normalizer '" + type + "'";
  HfNormalizer norm;
  if (type == "Sequence") {
    const json* list = field(n, "normalizers");
    if (!list || !list->is_array()) return error(where + ": 'normalizers' must be an array");
    for (const json& item : *list) LUMEN_TRY(parse_normalizer(item, out));
    return Status();
  } else if (type == "Prepend") {
    norm.kind = HfNormalizer::Kind::kPrepend;
    norm.content = get_string(n, "prepend");
  } else if (type == "Replace") {
    norm.kind = HfNormalizer::Kind::kReplace;
    LUMEN_ASSIGN_OR_RETURN(norm.pattern, parse_pattern(n, where));
    norm.content = get_string(n, "content");
  } else if (type == "NFC" || type == "NFKC") {
    // NFKC's compatibility mappings are not implemented: treated as NFC.
    if (type == "NFKC") LUMEN_LOG_WARN("tokenizer: NFKC normalizer treated as NFC");
    norm.kind = HfNormalizer::Kind::kNfc;
  } else if (type == "NFD" || type == "NFKD") {
    if (type == "NFKD") LUMEN_LOG_WARN("tokenizer: NFKD normalizer treated as NFD");
    norm.kind = HfNormalizer::Kind::kNfd;
  } else if (type == "Lowercase") {
    norm.kind = HfNormalizer::Kind::kLowercase;
  } else if (type == "Strip") {
    norm.kind = HfNormalizer::Kind::kStrip;
    norm.left = get_bool(n, "strip_left", true);
    norm.right = get_bool(n, "strip_right", true);
  } else if (type == "StripAccents") {
    norm.kind = HfNormalizer::Kind::kStripAccents;
    LUMEN_ASSIGN_OR_RETURN(norm.pattern, Regex::compile("\\p{Mn}"));
  } else {
    return error(where + " is not supported");
  }
  out->push_back(std::move(norm));
  return Status();
}

Result<HfPreTokenizer> make_split(const std::string& pattern, SplitBehavior behavior, bool invert) {
  HfPreTokenizer pt;
  pt.kind = HfPreTokenizer::Kind::kSplit;
  LUMEN_ASSIGN_OR_RETURN(pt.pattern, Regex::compile(pattern));
  pt.behavior = behavior;
  pt.invert = invert;
  return pt;
}

Status parse_pre_tokenizer(const json& p, std::vector<HfPreTokenizer>* out) {
  const std::string type = get_string(p, "type");
  const std::string where = "tokenizer.json pre_tokenizer '" + type + "'";
  constexpr const char* kPunct = "[\\p{P}!-/:-@\\[-`{-~]";
  if (type == "Sequence") {
    const json* list = field(p, "pretokenizers");
    if (!list || !list->is_array()) return error(where + ": 'pretokenizers' must be an array");
    for (const json& item : *list) LUMEN_TRY(parse_pre_tokenizer(item, out));
    return Status();
  }
  if (type == "ByteLevel") {
    HfPreTokenizer pt;
    pt.kind = HfPreTokenizer::Kind::kByteLevel;
    pt.add_prefix_space = get_bool(p, "add_prefix_space", true);
    pt.use_regex = get_bool(p, "use_regex", true);
    LUMEN_ASSIGN_OR_RETURN(pt.pattern, Regex::compile(kHfByteLevelRegex));
    out->push_back(std::move(pt));
  } else if (type == "Split") {
    HfPreTokenizer pt;
    pt.kind = HfPreTokenizer::Kind::kSplit;
    LUMEN_ASSIGN_OR_RETURN(pt.pattern, parse_pattern(p, where));
    LUMEN_ASSIGN_OR_RETURN(pt.behavior, parse_behavior(get_string(p, "behavior", "Isolated"), where));
    pt.invert = get_bool(p, "invert", false);
    out->push_back(std::move(pt));
  } else if (type == "Metaspace") {
    HfPreTokenizer pt;
    pt.kind = HfPreTokenizer::Kind::kMetaspace;
    pt.replacement = get_string(p, "replacement", "\xE2\x96\x81");
    if (pt.replacement.empty()) return error(where + ": 'replacement' is empty");
    const std::string scheme = get_string(p, "prepend_scheme");
    if (scheme.empty()) {  // older files: add_prefix_space
      pt.prepend = get_bool(p, "add_prefix_space", true) ? HfPreTokenizer::Prepend::kAlways
                                                        : HfPreTokenizer::Prepend::kNever;
    } else if (scheme == "always") {
      pt.prepend = HfPreTokenizer::Prepend::kAlways;
    } else if (scheme == "first") {
      pt.prepend = HfPreTokenizer::Prepend::kFirst;
    } else if (scheme == "never") {
      pt.prepend = HfPreTokenizer::Prepend::kNever;
    } else {
      return error(where + ": unknown prepend_scheme '" + scheme + "'");
    }
    pt.split = get_bool(p, "split", true);
    LUMEN_ASSIGN_OR_RETURN(pt.pattern, Regex::compile(pt.replacement, true));
    out->push_back(std::move(pt));
  } else if (type == "Digits") {
    const bool individual = get_bool(p, "individual_digits", false);
    LUMEN_ASSIGN_OR_RETURN(auto pt, make_split("\\p{N}", individual ? SplitBehavior::kIsolated
                                                                     : SplitBehavior::kContiguous, false));
    out->push_back(std::move(pt));
  } else if (type == "Whitespace") {
    LUMEN_ASSIGN_OR_RETURN(auto pt, make_split("\\w+|[^\\w\\s]+", SplitBehavior::kRemoved, true));
    out->push_back(std::move(pt));
  } else if (type == "WhitespaceSplit") {
    LUMEN_ASSIGN_OR_RETURN(auto pt, make_split("\\s+", SplitBehavior::kRemoved, false));
    out->push_back(std::move(pt));
  } else if (type == "Punctuation") {
    LUMEN_ASSIGN_OR_RETURN(auto behavior, parse_behavior(get_string(p, "behavior", "Isolated"), where));
    LUMEN_ASSIGN_OR_RETURN(auto pt, make_split(kPunct, behavior, false));
    out->push_back(std::move(pt));
  } else if (type == "BertPreTokenizer") {
    LUMEN_ASSIGN_OR_RETURN(auto ws, make_split("\\s+", SplitBehavior::kRemoved, false));
    LUMEN_ASSIGN_OR_RETURN(auto punct, make_split(kPunct, SplitBehavior::kIsolated, false));
    out->push_back(std::move(ws));
    out->push_back(std::move(punct));
  } else {
    return error(where + " is not supported");
  }
  return Status();
}

// Decoder facts the shared Vocab needs: byte-level pieces? does decode drop a leading space?
void scan_decoder(const json& d, bool* byte_level, bool* strip_space) {
  const std::string type = get_string(d, "type");
  if (type == "Sequence") {
    if (const json* list = field(d, "decoders"); list && list->is_array()) {
      for (const json& item : *list) scan_decoder(item, byte_level, strip_space);
    }
  } else if (type == "ByteLevel") {
    *byte_level = true;
  } else if (type == "Strip") {
    const json* start = field(d, "start");
    if (get_string(d, "content") == " " && start && start->is_number_integer() && start->get<int64_t>() >= 1) {
      *strip_space = true;
    }
  } else if (type == "Metaspace") {
    const std::string scheme = get_string(d, "prepend_scheme");
    *strip_space = scheme.empty() ? get_bool(d, "add_prefix_space", true) : scheme != "never";
  }
}

// Token ids named by a post-processor (TemplateProcessing / Bert / Roberta / Sequence).
Status scan_post_processor(const json& p, const Vocab& vocab, std::vector<int32_t>* prefix,
                           std::vector<int32_t>* suffix) {
  const std::string type = get_string(p, "type");
  const std::string where = "tokenizer.json post_processor '" + type + "'";
  if (type == "Sequence") {
    if (const json* list = field(p, "processors"); list && list->is_array()) {
      for (const json& item : *list) LUMEN_TRY(scan_post_processor(item, vocab, prefix, suffix));
    }
  } else if (type == "TemplateProcessing") {
    const json* single = field(p, "single");
    const json* specials = field(p, "special_tokens");
    if (!single || !single->is_array()) return error(where + ": 'single' must be an array");
    bool after_sequence = false;
    for (const json& item : *single) {
      if (field(item, "Sequence")) {
        after_sequence = true;
        continue;
      }
      const json* st = field(item, "SpecialToken");
      if (!st) return error(where + ": unknown template item " + item.dump());
      const std::string name = get_string(*st, "id");
      const json* entry = specials ? field(*specials, name.c_str()) : nullptr;
      const json* ids = entry ? field(*entry, "ids") : nullptr;
      if (!ids || !ids->is_array()) return error(where + ": special token '" + name + "' has no ids");
      for (const json& id : *ids) {
        const int64_t v = id.get<int64_t>();
        if (v < 0 || v >= vocab.n_tokens()) return error(where + ": id " + std::to_string(v) + " is out of range");
        (after_sequence ? suffix : prefix)->push_back(static_cast<int32_t>(v));
      }
    }
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const json* pair = field(p, key);
      if (!pair || !pair->is_array() || pair->size() != 2) return error(where + ": '" + key + "' must be [text, id]");
      const int64_t v = (*pair)[1].get<int64_t>();
      if (v < 0 || v >= vocab.n_tokens()) return error(where + ": id " + std::to_string(v) + " is out of range");
      (std::string(key) == "cls" ? prefix : suffix)->push_back(static_cast<int32_t>(v));
    }
  } else if (type != "ByteLevel") {
    LUMEN_LOG_WARN("tokenizer: %s is not supported; no special tokens are added", where.c_str());
  }
  return Status();
}

Status load_model(const json& model, Vocab* vocab, HfPipeline* hf) {
  const std::string type = get_string(model, "type", field(model, "merges") ? "BPE" : "");
  if (type != "BPE") {
    return error("tokenizer.json: model type '" + type + "' is not supported (lumen supports BPE)");
  }
  const json* v = field(model, "vocab");
  if (!v || !v->is_object()) return error("tokenizer.json: 'model.vocab' must be an object");
  int32_t n = 0;
  for (auto it = v->begin(); it != v->end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    if (!plausible_id(id, v->size())) return error("tokenizer.json: model.vocab id " + std::to_string(id) + " is out of range");
    n = std::max(n, static_cast<int32_t>(id) + 1);
  }
  vocab->tokens.resize(static_cast<size_t>(n));
  for (TokenData& t : vocab->tokens) {
    t.type = TokenType::kUndefined;
    t.in_model = false;
  }
  vocab->text_to_id.reserve(static_cast<size_t>(n));
  hf->byte_fallback = get_bool(model, "byte_fallback", false);
  for (auto it = v->begin(); it != v->end(); ++it) {
    const auto id = static_cast<int32_t>(it.value().get<int64_t>());
    TokenData& t = vocab->tokens[id];
    t.text = it.key();
    t.type = hf->byte_fallback && parse_byte_token(t.text) >= 0 ? TokenType::kByte : TokenType::kNormal;
    t.in_model = true;
    vocab->text_to_id.emplace(t.text, id);
  }
  hf->fuse_unk = get_bool(model, "fuse_unk", false);
  hf->ignore_merges = get_bool(model, "ignore_merges", false);
  hf->continuing_subword_prefix = get_string(model, "continuing_subword_prefix");
  hf->end_of_word_suffix = get_string(model, "end_of_word_suffix");
  if (const std::string unk = get_string(model, "unk_token"); !unk.empty()) {
    hf->unk_id = vocab->find(unk);
    if (hf->unk_id < 0) return error("tokenizer.json: model.unk_token '" + unk + "' is not in the vocab");
    vocab->unk_id = hf->unk_id;
    vocab->tokens[hf->unk_id].type = TokenType::kUnknown;
  }
  hf->byte_fallback_ids.assign(256, -1);
  if (hf->byte_fallback) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      hf->byte_fallback_ids[b] = vocab->find(std::string_view(name, 6));
    }
  }

  const json* merges = field(model, "merges");
  if (!merges || !merges->is_array()) return error("tokenizer.json: 'model.merges' must be an array");
  const size_t prefix_len = hf->continuing_subword_prefix.size();
  size_t n_skipped = 0;
  hf->merges.reserve(merges->size());
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const json& m = (*merges)[rank];
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) return error("tokenizer.json: merge " + std::to_string(rank) + " '" + s + "' has no space");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      return error("tokenizer.json: merge " + std::to_string(rank) + " must be \"a b\" or [a, b]");
    }
    const int32_t ia = vocab->find(a), ib = vocab->find(b);
    std::string merged = a;
    merged.append(b.size() >= prefix_len && b.compare(0, prefix_len, hf->continuing_subword_prefix) == 0
                      ? b.substr(prefix_len) : b);
    const int32_t im = vocab->find(merged);
    if (ia < 0 || ib < 0 || im < 0) {
      ++n_skipped;  // HF refuses such files; we drop the merge
      continue;
    }
    // As HF's HashMap collect: a later duplicate pair overrides an earlier one.
    hf->merges.insert_or_assign((static_cast<uint64_t>(static_cast<uint32_t>(ia)) << 32) | static_cast<uint32_t>(ib),
                                std::make_pair(static_cast<int32_t>(rank), im));
  }
  if (n_skipped > 0) LUMEN_LOG_WARN("tokenizer: %zu merges name tokens outside the vocab; ignored", n_skipped);
  return Status();
}

Status load_added_tokens(const json& root, Vocab* vocab) {
  const json* added = field(root, "added_tokens");
  if (!added) return Status();
  if (!added->is_array()) return error("tokenizer.json: 'added_tokens' must be an array");
  for (const json& a : *added) {
    const int64_t id = a.at("id").get<int64_t>();
    if (!plausible_id(id, static_cast<size_t>(vocab->n_tokens()) + added->size())) {
      return error("tokenizer.json: added token id " + std::to_string(id) + " is out of range");
    }
    const std::string content = get_string(a, "content");
    if (content.empty()) return error("tokenizer.json: added token " + std::to_string(id) + " has no content");
    if (id >= vocab->n_tokens()) {
      const size_t old = vocab->tokens.size();
      vocab->tokens.resize(static_cast<size_t>(id) + 1);
      for (size_t i = old; i < vocab->tokens.size(); ++i) {
        vocab->tokens[i].type = TokenType::kUndefined;
        vocab->tokens[i].in_model = false;
      }
    }
    TokenData& t = vocab->tokens[id];
    t.text = content;
    t.type = get_bool(a, "special", false) ? TokenType::kControl : TokenType::kUserDefined;
    t.added = true;
    t.lstrip = get_bool(a, "lstrip", false);
    t.rstrip = get_bool(a, "rstrip", false);
    t.single_word = get_bool(a, "single_word", false);
    t.normalized = get_bool(a, "normalized", !get_bool(a, "special", false));
    vocab->text_to_id.emplace(content, static_cast<int32_t>(id));  // model tokens keep their text
  }
  return Status();
}

Result<std::unique_ptr<TokenizerImpl>> load(std::string_view tokenizer_json, std::string_view config_json) {
  const json root = json::parse(tokenizer_json);
  json config = json::object();
  if (!config_json.empty()) config = json::parse(config_json);

  auto impl = std::make_unique<TokenizerImpl>();
  impl->family = Family::kHf;
  impl->model_name = "hf-bpe";
  impl->hf = std::make_unique<HfPipeline>();
  HfPipeline& hf = *impl->hf;
  Vocab& vocab = impl->vocab;

  const json* model = field(root, "model");
  if (!model) return error("tokenizer.json: 'model' is missing");
  LUMEN_TRY(load_model(*model, &vocab, &hf));
  LUMEN_TRY(load_added_tokens(root, &vocab));
  if (const json* n = field(root, "normalizer")) LUMEN_TRY(parse_normalizer(*n, &hf.normalizers));
  if (const json* p = field(root, "pre_tokenizer")) LUMEN_TRY(parse_pre_tokenizer(*p, &hf.pre_tokenizers));

  bool byte_level = false, strip_space = false;
  if (const json* d = field(root, "decoder")) scan_decoder(*d, &byte_level, &strip_space);
  vocab.piece_style = byte_level ? PieceStyle::kByteLevel : PieceStyle::kMetaspace;
  vocab.unescape_user_defined = true;
  vocab.decode_strip_space = strip_space;
  vocab.clean_spaces = get_bool(config, "clean_up_tokenization_spaces", false);
  vocab.eog_names_force_control = false;  // tokenizer.json says which added tokens are special

  if (const json* p = field(root, "post_processor")) {
    LUMEN_TRY(scan_post_processor(*p, vocab, &hf.prefix_ids, &hf.suffix_ids));
  }
  auto find_config_token = [&](const char* key) -> int32_t {
    const std::string text = token_content(field(config, key));
    return text.empty() ? -1 : vocab.find(text);
  };
  vocab.bos_id = find_config_token("bos_token");
  vocab.eos_id = find_config_token("eos_token");
  vocab.pad_id = find_config_token("pad_token");
  if (vocab.unk_id < 0) vocab.unk_id = find_config_token("unk_token");  // reported; the model emits none
  if (vocab.bos_id < 0 && !hf.prefix_ids.empty()) vocab.bos_id = hf.prefix_ids.front();
  // transformers' Llama-style tokenizers rebuild the post-processor from these flags.
  if (const json* v = field(config, "add_bos_token"); v && v->is_boolean()) {
    hf.prefix_ids.clear();
    if (v->get<bool>() && vocab.bos_id >= 0) hf.prefix_ids.push_back(vocab.bos_id);
  }
  if (const json* v = field(config, "add_eos_token"); v && v->is_boolean()) {
    hf.suffix_ids.clear();
    if (v->get<bool>() && vocab.eos_id >= 0) hf.suffix_ids.push_back(vocab.eos_id);
  }
  vocab.add_bos = !hf.prefix_ids.empty() && hf.prefix_ids.front() == vocab.bos_id;
  vocab.add_eos = !hf.suffix_ids.empty() && hf.suffix_ids.back() == vocab.eos_id;

  if (const json* t = field(config, "chat_template")) {
    if (t->is_string()) {
      impl->chat_template = t->get<std::string>();
    } else if (t->is_array()) {  // [{name, template}, ...]: the "default" one, else the first
      for (const json& entry : *t) {
        if (get_string(entry, "name") == "default" || impl->chat_template.empty()) {
          impl->chat_template = get_string(entry, "template");
        }
      }
    }
  }
  finish_loading(impl.get());
  return impl;
}

}  // namespace

Result<std::unique_ptr<TokenizerImpl>> load_from_hf_json(std::string_view tokenizer_json,
                                                         std::string_view tokenizer_config_json) {
  try {
    return load(tokenizer_json, tokenizer_config_json);
  } catch (const std::exception& e) {
    return error(std::string("tokenizer.json / tokenizer_config.json: ") + e.what());
  }
}

}  // namespace lumen::tok
