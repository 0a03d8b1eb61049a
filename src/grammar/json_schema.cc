// nlohmann::ordered_json keeps the schema's property order; its exceptions stay in this
// file (one try/catch at the entry point).
#include "grammar/json_schema.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "gguf/json_util.h"
#include "grammar/gbnf.h"
#include "grammar/json_pattern.h"

namespace lumen::grammar {
namespace {

using Json = nlohmann::ordered_json;

// The rules every converted schema may use. Names are [a-z0-9-] (GBNF's name characters).
// Whitespace between tokens is at most one space: a weak model given newlines and tabs
// spends its whole token budget on them and never closes the value.
constexpr const char* kBaseRules =
    "ws ::= \" \"?\n"
    "json-esc ::= [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} )\n"
    "json-int ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "json-frac ::= \".\" [0-9]{1,16}\n"
    "json-number ::= json-int json-frac? ( [eE] [-+]? [0-9]{1,2} )?\n";

// A JSON string's characters: written out at every use, so that each repetition of it has
// a body of its own (what lets the precomputed masks see a whole string; see pda.h).
constexpr const char* kCharGroup = "( [^\"\\\\\\x00-\\x1F] | \"\\\\\" json-esc )";

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> k = {"title", "description", "default", "examples", "example", "$schema",
                                          "$id", "$comment", "deprecated", "readOnly", "writeOnly", "discriminator",
                                          "strict", "$defs", "definitions", "contentMediaType", "contentEncoding",
                                          "name"};
  return k;
}

const std::set<std::string>& constraint_keywords() {
  static const std::set<std::string> k = {
      "multipleOf", "type", "enum", "const", "nullable", "anyOf", "oneOf", "allOf", "$ref", "properties", "required",
      "additionalProperties", "items", "prefixItems", "minItems", "maxItems", "uniqueItems", "minLength",
      "maxLength", "format", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
  return k;
}


std::string json_text(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::strict); }

// The name part of a rule made from a property name or hint: [a-zA-Z0-9-], at most 40.
std::string sanitize(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (out.size() >= 40) break;
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (ok) out += c;
    else if (!out.empty() && out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "x" : out;
}

std::string pointer_escape(std::string_view key) {
  std::string out;
  for (const char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

// Integers in [lo, hi] as digit strings of one length (lo <= hi, same length).
std::string same_length_range(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  if (lo[0] == hi[0]) {
    const std::string rest = same_length_range(lo.substr(1), hi.substr(1));
    return gbnf_literal(std::string(1, lo[0])) + (rest.empty() ? "" : " " + rest);
  }
  const size_t n = lo.size() - 1;
  const bool lo_zeros = lo.find_first_not_of('0', 1) == std::string::npos;
  const bool hi_nines = hi.find_first_not_of('9', 1) == std::string::npos;
  auto digits = [&](char a, char b) {
    return a == b ? gbnf_literal(std::string(1, a)) : std::string("[") + a + "-" + b + "]";
  };
  auto any_tail = [&] { return n == 0 ? std::string() : " [0-9]{" + std::to_string(n) + "}"; };
  if (lo_zeros && hi_nines) return digits(lo[0], hi[0]) + any_tail();
  std::vector<std::string> alts;
  char mid_lo = lo[0], mid_hi = hi[0];
  if (lo_zeros) {
    mid_lo = lo[0];
  } else {
    alts.push_back(gbnf_literal(std::string(1, lo[0])) + " " + same_length_range(lo.substr(1), std::string(n, '9')));
    mid_lo = static_cast<char>(lo[0] + 1);
  }
  if (hi_nines) {
    mid_hi = hi[0];
  } else {
    mid_hi = static_cast<char>(hi[0] - 1);
  }
  if (mid_lo <= mid_hi) alts.push_back(digits(mid_lo, mid_hi) + any_tail());
  if (!hi_nines) alts.push_back(gbnf_literal(std::string(1, hi[0])) + " " + same_length_range(std::string(n, '0'), hi.substr(1)));
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

constexpr int kMaxDigits = 16;  // integer digits of generated numbers

// Non-negative integers in [lo, hi]; hi empty = up to kMaxDigits digits. No leading zeros.
std::string nonneg_range(uint64_t lo, std::optional<uint64_t> hi) {
  std::vector<std::string> alts;
  const std::string slo = std::to_string(lo);
  const size_t max_len = hi ? std::to_string(*hi).size() : static_cast<size_t>(kMaxDigits);
  for (size_t len = slo.size(); len <= max_len; ++len) {
    std::string a = len == slo.size() ? slo : "1" + std::string(len - 1, '0');
    if (len == 1 && len != slo.size()) a = "0";
    std::string b = std::string(len, '9');
    if (hi && len == max_len) b = std::to_string(*hi);
    if (!hi && len > slo.size()) {  // every longer length at once
      alts.push_back("[1-9] [0-9]{" + std::to_string(len - 1) + "," + std::to_string(kMaxDigits - 1) + "}");
      break;
    }
    if (a <= b || a.size() < b.size()) alts.push_back(same_length_range(a, b));
  }
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

// Number bounds, in exact decimal digits: a number text is compared with a bound digit by
// digit, never through a double (0.1 has no exact double).

constexpr int kMaxFracDigits = 16;  // fraction digits of generated numbers
constexpr int kMaxExpDigits = 2;    // exponent digits of generated numbers
constexpr uint64_t kMaxInt = 9999999999999999ULL;  // kMaxDigits nines
constexpr uint64_t kMaxMultipleOf = 1000;          // integer multipleOf at most
constexpr uint64_t kMaxMultipleOfPrimeTo10 = 100;  // and its factor prime to 10 at most (k = 97: 240 KB)

// (neg ? -1 : 1) * int_digits.frac_digits, exactly. int_digits has no leading zeros ("0"
// for none), frac_digits no trailing zeros; zero is never negative.
struct Decimal {
  bool neg = false;
  std::string int_digits = "0";
  std::string frac_digits;

  bool is_zero() const { return int_digits == "0" && frac_digits.empty(); }
};

// The digit string `digits` with the decimal point `point` places from its left (point may
// be negative or beyond the end).
Decimal decimal_from_digits(bool neg, const std::string& digits, int64_t point) {
  std::string int_digits, frac_digits;
  const auto n = static_cast<int64_t>(digits.size());
  if (point <= 0) {
    frac_digits = std::string(static_cast<size_t>(-point), '0') + digits;
  } else if (point >= n) {
    int_digits = digits + std::string(static_cast<size_t>(point - n), '0');
  } else {
    int_digits = digits.substr(0, static_cast<size_t>(point));
    frac_digits = digits.substr(static_cast<size_t>(point));
  }
  Decimal d;
  const size_t nz = int_digits.find_first_not_of('0');
  d.int_digits = nz == std::string::npos ? "0" : int_digits.substr(nz);
  while (!frac_digits.empty() && frac_digits.back() == '0') frac_digits.pop_back();
  d.frac_digits = std::move(frac_digits);
  d.neg = neg && !d.is_zero();
  return d;
}

// A JSON number's text ("-12.5e-3"); the caller passes a well-formed one.
Decimal parse_decimal(std::string_view t) {
  bool neg = false;
  size_t i = 0;
  if (i < t.size() && (t[i] == '-' || t[i] == '+')) neg = t[i++] == '-';
  std::string digits;
  int64_t point = -1;
  for (; i < t.size() && t[i] != 'e' && t[i] != 'E'; ++i) {
    if (t[i] == '.') point = static_cast<int64_t>(digits.size());
    else digits += t[i];
  }
  if (point < 0) point = static_cast<int64_t>(digits.size());
  if (i < t.size()) point += std::stoll(std::string(t.substr(i + 1)));
  return decimal_from_digits(neg, digits, point);
}

// d * 10^e.
Decimal scaled(const Decimal& d, int e) {
  return decimal_from_digits(d.neg, d.int_digits + d.frac_digits, static_cast<int64_t>(d.int_digits.size()) + e);
}

// The shortest decimal that reads back as x: what the schema's author wrote for every bound
// of at most 15 significant digits (nlohmann parses numbers into doubles and drops the text).
Decimal shortest_decimal(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  LUMEN_CHECK(r.ec == std::errc());
  return parse_decimal(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
}

// Big-endian decimal digits times a small factor.
void multiply_digits(std::string& digits, int factor) {
  int carry = 0;
  for (size_t i = digits.size(); i-- > 0;) {
    const int v = (digits[i] - '0') * factor + carry;
    digits[i] = static_cast<char>('0' + v % 10);
    carry = v / 10;
  }
  while (carry) {
    digits.insert(digits.begin(), static_cast<char>('0' + carry % 10));
    carry /= 10;
  }
}

// The exact value of x, which has at most 56 significant bits (a midpoint of two doubles).
Decimal exact_decimal(long double x) {
  static_assert(std::numeric_limits<long double>::digits >= 56, "a midpoint of two doubles needs 55 bits");
  if (x == 0) return {};
  const bool neg = x < 0;
  int e2 = 0;
  const long double m = std::ldexp(std::frexp(std::fabs(x), &e2), 56);  // |x| = m * 2^(e2 - 56)
  const auto mi = static_cast<uint64_t>(m);
  LUMEN_CHECK(static_cast<long double>(mi) == m);
  std::string digits = std::to_string(mi);
  const int shift = e2 - 56;
  for (int k = 0; k < shift; ++k) multiply_digits(digits, 2);
  for (int k = 0; k < -shift; ++k) multiply_digits(digits, 5);  // m * 2^-k = m * 5^k / 10^k
  const int64_t point = static_cast<int64_t>(digits.size()) - (shift < 0 ? -shift : 0);
  return decimal_from_digits(neg, digits, point);
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.neg != b.neg) return a.neg ? -1 : 1;
  int c = 0;
  if (a.int_digits.size() != b.int_digits.size()) c = a.int_digits.size() < b.int_digits.size() ? -1 : 1;
  else if (a.int_digits != b.int_digits) c = a.int_digits < b.int_digits ? -1 : 1;
  else if (a.frac_digits != b.frac_digits) c = a.frac_digits < b.frac_digits ? -1 : 1;  // no trailing zeros
  return a.neg ? -c : c;
}

// One side of a range: value >= (or >, strict) a lower bound, <= (or <) an upper one.
struct NumBound {
  Decimal value;
  bool strict = false;
};

// Digit strings to write after the fraction digits [0, k) so that the whole fraction stays
// within the bounds, which those k digits equal (lo / hi nullptr: already strictly inside on
// that side). alts are the non-empty continuations; can_end: stopping here is one too.
struct FracTail {
  bool can_end = false;
  std::vector<std::string> alts;
};

std::string group(const std::vector<std::string>& alts) {
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
  return out + " )";
}

FracTail frac_tail(int k, const NumBound* lo, const NumBound* hi) {
  const int n_left = kMaxFracDigits - k;
  // Whether the bound's fraction has no digits at k or beyond (the rest is zeros).
  auto past = [k](const NumBound* b) { return k >= static_cast<int>(b->value.frac_digits.size()); };
  auto digit = [k](const NumBound* b) {
    return k < static_cast<int>(b->value.frac_digits.size()) ? b->value.frac_digits[static_cast<size_t>(k)] - '0' : 0;
  };
  if (lo && past(lo) && !lo->strict) lo = nullptr;  // every tail is >= zeros
  FracTail t;
  if (!lo && !hi) {
    t.can_end = true;
    if (n_left > 0) t.alts.push_back("[0-9]{1," + std::to_string(n_left) + "}");
    return t;
  }
  if (!lo && past(hi)) {  // only zeros stay <= the rest of hi (and never <)
    t.can_end = !hi->strict;
    if (t.can_end && n_left > 0) t.alts.push_back("\"0\"{1," + std::to_string(n_left) + "}");
    return t;
  }
  t.can_end = !lo;  // lo here has nonzero digits left, or is strict; hi here has digits left
  if (n_left == 0) return t;
  const int ld = lo ? digit(lo) : -1, hd = hi ? digit(hi) : 10;
  if (lo && hi && ld > hd) return t;  // lo above hi: the caller's range is empty
  auto digits = [](int a, int b) {
    return a == b ? "\"" + std::to_string(a) + "\"" : "[" + std::to_string(a) + "-" + std::to_string(b) + "]";
  };
  if (ld + 1 <= hd - 1)
    t.alts.push_back(digits(ld + 1, hd - 1) + (n_left > 1 ? " [0-9]{0," + std::to_string(n_left - 1) + "}" : ""));
  auto add = [&](int d, const NumBound* l, const NumBound* h) {
    const FracTail sub = frac_tail(k + 1, l, h);
    if (sub.alts.empty() && !sub.can_end) return;
    t.alts.push_back("\"" + std::to_string(d) + "\"" +
                     (sub.alts.empty() ? "" : " " + group(sub.alts) + (sub.can_end ? "?" : "")));
  };
  if (lo && hi && ld == hd) {
    add(ld, lo, hi);
  } else {
    if (lo) add(ld, lo, nullptr);
    if (hi) add(hd, nullptr, hi);
  }
  return t;
}

// The fraction part ( "." digits )? of a number whose integer part equals that of lo (lo
// non-null) and of hi (hi non-null), within them; nullopt: none fits.
std::optional<std::string> frac_part(const NumBound* lo, const NumBound* hi) {
  if (!hi && (!lo || (lo->value.frac_digits.empty() && !lo->strict))) return "json-frac?";
  const FracTail t = frac_tail(0, lo, hi);
  if (t.alts.empty()) return t.can_end ? std::optional<std::string>("") : std::nullopt;
  const std::string dot = "\".\" " + group(t.alts);
  return t.can_end ? "( " + dot + " )?" : dot;
}

// Texts of json-int without "-" and json-frac? (no exponent) whose value u lies within lo
// and hi (each <=, or < where strict), both >= 0 (hi absent: no upper bound). "" when
// there is none.
std::string unsigned_number_range(const NumBound& lo, const std::optional<NumBound>& hi) {
  if (lo.value.int_digits.size() > static_cast<size_t>(kMaxDigits)) return "";
  const uint64_t lo_int = std::stoull(lo.value.int_digits);
  const std::optional<NumBound> top =
      hi && hi->value.int_digits.size() <= static_cast<size_t>(kMaxDigits) ? hi : std::nullopt;
  const uint64_t hi_int = top ? std::stoull(top->value.int_digits) : 0;
  auto int_text = [](uint64_t v) { return "\"" + std::to_string(v) + "\""; };
  std::vector<std::string> alts;
  if (top && lo_int == hi_int) {
    if (auto f = frac_part(&lo, &*top)) alts.push_back(int_text(lo_int) + (f->empty() ? "" : " " + *f));
  } else if (!top || lo_int < hi_int) {
    if (auto f = frac_part(&lo, nullptr)) alts.push_back(int_text(lo_int) + (f->empty() ? "" : " " + *f));
    const uint64_t mid_lo = lo_int + 1;  // integer parts strictly between: any fraction
    if (!top && mid_lo <= kMaxInt) alts.push_back(nonneg_range(mid_lo, std::nullopt) + " json-frac?");
    if (top && mid_lo + 1 <= hi_int) alts.push_back(nonneg_range(mid_lo, hi_int - 1) + " json-frac?");
    if (top) {
      if (auto f = frac_part(nullptr, &*top)) alts.push_back(int_text(hi_int) + (f->empty() ? "" : " " + *f));
    }
  }
  if (alts.empty()) return "";
  return alts.size() == 1 ? alts[0] : group(alts);
}

// Texts of json-number without exponent whose value lies within lo and hi (either absent:
// open). "" when there is none.
std::string number_range(const std::optional<NumBound>& lo, const std::optional<NumBound>& hi) {
  std::vector<std::string> alts;
  if (!(hi && hi->value.neg)) {  // texts without "-": value u >= 0
    const NumBound u_lo = lo && !lo->value.neg ? *lo : NumBound{};
    const std::string u = unsigned_number_range(u_lo, hi);
    if (!u.empty()) alts.push_back(u);
  }
  if (!(lo && !lo->value.neg && !lo->value.is_zero())) {
    // Texts "-" u, value -u (-0 is 0): lo <= -u <= hi  <=>  -hi <= u <= -lo (< alike).
    auto flip = [](NumBound b) {
      b.value.neg = false;
      return b;
    };
    const NumBound u_lo = hi && (hi->value.neg || hi->value.is_zero()) ? flip(*hi) : NumBound{};
    const std::optional<NumBound> u_hi = lo ? std::optional<NumBound>(flip(*lo)) : std::nullopt;
    const std::string u = unsigned_number_range(u_lo, u_hi);
    if (!u.empty()) alts.push_back("\"-\" " + u);
  }
  if (alts.empty()) return "";
  return alts.size() == 1 ? alts[0] : group(alts);
}

// The position of d's leading digit: 0 for 1..9.x, -1 for 0.1.., 2 for 100..; 0 for zero.
int magnitude(const Decimal& d) {
  if (d.int_digits != "0") return static_cast<int>(d.int_digits.size()) - 1;
  const size_t nz = d.frac_digits.find_first_not_of('0');
  return nz == std::string::npos ? 0 : -static_cast<int>(nz) - 1;
}

// Texts of json-number whose value lies within lo and hi: without exponent, or when no such
// text exists (a range narrower than 1e-16 or beyond 1e16), mantissas with one exponent
// "e<E>" chosen near the bounds' magnitude. "" when json-number has no text in the range.
std::string number_range_any_form(const std::optional<NumBound>& lo, const std::optional<NumBound>& hi) {
  std::string plain = number_range(lo, hi);
  if (!plain.empty()) return plain;
  std::optional<int> e0;  // the larger magnitude of the nonzero bounds
  for (const auto* b : {&lo, &hi})
    if (*b && !(*b)->value.is_zero()) e0 = std::max(e0.value_or(INT_MIN), magnitude((*b)->value));
  int max_exp = 1;
  for (int k = 0; k < kMaxExpDigits; ++k) max_exp *= 10;
  --max_exp;
  for (int step = 0; step <= 2 * max_exp; ++step) {
    const int e = e0.value_or(0) + (step % 2 ? (step + 1) / 2 : -(step / 2));
    if (e == 0 || e < -max_exp || e > max_exp) continue;
    auto scale = [e](const std::optional<NumBound>& b) {
      if (!b) return b;
      NumBound s = *b;
      s.value = scaled(b->value, -e);
      return std::optional<NumBound>(s);
    };
    const std::string mantissa = number_range(scale(lo), scale(hi));
    if (!mantissa.empty()) return "( " + mantissa + " ) \"e" + std::to_string(e) + "\"";
  }
  return "";
}

class Converter {
 public:
  // prefix: empty for a whole grammar (start rule "root"), else the start rule's name and the
  // prefix of every rule made for this schema.
  Converter(const Json& root, const JsonSchemaLimits& limits, std::string prefix = {})
      : root_(root), limits_(limits), prefix_(std::move(prefix)) {}

  Result<std::string> run() {
    LUMEN_ASSIGN_OR_RETURN(std::string expr, visit(root_, "", "root", 0));
    std::string out = (prefix_.empty() ? std::string("root") : prefix_) + " ::= " + expr + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    out += kBaseRules;
    if (need_any_) out += any_rules();
    return out;
  }

  static std::string any_rules() {
    return std::string("json-any ::= json-any-object | json-any-array | json-any-string | json-number | \"true\" | "
                       "\"false\" | \"null\"\n"
                       "json-any-object ::= \"{\" ws ( json-any-string ws \":\" ws json-any ( ws \",\" ws "
                       "json-any-string ws \":\" ws json-any )* )? ws \"}\"\n"
                       "json-any-array ::= \"[\" ws ( json-any ( ws \",\" ws json-any )* )? ws \"]\"\n"
                       "json-any-string ::= \"\\\"\" ") + kCharGroup + "* \"\\\"\"\n";
  }

 private:
  static Status fail(const std::string& path, const std::string& what) {
    return error("json_schema: " + (path.empty() ? std::string("/") : path) + ": " + what);
  }

  Result<std::string> add_rule(const std::string& hint, const std::string& body) {
    if (static_cast<int32_t>(rules_.size()) >= limits_.max_rules)
      return fail("", "the schema needs more than " + std::to_string(limits_.max_rules) + " grammar rules");
    std::string name = sanitize(hint);
    if (name == "root" || name.rfind("json-", 0) == 0 || name == "ws") name = "s-" + name;
    if (!prefix_.empty()) name = prefix_ + "-" + name;
    if (used_.count(name)) {
      int k = 2;
      while (used_.count(name + "-" + std::to_string(k))) ++k;
      name += "-" + std::to_string(k);
    }
    used_.insert(name);
    rules_.emplace_back(name, body);
    return name;
  }

  // Resolves a local reference "#..." to the schema it points at.
  Result<const Json*> resolve(const std::string& ref, const std::string& path) const {
    if (ref.empty() || ref[0] != '#')
      return fail(path, "$ref '" + ref.substr(0, 200) + "': only references inside the schema (#...) are supported");
    const Json* cur = &root_;
    size_t pos = 1;
    if (pos < ref.size() && ref[pos] != '/') return fail(path, "$ref '" + ref.substr(0, 200) + "': not a JSON pointer");
    while (pos < ref.size()) {
      const size_t next = ref.find('/', pos + 1);
      std::string token = ref.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
      std::string key;
      for (size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
          key += token[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          key += token[i];
        }
      }
      if (cur->is_object() && cur->contains(key)) {
        cur = &(*cur)[key];
      } else if (cur->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
                 key.size() < 9 && std::stoul(key) < cur->size()) {
        cur = &(*cur)[std::stoul(key)];
      } else {
        return fail(path, "$ref '" + ref.substr(0, 200) + "' points at nothing");
      }
      pos = next == std::string::npos ? ref.size() : next;
    }
    return cur;
  }

  std::string any() {
    need_any_ = true;
    return "json-any";
  }

  Result<std::string> visit(const Json& s, const std::string& path, const std::string& hint, int depth) {
    if (depth > limits_.max_depth) return fail(path, "nested deeper than " + std::to_string(limits_.max_depth));
    if (s.is_boolean()) {
      if (s.get<bool>()) return any();
      return fail(path, "the schema false matches nothing");
    }
    if (!s.is_object()) return fail(path, std::string("a schema must be an object or a boolean, got ") + s.type_name());
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (annotation_keywords().count(k) || constraint_keywords().count(k) || k.rfind("x-", 0) == 0) continue;
      return fail(path, "unsupported keyword '" + k.substr(0, 100) + "'");
    }
    if (s.contains("uniqueItems") && !(s["uniqueItems"].is_boolean() && !s["uniqueItems"].get<bool>()))
      return fail(path, "unsupported keyword 'uniqueItems' (only false)");
    auto has_constraints_beside = [&](std::initializer_list<const char*> allowed) {
      for (auto it = s.begin(); it != s.end(); ++it) {
        if (!constraint_keywords().count(it.key())) continue;
        bool ok = false;
        for (const char* a : allowed) ok = ok || it.key() == a;
        if (!ok) return std::optional<std::string>(it.key());
      }
      return std::optional<std::string>();
    };
    std::string expr;
    if (s.contains("$ref")) {
      if (auto other = has_constraints_beside({"$ref"}))
        return fail(path, "'" + *other + "' beside '$ref' is not supported");
      if (!s["$ref"].is_string()) return fail(path + "/$ref", "must be a string");
      const std::string ref = s["$ref"].get<std::string>();
      auto it = refs_.find(ref);
      if (it != refs_.end()) return it->second;
      LUMEN_ASSIGN_OR_RETURN(const Json* target, resolve(ref, path));
      // Reserve the rule first, so a recursive reference finds it.
      const std::string ref_hint = ref.substr(ref.find_last_of('/') + 1);
      LUMEN_ASSIGN_OR_RETURN(std::string name, add_rule("ref-" + ref_hint, ""));
      refs_.emplace(ref, name);
      const size_t slot = rules_.size() - 1;
      LUMEN_ASSIGN_OR_RETURN(std::string body, visit(*target, ref.substr(1), ref_hint, depth + 1));
      rules_[slot].second = body;
      return name;
    }
    if (s.contains("const") || s.contains("enum")) {
      // The listed values, less those the keywords beside them exclude ({"type": "string",
      // "enum": ["a", 3]} admits only "a"); keywords beside them that values are not checked
      // against here are an error rather than dropped.
      const char* key = s.contains("const") ? "const" : "enum";
      if (auto other = has_constraints_beside({"const", "enum", "nullable", "type", "minLength", "maxLength", "pattern", "minimum", "maximum",
                                               "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems",
                                               "uniqueItems"}))
        return fail(path, "'" + *other + "' beside '" + key + "' is not supported");
      Json values = Json::array();
      if (s.contains("const")) {
        values.push_back(s["const"]);
      } else {
        const Json& e = s["enum"];
        if (!e.is_array() || e.empty()) return fail(path + "/enum", "must be a non-empty array");
        if (static_cast<int32_t>(e.size()) > limits_.max_enum)
          return fail(path + "/enum", "more than " + std::to_string(limits_.max_enum) + " values");
        values = e;
      }
      if (s.contains("const") && s.contains("enum")) {
        bool listed = false;
        for (const Json& v : s["enum"]) listed = listed || v == s["const"];
        if (!listed) return fail(path, "the 'const' value is not among the 'enum' values");
      }
      std::vector<std::string> texts;
      for (const Json& v : values) {
        LUMEN_ASSIGN_OR_RETURN(bool ok, value_allowed(v, s, path));
        if (ok) texts.push_back(gbnf_literal(json_text(v)));
      }
      if (texts.empty()) {
        // null may still come from nullable (below).
        if (!(s.contains("nullable") && s["nullable"].is_boolean() && s["nullable"].get<bool>()))
          return fail(path, std::string("no '") + key + "' value satisfies the keywords beside it");
        expr = "\"null\"";
      } else {
        expr = "(";
        for (size_t i = 0; i < texts.size(); ++i) expr += (i ? " | " : " ") + texts[i];
        expr += " )";
      }
    } else if (s.contains("anyOf") || s.contains("oneOf")) {
      const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
      if (s.contains("anyOf") && s.contains("oneOf")) return fail(path, "both anyOf and oneOf are not supported");
      if (auto other = has_constraints_beside({key, "nullable"}))
        return fail(path, "'" + *other + "' beside '" + key + "' is not supported");
      const Json& list = s[key];
      if (!list.is_array() || list.empty()) return fail(path + "/" + key, "must be a non-empty array");
      expr = "(";
      for (size_t i = 0; i < list.size(); ++i) {
        LUMEN_ASSIGN_OR_RETURN(std::string e, visit(list[i], path + "/" + key + "/" + std::to_string(i),
                                                    hint + "-" + std::to_string(i), depth + 1));
        expr += (i ? " | " : " ") + e;
      }
      expr += " )";
    } else if (s.contains("allOf")) {
      LUMEN_ASSIGN_OR_RETURN(expr, visit_all_of(s, path, hint, depth));
    } else {
      LUMEN_ASSIGN_OR_RETURN(expr, visit_typed(s, path, hint, depth));
    }
    if (s.contains("nullable")) {
      if (!s["nullable"].is_boolean()) return fail(path + "/nullable", "must be a boolean");
      if (s["nullable"].get<bool>()) expr = "( " + expr + " | \"null\" )";
    }
    return add_rule(hint, expr);
  }

  // Whether a listed value (enum, const) satisfies the keywords beside it in s: type (and
  // nullable), string lengths in code points, numeric bounds, array item counts.
  Result<bool> value_allowed(const Json& v, const Json& s, const std::string& path) {
    if (v.is_null() && s.contains("nullable") && s["nullable"].is_boolean() && s["nullable"].get<bool>()) return true;
    if (s.contains("type")) {
      const Json& t = s["type"];
      std::vector<std::string> types;
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array())
        for (const Json& x : t) {
          if (!x.is_string()) return fail(path + "/type", "must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      else return fail(path + "/type", "must be a string or a non-empty array of strings");
      bool match = false;
      for (const std::string& ty : types) {
        if (ty == "null") match = match || v.is_null();
        else if (ty == "boolean") match = match || v.is_boolean();
        else if (ty == "string") match = match || v.is_string();
        else if (ty == "number") match = match || v.is_number();
        else if (ty == "integer")
          match = match || v.is_number_integer() ||
                  (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>());
        else if (ty == "object") match = match || v.is_object();
        else if (ty == "array") match = match || v.is_array();
        else return fail(path + "/type", "unknown type '" + ty.substr(0, 100) + "'");
      }
      if (!match) return false;
    }
    if (v.is_string()) {
      int64_t n = 0;  // code points: bytes that do not continue a UTF-8 sequence
      for (const char c : v.get_ref<const std::string&>()) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
      LUMEN_ASSIGN_OR_RETURN(int64_t min_len, read_count(s, "minLength", path, 0));
      LUMEN_ASSIGN_OR_RETURN(int64_t max_len, read_count(s, "maxLength", path, -1));
      if (n < min_len || (max_len >= 0 && n > max_len)) return false;
      if (s.contains("pattern")) {
        LUMEN_ASSIGN_OR_RETURN(JsonPattern p, parse_pattern(s, path));
        auto m = p.matches(v.get_ref<const std::string&>());
        if (!m.ok()) return fail(path + "/pattern", m.message());
        if (!*m) return false;
      }
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (!s.contains(key)) continue;
        if (!s[key].is_number()) return fail(path + "/" + key, "must be a number");
        const double b = s[key].get<double>();
        const std::string k = key;
        if ((k == "minimum" && !(x >= b)) || (k == "maximum" && !(x <= b)) || (k == "exclusiveMinimum" && !(x > b)) ||
            (k == "exclusiveMaximum" && !(x < b)))
          return false;
      }
    }
    if (v.is_array()) {
      LUMEN_ASSIGN_OR_RETURN(int64_t min_items, read_count(s, "minItems", path, 0));
      LUMEN_ASSIGN_OR_RETURN(int64_t max_items, read_count(s, "maxItems", path, -1));
      const auto n = static_cast<int64_t>(v.size());
      if (n < min_items || (max_items >= 0 && n > max_items)) return false;
    }
    return true;
  }

  // allOf of object schemas: one object with every property and requirement.
  Result<std::string> visit_all_of(const Json& s, const std::string& path, const std::string& hint, int depth) {
    const Json& list = s["allOf"];
    if (!list.is_array() || list.empty()) return fail(path + "/allOf", "must be a non-empty array");
    Json merged = Json::object();
    merged["type"] = "object";
    merged["properties"] = Json::object();
    merged["required"] = Json::array();
    // additionalProperties false in a part admits only that part's own properties.
    std::vector<std::pair<std::string, std::set<std::string>>> closed_parts;  // (path, properties)
    std::vector<const Json*> parts;
    for (size_t i = 0; i < list.size(); ++i) parts.push_back(&list[i]);
    Json rest = s;
    rest.erase("allOf");
    parts.push_back(&rest);
    for (size_t i = 0; i < parts.size(); ++i) {
      const Json* p = parts[i];
      const std::string ppath = i < list.size() ? path + "/allOf/" + std::to_string(i) : path;
      for (int hops = 0; p->is_object() && p->contains("$ref") && hops < 32; ++hops) {
        if (!(*p)["$ref"].is_string()) return fail(ppath + "/$ref", "must be a string");
        LUMEN_ASSIGN_OR_RETURN(p, resolve((*p)["$ref"].get<std::string>(), ppath));
      }
      if (!p->is_object()) return fail(ppath, "allOf is supported for object schemas only");
      for (auto it = p->begin(); it != p->end(); ++it) {
        const std::string& k = it.key();
        if (annotation_keywords().count(k)) continue;
        if (k == "type") {
          if (!(it.value().is_string() && it.value().get<std::string>() == "object"))
            return fail(ppath, "allOf is supported for object schemas only");
        } else if (k == "properties") {
          if (!it.value().is_object()) return fail(ppath + "/properties", "must be an object");
          for (auto pit = it.value().begin(); pit != it.value().end(); ++pit) {
            if (merged["properties"].contains(pit.key()))
              return fail(ppath + "/properties", "property '" + pit.key().substr(0, 100) + "' is defined twice in allOf");
            merged["properties"][pit.key()] = pit.value();
          }
        } else if (k == "required") {
          if (!it.value().is_array()) return fail(ppath + "/required", "must be an array");
          for (const Json& r : it.value()) merged["required"].push_back(r);
        } else if (k == "additionalProperties") {
          if (!(it.value().is_boolean() && !it.value().get<bool>()))
            return fail(ppath, "'additionalProperties' other than false inside allOf is not supported");
          merged["additionalProperties"] = false;
          std::set<std::string> own;
          if (p->contains("properties") && (*p)["properties"].is_object())
            for (auto pit = (*p)["properties"].begin(); pit != (*p)["properties"].end(); ++pit) own.insert(pit.key());
          closed_parts.emplace_back(ppath, std::move(own));
        } else {
          return fail(ppath, "'" + k + "' inside allOf is not supported (only object schemas are merged)");
        }
      }
    }
    std::set<std::string> required;
    for (const Json& r : merged["required"])
      if (r.is_string()) required.insert(r.get<std::string>());
    for (const auto& [cpath, own] : closed_parts) {
      for (auto it = merged["properties"].begin(); it != merged["properties"].end();) {
        if (own.count(it.key())) {
          ++it;
          continue;
        }
        if (required.count(it.key()))
          return fail(cpath, "additionalProperties false here excludes '" + it.key().substr(0, 100) +
                                 "', which allOf requires");
        it = merged["properties"].erase(it);  // optional: never generated
      }
      for (const std::string& r : required)
        if (!own.count(r))
          return fail(cpath, "additionalProperties false here excludes '" + r.substr(0, 100) + "', which allOf requires");
    }
    return visit_object(merged, path, hint, depth);
  }

  Result<std::string> visit_typed(const Json& s, const std::string& path, const std::string& hint, int depth) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const Json& x : t) {
          if (!x.is_string()) return fail(path + "/type", "must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return fail(path + "/type", "must be a string or a non-empty array of strings");
      }
    } else {  // no type: the one the keywords imply, else any value
      if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) types.push_back("object");
      else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) types.push_back("array");
      else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format") || s.contains("pattern"))
        types.push_back("string");
      else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum")) types.push_back("number");
      else if (s.contains("multipleOf")) types.push_back("number");
      else return any();
    }
    std::vector<std::string> alts;
    for (const std::string& t : types) {
      if (t == "null") alts.push_back("\"null\"");
      else if (t == "boolean") alts.push_back("( \"true\" | \"false\" )");
      else if (t == "string") { LUMEN_ASSIGN_OR_RETURN(std::string e, visit_string(s, path)); alts.push_back(e); }
      else if (t == "integer" || t == "number") { LUMEN_ASSIGN_OR_RETURN(std::string e, t == "integer" ? visit_integer(s, path) : visit_number(s, path)); alts.push_back(e); }
      else if (t == "object") { LUMEN_ASSIGN_OR_RETURN(std::string e, visit_object(s, path, hint, depth)); alts.push_back(e); }
      else if (t == "array") { LUMEN_ASSIGN_OR_RETURN(std::string e, visit_array(s, path, hint, depth)); alts.push_back(e); }
      else return fail(path + "/type", "unknown type '" + t.substr(0, 100) + "'");
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
    return out + " )";
  }

  Result<int64_t> read_count(const Json& s, const char* key, const std::string& path, int64_t dflt) {
    if (!s.contains(key)) return dflt;
    const Json& v = s[key];
    if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
      return fail(path + "/" + key, "must be a non-negative integer");
    const double d = v.get<double>();
    if (d < 0) return fail(path + "/" + key, "must be a non-negative integer");
    if (d > static_cast<double>(limits_.max_length))
      return fail(path + "/" + key, "over the limit of " + std::to_string(limits_.max_length));
    return static_cast<int64_t>(d);
  }

  Result<JsonPattern> parse_pattern(const Json& s, const std::string& path) {
    if (!s["pattern"].is_string()) return fail(path + "/pattern", "must be a string");
    PatternLimits pl;
    pl.max_count = limits_.max_length;
    const std::string& text = s["pattern"].get_ref<const std::string&>();
    auto p = JsonPattern::parse(text, pl);
    if (!p.ok()) return fail(path + "/pattern", "pattern '" + text.substr(0, 200) + "': " + p.message());
    return p;
  }

  // A string schema with `pattern`: minLength / maxLength beside it either do not narrow it
  // (the pattern's own lengths lie within them) or cut it exactly (JsonPattern::with_lengths);
  // anything else is an error.
  Result<std::string> visit_pattern(const Json& s, const std::string& path, int64_t min_len, int64_t max_len) {
    if (s.contains("format")) return fail(path, "'format' beside 'pattern' is not supported");
    LUMEN_ASSIGN_OR_RETURN(JsonPattern p, parse_pattern(s, path));
    const int64_t p_min = p.min_length(), p_max = p.max_length();
    if (min_len > p_min || (max_len >= 0 && (p_max == JsonPattern::kUnbounded || p_max > max_len))) {
      auto cut = p.with_lengths(min_len, max_len < 0 ? JsonPattern::kUnbounded : max_len);
      if (!cut.ok()) {
        const std::string have = std::to_string(p_min) + " to " +
                                 (p_max == JsonPattern::kUnbounded ? std::string("unbounded") : std::to_string(p_max));
        return fail(path, "minLength / maxLength beside 'pattern' (whose strings have " + have +
                              " characters): " + cut.message());
      }
      p = std::move(cut).value();
    }
    auto e = p.to_gbnf(kCharGroup);
    if (!e.ok()) return fail(path + "/pattern", "pattern '" + s["pattern"].get<std::string>().substr(0, 200) + "': " + e.message());
    return "\"\\\"\" " + *e + " \"\\\"\"";
  }

  Result<std::string> visit_string(const Json& s, const std::string& path) {
    LUMEN_ASSIGN_OR_RETURN(int64_t min_len, read_count(s, "minLength", path, 0));
    LUMEN_ASSIGN_OR_RETURN(int64_t max_len, read_count(s, "maxLength", path, -1));
    if (max_len >= 0 && max_len < min_len) return fail(path, "maxLength is below minLength");
    if (s.contains("pattern")) return visit_pattern(s, path, min_len, max_len);
    if (s.contains("format")) {
      if (!s["format"].is_string()) return fail(path + "/format", "must be a string");
      const std::string f = s["format"].get<std::string>();
      std::string body;
      int64_t len_lo = 0, len_hi = 0;  // lengths the format's texts can have
      const std::string date =
          "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | "
          "( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
          "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )";
      const std::string time =
          "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
          "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
      const std::string hex = "[0-9a-f]";
      if (f == "date") { body = date; len_lo = len_hi = 10; }
      else if (f == "time") { body = time; len_lo = 9; len_hi = 21; }
      else if (f == "date-time") { body = date + " \"T\" " + time; len_lo = 20; len_hi = 32; }
      else if (f == "uuid") {
        body = hex + "{8} \"-\" " + hex + "{4} \"-\" " + hex + "{4} \"-\" " + hex + "{4} \"-\" " + hex + "{12}";
        len_lo = len_hi = 36;
      } else if (f == "email") {
        body = "[a-zA-Z0-9_+-]{1,32} ( \".\" [a-zA-Z0-9_+-]{1,32} ){0,2} \"@\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,30} "
               "( \".\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,30} ){0,2} \".\" [a-zA-Z]{2,8}";
        len_lo = 6;
        len_hi = 32 * 3 + 2 + 1 + 31 * 3 + 2 + 1 + 8;
      } else if (f == "ipv4") {  // dotted decimal without leading zeros (Python's ipaddress refuses them)
        const std::string octet = "( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9] )";
        body = octet + " ( \".\" " + octet + " ){3}";
        len_lo = 7;
        len_hi = 15;
      } else if (f == "ipv6") {  // the full form: eight groups of 1-4 hex digits (no "::")
        body = "[0-9a-fA-F]{1,4} ( \":\" [0-9a-fA-F]{1,4} ){7}";
        len_lo = 15;
        len_hi = 39;
      } else if (f == "duration") {  // RFC 3339 appendix A's ABNF, up to 9 digits a number
        const std::string d = "[0-9]{1,9}";
        const std::string sec = d + " \"S\"";
        const std::string min = d + " \"M\" ( " + sec + " )?";
        const std::string hour = d + " \"H\" ( " + min + " )?";
        const std::string time = "\"T\" ( " + hour + " | " + min + " | " + sec + " )";
        const std::string month = d + " \"M\" ( " + d + " \"D\" )?";
        const std::string date = "( " + d + " \"D\" | " + month + " | " + d + " \"Y\" ( " + month + " )? ) ( " + time + " )?";
        body = "\"P\" ( " + date + " | " + time + " | " + d + " \"W\" )";
        len_lo = 3;
        len_hi = 1 + 3 * 10 + 1 + 3 * 10;
      } else if (f == "hostname" || f == "uri") {
        // Up to 4 labels of up to 50 letters, digits and inner hyphens (RFC 1123, within its
        // 253 characters); a URI is http / https / ftp, such a host, an optional path and query.
        const std::string label = "[a-zA-Z0-9] ( [a-zA-Z0-9-]{0,48} [a-zA-Z0-9] )?";
        const std::string host = label + " ( \".\" " + label + " ){0,3}";
        if (f == "hostname") {
          body = host;
          len_lo = 1;
          len_hi = 4 * 50 + 3;
        } else {
          body = "( \"http\" \"s\"? | \"ftp\" ) \"://\" " + host +
                 " ( \"/\" [a-zA-Z0-9._~/-]{0,64} )? ( \"?\" [a-zA-Z0-9._~=&-]{1,64} )?";
          len_lo = 7;
          len_hi = 8 + 4 * 50 + 3 + 65 + 65;
        }
      } else {
        return fail(path + "/format", "unsupported format '" + f.substr(0, 100) +
                                          "' (date, time, date-time, duration, uuid, email, ipv4, ipv6, hostname, uri)");
      }
      if (min_len > len_lo || (max_len >= 0 && max_len < len_hi))
        return fail(path, "minLength / maxLength together with format '" + f + "' are not supported");
      return "\"\\\"\" " + body + " \"\\\"\"";
    }
    std::string rep = "{" + std::to_string(min_len) + "," + (max_len >= 0 ? std::to_string(max_len) : "") + "}";
    if (min_len == 0 && max_len < 0) rep = "*";
    return "\"\\\"\" " + std::string(kCharGroup) + rep + " \"\\\"\"";
  }

  // The bound keywords of one side present in s (minimum / exclusiveMinimum when lower,
  // else maximum / exclusiveMaximum), each checked to be a number.
  struct BoundKey {
    const char* key;
    double value;
    bool exclusive;
  };
  Result<std::vector<BoundKey>> bound_keys(const Json& s, const std::string& path, bool lower) {
    static constexpr const char* kLower[] = {"minimum", "exclusiveMinimum"};
    static constexpr const char* kUpper[] = {"maximum", "exclusiveMaximum"};
    std::vector<BoundKey> out;
    for (const char* key : lower ? kLower : kUpper) {
      if (!s.contains(key)) continue;
      if (!s[key].is_number()) return fail(path + "/" + key, "must be a number");
      out.push_back({key, s[key].get<double>(), key[0] == 'e'});
    }
    return out;
  }

  // A bound as an integer: minimum -> ceil, maximum -> floor; exclusive ones one further.
  Result<std::optional<int64_t>> bound(const Json& s, const std::string& path, bool lower) {
    std::optional<int64_t> out;
    LUMEN_ASSIGN_OR_RETURN(std::vector<BoundKey> keys, bound_keys(s, path, lower));
    for (const auto& [key, d, exclusive] : keys) {
      if (!std::isfinite(d) || std::fabs(d) > 1e15) return fail(path + "/" + key, "out of the supported range (|x| <= 1e15)");
      int64_t b;
      if (lower) b = exclusive ? static_cast<int64_t>(std::floor(d)) + 1 : static_cast<int64_t>(std::ceil(d));
      else b = exclusive ? static_cast<int64_t>(std::ceil(d)) - 1 : static_cast<int64_t>(std::floor(d));
      if (!out || (lower ? b > *out : b < *out)) out = b;
    }
    return out;
  }

  // The tighter of minimum / exclusiveMinimum (lower) or maximum / exclusiveMaximum, as an
  // exact decimal. An inclusive bound is the shortest decimal of its double (see
  // shortest_decimal). An exclusive one moves to the midpoint between its double and the
  // next double inward (inclusive when that midpoint reads back as the next double): a text
  // beyond it is beyond the bound whether a validator compares decimals or doubles
  // (99.9999999999999999 reads as 100.0, which is not below an exclusiveMaximum of 100).
  Result<std::optional<NumBound>> number_bound(const Json& s, const std::string& path, bool lower) {
    std::optional<NumBound> out;
    LUMEN_ASSIGN_OR_RETURN(std::vector<BoundKey> keys, bound_keys(s, path, lower));
    for (const auto& [key, d, exclusive] : keys) {
      if (!std::isfinite(d)) return fail(path + "/" + key, "must be a finite number");
      NumBound b;
      const double next = std::nextafter(d, lower ? std::numeric_limits<double>::infinity()
                                                  : -std::numeric_limits<double>::infinity());
      if (!exclusive) {
        b.value = shortest_decimal(d);
      } else if (!std::isfinite(next)) {  // +-DBL_MAX: no double lies beyond
        b = {shortest_decimal(d), true};
      } else {
        const long double mid = (static_cast<long double>(d) + static_cast<long double>(next)) / 2;  // exact
        b = {exact_decimal(mid), static_cast<double>(mid) == d};
      }
      const int c = out ? compare(b.value, out->value) : 0;
      if (!out || (lower ? c > 0 : c < 0) || (c == 0 && b.strict)) out = b;
    }
    return out;
  }

  // Numbers within the bounds: exact (see number_range_any_form).
  Result<std::string> visit_number(const Json& s, const std::string& path) {
    if (s.contains("multipleOf")) return visit_integer(s, path);  // multiples of an integer are integers
    LUMEN_ASSIGN_OR_RETURN(std::optional<NumBound> lo, number_bound(s, path, true));
    LUMEN_ASSIGN_OR_RETURN(std::optional<NumBound> hi, number_bound(s, path, false));
    if (!lo && !hi) return std::string("json-number");
    std::string bounds;  // "minimum 0.8, maximum 0.2"
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"})
      if (s.contains(key)) bounds += std::string(bounds.empty() ? "" : ", ") + key + " " + json_text(s[key]);
    if (lo && hi) {
      const int c = compare(lo->value, hi->value);
      if (c > 0 || (c == 0 && (lo->strict || hi->strict)))
        return fail(path, "no number lies within " + bounds + " (the lower bound is not below the upper one)");
    }
    std::string out = number_range_any_form(lo, hi);
    if (out.empty())
      return fail(path, "no number lies within " + bounds + " that has at most " + std::to_string(kMaxDigits) +
                            " integer and " + std::to_string(kMaxFracDigits) + " fraction digits and a " +
                            std::to_string(kMaxExpDigits) + "-digit exponent");
    return out;
  }

  // multipleOf as an integer k (1 when absent). Integers only: a validator dividing doubles
  // disagrees with exact decimals (python3-jsonschema: 0.07 / 0.01 = 7.000000000000001, not a
  // multiple), so a fractional one is an error rather than a grammar some validators refuse.
  Result<uint64_t> multiple_of(const Json& s, const std::string& path) {
    if (!s.contains("multipleOf")) return uint64_t{1};
    const Json& x = s["multipleOf"];
    const std::string where = path + "/multipleOf";
    if (!x.is_number() || !(x.get<double>() > 0)) return fail(where, "must be a number above 0");
    const double d = x.get<double>();
    if (std::floor(d) != d)
      return fail(where, "only an integer multipleOf is supported (validators that divide doubles disagree on "
                         "fractional ones: 0.07 / 0.01 = 7.000000000000001)");
    if (d > static_cast<double>(kMaxMultipleOf))
      return fail(where, "above " + std::to_string(kMaxMultipleOf) + " is not supported");
    const auto k = static_cast<uint64_t>(d);
    uint64_t odd = k;  // the factor prime to 10: the grammar has about kMaxDigits rules per residue of it
    while (odd % 2 == 0) odd /= 2;
    while (odd % 5 == 0) odd /= 5;
    if (odd > kMaxMultipleOfPrimeTo10)
      return fail(where, std::to_string(k) + " is not supported (its factor prime to 10, " + std::to_string(odd) +
                             ", is above " + std::to_string(kMaxMultipleOfPrimeTo10) + ")");
    return k;
  }

  // 10^n mod k.
  static uint64_t pow10_mod(int n, uint64_t k) {
    uint64_t p = 1 % k;
    for (int i = 0; i < n; ++i) p = p * 10 % k;
    return p;
  }

  // Strings of n digits (leading zeros allowed) whose value is t mod k: one rule per
  // (k, n, t), shared. "" is the empty string, nullopt none.
  Result<std::optional<std::string>> digits_mod(uint64_t k, int n, uint64_t t) {
    if (n == 0) return t == 0 ? std::optional<std::string>("") : std::nullopt;
    const std::string key = std::to_string(k) + "-" + std::to_string(n) + "-" + std::to_string(t);
    if (auto it = multiple_rules_.find(key); it != multiple_rules_.end()) return it->second;
    const uint64_t p = pow10_mod(n - 1, k);
    std::map<uint64_t, std::string> by_rest;  // what the other n - 1 digits must be, mod k -> first digits
    for (uint64_t d = 0; d <= 9; ++d) by_rest[(t + k - d * p % k) % k] += static_cast<char>('0' + d);
    std::vector<std::string> alts;
    for (const auto& [rest, ds] : by_rest) {
      LUMEN_ASSIGN_OR_RETURN(std::optional<std::string> sub, digits_mod(k, n - 1, rest));
      if (!sub) continue;
      const std::string cls = ds.size() == 1 ? "\"" + ds + "\"" : "[" + ds + "]";
      alts.push_back(sub->empty() ? cls : cls + " " + *sub);
    }
    std::optional<std::string> out;
    if (!alts.empty()) {
      LUMEN_ASSIGN_OR_RETURN(out, add_rule("mod-" + key, alts.size() == 1 ? alts[0] : group(alts)));
    }
    multiple_rules_.emplace(key, out);
    return out;
  }

  // After a prefix of residue r (mod k), the digits [i, size) of a string s with lo <= s <=
  // hi (both of that size) that make s a multiple of k; s's digits before i equal lo's
  // (tight_lo) and hi's (tight_hi).
  Result<std::optional<std::string>> multiples_between(const std::string& lo, const std::string& hi, uint64_t k,
                                                       size_t i, bool tight_lo, bool tight_hi, uint64_t r) {
    const int n_left = static_cast<int>(lo.size() - i);
    tight_lo = tight_lo && lo.find_first_not_of('0', i) != std::string::npos;  // zeros to go: any tail is above
    tight_hi = tight_hi && hi.find_first_not_of('9', i) != std::string::npos;
    auto free_tail = [&](uint64_t prefix, int n) {  // the n digits after a prefix of residue `prefix`
      return digits_mod(k, n, (k - prefix * pow10_mod(n, k) % k) % k);
    };
    if (!tight_lo && !tight_hi) return free_tail(r, n_left);
    const int d_lo = tight_lo ? lo[i] - '0' : 0, d_hi = tight_hi ? hi[i] - '0' : 9;
    std::map<uint64_t, std::string> free_by_next;  // digits strictly inside, by the residue they lead to
    std::vector<std::string> alts;
    for (int d = d_lo; d <= d_hi; ++d) {
      const uint64_t next = (10 * r + static_cast<uint64_t>(d)) % k;
      const bool tl = tight_lo && d == d_lo, th = tight_hi && d == d_hi;
      if (!tl && !th) {
        free_by_next[next] += static_cast<char>('0' + d);
        continue;
      }
      LUMEN_ASSIGN_OR_RETURN(std::optional<std::string> sub, multiples_between(lo, hi, k, i + 1, tl, th, next));
      if (!sub) continue;
      alts.push_back("\"" + std::string(1, static_cast<char>('0' + d)) + "\"" + (sub->empty() ? "" : " " + *sub));
    }
    for (const auto& [next, ds] : free_by_next) {
      LUMEN_ASSIGN_OR_RETURN(std::optional<std::string> sub, free_tail(next, n_left - 1));
      if (!sub) continue;
      const std::string cls = ds.size() == 1 ? "\"" + ds + "\"" : "[" + ds + "]";
      alts.push_back(sub->empty() ? cls : cls + " " + *sub);
    }
    if (alts.empty()) return std::optional<std::string>();
    return std::optional<std::string>(alts.size() == 1 ? alts[0] : group(alts));
  }

  // Non-negative integers in [lo, hi] (hi absent: up to kMaxDigits digits) that are
  // multiples of k, without leading zeros; "" when there is none.
  Result<std::string> nonneg_multiples(uint64_t lo, std::optional<uint64_t> hi, uint64_t k) {
    if (k == 1) return hi && *hi < lo ? std::string() : nonneg_range(lo, hi);
    const std::string slo = std::to_string(lo);
    const size_t max_len = hi ? std::to_string(*hi).size() : static_cast<size_t>(kMaxDigits);
    std::vector<std::string> alts;
    for (size_t len = slo.size(); len <= max_len; ++len) {
      const std::string a = len == slo.size() ? slo : "1" + std::string(len - 1, '0');
      const std::string b = hi && len == max_len ? std::to_string(*hi) : std::string(len, '9');
      if (a > b) continue;
      LUMEN_ASSIGN_OR_RETURN(std::optional<std::string> m, multiples_between(a, b, k, 0, true, true, 0));
      if (m && !m->empty()) alts.push_back(*m);
    }
    if (alts.empty()) return std::string();
    return alts.size() == 1 ? alts[0] : group(alts);
  }

  // Integers within the bounds (rounded inward), multiples of multipleOf. Also numbers
  // with an integer multipleOf: their multiples are integers.
  Result<std::string> visit_integer(const Json& s, const std::string& path) {
    LUMEN_ASSIGN_OR_RETURN(std::optional<int64_t> lo, bound(s, path, true));
    LUMEN_ASSIGN_OR_RETURN(std::optional<int64_t> hi, bound(s, path, false));
    LUMEN_ASSIGN_OR_RETURN(uint64_t k, multiple_of(s, path));
    if (!lo && !hi && k == 1) return std::string("json-int");
    if (lo && hi && *lo > *hi) return fail(path, "no integer lies within minimum / maximum");
    std::vector<std::string> alts;
    if (!hi || *hi >= 0) {
      const int64_t a = lo ? std::max<int64_t>(*lo, 0) : 0;
      LUMEN_ASSIGN_OR_RETURN(
          std::string m,
          nonneg_multiples(static_cast<uint64_t>(a),
                           hi ? std::optional<uint64_t>(static_cast<uint64_t>(*hi)) : std::nullopt, k));
      if (!m.empty()) alts.push_back(m);
    }
    if (!lo || *lo < 0) {
      // negative values: -x with x >= max(1, -hi) and x <= -lo
      const int64_t x_lo = hi && *hi < 0 ? -*hi : 1;
      std::optional<int64_t> x_hi;
      if (lo) x_hi = -*lo;
      if (!x_hi || *x_hi >= x_lo) {
        LUMEN_ASSIGN_OR_RETURN(
            std::string m,
            nonneg_multiples(static_cast<uint64_t>(x_lo),
                             x_hi ? std::optional<uint64_t>(static_cast<uint64_t>(*x_hi)) : std::nullopt, k));
        if (!m.empty()) alts.push_back("\"-\" " + m);
      }
    }
    if (alts.empty()) return fail(path, "no multiple of " + std::to_string(k) + " lies within minimum / maximum");
    return group(alts);
  }

  // A key that is none of `names`: characters that need no escape, walked along a trie of
  // the names so the text can never spell one of them.
  Result<std::string> other_key(const std::vector<std::string>& names, const std::string& hint) {
    struct Node {
      std::map<uint32_t, int> next;
      bool end = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& n : names) {
      int cur = 0;
      bool plain = true;
      std::vector<uint32_t> cps;
      for (size_t i = 0; i < n.size();) {  // decode UTF-8 (the names come from valid JSON)
        const auto b = static_cast<unsigned char>(n[i]);
        int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        uint32_t cp = len == 1 ? b : b & (0x3F >> (len - 1));
        for (int k = 1; k < len && i + k < n.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(n[i + k]) & 0x3F);
        if (cp < 0x20 || cp == '"' || cp == '\\') plain = false;
        cps.push_back(cp);
        i += static_cast<size_t>(len);
      }
      if (!plain) continue;  // other keys never use escapes, so cannot equal this one
      for (uint32_t cp : cps) {
        auto it = trie[static_cast<size_t>(cur)].next.find(cp);
        if (it == trie[static_cast<size_t>(cur)].next.end()) {
          trie.emplace_back();
          trie[static_cast<size_t>(cur)].next[cp] = static_cast<int>(trie.size()) - 1;
          cur = static_cast<int>(trie.size()) - 1;
        } else {
          cur = it->second;
        }
      }
      trie[static_cast<size_t>(cur)].end = true;
    }
    const std::string free_tail = "[^\"\\\\\\x00-\\x1F]*";
    // One rule per trie node, deepest first.
    std::vector<std::string> node_rule(trie.size());
    for (size_t k = trie.size(); k-- > 0;) {
      const Node& nd = trie[k];
      std::string cls = "[^\"\\\\\\x00-\\x1F";
      for (const auto& [cp, child] : nd.next) {
        char buf[16];
        std::snprintf(buf, sizeof buf, cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", cp);
        cls += buf;
      }
      cls += "]";
      std::string body = cls + " " + free_tail;
      for (const auto& [cp, child] : nd.next) {
        char buf[16];
        std::snprintf(buf, sizeof buf, cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", cp);
        body += std::string(" | \"") + buf + "\" " + node_rule[static_cast<size_t>(child)];
      }
      if (!nd.end) body = "( " + body + " )?";
      LUMEN_ASSIGN_OR_RETURN(node_rule[k], add_rule(hint + "-key", body));
    }
    return "\"\\\"\" " + node_rule[0] + " \"\\\"\"";
  }

  Result<std::string> visit_object(const Json& s, const std::string& path, const std::string& hint, int depth) {
    std::vector<std::pair<std::string, bool>> kvs;  // (rule, required)
    std::vector<std::string> names;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return fail(path + "/required", "must be an array of strings");
      for (const Json& r : s["required"]) {
        if (!r.is_string()) return fail(path + "/required", "must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    Json props = s.contains("properties") ? s["properties"] : Json::object();
    if (!props.is_object()) return fail(path + "/properties", "must be an object");
    // Required but not among the properties: a value under additionalProperties (any value
    // when that is absent); additionalProperties false admits no such key.
    const bool closed = s.contains("additionalProperties") && s["additionalProperties"].is_boolean() &&
                        !s["additionalProperties"].get<bool>();
    for (const Json& r : s.contains("required") ? s["required"] : Json::array()) {
      const std::string& name = r.get_ref<const std::string&>();
      if (props.contains(name)) continue;
      if (closed)
        return fail(path + "/required", "'" + name.substr(0, 100) +
                                            "' is required but not in properties, and additionalProperties is false");
      props[name] = s.contains("additionalProperties") ? s["additionalProperties"] : Json(true);
    }
    for (auto it = props.begin(); it != props.end(); ++it) {
      const std::string ppath = path + "/properties/" + pointer_escape(it.key());
      LUMEN_ASSIGN_OR_RETURN(std::string value, visit(it.value(), ppath, hint + "-" + it.key(), depth + 1));
      LUMEN_ASSIGN_OR_RETURN(std::string kv, add_rule(hint + "-" + it.key() + "-kv",
                                                      gbnf_literal(json_text(Json(it.key()))) + " ws \":\" ws " + value));
      kvs.emplace_back(kv, required.count(it.key()) > 0);
      names.push_back(it.key());
    }
    std::string extra;  // one additional key-value, if they are allowed
    if (s.contains("additionalProperties")) {
      const Json& ap = s["additionalProperties"];
      if (!(ap.is_boolean() && !ap.get<bool>())) {
        LUMEN_ASSIGN_OR_RETURN(std::string value, visit(ap, path + "/additionalProperties", hint + "-extra", depth + 1));
        LUMEN_ASSIGN_OR_RETURN(std::string key, other_key(names, hint));
        LUMEN_ASSIGN_OR_RETURN(extra, add_rule(hint + "-extra-kv", key + " ws \":\" ws " + value));
      }
    }
    const std::string sep = " ws \",\" ws ";
    const auto n = static_cast<int>(kvs.size());
    int first_req = -1;
    for (int i = 0; i < n; ++i)
      if (kvs[static_cast<size_t>(i)].second) {
        first_req = i;
        break;
      }
    std::string members;       // the declared part
    bool members_empty_ok = false;
    if (first_req >= 0) {
      for (int i = 0; i < first_req; ++i) members += "( " + kvs[static_cast<size_t>(i)].first + sep + ")? ";
      members += kvs[static_cast<size_t>(first_req)].first;
      for (int i = first_req + 1; i < n; ++i) {
        const auto& [kv, req] = kvs[static_cast<size_t>(i)];
        members += req ? sep + kv : " (" + sep + kv + " )?";
      }
    } else if (n > 0) {
      // All optional: the first present one, then each later one or not (tails shared).
      std::vector<std::string> tail(static_cast<size_t>(n) + 1);
      for (int i = n - 1; i >= 0; --i) {
        const std::string body = "(" + sep + kvs[static_cast<size_t>(i)].first + " )?" +
                                 (tail[static_cast<size_t>(i) + 1].empty() ? "" : " " + tail[static_cast<size_t>(i) + 1]);
        if (i > 0) { LUMEN_ASSIGN_OR_RETURN(tail[static_cast<size_t>(i)], add_rule(hint + "-rest", body)); }
      }
      members = "(";
      for (int i = 0; i < n; ++i)
        members += std::string(i ? " | " : " ") + kvs[static_cast<size_t>(i)].first +
                   (tail[static_cast<size_t>(i) + 1].empty() ? "" : " " + tail[static_cast<size_t>(i) + 1]);
      members += " )";
      members_empty_ok = true;
    } else {
      members_empty_ok = true;
    }
    std::string inside;
    if (extra.empty()) {
      inside = members.empty() ? "" : (members_empty_ok ? "( " + members + " )?" : members);
    } else {
      const std::string extras = "(" + sep + extra + " )*";
      if (!members_empty_ok) inside = members + " " + extras;
      else if (members.empty()) inside = "( " + extra + " " + extras + " )?";
      else inside = "( " + members + " " + extras + " | " + extra + " " + extras + " )?";
    }
    return "\"{\" ws " + (inside.empty() ? "" : inside + " ") + "ws \"}\"";
  }

  Result<std::string> visit_array(const Json& s, const std::string& path, const std::string& hint, int depth) {
    LUMEN_ASSIGN_OR_RETURN(int64_t min_items, read_count(s, "minItems", path, 0));
    LUMEN_ASSIGN_OR_RETURN(int64_t max_items, read_count(s, "maxItems", path, -1));
    if (max_items >= 0 && max_items < min_items) return fail(path, "maxItems is below minItems");
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      const Json& p = s["prefixItems"];
      if (!p.is_array()) return fail(path + "/prefixItems", "must be an array of schemas");
      for (size_t i = 0; i < p.size(); ++i) {
        LUMEN_ASSIGN_OR_RETURN(std::string e, visit(p[i], path + "/prefixItems/" + std::to_string(i),
                                                    hint + "-" + std::to_string(i), depth + 1));
        prefix.push_back(e);
      }
    }
    std::string item;  // empty: no items beyond the prefix
    if (!s.contains("items")) {
      item = any();
    } else if (s["items"].is_array()) {
      return fail(path + "/items", "an array of schemas (draft 4 tuples) is not supported; use prefixItems");
    } else if (!(s["items"].is_boolean() && !s["items"].get<bool>())) {
      LUMEN_ASSIGN_OR_RETURN(item, visit(s["items"], path + "/items", hint + "-item", depth + 1));
    }
    const auto k = static_cast<int64_t>(prefix.size());
    if (item.empty()) max_items = max_items < 0 ? k : std::min(max_items, k);
    if (max_items >= 0 && min_items > max_items) return fail(path, "minItems cannot be met with these items");
    const std::string sep = " ws \",\" ws ";
    // The elements after the prefix: ( "," item ){lo,hi}.
    auto tail = [&](int64_t done) -> std::string {
      if (item.empty()) return "";
      const int64_t lo = std::max<int64_t>(0, min_items - done);
      const int64_t hi = max_items < 0 ? -1 : max_items - done;
      if (hi == 0) return "";
      return " (" + sep + item + " ){" + std::to_string(lo) + "," + (hi < 0 ? "" : std::to_string(hi)) + "}";
    };
    std::string list;
    if (k == 0) {
      if (max_items == 0 || item.empty()) {
        list = "";
      } else {
        const int64_t lo = std::max<int64_t>(0, min_items - 1);
        const int64_t hi = max_items < 0 ? -1 : max_items - 1;
        list = item + (hi == 0 ? "" : " (" + sep + item + " ){" + std::to_string(lo) + "," + (hi < 0 ? "" : std::to_string(hi)) + "}");
        if (min_items == 0) list = "( " + list + " )?";
      }
    } else {
      // prefix[i] ( "," prefix[i+1] ... )?, the first min_items mandatory.
      const int64_t n_prefix = max_items < 0 ? k : std::min(k, max_items);
      std::string inner = tail(n_prefix);
      for (int64_t i = n_prefix - 1; i >= 0; --i) {
        std::string here = prefix[static_cast<size_t>(i)] + inner;
        if (i == 0) {
          inner = min_items >= 1 ? here : "( " + here + " )?";
        } else {
          inner = i < min_items ? sep + here : " (" + sep + here + " )?";
        }
      }
      list = n_prefix == 0 ? "" : inner;
    }
    return "\"[\" ws " + (list.empty() ? "" : list + " ") + "ws \"]\"";
  }

  const Json& root_;
  JsonSchemaLimits limits_;
  const std::string prefix_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> used_;
  std::map<std::string, std::string> refs_;
  std::map<std::string, std::optional<std::string>> multiple_rules_;  // digits_mod's, by "k-n-t"
  bool need_any_ = false;
};

}  // namespace

namespace {

Result<std::string> convert(std::string_view schema_json, const JsonSchemaLimits& limits, std::string prefix) {
  if (schema_json.size() > limits.max_schema_bytes)
    return error("json_schema: " + std::to_string(schema_json.size()) + " bytes, over the limit of " +
                 std::to_string(limits.max_schema_bytes));
  if (!gguf::json_depth_within(schema_json, 2 * limits.max_depth))
    return error("json_schema: nested deeper than " + std::to_string(2 * limits.max_depth) + " levels");
  try {
    auto schema = gguf::parse_ordered_json(schema_json);  // linear in the text, keeps the order
    if (!schema.ok()) return error("json_schema: " + schema.message());
    Converter c(*schema, limits, std::move(prefix));
    return c.run();
  } catch (const std::exception& e) {
    return error(std::string("json_schema: cannot be converted: ") + e.what());
  }
}

}  // namespace

Result<std::string> json_schema_to_gbnf(std::string_view schema_json, const JsonSchemaLimits& limits) {
  return convert(schema_json, limits, {});
}

Result<std::string> json_schema_to_gbnf_rule(std::string_view schema_json, std::string_view name,
                                             const JsonSchemaLimits& limits) {
  const bool name_ok = !name.empty() && name.size() <= 64 &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                         return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
                       }) &&
                       name != "root" && name != "ws" && !name.starts_with("json") && !name.starts_with("s-");
  LUMEN_CHECK_MSG(name_ok, "json_schema_to_gbnf_rule: the rule name must be [a-z0-9-]+ and not a reserved one");
  return convert(schema_json, limits, std::string(name));
}

std::string any_json_gbnf(bool object_only) {
  return std::string("root ::= ") + (object_only ? "json-any-object" : "json-any") + "\n" + kBaseRules +
         Converter::any_rules();
}

}  // namespace lumen::grammar
