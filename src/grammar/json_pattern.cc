// See json_pattern.h. Three parts: the parser (pattern text -> tree of sets, concatenations,
// alternations and counted repetitions), the emitter (tree -> GBNF over JSON-encoded
// characters) and the matcher (tree -> position-set simulation, for enum / const values).
#include "grammar/json_pattern.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "base/check.h"
#include "grammar/gbnf.h"

namespace lumen::grammar {
namespace {

using Node = JsonPattern::Node;
using Kind = JsonPattern::Kind;
constexpr int64_t kUnbounded = JsonPattern::kUnbounded;
constexpr int64_t kLengthCap = int64_t{1} << 40;  // lengths above this count as unbounded

std::vector<CodeRange> normalize(std::vector<CodeRange> v) {
  std::sort(v.begin(), v.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  std::vector<CodeRange> out;
  for (const CodeRange& x : v) {
    if (!out.empty() && x.lo <= out.back().hi + 1) out.back().hi = std::max(out.back().hi, x.hi);
    else out.push_back(x);
  }
  return out;
}

// a minus b (both normalized).
std::vector<CodeRange> subtract(const std::vector<CodeRange>& a, const std::vector<CodeRange>& b) {
  std::vector<CodeRange> out;
  for (CodeRange x : a) {
    for (const CodeRange& y : b) {
      if (y.hi < x.lo || y.lo > x.hi) continue;
      if (y.lo > x.lo) out.push_back({x.lo, y.lo - 1});
      if (y.hi >= x.hi) {
        x.lo = 1;
        x.hi = 0;  // consumed
        break;
      }
      x.lo = y.hi + 1;
    }
    if (x.lo <= x.hi) out.push_back(x);
  }
  return out;
}

// Scalar values only: surrogates are never characters of a string (gbnf.h).
std::vector<CodeRange> scalars_of(std::vector<CodeRange> v) {
  return subtract(normalize(std::move(v)), {{0xD800, 0xDFFF}});
}

std::vector<CodeRange> complement(const std::vector<CodeRange>& v) { return subtract(all_scalar_values(), v); }

bool contains(const std::vector<CodeRange>& set, uint32_t cp) {
  auto it = std::upper_bound(set.begin(), set.end(), cp, [](uint32_t c, const CodeRange& r) { return c < r.lo; });
  return it != set.begin() && cp <= std::prev(it)->hi;
}

// The class escapes. JSON Schema names ECMA-262's sets, but validators use their own
// language's engine, and python-jsonschema's (re) reads \d \w \s as Unicode classes: its
// \d holds every decimal digit (U+0660 ...), its \w every letter and number, its \s also
// U+001C-U+001F and U+0085 but not U+FEFF. So that a generated string validates under both,
// \d \w stay ECMA-262's (ASCII; both engines agree on them) and the others are what both
// engines put in them: \s without U+FEFF, \S without any engine's spaces, \D and \W ASCII
// plus the characters of common blocks that no engine calls a digit / word character
// (tables from Python 3.11's unicodedata 14.0: assigned characters less controls, format
// characters and marks).
std::vector<CodeRange> digit_set() { return {{'0', '9'}}; }
std::vector<CodeRange> word_set() { return normalize({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
std::vector<CodeRange> ecma_space_set() {
  return normalize({{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                    {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}});
}
std::vector<CodeRange> space_set() { return subtract(ecma_space_set(), {{0xFEFF, 0xFEFF}}); }
std::vector<CodeRange> non_space_set() {
  std::vector<CodeRange> any_space = ecma_space_set();
  any_space.push_back({0x1C, 0x1F});
  any_space.push_back({0x85, 0x85});
  return complement(normalize(std::move(any_space)));
}
std::vector<CodeRange> non_digit_set() {
  std::vector<CodeRange> s = {{0x00, 0x2F}, {0x3A, 0x7F},
    {0xA0, 0xAC}, {0xAE, 0x2FF}, {0x370, 0x377}, {0x37A, 0x37F}, {0x384, 0x38A}, {0x38C, 0x38C},
    {0x38E, 0x3A1}, {0x3A3, 0x482}, {0x48A, 0x52F}, {0x531, 0x556}, {0x559, 0x58A}, {0x58D, 0x58F},
    {0x5BE, 0x5BE}, {0x5C0, 0x5C0}, {0x5C3, 0x5C3}, {0x5C6, 0x5C6}, {0x5D0, 0x5EA}, {0x5EF, 0x5F4},
    {0x2000, 0x200A}, {0x2010, 0x2027}, {0x202F, 0x205F}, {0x2070, 0x2071}, {0x2074, 0x208E},
    {0x2090, 0x209C}, {0x20A0, 0x20C0}, {0x2100, 0x218B}, {0x2190, 0x2426}, {0x2440, 0x244A},
    {0x2460, 0x2B73}, {0x2B76, 0x2B95}, {0x2B97, 0x2BFF}, {0x3000, 0x3029}, {0x3030, 0x303F},
    {0x3041, 0x3096}, {0x309B, 0x30FF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3},
  };
  return normalize(std::move(s));
}
std::vector<CodeRange> non_word_set() {
  std::vector<CodeRange> s = {{0x00, 0x2F}, {0x3A, 0x40}, {0x5B, 0x5E}, {0x60, 0x60}, {0x7B, 0x7F},
    {0xA0, 0xA9}, {0xAB, 0xAC}, {0xAE, 0xB1}, {0xB4, 0xB4}, {0xB6, 0xB8}, {0xBB, 0xBB}, {0xBF, 0xBF},
    {0xD7, 0xD7}, {0xF7, 0xF7}, {0x2000, 0x200A}, {0x2010, 0x2027}, {0x202F, 0x205F}, {0x207A, 0x207E},
    {0x208A, 0x208E}, {0x20A0, 0x20C0}, {0x2100, 0x2101}, {0x2103, 0x2106}, {0x2108, 0x2109},
    {0x2114, 0x2114}, {0x2116, 0x2118}, {0x211E, 0x2123}, {0x2125, 0x2125}, {0x2127, 0x2127},
    {0x2129, 0x2129}, {0x212E, 0x212E}, {0x213A, 0x213B}, {0x2140, 0x2144}, {0x214A, 0x214D},
    {0x214F, 0x214F}, {0x218A, 0x218B}, {0x2190, 0x2426}, {0x2440, 0x244A}, {0x249C, 0x24E9},
    {0x2500, 0x2775}, {0x2794, 0x2B73}, {0x2B76, 0x2B95}, {0x2B97, 0x2BFF}, {0x3000, 0x3004},
    {0x3008, 0x3020}, {0x3030, 0x3030}, {0x3036, 0x3037}, {0x303D, 0x303F}, {0xFE30, 0xFE4F},
    {0xFF01, 0xFF0F}, {0xFF1A, 0xFF20},
  };
  return normalize(std::move(s));
}
std::vector<CodeRange> dot_set() { return complement(normalize({{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}})); }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Strict UTF-8 -> code points (no overlongs, no surrogates); false if invalid.
bool decode_utf8(std::string_view s, std::vector<uint32_t>* out) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int len = 0;
    uint32_t cp = 0, min = 0;
    if (b < 0x80) { len = 1; cp = b; }
    else if ((b & 0xE0) == 0xC0) { len = 2; cp = b & 0x1F; min = 0x80; }
    else if ((b & 0xF0) == 0xE0) { len = 3; cp = b & 0x0F; min = 0x800; }
    else if ((b & 0xF8) == 0xF0) { len = 4; cp = b & 0x07; min = 0x10000; }
    else return false;
    if (i + static_cast<size_t>(len) > s.size()) return false;
    for (int k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    out->push_back(cp);
    i += static_cast<size_t>(len);
  }
  return true;
}

int64_t add_len(int64_t a, int64_t b) {
  if (a == kUnbounded || b == kUnbounded) return kUnbounded;
  return a + b > kLengthCap ? kUnbounded : a + b;
}
int64_t mul_len(int64_t a, int64_t n) {  // a: length (maybe unbounded), n: count (maybe unbounded)
  if (a == 0 || n == 0) return 0;
  if (a == kUnbounded || n == kUnbounded) return kUnbounded;
  return a > kLengthCap / n ? kUnbounded : a * n;
}
int64_t mul_min(int64_t a, int64_t n) {  // min lengths: a and n finite
  return std::min(kLengthCap, a > kLengthCap / std::max<int64_t>(n, 1) ? kLengthCap : a * n);
}

// Tree construction with lengths and nullability filled in from the kids.
struct TreeBuilder {
  std::vector<Node>* nodes;

  int32_t push(Node n) {
    nodes->push_back(std::move(n));
    return static_cast<int32_t>(nodes->size()) - 1;
  }
  const Node& at(int32_t id) const { return (*nodes)[static_cast<size_t>(id)]; }

  int32_t empty() {
    Node n;
    n.nullable = true;
    return push(std::move(n));
  }
  int32_t set(std::vector<CodeRange> s) {
    Node n;
    n.kind = Kind::kSet;
    n.set = std::move(s);
    n.min_len = n.max_len = 1;
    return push(std::move(n));
  }
  int32_t concat(std::vector<int32_t> kids) {
    if (kids.empty()) return empty();
    if (kids.size() == 1) return kids[0];
    Node n;
    n.kind = Kind::kConcat;
    n.nullable = true;
    for (int32_t k : kids) {
      n.nullable = n.nullable && at(k).nullable;
      n.min_len = std::min(kLengthCap, n.min_len + at(k).min_len);
      n.max_len = add_len(n.max_len, at(k).max_len);
    }
    n.kids = std::move(kids);
    return push(std::move(n));
  }
  // Alternatives that are single sets merge into one set ((a|a)* is [a]*).
  int32_t alt(const std::vector<int32_t>& kids_in) {
    std::vector<int32_t> kids;
    std::vector<CodeRange> merged;
    int32_t first_set = -1;
    int n_sets = 0;
    for (int32_t k : kids_in) {
      if (at(k).kind == Kind::kSet) {
        if (first_set < 0) {
          first_set = static_cast<int32_t>(kids.size());
          kids.push_back(k);
        }
        ++n_sets;
        merged.insert(merged.end(), at(k).set.begin(), at(k).set.end());
      } else {
        kids.push_back(k);
      }
    }
    if (n_sets > 1) kids[static_cast<size_t>(first_set)] = set(normalize(std::move(merged)));
    if (kids.size() == 1) return kids[0];
    Node n;
    n.kind = Kind::kAlt;
    n.min_len = kLengthCap;
    for (int32_t k : kids) {
      n.nullable = n.nullable || at(k).nullable;
      n.min_len = std::min(n.min_len, at(k).min_len);
      n.max_len = n.max_len == kUnbounded || at(k).max_len == kUnbounded ? kUnbounded : std::max(n.max_len, at(k).max_len);
    }
    n.kids = std::move(kids);
    return push(std::move(n));
  }
  int32_t repeat(int32_t body, int64_t min, int64_t max) {
    Node n;
    n.kind = Kind::kRepeat;
    n.kids = {body};
    n.min = min;
    n.max = max;
    n.nullable = min == 0 || at(body).nullable;
    n.min_len = mul_min(at(body).min_len, min);
    n.max_len = mul_len(at(body).max_len, max);
    return push(std::move(n));
  }
};

// Lengths of the generated strings: an unanchored side adds any number of characters.
void branch_lengths(const std::vector<Node>& nodes, const std::vector<JsonPattern::Branch>& branches, int64_t* min_len,
                    int64_t* max_len) {
  *min_len = kLengthCap;
  *max_len = 0;
  for (const JsonPattern::Branch& b : branches) {
    const Node& n = nodes[static_cast<size_t>(b.node)];
    *min_len = std::min(*min_len, n.min_len);
    const bool open = !b.anchored_start || !b.anchored_end;
    const int64_t mx = open ? kUnbounded : n.max_len;
    *max_len = *max_len == kUnbounded || mx == kUnbounded ? kUnbounded : std::max(*max_len, mx);
  }
}

// The parts of a concatenation, nested concatenations (groups) opened.
void concat_leaves(const std::vector<Node>& nodes, int32_t id, std::vector<int32_t>* out) {
  const Node& n = nodes[static_cast<size_t>(id)];
  if (n.kind == Kind::kConcat) {
    for (int32_t k : n.kids) concat_leaves(nodes, k, out);
  } else if (n.kind != Kind::kEmpty) {
    out->push_back(id);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Parser: recursive descent over the pattern's code points.
//   branches    := sequence ( "|" sequence )*         top level: "^"? sequence "$"?
//   alternation := sequence ( "|" sequence )*         inside a group
//   sequence    := ( atom quantifier? )*
//   atom        := "(" group ")" | "[" class "]" | "." | "\" escape | character
class PatternParser {
 public:
  PatternParser(std::vector<uint32_t> p, const PatternLimits& limits, JsonPattern* out)
      : p_(std::move(p)), limits_(limits), out_(out), tb_{&out->nodes_} {}

  Status parse() {
    while (true) {
      JsonPattern::Branch b;
      LUMEN_ASSIGN_OR_RETURN(b.node, sequence(0, &b));
      out_->branches_.push_back(b);
      if (at_end()) break;
      if (peek() == '|') {
        ++i_;
        continue;
      }
      return fail("unbalanced ')' (no '(' before it)");
    }
    return Status();
  }

 private:
  struct Escape {
    bool is_set = false;
    uint32_t cp = 0;
    std::vector<CodeRange> set;
  };

  bool at_end() const { return i_ >= p_.size(); }
  uint32_t peek(size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : 0xFFFFFFFF; }
  Status fail(const std::string& what) const {
    return error(what + " (at character " + std::to_string(std::min(i_, p_.size())) + ")");
  }
  static bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
  static bool is_hex(uint32_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
  static uint32_t hex_val(uint32_t c) { return is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10; }
  static std::string show(uint32_t cp) {
    std::string s;
    append_utf8(s, cp);
    return s;
  }

  // A {n}, {n,}, {n,m} at position i_: its end position and counts, or nothing when the
  // text there is not a quantifier (then `{` is a literal, as ECMA-262 Annex B reads it).
  struct Braces {
    size_t end = 0;
    int64_t min = 0, max = 0;
    bool leading_comma = false;  // {,m}
    bool too_big = false;
  };
  std::optional<Braces> braces_at(size_t pos) const {
    if (pos >= p_.size() || p_[pos] != '{') return std::nullopt;
    Braces b;
    size_t j = pos + 1;
    auto number = [&](int64_t* v) {
      const size_t start = j;
      *v = 0;
      while (j < p_.size() && is_digit(p_[j])) {
        if (*v > limits_.max_count) b.too_big = true;
        else *v = *v * 10 + (p_[j] - '0');
        ++j;
      }
      if (*v > limits_.max_count) b.too_big = true;
      return j > start;
    };
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!number(&b.max) || j >= p_.size() || p_[j] != '}') return std::nullopt;
      b.leading_comma = true;
      b.end = j + 1;
      return b;
    }
    if (!number(&b.min)) return std::nullopt;
    if (j < p_.size() && p_[j] == '}') {
      b.max = b.min;
    } else if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (j < p_.size() && p_[j] == '}') b.max = kUnbounded;
      else if (!number(&b.max) || j >= p_.size() || p_[j] != '}') return std::nullopt;
    } else {
      return std::nullopt;
    }
    b.end = j + 1;
    return b;
  }

  bool quantifier_here() const {
    const uint32_t c = peek();
    return c == '*' || c == '+' || c == '?' || braces_at(i_).has_value();
  }

  Result<int32_t> sequence(int depth, JsonPattern::Branch* top) {
    std::vector<int32_t> items;
    if (top && peek() == '^') {
      top->anchored_start = true;
      ++i_;
    }
    while (!at_end() && peek() != '|' && peek() != ')') {
      const uint32_t c = peek();
      if (c == '^')
        return fail("anchor '^' is supported only at the start of a top-level alternative");
      if (c == '$') {
        if (top && (i_ + 1 == p_.size() || peek(1) == '|')) {
          top->anchored_end = true;
          ++i_;
          break;
        }
        return fail("anchor '$' is supported only at the end of a top-level alternative");
      }
      if (quantifier_here()) return fail("quantifier '" + show(c) + "' has nothing to repeat");
      LUMEN_ASSIGN_OR_RETURN(int32_t atom_id, atom(depth));
      if (quantifier_here()) {
        int64_t min = 0, max = 0;
        if (peek() == '*') { min = 0; max = kUnbounded; ++i_; }
        else if (peek() == '+') { min = 1; max = kUnbounded; ++i_; }
        else if (peek() == '?') { min = 0; max = 1; ++i_; }
        else {
          const Braces b = *braces_at(i_);
          if (b.leading_comma)
            return fail("quantifier '{,m}' is not supported (ECMA-262 reads it as text, other engines as {0,m})");
          if (b.too_big) return fail("repetition count above the limit of " + std::to_string(limits_.max_count));
          if (b.max != kUnbounded && b.min > b.max) return fail("quantifier {n,m} with n > m");
          min = b.min;
          max = b.max;
          i_ = b.end;
        }
        if (peek() == '?') ++i_;  // lazy: the same language
        if (quantifier_here()) return fail("quantifier after a quantifier ('" + show(peek()) + "') is not supported");
        atom_id = tb_.repeat(atom_id, min, max);
      }
      items.push_back(atom_id);
    }
    if (top && !at_end() && peek() == ')') return fail("unbalanced ')' (no '(' before it)");
    return tb_.concat(std::move(items));
  }

  Result<int32_t> alternation(int depth) {
    std::vector<int32_t> alts;
    while (true) {
      LUMEN_ASSIGN_OR_RETURN(int32_t s, sequence(depth, nullptr));
      alts.push_back(s);
      if (peek() != '|') break;
      ++i_;
    }
    return tb_.alt(alts);
  }

  Result<int32_t> atom(int depth) {
    const uint32_t c = peek();
    if (c == '(') {
      ++i_;
      if (peek() == '?') {
        const uint32_t k = peek(1);
        if (k == ':') {
          i_ += 2;
        } else if (k == '=' || k == '!') {
          return fail(std::string("lookahead '(?") + static_cast<char>(k) + "' is not supported");
        } else if (k == '<' && (peek(2) == '=' || peek(2) == '!')) {
          return fail(std::string("lookbehind '(?<") + static_cast<char>(peek(2)) + "' is not supported");
        } else if (k == '<') {
          i_ += 2;
          auto name_char = [](uint32_t ch, bool first) {
            return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch == '$' ||
                   (!first && is_digit(ch));
          };
          if (!name_char(peek(), true)) return fail("bad group name in '(?<name>'");
          while (name_char(peek(), false)) ++i_;
          if (peek() != '>') return fail("bad group name in '(?<name>'");
          ++i_;
        } else {
          return fail("group syntax '(?" + (at_end() ? std::string() : show(k)) +
                      "' is not supported (inline flags and other extensions)");
        }
      }
      if (depth + 1 > limits_.max_depth) return fail("groups nested deeper than " + std::to_string(limits_.max_depth));
      LUMEN_ASSIGN_OR_RETURN(int32_t inner, alternation(depth + 1));
      if (peek() != ')') return fail("unbalanced '(' (no ')' after it)");
      ++i_;
      return inner;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++i_;
      return tb_.set(dot_set());
    }
    if (c == '\\') {
      ++i_;
      LUMEN_ASSIGN_OR_RETURN(Escape e, escape(false));
      if (e.is_set) return tb_.set(std::move(e.set));
      return tb_.set({{e.cp, e.cp}});
    }
    ++i_;  // any other character (including a literal `{`, `}` or `]`) is itself
    return tb_.set({{c, c}});
  }

  // After the backslash.
  Result<Escape> escape(bool in_class) {
    if (at_end()) return fail("the pattern ends with a lone '\\'");
    const uint32_t c = peek();
    ++i_;
    Escape e;
    auto set = [&](std::vector<CodeRange> s) {
      e.is_set = true;
      e.set = std::move(s);
      return e;
    };
    switch (c) {
      case 'd': return set(digit_set());
      case 'D': return set(non_digit_set());
      case 'w': return set(word_set());
      case 'W': return set(non_word_set());
      case 's': return set(space_set());
      case 'S': return set(non_space_set());
      case 't': e.cp = 0x09; return e;
      case 'n': e.cp = 0x0A; return e;
      case 'v': e.cp = 0x0B; return e;
      case 'f': e.cp = 0x0C; return e;
      case 'r': e.cp = 0x0D; return e;
      case '0':
        if (is_digit(peek())) return fail("octal escape '\\0" + show(peek()) + "' is not supported");
        e.cp = 0;
        return e;
      case 'b':
        if (in_class) {
          e.cp = 0x08;
          return e;
        }
        return fail("word boundary '\\b' is not supported");
      case 'B': return fail("word boundary '\\B' is not supported");
      case 'k': return fail("backreference '\\k<name>' is not supported");
      case 'p':
      case 'P': return fail(std::string("Unicode property escape '\\") + static_cast<char>(c) + "{..}' is not supported");
      case 'x': {
        if (!is_hex(peek()) || !is_hex(peek(1))) return fail("'\\x' must be followed by two hex digits");
        e.cp = hex_val(peek()) * 16 + hex_val(peek(1));
        i_ += 2;
        return e;
      }
      case 'u': {
        if (peek() == '{') return fail("'\\u{...}' escapes are not supported (use \\uHHHH)");
        auto four = [&](size_t at, uint32_t* v) {
          for (size_t k = 0; k < 4; ++k)
            if (!is_hex(peek(at + k))) return false;
          *v = 0;
          for (size_t k = 0; k < 4; ++k) *v = *v * 16 + hex_val(peek(at + k));
          return true;
        };
        uint32_t v = 0;
        if (!four(0, &v)) return fail("'\\u' must be followed by four hex digits");
        i_ += 4;
        if (v >= 0xD800 && v <= 0xDBFF) {
          uint32_t lo = 0;
          if (peek() == '\\' && peek(1) == 'u' && four(2, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
            i_ += 6;
            e.cp = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            return e;
          }
        }
        if (v >= 0xD800 && v <= 0xDFFF) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "%04X", v);
          return fail(std::string("lone surrogate '\\u") + buf + "' is not a character");
        }
        e.cp = v;
        return e;
      }
      case 'c': {
        const uint32_t x = peek();
        if (!((x >= 'a' && x <= 'z') || (x >= 'A' && x <= 'Z'))) return fail("'\\c' must be followed by a letter");
        ++i_;
        e.cp = x % 32;
        return e;
      }
      default: break;
    }
    if (is_digit(c)) return fail("backreference '\\" + show(c) + "' is not supported");
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return fail("unknown escape '\\" + show(c) + "'");
    e.cp = c;  // escaped punctuation, space or non-ASCII: itself
    return e;
  }

  Result<int32_t> char_class() {
    ++i_;  // '['
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++i_;
    }
    if (peek() == ']') return fail(negated ? "the class '[^]' is not supported" : "the empty class '[]' is not supported");
    std::vector<CodeRange> ranges;
    auto class_atom = [&]() -> Result<Escape> {
      if (peek() == '\\') {
        ++i_;
        return escape(true);
      }
      Escape e;
      e.cp = peek();
      ++i_;
      return e;
    };
    while (true) {
      if (at_end()) return fail("unbalanced '[' (no ']' after it)");
      if (peek() == ']') {
        ++i_;
        break;
      }
      LUMEN_ASSIGN_OR_RETURN(Escape a, class_atom());
      if (peek() == '-' && i_ + 1 < p_.size() && peek(1) != ']') {
        ++i_;
        LUMEN_ASSIGN_OR_RETURN(Escape b, class_atom());
        if (a.is_set || b.is_set) return fail("a class range with a class escape (\\d \\w \\s ...) at an end");
        if (a.cp > b.cp) return fail("bad class range '" + show(a.cp) + "-" + show(b.cp) + "' (its end before its start)");
        ranges.push_back({a.cp, b.cp});
      } else if (a.is_set) {
        ranges.insert(ranges.end(), a.set.begin(), a.set.end());
      } else {
        ranges.push_back({a.cp, a.cp});
      }
    }
    std::vector<CodeRange> set = scalars_of(std::move(ranges));
    if (negated) set = complement(set);
    if (set.empty()) return fail("the class matches no character");
    return tb_.set(std::move(set));
  }

  std::vector<uint32_t> p_;
  size_t i_ = 0;
  const PatternLimits& limits_;
  JsonPattern* out_;
  TreeBuilder tb_;
};

Result<JsonPattern> JsonPattern::parse(std::string_view pattern, const PatternLimits& limits) {
  if (pattern.size() > limits.max_pattern_bytes)
    return error(std::to_string(pattern.size()) + " bytes, over the limit of " + std::to_string(limits.max_pattern_bytes));
  std::vector<uint32_t> cps;
  if (!decode_utf8(pattern, &cps)) return error("not valid UTF-8");
  JsonPattern out;
  out.limits_ = limits;
  PatternParser parser(std::move(cps), limits, &out);
  LUMEN_TRY(parser.parse());
  branch_lengths(out.nodes_, out.branches_, &out.min_len_, &out.max_len_);
  return out;
}

Result<JsonPattern> JsonPattern::with_lengths(int64_t min_len, int64_t max_len) const {
  JsonPattern out = *this;
  out.branches_.clear();
  TreeBuilder tb{&out.nodes_};
  const std::string shape =
      "only a top-level alternative anchored at both ends (^...$) with one repetition of a fixed-width part "
      "(like ^[a-z]+$ or ^[A-Z]\\d{2,}$) can be cut to a length range; put the lengths in the pattern";
  for (const Branch& b : branches_) {
    const Node& n = nodes_[static_cast<size_t>(b.node)];
    const bool open = !b.anchored_start || !b.anchored_end;
    const int64_t b_max = open ? kUnbounded : n.max_len;
    if (n.min_len >= min_len && (max_len == kUnbounded || (b_max != kUnbounded && b_max <= max_len))) {
      out.branches_.push_back(b);  // within already
      continue;
    }
    if (open) return error("an alternative open at one end (no ^ or no $) has no length bound: " + shape);
    if (n.min_len == n.max_len) continue;  // one length, outside the range: no string left
    std::vector<int32_t> parts;
    concat_leaves(nodes_, b.node, &parts);
    int64_t fixed = 0;
    int var = -1;
    for (size_t i = 0; i < parts.size(); ++i) {
      const Node& p = nodes_[static_cast<size_t>(parts[i])];
      if (p.min_len == p.max_len) {
        fixed += p.min_len;
        continue;
      }
      if (var >= 0) return error("more than one part of varying length: " + shape);
      var = static_cast<int>(i);
    }
    LUMEN_CHECK(var >= 0);  // parts of fixed lengths only would have made the branch one length
    const Node& rep = nodes_[static_cast<size_t>(parts[static_cast<size_t>(var)])];
    const Node* body = rep.kind == Kind::kRepeat ? &nodes_[static_cast<size_t>(rep.kids[0])] : nullptr;
    if (!body || body->min_len != body->max_len || body->min_len < 1)
      return error("the part of varying length is not a repetition of a fixed-width part: " + shape);
    const int64_t w = body->min_len;
    int64_t lo = rep.min, hi = rep.max;
    if (min_len > fixed) lo = std::max(lo, (min_len - fixed + w - 1) / w);
    if (max_len != kUnbounded) {
      if (max_len < fixed) continue;
      const int64_t k = (max_len - fixed) / w;
      hi = hi == kUnbounded ? k : std::min(hi, k);
    }
    if (hi != kUnbounded && lo > hi) continue;
    parts[static_cast<size_t>(var)] = tb.repeat(rep.kids[0], lo, hi);
    Branch cut = b;
    cut.node = tb.concat(std::move(parts));
    out.branches_.push_back(cut);
  }
  if (out.branches_.empty()) return error("no string of the pattern has a length within minLength / maxLength");
  branch_lengths(out.nodes_, out.branches_, &out.min_len_, &out.max_len_);
  return out;
}

// ---------------------------------------------------------------------------------------
// Emitter.
namespace {


// A character as it appears inside a JSON string (json_pattern.h: Encoding).
void append_json_char(std::string& out, uint32_t cp) {
  switch (cp) {
    case '"': out += "\\\""; return;
    case '\\': out += "\\\\"; return;
    case 0x08: out += "\\b"; return;
    case 0x09: out += "\\t"; return;
    case 0x0A: out += "\\n"; return;
    case 0x0C: out += "\\f"; return;
    case 0x0D: out += "\\r"; return;
    default: break;
  }
  if (cp < 0x20) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    out += buf;
    return;
  }
  append_utf8(out, cp);
}

std::string class_char(uint32_t cp) {
  if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return std::string(1, static_cast<char>(cp));
  char buf[16];
  std::snprintf(buf, sizeof buf, cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", cp);
  return buf;
}

// One character of `set`, JSON-encoded: a class of the raw members plus the escaped forms
// of the members that need them.
std::string set_expr(const std::vector<CodeRange>& set) {
  std::vector<std::string> alts;
  const std::vector<CodeRange> raw = subtract(set, normalize({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}));
  if (!raw.empty()) {
    if (raw.size() == 1 && raw[0].lo == raw[0].hi) {
      std::string s;
      append_utf8(s, raw[0].lo);
      alts.push_back(gbnf_literal(s));
    } else {
      std::string cls = "[";
      for (const CodeRange& r : raw) cls += r.lo == r.hi ? class_char(r.lo) : class_char(r.lo) + "-" + class_char(r.hi);
      alts.push_back(cls + "]");
    }
  }
  for (uint32_t cp : {uint32_t{'"'}, uint32_t{'\\'}, uint32_t{0x08}, uint32_t{0x09}, uint32_t{0x0A}, uint32_t{0x0C}, uint32_t{0x0D}}) {
    if (!contains(set, cp)) continue;
    std::string s;
    append_json_char(s, cp);
    alts.push_back(gbnf_literal(s));
  }
  for (uint32_t high = 0; high < 2; ++high) {  // the other controls: \u00xx, by high digit
    std::string digits;
    for (uint32_t low = 0; low < 16; ++low) {
      const uint32_t cp = high * 16 + low;
      if (cp == 0x08 || cp == 0x09 || cp == 0x0A || cp == 0x0C || cp == 0x0D || !contains(set, cp)) continue;
      digits += "0123456789abcdef"[low];
    }
    if (digits.empty()) continue;
    const std::string prefix = gbnf_literal(std::string("\\u00") + static_cast<char>('0' + high));
    alts.push_back(digits.size() == 1 ? gbnf_literal(std::string("\\u00") + static_cast<char>('0' + high) + digits)
                                      : prefix + " [" + digits + "]");
  }
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

class Emitter {
 public:
  Emitter(std::vector<Node> nodes, const PatternLimits& limits) : nodes_(std::move(nodes)), tb_{&nodes_}, limits_(limits) {}

  // "" for the empty string.
  Result<std::string> emit(int32_t id) {
    if (++n_emitted_ > 4 * static_cast<int64_t>(limits_.max_pattern_bytes) + 1000 || bytes_ > limits_.max_gbnf_bytes)
      return error("too complex to convert (the grammar grows over " + std::to_string(limits_.max_gbnf_bytes) + " bytes)");
    const Node n = nodes_[static_cast<size_t>(id)];  // a copy: emission may add nodes
    std::string out;
    switch (n.kind) {
      case Kind::kEmpty: break;
      case Kind::kSet:
        if (n.set.size() == 1 && n.set[0].lo == n.set[0].hi) {
          std::string s;
          append_json_char(s, n.set[0].lo);
          out = gbnf_literal(s);
        } else {
          out = set_expr(n.set);
        }
        break;
      case Kind::kConcat: {
        std::string pending;  // consecutive single characters, one literal
        auto flush = [&] {
          if (pending.empty()) return;
          out += (out.empty() ? "" : " ") + gbnf_literal(pending);
          pending.clear();
        };
        for (int32_t k : n.kids) {
          const Node& kid = nodes_[static_cast<size_t>(k)];
          if (kid.kind == Kind::kSet && kid.set.size() == 1 && kid.set[0].lo == kid.set[0].hi) {
            append_json_char(pending, kid.set[0].lo);
            continue;
          }
          flush();
          LUMEN_ASSIGN_OR_RETURN(std::string e, emit(k));
          if (!e.empty()) out += (out.empty() ? "" : " ") + e;
        }
        flush();
        break;
      }
      case Kind::kAlt: {
        std::vector<std::string> alts;
        std::set<std::string> seen;
        bool has_empty = false;
        for (int32_t k : n.kids) {
          LUMEN_ASSIGN_OR_RETURN(std::string e, emit(k));
          if (e.empty()) has_empty = true;
          else if (seen.insert(e).second) alts.push_back(e);
        }
        if (alts.empty()) break;
        out = "(";
        for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
        out += " )";
        if (has_empty) out += "?";
        break;
      }
      case Kind::kRepeat: {
        int32_t body = n.kids[0];
        int64_t min = n.min;
        if (n.max == 0) break;
        if (nodes_[static_cast<size_t>(body)].nullable) {
          // x{m,n} with x matching "": x'{0,n} with x' = x less "" (nullable bodies make
          // ambiguous, costly grammars and are refused by the compiler when counted high).
          LUMEN_ASSIGN_OR_RETURN(body, non_empty(body));
          if (body < 0) break;
          min = 0;
        }
        int64_t max = n.max;
        flatten(&body, &min, &max);
        LUMEN_ASSIGN_OR_RETURN(std::string e, emit(body));
        if (e.empty()) break;
        e = "( " + e + " )";
        if (min == 1 && max == 1) out = e;
        else if (min == 0 && max == kUnbounded) out = e + "*";
        else if (min == 1 && max == kUnbounded) out = e + "+";
        else if (min == 0 && max == 1) out = e + "?";
        else if (min == max) out = e + "{" + std::to_string(min) + "}";
        else out = e + "{" + std::to_string(min) + "," + (max == kUnbounded ? "" : std::to_string(max)) + "}";
        break;
      }
    }
    bytes_ += out.size();
    if (bytes_ > limits_.max_gbnf_bytes)
      return error("too complex to convert (the grammar grows over " + std::to_string(limits_.max_gbnf_bytes) + " bytes)");
    return out;
  }

  std::vector<Node>& nodes() { return nodes_; }

  // (x{a,b}){c,d} is x{n} for n in the union of [k*a, k*b] over k in [c, d]; when that union
  // is one interval it becomes x{c*a, d*b}: nested counted repetitions are ambiguous (a text
  // splits into iterations in many ways) and their parses multiply in the matcher.
  // Contiguous: (k+1)*a <= k*b + 1 for every k >= c, i.e. a <= c*(b-a) + 1 (b unbounded:
  // c >= 1 or a <= 1). Counts stay within GBNF's repeat limit (gbnf.h).
  void flatten(int32_t* body, int64_t* min, int64_t* max) const {
    constexpr int64_t kMaxRepeat = GbnfLimits{}.max_repeat;
    while (true) {
      const Node& in = nodes_[static_cast<size_t>(*body)];
      if (in.kind != Kind::kRepeat || nodes_[static_cast<size_t>(in.kids[0])].nullable) return;
      const int64_t a = in.min, b = in.max, c = *min, d = *max;
      const bool contiguous = b == kUnbounded ? (c >= 1 || a <= 1) : a <= c * (b - a) + 1;
      if (!contiguous) return;
      const int64_t lo = c * a;
      const int64_t hi = b == kUnbounded || d == kUnbounded ? kUnbounded : b * d;
      if (lo > kMaxRepeat || (hi != kUnbounded && hi > kMaxRepeat)) return;
      *body = in.kids[0];
      *min = lo;
      *max = hi;
    }
  }

 private:
  // A node for the non-empty strings of `id`; -1 when it has none.
  Result<int32_t> non_empty(int32_t id) {
    if (auto it = non_empty_.find(id); it != non_empty_.end()) return it->second;
    if (nodes_.size() > 64 * limits_.max_pattern_bytes + 1000) return error("too complex to convert");
    const Node n = nodes_[static_cast<size_t>(id)];
    int32_t out = -1;
    switch (n.kind) {
      case Kind::kEmpty: break;
      case Kind::kSet: out = id; break;
      case Kind::kAlt: {
        std::vector<int32_t> kids;
        for (int32_t k : n.kids) {
          LUMEN_ASSIGN_OR_RETURN(int32_t ne, non_empty(k));
          if (ne >= 0) kids.push_back(ne);
        }
        if (!kids.empty()) out = tb_.alt(kids);
        break;
      }
      case Kind::kConcat: {
        if (!n.nullable) {
          out = id;
          break;
        }
        // Every kid matches "": the first non-empty kid is k, those before it match "".
        std::vector<int32_t> alts;
        for (size_t k = 0; k < n.kids.size(); ++k) {
          LUMEN_ASSIGN_OR_RETURN(int32_t ne, non_empty(n.kids[k]));
          if (ne < 0) continue;
          std::vector<int32_t> parts = {ne};
          parts.insert(parts.end(), n.kids.begin() + static_cast<std::ptrdiff_t>(k) + 1, n.kids.end());
          alts.push_back(tb_.concat(std::move(parts)));
        }
        if (!alts.empty()) out = tb_.alt(alts);
        break;
      }
      case Kind::kRepeat: {
        if (n.max == 0) break;
        const int32_t body = n.kids[0];
        if (nodes_[static_cast<size_t>(body)].nullable) {
          LUMEN_ASSIGN_OR_RETURN(int32_t ne, non_empty(body));
          if (ne >= 0) out = tb_.repeat(ne, 1, n.max);
        } else {
          out = n.min >= 1 ? id : tb_.repeat(body, 1, n.max);
        }
        break;
      }
    }
    non_empty_[id] = out;
    return out;
  }

  std::vector<Node> nodes_;
  TreeBuilder tb_;
  const PatternLimits& limits_;
  std::map<int32_t, int32_t> non_empty_;
  int64_t n_emitted_ = 0;
  size_t bytes_ = 0;
};

}  // namespace

Result<std::string> JsonPattern::to_gbnf(std::string_view any_char) const {
  Emitter em(nodes_, limits_);
  const std::string any = std::string(any_char) + "*";
  std::vector<std::string> alts;
  std::set<std::string> seen;
  for (const Branch& b : branches_) {
    std::string e;
    const Node& n = nodes_[static_cast<size_t>(b.node)];
    if (n.nullable && (!b.anchored_start || !b.anchored_end)) {
      e = any;  // "" matches at one open end: every string does
    } else {
      LUMEN_ASSIGN_OR_RETURN(std::string body, em.emit(b.node));
      e = body.empty() ? "\"\"" : body;
      if (!b.anchored_start) e = any + " " + e;
      if (!b.anchored_end) e += " " + any;
    }
    if (seen.insert(e).second) alts.push_back(e);
  }
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

// ---------------------------------------------------------------------------------------
// Matcher: which end positions each node reaches from a set of start positions (a
// Thompson-style simulation on position sets: polynomial, no backtracking).
namespace {

class SetMatcher {
 public:
  SetMatcher(const std::vector<Node>& nodes, const std::vector<uint32_t>& text, int64_t budget)
      : nodes_(nodes), text_(text), budget_(budget) {}

  using Positions = std::vector<bool>;  // [text.size() + 1]

  Result<Positions> run(int32_t id, const Positions& starts) {
    budget_ -= static_cast<int64_t>(starts.size());
    if (budget_ < 0) return error("too costly to check values against");
    const Node& n = nodes_[static_cast<size_t>(id)];
    const size_t len = text_.size();
    Positions out(len + 1, false);
    switch (n.kind) {
      case Kind::kEmpty: return starts;
      case Kind::kSet:
        for (size_t p = 0; p < len; ++p)
          if (starts[p] && contains(n.set, text_[p])) out[p + 1] = true;
        return out;
      case Kind::kConcat: {
        Positions cur = starts;
        for (int32_t k : n.kids) {
          LUMEN_ASSIGN_OR_RETURN(cur, run(k, cur));
        }
        return cur;
      }
      case Kind::kAlt:
        for (int32_t k : n.kids) {
          LUMEN_ASSIGN_OR_RETURN(Positions e, run(k, starts));
          for (size_t p = 0; p <= len; ++p) out[p] = out[p] || e[p];
        }
        return out;
      case Kind::kRepeat: {
        // Exactly min iterations (the sets repeat or empty within len + 1 steps), then BFS
        // over further iterations: a position first reached after fewer iterations has the
        // most left.
        Positions cur = starts;
        for (int64_t i = 0; i < n.min; ++i) {
          LUMEN_ASSIGN_OR_RETURN(Positions next, run(n.kids[0], cur));
          const bool same = next == cur;
          cur = std::move(next);
          if (same || std::find(cur.begin(), cur.end(), true) == cur.end()) break;
        }
        out = cur;
        Positions frontier = cur;
        for (int64_t i = 0; n.max == kUnbounded || i < n.max - n.min; ++i) {
          LUMEN_ASSIGN_OR_RETURN(Positions next, run(n.kids[0], frontier));
          bool any = false;
          for (size_t p = 0; p <= len; ++p) {
            next[p] = next[p] && !out[p];
            any = any || next[p];
            out[p] = out[p] || next[p];
          }
          if (!any) break;
          frontier = std::move(next);
        }
        return out;
      }
    }
    return out;
  }

 private:
  const std::vector<Node>& nodes_;
  const std::vector<uint32_t>& text_;
  int64_t budget_;
};

}  // namespace

Result<bool> JsonPattern::matches(std::string_view text) const {
  std::vector<uint32_t> cps;
  if (!decode_utf8(text, &cps)) return error("not valid UTF-8");
  SetMatcher m(nodes_, cps, limits_.max_match_steps);
  for (const Branch& b : branches_) {
    SetMatcher::Positions starts(cps.size() + 1, !b.anchored_start);
    starts[0] = true;
    LUMEN_ASSIGN_OR_RETURN(SetMatcher::Positions ends, m.run(b.node, starts));
    if (b.anchored_end ? ends[cps.size()] : std::find(ends.begin(), ends.end(), true) != ends.end()) return true;
  }
  return false;
}

}  // namespace lumen::grammar
