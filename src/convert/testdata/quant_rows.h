// The input rows of the quantizer test vectors (testdata/ggml_quants_v*.bin): exact float
// arithmetic over a xorshift32 stream, so the generator that produced the files
// (tools/ggml_quant_vectors.cc, compiled against ggml) and quantize_ref_test.cc agree.
// Header-only and free of lumen dependencies so the tool can include it.
#pragma once

#include <cmath>
#include <cstdint>
#include <iterator>
#include <vector>

namespace lumen::convert::testdata {

// The rows of testdata/ggml_quants_v1.bin (see testdata/README.md): exact float arithmetic
// over a xorshift32 stream, so the generator that produced the file and this test agree.
class RowGen {
 public:
  explicit RowGen(uint32_t kind) : state_(0x9E3779B9u ^ (kind * 7919u + 1u)) {}
  float uniform() {  // [-1, 1)
    state_ ^= state_ << 13;
    state_ ^= state_ >> 17;
    state_ ^= state_ << 5;
    return static_cast<float>(state_ >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
  }

 private:
  uint32_t state_;
};

inline std::vector<float> make_row(uint32_t kind, int n) {
  RowGen g(kind);
  std::vector<float> x(n);
  static const float kSpecials[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, -6e-8f,
                                    2.98023224e-8f, 5.96046448e-8f, 1e30f, -1e-30f, 1.00390625f, 1.01171875f,
                                    3.0e38f, 1.17549435e-38f, 1.0e-40f};
  constexpr int kNumSpecials = static_cast<int>(std::size(kSpecials));
  for (int i = 0; i < n; ++i) {
    float v;
    if (kind == 0) {
      const float a = g.uniform(), b = g.uniform(), c = g.uniform(), d = g.uniform();
      v = 0.01f * (a + b + c + d);
    } else if (kind == 1) {
      v = g.uniform();
      if (i % 37 == 5) v *= 50.0f;
      if (i >= 256 && i < 512) v = 0.0f;
      if (i >= 64 && i < 96) v = 0.0f;
      if (i >= 600 && i < 616) v = 1e-20f * v;
    } else if (kind == 2) {
      v = std::fabs(g.uniform()) + 0.25f;
      if (i >= 128 && i < 160) v = static_cast<float>(i % 16) * 0.5f;
      if (i >= 700) v = -v;
    } else if (kind == 4) {
      v = 0.5f * g.uniform();
      if (i >= 32 && i < 64) v = -0.37f;    // a flat negative 32-group
      if (i >= 512 && i < 528) v = 1e-16f;  // a 16-group below ggml's GROUP_MAX_EPS
      if (i == 300) v = 1e4f;               // an outlier
    } else if (i < kNumSpecials) {
      v = kSpecials[i];
    } else if (i == kNumSpecials) {
      v = INFINITY;
    } else if (i == kNumSpecials + 1) {
      v = -INFINITY;
    } else if (i == kNumSpecials + 2) {
      v = NAN;
    } else {
      v = g.uniform() * std::ldexp(1.0f, (i % 40) - 28);
    }
    x[i] = v;
  }
  return x;
}

// A row of n values from {+-0.25, +-0.75, +-1.25, +-1.75} (exact in float, no rounding in
// the arithmetic): with weights that depend only on the value, many candidates of the searches
// tie exactly, so these rows check the tie rules (which of two equal errors a search keeps).
inline std::vector<float> make_tie_row(uint32_t seed, int n) {
  RowGen g(1u << 20 | seed);
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) {
    const int k = static_cast<int>((g.uniform() + 1.0f) * 4.0f);  // 0..7
    x[i] = (static_cast<float>(k) - 3.5f) * 0.5f;
  }
  return x;
}

// Importance weights for a row of n (kind 0: none). Kind 1: smooth positive values spanning
// about 4 decades, like mean squared activations; kind 2: mostly small with a few columns
// 1000x larger (outlier channels) and some columns at 1e-8 (rarely active); kind 3: as kind
// 1 with about half the columns at exactly 0 (never active), never a whole group of 8, so
// candidates that differ only in those columns tie exactly (the i-quants' tie rules).
inline std::vector<float> make_imatrix(uint32_t kind, int n) {
  std::vector<float> w;
  if (kind == 0) return w;
  RowGen g(1000 + kind);
  w.resize(n);
  for (int i = 0; i < n; ++i) {
    const float u = g.uniform();
    float v = (u + 1.01f) * (u + 1.01f);  // (0.0001, 4.04)
    if (kind == 2) {
      v = 0.01f * v;
      if (i % 61 == 7) v = 10.0f + v;
      if (i % 97 == 13) v = 1e-8f;
    }
    if (kind == 3 && i % 8 != 0 && g.uniform() > 0) v = 0.0f;
    w[i] = v;
  }
  return w;
}

}  // namespace lumen::convert::testdata
