// Sliding-window layers in the roofline: KV held, KV read and attention arithmetic count a
// local layer at most its window (figures by hand), capacity grows past the window at the
// global layers' rate only, and models without local layers keep the plain formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "roofline/hardware.h"
#include "roofline/planner.h"
#include "roofline/shape.h"

namespace lumen::roofline {
namespace {

ModelShape preset(const char* name) {
  Result<ModelShape> s = model_preset(name);
  EXPECT_TRUE(s.ok()) << s.message();
  return *s;
}

Workload workload(const ModelShape& s, double weight_bits) {
  Result<Hardware> h = hardware_preset("rtx4090", Units::kBinary);
  EXPECT_TRUE(h.ok()) << h.message();
  return make_workload(s, count_params(s), make_precision(weight_bits, 16), *h, false);
}

// Gemma-3-1B: 26 layers, 22 local (il % 6 < 5) with a 512-token window and 4 global; one
// KV head of 256, so a token costs 2 x 256 = 512 K and V elements per layer.
//   at 32768 tokens: 512 x (4 x 32768 + 22 x 512) = 512 x 142,336 = 72,876,032 elements
//   (26 global layers would hold 512 x 26 x 32768 = 436,207,616: six times as much)
TEST(RooflineWindow, Gemma3KvCountsLocalLayersAtTheirWindow) {
  const ModelShape s = preset("gemma3-1b");
  EXPECT_EQ(s.n_local_layers, 22);
  EXPECT_EQ(s.window, 512);
  EXPECT_DOUBLE_EQ(kv_elems_at(s, 32768), 72'876'032.0);
  EXPECT_DOUBLE_EQ(kv_elems_at(s, 300), 512.0 * 26 * 300);  // inside the window: every layer
  EXPECT_EQ(kv_elems_per_token(s), 512 * 26);
  const Workload w = workload(s, 16);
  EXPECT_DOUBLE_EQ(w.kv_bytes_at(32768), 2.0 * 72'876'032);
  // A decode step at 32768 cached tokens reads the weights and the windowed KV.
  EXPECT_DOUBLE_EQ(estimate_decode_step(w, 1, 32768).bytes, w.weight_bytes + 2.0 * 72'876'032);
  EXPECT_DOUBLE_EQ(estimate_batch(w, 4, 32767).kv_bytes, 4 * 2.0 * 72'876'032);
  // Capacity: past 512 tokens a token costs only the global layers' 4 x 512 elements.
  const double left = w.memory_bytes - w.weight_bytes;
  const double at_window = 2.0 * 512 * 26 * 512;
  ASSERT_TRUE(kv_tokens_that_fit(w).has_value());
  EXPECT_EQ(*kv_tokens_that_fit(w), static_cast<int64_t>(std::floor(512 + (left - at_window) / (2.0 * 512 * 4))));
  EXPECT_GT(*kv_tokens_that_fit(w), static_cast<int64_t>(left / w.kv_bytes_per_token) * 6);
  // The decode latency line bends at the window: past it W grows by 26 / 4.
  const DecodeLine line = decode_line(w);
  EXPECT_DOUBLE_EQ(line.window, 512);
  EXPECT_NEAR(line.w2_tokens_per_ms, line.w_tokens_per_ms * 26 / 4, 1e-9 * line.w2_tokens_per_ms);
  EXPECT_NEAR(line.latency_ms(32769), estimate_decode_step(w, 1, 32768).memory_s * 1e3, 1e-9);
  EXPECT_NEAR(line.latency_ms(301), estimate_decode_step(w, 1, 300).memory_s * 1e3, 1e-9);
}

// Mistral-7B v0.1: every layer slides (window 4096), so a sequence never holds more than
// 4096 tokens of KV: any context fits once one window does.
TEST(RooflineWindow, EveryLayerLocalFitsAnyContext) {
  const ModelShape s = preset("mistral-7b");
  EXPECT_EQ(s.n_local_layers, s.n_layer);
  const Workload w = workload(s, 4);
  ASSERT_TRUE(kv_tokens_that_fit(w).has_value());
  EXPECT_EQ(*kv_tokens_that_fit(w), kUnboundedTokens);
  EXPECT_DOUBLE_EQ(w.kv_bytes_at(1e6), w.kv_bytes_at(4096));
  EXPECT_TRUE(std::isinf(decode_line(w).w2_tokens_per_ms));
}

// The attention sums in closed form equal the query-by-query sums, around the window.
TEST(RooflineWindow, PrefillAttentionSumsCapAtTheWindow) {
  for (const char* name : {"gemma2-2b", "gemma3-1b", "phi3-mini", "qwen3-0.6b"}) {
    const ModelShape s = preset(name);
    const Workload w = workload(s, 16);
    for (double d : {0.0, 100.0, 511.0, 512.0, 3000.0, 5000.0}) {
      for (double n : {1.0, 7.0, 512.0, 4100.0}) {
        double brute = 0;
        for (int64_t i = 1; i <= static_cast<int64_t>(n); ++i) brute += attn_macs_at(s, d + static_cast<double>(i));
        EXPECT_NEAR(attn_macs_prefill(s, d, n), brute, 1e-9 * brute) << name << " d " << d << " n " << n;
        EXPECT_NEAR(w.attn_macs_prefill(d, n), brute, 1e-9 * brute) << name << " d " << d << " n " << n;
      }
    }
  }
}

// Without local layers the windowed formulas are the plain ones.
TEST(RooflineWindow, NoLocalLayersNoChange) {
  const ModelShape s = preset("qwen3-1.7b");
  EXPECT_EQ(s.n_local_layers, 0);
  const Workload w = workload(s, 16);
  EXPECT_DOUBLE_EQ(w.kv_bytes_at(10000), 10000 * w.kv_bytes_per_token);
  EXPECT_DOUBLE_EQ(estimate_prefill(w, 1000).bytes, w.weight_bytes + 2.0 * 1000 * w.kv_bytes_per_token);
  EXPECT_DOUBLE_EQ(w.attn_macs_prefill(10, 5), w.attn_macs_per_pair * (5 * 10 + 15));
  EXPECT_EQ(*kv_tokens_that_fit(w),
            static_cast<int64_t>(std::floor((w.memory_bytes - w.weight_bytes) / w.kv_bytes_per_token)));
}

}  // namespace
}  // namespace lumen::roofline
