// The 1-bit i-quants iq1_s and iq1_m: super-blocks of 256 values. Every group of 8 values is
// one entry of kIq1sGrid (2048 points of {-1, 0, 1}^8, an 11-bit index), shifted by +-delta
// (delta = 1/8) and scaled by the sub-block scale: x ~ d (2 l + 1) (g + s delta), s = +-1.
//   iq1_s: sub-blocks of 32, a 3-bit scale l and one delta sign per sub-block (in qh),
//          an fp16 super-block scale d
//   iq1_m: sub-blocks of 16, 3-bit scales, one delta sign per group of 8, the fp16 d split
//          over the top nibbles of the four u16 of `scales`
//
// Per sub-block (ggml's quantize_row_iq1_s_impl / quantize_row_iq1_m_impl, llama.cpp c392e5094):
//   w       imatrix * sqrt(sigma2 + x^2), sigma2 = 2 mean(x^2) of the super-block (iq1_m
//           without an importance matrix: x^2; iq1_s requires one)
//   split   with three levels per value, the best levels are two cut points in the values
//           sorted ascending (a stable sort: equal values keep their order): every pair of
//           cuts (i1 <= i2) and every delta sign choice gives the least-squares scale
//           sum(w q x) / sum(w q^2) for q in {-1, 0, 1} + s delta; the largest gain
//           sum(w q x)^2 / sum(w q^2) wins, first found on ties. iq1_s takes the sums from
//           prefix sums, iq1_m sums each candidate element by element (its two halves may
//           have different signs), in sorted order.
//   sign    a negative scale flips the levels (l -> 2 - l) and the delta signs
//   grid    a group whose levels are not a grid point is replaced by the neighbour (of the
//           precomputed list for that point) with the least weighted squared error at the
//           current scale; if any group moved, the scale is refit by least squares
//   then    d = max scale / 15, l = round((scale / d - 1) / 2) clamped to 0..7;
//           iq1_s stores d * 1.125; iq1_m refits d over the whole super-block with the
//           chosen levels and scales and stores d * 1.1125
//
// The neighbour list of a point off the grid (3^8 - 2048 of them) holds every grid point at
// one of its three smallest squared distances, by distance then grid index.
//
// A sub-block whose values are all below a threshold (1e-12 iq1_s, 1e-7 iq1_m) keeps grid
// index 0, scale 0, and the delta sign(s) of the last sub-block at the same position in an
// earlier super-block of the row (ggml leaves that slot unwritten; before any write it is
// positive here).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/fp16.h"
#include "convert/exact_float.h"
#include "convert/quantize_types.h"
#include "kernels/iq_grids.h"
#include "kernels/quant_blocks.h"

namespace lumen::convert {
namespace {

using kernels::BlockIQ1_M;
using kernels::BlockIQ1_S;
using kernels::kIq1sGrid;
using kernels::kQkK;
using kernels::nearest_int;

constexpr int kGridSize = 2048;
constexpr float kDelta = 0.125f;
constexpr int kCodeLimit = 0xAAAA + 1;  // codes: 2 bits per value, every value's level <= 2

// The level (0, 1, 2 for -1, 0, 1) of value j of grid point g.
inline int grid_level(int g, int j) { return static_cast<int8_t>(kIq1sGrid[g] >> (8 * j)) + 1; }

// Grid lookup by the code sum_j level_j << 2j of a group's levels.
struct Iq1GridSearch {
  std::vector<int32_t> grid_of;        // [kCodeLimit] grid index, -1 off the grid
  std::vector<uint32_t> nb_begin;      // [kCodeLimit + 1] neighbour list of an off-grid code
  std::vector<uint16_t> nb;            // the lists, concatenated
};

Iq1GridSearch build_grid_search() {
  Iq1GridSearch s;
  s.grid_of.assign(kCodeLimit, -1);
  s.nb_begin.assign(kCodeLimit + 1, 0);
  for (int g = 0; g < kGridSize; ++g) {
    int code = 0;
    for (int j = 0; j < 8; ++j) code |= grid_level(g, j) << (2 * j);
    s.grid_of[code] = g;
  }
  constexpr int kMaxDist = 8 * 4 + 1;
  std::vector<uint8_t> dist(kGridSize);
  for (int code = 0; code < kCodeLimit; ++code) {
    s.nb_begin[code] = static_cast<uint32_t>(s.nb.size());
    bool valid = true;
    for (int j = 0; j < 8; ++j) valid = valid && ((code >> (2 * j)) & 3) != 3;
    if (!valid || s.grid_of[code] >= 0) continue;
    int n_at[kMaxDist] = {};
    for (int g = 0; g < kGridSize; ++g) {
      int d2 = 0;
      for (int j = 0; j < 8; ++j) {
        const int diff = grid_level(g, j) - ((code >> (2 * j)) & 3);
        d2 += diff * diff;
      }
      dist[g] = static_cast<uint8_t>(d2);
      ++n_at[d2];
    }
    int n_kept = 0;
    for (int d2 = 0; d2 < kMaxDist && n_kept < 3; ++d2) {
      if (!n_at[d2]) continue;
      ++n_kept;
      for (int g = 0; g < kGridSize; ++g)
        if (dist[g] == d2) s.nb.push_back(static_cast<uint16_t>(g));
    }
  }
  s.nb_begin[kCodeLimit] = static_cast<uint32_t>(s.nb.size());
  return s;
}

const Iq1GridSearch& grid_search() {
  static const Iq1GridSearch s = build_grid_search();
  return s;
}

// The level values for a delta sign: xx[level] = level - 1 + sign * delta.
struct Levels {
  float v[3];
};
constexpr Levels kPlus = {{-1 + kDelta, kDelta, 1 + kDelta}};
constexpr Levels kMinus = {{-1 - kDelta, -kDelta, 1 - kDelta}};

// The neighbour of an off-grid code with the least sum w (scale q - x)^2, first on ties (the
// first neighbour if every error is NaN, where ggml aborts). Sets L to its levels.
int best_neighbour(const Iq1GridSearch& s, int code, const float* x, const float* w, float scale, const Levels& xx,
                   int8_t* L) {
  float best = FLT_MAX;
  int best_g = s.nb[s.nb_begin[code]];
  for (uint32_t k = s.nb_begin[code]; k < s.nb_begin[code + 1]; ++k) {
    const int g = s.nb[k];
    float d2 = 0;
    for (int j = 0; j < 8; ++j) {
      const float diff = scale * xx.v[grid_level(g, j)] - x[j];
      d2 += w[j] * diff * diff;
    }
    if (d2 < best) {
      best = d2;
      best_g = g;
    }
  }
  for (int j = 0; j < 8; ++j) L[j] = static_cast<int8_t>(grid_level(best_g, j));
  return best_g;
}

// The grid index of group L (8 levels), moving it to its best neighbour if it is off the
// grid; `moved` is set then.
int group_index(const float* x, const float* w, float scale, const Levels& xx, int8_t* L, bool* moved) {
  const Iq1GridSearch& s = grid_search();
  int code = 0;
  for (int j = 0; j < 8; ++j) code |= L[j] << (2 * j);
  if (s.grid_of[code] >= 0) return s.grid_of[code];
  *moved = true;
  return best_neighbour(s, code, x, w, scale, xx, L);
}

// order[0..n) = 0..n-1 sorted by x ascending, equal values in index order.
void sort_indices(const float* x, int n, int* order) {
  for (int i = 0; i < n; ++i) {
    int j = i;
    while (j > 0 && x[i] < x[order[j - 1]]) {
      order[j] = order[j - 1];
      --j;
    }
    order[j] = i;
  }
}

// Levels from the cut points: sorted positions [0, i1) -> 0, [i1, i2) -> 1, [i2, n) -> 2.
void levels_from_cuts(const int* order, int n, int i1, int i2, int8_t* L) {
  for (int j = 0; j < n; ++j) L[order[j]] = static_cast<int8_t>(j < i1 ? 0 : j < i2 ? 1 : 2);
}

void super_block_weights(const float* x, const float* qw, int n, float sigma2, float* w) {
  for (int i = 0; i < n; ++i) w[i] = qw ? qw[i] * std::sqrt(sigma2 + x[i] * x[i]) : x[i] * x[i];
}

float super_block_sigma2(const float* x) {
  float sum_x2 = 0;
  for (int i = 0; i < kQkK; ++i) sum_x2 += x[i] * x[i];
  return 2 * sum_x2 / kQkK;
}

float max_abs(const float* x, int n) {
  float m = std::fabs(x[0]);
  for (int i = 1; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// ---- iq1_s ----

constexpr int kSubS = 32;
constexpr float kEpsS = 1e-12f;

struct SubBlockS {
  float scale = 0;
  int shift = 1;  // delta sign
  uint16_t index[kSubS / 8] = {};
};

// The search of one 32-value sub-block with max |x| >= kEpsS. False if no split has a
// positive sum(w q^2) (only with zero or non-finite weights; ggml aborts there).
bool fit_sub_block_s(const float* xb, const float* w, SubBlockS* out) {
  int order[kSubS];
  sort_indices(xb, kSubS, order);
  float sum_x[kSubS + 1], sum_w[kSubS + 1];
  sum_x[0] = sum_w[0] = 0;
  for (int j = 0; j < kSubS; ++j) {
    const int i = order[j];
    sum_x[j + 1] = sum_x[j] + w[i] * xb[i];
    sum_w[j + 1] = sum_w[j] + w[i];
  }
  float best = -FLT_MIN, scale = 0;
  int best_i1 = -1, best_i2 = -1, shift = 0;
  for (int i1 = 0; i1 <= kSubS; ++i1) {
    for (int i2 = i1; i2 <= kSubS; ++i2) {
      const float x0 = sum_x[i1] - sum_x[0], x1 = sum_x[i2] - sum_x[i1], x2 = sum_x[kSubS] - sum_x[i2];
      const float w0 = sum_w[i1] - sum_w[0], w1 = sum_w[i2] - sum_w[i1], w2 = sum_w[kSubS] - sum_w[i2];
      for (int sign : {1, -1}) {
        const float* q = sign == 1 ? kPlus.v : kMinus.v;
        const float sum_qx = x0 * q[0] + x1 * q[1] + x2 * q[2];
        const float sum_q2 = w0 * q[0] * q[0] + w1 * q[1] * q[1] + w2 * q[2] * q[2];
        if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
          scale = sum_qx / sum_q2;
          best = scale * sum_qx;
          best_i1 = i1;
          best_i2 = i2;
          shift = sign;
        }
      }
    }
  }
  if (best_i1 < 0) return false;
  int8_t L[kSubS];
  levels_from_cuts(order, kSubS, best_i1, best_i2, L);
  if (scale < 0) {
    for (int8_t& l : L) l = static_cast<int8_t>(2 - l);
    scale = -scale;
    shift = -shift;
  }
  const Levels& xx = shift == 1 ? kPlus : kMinus;
  bool moved = false;
  for (int k = 0; k < kSubS / 8; ++k)
    out->index[k] = static_cast<uint16_t>(group_index(xb + 8 * k, w + 8 * k, scale, xx, L + 8 * k, &moved));
  if (moved) {
    float sum_qx = 0, sum_q2 = 0;
    for (int k = 0; k < kSubS / 8; ++k) {
      for (int j = 0; j < 8; ++j) {
        const float wj = w[8 * k + j];
        const float q = xx.v[grid_level(out->index[k], j)];
        sum_qx += wj * q * xb[8 * k + j];
        sum_q2 += wj * q * q;
      }
    }
    if (sum_qx > 0 && sum_q2 > 0) scale = sum_qx / sum_q2;
  }
  out->scale = scale;
  out->shift = shift;
  return true;
}

// `shifts`: the delta sign last chosen at each sub-block position in this row.
void quantize_block_iq1_s(const float* x, const float* qw, int* shifts, BlockIQ1_S* out) {
  std::memset(out, 0, sizeof(*out));
  const float sigma2 = super_block_sigma2(x);
  float scales[kQkK / kSubS];
  float max_scale = 0;
  for (int ib = 0; ib < kQkK / kSubS; ++ib) {
    const float* xb = x + kSubS * ib;
    scales[ib] = 0;
    if (max_abs(xb, kSubS) < kEpsS) continue;
    float w[kSubS];
    super_block_weights(xb, qw + kSubS * ib, kSubS, sigma2, w);
    SubBlockS sb;
    if (!fit_sub_block_s(xb, w, &sb)) continue;
    uint16_t h = 0;
    for (int k = 0; k < kSubS / 8; ++k) {
      out->qs[(kSubS / 8) * ib + k] = static_cast<uint8_t>(sb.index[k] & 255);
      h = static_cast<uint16_t>(h | ((sb.index[k] >> 8) << (3 * k)));
    }
    out->qh[ib] = h;
    scales[ib] = sb.scale;
    shifts[ib] = sb.shift;
    max_scale = std::max(max_scale, sb.scale);
  }
  if (max_scale == 0) return;
  const float d = max_scale / 15;
  out->d_f16 = f32_to_fp16(d * 1.125f);
  const float id = 1 / d;
  for (int ib = 0; ib < kQkK / kSubS; ++ib) {
    int l = std::clamp(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 7);
    if (shifts[ib] == -1) l |= 8;
    out->qh[ib] = static_cast<uint16_t>(out->qh[ib] | (l << 12));
  }
}

// ---- iq1_m ----

constexpr int kSubM = 16;
constexpr float kEpsM = 1e-7f;

// Delta signs of a sub-block's two groups of 8, as ggml numbers them: bit 1 set = first group
// negative, bit 0 set = second group negative.
inline const Levels& group_levels(int signs, int k) {
  const bool negative = k == 0 ? signs >= 2 : (signs & 1) != 0;
  return negative ? kMinus : kPlus;
}

struct SubBlockM {
  float scale = 0;
  int signs = 0;
  uint16_t index[2] = {};
};

// The search of one 16-value sub-block with max |x| >= kEpsM; false as fit_sub_block_s.
//
// The sums of a candidate (cuts i1 <= i2, signs) run over the sorted positions in order; the
// part before i1 and the part from i1 to i2 are running sums shared between candidates, the
// part from i2 on is summed per candidate, so every sum is the same float sequence as
// summing the candidate element by element.
bool fit_sub_block_m(const float* xb, const float* w, SubBlockM* out) {
  int order[kSubM];
  sort_indices(xb, kSubM, order);
  // term_x[r][s][j] = w q x and term_q[r][s][j] = w q q of sorted position j at level r
  // under signs s.
  float term_x[3][4][kSubM], term_q[3][4][kSubM];
  for (int j = 0; j < kSubM; ++j) {
    const int i = order[j];
    for (int s = 0; s < 4; ++s) {
      const Levels& xx = group_levels(s, i < kSubM / 2 ? 0 : 1);
      for (int r = 0; r < 3; ++r) {
        term_x[r][s][j] = w[i] * xx.v[r] * xb[i];
        term_q[r][s][j] = w[i] * xx.v[r] * xx.v[r];
      }
    }
  }
  float best = -FLT_MIN, scale = 0;
  int best_i1 = -1, best_i2 = -1, signs = -1;
  float head_x[4] = {}, head_q[4] = {};  // sum over [0, i1) at level 0
  for (int i1 = 0; i1 <= kSubM; ++i1) {
    float mid_x[4], mid_q[4];  // head + sum over [i1, i2) at level 1
    std::copy(head_x, head_x + 4, mid_x);
    std::copy(head_q, head_q + 4, mid_q);
    for (int i2 = i1; i2 <= kSubM; ++i2) {
      for (int s = 0; s < 4; ++s) {
        float sum_qx = mid_x[s], sum_q2 = mid_q[s];
        for (int j = i2; j < kSubM; ++j) {
          sum_qx += term_x[2][s][j];
          sum_q2 += term_q[2][s][j];
        }
        if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
          scale = sum_qx / sum_q2;
          best = scale * sum_qx;
          best_i1 = i1;
          best_i2 = i2;
          signs = s;
        }
      }
      if (i2 < kSubM) {
        for (int s = 0; s < 4; ++s) {
          mid_x[s] += term_x[1][s][i2];
          mid_q[s] += term_q[1][s][i2];
        }
      }
    }
    if (i1 < kSubM) {
      for (int s = 0; s < 4; ++s) {
        head_x[s] += term_x[0][s][i1];
        head_q[s] += term_q[0][s][i1];
      }
    }
  }
  if (best_i1 < 0) return false;
  int8_t L[kSubM];
  levels_from_cuts(order, kSubM, best_i1, best_i2, L);
  if (scale < 0) {
    for (int8_t& l : L) l = static_cast<int8_t>(2 - l);
    scale = -scale;
    signs = 3 - signs;
  }
  bool moved = false;
  for (int k = 0; k < 2; ++k)
    out->index[k] = static_cast<uint16_t>(
        group_index(xb + 8 * k, w + 8 * k, scale, group_levels(signs, k), L + 8 * k, &moved));
  if (moved) {
    float sum_qx = 0, sum_q2 = 0;
    for (int k = 0; k < 2; ++k) {
      const Levels& xx = group_levels(signs, k);
      for (int j = 0; j < 8; ++j) {
        const float wj = w[8 * k + j];
        const float q = xx.v[grid_level(out->index[k], j)];
        sum_qx += wj * q * xb[8 * k + j];
        sum_q2 += wj * q * q;
      }
    }
    if (sum_qx > 0 && sum_q2 > 0) scale = sum_qx / sum_q2;
  }
  out->scale = scale;
  out->signs = signs;
  return true;
}

// `signs`: the delta signs last chosen at each sub-block position in this row.
void quantize_block_iq1_m(const float* x, const float* qw, int* signs, BlockIQ1_M* out) {
  std::memset(out, 0, sizeof(*out));
  const float sigma2 = super_block_sigma2(x);
  float scales[kQkK / kSubM];
  float w_all[kQkK];
  super_block_weights(x, qw, kQkK, sigma2, w_all);
  float max_scale = 0;
  for (int ib = 0; ib < kQkK / kSubM; ++ib) {
    const float* xb = x + kSubM * ib;
    scales[ib] = 0;
    if (max_abs(xb, kSubM) < kEpsM) continue;
    SubBlockM sb;
    if (!fit_sub_block_m(xb, w_all + kSubM * ib, &sb)) continue;
    out->qs[2 * ib + 0] = static_cast<uint8_t>(sb.index[0] & 255);
    out->qs[2 * ib + 1] = static_cast<uint8_t>(sb.index[1] & 255);
    out->qh[ib] = static_cast<uint8_t>((sb.index[0] >> 8) | ((sb.index[1] >> 8) << 4));
    scales[ib] = sb.scale;
    signs[ib] = sb.signs;
    max_scale = std::max(max_scale, sb.scale);
  }
  if (max_scale == 0) return;
  // Refit d over the super-block with every sub-block's 3-bit scale and grid points.
  uint16_t sc[4] = {};
  float d = max_scale / 15;
  const float id = 1 / d;
  float sum_qx = 0, sum_q2 = 0;
  for (int ib = 0; ib < kQkK / kSubM; ++ib) {
    const int l = std::clamp(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 7);
    sc[ib / 4] = static_cast<uint16_t>(sc[ib / 4] | (l << (3 * (ib % 4))));
    out->qh[ib] = static_cast<uint8_t>(out->qh[ib] | ((signs[ib] & 2) << 2) | ((signs[ib] & 1) << 7));
    const float* xb = x + kSubM * ib;
    const float* w = w_all + kSubM * ib;
    for (int k = 0; k < 2; ++k) {
      const Levels& xx = group_levels(signs[ib], k);
      const int g = out->qs[2 * ib + k] | (((out->qh[ib] >> (4 * k)) & 7) << 8);
      for (int j = 0; j < 8; ++j) {
        const float q = xx.v[grid_level(g, j)] * static_cast<float>(2 * l + 1);
        sum_qx += w[8 * k + j] * q * xb[8 * k + j];
        sum_q2 += w[8 * k + j] * q * q;
      }
    }
  }
  if (sum_q2 > 0) d = sum_qx / sum_q2;
  const uint16_t d16 = f32_to_fp16(d * 1.1125f);
  sc[0] = static_cast<uint16_t>(sc[0] | ((d16 & 0x000f) << 12));
  sc[1] = static_cast<uint16_t>(sc[1] | ((d16 & 0x00f0) << 8));
  sc[2] = static_cast<uint16_t>(sc[2] | ((d16 & 0x0f00) << 4));
  sc[3] = static_cast<uint16_t>(sc[3] | (d16 & 0xf000));
  std::memcpy(out->scales, sc, sizeof(sc));
}

}  // namespace

void quantize_iq1_s(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  LUMEN_DCHECK(n % kQkK == 0);
  LUMEN_CHECK_MSG(imatrix, "iq1_s needs an importance matrix (the planner refuses the mix without one)");
  auto* out = reinterpret_cast<BlockIQ1_S*>(dst);
  int shifts[kQkK / kSubS];
  std::fill(std::begin(shifts), std::end(shifts), 1);
  for (int64_t b = 0; b < n / kQkK; ++b) quantize_block_iq1_s(x + kQkK * b, imatrix + kQkK * b, shifts, out + b);
}

void quantize_iq1_m(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  LUMEN_DCHECK(n % kQkK == 0);
  auto* out = reinterpret_cast<BlockIQ1_M*>(dst);
  int signs[kQkK / kSubM] = {};
  for (int64_t b = 0; b < n / kQkK; ++b)
    quantize_block_iq1_m(x + kQkK * b, imatrix ? imatrix + kQkK * b : nullptr, signs, out + b);
}

}  // namespace lumen::convert
