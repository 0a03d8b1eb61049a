#include "cli/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace lumen::cli {

ArgParser::ArgParser(std::string command, std::string usage, std::vector<OptionSpec> specs)
    : command_(std::move(command)), usage_(std::move(usage)), specs_(std::move(specs)) {}

const OptionSpec* ArgParser::find_spec(const std::string& name) const {
  for (const OptionSpec& s : specs_)
    for (const std::string& n : s.names)
      if (n == name) return &s;
  return nullptr;
}

std::string ArgParser::canonical(const std::string& name) const {
  const OptionSpec* s = find_spec(name);
  return s ? s->names.back() : name;
}

Status ArgParser::parse(int argc, char** argv, int first) {
  bool only_positional = false;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (only_positional || arg.size() < 2 || arg[0] != '-' ||
        (arg.size() > 1 && (std::isdigit(static_cast<unsigned char>(arg[1])) || arg[1] == '.'))) {
      positional_.push_back(arg);
      continue;
    }
    if (arg == "--") {
      only_positional = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      help_ = true;
      continue;
    }
    std::string value;
    bool has_inline_value = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_inline_value = true;
    }
    const OptionSpec* spec = find_spec(arg);
    if (!spec) return error("lumen " + command_ + ": unknown option '" + arg + "' (see lumen " + command_ + " --help)");
    const std::string key = spec->names.back();
    if (spec->value_name.empty()) {
      if (has_inline_value) return error("lumen " + command_ + ": option '" + arg + "' takes no value");
      values_[key].push_back("1");
      continue;
    }
    if (!has_inline_value) {
      if (i + 1 >= argc) return error("lumen " + command_ + ": option '" + arg + "' needs a value (" + spec->value_name + ")");
      value = argv[++i];
    }
    // As in llama.cpp, a scalar flag given twice (`-n 8 --n-predict 16`) takes the last value.
    if (!spec->repeatable) values_[key].clear();
    values_[key].push_back(value);
  }
  return Status();
}

bool ArgParser::has(const std::string& name) const { return values_.count(canonical(name)) > 0; }

std::optional<std::string> ArgParser::get(const std::string& name) const {
  auto it = values_.find(canonical(name));
  if (it == values_.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

std::vector<std::string> ArgParser::get_all(const std::string& name) const {
  auto it = values_.find(canonical(name));
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

std::string ArgParser::get_or(const std::string& name, const std::string& fallback) const {
  return get(name).value_or(fallback);
}

Result<int64_t> ArgParser::get_int(const std::string& name, int64_t fallback, int64_t min_value,
                                   int64_t max_value) const {
  std::optional<std::string> v = get(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno == ERANGE)
    return error("lumen " + command_ + ": " + name + " expects an integer, got '" + *v + "'");
  if (x < min_value || x > max_value)
    return error("lumen " + command_ + ": " + name + " = " + *v + " is out of range [" +
                 std::to_string(min_value) + ", " + std::to_string(max_value) + "]");
  return static_cast<int64_t>(x);
}

Result<double> ArgParser::get_float(const std::string& name, double fallback, double min_value,
                                    double max_value) const {
  std::optional<std::string> v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || !std::isfinite(x))
    return error("lumen " + command_ + ": " + name + " expects a number, got '" + *v + "'");
  if (x < min_value || x > max_value)
    return error("lumen " + command_ + ": " + name + " = " + *v + " is out of range [" +
                 std::to_string(min_value) + ", " + std::to_string(max_value) + "]");
  return x;
}

std::string ArgParser::help_text() const {
  std::string s = "usage: " + usage_ + "\n\noptions:\n";
  for (const OptionSpec& spec : specs_) {
    std::string names;
    for (const std::string& n : spec.names) names += (names.empty() ? "" : ", ") + n;
    if (!spec.value_name.empty()) names += " " + spec.value_name;
    s += "  " + names;
    s += names.size() < 30 ? std::string(30 - names.size(), ' ') : std::string("\n") + std::string(32, ' ');
    s += spec.help + "\n";
  }
  return s;
}

Result<int64_t> parse_bytes(const std::string& text) {
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || !std::isfinite(x) || x < 0)
    return error("invalid size '" + text + "' (examples: 2GiB, 512MiB, 1000000)");
  std::string unit(end);
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB") mult = 1e3;
  else if (unit == "M" || unit == "MB") mult = 1e6;
  else if (unit == "G" || unit == "GB") mult = 1e9;
  else if (unit == "KiB") mult = 1024.0;
  else if (unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "TiB") mult = 1024.0 * 1024 * 1024 * 1024;
  else return error("invalid size unit '" + unit + "' in '" + text + "' (B, KiB, MiB, GiB, K, M, G)");
  const double bytes = x * mult;
  if (bytes > 9e18) return error("size '" + text + "' is too large");
  return static_cast<int64_t>(bytes);
}

}  // namespace lumen::cli
