// Unit conventions for the roofline planner's input figures and output.
//
//   si      K = 10^3,  M = 10^6,  G = B = 10^9,  T = 10^12   (bytes printed KB, MB, GB)
//   binary  K = 2^10,  M = 2^20,  G = B = 2^30,  T = 2^40    (bytes printed KiB, MiB, GiB)
//
// The convention applies to every prefix, both ways: a preset's published figure is read
// in it ("1008 GB/s" is 1008 x 2^30 bytes/s in binary, as many published tables compute)
// and every figure printed uses it (0.29 B parameters for Qwen1.5-0.5B's decoder in binary).
// Measured figures are taken in base units (bytes/s, FLOP/s) and only printed in it.
// Internally everything is in base units: bytes, bytes/s, FLOP/s, seconds.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace lumen::roofline {

enum class Units : uint8_t { kSi, kBinary };

std::string_view units_name(Units units);  // "si" | "binary"
// Error names `flag` and the value.
Result<Units> parse_units(std::string_view text, std::string_view flag = "--units");

// The multiplier of prefix power p (1 = K, 2 = M, 3 = G/B, 4 = T): 1000^p or 1024^p.
double unit_scale(Units units, int power);
// One line that says what the prefixes mean, for human output.
std::string units_legend(Units units);

// Human formatting; `decimals` digits after the point.
//   format_bytes(1.5 * 2^30, binary) == "1.50 GiB",  format_bytes(1.5e9, si) == "1.50 GB"
std::string format_bytes(double bytes, Units units, int decimals = 2);
// "1008.00 GB/s" (si) / "1008.00 GiB/s" (binary); never TB/s, as bandwidths are quoted.
std::string format_bandwidth(double bytes_per_s, Units units, int decimals = 2);
// FLOP/s with an auto prefix: "82.58 TFLOP/s"; `what` replaces "FLOP" (e.g. "OP").
std::string format_rate(double per_s, Units units, std::string_view what = "FLOP", int decimals = 2);
// Counts with K / M / B / T: the largest prefix at which the value is >= 0.1
// ("0.29 B", "101.25 M", "48.00 K"), or the plain number below 100.
std::string format_count(double n, Units units, int decimals = 2);
// A count at a fixed prefix power, trailing zeros trimmed: (49152, binary, 2) -> "0.046875 M".
std::string format_count_at(double n, Units units, int power, int max_decimals = 6);
// 1234567 -> "1,234,567".
std::string format_grouped(int64_t n);
// Milliseconds with 3 significant digits at least: "0.862 ms", "12.4 ms", "1534 ms".
std::string format_ms(double ms);

}  // namespace lumen::roofline
