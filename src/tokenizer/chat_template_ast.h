// Private to the chat template interpreter: the front end's data. Tokens flow from the
// lexer (chat_template_lexer.cc) to the parser (chat_template_parser.cc), which builds
// the AST of statements and expressions that the evaluator walks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/chat_template_internal.h"
#include "tokenizer/chat_template_value.h"

namespace lumen::tok::chat_template_detail {

// ---- Tokens -------------------------------------------------------------------------------

enum class Tok : uint8_t { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEnd };

struct Token {
  Tok kind;
  SourcePos pos;
  std::string text;  // kText, kName, kString (decoded), kOp
  int64_t i = 0;     // kInt
  double f = 0.0;    // kFloat
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

enum class StmtKind : uint8_t {
  kText, kOutput, kIf, kFor, kSet, kSetBlock, kBreak, kContinue, kScope, kMacro, kFilterBlock,
};

struct Stmt {
  StmtKind kind;
  SourcePos pos;
  std::string text;                  // kText
  ExprPtr expr;                      // kOutput; kSet value; kFor iterable
  ExprPtr filter;                    // kFor "if" condition; kFilterBlock: the filter chain, applied
                                     // to the name kFilterBodyName (the body's output)
  std::vector<std::string> targets;  // kFor / kSet / kSetBlock names; kSet attr: {namespace};
                                     // kMacro: {name, parameters...}
  std::vector<ExprPtr> defaults;     // kMacro: per parameter (targets[1..]), its default or null
  std::string attr;                  // kSet "ns.attr": the attribute
  std::vector<IfBranch> branches;    // kIf: if and elifs
  Body body;                         // kFor, kSetBlock, kScope; kIf: else
  Body else_body;                    // kFor "else"
};

// The variable a {% filter %} block's output is bound to while its filter chain runs; not
// an identifier, so no template can name it.
inline constexpr std::string_view kFilterBodyName = " filter body";

inline Stmt make_stmt(StmtKind kind, SourcePos pos) {
  Stmt s;
  s.kind = kind;
  s.pos = pos;
  return s;
}

// ---- Front end entry points ---------------------------------------------------------------

// Lexes a template: newlines normalized, whitespace control applied; the last token is
// Tok::kEnd.
Result<std::vector<Token>> lex_template(std::string_view source);

// Parses the lexer's tokens into the template body.
Result<Body> parse_tokens(std::vector<Token> tokens);

}  // namespace lumen::tok::chat_template_detail

namespace lumen::tok {

// The parsed template behind ChatTemplate (declared in chat_template.h).
class ChatTemplateProgram {
 public:
  chat_template_detail::Body body;
};

}  // namespace lumen::tok
