// Command-line parsing for the `lumen` subcommands. Every bad flag or value gives an error
// that names the flag and the value; nothing aborts.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace lumen::cli {

struct OptionSpec {
  std::vector<std::string> names;  // e.g. {"-m", "--model"}
  std::string value_name;          // "" for a boolean flag, else e.g. "PATH"
  std::string help;
  bool repeatable = false;  // every value is kept (get_all); otherwise the last one wins
};

class ArgParser {
 public:
  ArgParser(std::string command, std::string usage, std::vector<OptionSpec> specs);

  // Parses argv[first..argc). Positional arguments are collected in order.
  Status parse(int argc, char** argv, int first);

  bool has(const std::string& name) const;  // any alias of the option
  std::optional<std::string> get(const std::string& name) const;  // last value given
  std::vector<std::string> get_all(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& fallback) const;
  Result<int64_t> get_int(const std::string& name, int64_t fallback, int64_t min_value,
                          int64_t max_value) const;
  Result<double> get_float(const std::string& name, double fallback, double min_value,
                           double max_value) const;
  const std::vector<std::string>& positional() const { return positional_; }
  bool help_requested() const { return help_; }
  std::string help_text() const;

 private:
  const OptionSpec* find_spec(const std::string& name) const;
  std::string canonical(const std::string& name) const;

  std::string command_;
  std::string usage_;
  std::vector<OptionSpec> specs_;
  std::map<std::string, std::vector<std::string>> values_;  // canonical name -> values
  std::vector<std::string> positional_;
  bool help_ = false;
};

// Parses sizes like "2GiB", "512MiB", "1000000", "1.5G" (G/GB = 10^9, GiB = 2^30).
Result<int64_t> parse_bytes(const std::string& text);

}  // namespace lumen::cli
