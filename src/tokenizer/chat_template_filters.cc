// Chat template methods, filters and tests: string / list / dict methods (s.strip(),
// d.items(), ...), the filters after "|" and the tests after "is". Part of the Renderer
// (chat_template_eval.h); every step and every byte built is charged to its budget.
#include "tokenizer/chat_template_eval.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace lumen::tok::chat_template_detail {

// -- methods

std::string Renderer::strip_chars(std::string_view s, const Value* chars, bool left, bool right) {
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

std::string Renderer::ascii_case(std::string s, bool upper) {
  for (char& c : s) {
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

std::string Renderer::title_case(std::string s) {
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
std::string Renderer::jinja_title(std::string s) {
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

std::string Renderer::capitalize(const std::string& s) {
  std::string out = ascii_case(s, false);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

Result<std::string> Renderer::replace_all(const std::string& s, const Value* from_v, const Value* to_v,
                                          const Value* count_v, SourcePos pos) {
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

Result<Value> Renderer::split(const std::string& s, const Value* sep, const Value* maxsplit_v, SourcePos pos) {
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

Result<Value> Renderer::call_method(const Value& obj, const std::string& name, const CallArgs& args, SourcePos pos) {
  if (obj.kind == Kind::kUndefined) return undefined_value(obj.s());  // chains on undefined stay undefined
  if (obj.kind == Kind::kList) {
    const Value* a0 = args.get(0, "value");
    if ((name != "count" && name != "index") || !a0) return error_at(pos, no_attribute_message(obj, name) + " (no such method)");
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
    return error_at(pos, no_attribute_message(obj, name) + " (no such method)");
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
  return error_at(pos, no_attribute_message(obj, name) + " (no such method)");
}

// Python's str.splitlines(): the lines without their line breaks, no trailing empty line.
std::vector<std::string_view> Renderer::split_lines(std::string_view s) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t brk = 0;  // bytes of a line break at i
    if (c == '\r') {
      brk = i + 1 < s.size() && s[i + 1] == '\n' ? 2 : 1;
    } else if (c == '\n' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e) {
      brk = 1;
    } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
      brk = 2;  // U+0085
    } else if (c == 0xe2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xa8 || static_cast<unsigned char>(s[i + 2]) == 0xa9)) {
      brk = 3;  // U+2028, U+2029
    }
    if (brk == 0) {
      ++i;
      continue;
    }
    lines.push_back(s.substr(start, i - start));
    i += brk;
    start = i;
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

// indent(width=4, first=False, blank=False), as Jinja's do_indent: width is a count of
// spaces or the indentation string itself.
Result<Value> Renderer::indent(std::string s, const CallArgs& args, SourcePos pos) {
  const Value* width = args.get(0, "width");
  const Value* first = args.get(1, "first");
  const Value* blank = args.get(2, "blank");
  std::string pad = "    ";
  if (width && width->kind == Kind::kString) {
    pad = width->s();
  } else if (width && is_integral(*width)) {
    pad.assign(static_cast<size_t>(std::clamp<int64_t>(as_int(*width), 0, 1024)), ' ');
  } else if (width) {
    return error_at(pos, std::string("indent: width must be an integer or a string, got ") + kind_name(*width));
  }
  s += '\n';
  const std::vector<std::string_view> lines = split_lines(s);
  LUMEN_TRY(charge(static_cast<int64_t>(s.size() + lines.size() * pad.size()), pos));
  std::string out;
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k > 0) {
      out += '\n';
      if ((blank && truthy(*blank)) || !lines[k].empty()) out += pad;
    }
    out += lines[k];
    LUMEN_TRY(check_size(out, pos));
  }
  if (first && truthy(*first)) out = pad + out;
  LUMEN_TRY(check_string(out, pos));
  return string_value(std::move(out));
}

// -- filters and tests

std::string Renderer::html_escape(std::string_view s) {
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
  return out;
}

Result<Value> Renderer::apply_filter(const std::string& name, const Value& v, const CallArgs& args, SourcePos pos) {
  const Value* a0 = args.get(0, "");
  if (name == "default" || name == "d") {
    const Value* boolean = args.get(1, "boolean");
    const bool use_default = v.kind == Kind::kUndefined || (boolean && truthy(*boolean) && !truthy(v));
    if (!use_default) return v;
    const Value* dflt = args.get(0, "default_value");
    return dflt ? *dflt : string_value("");
  }
  if (name == "safe") {  // Markup(value)
    Value out = v;
    if (v.kind != Kind::kString) {
      LUMEN_ASSIGN_OR_RETURN(std::string text, to_str(v, pos));
      out = string_value(std::move(text));
    }
    out.markup = true;
    return out;
  }
  if (name == "length" || name == "count") {
    if (v.generator) return error_at(pos, "object of type 'generator' has no len()");
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
    if (name == "last" && v.generator) return error_at(pos, "'generator' object is not reversible");
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
    LUMEN_ASSIGN_OR_RETURN(Value out, select(name, v, args, pos));
    out.generator = true;
    return out;
  }
  if (name == "map") {
    LUMEN_ASSIGN_OR_RETURN(Value out, map(v, args, pos));
    out.generator = true;
    return out;
  }
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
    Value result = list_value(std::move(out));
    result.generator = true;
    return result;
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
Value Renderer::number_filter(const std::string& name, const Value& v, const CallArgs& args) {
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
Result<Value> Renderer::string_filter(const std::string& name, const Value& v, const CallArgs& args, SourcePos pos) {
  const Value* a0 = args.get(0, "");
  LUMEN_ASSIGN_OR_RETURN(std::string s, to_str(v, pos));
  if (name == "trim") return string_value(strip_chars(s, a0, true, true));
  if (name == "upper" || name == "lower") return string_value(ascii_case(std::move(s), name == "upper"));
  if (name == "capitalize") return string_value(capitalize(s));
  if (name == "title") return string_value(jinja_title(std::move(s)));
  if (name == "string") return v.kind == Kind::kString ? v : string_value(std::move(s));
  if (name == "indent") return indent(s, args, pos);
  if (name == "escape" || name == "e") {  // markup is already escaped
    if (v.kind == Kind::kString && v.markup) return v;
    Value out = string_value(html_escape(s));
    LUMEN_TRY(check_string(out.s(), pos));
    out.markup = true;
    return out;
  }
  return error_at(pos, "unknown filter '" + name + "'");
}

// select(test, args...), reject(...), selectattr(attr, test, args...), rejectattr(...).
Result<Value> Renderer::select(const std::string& name, const Value& v, const CallArgs& args, SourcePos pos) {
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
Result<Value> Renderer::map(const Value& v, const CallArgs& args, SourcePos pos) {
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

Result<bool> Renderer::apply_test(const std::string& name, const Value& v, const CallArgs& args, SourcePos pos) {
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

}  // namespace lumen::tok::chat_template_detail
