#include "roofline/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string_view>
#include <vector>

namespace lumen::roofline {

namespace {

constexpr double kWidth = 1200, kHeight = 800;
constexpr const char* kPrefillColor = "#1f6fb4";
constexpr const char* kDecodeColor = "#c8372d";
constexpr const char* kRoofColor = "#222222";
constexpr const char* kLineColors[] = {"#1f6fb4", "#2ca02c", "#9467bd", "#ff7f0e", "#c8372d", "#17becf"};

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

class Svg {
 public:
  void raw(const std::string& s) { out_ += s; }
  void line(double x1, double y1, double x2, double y2, const char* color, double width,
            const char* dash = nullptr) {
    out_ += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) +
            "\" stroke=\"" + color + "\" stroke-width=\"" + num(width) + "\"" +
            (dash ? std::string(" stroke-dasharray=\"") + dash + "\"" : "") + "/>\n";
  }
  void text(double x, double y, const std::string& s, const char* anchor = "start", int size = 13,
            const char* color = "#222", const char* weight = "normal", double rotate_deg = 0) {
    // weight "halo": normal text with a white outline under it, legible over lines.
    const bool halo = std::string_view(weight) == "halo";
    out_ += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + std::to_string(size) +
            "\" text-anchor=\"" + anchor + "\" fill=\"" + color + "\" font-weight=\"" + (halo ? "normal" : weight) + "\"";
    if (halo) out_ += " stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\"";
    if (rotate_deg != 0) out_ += " transform=\"rotate(" + num(rotate_deg) + " " + num(x) + " " + num(y) + ")\"";
    out_ += ">" + xml_escape(s) + "</text>\n";
  }
  void circle(double x, double y, double r, const char* fill) {
    out_ += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + num(r) + "\" fill=\"" + fill +
            "\" stroke=\"white\" stroke-width=\"1\"/>\n";
  }
  void square(double x, double y, double half, const char* fill) {
    out_ += "<rect x=\"" + num(x - half) + "\" y=\"" + num(y - half) + "\" width=\"" + num(2 * half) +
            "\" height=\"" + num(2 * half) + "\" fill=\"" + fill + "\" stroke=\"white\" stroke-width=\"1\"/>\n";
  }
  void rect(double x, double y, double w, double h, const char* fill, const char* stroke = "none") {
    out_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(h) +
            "\" fill=\"" + fill + "\" stroke=\"" + stroke + "\"/>\n";
  }
  void polyline(const std::vector<std::pair<double, double>>& pts, const char* color, double width,
                const char* dash = nullptr) {
    out_ += "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"" + num(width) + "\"";
    if (dash) out_ += std::string(" stroke-dasharray=\"") + dash + "\"";
    out_ += " points=\"";
    for (const auto& [x, y] : pts) out_ += num(x) + "," + num(y) + " ";
    out_ += "\"/>\n";
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// A rectangle of the canvas mapped to a data range, log or linear per axis.
struct Axes {
  double left, top, width, height;
  double x_lo, x_hi, y_lo, y_hi;
  bool log_x, log_y;

  double px(double x) const {
    const double t = log_x ? (std::log10(x) - std::log10(x_lo)) / (std::log10(x_hi) - std::log10(x_lo))
                           : (x - x_lo) / (x_hi - x_lo);
    return left + t * width;
  }
  double py(double y) const {
    const double t = log_y ? (std::log10(y) - std::log10(y_lo)) / (std::log10(y_hi) - std::log10(y_lo))
                           : (y - y_lo) / (y_hi - y_lo);
    return top + height - t * height;
  }
  double right() const { return left + width; }
  double bottom() const { return top + height; }
};

double decade_floor(double v) { return std::pow(10.0, std::floor(std::log10(v))); }
double decade_ceil(double v) { return std::pow(10.0, std::ceil(std::log10(v))); }

// 1, 2, 5 x 10^k at or above v.
double nice_ceil(double v) {
  const double d = decade_floor(v);
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * d >= v * (1 - 1e-9)) return m * d;
  return 10 * d;
}

// Tick label of a log axis value: 0.01, 0.1, 1, 10, 100, 1k, 10k, 1M ... (`suffix` after).
std::string log_tick(double v, Units units, const char* suffix) {
  static constexpr const char* kPrefix[] = {"", "k", "M", "G", "T", "P", "E"};
  if (v < 1) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g%s", v, suffix);
    return buf;
  }
  int p = 0;
  double scaled = v;
  while (scaled >= 1000 && p < 6) {
    scaled /= 1000;
    ++p;
  }
  (void)units;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g %s%s", scaled, kPrefix[p], suffix);
  return buf;
}

void draw_frame(Svg& svg, const Axes& ax) {
  svg.rect(ax.left, ax.top, ax.width, ax.height, "#fcfcfc", "#888");
}

// Approximate rendered width of `text` at `size` px in a DejaVu/Helvetica-like sans.
double text_width(const std::string& text, int size, bool bold = false) {
  return static_cast<double>(text.size()) * size * (bold ? 0.64 : 0.58);
}

struct Box {
  double x0, y0, x1, y1;  // pixels, x0 < x1, y0 < y1
  double overlap(const Box& o) const {
    const double w = std::min(x1, o.x1) - std::max(x0, o.x0);
    const double h = std::min(y1, o.y1) - std::max(y0, o.y0);
    return w > 0 && h > 0 ? w * h : 0;
  }
};

// Places labels where they cover no point, no label placed before, and stay inside the
// plot: the first free candidate, else the one with the least overlap.
class Placer {
 public:
  explicit Placer(const Axes& ax) : frame_{ax.left + 2, ax.top + 2, ax.right() - 2, ax.bottom() - 2} {}
  void add(const Box& b) { taken_.push_back(b); }
  void add_point(double x, double y) { add({x - 7, y - 7, x + 7, y + 7}); }
  Box place(const std::vector<Box>& candidates) {
    const Box* best = &candidates.front();
    double best_cost = 1e300;
    for (const Box& c : candidates) {
      double cost = 0;
      for (const Box& t : taken_) cost += c.overlap(t);
      const double area = (c.x1 - c.x0) * (c.y1 - c.y0);
      cost += area - c.overlap(frame_);  // outside the plot counts as covered
      if (cost < best_cost) {
        best_cost = cost;
        best = &c;
      }
      if (cost == 0) break;
    }
    add(*best);
    return *best;
  }

 private:
  Box frame_;
  std::vector<Box> taken_;
};

struct RoofPoint {
  double intensity, flops;
  std::string label;
};

// Prefill at several prompt lengths and decode at several batch sizes, for the chosen
// precision: default lengths and batches a factor of 4 apart, plus the ones asked for (a
// default too close to an asked value would print its label on top of it).
struct RoofPoints {
  std::vector<RoofPoint> prefill, decode;
};
RoofPoints roof_points(const Plan& plan, const Workload& w) {
  auto merge = [](std::vector<int64_t> defaults, const std::vector<int64_t>& asked) {
    std::set<int64_t> out(asked.begin(), asked.end());
    for (int64_t d : defaults) {
      bool close = false;
      for (int64_t a : asked) close |= d != a && d * 3 > a * 2 && a * 3 > d * 2;
      if (!close) out.insert(d);
    }
    return out;
  };
  std::vector<int64_t> asked_batches;
  for (const BatchEstimate& b : plan.batches) asked_batches.push_back(b.n_batch);
  RoofPoints pts;
  for (int64_t n : merge({16, 64, 256, 1024, 4096, 16384}, {plan.n_prompt})) {
    const StepEstimate s = estimate_prefill(w, n);
    pts.prefill.push_back({s.intensity(), s.attained_flops(), "pp" + std::to_string(n)});
  }
  for (int64_t b : merge({1, 4, 16, 64, 256}, asked_batches)) {
    const StepEstimate s = estimate_decode_step(w, b, plan.n_context);
    pts.decode.push_back({s.intensity(), s.attained_flops(), "tg b=" + std::to_string(b)});
  }
  return pts;
}

// The other compute roof the machine has, drawn dashed: int8 against float on a CPU,
// tensor cores against none on a GPU. rate = 0 when there is none.
struct SecondRoof {
  double rate = 0;
  std::string label;
};
SecondRoof second_roof(const Plan& plan, double peak) {
  const Hardware& hw = plan.hw;
  const Units u = plan.units;
  SecondRoof r;
  if (hw.int8_for_quantized) {
    if (peak == hw.ops_int8) {
      r.rate = hw.flops_fp16;
      r.label = "f32 FMA roof (attention, float weights): " + format_rate(r.rate, u);
    } else {
      r.rate = hw.ops_int8;
      r.label = "int8 roof (quantized weights): " + format_rate(r.rate, u, "OP");
    }
  } else if (hw.flops_fp16_tensor != hw.flops_fp16) {
    r.rate = plan.tensor_cores ? hw.flops_fp16 : hw.flops_fp16_tensor;
    r.label = std::string(plan.tensor_cores ? "fp16 roof without tensor cores: " : "fp16 tensor-core roof: ") +
              format_rate(r.rate, u);
  }
  return r;
}

// Roof labels go where they hit nothing already placed: the first free candidate spot,
// else the least bad.
void draw_roof_labels(Svg& svg, Placer& placer, const Axes& ax, double bw, double peak, const char* peak_kind,
                      const SecondRoof& second, double x_start, Units u) {
  const double ridge = peak / bw;
  // The compute roof's, two lines: left of the ridge above the roof (nothing is plotted
  // there), or at the right end or the middle, just above or below the roof, then further
  // away.
  const std::string title = std::string("compute roof (") + peak_kind + ")";
  const std::string peak_text = format_rate(peak, u);
  const double cw = std::max(text_width(title, 13, true), text_width(peak_text, 13, true));
  const double py_peak = ax.py(peak);
  std::vector<Box> compute_spots;
  for (double top : {py_peak - 38, py_peak + 6, py_peak + 44, py_peak - 84, py_peak + 84, py_peak + 124})
    for (double right : {ax.px(ridge) - 10, ax.right() - 6, (ax.px(ridge) + ax.right() + cw) / 2})
      compute_spots.push_back({right - cw, top, right, top + 34});
  const Box cb = placer.place(compute_spots);
  svg.text(cb.x1, cb.y0 + 13, title, "end", 13, kRoofColor, "bold");
  svg.text(cb.x1, cb.y0 + 29, peak_text, "end", 13, kRoofColor, "bold");
  if (second.rate > 0) {
    const double sw = text_width(second.label, 12), py2 = ax.py(second.rate);
    std::vector<Box> spots;
    for (double right : {ax.right() - 6, (ax.px(second.rate / bw) + ax.right() + sw) / 2})
      for (double top : {py2 + 4, py2 - 18, py2 + 22}) spots.push_back({right - sw, top, right, top + 15});
    const Box sb = placer.place(spots);
    svg.text(sb.x1, sb.y0 + 12, second.label, "end", 12, "#555", "halo");
  }
  // The memory roof's runs along the diagonal, above it.
  const std::string mem_text = "memory roof: " + format_bandwidth(bw, u);
  const double angle = std::atan2(ax.py(bw * 10) - ax.py(bw), ax.px(10) - ax.px(1));  // the diagonal's slope
  const double mw = text_width(mem_text, 13, true);
  std::vector<Box> mem_spots;
  std::vector<double> mem_x;
  for (double f : {0.3, 0.15, 0.45, 0.05, 0.6}) {
    const double x = std::pow(10.0, std::log10(x_start) + (std::log10(ridge) - std::log10(x_start)) * f);
    const double x0 = ax.px(x) - 4, y0 = ax.py(bw * x) - 8;
    const double x1 = x0 + mw * std::cos(angle), y1 = y0 + mw * std::sin(angle);
    mem_spots.push_back({std::min(x0, x1) - 4, std::min(y0, y1) - 12, std::max(x0, x1), std::max(y0, y1)});
    mem_x.push_back(x);
  }
  const Box mb = placer.place(mem_spots);
  for (size_t i = 0; i < mem_spots.size(); ++i) {
    if (mem_spots[i].x0 != mb.x0 || mem_spots[i].y0 != mb.y0) continue;
    svg.text(ax.px(mem_x[i]) - 4, ax.py(bw * mem_x[i]) - 8, mem_text, "start", 13, kRoofColor, "bold",
             angle * 180 / 3.14159265358979);
    break;
  }
}

void draw_roofline(Svg& svg, const Plan& plan, const Axes& frame) {
  const Workload& w = plan.chosen().workload;
  const Units u = plan.units;
  const double bw = w.read_bytes_per_s;
  const double peak = w.matmul_flop_rate;
  const RoofPoints pts = roof_points(plan, w);
  const std::vector<RoofPoint>& prefill = pts.prefill;
  const std::vector<RoofPoint>& decode = pts.decode;
  const SecondRoof second_roof_info = second_roof(plan, peak);
  const double second = second_roof_info.rate;

  double ai_lo = peak / bw, ai_hi = peak / bw, y_lo = peak;
  for (const auto* pts : {&prefill, &decode})
    for (const RoofPoint& p : *pts) {
      ai_lo = std::min(ai_lo, p.intensity);
      ai_hi = std::max(ai_hi, p.intensity);
      y_lo = std::min(y_lo, p.flops);
    }
  Axes ax = frame;
  ax.log_x = ax.log_y = true;
  ax.x_lo = decade_floor(ai_lo / 1.5);
  ax.x_hi = decade_ceil(ai_hi * 1.5);
  ax.y_hi = decade_ceil(std::max(peak, second) * 2.5);
  ax.y_lo = std::max(decade_floor(std::min(y_lo / 2, bw * ax.x_lo)), ax.y_hi / 1e7);
  draw_frame(svg, ax);

  // Grid and ticks at decades.
  for (double x = ax.x_lo; x <= ax.x_hi * 1.001; x *= 10) {
    svg.line(ax.px(x), ax.top, ax.px(x), ax.bottom(), "#e2e2e2", 1);
    svg.text(ax.px(x), ax.bottom() + 18, log_tick(x, u, ""), "middle", 12);
  }
  for (double y = ax.y_lo; y <= ax.y_hi * 1.001; y *= 10) {
    svg.line(ax.left, ax.py(y), ax.right(), ax.py(y), "#e2e2e2", 1);
    svg.text(ax.left - 6, ax.py(y) + 4, log_tick(y, u, "FLOP/s"), "end", 12);
  }
  svg.text((ax.left + ax.right()) / 2, ax.bottom() + 42, "arithmetic intensity (FLOP per byte moved, log scale)",
           "middle", 14, "#222", "bold");
  svg.text(ax.left - 96, (ax.top + ax.bottom()) / 2, "attainable FLOP/s (log scale)", "middle", 14, "#222", "bold", -90);

  // Roofs: memory (slope = bandwidth) up to the ridge, then compute.
  const double ridge = peak / bw;
  const double x_start = std::max(ax.x_lo, ax.y_lo / bw);
  svg.polyline({{ax.px(x_start), ax.py(bw * x_start)}, {ax.px(ridge), ax.py(peak)}, {ax.right(), ax.py(peak)}},
               kRoofColor, 2.5);
  if (second > 0)
    svg.polyline({{ax.px(ridge), ax.py(peak)}, {ax.px(second / bw), ax.py(second)}, {ax.right(), ax.py(second)}},
                 "#777", 1.5, "6 4");
  svg.line(ax.px(ridge), ax.py(peak), ax.px(ridge), ax.bottom(), "#999", 1, "3 3");
  char ridge_text[64];
  std::snprintf(ridge_text, sizeof ridge_text, "ridge %.3g FLOP/B", ridge);
  svg.text(ax.px(ridge) + 5, ax.bottom() - 8, ridge_text, "start", 12, "#555");

  // Points, and their labels: slanted so that neighbours a factor of 4 apart do not
  // collide, prefill labels rising up-right, decode labels falling down-right. Points
  // within a few pixels of each other share one label ("tg b=64,256").
  auto label_groups = [&](const std::vector<RoofPoint>& pts, const char* prefix) {
    std::vector<std::pair<const RoofPoint*, std::string>> groups;  // first point, label
    for (const RoofPoint& p : pts) {
      const std::string value = p.label.substr(std::string(prefix).size());
      if (!groups.empty()) {
        const RoofPoint& q = *groups.back().first;
        if (std::hypot(ax.px(p.intensity) - ax.px(q.intensity), ax.py(p.flops) - ax.py(q.flops)) < 16) {
          groups.back().second += "," + value;
          continue;
        }
      }
      groups.push_back({&p, p.label});
    }
    return groups;
  };
  const auto prefill_labels = label_groups(prefill, "pp");
  const auto decode_labels = label_groups(decode, "tg b=");
  Placer placer(ax);
  constexpr double kSlant = 40 * 3.14159265358979 / 180;
  for (const RoofPoint& p : prefill) placer.add_point(ax.px(p.intensity), ax.py(p.flops));
  for (const RoofPoint& p : decode) placer.add_point(ax.px(p.intensity), ax.py(p.flops));
  for (const auto& [p, label] : prefill_labels) {
    const double x = ax.px(p->intensity) + 2, y = ax.py(p->flops) - 9, len = text_width(label, 12);
    placer.add({x, y - len * std::sin(kSlant) - 9, x + len * std::cos(kSlant) + 9, y});
  }
  for (const auto& [p, label] : decode_labels) {
    const double x = ax.px(p->intensity) + 6, y = ax.py(p->flops) + 12, len = text_width(label, 12);
    placer.add({x, y - 9, x + len * std::cos(kSlant) + 9, y + len * std::sin(kSlant)});
  }

  const Hardware& hw = plan.hw;
  const char* peak_kind = hw.int8_for_quantized && peak == hw.ops_int8 ? "int8"
                          : hw.measured                               ? "f32 FMA"
                          : plan.tensor_cores                         ? "fp16 tensor cores"
                                                                      : "fp16";
  draw_roof_labels(svg, placer, ax, bw, peak, peak_kind, second_roof_info, x_start, u);

  for (const RoofPoint& p : prefill) svg.circle(ax.px(p.intensity), ax.py(p.flops), 5.5, kPrefillColor);
  for (const RoofPoint& p : decode) svg.square(ax.px(p.intensity), ax.py(p.flops), 5, kDecodeColor);
  for (const auto& [p, label] : prefill_labels)
    svg.text(ax.px(p->intensity) + 2, ax.py(p->flops) - 9, label, "start", 12, kPrefillColor, "halo", -40);
  for (const auto& [p, label] : decode_labels)
    svg.text(ax.px(p->intensity) + 6, ax.py(p->flops) + 12, label, "start", 12, kDecodeColor, "halo", 40);

  // Legend under the axis title.
  const double ly = ax.bottom() + 66;
  svg.circle(ax.left + 8, ly - 4, 5.5, kPrefillColor);
  svg.text(ax.left + 20, ly, "prefill: pp N = a prompt of N tokens in one pass", "start", 12);
  svg.square(ax.left + 8, ly + 16, 5, kDecodeColor);
  svg.text(ax.left + 20, ly + 20,
           "decode: tg b=B = one step of B sequences with " + std::to_string(plan.n_context) + " cached tokens each",
           "start", 12);
}

void draw_latency(Svg& svg, const Plan& plan, const Axes& frame) {
  // Context range: up to the largest capacity, within [4K, 128K] tokens.
  double max_fit = 0;
  for (const PrecisionPlan& p : plan.precisions)
    if (p.kv_tokens) max_fit = std::max(max_fit, static_cast<double>(*p.kv_tokens));
  // Context lengths go in powers of two (a "128K" context is 131072 tokens).
  double x_max = 4096;
  while (x_max < std::min(max_fit, 131072.0)) x_max *= 2;

  struct Series {
    const PrecisionPlan* plan;
    double n_end;  // last context length drawn
  };
  std::vector<Series> series;
  double y_max = 0;
  for (const PrecisionPlan& p : plan.precisions) {
    if (p.precision.name == "w6a16" && &p != &plan.chosen()) continue;  // keep the chart readable
    const double n_end = p.kv_tokens ? std::min(static_cast<double>(*p.kv_tokens), x_max) : 0;
    series.push_back({&p, n_end});
    if (n_end >= 1) y_max = std::max(y_max, p.decode.latency_ms(static_cast<int64_t>(n_end)));
  }
  Axes ax = frame;
  ax.log_x = ax.log_y = false;
  ax.x_lo = 0;
  ax.x_hi = x_max;
  ax.y_lo = 0;
  ax.y_hi = y_max > 0 ? nice_ceil(y_max * 1.15) : 1;
  draw_frame(svg, ax);

  for (int i = 0; i <= 8; ++i) {
    const double x = x_max * i / 8;
    svg.line(ax.px(x), ax.top, ax.px(x), ax.bottom(), "#e2e2e2", 1);
    char buf[32];
    if (x >= 1024) std::snprintf(buf, sizeof buf, "%.3gK", x / 1024);
    else std::snprintf(buf, sizeof buf, "%g", x);
    svg.text(ax.px(x), ax.bottom() + 18, x == 0 ? "0" : buf, "middle", 12);
  }
  for (int i = 0; i <= 5; ++i) {
    const double y = ax.y_hi * i / 5;
    svg.line(ax.left, ax.py(y), ax.right(), ax.py(y), "#e2e2e2", 1);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g ms", y);
    svg.text(ax.left - 6, ax.py(y) + 4, buf, "end", 12);
  }
  svg.text((ax.left + ax.right()) / 2, ax.bottom() + 42, "context length (tokens in the KV cache; K = 1024)",
           "middle", 14, "#222", "bold");
  svg.text(ax.left - 62, (ax.top + ax.bottom()) / 2, "decode latency per token, batch 1 (ms)", "middle", 14,
           "#222", "bold", -90);

  double legend_y = ax.top + 20;
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    const char* color = kLineColors[i % std::size(kLineColors)];
    const PrecisionPlan& p = *s.plan;
    std::string legend = p.precision.name + ": B " + format_ms(p.decode.b_ms) + ", W ";
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.4g", p.decode.w_tokens_per_ms);
    legend += std::string(buf) + " tok/ms";
    if (!p.kv_tokens) {
      legend += " (weights do not fit)";
    } else if (static_cast<double>(*p.kv_tokens) < x_max) {
      legend += ", KV fits " + format_grouped(*p.kv_tokens) + " tokens";
    }
    svg.line(ax.left + 12, legend_y - 4, ax.left + 36, legend_y - 4, color, 3);
    svg.text(ax.left + 42, legend_y, legend, "start", 12);
    legend_y += 18;
    if (s.n_end < 1) continue;
    std::vector<std::pair<double, double>> pts;
    for (int k = 0; k <= 64; ++k) {
      const double n = 1 + (s.n_end - 1) * k / 64;
      pts.push_back({ax.px(n), ax.py(p.decode.latency_ms(static_cast<int64_t>(n)))});
    }
    svg.polyline(pts, color, 2.5);
    if (s.n_end < x_max) {  // KV cache full: mark the end
      const double x = ax.px(s.n_end), y = ax.py(p.decode.latency_ms(static_cast<int64_t>(s.n_end)));
      svg.line(x - 5, y - 5, x + 5, y + 5, color, 2.5);
      svg.line(x - 5, y + 5, x + 5, y - 5, color, 2.5);
      svg.text(x, y - 10, "KV full", "middle", 11, color);
    }
  }
  svg.text(ax.left, ax.bottom() + 66, "latency(n) = B + (n - 1) / W: B reads the weights, W = context tokens per ms",
           "start", 12);
  svg.text(ax.left, ax.bottom() + 86, "of KV reads; lines stop where weights + KV cache fill the memory", "start", 12);
}

}  // namespace

std::string plan_to_svg(const Plan& plan) {
  Svg svg;
  svg.raw("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"800\" viewBox=\"0 0 1200 800\" "
          "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n");
  svg.rect(0, 0, kWidth, kHeight, "white");
  const PrecisionPlan& chosen = plan.chosen();
  svg.text(24, 32,
           "lumen roofline: " + plan.shape.name + " on " + plan.hw.name + " at " + chosen.precision.name +
               " (weights " + format_bytes(chosen.workload.weight_bytes, plan.units) + ", KV " +
               format_bytes(chosen.workload.kv_bytes_per_token, plan.units) + " per token)",
           "start", 18, "#111", "bold");
  svg.text(24, 52, "units " + units_legend(plan.units), "start", 12, "#555");
  // The machine's description can be long (a measured one says how): cut it to the width.
  std::string hw_line = "machine: " + plan.hw.description;
  if (hw_line.size() > 185) hw_line = hw_line.substr(0, 182) + "...";
  svg.text(24, 68, hw_line, "start", 12, "#555");
  draw_roofline(svg, plan, Axes{122, 90, 440, 550, 1, 10, 1, 10, true, true});
  draw_latency(svg, plan, Axes{720, 90, 450, 550, 0, 1, 0, 1, false, false});
  svg.raw("</svg>\n");
  return svg.take();
}

}  // namespace lumen::roofline
