// Chat template evaluator: runs statements, evaluates expressions, applies operators and
// calls the global functions, charging every step and every byte built against the work
// budget. Methods, filters and tests are in chat_template_filters.cc.
#include "tokenizer/chat_template_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lumen::tok::chat_template_detail {

// ---- Evaluator ----------------------------------------------------------------------------

Value Renderer::lookup(const std::string& name) {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    work_left_ -= static_cast<int64_t>(it->size());  // linear scan; overdraft fails at the next charge
    if (const Value* v = dict_find(*it, name)) return *v;
  }
  static constexpr std::string_view kBuiltins[] = {"range", "namespace", "dict", "raise_exception", "strftime_now"};
  if (contains(kBuiltins, name)) return function_value(name);
  return undefined_value("'" + name + "' is undefined");
}

void Renderer::assign(const std::string& name, Value v) {
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

Result<Flow> Renderer::exec_body(const Body& body) {
  for (const Stmt& s : body) {
    LUMEN_ASSIGN_OR_RETURN(Flow flow, exec(s));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Status Renderer::emit(std::string_view text, SourcePos pos) {
  if (out_.size() + text.size() > kMaxOutputBytes) return error_at(pos, "rendered prompt exceeds the size limit");
  LUMEN_TRY(charge(static_cast<int64_t>(text.size()), pos));
  out_ += text;
  return Status::ok_status();
}

Result<Flow> Renderer::exec(const Stmt& s) {
  LUMEN_TRY(enter(s.pos));
  DepthGuard guard(*this);
  return exec_inner(s);
}

// Renders `body` into a string of its own (set blocks, filter blocks, macro calls).
Result<std::string> Renderer::capture(const Body& body, SourcePos pos) {
  std::string saved = std::move(out_);
  out_.clear();
  Result<Flow> r = exec_body(body);
  std::string captured = std::move(out_);
  out_ = std::move(saved);
  if (!r.ok()) return r.status();
  if (out_.size() + captured.size() > kMaxOutputBytes) return error_at(pos, "captured block exceeds the size limit");
  return captured;
}

Result<Flow> Renderer::exec_inner(const Stmt& s) {
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
      LUMEN_ASSIGN_OR_RETURN(std::string captured, capture(s.body, s.pos));
      assign(s.targets[0], string_value(std::move(captured)));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      LUMEN_ASSIGN_OR_RETURN(std::string captured, capture(s.body, s.pos));
      ScopedFrame frame(*this);
      assign(std::string(kFilterBodyName), string_value(std::move(captured)));
      LUMEN_ASSIGN_OR_RETURN(Value v, eval(*s.filter));
      LUMEN_ASSIGN_OR_RETURN(std::string text, to_str(v, s.pos));
      LUMEN_TRY(emit(text, s.pos));
      return Flow::kNormal;
    }
    case StmtKind::kMacro: {
      Value fn = function_value(s.targets[0]);
      fn.macro = &s;
      fn.i = static_cast<int64_t>(frames_.size());  // its closure: the scopes it is defined in
      assign(s.targets[0], std::move(fn));
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

Status Renderer::exec_set(const Stmt& s, Value v) {
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

Status Renderer::unpack(const std::vector<std::string>& targets, const Value& v, SourcePos pos) {
  if (v.kind != Kind::kList || v.list->size() != targets.size()) {
    return error_at(pos, "cannot unpack " + std::string(kind_name(v)) + " into " + std::to_string(targets.size()) + " names");
  }
  for (size_t k = 0; k < targets.size(); ++k) assign(targets[k], (*v.list)[k]);
  return Status::ok_status();
}

Result<List> Renderer::iterate(const Value& v, SourcePos pos) {
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

Result<Flow> Renderer::exec_for(const Stmt& s) {
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

Status Renderer::bind_targets(const Stmt& s, const Value& item) {
  if (s.targets.size() == 1) {
    assign(s.targets[0], item);
    return Status::ok_status();
  }
  return unpack(s.targets, item, s.pos);
}

// -- string conversion

Result<std::string> Renderer::to_str(const Value& v, SourcePos pos) {
  switch (v.kind) {
    case Kind::kUndefined: return std::string();
    case Kind::kString:
      LUMEN_TRY(charge(static_cast<int64_t>(v.s().size()), pos));
      return v.s();
    default: return repr(v, pos, 0);
  }
}

// Python repr (str() of containers uses it for their items).
Result<std::string> Renderer::repr(const Value& v, SourcePos pos, int depth) {
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
Status Renderer::to_json(const Value& v, int indent, int depth, SourcePos pos, std::string& out) {
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
      if (v.generator) return error_at(pos, "tojson: Object of type generator is not JSON serializable");
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
                               (v.kind == Kind::kUndefined && !v.s().empty() ? " (" + v.s() + ")" : "") +
                               " is not JSON serializable");
  }
}

// -- expressions

Result<Value> Renderer::eval(const Expr& e) {
  LUMEN_TRY(enter(e.pos));
  DepthGuard guard(*this);
  return eval_inner(e);
}

Result<Value> Renderer::eval_inner(const Expr& e) {
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
      LUMEN_TRY(check_defined(obj, e.pos));
      return get_attr(obj, e.name);
    }
    case ExprKind::kIndex: {
      LUMEN_ASSIGN_OR_RETURN(Value obj, eval(*e.operands[0]));
      LUMEN_TRY(check_defined(obj, e.pos));
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

void Renderer::set_key(Dict& d, const std::string& key, Value v) {
  for (auto& [k, existing] : d) {
    if (k == key) {
      existing = std::move(v);
      return;
    }
  }
  d.emplace_back(key, std::move(v));
}

Result<CallArgs> Renderer::eval_args(const Expr& e) {
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

Value Renderer::loop_attr(const LoopState& st, const std::string& name) {
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
  return undefined_value("'jinja2.runtime.LoopContext object' has no attribute " + python_string_repr(name));
}

Value Renderer::get_attr(const Value& obj, const std::string& name) {
  if (obj.kind == Kind::kLoop) return loop_attr(*obj.loop, name);
  const Dict* d = obj.kind == Kind::kDict ? obj.dict.get() : obj.kind == Kind::kNamespace ? &obj.ns->attrs : nullptr;
  if (d) {
    work_left_ -= static_cast<int64_t>(d->size());  // linear scan; overdraft fails at the next charge
    if (const Value* v = dict_find(*d, name)) return *v;
  }
  if (obj.kind == Kind::kUndefined) return obj;  // keeps the first message
  return undefined_value(no_attribute_message(obj, name));
}

Result<Value> Renderer::get_item(const Value& obj, const Value& key, SourcePos pos) {
  if (key.kind == Kind::kString) return get_attr(obj, key.s());
  if (!is_integral(key)) return undefined_value("");
  int64_t k = as_int(key);
  // Built only for a miss (every successful index would pay for it otherwise).
  auto no_element = [&obj, k0 = k] {
    return undefined_value(jinja_type_repr(obj) + " has no element " + std::to_string(k0));
  };
  if (obj.kind == Kind::kList) {
    const int64_t n = static_cast<int64_t>(obj.list->size());
    if (k < 0) k += n;
    if (k < 0 || k >= n) return no_element();
    return (*obj.list)[static_cast<size_t>(k)];
  }
  if (obj.kind == Kind::kString) {
    const std::string& s = obj.s();
    LUMEN_TRY(charge(static_cast<int64_t>(s.size()), pos));
    if (k < 0) k += static_cast<int64_t>(code_point_count(s));
    if (k < 0) return no_element();
    const size_t b = code_point_offset(s, static_cast<size_t>(k));
    if (b >= s.size()) return no_element();
    return string_value(s.substr(b, next_code_point(s, b) - b));
  }
  if (obj.kind == Kind::kUndefined) return obj;
  return no_element();
}

// Python slice index arithmetic on a sequence of length n.
std::vector<size_t> Renderer::slice_indices(int64_t n, const Value* start_v, const Value* stop_v, int64_t step) {
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

Result<Value> Renderer::eval_slice(const Expr& e) {
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

Result<Value> Renderer::binary(const std::string& op, const Value& a, const Value& b, SourcePos pos) {
  if (op == "~") {
    LUMEN_ASSIGN_OR_RETURN(std::string sa, to_str(a, pos));
    LUMEN_ASSIGN_OR_RETURN(std::string sb, to_str(b, pos));
    std::string s = sa + sb;
    LUMEN_TRY(check_string(s, pos));
    return string_value(std::move(s));
  }
  for (const Value* v : {&a, &b}) {
    if (v->kind == Kind::kUndefined) {
      return error_at(pos, (v->s().empty() ? std::string("value is undefined") : v->s()) + " (operator " + op + ")");
    }
  }
  auto type_error = [&]() {
    return error_at(pos, std::string("unsupported operand types for ") + op + ": " + kind_name(a) + " and " + kind_name(b));
  };
  if (op == "+") {
    if (a.kind == Kind::kString && b.kind == Kind::kString) {
      // Markup + str and str + Markup escape the plain side and give Markup (markupsafe).
      const bool markup = a.markup || b.markup;
      std::string s = (markup && !a.markup ? html_escape(a.s()) : a.s()) + (markup && !b.markup ? html_escape(b.s()) : b.s());
      LUMEN_TRY(check_string(s, pos));
      Value out = string_value(std::move(s));
      out.markup = markup;
      return out;
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
      // An empty sequence repeated any number of times is empty: no loop (a huge count
      // would otherwise spin without producing output or charging the work budget).
      if (unit == 0) return seq->kind == Kind::kString ? string_value(std::string()) : list_value(List{});
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
Result<bool> Renderer::equal(const Value& a, const Value& b, SourcePos pos, int depth) {
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

Result<bool> Renderer::contains_value(const Value& container, const Value& item, SourcePos pos) {
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
Result<int> Renderer::three_way(const std::string& op, const Value& a, const Value& b, SourcePos pos, int depth) {
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

Result<bool> Renderer::compare(const std::string& op, const Value& a, const Value& b, SourcePos pos) {
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

// -- calls: global functions (methods: chat_template_filters.cc)

Result<Value> Renderer::eval_call(const Expr& e) {
  const Expr& callee = *e.operands[0];
  if (callee.kind == ExprKind::kAttr) {  // obj.method(...)
    LUMEN_ASSIGN_OR_RETURN(Value obj, eval(*callee.operands[0]));
    LUMEN_TRY(check_defined(obj, e.pos));
    if (obj.kind != Kind::kString && obj.kind != Kind::kDict && obj.kind != Kind::kList &&
        obj.kind != Kind::kUndefined) {
      return error_at(e.pos, no_attribute_message(obj, callee.name) + " (no such method)");
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
  if (fn.macro) return call_macro(fn, args, e.pos);
  return call_builtin(fn.s(), args, e.pos);
}

// A macro call renders the macro's body with its parameters bound, in a scope of its own
// over the scopes the macro was defined in (the globals and the template's top-level
// variables; a loop's variables if defined in that loop, as Jinja's closures), not the
// caller's; it returns the rendered text.
Result<Value> Renderer::call_macro(const Value& fn, const CallArgs& args, SourcePos pos) {
  const Stmt& macro = *fn.macro;
  const std::string& name = macro.targets[0];
  const size_t n_params = macro.targets.size() - 1;
  if (args.pos.size() > n_params) {
    return error_at(pos, "macro '" + name + "' takes not more than " + std::to_string(n_params) + " argument(s)");
  }
  for (const auto& [k, unused] : args.kw) {
    const auto it = std::find(macro.targets.begin() + 1, macro.targets.end(), k);
    if (it == macro.targets.end()) return error_at(pos, "macro '" + name + "' takes no keyword argument '" + k + "'");
    if (static_cast<size_t>(it - macro.targets.begin() - 1) < args.pos.size()) {
      return error_at(pos, "macro '" + name + "' got multiple values for argument '" + k + "'");
    }
  }
  if (call_depth_ >= kMaxCallDepth) return error_at(pos, "macro calls nested too deeply (runaway recursion in '" + name + "'?)");
  // Set the caller's scopes aside (moved, not copied) and restore them on every path. A
  // macro value that outlived its scopes (stored in a namespace) keeps what is left of them.
  const size_t keep = static_cast<size_t>(std::clamp<int64_t>(fn.i, 1, static_cast<int64_t>(frames_.size())));
  std::vector<Frame> caller_frames(std::make_move_iterator(frames_.begin() + static_cast<std::ptrdiff_t>(keep)),
                                   std::make_move_iterator(frames_.end()));
  frames_.resize(keep);
  ++call_depth_;
  Result<std::string> text = run_macro(macro, args, pos);
  --call_depth_;
  frames_.resize(keep);
  frames_.insert(frames_.end(), std::make_move_iterator(caller_frames.begin()), std::make_move_iterator(caller_frames.end()));
  if (!text.ok()) return text.status();
  return string_value(std::move(text).value());
}

Result<std::string> Renderer::run_macro(const Stmt& macro, const CallArgs& args, SourcePos pos) {
  ScopedFrame frame(*this);
  for (size_t k = 0; k + 1 < macro.targets.size(); ++k) {
    const std::string& param = macro.targets[k + 1];
    if (const Value* v = args.get(k, param)) {
      assign(param, *v);
    } else if (macro.defaults[k]) {  // evaluated per call, in the macro's scope
      LUMEN_ASSIGN_OR_RETURN(Value v, eval(*macro.defaults[k]));
      assign(param, std::move(v));
    } else {
      assign(param, undefined_value("'" + param + "' is undefined"));
    }
  }
  return capture(macro.body, pos);
}

Result<Value> Renderer::call_builtin(const std::string& name, const CallArgs& args, SourcePos pos) {
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

}  // namespace lumen::tok::chat_template_detail
