// Chat template parser: recursive descent over the lexer's tokens into the AST of
// statements and expressions (chat_template_ast.h). Unknown filters, tests and tags are
// rejected here, and nesting depth is bounded so that the evaluator cannot overflow its
// stack.
#include "tokenizer/chat_template_ast.h"

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lumen::tok::chat_template_detail {
namespace {

// ---- Parser -------------------------------------------------------------------------------

constexpr std::string_view kUnsupportedTags[] = {
    "call", "include", "import", "from", "extends", "block", "with", "autoescape", "do", "trans",
};

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
    if (name == "macro") return parse_macro(pos, out);
    if (name == "filter") return parse_filter_block(pos, out);
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

  // {% macro name(a, b=default, ...) %}body{% endmacro %}
  Status parse_macro(SourcePos pos, Body& out) {
    Stmt s = make_stmt(StmtKind::kMacro, pos);
    LUMEN_ASSIGN_OR_RETURN(std::string name, expect_name());
    s.targets.push_back(std::move(name));
    LUMEN_TRY(expect_op("("));
    while (!is_op(")")) {
      const SourcePos param_pos = cur().pos;
      LUMEN_ASSIGN_OR_RETURN(std::string param, expect_name());
      if (std::find(s.targets.begin() + 1, s.targets.end(), param) != s.targets.end()) {
        return error_at(param_pos, "duplicate macro parameter '" + param + "'");
      }
      ExprPtr dflt;
      if (accept_op("=")) {
        LUMEN_ASSIGN_OR_RETURN(dflt, parse_expression());
      } else if (!s.defaults.empty() && s.defaults.back()) {
        return error_at(param_pos, "macro parameter '" + param + "' without a default follows one with a default");
      }
      s.targets.push_back(std::move(param));
      s.defaults.push_back(std::move(dflt));
      if (!accept_op(",")) break;
    }
    LUMEN_TRY(expect_op(")"));
    LUMEN_TRY(expect_block_end());
    const int saved_loop_depth = loop_depth_;  // break / continue cannot leave the macro
    loop_depth_ = 0;
    std::string end;
    Status st = parse_body(s.body, {"endmacro"}, "macro", pos, &end);
    loop_depth_ = saved_loop_depth;
    LUMEN_TRY(st);
    LUMEN_TRY(expect_block_end());
    out.push_back(std::move(s));
    return Status::ok_status();
  }

  // {% filter f(args) | g %}body{% endfilter %}: the filters apply to the body's output.
  Status parse_filter_block(SourcePos pos, Body& out) {
    Stmt s = make_stmt(StmtKind::kFilterBlock, pos);
    ExprPtr e = node(ExprKind::kName, pos);
    e->name = std::string(kFilterBodyName);
    do {
      ExprPtr filter = node(ExprKind::kFilter, cur().pos);
      const SourcePos name_pos = cur().pos;
      LUMEN_ASSIGN_OR_RETURN(filter->name, expect_name());
      if (!contains(kFilters, filter->name)) return error_at(name_pos, "unknown filter '" + filter->name + "'");
      LUMEN_TRY(add(*filter, std::move(e)));
      if (accept_op("(")) LUMEN_TRY(parse_call_args(*filter));
      e = std::move(filter);
    } while (accept_op("|"));
    s.filter = std::move(e);
    LUMEN_TRY(expect_block_end());
    std::string end;
    LUMEN_TRY(parse_body(s.body, {"endfilter"}, "filter", pos, &end));
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

}  // namespace

Result<Body> parse_tokens(std::vector<Token> tokens) {
  Parser parser(std::move(tokens));
  return parser.parse_template();
}

}  // namespace lumen::tok::chat_template_detail
