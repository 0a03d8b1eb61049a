#include "tokenizer/vocab.h"

#include <algorithm>
#include <array>

#include "tokenizer/unicode.h"

namespace lumen::tok {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 "▁"

std::string byte_level_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const int b = unicode_to_byte(decode_utf8(text, &pos));
    if (b < 0) return std::string(text);  // not byte-level text: keep it as is (HF ByteLevel decoder)
    out.push_back(static_cast<char>(b));
  }
  return out;
}

std::string compute_piece(const TokenData& t, PieceStyle style, bool unescape_user_defined) {
  switch (t.type) {
    case TokenType::kUserDefined:
      return unescape_user_defined && style == PieceStyle::kMetaspace ? unescape_metaspace(t.text) : t.text;
    case TokenType::kControl:
    case TokenType::kUnknown:
      return t.text;
    case TokenType::kNormal:
      return style == PieceStyle::kMetaspace ? unescape_metaspace(t.text) : byte_level_to_bytes(t.text);
    case TokenType::kByte: {
      const int b = parse_byte_token(t.text);
      return b >= 0 ? std::string(1, static_cast<char>(b)) : std::string();
    }
    case TokenType::kUnused:
    case TokenType::kUndefined:
      break;
  }
  return std::string();
}

}  // namespace

std::string unescape_metaspace(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    if (text.substr(pos, kMetaspace.size()) == kMetaspace) {
      out.push_back(' ');
      pos += kMetaspace.size();
    } else {
      out.push_back(text[pos++]);
    }
  }
  return out;
}

std::string escape_metaspace(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') {
      out.append(kMetaspace);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = text[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

void TokenIndex::build(const TextIdMap& map, const std::vector<std::string_view>& id_texts) {
  size_t n_slots = 16;
  while (n_slots < map.size() * 2) n_slots *= 2;  // load factor <= 1/2
  slots_.assign(n_slots, 0);
  mask_ = n_slots - 1;
  extra_.clear();
  for (const auto& [text, id] : map) {
    if (id < 0 || static_cast<size_t>(id) >= id_texts.size() || id_texts[id] != text) {
      extra_.emplace(text, id);
      continue;
    }
    const uint64_t h = hash(text);
    size_t i = h & mask_;
    while (slots_[i] != 0) i = (i + 1) & mask_;
    slots_[i] = (h >> 32 << 32) | (static_cast<uint64_t>(static_cast<uint32_t>(id)) + 1);
  }
}

void Vocab::finalize() {
  const int32_t n = n_tokens();
  // End-of-turn detection by name, as llama.cpp (its list; the first name found wins).
  static constexpr std::array<std::string_view, 7> kEotNames = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
      "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",  // DeepSeek
  };
  if (eot_id < 0) {
    for (std::string_view name : kEotNames) {
      if (const int32_t id = find(name); id >= 0) {
        eot_id = id;
        break;
      }
    }
  }
  eog.assign(static_cast<size_t>(n), 0);
  // llama.cpp marks these as end of generation and, for GGUF vocabs, forces them to control
  // tokens (so parse_special = false no longer splits them out). The FIM pad / repo /
  // file-separator names (Qwen and StarCoder spellings) are llama.cpp's FIM stop tokens.
  static constexpr std::array<std::string_view, 15> kEogNames = {
      "<|eot_id|>",  "<|im_end|>",    "<|end|>",     "<end_of_turn>", "<|endoftext|>",
      "<|eom_id|>",  "<EOT>",         "<|fim_pad|>", "<fim-pad>",     "<|fim_repo|>",
      "<|repo_name|>", "<fim-repo>",  "<REPO>",      "<|file_sep|>",  "<file_sep>",
  };
  auto force_control = [&](int32_t id) {
    if (eog_names_force_control) tokens[id].type = TokenType::kControl;
  };
  for (std::string_view name : kEogNames) {
    if (const int32_t id = find(name); id >= 0) {
      eog[id] = 1;
      force_control(id);
    }
  }
  if (valid_id(eot_id) && kEotNames.end() !=
      std::find(kEotNames.begin(), kEotNames.end(), std::string_view(tokens[eot_id].text))) {
    force_control(eot_id);
  }
  // Further end-of-text names, only when they are control tokens.
  for (std::string_view name : {std::string_view("<|end_of_text|>"), std::string_view("</s>")}) {
    if (const int32_t id = find(name); id >= 0 && tokens[id].type == TokenType::kControl) eog[id] = 1;
  }
  for (int32_t id : extra_eog_ids) {
    if (valid_id(id)) eog[id] = 1;
  }
  if (valid_id(eos_id)) eog[eos_id] = 1;
  if (valid_id(eot_id)) eog[eot_id] = 1;

  // The flat index; the loader's map is no longer needed.
  id_texts.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) id_texts[id] = tokens[id].text;
  index.build(text_to_id, id_texts);
  text_to_id = TextIdMap();

  pieces.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) pieces[id] = compute_piece(tokens[id], piece_style, unescape_user_defined);

  byte_ids.assign(256, -1);
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    int32_t id = find(std::string_view(name, 6));
    if (id < 0) id = find(std::string_view(std::string(1, static_cast<char>(b))));
    byte_ids[b] = id;
  }
}

std::string_view Vocab::piece(int32_t id, bool special) const {
  if (!valid_id(id)) return {};
  if (!special && is_control_or_unknown(id)) return {};
  return pieces[id];
}

std::string Vocab::detokenize(std::span<const int32_t> ids, bool remove_special) const {
  bool remove_space = decode_strip_space;
  if (remove_special && add_bos && !ids.empty() && ids.front() == bos_id) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (remove_special && add_eos && !ids.empty() && ids.back() == eos_id) ids = ids.first(ids.size() - 1);
  std::string text;
  for (int32_t id : ids) {
    std::string_view p = piece(id, /*special=*/false);
    if (remove_space && !p.empty() && p.front() == ' ') p.remove_prefix(1);
    remove_space = false;
    text.append(p);
  }
  if (clean_spaces) clean_up_spaces(&text);
  return text;
}

void clean_up_spaces(std::string* text) {
  std::string& s = *text;
  // Pass 1: " ?", " !", " .", " ," lose the space.
  std::string a;
  a.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char x = s[i];
    if (i > 0 && s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',') && !a.empty()) a.pop_back();
    a.push_back(x);
  }
  // Pass 2: a single apostrophe between spaces, " ' " -> "'".
  std::string b;
  b.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = a[i];
    if (i > 0 && x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
      if (!b.empty()) b.pop_back();
      b.push_back(x);
      a[++i] = '\0';  // drop the next space; llama.cpp also marks it, so it never counts as a space
      continue;
    }
    b.push_back(x);
  }
  // Pass 3: contractions " 's", " 'm", " 'll", " 're", " 've" lose the space (" 't", " 'd" keep it).
  std::string c;
  c.reserve(b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    const char x = b[i];
    if (i > 0 && b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
      const char x1 = b[i + 1];
      bool drop = x1 == 's' || x1 == 'm';
      if (!drop && x1 != 't' && x1 != 'd' && i + 2 < b.size()) {
        const char x2 = b[i + 2];
        drop = (x1 == 'l' && x2 == 'l') || (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e');
      }
      if (drop && !c.empty()) c.pop_back();
    }
    c.push_back(x);
  }
  s = std::move(c);
}

}  // namespace lumen::tok
