// Private to the chat template interpreter (src/tokenizer/chat_template*.cc): the limits
// against hostile templates, source positions and error messages, character classes,
// UTF-8 code point helpers, and the filter / test names shared by the parser and the
// evaluator. See chat_template.h for the subset and chat_template.cc for the pipeline.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace lumen::tok::chat_template_detail {

// ---- Limits against hostile templates ---------------------------------------------------

// Work is counted in units: one per byte of every string built or emitted, kStepCost per
// statement, expression node and loop iteration. A long legitimate prompt (a 1 MiB
// conversation through a ChatML-style template) costs well under 10% of kMaxWork; a
// runaway template stops after ~2M steps (well under a second in release builds).
inline constexpr size_t kMaxOutputBytes = size_t{16} << 20;
inline constexpr size_t kMaxStringBytes = size_t{16} << 20;
inline constexpr size_t kMaxListItems = 100000;
inline constexpr int64_t kMaxRangeItems = 100000;      // as Jinja's sandbox (MAX_RANGE)
inline constexpr size_t kMaxSourceBytes = size_t{1} << 20;
inline constexpr size_t kMaxContextBytes = size_t{16} << 20;
inline constexpr int kMaxNesting = 100;                // expression / block / value nesting depth
inline constexpr int kMaxCallDepth = 64;               // macro calls in progress (recursion)
inline constexpr int kMaxEvalDepth = 600;              // statements + expressions being evaluated:
                                                       // bounds the C++ stack across macro calls
inline constexpr int64_t kMaxWork = int64_t{1} << 27;
inline constexpr int64_t kStepCost = 64;

struct SourcePos {
  int line = 1;
  int col = 1;
};

inline std::string where(SourcePos pos) {
  return "chat template " + std::to_string(pos.line) + ":" + std::to_string(pos.col) + ": ";
}
inline Status error_at(SourcePos pos, const std::string& msg) { return error(where(pos) + msg); }

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
inline bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
inline bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

// ---- UTF-8 code points (strings index and count by code point, as Python) ---------------

inline size_t utf8_seq_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;  // invalid lead byte: one unit
}

inline size_t next_code_point(std::string_view s, size_t i) {
  return i + std::min(utf8_seq_len(static_cast<unsigned char>(s[i])), s.size() - i);
}

inline size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i = next_code_point(s, i)) ++n;
  return n;
}

// Byte offset of code point `k` (s.size() when k >= the count).
inline size_t code_point_offset(std::string_view s, size_t k) {
  size_t i = 0;
  for (; i < s.size() && k > 0; --k) i = next_code_point(s, i);
  return i;
}

// Byte offsets of each code point start, plus s.size() at the end. 4 bytes per code
// point; strings are at most kMaxStringBytes.
inline std::vector<uint32_t> code_point_offsets(std::string_view s) {
  std::vector<uint32_t> offsets;
  for (size_t i = 0; i < s.size(); i = next_code_point(s, i)) offsets.push_back(static_cast<uint32_t>(i));
  offsets.push_back(static_cast<uint32_t>(s.size()));
  return offsets;
}

// ---- Filter and test names --------------------------------------------------------------

// The parser rejects any other filter or test name; select / reject and map check the
// names they are passed at render time against the same lists.
inline constexpr std::string_view kFilters[] = {
    "trim", "length", "count", "upper", "lower", "capitalize", "title", "string", "int",
    "float", "abs", "default", "d", "join", "first", "last", "list", "reverse", "replace",
    "items", "tojson", "safe", "escape", "e", "select", "reject", "selectattr", "rejectattr",
    "map", "unique", "indent",
};
inline constexpr std::string_view kTests[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "boolean",
    "true", "false", "mapping", "iterable", "sequence", "callable", "even", "odd",
    "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=",
    "gt", "greaterthan", ">", "ge", ">=", "in", "lower", "upper", "sameas",
};

template <size_t N>
bool contains(const std::string_view (&list)[N], std::string_view s) {
  return std::find(std::begin(list), std::end(list), s) != std::end(list);
}

}  // namespace lumen::tok::chat_template_detail
