// Chat template values: kind names for messages, and Python / JSON spellings of floats
// and strings (repr, tojson).
#include "tokenizer/chat_template_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace lumen::tok::chat_template_detail {

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

std::string jinja_type_repr(const Value& v) {
  switch (v.kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "bool object";
    case Kind::kInt: return "int object";
    case Kind::kFloat: return "float object";
    case Kind::kString: return "str object";
    case Kind::kList: return "list object";
    case Kind::kDict: return "dict object";
    case Kind::kNamespace: return "jinja2.utils.Namespace object";
    case Kind::kFunction: return v.macro ? "jinja2.runtime.Macro object" : "function object";
    case Kind::kLoop: return "jinja2.runtime.LoopContext object";
    case Kind::kUndefined: return "jinja2.runtime.Undefined object";
  }
  return "object";
}

std::string no_attribute_message(const Value& obj, std::string_view name) {
  return "'" + jinja_type_repr(obj) + "' has no attribute " + python_string_repr(name);
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

}  // namespace lumen::tok::chat_template_detail
