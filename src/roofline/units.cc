#include "roofline/units.h"

#include <cmath>
#include <cstdio>

namespace lumen::roofline {

std::string_view units_name(Units units) { return units == Units::kBinary ? "binary" : "si"; }

Result<Units> parse_units(std::string_view text, std::string_view flag) {
  if (text == "si") return Units::kSi;
  if (text == "binary") return Units::kBinary;
  return error(std::string(flag) + ": unknown units '" + std::string(text) + "' (binary or si)");
}

double unit_scale(Units units, int power) {
  const double base = units == Units::kBinary ? 1024.0 : 1000.0;
  double v = 1.0;
  for (int i = 0; i < power; ++i) v *= base;
  return v;
}

std::string units_legend(Units units) {
  return units == Units::kBinary
             ? "binary: K = 2^10, M = 2^20, G = B = 2^30, T = 2^40 (also for bandwidth and FLOP/s)"
             : "si: K = 10^3, M = 10^6, G = B = 10^9, T = 10^12";
}

namespace {

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Largest power in [0, max_power] at which |v| / scale >= threshold.
int pick_power(double v, Units units, int max_power, double threshold) {
  int power = 0;
  for (int p = 1; p <= max_power; ++p)
    if (std::fabs(v) / unit_scale(units, p) >= threshold) power = p;
  return power;
}

std::string bytes_unit(Units units, int power) {
  static constexpr const char* kSi[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  static constexpr const char* kBin[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  return units == Units::kBinary ? kBin[power] : kSi[power];
}

}  // namespace

std::string format_bytes(double bytes, Units units, int decimals) {
  const int p = pick_power(bytes, units, 5, 1.0);
  return fixed(bytes / unit_scale(units, p), p == 0 ? 0 : decimals) + " " + bytes_unit(units, p);
}

std::string format_bandwidth(double bytes_per_s, Units units, int decimals) {
  // GB/s at most: bandwidths are quoted that way ("3350 GB/s"), even past a TB/s.
  const int p = pick_power(bytes_per_s, units, 3, 1.0);
  return fixed(bytes_per_s / unit_scale(units, p), decimals) + " " + bytes_unit(units, p) + "/s";
}

std::string format_rate(double per_s, Units units, std::string_view what, int decimals) {
  static constexpr const char* kPrefix[] = {"", "K", "M", "G", "T", "P"};
  const int p = pick_power(per_s, units, 5, 1.0);
  return fixed(per_s / unit_scale(units, p), decimals) + " " + kPrefix[p] + std::string(what) + "/s";
}

std::string format_count(double n, Units units, int decimals) {
  static constexpr const char* kPrefix[] = {"", "K", "M", "B", "T"};
  if (std::fabs(n) < 100) return fixed(n, std::floor(n) == n ? 0 : decimals);
  const int p = pick_power(n, units, 4, 0.1);
  return fixed(n / unit_scale(units, p), p == 0 ? 0 : decimals) + (p == 0 ? "" : std::string(" ") + kPrefix[p]);
}

std::string format_count_at(double n, Units units, int power, int max_decimals) {
  static constexpr const char* kPrefix[] = {"", "K", "M", "B", "T"};
  std::string s = fixed(n / unit_scale(units, power), max_decimals);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return power == 0 ? s : s + " " + kPrefix[power];
}

std::string format_grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string format_ms(double ms) {
  const int decimals = ms >= 100 ? 0 : ms >= 10 ? 1 : ms >= 1 ? 2 : 3;
  return fixed(ms, decimals) + " ms";
}

}  // namespace lumen::roofline
