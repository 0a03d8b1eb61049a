// Private to the chat template interpreter: the tree-walking evaluator. One Renderer
// renders one template once; it owns the scopes, the namespace() objects, the output and
// the work budget. Its member functions are defined in chat_template_eval.cc (statements,
// printing, expressions, operators, global functions) and chat_template_filters.cc
// (string / list / dict methods, filters and tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tokenizer/chat_template_ast.h"
#include "tokenizer/chat_template_internal.h"
#include "tokenizer/chat_template_value.h"

namespace lumen::tok::chat_template_detail {

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

  // RAII: counts one level of evaluation recursion (exec / eval) for kMaxEvalDepth.
  class DepthGuard {
   public:
    explicit DepthGuard(Renderer& r) : r_(r) { ++r_.depth_; }
    ~DepthGuard() { --r_.depth_; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;

   private:
    Renderer& r_;
  };

  Status enter(SourcePos pos) {
    if (depth_ >= kMaxEvalDepth) return error_at(pos, "template evaluation nested too deeply (runaway recursion?)");
    return Status::ok_status();
  }

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

  // An attribute, item or method of an undefined value is an error, as in Jinja (its
  // Undefined raises on use); the message is the undefined value's own.
  static Status check_defined(const Value& v, SourcePos pos) {
    if (v.kind != Kind::kUndefined) return Status::ok_status();
    return error_at(pos, v.s().empty() ? std::string("value is undefined") : v.s());
  }

  Status check_list(size_t n, SourcePos pos) {
    if (n > kMaxListItems) return error_at(pos, "list exceeds the size limit");
    return charge(static_cast<int64_t>(n), pos);
  }

  Value lookup(const std::string& name);
  void assign(const std::string& name, Value v);

  // -- statements (chat_template_eval.cc)

  Result<Flow> exec_body(const Body& body);
  Status emit(std::string_view text, SourcePos pos);
  Result<Flow> exec(const Stmt& s);
  Result<Flow> exec_inner(const Stmt& s);
  Result<std::string> capture(const Body& body, SourcePos pos);
  Status exec_set(const Stmt& s, Value v);
  Status unpack(const std::vector<std::string>& targets, const Value& v, SourcePos pos);
  Result<List> iterate(const Value& v, SourcePos pos);
  Result<Flow> exec_for(const Stmt& s);
  Status bind_targets(const Stmt& s, const Value& item);

  // -- string conversion (chat_template_eval.cc)

  Result<std::string> to_str(const Value& v, SourcePos pos);
  Result<std::string> repr(const Value& v, SourcePos pos, int depth = 0);
  Status to_json(const Value& v, int indent, int depth, SourcePos pos, std::string& out);

  // -- expressions (chat_template_eval.cc)

  Result<Value> eval(const Expr& e);
  Result<Value> eval_inner(const Expr& e);
  static void set_key(Dict& d, const std::string& key, Value v);
  Result<CallArgs> eval_args(const Expr& e);
  static Value loop_attr(const LoopState& st, const std::string& name);
  Value get_attr(const Value& obj, const std::string& name);
  Result<Value> get_item(const Value& obj, const Value& key, SourcePos pos);
  static std::vector<size_t> slice_indices(int64_t n, const Value* start_v, const Value* stop_v, int64_t step);
  Result<Value> eval_slice(const Expr& e);

  // -- operators (chat_template_eval.cc)

  Result<Value> binary(const std::string& op, const Value& a, const Value& b, SourcePos pos);
  Result<bool> equal(const Value& a, const Value& b, SourcePos pos, int depth = 0);
  Result<bool> contains_value(const Value& container, const Value& item, SourcePos pos);
  Result<int> three_way(const std::string& op, const Value& a, const Value& b, SourcePos pos, int depth);
  Result<bool> compare(const std::string& op, const Value& a, const Value& b, SourcePos pos);

  // -- calls: global functions (chat_template_eval.cc)

  Result<Value> eval_call(const Expr& e);
  Result<Value> call_macro(const Value& fn, const CallArgs& args, SourcePos pos);
  Result<std::string> run_macro(const Stmt& macro, const CallArgs& args, SourcePos pos);
  Result<Value> call_builtin(const std::string& name, const CallArgs& args, SourcePos pos);

  // -- methods (chat_template_filters.cc)

  static std::string strip_chars(std::string_view s, const Value* chars, bool left, bool right);
  static std::string ascii_case(std::string s, bool upper);
  static std::string title_case(std::string s);
  static std::string jinja_title(std::string s);
  static std::string capitalize(const std::string& s);
  Result<std::string> replace_all(const std::string& s, const Value* from_v, const Value* to_v, const Value* count_v,
                                  SourcePos pos);
  Result<Value> split(const std::string& s, const Value* sep, const Value* maxsplit_v, SourcePos pos);
  Result<Value> call_method(const Value& obj, const std::string& name, const CallArgs& args, SourcePos pos);

  // -- filters and tests (chat_template_filters.cc)

  static std::string html_escape(std::string_view s);
  static std::vector<std::string_view> split_lines(std::string_view s);
  Result<Value> indent(std::string s, const CallArgs& args, SourcePos pos);
  Result<Value> apply_filter(const std::string& name, const Value& v, const CallArgs& args, SourcePos pos);
  static Value number_filter(const std::string& name, const Value& v, const CallArgs& args);
  Result<Value> string_filter(const std::string& name, const Value& v, const CallArgs& args, SourcePos pos);
  Result<Value> select(const std::string& name, const Value& v, const CallArgs& args, SourcePos pos);
  Result<Value> map(const Value& v, const CallArgs& args, SourcePos pos);
  Result<bool> apply_test(const std::string& name, const Value& v, const CallArgs& args, SourcePos pos);

  const ChatTemplateProgram& program_;
  std::vector<Frame> frames_;         // innermost last; frames_[0] holds the globals
  std::deque<Namespace> namespaces_;  // namespace() objects; stable addresses for Values
  std::string out_;
  int64_t work_left_ = kMaxWork;
  int depth_ = 0;       // exec / eval calls in progress
  int call_depth_ = 0;  // macro calls in progress
};

}  // namespace lumen::tok::chat_template_detail
