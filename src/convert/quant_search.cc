#include "convert/quant_search.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "convert/exact_float.h"
#include "kernels/quant_blocks.h"


namespace lumen::convert {
namespace {

using kernels::nearest_int;

float symmetric_weight(SymmetricWeight kind, const float* qw, int i, float x) {
  if (qw) return qw[i];
  switch (kind) {
    case SymmetricWeight::kSquare: return x * x;
    case SymmetricWeight::kOne: return 1;
    case SymmetricWeight::kAbs: return std::fabs(x);
    default: return std::sqrt(std::fabs(x));
  }
}

// The signed value of largest magnitude in x[0..n) (the first one on ties) and that magnitude.
float signed_absmax(int n, const float* x, float* amax_out) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  *amax_out = amax;
  return max;
}

}  // namespace

float fit_symmetric(int n, int nmax, const float* x, int8_t* L, SymmetricWeight weight, const float* qw,
                    bool early_exit) {
  float amax;
  const float max = signed_absmax(n, x, &amax);
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.f;
  }
  auto level = [nmax](float v) { return std::max(-nmax, std::min(nmax - 1, nearest_int(v))); };
  float inv_scale = -nmax / max;
  if (weight == SymmetricWeight::kNone) {
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + level(inv_scale * x[i]));
    return 1 / inv_scale;
  }
  float sum_lx = 0;
  float sum_l2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = level(inv_scale * x[i]);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = symmetric_weight(weight, qw, i, x[i]);
    sum_lx += w * x[i] * l;
    sum_l2 += w * l * l;
  }
  float scale = sum_l2 ? sum_lx / sum_l2 : 0.0f;
  if (early_exit) return sum_l2 > 0 ? 0.5f * (scale + 1 / inv_scale) : 1 / inv_scale;
  float best = scale * sum_lx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    inv_scale = -(nmax + 0.1f * k) / max;
    sum_lx = sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(inv_scale * x[i]);
      const float w = symmetric_weight(weight, qw, i, x[i]);
      sum_lx += w * x[i] * l;
      sum_l2 += w * l * l;
    }
    // Gain comparison sum_lx^2 / sum_l2 > best without dividing.
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + level(inv_scale * x[i]));
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

float fit_symmetric_q3(int n, int nmax, const float* x, int8_t* L, bool do_rmse) {
  float amax;
  const float max = signed_absmax(n, x, &amax);
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.f;
  }
  auto level = [nmax](float v) { return std::max(-nmax, std::min(nmax - 1, nearest_int(v))); };
  const float inv_scale = -nmax / max;
  if (!do_rmse) {
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(level(inv_scale * x[i]) + nmax);
    return 1 / inv_scale;
  }
  float sum_lx = 0;
  float sum_l2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = level(inv_scale * x[i]);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sum_lx += w * x[i] * l;
    sum_l2 += w * l * l;
  }
  // Coordinate descent: move one level to the value that is optimal given the others, keep
  // the move when the gain sum_lx^2 / sum_l2 rises.
  for (int pass = 0; pass < 5; ++pass) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sum_lx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = sum_l2 - w * L[i] * L[i];
        const int new_l = level(x[i] * sl2 / slx);
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * sum_l2 > sum_lx * sum_lx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sum_lx = slx;
            sum_l2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return sum_lx / sum_l2;
}

float fit_asymmetric(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* neg_min, float rmin,
                     float rdelta, int n_steps, bool use_abs_error) {
  auto weight = [&](int i) { return weights ? weights[i] : x[i] * x[i]; };
  float min = x[0];
  float max = x[0];
  float sum_w = weight(0);
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weight(i);
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;  // the offset only shifts down: level 0 must reach 0
  if (max == min) {
    std::memset(L, 0, static_cast<size_t>(n));
    *neg_min = -min;
    return 0.f;
  }
  auto error = [use_abs_error](float d) { return use_abs_error ? std::fabs(d) : d * d; };
  float inv_scale = nmax / (max - min);
  float scale = 1 / inv_scale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, nearest_int(inv_scale * (x[i] - min)))));
    const float diff = scale * L[i] + min - x[i];
    best_error += weight(i) * error(diff);
  }
  if (n_steps < 1) {
    *neg_min = -min;
    return scale;
  }
  uint8_t trial[256];
  for (int step = 0; step <= n_steps; ++step) {
    inv_scale = (rmin + rdelta * step + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::max(0, std::min(nmax, nearest_int(inv_scale * (x[i] - min))));
      trial[i] = static_cast<uint8_t>(l);
      const float w = weight(i);
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    // Weighted least squares of x ~ s * l + m over the trial levels; m > 0 is not
    // representable, so then m = 0 and s is refitted alone.
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * trial[i] + this_min - x[i];
        err += weight(i) * error(diff);
      }
      if (err < best_error) {
        std::memcpy(L, trial, static_cast<size_t>(n));
        best_error = err;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

float fit_positive(int n, int nmax, const float* x, uint8_t* L, const float* weights) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
  if (!max) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.f;
  }
  float inv_scale = nmax / max;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nearest_int(inv_scale * x[i]));
  const float scale = 1 / inv_scale;
  float best_mse = 0;
  for (int i = 0; i < n; ++i) {
    const float diff = x[i] - scale * L[i];
    best_mse += weights[i] * diff * diff;
  }
  for (int k = -4; k <= 4; ++k) {
    if (k == 0) continue;
    const float inv_scale_k = (0.1f * k + nmax) / max;
    const float scale_k = 1 / inv_scale_k;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, nearest_int(inv_scale_k * x[i]));
      const float diff = x[i] - scale_k * l;
      mse += weights[i] * diff * diff;
    }
    if (mse < best_mse) {
      best_mse = mse;
      inv_scale = inv_scale_k;
    }
  }
  float sum_lx = 0;
  float sum_l2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearest_int(inv_scale * x[i]));
    L[i] = static_cast<uint8_t>(l);
    sum_lx += weights[i] * x[i] * l;
    sum_l2 += weights[i] * l * l;
  }
  for (int pass = 0; pass < 5; ++pass) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = weights[i];
      float slx = sum_lx - w * x[i] * L[i];
      float sl2 = sum_l2 - w * L[i] * L[i];
      if (slx > 0 && sl2 > 0) {
        const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (slx * slx * sum_l2 > sum_lx * sum_lx * sl2) {
            L[i] = static_cast<uint8_t>(new_l);
            sum_lx = slx;
            sum_l2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  return sum_lx / sum_l2;
}

}  // namespace lumen::convert
