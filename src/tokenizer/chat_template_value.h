// Private to the chat template interpreter: the dynamic Value type the evaluator works
// on (undefined, none, bool, int, float, string, list, dict, namespace, function, loop),
// its constructors and conversions, and Python / JSON spellings of scalars.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lumen::tok::chat_template_detail {

// ---- Values ------------------------------------------------------------------------------

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python
struct Namespace;
struct LoopState;
struct Stmt;

struct Value {
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction, kLoop };
  Kind kind = Kind::kUndefined;
  bool b = false;
  // kString: the text is markup (Jinja's Markup, from |safe or |escape): "+" with a plain
  // string HTML-escapes the plain side, as markupsafe does.
  bool markup = false;
  // kList: the result of map / select / reject / selectattr / rejectattr, a generator in
  // Jinja: tojson and length refuse it (as jinja2 under Hugging Face's settings); |list
  // makes it a list.
  bool generator = false;
  int64_t i = 0;  // kInt; kFunction of a macro: how many scopes deep it was defined
  double f = 0.0;
  // kString; kFunction: its name; kUndefined: why it is undefined, as Jinja's message
  // ("'x' is undefined", "'dict object' has no attribute 'x'"), or empty. Shared and
  // immutable, so copying a Value never copies text.
  std::shared_ptr<const std::string> str;
  std::shared_ptr<const List> list;  // kList (immutable, shared)
  std::shared_ptr<const Dict> dict;  // kDict (immutable, shared)
  Namespace* ns = nullptr;           // kNamespace, owned by the Renderer's arena
  std::shared_ptr<const LoopState> loop;  // kLoop: the enclosing for loop's state
  const Stmt* macro = nullptr;       // kFunction: the {% macro %} statement (in the parsed
                                     // template, which outlives every render); null: a builtin

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

// `what`: Jinja's message for using it (see Value::str).
inline Value undefined_value(std::string what) {
  Value v;
  v.str = std::make_shared<const std::string>(std::move(what));
  return v;
}
inline Value none_value() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
inline Value bool_value(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.b = b;
  return v;
}
inline Value int_value(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.i = i;
  return v;
}
inline Value float_value(double f) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = f;
  return v;
}
inline Value string_value(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.str = std::make_shared<const std::string>(std::move(s));
  return v;
}
inline Value list_value(List items) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<const List>(std::move(items));
  return v;
}
inline Value dict_value(Dict items) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<const Dict>(std::move(items));
  return v;
}
inline Value function_value(std::string name) {
  Value v;
  v.kind = Kind::kFunction;
  v.str = std::make_shared<const std::string>(std::move(name));
  return v;
}

inline bool is_number(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kFloat || v.kind == Kind::kBool; }
inline bool is_integral(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
inline int64_t as_int(const Value& v) { return v.kind == Kind::kBool ? int64_t{v.b} : v.i; }
inline double as_double(const Value& v) { return v.kind == Kind::kFloat ? v.f : static_cast<double>(as_int(v)); }

inline bool truthy(const Value& v) {
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

inline const Value* dict_find(const Dict& d, std::string_view key) {
  for (const auto& [k, v] : d) {
    if (k == key) return &v;
  }
  return nullptr;
}

const char* kind_name(const Value& v);

// Jinja's object_type_repr: "dict object", "list object", "None", ...
std::string jinja_type_repr(const Value& v);

// Jinja's message for a missing attribute: "'dict object' has no attribute 'x'".
std::string no_attribute_message(const Value& obj, std::string_view name);

// Python's float repr: shortest round-trip digits; fixed notation for exponents in
// [-4, 16), else d.ddde+XX.
std::string float_repr(double f);

// Python's repr of a str: single quotes unless the text has a single and no double quote.
std::string python_string_repr(std::string_view s);

// A JSON string literal, as json.dumps(ensure_ascii=False).
std::string json_string(std::string_view s);

}  // namespace lumen::tok::chat_template_detail
