// Chat template interpreter: lexer (text + tag tokens, whitespace control applied here)
// -> recursive-descent parser (AST of statements and expressions) -> tree-walking
// evaluator over a small dynamic Value type. See chat_template.h for the subset.
#include "tokenizer/chat_template.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <deque>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

namespace lumen::tok {
namespace {

// ---- Limits against hostile templates ---------------------------------------------------

// Work is counted in units: one per byte of every string built or emitted, kStepCost per
// statement, expression node and loop iteration. A long legitimate prompt (a 1 MiB
// conversation through a ChatML-style template) costs well under 10% of kMaxWork; a
// runaway template stops after ~2M steps (well under a second in release builds).
constexpr size_t kMaxOutputBytes = size_t{16} << 20;
constexpr size_t kMaxStringBytes = size_t{16} << 20;
constexpr size_t kMaxListItems = 100000;
constexpr int64_t kMaxRangeItems = 100000;      // as Jinja's sandbox (MAX_RANGE)
constexpr size_t kMaxSourceBytes = size_t{1} << 20;
constexpr size_t kMaxContextBytes = size_t{16} << 20;
constexpr int kMaxNesting = 100;                // expression / block / value nesting depth
constexpr int64_t kMaxWork = int64_t{1} << 27;
constexpr int64_t kStepCost = 64;

struct SourcePos {
  int line = 1;
  int col = 1;
};

std::string where(SourcePos pos) {
  return "chat template " + std::to_string(pos.line) + ":" + std::to_string(pos.col) + ": ";
}
Status error_at(SourcePos pos, const std::string& msg) { return error(where(pos) + msg); }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

// ---- UTF-8 code points (strings index and count by code point, as Python) ---------------

size_t utf8_seq_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;  // invalid lead byte: one unit
}

size_t next_code_point(std::string_view s, size_t i) {
  return i + std::min(utf8_seq_len(static_cast<unsigned char>(s[i])), s.size() - i);
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i = next_code_point(s, i)) ++n;
  return n;
}

// Byte offset of code point `k` (s.size() when k >= the count).
size_t code_point_offset(std::string_view s, size_t k) {
  size_t i = 0;
  for (; i < s.size() && k > 0; --k) i = next_code_point(s, i);
  return i;
}

// Byte offsets of each code point start, plus s.size() at the end. 4 bytes per code
// point; strings are at most kMaxStringBytes.
std::vector<uint32_t> code_point_offsets(std::string_view s) {
  std::vector<uint32_t> offsets;
  for (size_t i = 0; i < s.size(); i = next_code_point(s, i)) offsets.push_back(static_cast<uint32_t>(i));
  offsets.push_back(static_cast<uint32_t>(s.size()));
  return offsets;
}

// ---- Values ------------------------------------------------------------------------------

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python
struct Namespace;
struct LoopState;

struct Value {
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction, kLoop };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  // kString; kFunction: its name; kUndefined: what was missing (for messages). Shared and
  // immutable, so copying a Value never copies text.
  std::shared_ptr<const std::string> str;
  std::shared_ptr<const List> list;  // kList (immutable, shared)
  std::shared_ptr<const Dict> dict;  // kDict (immutable, shared)
  Namespace* ns = nullptr;           // kNamespace, owned by the Renderer's arena
  std::shared_ptr<const LoopState> loop;  // kLoop: the enclosing for loop's state

  const std::string& s() const {
    static const std::string kEmpty;
    return str ? *str : kEmpty;
  }
};
using Kind = Value::Kind;

struct Namespace {
  Dict attrs;
};

// The `loop` variable: one per for statement, updated in place per iteration (as Jinja's
// LoopContext), so iterating allocates nothing per item.
struct LoopState {
  std::shared_ptr<const List> items;
  int64_t index0 = 0;
};

Value undefined_value(std::string what) {
  Value v;
  v.str = std::make_shared<const std::string>(std::move(what));
  return v;
}
Value none_value() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value bool_value(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.b = b;
  return v;
}
Value int_value(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.i = i;
  return v;
}
Value float_value(double f) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = f;
  return v;
}
Value string_value(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.str = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value list_value(List items) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<const List>(std::move(items));
  return v;
}
Value dict_value(Dict items) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<const Dict>(std::move(items));
  return v;
}
Value function_value(std::string name) {
  Value v;
  v.kind = Kind::kFunction;
  v.str = std::make_shared<const std::string>(std::move(name));
  return v;
}

bool is_number(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kFloat || v.kind == Kind::kBool; }
bool is_integral(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
int64_t as_int(const Value& v) { return v.kind == Kind::kBool ? int64_t{v.b} : v.i; }
double as_double(const Value& v) { return v.kind == Kind::kFloat ? v.f : static_cast<double>(as_int(v)); }

const char* kind_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "boolean";
    case Kind::kInt: return "integer";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kFunction: return "function";
    case Kind::kLoop: return "loop";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return v.b;
    case Kind::kInt: return v.i != 0;
    case Kind::kFloat: return v.f != 0.0;
    case Kind::kString: return !v.s().empty();
    case Kind::kList: return !v.list->empty();
    case Kind::kDict: return !v.dict->empty();
    case Kind::kNamespace:
    case Kind::kFunction:
    case Kind::kLoop: return true;
  }
  return false;
}

const Value* dict_find(const Dict& d, std::string_view key) {
  for (const auto& [k, v] : d) {
    if (k == key) return &v;
  }
  return nullptr;
}

// Python's float repr: shortest round-trip digits; fixed notation for exponents in
// [-4, 16), else d.ddde+XX.
std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e_pos = sci.find('e');
  std::string mant = sci.substr(0, e_pos);
  const int exp = std::stoi(sci.substr(e_pos + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + exp_buf;
}

std::string python_string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += quote;
  return out;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (u < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", u);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

// ---- Lexer --------------------------------------------------------------------------------

enum class Tok : uint8_t { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEnd };

struct Token {
  Tok kind;
  SourcePos pos;
  std::string text;  // kText, kName, kString (decoded), kOp
  int64_t i = 0;     // kInt
  double f = 0.0;    // kFloat
};

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Jinja normalizes \r\n and \r to \n and drops one trailing newline.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> run() {
    size_t text_begin = 0;
    size_t i = 0;
    while (true) {
      const size_t p = find_tag_start(i);
      if (p == std::string::npos) {
        emit_text(src_.substr(text_begin), text_begin);
        break;
      }
      const char kind = src_[p + 1];
      const char control = p + 2 < src_.size() ? src_[p + 2] : '\0';
      std::string text = src_.substr(text_begin, p - text_begin);
      if (control == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (control != '+' && kind != '{') {
        lstrip_block(text);
      }
      emit_text(std::move(text), text_begin);
      const size_t body = p + 2 + (control == '-' || control == '+' ? 1 : 0);
      Result<size_t> next = kind == '#'                    ? lex_comment(p, body)
                            : kind == '%' && is_raw(body) ? lex_raw(p, body)
                                                          : lex_tag(p, body, kind == '{');
      if (!next.ok()) return next.status();
      i = text_begin = *next;
    }
    tokens_.push_back(Token{Tok::kEnd, pos_of(src_.size()), {}});
    return std::move(tokens_);
  }

 private:
  SourcePos pos_of(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line_idx = static_cast<size_t>(it - line_starts_.begin()) - 1;
    return SourcePos{static_cast<int>(line_idx) + 1, static_cast<int>(offset - line_starts_[line_idx]) + 1};
  }

  size_t find_tag_start(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
    }
    return std::string::npos;
  }

  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back(Token{Tok::kText, pos_of(offset), std::move(text)});
  }

  // lstrip_blocks: spaces and tabs between a line start and a block / comment tag go.
  void lstrip_block(std::string& text) const {
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return;
    if (l_pos == text.size()) return;
    for (size_t k = l_pos; k < text.size(); ++k) {
      if (!is_space(text[k])) return;
    }
    text.resize(l_pos);
  }

  // After a closing marker at `end` (one past it): "-" strips all following whitespace,
  // a block / comment marker without "+" eats one newline (trim_blocks).
  size_t after_close(size_t end, char control, bool trim_newline) {
    size_t q = end;
    if (control == '-') {
      while (q < src_.size() && is_space(src_[q])) ++q;
    } else if (control != '+' && trim_newline && q < src_.size() && src_[q] == '\n') {
      ++q;
    }
    line_starting_ = q > end && src_[q - 1] == '\n';
    return q;
  }

  Result<size_t> lex_comment(size_t start, size_t body) {
    const size_t q = src_.find("#}", body);
    if (q == std::string::npos) return error_at(pos_of(start), "unterminated comment");
    const char control = q > body ? src_[q - 1] : '\0';
    return after_close(q + 2, control, true);
  }

  // "{% raw %}" (with optional whitespace control) starting at `body`?
  bool is_raw(size_t body) const {
    size_t q = body;
    while (q < src_.size() && is_space(src_[q])) ++q;
    if (src_.compare(q, 3, "raw") != 0 || (q + 3 < src_.size() && is_ident_char(src_[q + 3]))) return false;
    q += 3;
    while (q < src_.size() && is_space(src_[q])) ++q;
    if (q < src_.size() && src_[q] == '-') ++q;
    return src_.compare(q, 2, "%}") == 0;
  }

  Result<size_t> lex_raw(size_t start, size_t body) {
    size_t q = src_.find("%}", body);
    const bool strip_after = src_[q - 1] == '-';
    q += 2;
    if (strip_after) {
      while (q < src_.size() && is_space(src_[q])) ++q;
    }
    const size_t content_begin = q;
    for (size_t p = src_.find("{%", q); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t k = p + 2;
      const char control = k < src_.size() ? src_[k] : '\0';
      if (control == '-' || control == '+') ++k;
      while (k < src_.size() && is_space(src_[k])) ++k;
      if (src_.compare(k, 6, "endraw") != 0) continue;
      k += 6;
      while (k < src_.size() && is_space(src_[k])) ++k;
      char close_control = '\0';
      if (k < src_.size() && (src_[k] == '-' || src_[k] == '+')) close_control = src_[k++];
      if (src_.compare(k, 2, "%}") != 0) continue;
      std::string text = src_.substr(content_begin, p - content_begin);
      if (control == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (control != '+') {
        lstrip_block(text);
      }
      emit_text(std::move(text), content_begin);
      return after_close(k + 2, close_control, true);
    }
    return error_at(pos_of(start), "unterminated 'raw' block");
  }

  Result<size_t> lex_tag(size_t start, size_t q, bool is_var) {
    tokens_.push_back(Token{is_var ? Tok::kVarBegin : Tok::kBlockBegin, pos_of(start), {}});
    const char close = is_var ? '}' : '%';
    std::vector<char> brackets;
    while (true) {
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (q >= src_.size()) {
        return error_at(pos_of(start), std::string("unterminated '") + (is_var ? "{{" : "{%") + "' tag");
      }
      // Closing marker, only outside brackets (as Jinja's balancing stack).
      if (brackets.empty()) {
        char control = '\0';
        size_t m = q;
        if ((src_[m] == '-' || (!is_var && src_[m] == '+')) && m + 2 < src_.size() &&
            src_[m + 1] == close && src_[m + 2] == '}') {
          control = src_[m++];
        }
        if (src_[m] == close && m + 1 < src_.size() && src_[m + 1] == '}') {
          tokens_.push_back(Token{is_var ? Tok::kVarEnd : Tok::kBlockEnd, pos_of(q), {}});
          return after_close(m + 2, control, !is_var);
        }
      }
      const SourcePos pos = pos_of(q);
      const char c = src_[q];
      if (c == '\'' || c == '"') {
        Result<size_t> r = lex_string(q);
        if (!r.ok()) return r.status();
        q = *r;
      } else if (is_digit(c)) {
        Result<size_t> r = lex_number(q);
        if (!r.ok()) return r.status();
        q = *r;
      } else if (is_ident_start(c)) {
        size_t e = q;
        while (e < src_.size() && is_ident_char(src_[e])) ++e;
        tokens_.push_back(Token{Tok::kName, pos, src_.substr(q, e - q)});
        q = e;
      } else {
        static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (std::string_view two : kTwoChar) {
          if (src_.compare(q, 2, two) == 0) op = two;
        }
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos) {
            return error_at(pos, std::string("unexpected character '") + c + "'");
          }
          op = std::string(1, c);
          if (c == '(' || c == '[' || c == '{') brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
          if (c == ')' || c == ']' || c == '}') {
            if (brackets.empty() || brackets.back() != c) return error_at(pos, std::string("unexpected '") + c + "'");
            brackets.pop_back();
          }
        }
        tokens_.push_back(Token{Tok::kOp, pos, op});
        q += op.size();
      }
    }
  }

  Result<size_t> lex_string(size_t q) {
    const SourcePos pos = pos_of(q);
    const char quote = src_[q++];
    std::string out;
    while (q < src_.size() && src_[q] != quote) {
      char c = src_[q++];
      if (c == '\\' && q < src_.size()) {
        const char e = src_[q++];
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case '0': out += '\0'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'v': out += '\v'; break;
          case '\\': case '\'': case '"': out += e; break;
          case '\n': break;  // line continuation
          default: out += '\\'; out += e;  // Python keeps unknown escapes verbatim
        }
      } else {
        out += c;
      }
    }
    if (q >= src_.size()) return error_at(pos, "unterminated string literal");
    tokens_.push_back(Token{Tok::kString, pos, std::move(out)});
    return q + 1;
  }

  Result<size_t> lex_number(size_t q) {
    const SourcePos pos = pos_of(q);
    size_t e = q;
    while (e < src_.size() && is_digit(src_[e])) ++e;
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      is_float = true;
      ++e;
      while (e < src_.size() && is_digit(src_[e])) ++e;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t k = e + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && is_digit(src_[k])) {
        is_float = true;
        e = k;
        while (e < src_.size() && is_digit(src_[e])) ++e;
      }
    }
    Token t{is_float ? Tok::kFloat : Tok::kInt, pos, src_.substr(q, e - q)};
    if (is_float) {
      auto r = std::from_chars(src_.data() + q, src_.data() + e, t.f);
      if (r.ec != std::errc()) return error_at(pos, "bad number '" + t.text + "'");
    } else {
      auto r = std::from_chars(src_.data() + q, src_.data() + e, t.i);
      if (r.ec != std::errc()) return error_at(pos, "integer literal '" + t.text + "' out of range");
    }
    tokens_.push_back(std::move(t));
    return e;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;  // the previous tag's close consumed a newline
};

// ---- AST ----------------------------------------------------------------------------------

enum class ExprKind : uint8_t {
  kLiteral, kName, kList, kDict, kNeg, kPos, kNot, kAnd, kOr, kBinary, kCompare, kCond,
  kAttr, kIndex, kSlice, kCall, kFilter, kTest,
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Arg {
  std::string name;  // empty: positional
  ExprPtr value;
};

struct Expr {
  ExprKind kind;
  SourcePos pos;
  std::string name;               // kName, kAttr, kFilter, kTest; kBinary operator
  Value literal;                  // kLiteral
  std::vector<ExprPtr> operands;  // object / operands first; kSlice: obj, start, stop, step (may be null)
  std::vector<std::string> ops;   // kCompare: operators between operands
  std::vector<Arg> args;          // kCall, kFilter, kTest
  bool negated = false;           // kTest: "is not"
  int depth = 1;                  // height of this subtree
};

struct Stmt;
using Body = std::vector<Stmt>;

struct IfBranch {
  ExprPtr cond;
  Body body;
};

enum class StmtKind : uint8_t { kText, kOutput, kIf, kFor, kSet, kSetBlock, kBreak, kContinue, kScope };

struct Stmt {
  StmtKind kind;
  SourcePos pos;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput; kSet value; kFor iterable
  ExprPtr filter;                    // kFor "if" condition
  std::vector<std::string> targets;  // kFor / kSet / kSetBlock names; kSet attr: {namespace}
  std::string attr;                  // kSet "ns.attr": the attribute
  std::vector<IfBranch> branches;    // kIf: if and elifs
  Body body;                         // kFor, kSetBlock, kScope; kIf: else
  Body else_body;                    // kFor "else"
};

Stmt make_stmt(StmtKind kind, SourcePos pos) {
  Stmt s;
  s.kind = kind;
  s.pos = pos;
  return s;
}

}  // namespace

class ChatTemplateProgram {
 public:
  Body body;
};

namespace {

// ---- Parser -------------------------------------------------------------------------------

constexpr std::string_view kFilters[] = {
    "trim", "length", "count", "upper", "lower", "capitalize", "title", "string", "int",
    "float", "abs", "default", "d", "join", "first", "last", "list", "reverse", "replace",
    "items", "tojson", "safe", "escape", "e", "select", "reject", "selectattr", "rejectattr",
    "map", "unique",
};
constexpr std::string_view kTests[] = {
    "defined", "undefined", "none", "string", "number", "integer", "float", "boolean",
    "true", "false", "mapping", "iterable", "sequence", "callable", "even", "odd",
    "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=",
    "gt", "greaterthan", ">", "ge", ">=", "in", "lower", "upper", "sameas",
};
constexpr std::string_view kUnsupportedTags[] = {
    "macro", "call", "filter", "include", "import", "from", "extends", "block", "with",
    "autoescape", "do", "trans",
};

template <size_t N>
bool contains(const std::string_view (&list)[N], std::string_view s) {
  return std::find(std::begin(list), std::end(list), s) != std::end(list);
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Result<Body> parse_template() {
    Body body;
    std::string end_tag;
    LUMEN_TRY(parse_body(body, {}, "", SourcePos{}, &end_tag));
    return body;
  }

 private:
  const Token& cur() const { return toks_[idx_]; }
  const Token& peek(size_t ahead = 1) const { return toks_[std::min(idx_ + ahead, toks_.size() - 1)]; }
  void advance() {
    if (idx_ + 1 < toks_.size()) ++idx_;
  }
  bool is_op(std::string_view op) const { return cur().kind == Tok::kOp && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().kind == Tok::kName && cur().text == name; }
  bool accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool accept_name(std::string_view name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::kEnd: return "end of template";
      case Tok::kVarEnd: return "'}}'";
      case Tok::kBlockEnd: return "'%}'";
      case Tok::kText: return "text";
      case Tok::kString: return "string literal";
      default: return "'" + t.text + "'";
    }
  }
  Status unexpected(std::string_view expected) const {
    return error_at(cur().pos, "expected " + std::string(expected) + ", got " + describe(cur()));
  }
  Status expect_op(std::string_view op) {
    if (!accept_op(op)) return unexpected("'" + std::string(op) + "'");
    return Status::ok_status();
  }
  Status expect_block_end() {
    if (cur().kind != Tok::kBlockEnd) return unexpected("'%}'");
    advance();
    return Status::ok_status();
  }
  Result<std::string> expect_name() {
    if (cur().kind != Tok::kName) return unexpected("a name");
    std::string name = cur().text;
    advance();
    return name;
  }

  ExprPtr node(ExprKind kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }
  // Attaches `child` and bounds the tree height (deep trees would overflow the
  // evaluator's stack, e.g. 100k chained "+").
  Status add(Expr& parent, ExprPtr child) {
    if (child) parent.depth = std::max(parent.depth, child->depth + 1);
    parent.operands.push_back(std::move(child));
    if (parent.depth > kMaxNesting) return error_at(parent.pos, "expression nested too deeply");
    return Status::ok_status();
  }
  Status add_arg(Expr& parent, std::string name, ExprPtr value) {
    parent.depth = std::max(parent.depth, value->depth + 1);
    parent.args.push_back(Arg{std::move(name), std::move(value)});
    if (parent.depth > kMaxNesting) return error_at(parent.pos, "expression nested too deeply");
    return Status::ok_status();
  }

  // -- statements

  // Parses until one of `end_tags` opens a block tag ("{% endif" ...); leaves the parser
  // after that tag name and reports it in *end_tag.
  Status parse_body(Body& out, std::initializer_list<std::string_view> end_tags,
                    std::string_view opener, SourcePos opener_pos, std::string* end_tag) {
    while (true) {
      const Token& t = cur();
      switch (t.kind) {
        case Tok::kText:
          out.push_back(make_stmt(StmtKind::kText, t.pos));
          out.back().text = t.text;
          advance();
          break;
        case Tok::kVarBegin: {
          const SourcePos pos = t.pos;
          advance();
          if (cur().kind == Tok::kVarEnd) return error_at(pos, "empty expression");
          LUMEN_ASSIGN_OR_RETURN(ExprPtr e, parse_expression());
          if (cur().kind != Tok::kVarEnd) return unexpected("'}}'");
          advance();
          out.push_back(make_stmt(StmtKind::kOutput, pos));
          out.back().expr = std::move(e);
          break;
        }
        case Tok::kBlockBegin: {
          const SourcePos pos = t.pos;
          advance();
          if (cur().kind != Tok::kName) return unexpected("a tag name");
          const std::string name = cur().text;
          for (std::string_view end : end_tags) {
            if (name == end) {
              advance();
              *end_tag = name;
              return Status::ok_status();
            }
          }
          advance();
          LUMEN_TRY(parse_statement(name, pos, out));
          break;
        }
        case Tok::kEnd:
          if (end_tags.size() == 0) return Status::ok_status();
          return error_at(opener_pos, "unterminated '" + std::string(opener) + "' block (missing '{% end" +
                                          std::string(opener) + " %}')");
        default:
          return unexpected("text or a tag");
      }
    }
  }

  Status parse_statement(const std::string& name, SourcePos pos, Body& out) {
    if (++block_depth_ > kMaxNesting) return error_at(pos, "blocks nested too deeply");
    Status st = parse_statement_inner(name, pos, out);
    --block_depth_;
    return st;
  }

  Status parse_statement_inner(const std::string& name, SourcePos pos, Body& out) {
    if (name == "if") return parse_if(pos, out);
    if (name == "for") return parse_for(pos, out);
    if (name == "set") return parse_set(pos, out);
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return error_at(pos, "'" + name + "' outside of a for loop");
      LUMEN_TRY(expect_block_end());
      out.push_back(make_stmt(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, pos));
      return Status::ok_status();
    }
    if (name == "generation") {  // HF's assistant-mask marker: renders its body
      LUMEN_TRY(expect_block_end());
      Stmt s = make_stmt(StmtKind::kScope, pos);
      std::string end;
      LUMEN_TRY(parse_body(s.body, {"endgeneration"}, "generation", pos, &end));
      LUMEN_TRY(expect_block_end());
      out.push_back(std::move(s));
      return Status::ok_status();
    }
    if (contains(kUnsupportedTags, name)) return error_at(pos, "unsupported tag '" + name + "'");
    if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") {
      return error_at(pos, "unexpected '" + name + "' (no open block it could close)");
    }
    return error_at(pos, "unknown tag '" + name + "'");
  }

  Status parse_if(SourcePos pos, Body& out) {
    Stmt s = make_stmt(StmtKind::kIf, pos);
    while (true) {
      IfBranch branch;
      LUMEN_ASSIGN_OR_RETURN(branch.cond, parse_expression());
      LUMEN_TRY(expect_block_end());
      std::string end;
      LUMEN_TRY(parse_body(branch.body, {"elif", "else", "endif"}, "if", pos, &end));
      s.branches.push_back(std::move(branch));
      if (end == "elif") continue;
      if (end == "else") {
        LUMEN_TRY(expect_block_end());
        LUMEN_TRY(parse_body(s.body, {"endif"}, "if", pos, &end));
      }
      break;
    }
    LUMEN_TRY(expect_block_end());
    out.push_back(std::move(s));
    return Status::ok_status();
  }

  Status parse_for(SourcePos pos, Body& out) {
    Stmt s = make_stmt(StmtKind::kFor, pos);
    do {
      LUMEN_ASSIGN_OR_RETURN(std::string target, expect_name());
      s.targets.push_back(std::move(target));
    } while (accept_op(","));
    if (!accept_name("in")) return unexpected("'in'");
    LUMEN_ASSIGN_OR_RETURN(s.expr, parse_or());  // no "x if c else y" here: "if" filters
    if (accept_name("if")) {
      LUMEN_ASSIGN_OR_RETURN(s.filter, parse_or());
    }
    if (is_name("recursive")) return error_at(cur().pos, "unsupported: recursive loops");
    LUMEN_TRY(expect_block_end());
    ++loop_depth_;
    std::string end;
    Status st = parse_body(s.body, {"else", "endfor"}, "for", pos, &end);
    --loop_depth_;
    LUMEN_TRY(st);
    if (end == "else") {
      LUMEN_TRY(expect_block_end());
      LUMEN_TRY(parse_body(s.else_body, {"endfor"}, "for", pos, &end));
    }
    LUMEN_TRY(expect_block_end());
    out.push_back(std::move(s));
    return Status::ok_status();
  }

  Status parse_set(SourcePos pos, Body& out) {
    Stmt s = make_stmt(StmtKind::kSet, pos);
    LUMEN_ASSIGN_OR_RETURN(std::string first, expect_name());
    s.targets.push_back(std::move(first));
    if (accept_op(".")) {
      LUMEN_ASSIGN_OR_RETURN(s.attr, expect_name());
    } else {
      while (accept_op(",")) {
        LUMEN_ASSIGN_OR_RETURN(std::string target, expect_name());
        s.targets.push_back(std::move(target));
      }
    }
    if (cur().kind == Tok::kBlockEnd && s.attr.empty() && s.targets.size() == 1) {  // {% set x %}...{% endset %}
      advance();
      s.kind = StmtKind::kSetBlock;
      std::string end;
      LUMEN_TRY(parse_body(s.body, {"endset"}, "set", pos, &end));
      LUMEN_TRY(expect_block_end());
      out.push_back(std::move(s));
      return Status::ok_status();
    }
    LUMEN_TRY(expect_op("="));
    LUMEN_ASSIGN_OR_RETURN(s.expr, parse_tuple_or_expression());
    LUMEN_TRY(expect_block_end());
    out.push_back(std::move(s));
    return Status::ok_status();
  }

  // -- expressions (precedence as Jinja's parser, lowest first)

  // "a, b" without brackets (right side of set) is a tuple.
  Result<ExprPtr> parse_tuple_or_expression() {
    const SourcePos pos = cur().pos;
    LUMEN_ASSIGN_OR_RETURN(ExprPtr first, parse_expression());
    if (!is_op(",")) return first;
    ExprPtr list = node(ExprKind::kList, pos);
    LUMEN_TRY(add(*list, std::move(first)));
    while (accept_op(",")) {
      if (cur().kind == Tok::kBlockEnd) break;
      LUMEN_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
      LUMEN_TRY(add(*list, std::move(item)));
    }
    return list;
  }

  Result<ExprPtr> parse_expression() {
    if (++expr_depth_ > kMaxNesting) return error_at(cur().pos, "expression nested too deeply");
    Result<ExprPtr> r = parse_conditional();
    --expr_depth_;
    return r;
  }

  Result<ExprPtr> parse_conditional() {
    LUMEN_ASSIGN_OR_RETURN(ExprPtr expr, parse_or());
    while (is_name("if")) {
      const SourcePos pos = cur().pos;
      advance();
      ExprPtr cond = node(ExprKind::kCond, pos);
      LUMEN_ASSIGN_OR_RETURN(ExprPtr test, parse_or());
      LUMEN_TRY(add(*cond, std::move(test)));
      LUMEN_TRY(add(*cond, std::move(expr)));
      if (accept_name("else")) {
        LUMEN_ASSIGN_OR_RETURN(ExprPtr other, parse_conditional());
        LUMEN_TRY(add(*cond, std::move(other)));
      }
      expr = std::move(cond);
    }
    return expr;
  }

  Result<ExprPtr> parse_or() {
    LUMEN_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
    while (is_name("or")) {
      ExprPtr e = node(ExprKind::kOr, cur().pos);
      advance();
      LUMEN_ASSIGN_OR_RETURN(ExprPtr right, parse_and());
      LUMEN_TRY(add(*e, std::move(left)));
      LUMEN_TRY(add(*e, std::move(right)));
      left = std::move(e);
    }
    return left;
  }

  Result<ExprPtr> parse_and() {
    LUMEN_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
    while (is_name("and")) {
      ExprPtr e = node(ExprKind::kAnd, cur().pos);
      advance();
      LUMEN_ASSIGN_OR_RETURN(ExprPtr right, parse_not());
      LUMEN_TRY(add(*e, std::move(left)));
      LUMEN_TRY(add(*e, std::move(right)));
      left = std::move(e);
    }
    return left;
  }

  Result<ExprPtr> parse_not() {
    if (is_name("not")) {
      ExprPtr e = node(ExprKind::kNot, cur().pos);
      advance();
      if (++expr_depth_ > kMaxNesting) return error_at(e->pos, "expression nested too deeply");
      Result<ExprPtr> operand = parse_not();
      --expr_depth_;
      if (!operand.ok()) return operand.status();
      LUMEN_TRY(add(*e, std::move(operand).value()));
      return e;
    }
    return parse_compare();
  }

  Result<ExprPtr> parse_compare() {
    const SourcePos pos = cur().pos;
    LUMEN_ASSIGN_OR_RETURN(ExprPtr left, parse_math1());
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().kind == Tok::kOp && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                     cur().text == ">" || cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == Tok::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(ExprKind::kCompare, pos);
        LUMEN_TRY(add(*cmp, std::move(left)));
      }
      LUMEN_ASSIGN_OR_RETURN(ExprPtr right, parse_math1());
      LUMEN_TRY(add(*cmp, std::move(right)));
      cmp->ops.push_back(std::move(op));
    }
    return cmp ? std::move(cmp) : std::move(left);
  }

  // One level of left-associative binary operators.
  template <typename Next>
  Result<ExprPtr> parse_binary(std::initializer_list<std::string_view> ops, Next next) {
    LUMEN_ASSIGN_OR_RETURN(ExprPtr left, (this->*next)());
    while (cur().kind == Tok::kOp && std::find(ops.begin(), ops.end(), cur().text) != ops.end()) {
      ExprPtr e = node(ExprKind::kBinary, cur().pos);
      e->name = cur().text;
      advance();
      LUMEN_ASSIGN_OR_RETURN(ExprPtr right, (this->*next)());
      LUMEN_TRY(add(*e, std::move(left)));
      LUMEN_TRY(add(*e, std::move(right)));
      left = std::move(e);
    }
    return left;
  }
  Result<ExprPtr> parse_math1() { return parse_binary({"+", "-"}, &Parser::parse_concat); }
  Result<ExprPtr> parse_concat() { return parse_binary({"~"}, &Parser::parse_math2); }
  Result<ExprPtr> parse_math2() { return parse_binary({"*", "/", "//", "%"}, &Parser::parse_pow); }
  Result<ExprPtr> parse_pow() { return parse_binary({"**"}, &Parser::parse_unary_filtered); }

  // Unary sign binds tighter than "**" (Jinja: -2 ** 2 == 4); filters and tests apply to
  // the signed value.
  Result<ExprPtr> parse_unary_filtered() {
    LUMEN_ASSIGN_OR_RETURN(ExprPtr e, parse_unary());
    return parse_filters_and_tests(std::move(e));
  }

  Result<ExprPtr> parse_unary() {
    if (is_op("-") || is_op("+")) {
      ExprPtr e = node(is_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur().pos);
      advance();
      if (++expr_depth_ > kMaxNesting) return error_at(e->pos, "expression nested too deeply");
      Result<ExprPtr> operand = parse_unary();
      --expr_depth_;
      if (!operand.ok()) return operand.status();
      LUMEN_TRY(add(*e, std::move(operand).value()));
      return e;
    }
    LUMEN_ASSIGN_OR_RETURN(ExprPtr primary, parse_primary());
    return parse_postfix(std::move(primary));
  }

  Result<ExprPtr> parse_primary() {
    const Token& t = cur();
    const SourcePos pos = t.pos;
    switch (t.kind) {
      case Tok::kName: {
        ExprPtr e = node(ExprKind::kLiteral, pos);
        if (t.text == "true" || t.text == "True") {
          e->literal = bool_value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = bool_value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = none_value();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.text;
        }
        advance();
        return e;
      }
      case Tok::kString: {
        std::string s;
        while (cur().kind == Tok::kString) {  // adjacent literals concatenate
          s += cur().text;
          advance();
        }
        ExprPtr e = node(ExprKind::kLiteral, pos);
        e->literal = string_value(std::move(s));
        return e;
      }
      case Tok::kInt:
      case Tok::kFloat: {
        ExprPtr e = node(ExprKind::kLiteral, pos);
        e->literal = t.kind == Tok::kInt ? int_value(t.i) : float_value(t.f);
        advance();
        return e;
      }
      case Tok::kOp:
        if (t.text == "(") {
          advance();
          if (accept_op(")")) return node(ExprKind::kList, pos);  // empty tuple
          LUMEN_ASSIGN_OR_RETURN(ExprPtr first, parse_expression());
          if (accept_op(")")) return first;  // parenthesized expression
          ExprPtr tuple = node(ExprKind::kList, pos);
          LUMEN_TRY(add(*tuple, std::move(first)));
          while (accept_op(",")) {
            if (is_op(")")) break;
            LUMEN_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
            LUMEN_TRY(add(*tuple, std::move(item)));
          }
          LUMEN_TRY(expect_op(")"));
          return tuple;
        }
        if (t.text == "[") {
          advance();
          ExprPtr list = node(ExprKind::kList, pos);
          while (!is_op("]")) {
            LUMEN_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
            LUMEN_TRY(add(*list, std::move(item)));
            if (!accept_op(",")) break;
          }
          LUMEN_TRY(expect_op("]"));
          return list;
        }
        if (t.text == "{") {
          advance();
          ExprPtr dict = node(ExprKind::kDict, pos);
          while (!is_op("}")) {
            LUMEN_ASSIGN_OR_RETURN(ExprPtr key, parse_expression());
            LUMEN_TRY(expect_op(":"));
            LUMEN_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
            LUMEN_TRY(add(*dict, std::move(key)));
            LUMEN_TRY(add(*dict, std::move(value)));
            if (!accept_op(",")) break;
          }
          LUMEN_TRY(expect_op("}"));
          return dict;
        }
        break;
      default:
        break;
    }
    return unexpected("an expression");
  }

  Result<ExprPtr> parse_postfix(ExprPtr e) {
    while (true) {
      const SourcePos pos = cur().pos;
      if (accept_op(".")) {
        ExprPtr attr = node(ExprKind::kAttr, pos);
        LUMEN_ASSIGN_OR_RETURN(attr->name, expect_name());
        LUMEN_TRY(add(*attr, std::move(e)));
        e = std::move(attr);
      } else if (accept_op("[")) {
        LUMEN_ASSIGN_OR_RETURN(e, parse_subscript(std::move(e), pos));
      } else if (accept_op("(")) {
        ExprPtr call = node(ExprKind::kCall, pos);
        LUMEN_TRY(add(*call, std::move(e)));
        LUMEN_TRY(parse_call_args(*call));
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> parse_subscript(ExprPtr obj, SourcePos pos) {
    ExprPtr parts[3];
    int n_colons = 0;
    for (int part = 0; part < 3; ++part) {
      if (!is_op(":") && !is_op("]")) {
        LUMEN_ASSIGN_OR_RETURN(parts[part], parse_expression());
      }
      if (part < 2 && accept_op(":")) {
        ++n_colons;
        continue;
      }
      break;
    }
    LUMEN_TRY(expect_op("]"));
    if (n_colons == 0) {
      if (!parts[0]) return error_at(pos, "empty subscript");
      ExprPtr index = node(ExprKind::kIndex, pos);
      LUMEN_TRY(add(*index, std::move(obj)));
      LUMEN_TRY(add(*index, std::move(parts[0])));
      return index;
    }
    ExprPtr slice = node(ExprKind::kSlice, pos);
    LUMEN_TRY(add(*slice, std::move(obj)));
    for (ExprPtr& part : parts) LUMEN_TRY(add(*slice, std::move(part)));
    return slice;
  }

  // After "(": positional and keyword arguments, then ")".
  Status parse_call_args(Expr& call) {
    while (!is_op(")")) {
      std::string name;
      if (cur().kind == Tok::kName && peek().kind == Tok::kOp && peek().text == "=") {
        name = cur().text;
        advance();
        advance();
      }
      LUMEN_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
      LUMEN_TRY(add_arg(call, std::move(name), std::move(value)));
      if (!accept_op(",")) break;
    }
    return expect_op(")");
  }

  Result<ExprPtr> parse_filters_and_tests(ExprPtr e) {
    while (true) {
      const SourcePos pos = cur().pos;
      if (accept_op("|")) {
        ExprPtr filter = node(ExprKind::kFilter, pos);
        const SourcePos name_pos = cur().pos;
        LUMEN_ASSIGN_OR_RETURN(filter->name, expect_name());
        if (!contains(kFilters, filter->name)) {
          return error_at(name_pos, "unknown filter '" + filter->name + "'");
        }
        LUMEN_TRY(add(*filter, std::move(e)));
        if (accept_op("(")) LUMEN_TRY(parse_call_args(*filter));
        e = std::move(filter);
      } else if (is_name("is")) {
        advance();
        ExprPtr test = node(ExprKind::kTest, pos);
        test->negated = accept_name("not");
        const SourcePos name_pos = cur().pos;
        if (cur().kind == Tok::kName || (cur().kind == Tok::kOp && contains(kTests, cur().text))) {
          test->name = cur().text;
          advance();
        } else {
          return unexpected("a test name");
        }
        if (!contains(kTests, test->name)) return error_at(name_pos, "unknown test '" + test->name + "'");
        LUMEN_TRY(add(*test, std::move(e)));
        if (accept_op("(")) {
          LUMEN_TRY(parse_call_args(*test));
        } else if ((cur().kind == Tok::kString || cur().kind == Tok::kInt || cur().kind == Tok::kFloat ||
                    (cur().kind == Tok::kName && !is_name("else") && !is_name("or") && !is_name("and")) ||
                    is_op("[") || is_op("{")) &&
                   cur().kind != Tok::kBlockEnd) {
          // "is divisibleby 3", "is sameas none": one argument without parentheses.
          LUMEN_ASSIGN_OR_RETURN(ExprPtr primary, parse_primary());
          LUMEN_ASSIGN_OR_RETURN(ExprPtr arg, parse_postfix(std::move(primary)));
          LUMEN_TRY(add_arg(*test, "", std::move(arg)));
        }
        e = std::move(test);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> toks_;
  size_t idx_ = 0;
  int expr_depth_ = 0;
  int block_depth_ = 0;
  int loop_depth_ = 0;
};

// ---- Evaluator ----------------------------------------------------------------------------

enum class Flow : uint8_t { kNormal, kBreak, kContinue };

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;

  // Argument `idx` by position or `name` by keyword; null if absent.
  const Value* get(size_t idx, std::string_view name) const {
    if (idx < pos.size()) return &pos[idx];
    for (const auto& [k, v] : kw) {
      if (k == name) return &v;
    }
    return nullptr;
  }
};

class Renderer {
 public:
  Renderer(const ChatTemplateProgram& program, Dict globals) : program_(program) {
    frames_.push_back(std::move(globals));
  }

  Result<std::string> run() {
    Result<Flow> r = exec_body(program_.body);
    if (!r.ok()) return r.status();
    return std::move(out_);
  }

 private:
  using Frame = Dict;

  // RAII scope: pushes a frame, pops it on every exit path.
  class ScopedFrame {
   public:
    explicit ScopedFrame(Renderer& r) : r_(r) { r_.frames_.emplace_back(); }
    ~ScopedFrame() { r_.frames_.pop_back(); }
    ScopedFrame(const ScopedFrame&) = delete;
    ScopedFrame& operator=(const ScopedFrame&) = delete;

   private:
    Renderer& r_;
  };

  Status charge(int64_t units, SourcePos pos) {
    work_left_ -= units;
    if (work_left_ < 0) return error_at(pos, "template exceeded its evaluation budget (runaway loop?)");
    return Status::ok_status();
  }

  Status check_size(const std::string& s, SourcePos pos) {
    if (s.size() > kMaxStringBytes) return error_at(pos, "string value exceeds the size limit");
    return Status::ok_status();
  }

  // For a newly built string: size limit, and its bytes are charged.
  Status check_string(const std::string& s, SourcePos pos) {
    LUMEN_TRY(check_size(s, pos));
    return charge(static_cast<int64_t>(s.size()), pos);
  }

  Status check_list(size_t n, SourcePos pos) {
    if (n > kMaxListItems) return error_at(pos, "list exceeds the size limit");
    return charge(static_cast<int64_t>(n), pos);
  }

  Value lookup(const std::string& name) {
    for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
      work_left_ -= static_cast<int64_t>(it->size());  // linear scan; overdraft fails at the next charge
      if (const Value* v = dict_find(*it, name)) return *v;
    }
    static constexpr std::string_view kBuiltins[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};
    if (contains(kBuiltins, name)) return function_value(name);
    return undefined_value(name);
  }

  void assign(const std::string& name, Value v) {
    Frame& frame = frames_.back();
    for (auto& [k, existing] : frame) {
      if (k == name) {
        existing = std::move(v);
        return;
      }
    }
    frame.emplace_back(name, std::move(v));
  }

  // -- statements

  Result<Flow> exec_body(const Body& body) {
    for (const Stmt& s : body) {
      LUMEN_ASSIGN_OR_RETURN(Flow flow, exec(s));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Status emit(std::string_view text, SourcePos pos) {
    if (out_.size() + text.size() > kMaxOutputBytes) return error_at(pos, "rendered prompt exceeds the size limit");
    LUMEN_TRY(charge(static_cast<int64_t>(text.size()), pos));
    out_ += text;
    return Status::ok_status();
  }

  Result<Flow> exec(const Stmt& s) {
    LUMEN_TRY(charge(kStepCost, s.pos));
    switch (s.kind) {
      case StmtKind::kText:
        LUMEN_TRY(emit(s.text, s.pos));
        return Flow::kNormal;
      case StmtKind::kOutput: {
        LUMEN_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
        LUMEN_ASSIGN_OR_RETURN(std::string text, to_str(v, s.pos));
        LUMEN_TRY(emit(text, s.pos));
        return Flow::kNormal;
      }
      case StmtKind::kIf:
        for (const IfBranch& branch : s.branches) {
          LUMEN_ASSIGN_OR_RETURN(Value cond, eval(*branch.cond));
          if (truthy(cond)) return exec_body(branch.body);
        }
        return exec_body(s.body);
      case StmtKind::kFor:
        return exec_for(s);
      case StmtKind::kSet: {
        LUMEN_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
        LUMEN_TRY(exec_set(s, std::move(v)));
        return Flow::kNormal;
      }
      case StmtKind::kSetBlock: {
        std::string saved = std::move(out_);
        out_.clear();
        Result<Flow> r = exec_body(s.body);
        std::string captured = std::move(out_);
        out_ = std::move(saved);
        if (!r.ok()) return r.status();
        if (out_.size() + captured.size() > kMaxOutputBytes) return error_at(s.pos, "captured block exceeds the size limit");
        assign(s.targets[0], string_value(std::move(captured)));
        return Flow::kNormal;
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kScope:
        return exec_body(s.body);
    }
    return Flow::kNormal;
  }

  Status exec_set(const Stmt& s, Value v) {
    if (!s.attr.empty()) {
      const Value target = lookup(s.targets[0]);
      if (target.kind != Kind::kNamespace) {
        return error_at(s.pos, "cannot set attribute '" + s.attr + "' of '" + s.targets[0] + "' (" +
                                   kind_name(target) + "); only namespace() objects allow it");
      }
      for (auto& [k, existing] : target.ns->attrs) {
        if (k == s.attr) {
          existing = std::move(v);
          return Status::ok_status();
        }
      }
      target.ns->attrs.emplace_back(s.attr, std::move(v));
      return Status::ok_status();
    }
    if (s.targets.size() == 1) {
      assign(s.targets[0], std::move(v));
      return Status::ok_status();
    }
    return unpack(s.targets, v, s.pos);
  }

  Status unpack(const std::vector<std::string>& targets, const Value& v, SourcePos pos) {
    if (v.kind != Kind::kList || v.list->size() != targets.size()) {
      return error_at(pos, "cannot unpack " + std::string(kind_name(v)) + " into " + std::to_string(targets.size()) + " names");
    }
    for (size_t k = 0; k < targets.size(); ++k) assign(targets[k], (*v.list)[k]);
    return Status::ok_status();
  }

  Result<List> iterate(const Value& v, SourcePos pos) {
    switch (v.kind) {
      case Kind::kUndefined: return List{};
      case Kind::kList:
        LUMEN_TRY(charge(static_cast<int64_t>(v.list->size()), pos));
        return *v.list;
      case Kind::kDict: {
        LUMEN_TRY(charge(static_cast<int64_t>(v.dict->size()), pos));
        List keys;
        for (const auto& [k, unused] : *v.dict) keys.push_back(string_value(k));
        return keys;
      }
      case Kind::kString: {
        const std::string& s = v.s();
        LUMEN_TRY(check_list(code_point_count(s), pos));
        List chars;
        for (size_t i = 0; i < s.size();) {
          const size_t next = next_code_point(s, i);
          chars.push_back(string_value(s.substr(i, next - i)));
          i = next;
        }
        return chars;
      }
      default:
        return error_at(pos, std::string("cannot iterate over ") + kind_name(v));
    }
  }

  Result<Flow> exec_for(const Stmt& s) {
    LUMEN_ASSIGN_OR_RETURN(Value iterable, eval(*s.expr));
    LUMEN_ASSIGN_OR_RETURN(List items, iterate(iterable, s.pos));
    if (s.filter) {  // "for x in xs if cond": filter first, so loop.length counts survivors
      List kept;
      for (Value& item : items) {
        LUMEN_TRY(charge(kStepCost, s.pos));
        ScopedFrame frame(*this);
        LUMEN_TRY(bind_targets(s, item));
        LUMEN_ASSIGN_OR_RETURN(Value keep, eval(*s.filter));
        if (truthy(keep)) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(s.else_body);
    auto state = std::make_shared<LoopState>();
    state->items = std::make_shared<const List>(std::move(items));
    Value loop;
    loop.kind = Kind::kLoop;
    loop.loop = state;
    const size_t n = state->items->size();
    ScopedFrame frame(*this);
    for (size_t k = 0; k < n; ++k) {
      LUMEN_TRY(charge(kStepCost, s.pos));
      state->index0 = static_cast<int64_t>(k);
      frames_.back().clear();  // each iteration starts from the enclosing scope
      LUMEN_TRY(bind_targets(s, (*state->items)[k]));
      assign("loop", loop);
      LUMEN_ASSIGN_OR_RETURN(Flow flow, exec_body(s.body));
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Status bind_targets(const Stmt& s, const Value& item) {
    if (s.targets.size() == 1) {
      assign(s.targets[0], item);
      return Status::ok_status();
    }
    return unpack(s.targets, item, s.pos);
  }

  // -- string conversion

  Result<std::string> to_str(const Value& v, SourcePos pos) {
    switch (v.kind) {
      case Kind::kUndefined: return std::string();
      case Kind::kString:
        LUMEN_TRY(charge(static_cast<int64_t>(v.s().size()), pos));
        return v.s();
      default: return repr(v, pos, 0);
    }
  }

  // Python repr (str() of containers uses it for their items).
  Result<std::string> repr(const Value& v, SourcePos pos, int depth = 0) {
    if (depth > kMaxNesting) return error_at(pos, "value nested too deeply to print");
    switch (v.kind) {
      case Kind::kUndefined: return std::string();
      case Kind::kNone: return std::string("None");
      case Kind::kBool: return std::string(v.b ? "True" : "False");
      case Kind::kInt: return std::to_string(v.i);
      case Kind::kFloat: return float_repr(v.f);
      case Kind::kString:
        LUMEN_TRY(charge(static_cast<int64_t>(v.s().size()), pos));
        return python_string_repr(v.s());
      case Kind::kFunction: return "<function " + v.s() + ">";
      case Kind::kLoop: return std::string("<LoopContext>");
      case Kind::kList: {
        std::string out = "[";
        for (size_t k = 0; k < v.list->size(); ++k) {
          if (k) out += ", ";
          LUMEN_ASSIGN_OR_RETURN(std::string item, repr((*v.list)[k], pos, depth + 1));
          out += item;
          LUMEN_TRY(check_size(out, pos));
          LUMEN_TRY(charge(static_cast<int64_t>(item.size()) + 2, pos));
        }
        return out + "]";
      }
      case Kind::kDict:
      case Kind::kNamespace: {
        const Dict& d = v.kind == Kind::kDict ? *v.dict : v.ns->attrs;
        std::string out = v.kind == Kind::kDict ? "{" : "<Namespace {";
        bool first = true;
        for (const auto& [k, item] : d) {
          if (!first) out += ", ";
          first = false;
          LUMEN_ASSIGN_OR_RETURN(std::string s, repr(item, pos, depth + 1));
          out += python_string_repr(k) + ": " + s;
          LUMEN_TRY(check_size(out, pos));
          LUMEN_TRY(charge(static_cast<int64_t>(k.size() + s.size()) + 4, pos));
        }
        return out + (v.kind == Kind::kDict ? "}" : "}>");
      }
    }
    return std::string();
  }

  // json.dumps(v, ensure_ascii=False, indent=indent) with Python's default separators.
  Status to_json(const Value& v, int indent, int depth, SourcePos pos, std::string& out) {
    if (depth > kMaxNesting) return error_at(pos, "value nested too deeply for tojson");
    LUMEN_TRY(check_size(out, pos));
    LUMEN_TRY(charge(1, pos));
    auto newline = [&](int level) {
      if (indent < 0) return;
      out += '\n';
      out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
    };
    const char* item_sep = indent < 0 ? ", " : ",";
    switch (v.kind) {
      case Kind::kNone: out += "null"; return Status::ok_status();
      case Kind::kBool: out += v.b ? "true" : "false"; return Status::ok_status();
      case Kind::kInt: out += std::to_string(v.i); return Status::ok_status();
      case Kind::kFloat:
        out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity") : float_repr(v.f);
        return Status::ok_status();
      case Kind::kString:
        LUMEN_TRY(charge(static_cast<int64_t>(v.s().size()), pos));
        out += json_string(v.s());
        return Status::ok_status();
      case Kind::kList: {
        if (v.list->empty()) {
          out += "[]";
          return Status::ok_status();
        }
        out += '[';
        for (size_t k = 0; k < v.list->size(); ++k) {
          if (k) out += item_sep;
          newline(depth + 1);
          LUMEN_TRY(to_json((*v.list)[k], indent, depth + 1, pos, out));
        }
        newline(depth);
        out += ']';
        return Status::ok_status();
      }
      case Kind::kDict: {
        if (v.dict->empty()) {
          out += "{}";
          return Status::ok_status();
        }
        out += '{';
        bool first = true;
        for (const auto& [k, item] : *v.dict) {
          if (!first) out += item_sep;
          first = false;
          newline(depth + 1);
          out += json_string(k) + ": ";
          LUMEN_TRY(to_json(item, indent, depth + 1, pos, out));
        }
        newline(depth);
        out += '}';
        return Status::ok_status();
      }
      default:
        return error_at(pos, std::string("tojson: object of type ") + kind_name(v) +
                                 (v.kind == Kind::kUndefined && !v.s().empty() ? " ('" + v.s() + "')" : "") +
                                 " is not JSON serializable");
    }
  }

  // -- expressions

  Result<Value> eval(const Expr& e) {
    LUMEN_TRY(charge(kStepCost, e.pos));
    switch (e.kind) {
      case ExprKind::kLiteral: return e.literal;
      case ExprKind::kName: return lookup(e.name);
      case ExprKind::kList: {
        List items;
        for (const ExprPtr& op : e.operands) {
          LUMEN_ASSIGN_OR_RETURN(Value v, eval(*op));
          items.push_back(std::move(v));
        }
        return list_value(std::move(items));
      }
      case ExprKind::kDict: {
        Dict items;
        for (size_t k = 0; k + 1 < e.operands.size(); k += 2) {
          LUMEN_ASSIGN_OR_RETURN(Value key, eval(*e.operands[k]));
          if (key.kind != Kind::kString) return error_at(e.operands[k]->pos, "dict keys must be strings");
          LUMEN_ASSIGN_OR_RETURN(Value value, eval(*e.operands[k + 1]));
          set_key(items, key.s(), std::move(value));
        }
        return dict_value(std::move(items));
      }
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        LUMEN_ASSIGN_OR_RETURN(Value v, eval(*e.operands[0]));
        if (!is_number(v)) return error_at(e.pos, std::string("bad operand for unary sign: ") + kind_name(v));
        if (e.kind == ExprKind::kPos) return is_integral(v) ? int_value(as_int(v)) : v;
        if (v.kind == Kind::kFloat) return float_value(-v.f);
        if (as_int(v) == std::numeric_limits<int64_t>::min()) return error_at(e.pos, "integer overflow");
        return int_value(-as_int(v));
      }
      case ExprKind::kNot: {
        LUMEN_ASSIGN_OR_RETURN(Value v, eval(*e.operands[0]));
        return bool_value(!truthy(v));
      }
      case ExprKind::kAnd:
      case ExprKind::kOr: {  // Python semantics: the deciding operand, not a bool
        LUMEN_ASSIGN_OR_RETURN(Value left, eval(*e.operands[0]));
        if (truthy(left) == (e.kind == ExprKind::kOr)) return left;
        return eval(*e.operands[1]);
      }
      case ExprKind::kBinary: {
        LUMEN_ASSIGN_OR_RETURN(Value left, eval(*e.operands[0]));
        LUMEN_ASSIGN_OR_RETURN(Value right, eval(*e.operands[1]));
        return binary(e.name, left, right, e.pos);
      }
      case ExprKind::kCompare: {
        LUMEN_ASSIGN_OR_RETURN(Value left, eval(*e.operands[0]));
        for (size_t k = 0; k < e.ops.size(); ++k) {
          LUMEN_ASSIGN_OR_RETURN(Value right, eval(*e.operands[k + 1]));
          LUMEN_ASSIGN_OR_RETURN(bool ok, compare(e.ops[k], left, right, e.pos));
          if (!ok) return bool_value(false);
          left = std::move(right);
        }
        return bool_value(true);
      }
      case ExprKind::kCond: {
        LUMEN_ASSIGN_OR_RETURN(Value cond, eval(*e.operands[0]));
        if (truthy(cond)) return eval(*e.operands[1]);
        if (e.operands.size() > 2) return eval(*e.operands[2]);
        return undefined_value("");
      }
      case ExprKind::kAttr: {
        LUMEN_ASSIGN_OR_RETURN(Value obj, eval(*e.operands[0]));
        return get_attr(obj, e.name);
      }
      case ExprKind::kIndex: {
        LUMEN_ASSIGN_OR_RETURN(Value obj, eval(*e.operands[0]));
        LUMEN_ASSIGN_OR_RETURN(Value key, eval(*e.operands[1]));
        return get_item(obj, key, e.pos);
      }
      case ExprKind::kSlice: return eval_slice(e);
      case ExprKind::kCall: return eval_call(e);
      case ExprKind::kFilter: {
        LUMEN_ASSIGN_OR_RETURN(Value obj, eval(*e.operands[0]));
        LUMEN_ASSIGN_OR_RETURN(CallArgs args, eval_args(e));
        return apply_filter(e.name, obj, args, e.pos);
      }
      case ExprKind::kTest: {
        LUMEN_ASSIGN_OR_RETURN(Value obj, eval(*e.operands[0]));
        LUMEN_ASSIGN_OR_RETURN(CallArgs args, eval_args(e));
        LUMEN_ASSIGN_OR_RETURN(bool result, apply_test(e.name, obj, args, e.pos));
        return bool_value(result != e.negated);
      }
    }
    return undefined_value("");
  }

  static void set_key(Dict& d, const std::string& key, Value v) {
    for (auto& [k, existing] : d) {
      if (k == key) {
        existing = std::move(v);
        return;
      }
    }
    d.emplace_back(key, std::move(v));
  }

  Result<CallArgs> eval_args(const Expr& e) {
    CallArgs args;
    for (const Arg& a : e.args) {
      LUMEN_ASSIGN_OR_RETURN(Value v, eval(*a.value));
      if (a.name.empty()) {
        args.pos.push_back(std::move(v));
      } else {
        args.kw.emplace_back(a.name, std::move(v));
      }
    }
    return args;
  }

  static Value loop_attr(const LoopState& st, const std::string& name) {
    const int64_t k = st.index0;
    const int64_t n = static_cast<int64_t>(st.items->size());
    if (name == "index") return int_value(k + 1);
    if (name == "index0") return int_value(k);
    if (name == "revindex") return int_value(n - k);
    if (name == "revindex0") return int_value(n - k - 1);
    if (name == "first") return bool_value(k == 0);
    if (name == "last") return bool_value(k == n - 1);
    if (name == "length") return int_value(n);
    if (name == "depth") return int_value(1);
    if (name == "depth0") return int_value(0);
    if (name == "previtem" && k > 0) return (*st.items)[static_cast<size_t>(k - 1)];
    if (name == "nextitem" && k + 1 < n) return (*st.items)[static_cast<size_t>(k + 1)];
    return undefined_value("loop." + name);
  }

  Value get_attr(const Value& obj, const std::string& name) {
    if (obj.kind == Kind::kLoop) return loop_attr(*obj.loop, name);
    const Dict* d = obj.kind == Kind::kDict ? obj.dict.get() : obj.kind == Kind::kNamespace ? &obj.ns->attrs : nullptr;
    if (d) {
      work_left_ -= static_cast<int64_t>(d->size());  // linear scan; overdraft fails at the next charge
      if (const Value* v = dict_find(*d, name)) return *v;
    }
    return undefined_value(name);
  }

  Result<Value> get_item(const Value& obj, const Value& key, SourcePos pos) {
    if (key.kind == Kind::kString) return get_attr(obj, key.s());
    if (!is_integral(key)) return undefined_value("");
    int64_t k = as_int(key);
    if (obj.kind == Kind::kList) {
      const int64_t n = static_cast<int64_t>(obj.list->size());
      if (k < 0) k += n;
      if (k < 0 || k >= n) return undefined_value("");
      return (*obj.list)[static_cast<size_t>(k)];
    }
    if (obj.kind == Kind::kString) {
      const std::string& s = obj.s();
      LUMEN_TRY(charge(static_cast<int64_t>(s.size()), pos));
      if (k < 0) k += static_cast<int64_t>(code_point_count(s));
      if (k < 0) return undefined_value("");
      const size_t b = code_point_offset(s, static_cast<size_t>(k));
      if (b >= s.size()) return undefined_value("");
      return string_value(s.substr(b, next_code_point(s, b) - b));
    }
    return undefined_value("");
  }

  // Python slice index arithmetic on a sequence of length n.
  static std::vector<size_t> slice_indices(int64_t n, const Value* start_v, const Value* stop_v, int64_t step) {
    auto clamp = [&](const Value* v, int64_t dflt, int64_t lo, int64_t hi) {
      if (!v) return dflt;
      int64_t x = as_int(*v);
      if (x < 0) x += n;
      return std::clamp(x, lo, hi);
    };
    std::vector<size_t> out;
    if (step > 0) {
      const int64_t start = clamp(start_v, 0, 0, n);
      const int64_t stop = clamp(stop_v, n, 0, n);
      for (int64_t k = start; k < stop; k = step < stop - k ? k + step : stop) out.push_back(static_cast<size_t>(k));
    } else {
      const int64_t start = clamp(start_v, n - 1, -1, n - 1);
      const int64_t stop = clamp(stop_v, -1, -1, n - 1);
      for (int64_t k = start; k > stop; k = step > stop - k ? k + step : stop) out.push_back(static_cast<size_t>(k));
    }
    return out;
  }

  Result<Value> eval_slice(const Expr& e) {
    LUMEN_ASSIGN_OR_RETURN(Value obj, eval(*e.operands[0]));
    Value bounds[3];
    const Value* ptrs[3] = {nullptr, nullptr, nullptr};
    for (int k = 0; k < 3; ++k) {
      if (!e.operands[static_cast<size_t>(k) + 1]) continue;
      LUMEN_ASSIGN_OR_RETURN(bounds[k], eval(*e.operands[static_cast<size_t>(k) + 1]));
      if (bounds[k].kind == Kind::kNone) continue;
      if (!is_integral(bounds[k])) return error_at(e.pos, "slice indices must be integers");
      ptrs[k] = &bounds[k];
    }
    const int64_t step = ptrs[2] ? as_int(*ptrs[2]) : 1;
    if (step == 0) return error_at(e.pos, "slice step cannot be zero");
    if (obj.kind == Kind::kList) {
      LUMEN_TRY(charge(static_cast<int64_t>(obj.list->size()), e.pos));
      List out;
      for (size_t k : slice_indices(static_cast<int64_t>(obj.list->size()), ptrs[0], ptrs[1], step)) {
        out.push_back((*obj.list)[k]);
      }
      return list_value(std::move(out));
    }
    if (obj.kind == Kind::kString) {
      LUMEN_TRY(charge(4 * static_cast<int64_t>(obj.s().size()), e.pos));
      const std::vector<uint32_t> offsets = code_point_offsets(obj.s());
      std::string out;
      for (size_t k : slice_indices(static_cast<int64_t>(offsets.size()) - 1, ptrs[0], ptrs[1], step)) {
        out.append(obj.s(), offsets[k], offsets[k + 1] - offsets[k]);
      }
      return string_value(std::move(out));
    }
    if (obj.kind == Kind::kUndefined) return obj;
    return error_at(e.pos, std::string("cannot slice ") + kind_name(obj));
  }

  // -- operators

  Result<Value> binary(const std::string& op, const Value& a, const Value& b, SourcePos pos) {
    if (op == "~") {
      LUMEN_ASSIGN_OR_RETURN(std::string sa, to_str(a, pos));
      LUMEN_ASSIGN_OR_RETURN(std::string sb, to_str(b, pos));
      std::string s = sa + sb;
      LUMEN_TRY(check_string(s, pos));
      return string_value(std::move(s));
    }
    for (const Value* v : {&a, &b}) {
      if (v->kind == Kind::kUndefined) {
        return error_at(pos, "'" + (v->s().empty() ? std::string("value") : v->s()) + "' is undefined (operator " + op + ")");
      }
    }
    auto type_error = [&]() {
      return error_at(pos, std::string("unsupported operand types for ") + op + ": " + kind_name(a) + " and " + kind_name(b));
    };
    if (op == "+") {
      if (a.kind == Kind::kString && b.kind == Kind::kString) {
        std::string s = a.s() + b.s();
        LUMEN_TRY(check_string(s, pos));
        return string_value(std::move(s));
      }
      if (a.kind == Kind::kList && b.kind == Kind::kList) {
        LUMEN_TRY(check_list(a.list->size() + b.list->size(), pos));
        List items = *a.list;
        items.insert(items.end(), b.list->begin(), b.list->end());
        return list_value(std::move(items));
      }
    }
    if (op == "*") {  // sequence repetition
      const Value* seq = a.kind == Kind::kString || a.kind == Kind::kList ? &a : &b;
      const Value* count = seq == &a ? &b : &a;
      if ((seq->kind == Kind::kString || seq->kind == Kind::kList) && is_integral(*count)) {
        const int64_t n = std::max<int64_t>(0, as_int(*count));
        const size_t unit = seq->kind == Kind::kString ? seq->s().size() : seq->list->size();
        if (unit > 0 && static_cast<uint64_t>(n) > (seq->kind == Kind::kString ? kMaxStringBytes : kMaxListItems) / unit) {
          return error_at(pos, "repetition exceeds the size limit");
        }
        if (seq->kind == Kind::kString) {
          std::string s;
          for (int64_t k = 0; k < n; ++k) s += seq->s();
          LUMEN_TRY(check_string(s, pos));
          return string_value(std::move(s));
        }
        List items;
        for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq->list->begin(), seq->list->end());
        LUMEN_TRY(check_list(items.size(), pos));
        return list_value(std::move(items));
      }
    }
    if (!is_number(a) || !is_number(b)) return type_error();
    const bool ints = is_integral(a) && is_integral(b);
    const int64_t x = ints ? as_int(a) : 0;
    const int64_t y = ints ? as_int(b) : 0;
    const double fx = as_double(a);
    const double fy = as_double(b);
    int64_t r = 0;
    if (op == "+") {
      if (!ints) return float_value(fx + fy);
      if (__builtin_add_overflow(x, y, &r)) return error_at(pos, "integer overflow");
      return int_value(r);
    }
    if (op == "-") {
      if (!ints) return float_value(fx - fy);
      if (__builtin_sub_overflow(x, y, &r)) return error_at(pos, "integer overflow");
      return int_value(r);
    }
    if (op == "*") {
      if (!ints) return float_value(fx * fy);
      if (__builtin_mul_overflow(x, y, &r)) return error_at(pos, "integer overflow");
      return int_value(r);
    }
    if (op == "/") {
      if (fy == 0.0) return error_at(pos, "division by zero");
      return float_value(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (fy == 0.0) return error_at(pos, op == "%" ? "modulo by zero" : "division by zero");
      if (!ints) {
        if (op == "//") return float_value(std::floor(fx / fy));
        double m = std::fmod(fx, fy);
        if (m != 0.0 && ((m < 0) != (fy < 0))) m += fy;
        return float_value(m);
      }
      if (x == std::numeric_limits<int64_t>::min() && y == -1) return error_at(pos, "integer overflow");
      int64_t q = x / y;
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {  // floor semantics, as Python
        --q;
        m += y;
      }
      return int_value(op == "//" ? q : m);
    }
    if (op == "**") {
      if (fx == 0.0 && fy < 0.0) return error_at(pos, "zero cannot be raised to a negative power");
      if (!ints || y < 0) return float_value(std::pow(fx, fy));
      int64_t result = 1;
      int64_t base = x;
      for (int64_t e = y; e > 0; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(result, base, &result)) return error_at(pos, "integer overflow");
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) return error_at(pos, "integer overflow");
      }
      return int_value(result);
    }
    return type_error();
  }

  // Python ==. Every visited node and compared byte is charged, so comparing large or
  // heavily shared structures cannot run unbounded; shared nodes compare equal at once.
  Result<bool> equal(const Value& a, const Value& b, SourcePos pos, int depth = 0) {
    if (depth > kMaxNesting) return error_at(pos, "value nested too deeply to compare");
    LUMEN_TRY(charge(1, pos));
    if (is_number(a) && is_number(b)) {
      if (is_integral(a) && is_integral(b)) return as_int(a) == as_int(b);
      return as_double(a) == as_double(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
      case Kind::kUndefined:
      case Kind::kNone: return true;
      case Kind::kString:
      case Kind::kFunction:
        LUMEN_TRY(charge(static_cast<int64_t>(std::min(a.s().size(), b.s().size())), pos));
        return a.s() == b.s();
      case Kind::kList:
        if (a.list == b.list) return true;
        if (a.list->size() != b.list->size()) return false;
        for (size_t k = 0; k < a.list->size(); ++k) {
          LUMEN_ASSIGN_OR_RETURN(bool same, equal((*a.list)[k], (*b.list)[k], pos, depth + 1));
          if (!same) return false;
        }
        return true;
      case Kind::kDict:
        if (a.dict == b.dict) return true;
        if (a.dict->size() != b.dict->size()) return false;
        LUMEN_TRY(charge(static_cast<int64_t>(a.dict->size() * a.dict->size()), pos));
        for (const auto& [k, v] : *a.dict) {
          const Value* other = dict_find(*b.dict, k);
          if (!other) return false;
          LUMEN_ASSIGN_OR_RETURN(bool same, equal(v, *other, pos, depth + 1));
          if (!same) return false;
        }
        return true;
      case Kind::kNamespace: return a.ns == b.ns;  // identity, so cycles cannot recurse
      case Kind::kLoop: return a.loop == b.loop;
      default: return false;
    }
  }

  Result<bool> contains_value(const Value& container, const Value& item, SourcePos pos) {
    switch (container.kind) {
      case Kind::kString:
        if (item.kind != Kind::kString) return error_at(pos, "'in <string>' requires a string on the left");
        LUMEN_TRY(charge(static_cast<int64_t>(container.s().size() + item.s().size()), pos));
        return container.s().find(item.s()) != std::string::npos;
      case Kind::kList:
        for (const Value& v : *container.list) {
          LUMEN_ASSIGN_OR_RETURN(bool same, equal(v, item, pos));
          if (same) return true;
        }
        return false;
      case Kind::kDict:
        LUMEN_TRY(charge(static_cast<int64_t>(container.dict->size()), pos));
        return item.kind == Kind::kString && dict_find(*container.dict, item.s()) != nullptr;
      case Kind::kUndefined: return false;
      default: return error_at(pos, std::string("argument of type ") + kind_name(container) + " is not iterable");
    }
  }

  // Ordering for < > <= >=: numbers, strings (UTF-8 byte order is code point order) and
  // lists (lexicographic, as Python).
  Result<int> three_way(const std::string& op, const Value& a, const Value& b, SourcePos pos, int depth) {
    if (depth > kMaxNesting) return error_at(pos, "value nested too deeply to compare");
    LUMEN_TRY(charge(1, pos));
    if (is_number(a) && is_number(b)) {
      if (is_integral(a) && is_integral(b)) return as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b) ? 1 : 0;
      const double x = as_double(a), y = as_double(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.kind == Kind::kString && b.kind == Kind::kString) {
      LUMEN_TRY(charge(static_cast<int64_t>(std::min(a.s().size(), b.s().size())), pos));
      const int c = a.s().compare(b.s());
      return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.kind == Kind::kList && b.kind == Kind::kList) {
      const List& x = *a.list;
      const List& y = *b.list;
      for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
        LUMEN_ASSIGN_OR_RETURN(bool same, equal(x[k], y[k], pos, depth + 1));
        if (!same) return three_way(op, x[k], y[k], pos, depth + 1);
      }
      return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    return error_at(pos, "'" + op + "' not supported between " + kind_name(a) + " and " + kind_name(b));
  }

  Result<bool> compare(const std::string& op, const Value& a, const Value& b, SourcePos pos) {
    if (op == "==") return equal(a, b, pos);
    if (op == "!=") {
      LUMEN_ASSIGN_OR_RETURN(bool same, equal(a, b, pos));
      return !same;
    }
    if (op == "in") return contains_value(b, a, pos);
    if (op == "not in") {
      LUMEN_ASSIGN_OR_RETURN(bool in, contains_value(b, a, pos));
      return !in;
    }
    if ((is_number(a) && std::isnan(as_double(a))) || (is_number(b) && std::isnan(as_double(b)))) return false;
    LUMEN_ASSIGN_OR_RETURN(int order, three_way(op, a, b, pos, 0));
    if (op == "<") return order < 0;
    if (op == ">") return order > 0;
    if (op == "<=") return order <= 0;
    return order >= 0;
  }

  // -- calls: global functions and methods

  Result<Value> eval_call(const Expr& e) {
    const Expr& callee = *e.operands[0];
    if (callee.kind == ExprKind::kAttr) {  // obj.method(...)
      LUMEN_ASSIGN_OR_RETURN(Value obj, eval(*callee.operands[0]));
      if (obj.kind != Kind::kString && obj.kind != Kind::kDict && obj.kind != Kind::kList &&
          obj.kind != Kind::kUndefined) {
        return error_at(e.pos, std::string(kind_name(obj)) + " has no method '" + callee.name + "'");
      }
      LUMEN_ASSIGN_OR_RETURN(CallArgs args, eval_args(e));
      return call_method(obj, callee.name, args, e.pos);
    }
    LUMEN_ASSIGN_OR_RETURN(Value fn, eval(callee));
    if (fn.kind != Kind::kFunction) {
      const std::string what = callee.kind == ExprKind::kName ? "'" + callee.name + "'" : "value";
      return error_at(e.pos, what + " is " + (fn.kind == Kind::kUndefined ? "undefined" : kind_name(fn)) +
                                 " and cannot be called");
    }
    LUMEN_ASSIGN_OR_RETURN(CallArgs args, eval_args(e));
    return call_builtin(fn.s(), args, e.pos);
  }

  Result<Value> call_builtin(const std::string& name, const CallArgs& args, SourcePos pos) {
    if (name == "raise_exception") {
      const Value* msg = args.get(0, "message");
      std::string text;
      if (msg) {
        LUMEN_ASSIGN_OR_RETURN(text, to_str(*msg, pos));
      }
      return error_at(pos, "raise_exception: " + text);
    }
    if (name == "range") {
      int64_t start = 0, stop = 0, step = 1;
      for (const Value& v : args.pos) {
        if (!is_integral(v)) return error_at(pos, "range() arguments must be integers");
      }
      if (args.pos.size() == 1) {
        stop = as_int(args.pos[0]);
      } else if (args.pos.size() == 2 || args.pos.size() == 3) {
        start = as_int(args.pos[0]);
        stop = as_int(args.pos[1]);
        if (args.pos.size() == 3) step = as_int(args.pos[2]);
      } else {
        return error_at(pos, "range() takes 1 to 3 arguments");
      }
      if (step == 0) return error_at(pos, "range() step cannot be zero");
      List items;
      for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
        if (static_cast<int64_t>(items.size()) >= kMaxRangeItems) {
          return error_at(pos, "range() longer than " + std::to_string(kMaxRangeItems) + " items");
        }
        items.push_back(int_value(k));
        if ((step > 0 && k > std::numeric_limits<int64_t>::max() - step) ||
            (step < 0 && k < std::numeric_limits<int64_t>::min() - step)) {
          break;
        }
      }
      LUMEN_TRY(check_list(items.size(), pos));
      return list_value(std::move(items));
    }
    if (name == "namespace" || name == "dict") {
      Dict attrs;
      if (!args.pos.empty()) {
        if (args.pos.size() > 1 || args.pos[0].kind != Kind::kDict) {
          return error_at(pos, name + "() takes keyword arguments or one dict");
        }
        attrs = *args.pos[0].dict;
      }
      for (const auto& [k, v] : args.kw) set_key(attrs, k, v);
      if (name == "dict") return dict_value(std::move(attrs));
      namespaces_.push_back(Namespace{std::move(attrs)});
      Value v;
      v.kind = Kind::kNamespace;
      v.ns = &namespaces_.back();
      return v;
    }
    if (name == "strftime_now") {
      const Value* fmt = args.get(0, "format");
      if (!fmt || fmt->kind != Kind::kString) return error_at(pos, "strftime_now() needs a format string");
      if (fmt->s().size() > 256) return error_at(pos, "strftime_now() format too long");
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buf[1024];
      const size_t n = std::strftime(buf, sizeof(buf), fmt->s().c_str(), &local);
      return string_value(std::string(buf, n));
    }
    return error_at(pos, "unknown function '" + name + "'");
  }

  static std::string strip_chars(std::string_view s, const Value* chars, bool left, bool right) {
    auto strip_it = [&](char c) {
      if (!chars || chars->kind == Kind::kNone) return is_space(c);
      return chars->s().find(c) != std::string::npos;  // ASCII / byte-wise
    };
    size_t b = 0, e = s.size();
    if (left) {
      while (b < e && strip_it(s[b])) ++b;
    }
    if (right) {
      while (e > b && strip_it(s[e - 1])) --e;
    }
    return std::string(s.substr(b, e - b));
  }

  static std::string ascii_case(std::string s, bool upper) {
    for (char& c : s) {
      if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
      if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return s;
  }

  static std::string title_case(std::string s) {
    bool prev_letter = false;
    for (char& c : s) {
      const bool lower = c >= 'a' && c <= 'z';
      const bool upper = c >= 'A' && c <= 'Z';
      if (lower && !prev_letter) c = static_cast<char>(c - 'a' + 'A');
      if (upper && prev_letter) c = static_cast<char>(c - 'A' + 'a');
      prev_letter = lower || upper;
    }
    return s;
  }

  // Jinja's title filter (not str.title): each word, split after runs of whitespace and
  // -({[<, gets its first character upper-cased and the rest lower-cased.
  static std::string jinja_title(std::string s) {
    bool word_start = true;
    for (char& c : s) {
      const bool sep = is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
      if (sep) {
        word_start = true;
        continue;
      }
      if (word_start && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
      if (!word_start && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      word_start = false;
    }
    return s;
  }

  static std::string capitalize(const std::string& s) {
    std::string out = ascii_case(s, false);
    if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
    return out;
  }

  Result<std::string> replace_all(const std::string& s, const Value* from_v, const Value* to_v, const Value* count_v,
                                  SourcePos pos) {
    if (!from_v || !to_v || from_v->kind != Kind::kString || to_v->kind != Kind::kString) {
      return error_at(pos, "replace() needs two string arguments");
    }
    int64_t count = count_v && is_integral(*count_v) ? as_int(*count_v) : -1;
    const std::string& from = from_v->s();
    const std::string& to = to_v->s();
    std::string out;
    size_t k = 0;
    while (count != 0) {
      const size_t found = from.empty() ? (k <= s.size() ? k : std::string::npos) : s.find(from, k);
      if (found == std::string::npos) break;
      out.append(s, k, found - k);
      out += to;
      if (from.empty()) {  // Python inserts between every code point
        if (found >= s.size()) {
          k = s.size() + 1;
          break;
        }
        const size_t len = utf8_seq_len(static_cast<unsigned char>(s[found]));
        out.append(s, found, len);
        k = found + len;
      } else {
        k = found + from.size();
      }
      if (out.size() > kMaxStringBytes) return error_at(pos, "replace() result exceeds the size limit");
      --count;
    }
    if (k <= s.size()) out.append(s, k, std::string::npos);
    LUMEN_TRY(check_string(out, pos));
    return out;
  }

  Result<Value> split(const std::string& s, const Value* sep, const Value* maxsplit_v, SourcePos pos) {
    int64_t maxsplit = maxsplit_v && is_integral(*maxsplit_v) ? as_int(*maxsplit_v) : -1;
    List parts;
    if (!sep || sep->kind == Kind::kNone) {  // runs of whitespace, no empty parts
      size_t k = 0;
      while (true) {
        while (k < s.size() && is_space(s[k])) ++k;
        if (k >= s.size()) break;
        if (maxsplit == 0) {
          size_t e = s.size();
          while (e > k && is_space(s[e - 1])) --e;
          parts.push_back(string_value(s.substr(k, e - k)));
          break;
        }
        size_t e = k;
        while (e < s.size() && !is_space(s[e])) ++e;
        parts.push_back(string_value(s.substr(k, e - k)));
        k = e;
        --maxsplit;
      }
    } else {
      if (sep->kind != Kind::kString || sep->s().empty()) return error_at(pos, "split() separator must be a non-empty string");
      size_t k = 0;
      while (true) {
        const size_t found = maxsplit == 0 ? std::string::npos : s.find(sep->s(), k);
        if (found == std::string::npos) {
          parts.push_back(string_value(s.substr(k)));
          break;
        }
        parts.push_back(string_value(s.substr(k, found - k)));
        k = found + sep->s().size();
        --maxsplit;
      }
    }
    LUMEN_TRY(check_list(parts.size(), pos));
    LUMEN_TRY(charge(static_cast<int64_t>(s.size()), pos));
    return list_value(std::move(parts));
  }

  Result<Value> call_method(const Value& obj, const std::string& name, const CallArgs& args, SourcePos pos) {
    if (obj.kind == Kind::kUndefined) return undefined_value(obj.s());  // chains on undefined stay undefined
    if (obj.kind == Kind::kList) {
      const Value* a0 = args.get(0, "value");
      if ((name != "count" && name != "index") || !a0) return error_at(pos, "list has no method '" + name + "'");
      int64_t n = 0;
      for (size_t k = 0; k < obj.list->size(); ++k) {
        LUMEN_ASSIGN_OR_RETURN(bool same, equal((*obj.list)[k], *a0, pos));
        if (same && name == "index") return int_value(static_cast<int64_t>(k));
        n += same;
      }
      if (name == "index") return error_at(pos, "list.index(x): x not in list");
      return int_value(n);
    }
    if (obj.kind == Kind::kDict) {
      const Dict& d = *obj.dict;
      LUMEN_TRY(charge(static_cast<int64_t>(d.size()), pos));
      if (name == "items" || name == "keys" || name == "values") {
        List out;
        for (const auto& [k, v] : d) {
          if (name == "items") out.push_back(list_value(List{string_value(k), v}));
          if (name == "keys") out.push_back(string_value(k));
          if (name == "values") out.push_back(v);
        }
        return list_value(std::move(out));
      }
      if (name == "get") {
        const Value* key = args.get(0, "key");
        if (!key) return error_at(pos, "get() needs a key");
        if (key->kind == Kind::kString) {
          if (const Value* v = dict_find(d, key->s())) return *v;
        }
        const Value* dflt = args.get(1, "default");
        return dflt ? *dflt : none_value();
      }
      return error_at(pos, "dict has no method '" + name + "'");
    }
    const std::string& s = obj.s();
    LUMEN_TRY(charge(static_cast<int64_t>(s.size()), pos));  // every string method is O(size)
    const Value* a0 = args.get(0, "");
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      return string_value(strip_chars(s, a0, name != "rstrip", name != "lstrip"));
    }
    if (name == "upper" || name == "lower") return string_value(ascii_case(s, name == "upper"));
    if (name == "title") return string_value(title_case(s));
    if (name == "capitalize") return string_value(capitalize(s));
    if (name == "startswith" || name == "endswith") {
      if (!a0) return error_at(pos, name + "() needs an argument");
      List options = a0->kind == Kind::kList ? *a0->list : List{*a0};
      for (const Value& o : options) {
        if (o.kind != Kind::kString) return error_at(pos, name + "() arguments must be strings");
        const bool hit = name == "startswith" ? s.compare(0, o.s().size(), o.s()) == 0
                                              : s.size() >= o.s().size() && s.compare(s.size() - o.s().size(), o.s().size(), o.s()) == 0;
        if (hit) return bool_value(true);
      }
      return bool_value(false);
    }
    if (name == "split") return split(s, args.get(0, "sep"), args.get(1, "maxsplit"), pos);
    if (name == "replace") {
      LUMEN_ASSIGN_OR_RETURN(std::string out, replace_all(s, args.get(0, "old"), args.get(1, "new"), args.get(2, "count"), pos));
      return string_value(std::move(out));
    }
    if (name == "find" || name == "count") {
      if (!a0 || a0->kind != Kind::kString) return error_at(pos, name + "() needs a string argument");
      if (name == "find") {
        const size_t found = s.find(a0->s());
        return int_value(found == std::string::npos ? -1 : static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, found))));
      }
      if (a0->s().empty()) return int_value(static_cast<int64_t>(code_point_count(s)) + 1);
      int64_t n = 0;
      for (size_t k = s.find(a0->s()); k != std::string::npos; k = s.find(a0->s(), k + a0->s().size())) ++n;
      return int_value(n);
    }
    if (name == "join") {
      if (!a0) return error_at(pos, "join() needs an argument");
      LUMEN_ASSIGN_OR_RETURN(List items, iterate(*a0, pos));
      std::string out;
      for (size_t k = 0; k < items.size(); ++k) {
        if (items[k].kind != Kind::kString) return error_at(pos, "join() items must be strings");
        if (k) out += s;
        out += items[k].s();
        LUMEN_TRY(check_size(out, pos));
        LUMEN_TRY(charge(static_cast<int64_t>(s.size() + items[k].s().size()), pos));
      }
      return string_value(std::move(out));
    }
    return error_at(pos, "string has no method '" + name + "'");
  }

  // -- filters and tests

  Result<Value> apply_filter(const std::string& name, const Value& v, const CallArgs& args, SourcePos pos) {
    const Value* a0 = args.get(0, "");
    if (name == "default" || name == "d") {
      const Value* boolean = args.get(1, "boolean");
      const bool use_default = v.kind == Kind::kUndefined || (boolean && truthy(*boolean) && !truthy(v));
      if (!use_default) return v;
      const Value* dflt = args.get(0, "default_value");
      return dflt ? *dflt : string_value("");
    }
    if (name == "safe") return v;
    if (name == "length" || name == "count") {
      switch (v.kind) {
        case Kind::kUndefined: return int_value(0);
        case Kind::kString:
          LUMEN_TRY(charge(static_cast<int64_t>(v.s().size()), pos));
          return int_value(static_cast<int64_t>(code_point_count(v.s())));
        case Kind::kList: return int_value(static_cast<int64_t>(v.list->size()));
        case Kind::kDict: return int_value(static_cast<int64_t>(v.dict->size()));
        default: return error_at(pos, std::string("object of type ") + kind_name(v) + " has no length");
      }
    }
    if (name == "tojson") {
      const Value* indent = args.get(0, "indent");
      std::string out;
      LUMEN_TRY(to_json(v, indent && is_integral(*indent) ? static_cast<int>(std::clamp<int64_t>(as_int(*indent), 0, 64)) : -1,
                        0, pos, out));
      LUMEN_TRY(check_string(out, pos));
      return string_value(std::move(out));
    }
    if (name == "int" || name == "float") return number_filter(name, v, args);
    if (name == "abs") {
      if (v.kind == Kind::kFloat) return float_value(std::fabs(v.f));
      if (!is_integral(v)) return error_at(pos, std::string("abs: bad operand ") + kind_name(v));
      if (as_int(v) == std::numeric_limits<int64_t>::min()) return error_at(pos, "integer overflow");
      return int_value(std::abs(as_int(v)));
    }
    if (name == "first" || name == "last") {
      LUMEN_ASSIGN_OR_RETURN(List items, iterate(v, pos));
      if (items.empty()) return undefined_value("");
      return name == "first" ? items.front() : items.back();
    }
    if (name == "list") {
      LUMEN_ASSIGN_OR_RETURN(List items, iterate(v, pos));
      return list_value(std::move(items));
    }
    if (name == "reverse") {
      if (v.kind == Kind::kString) {
        LUMEN_TRY(charge(4 * static_cast<int64_t>(v.s().size()), pos));
        const std::vector<uint32_t> offsets = code_point_offsets(v.s());
        std::string out;
        for (size_t k = offsets.size() - 1; k > 0; --k) out.append(v.s(), offsets[k - 1], offsets[k] - offsets[k - 1]);
        return string_value(std::move(out));
      }
      LUMEN_ASSIGN_OR_RETURN(List items, iterate(v, pos));
      std::reverse(items.begin(), items.end());
      return list_value(std::move(items));
    }
    if (name == "items") {
      if (v.kind == Kind::kUndefined) return list_value({});
      if (v.kind != Kind::kDict) return error_at(pos, std::string("items: expected a dict, got ") + kind_name(v));
      return call_method(v, "items", args, pos);
    }
    if (name == "join") {
      LUMEN_ASSIGN_OR_RETURN(List items, iterate(v, pos));
      const Value* attribute = args.get(1, "attribute");
      std::string sep;
      if (a0) {
        LUMEN_ASSIGN_OR_RETURN(sep, to_str(*a0, pos));
      }
      std::string out;
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += sep;
        const Value item = attribute ? get_attr(items[k], attribute->s()) : items[k];
        LUMEN_ASSIGN_OR_RETURN(std::string s, to_str(item, pos));
        out += s;
        LUMEN_TRY(check_size(out, pos));
        LUMEN_TRY(charge(static_cast<int64_t>(sep.size()), pos));
      }
      return string_value(std::move(out));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      return select(name, v, args, pos);
    }
    if (name == "map") return map(v, args, pos);
    if (name == "unique") {
      LUMEN_ASSIGN_OR_RETURN(List items, iterate(v, pos));
      List out;
      for (Value& item : items) {
        LUMEN_TRY(charge(static_cast<int64_t>(out.size()), pos));
        bool seen = false;
        for (const Value& o : out) {
          LUMEN_ASSIGN_OR_RETURN(bool same, equal(o, item, pos));
          if (same) {
            seen = true;
            break;
          }
        }
        if (!seen) out.push_back(std::move(item));
      }
      return list_value(std::move(out));
    }
    if (name == "replace") {
      LUMEN_ASSIGN_OR_RETURN(std::string s, to_str(v, pos));
      LUMEN_ASSIGN_OR_RETURN(std::string out, replace_all(s, args.get(0, "old"), args.get(1, "new"), args.get(2, "count"), pos));
      return string_value(std::move(out));
    }
    return string_filter(name, v, args, pos);
  }

  // int / float: numbers convert; strings parse (surrounding whitespace allowed); anything
  // else, or NaN / infinity for int, gives the default (0 / 0.0 unless passed).
  static Value number_filter(const std::string& name, const Value& v, const CallArgs& args) {
    const Value* dflt = args.get(0, "default");
    const Value fallback = dflt ? *dflt : name == "int" ? int_value(0) : float_value(0.0);
    auto from_double = [&](double f) {
      if (name == "float") return float_value(f);
      if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
      return int_value(static_cast<int64_t>(f));
    };
    if (is_integral(v)) return name == "int" ? int_value(as_int(v)) : float_value(as_double(v));
    if (v.kind == Kind::kFloat) return from_double(v.f);
    if (v.kind != Kind::kString) return fallback;
    const std::string t = strip_chars(v.s(), nullptr, true, true);
    const char* end = t.data() + t.size();
    int64_t i = 0;
    if (auto r = std::from_chars(t.data(), end, i); r.ec == std::errc() && r.ptr == end) {
      return name == "int" ? int_value(i) : float_value(static_cast<double>(i));
    }
    double f = 0.0;
    if (auto r = std::from_chars(t.data(), end, f); r.ec == std::errc() && r.ptr == end) return from_double(f);
    return fallback;
  }

  // Filters that work on the string form of the value.
  Result<Value> string_filter(const std::string& name, const Value& v, const CallArgs& args, SourcePos pos) {
    const Value* a0 = args.get(0, "");
    LUMEN_ASSIGN_OR_RETURN(std::string s, to_str(v, pos));
    if (name == "trim") return string_value(strip_chars(s, a0, true, true));
    if (name == "upper" || name == "lower") return string_value(ascii_case(std::move(s), name == "upper"));
    if (name == "capitalize") return string_value(capitalize(s));
    if (name == "title") return string_value(jinja_title(std::move(s)));
    if (name == "string") return string_value(std::move(s));
    if (name == "escape" || name == "e") {
      std::string out;
      for (char c : s) {
        switch (c) {
          case '&': out += "&amp;"; break;
          case '<': out += "&lt;"; break;
          case '>': out += "&gt;"; break;
          case '"': out += "&#34;"; break;
          case '\'': out += "&#39;"; break;
          default: out += c;
        }
      }
      LUMEN_TRY(check_string(out, pos));
      return string_value(std::move(out));
    }
    return error_at(pos, "unknown filter '" + name + "'");
  }

  // select(test, args...), reject(...), selectattr(attr, test, args...), rejectattr(...).
  Result<Value> select(const std::string& name, const Value& v, const CallArgs& args, SourcePos pos) {
    if (!truthy(v)) return list_value({});  // Jinja skips falsy inputs before iterating
    LUMEN_ASSIGN_OR_RETURN(List items, iterate(v, pos));
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep_if = name == "select" || name == "selectattr";
    size_t first_test_arg = 0;
    std::string attr;
    if (by_attr) {
      if (args.pos.empty() || args.pos[0].kind != Kind::kString) return error_at(pos, name + "() needs an attribute name");
      attr = args.pos[0].s();
      first_test_arg = 1;
    }
    std::string test;
    CallArgs test_args;
    if (args.pos.size() > first_test_arg) {
      if (args.pos[first_test_arg].kind != Kind::kString) return error_at(pos, name + "(): the test name must be a string");
      test = args.pos[first_test_arg].s();
      if (!contains(kTests, test)) return error_at(pos, "unknown test '" + test + "'");
      test_args.pos.assign(args.pos.begin() + static_cast<ptrdiff_t>(first_test_arg) + 1, args.pos.end());
    }
    List out;
    for (Value& item : items) {
      LUMEN_TRY(charge(1, pos));
      const Value subject = by_attr ? get_attr(item, attr) : item;
      bool pass = truthy(subject);
      if (!test.empty()) {
        LUMEN_ASSIGN_OR_RETURN(pass, apply_test(test, subject, test_args, pos));
      }
      if (pass == keep_if) out.push_back(std::move(item));
    }
    return list_value(std::move(out));
  }

  // map(attribute='x' [, default=...]) or map('filter', args...).
  Result<Value> map(const Value& v, const CallArgs& args, SourcePos pos) {
    if (!truthy(v)) return list_value({});  // Jinja skips falsy inputs before iterating
    LUMEN_ASSIGN_OR_RETURN(List items, iterate(v, pos));
    const Value* attribute = nullptr;
    const Value* dflt = nullptr;
    for (const auto& [k, val] : args.kw) {
      if (k == "attribute") attribute = &val;
      if (k == "default") dflt = &val;
    }
    List out;
    if (attribute) {
      LUMEN_ASSIGN_OR_RETURN(std::string attr, to_str(*attribute, pos));
      for (const Value& item : items) {
        Value x = get_attr(item, attr);
        out.push_back(x.kind == Kind::kUndefined && dflt ? *dflt : std::move(x));
      }
      return list_value(std::move(out));
    }
    if (args.pos.empty() || args.pos[0].kind != Kind::kString) return error_at(pos, "map() needs attribute= or a filter name");
    const std::string filter = args.pos[0].s();
    if (!contains(kFilters, filter) || filter == "map") return error_at(pos, "map(): unsupported filter '" + filter + "'");
    CallArgs filter_args;
    filter_args.pos.assign(args.pos.begin() + 1, args.pos.end());
    for (const Value& item : items) {
      LUMEN_ASSIGN_OR_RETURN(Value x, apply_filter(filter, item, filter_args, pos));
      out.push_back(std::move(x));
    }
    return list_value(std::move(out));
  }

  Result<bool> apply_test(const std::string& name, const Value& v, const CallArgs& args, SourcePos pos) {
    const Value* a0 = args.get(0, "");
    auto need_arg = [&]() { return error_at(pos, "test '" + name + "' needs an argument"); };
    if (name == "defined") return v.kind != Kind::kUndefined;
    if (name == "undefined") return v.kind == Kind::kUndefined;
    if (name == "none") return v.kind == Kind::kNone;
    if (name == "string") return v.kind == Kind::kString;
    if (name == "number") return is_number(v);  // Python: bool is a Number
    if (name == "integer") return v.kind == Kind::kInt;
    if (name == "float") return v.kind == Kind::kFloat;
    if (name == "boolean") return v.kind == Kind::kBool;
    if (name == "true") return v.kind == Kind::kBool && v.b;
    if (name == "false") return v.kind == Kind::kBool && !v.b;
    if (name == "mapping") return v.kind == Kind::kDict;
    if (name == "iterable" || name == "sequence") {  // Jinja's Undefined iterates as empty
      return v.kind == Kind::kList || v.kind == Kind::kDict || v.kind == Kind::kString || v.kind == Kind::kUndefined;
    }
    if (name == "callable") return v.kind == Kind::kFunction;
    if (name == "lower" || name == "upper") {  // str(v).islower() / isupper(): some cased, none of the other case
      LUMEN_ASSIGN_OR_RETURN(std::string str, to_str(v, pos));
      bool has_lower = false, has_upper = false;
      for (char c : str) {
        has_lower = has_lower || (c >= 'a' && c <= 'z');
        has_upper = has_upper || (c >= 'A' && c <= 'Z');
      }
      return name == "lower" ? has_lower && !has_upper : has_upper && !has_lower;
    }
    if (name == "even" || name == "odd" || name == "divisibleby") {
      const Value divisor = name == "divisibleby" ? (a0 ? *a0 : Value{}) : int_value(2);
      if (!is_number(v) || !is_number(divisor)) return error_at(pos, "test '" + name + "' needs numbers");
      LUMEN_ASSIGN_OR_RETURN(Value rem, binary("%", v, divisor, pos));
      return as_double(rem) == (name == "odd" ? 1.0 : 0.0);  // Jinja: value % 2 == 1
    }
    if (name == "sameas") {
      if (!a0) return need_arg();
      if (v.kind != a0->kind) return false;
      switch (v.kind) {
        case Kind::kNone:
        case Kind::kUndefined: return true;
        case Kind::kBool: return v.b == a0->b;
        case Kind::kList: return v.list == a0->list;
        case Kind::kDict: return v.dict == a0->dict;
        case Kind::kNamespace: return v.ns == a0->ns;
        default: return equal(v, *a0, pos);
      }
    }
    if (!a0) return need_arg();
    if (name == "eq" || name == "equalto" || name == "==") return compare("==", v, *a0, pos);
    if (name == "ne" || name == "!=") return compare("!=", v, *a0, pos);
    if (name == "lt" || name == "lessthan" || name == "<") return compare("<", v, *a0, pos);
    if (name == "le" || name == "<=") return compare("<=", v, *a0, pos);
    if (name == "gt" || name == "greaterthan" || name == ">") return compare(">", v, *a0, pos);
    if (name == "ge" || name == ">=") return compare(">=", v, *a0, pos);
    if (name == "in") return compare("in", v, *a0, pos);
    return error_at(pos, "unknown test '" + name + "'");
  }

  const ChatTemplateProgram& program_;
  std::vector<Frame> frames_;         // innermost last; frames_[0] holds the globals
  std::deque<Namespace> namespaces_;  // namespace() objects; stable addresses for Values
  std::string out_;
  int64_t work_left_ = kMaxWork;
};

// nlohmann::ordered_json -> Value, keeping key order; depth-bounded.
Result<Value> from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxNesting) return error("chat template context: JSON nested too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none_value();
    case nlohmann::ordered_json::value_t::boolean: return bool_value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return int_value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return float_value(static_cast<double>(u));
      return int_value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return float_value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string_value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      if (j.size() > kMaxListItems) return error("chat template context: JSON array longer than the list limit");
      List items;
      for (const auto& item : j) {
        LUMEN_ASSIGN_OR_RETURN(Value v, from_json(item, depth + 1));
        items.push_back(std::move(v));
      }
      return list_value(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      for (const auto& [k, item] : j.items()) {
        LUMEN_ASSIGN_OR_RETURN(Value v, from_json(item, depth + 1));
        items.emplace_back(k, std::move(v));
      }
      return dict_value(std::move(items));
    }
    default: return error("chat template context: unsupported JSON value");
  }
}

Result<std::string> render_program(const ChatTemplateProgram& program, Dict globals) {
  // The interpreter reports every failure as a Status; this guard only catches
  // allocation failure so that no exception leaves the layer.
  try {
    Renderer renderer(program, std::move(globals));
    return renderer.run();
  } catch (const std::exception& e) {
    return error(std::string("chat template: render failed: ") + e.what());
  }
}

}  // namespace

ChatTemplate::ChatTemplate() = default;
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  if (source.size() > kMaxSourceBytes) {
    return error("chat template: source of " + std::to_string(source.size()) + " bytes exceeds the limit of " +
                 std::to_string(kMaxSourceBytes));
  }
  try {
    LUMEN_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lexer(source).run());
    Parser parser(std::move(tokens));
    LUMEN_ASSIGN_OR_RETURN(Body body, parser.parse_template());
    ChatTemplate t;
    t.program_ = std::make_unique<ChatTemplateProgram>();
    t.program_->body = std::move(body);
    return t;
  } catch (const std::exception& e) {
    return error(std::string("chat template: parse failed: ") + e.what());
  }
}

Result<std::string> ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                         std::string_view bos_token, std::string_view eos_token) const {
  if (!program_) return error("chat template: render() on an empty ChatTemplate");
  List list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    list.push_back(dict_value(Dict{{"role", string_value(m.role)}, {"content", string_value(m.content)}}));
  }
  Dict globals = {
      {"messages", list_value(std::move(list))},
      {"add_generation_prompt", bool_value(add_generation_prompt)},
      {"bos_token", string_value(std::string(bos_token))},
      {"eos_token", string_value(std::string(eos_token))},
  };
  return render_program(*program_, std::move(globals));
}

Result<std::string> ChatTemplate::render_json(std::string_view context_json) const {
  if (!program_) return error("chat template: render_json() on an empty ChatTemplate");
  if (context_json.size() > kMaxContextBytes) {
    return error("chat template context: " + std::to_string(context_json.size()) + " bytes exceeds the limit of " +
                 std::to_string(kMaxContextBytes));
  }
  const auto j = nlohmann::ordered_json::parse(context_json.begin(), context_json.end(), nullptr, false);
  if (j.is_discarded()) return error("chat template context: invalid JSON");
  if (!j.is_object()) return error("chat template context: expected a JSON object");
  LUMEN_ASSIGN_OR_RETURN(Value context, from_json(j, 0));
  return render_program(*program_, *context.dict);
}

}  // namespace lumen::tok
