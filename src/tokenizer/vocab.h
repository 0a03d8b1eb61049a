// Vocab: the token table every tokenizer family shares (texts, scores, types, special ids,
// decode flags), plus llama.cpp's token_to_piece / detokenize semantics over it.
// Internal to the tokenizer layer. Immutable after finalize(); safe to share across threads.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lumen::tok {

struct StringHash {  // heterogeneous lookup: find(std::string_view) without a copy
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TextIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Token text -> id for the encoders' hot loops: open addressing over one flat array, so a
// lookup is one probe sequence plus one compare against the token's own text (the
// node-based map costs a pointer chase per lookup). Built once from the loader's map.
class TokenIndex {
 public:
  struct Token {
    std::string_view text;
    int32_t id;
  };
  void build(const TextIdMap& map, const std::vector<std::string_view>& id_texts);
  bool empty() const { return slots_.empty(); }
  int32_t find(std::string_view text, const std::vector<std::string_view>& id_texts) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash(text);
    const auto tag = static_cast<uint32_t>(h >> 32);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const uint64_t slot = slots_[i];
      if (slot == 0) break;
      if (static_cast<uint32_t>(slot >> 32) != tag) continue;
      const auto id = static_cast<int32_t>(static_cast<uint32_t>(slot) - 1);
      if (id_texts[id] == text) return id;
    }
    if (extra_.empty()) return -1;
    auto it = extra_.find(text);
    return it == extra_.end() ? -1 : it->second;
  }
  static uint64_t hash(std::string_view s) {  // FNV-1a, then a final mix for the low bits
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
    return h ^ (h >> 29);
  }

 private:
  std::vector<uint64_t> slots_;  // 0: empty; else (hash >> 32) << 32 | (id + 1)
  size_t mask_ = 0;
  TextIdMap extra_;  // keys that differ from their token's text (rare HF overrides)
};

// How the text of a normal token becomes bytes.
enum class PieceStyle : uint8_t {
  kMetaspace,  // SentencePiece / WordPiece: "▁" -> " ", byte tokens <0xXX> -> that byte
  kByteLevel,  // GPT-2 byte-level: each code point maps back to one byte
};

struct TokenData {
  std::string text;
  float score = 0.0f;
  TokenType type = TokenType::kNormal;
  bool lstrip = false;       // special-token matching also eats whitespace on the left
  bool rstrip = false;       // ... and on the right
  bool single_word = false;  // HF added token: only matched as a whole word
  bool normalized = false;   // HF added token: matched in the normalized text
  bool in_model = true;      // HF: part of the model's vocab (BPE lookups only see these)
  bool added = false;        // HF: an added token (split out of the text before the model)
};

struct Vocab {
  Vocab() = default;
  Vocab(Vocab&&) = default;  // moving keeps the token strings in place, so id_texts stay valid
  Vocab& operator=(Vocab&&) = default;
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  std::vector<TokenData> tokens;  // [n_vocab], index = token id
  TextIdMap text_to_id;           // token text -> id while loading (duplicates: as the loader decides)

  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  int32_t sep_id = -1;
  std::vector<int32_t> extra_eog_ids;  // from metadata: end of message, FIM pad / repo / file separator
  bool add_bos = false;
  bool add_eos = false;
  bool add_sep = false;           // WPM: add_special appends SEP
  bool add_space_prefix = false;  // SPM: prepend "▁" to text fragments
  bool decode_strip_space = false;  // decode drops the first token's leading space
  bool eog_names_force_control = true;  // llama.cpp's type override for GGUF; HF keeps its types
  bool clean_spaces = false;        // decode removes " ," " ." " 's" ... (llama.cpp clean_spaces)
  PieceStyle piece_style = PieceStyle::kMetaspace;
  // Added (user-defined) tokens decode through the metaspace decoder as well: a Hugging Face
  // tokenizer runs its decoder over every token, added ones included (Gemma's whitespace-run
  // tokens "▁▁▁" decode to spaces); llama.cpp copies a GGUF's user-defined tokens raw.
  bool unescape_user_defined = false;
  // No mergeable token contains "▁" right after another character (true for SentencePiece
  // vocabs that split on whitespace, e.g. Llama 2). Then no merge can cross the boundary in
  // front of a word's "▁", and the merge encoders may run word by word: the same result as
  // one pass over the whole text, with small priority queues instead of one huge one.
  bool split_before_metaspace = false;

  // Filled by finalize():
  std::vector<std::string> pieces;  // [n_vocab] token_to_piece(id, special = true)
  std::vector<uint8_t> eog;         // [n_vocab] 1 if end of generation
  std::vector<int32_t> byte_ids;    // [256] SPM byte fallback: <0xXX>, else the 1-byte token, else -1
  TokenIndex index;                 // replaces text_to_id (which finalize() empties)
  std::vector<std::string_view> id_texts;  // [n_vocab] views of tokens[id].text for the index

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  bool valid_id(int32_t id) const { return id >= 0 && id < n_tokens(); }
  int32_t find(std::string_view text) const {
    if (!index.empty()) return index.find(text, id_texts);
    auto it = text_to_id.find(text);
    return it == text_to_id.end() ? -1 : it->second;
  }
  bool is_control_or_unknown(int32_t id) const {
    return valid_id(id) && (tokens[id].type == TokenType::kControl || tokens[id].type == TokenType::kUnknown);
  }

  // Computes pieces, byte_ids, the flat index and the EOG set (eos, eot, metadata extras,
  // tokens named like <|im_end|>, <|eot_id|>, <|endoftext|>, <|file_sep|>, and control
  // tokens named <|end_of_text|> or </s>, as llama.cpp does). With eog_names_force_control,
  // the named tokens also become control tokens (as llama.cpp).
  void finalize();

  // llama.cpp token_to_piece(lstrip = 0): control / unknown tokens render empty unless
  // `special`; unused / undefined tokens always render empty.
  std::string_view piece(int32_t id, bool special) const;
  // llama.cpp llama_detokenize(remove_special, unparse_special = false).
  std::string detokenize(std::span<const int32_t> ids, bool remove_special) const;
};

// llama.cpp's decode clean-up (clean_up_tokenization_spaces): " ?" " !" " ." " ," -> no space,
// " ' " -> "'", and " 's" " 'm" " 'll" " 're" " 've" lose their space.
void clean_up_spaces(std::string* text);

// True when no token among `texts` has "▁" right after a character other than "▁".
template <typename TextRange>
bool no_inner_metaspace(const TextRange& texts) {
  for (const std::string& t : texts) {
    for (size_t pos = t.find("\xE2\x96\x81", 1); pos != std::string::npos; pos = t.find("\xE2\x96\x81", pos + 1)) {
      if (pos < 3 || t.compare(pos - 3, 3, "\xE2\x96\x81") != 0) return false;
    }
  }
  return true;
}

// Calls fn(word) for consecutive pieces of `text` cut in front of every "▁" that follows a
// character other than "▁" (see Vocab::split_before_metaspace).
template <typename Fn>
void for_each_metaspace_word(std::string_view text, Fn&& fn) {
  static constexpr std::string_view kMeta = "\xE2\x96\x81";
  size_t begin = 0;
  for (size_t pos = text.find(kMeta, 1); pos != std::string_view::npos; pos = text.find(kMeta, pos + 1)) {
    if (pos >= 3 && text.compare(pos - 3, 3, kMeta) == 0) continue;  // inside a run of "▁"
    if (pos > begin) fn(text.substr(begin, pos - begin));
    begin = pos;
  }
  if (begin < text.size()) fn(text.substr(begin));
}

// Replaces every U+2581 "▁" with a space.
std::string unescape_metaspace(std::string_view text);
// Replaces every space with U+2581 "▁".
std::string escape_metaspace(std::string_view text);
// Parses "<0xXX>" (hex digits of either case); -1 if `text` is not a byte token name.
int parse_byte_token(std::string_view text);

}  // namespace lumen::tok
