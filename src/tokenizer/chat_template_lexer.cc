// Chat template lexer: splits the source into text and tag tokens. Jinja's whitespace
// control (trim_blocks, lstrip_blocks, "-" / "+" markers) and {% raw %} are applied
// here, so the parser sees text exactly as it will be emitted.
#include "tokenizer/chat_template_ast.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace lumen::tok::chat_template_detail {
namespace {

// ---- Lexer --------------------------------------------------------------------------------

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

}  // namespace

Result<std::vector<Token>> lex_template(std::string_view source) { return Lexer(source).run(); }

}  // namespace lumen::tok::chat_template_detail
