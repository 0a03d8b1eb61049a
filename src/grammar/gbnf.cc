#include "grammar/gbnf.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace lumen::grammar {
namespace {

constexpr uint32_t kMaxScalar = 0x10FFFF;

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_surrogate(uint32_t c) { return c >= 0xD800 && c <= 0xDFFF; }

// Sorts, merges overlapping and adjacent ranges.
std::vector<CodeRange> normalize(std::vector<CodeRange> r) {
  std::sort(r.begin(), r.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  std::vector<CodeRange> out;
  for (const CodeRange& x : r) {
    if (!out.empty() && x.lo <= out.back().hi + 1) out.back().hi = std::max(out.back().hi, x.hi);
    else out.push_back(x);
  }
  return out;
}

// Scalar values not in `r` (r normalized).
std::vector<CodeRange> complement(const std::vector<CodeRange>& r) {
  std::vector<CodeRange> out;
  uint32_t next = 0;
  for (const CodeRange& x : r) {
    if (x.lo > next) out.push_back({next, x.lo - 1});
    next = x.hi + 1;
  }
  if (next <= kMaxScalar) out.push_back({next, kMaxScalar});
  // Remove the surrogates.
  std::vector<CodeRange> scalar;
  for (const CodeRange& x : out) {
    if (x.hi < 0xD800 || x.lo > 0xDFFF) {
      scalar.push_back(x);
      continue;
    }
    if (x.lo < 0xD800) scalar.push_back({x.lo, 0xD7FF});
    if (x.hi > 0xDFFF) scalar.push_back({0xE000, x.hi});
  }
  return scalar;
}

class Parser {
 public:
  Parser(std::string_view text, const GbnfLimits& limits) : text_(text), limits_(limits) {}

  Result<Grammar> parse() {
    if (text_.size() > limits_.max_text_bytes)
      return error("grammar: " + std::to_string(text_.size()) + " bytes, over the limit of " +
                   std::to_string(limits_.max_text_bytes));
    skip_space(true);
    while (!at_end()) {
      LUMEN_TRY(parse_rule());
      if (!err_.ok()) return err_;
    }
    for (size_t i = 0; i < defined_.size(); ++i) {
      if (!defined_[i]) return error("grammar: rule '" + g_.rules[i].name + "' is used but never defined");
    }
    auto root = ids_.find("root");
    if (root == ids_.end()) return error("grammar: no rule named 'root'");
    g_.root = root->second;
    return std::move(g_);
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  Status fail(const std::string& what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else if ((static_cast<unsigned char>(text_[i]) & 0xC0) != 0x80) {
        ++col;
      }
    }
    return error("grammar: line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
  }

  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\r' && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  int32_t symbol(std::string_view name) {
    auto it = ids_.find(std::string(name));
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<int32_t>(g_.rules.size());
    g_.rules.push_back(Rule{std::string(name), {}});
    defined_.push_back(false);
    ids_.emplace(std::string(name), id);
    return id;
  }

  Result<int32_t> new_rule(const std::string& parent) {
    if (static_cast<int32_t>(g_.rules.size()) >= limits_.max_rules)
      return fail("more than " + std::to_string(limits_.max_rules) + " rules (with groups and repetitions)");
    const auto id = static_cast<int32_t>(g_.rules.size());
    g_.rules.push_back(Rule{parent + "_" + std::to_string(id), {}});
    defined_.push_back(true);
    return id;
  }

  Status count_items(size_t n) {
    n_items_ += static_cast<int64_t>(n);
    if (n_items_ > limits_.max_items) return fail("more than " + std::to_string(limits_.max_items) + " items");
    return Status();
  }

  Status parse_rule() {
    const size_t start = pos_;
    while (!at_end() && is_word_char(peek())) ++pos_;
    if (pos_ == start) return fail("expecting a rule name");
    const std::string name(text_.substr(start, pos_ - start));
    skip_space(false);
    if (text_.substr(pos_, 3) != "::=") return fail("expecting ::= after the rule name '" + name + "'");
    pos_ += 3;
    skip_space(true);
    const int32_t id = symbol(name);
    if (static_cast<int32_t>(g_.rules.size()) > limits_.max_rules)
      return fail("more than " + std::to_string(limits_.max_rules) + " rules");
    std::vector<Alternative> alts;
    LUMEN_TRY(parse_alternates(name, /*nested=*/false, 0, &alts));
    g_.rules[id].alts = std::move(alts);
    defined_[id] = true;
    if (peek() == '\r') pos_ += peek(1) == '\n' ? 2 : 1;
    else if (peek() == '\n') ++pos_;
    else if (!at_end()) return fail(std::string("expecting the end of the line, got '") + peek() + "'");
    skip_space(true);
    return Status();
  }

  Status parse_alternates(const std::string& rule_name, bool nested, int depth, std::vector<Alternative>* out) {
    if (depth > limits_.max_nesting) return fail("parentheses nest deeper than " + std::to_string(limits_.max_nesting));
    out->emplace_back();
    LUMEN_TRY(parse_sequence(rule_name, nested, depth, &out->back()));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      out->emplace_back();
      LUMEN_TRY(parse_sequence(rule_name, nested, depth, &out->back()));
    }
    return Status();
  }

  // One character of a literal or class, with escapes.
  Result<uint32_t> parse_char() {
    if (at_end()) return fail("unexpected end of the grammar");
    if (peek() == '\\') {
      const char e = peek(1);
      auto hex = [&](int n) -> Result<uint32_t> {
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
          const char c = peek(2 + i);
          int d = -1;
          if (c >= '0' && c <= '9') d = c - '0';
          else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
          else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
          if (d < 0) return fail("expecting " + std::to_string(n) + " hex digits after \\" + e);
          v = (v << 4) | static_cast<uint32_t>(d);
        }
        pos_ += 2 + n;
        if (v > kMaxScalar || is_surrogate(v)) return fail("escape names U+" + std::to_string(v) + ", not a Unicode scalar value");
        return v;
      };
      switch (e) {
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case 't': pos_ += 2; return uint32_t{'\t'};
        case 'r': pos_ += 2; return uint32_t{'\r'};
        case 'n': pos_ += 2; return uint32_t{'\n'};
        case '\\': case '"': case '[': case ']': pos_ += 2; return static_cast<uint32_t>(e);
        default: return fail(std::string("unknown escape \\") + (e ? std::string(1, e) : std::string()));
      }
    }
    // One UTF-8 encoded scalar value.
    const auto b0 = static_cast<unsigned char>(peek());
    int n = 0;
    uint32_t v = 0;
    if (b0 < 0x80) { n = 1; v = b0; }
    else if ((b0 & 0xE0) == 0xC0) { n = 2; v = b0 & 0x1F; }
    else if ((b0 & 0xF0) == 0xE0) { n = 3; v = b0 & 0x0F; }
    else if ((b0 & 0xF8) == 0xF0) { n = 4; v = b0 & 0x07; }
    else return fail("invalid UTF-8 in the grammar text");
    for (int i = 1; i < n; ++i) {
      const auto b = static_cast<unsigned char>(peek(i));
      if ((b & 0xC0) != 0x80) return fail("invalid UTF-8 in the grammar text");
      v = (v << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kMinForLen[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < kMinForLen[n] || v > kMaxScalar || is_surrogate(v)) return fail("invalid UTF-8 in the grammar text");
    pos_ += n;
    return v;
  }

  Result<int32_t> parse_count() {
    const size_t start = pos_;
    int64_t v = 0;
    while (is_digit(peek())) {
      v = v * 10 + (peek() - '0');
      if (v > limits_.max_repeat) return fail("repetition count over the limit of " + std::to_string(limits_.max_repeat));
      ++pos_;
    }
    if (pos_ == start) return fail("expecting an integer");
    return static_cast<int32_t>(v);
  }

  // Wraps the items from `last_start` into a repetition item.
  Status repeat(const std::string& rule_name, Alternative* seq, size_t last_start, int32_t min, int32_t max) {
    if (last_start >= seq->size()) return fail("expecting an item before the repetition operator");
    if (max >= 0 && max < min) return fail("repetition {m,n} with n < m");
    int32_t body = -1;
    if (seq->size() - last_start == 1 && (*seq)[last_start].kind == Item::Kind::kRule) {
      body = (*seq)[last_start].rule;
    } else {
      LUMEN_ASSIGN_OR_RETURN(body, new_rule(rule_name));
      Alternative inner(seq->begin() + static_cast<ptrdiff_t>(last_start), seq->end());
      g_.rules[body].alts.push_back(std::move(inner));
    }
    seq->resize(last_start);
    Item it;
    it.kind = Item::Kind::kRepeat;
    it.rule = body;
    it.min = min;
    it.max = max;
    seq->push_back(std::move(it));
    return count_items(1);
  }

  Status parse_sequence(const std::string& rule_name, bool nested, int depth, Alternative* seq) {
    size_t last_start = seq->size();  // where the item a repetition applies to begins
    bool have_item = false;
    while (!at_end()) {
      const char c = peek();
      if (c == '"') {
        ++pos_;
        last_start = seq->size();
        while (peek() != '"') {
          if (at_end()) return fail("unterminated literal: expecting \"");
          LUMEN_ASSIGN_OR_RETURN(uint32_t ch, parse_char());
          Item it;
          it.chars = {{ch, ch}};
          seq->push_back(std::move(it));
          LUMEN_TRY(count_items(1));
        }
        ++pos_;
        have_item = seq->size() > last_start;
        skip_space(nested);
      } else if (c == '[') {
        ++pos_;
        bool negated = false;
        if (peek() == '^') {
          negated = true;
          ++pos_;
        }
        std::vector<CodeRange> ranges;
        while (peek() != ']') {
          if (at_end()) return fail("unterminated character class: expecting ]");
          LUMEN_ASSIGN_OR_RETURN(uint32_t lo, parse_char());
          uint32_t hi = lo;
          if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
            ++pos_;
            LUMEN_ASSIGN_OR_RETURN(hi, parse_char());
            if (hi < lo) return fail("character range with its end before its start");
          }
          ranges.push_back({lo, hi});
        }
        ++pos_;
        ranges = normalize(std::move(ranges));
        if (negated) ranges = complement(ranges);
        if (ranges.empty()) return fail("character class matches no character");
        last_start = seq->size();
        Item it;
        it.chars = std::move(ranges);
        seq->push_back(std::move(it));
        LUMEN_TRY(count_items(1));
        have_item = true;
        skip_space(nested);
      } else if (is_word_char(c)) {
        const size_t start = pos_;
        while (!at_end() && is_word_char(peek())) ++pos_;
        const int32_t id = symbol(text_.substr(start, pos_ - start));
        if (static_cast<int32_t>(g_.rules.size()) > limits_.max_rules)
          return fail("more than " + std::to_string(limits_.max_rules) + " rules");
        last_start = seq->size();
        Item it;
        it.kind = Item::Kind::kRule;
        it.rule = id;
        seq->push_back(std::move(it));
        LUMEN_TRY(count_items(1));
        have_item = true;
        skip_space(nested);
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        LUMEN_ASSIGN_OR_RETURN(int32_t sub, new_rule(rule_name));
        std::vector<Alternative> alts;
        LUMEN_TRY(parse_alternates(rule_name, /*nested=*/true, depth + 1, &alts));
        g_.rules[sub].alts = std::move(alts);
        if (peek() != ')') return fail("expecting )");
        ++pos_;
        last_start = seq->size();
        Item it;
        it.kind = Item::Kind::kRule;
        it.rule = sub;
        seq->push_back(std::move(it));
        LUMEN_TRY(count_items(1));
        have_item = true;
        skip_space(nested);
      } else if (c == '.') {
        ++pos_;
        last_start = seq->size();
        Item it;
        it.chars = all_scalar_values();
        seq->push_back(std::move(it));
        LUMEN_TRY(count_items(1));
        have_item = true;
        skip_space(nested);
      } else if (c == '*' || c == '+' || c == '?') {
        if (!have_item) return fail(std::string("expecting an item before '") + c + "'");
        ++pos_;
        skip_space(nested);
        LUMEN_TRY(repeat(rule_name, seq, last_start, c == '+' ? 1 : 0, c == '?' ? 1 : -1));
        last_start = seq->size() - 1;
      } else if (c == '{') {
        if (!have_item) return fail("expecting an item before '{'");
        ++pos_;
        skip_space(nested);
        LUMEN_ASSIGN_OR_RETURN(int32_t min, parse_count());
        skip_space(nested);
        int32_t max = min;
        if (peek() == ',') {
          ++pos_;
          skip_space(nested);
          max = -1;
          if (is_digit(peek())) {
            LUMEN_ASSIGN_OR_RETURN(max, parse_count());
            skip_space(nested);
          }
        }
        if (peek() != '}') return fail("expecting } to close the repetition count");
        ++pos_;
        skip_space(nested);
        LUMEN_TRY(repeat(rule_name, seq, last_start, min, max));
        last_start = seq->size() - 1;
      } else {
        break;
      }
    }
    return Status();
  }

  std::string_view text_;
  GbnfLimits limits_;
  size_t pos_ = 0;
  Grammar g_;
  std::vector<bool> defined_;
  std::map<std::string, int32_t> ids_;
  int64_t n_items_ = 0;
  Status err_;
};

void print_char(uint32_t c, bool in_class, std::string* out) {
  if (c == '\n') *out += "\\n";
  else if (c == '\r') *out += "\\r";
  else if (c == '\t') *out += "\\t";
  else if (c == '\\' || c == '"' || (in_class && (c == ']' || c == '[' || c == '-' || c == '^'))) {
    if (c == '-' || c == '^') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      *out += buf;
    } else {
      *out += '\\';
      *out += static_cast<char>(c);
    }
  } else if (c >= 0x20 && c < 0x7F) {
    *out += static_cast<char>(c);
  } else {
    char buf[16];
    if (c <= 0xFF) std::snprintf(buf, sizeof buf, "\\x%02X", c);
    else if (c <= 0xFFFF) std::snprintf(buf, sizeof buf, "\\u%04X", c);
    else std::snprintf(buf, sizeof buf, "\\U%08X", c);
    *out += buf;
  }
}

}  // namespace

std::vector<CodeRange> all_scalar_values() { return {{0, 0xD7FF}, {0xE000, kMaxScalar}}; }

Result<Grammar> parse_gbnf(std::string_view text, const GbnfLimits& limits) {
  Parser p(text, limits);
  return p.parse();
}

std::string to_gbnf(const Grammar& g) {
  std::string out;
  for (const Rule& r : g.rules) {
    out += r.name + " ::=";
    for (size_t a = 0; a < r.alts.size(); ++a) {
      if (a > 0) out += " |";
      for (const Item& it : r.alts[a]) {
        out += ' ';
        if (it.kind == Item::Kind::kChars) {
          if (it.chars.size() == 1 && it.chars[0].lo == it.chars[0].hi) {
            out += '"';
            print_char(it.chars[0].lo, false, &out);
            out += '"';
          } else {
            out += '[';
            for (const CodeRange& cr : it.chars) {
              print_char(cr.lo, true, &out);
              if (cr.hi != cr.lo) {
                out += '-';
                print_char(cr.hi, true, &out);
              }
            }
            out += ']';
          }
        } else {
          out += g.rules[it.rule].name;
          if (it.kind == Item::Kind::kRepeat) {
            out += '{' + std::to_string(it.min) + ',';
            if (it.max >= 0) out += std::to_string(it.max);
            out += '}';
          }
        }
      }
    }
    out += '\n';
  }
  return out;
}

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

}  // namespace lumen::grammar
