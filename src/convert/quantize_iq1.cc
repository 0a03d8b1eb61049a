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

#include "base/check.h"
#include "base/fp16.h"
#include "convert/exact_float.h"
#include "convert/iq_lattice.h"
#include "convert/quantize_types.h"
#include "kernels/iq_grids.h"
#include "kernels/quant_blocks.h"

namespace lumen::convert {
namespace {

using kernels::BlockIQ1_M;
using kernels::BlockIQ1_S;
using kernels::kQkK;

constexpr float kDelta = 0.125f;

// The grid with levels 0, 1, 2 for -1, 0, 1 (a code: level j at bits 2j), each off-grid
// code's neighbours at its 3 smallest distances.
using Iq1Grid = IqLattice<8, 2>;

const Iq1Grid& grid() {
  static const Iq1Grid g(kernels::kIq1sGrid, 2048, 3, [](uint8_t b) { return static_cast<int8_t>(b) + 1; });
  return g;
}

// The level values for a delta sign: xx[level] = level - 1 + sign * delta.
struct Levels {
  float v[3];
};
constexpr Levels kPlus = {{-1 + kDelta, kDelta, 1 + kDelta}};
constexpr Levels kMinus = {{-1 - kDelta, -kDelta, 1 - kDelta}};

// The grid index of group L (8 levels), moving it to the neighbour with the least
// sum w (scale q - x)^2 (first on ties) if it is off the grid; `moved` is set then.
int group_index(const float* x, const float* w, float scale, const Levels& xx, uint8_t* L, bool* moved) {
  const Iq1Grid& g = grid();
  const int code = Iq1Grid::code(L);
  if (g.point_of(code) >= 0) return g.point_of(code);
  *moved = true;
  return g.best_neighbour(code, x, w, scale, xx.v, L);
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
void levels_from_cuts(const int* order, int n, int i1, int i2, uint8_t* L) {
  for (int j = 0; j < n; ++j) L[order[j]] = static_cast<uint8_t>(j < i1 ? 0 : j < i2 ? 1 : 2);
}

void super_block_weights(const float* x, const float* qw, int n, float sigma2, float* w) {
  for (int i = 0; i < n; ++i) w[i] = qw ? qw[i] * std::sqrt(sigma2 + x[i] * x[i]) : x[i] * x[i];
}

float max_abs(const float* x, int n) {
  float m = std::fabs(x[0]);
  for (int i = 1; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// A fitted sub-block (iq1_s: 4 groups of 8, iq1_m: 2).
struct SubBlockFit {
  float scale = 0;
  bool negative[4] = {};  // delta sign of each group of 8 (iq1_s: all alike)
  uint16_t index[4] = {};  // grid index of each group
};

// The end of both searches: the levels of the winning cuts (i1, i2) of the n sorted values,
// flipped with a negative scale (l -> 2 - l, every delta sign negated), each group of 8 put on
// the grid (index[k]), and the scale refit by least squares if a group moved. negative[k]:
// the delta sign of group k. Returns the scale.
float place_on_grid(const float* xb, const float* w, int n, const int* order, int i1, int i2, float scale,
                    bool* negative, uint16_t* index) {
  uint8_t L[32];
  levels_from_cuts(order, n, i1, i2, L);
  if (scale < 0) {
    for (int j = 0; j < n; ++j) L[j] = static_cast<uint8_t>(2 - L[j]);
    scale = -scale;
    for (int k = 0; k < n / 8; ++k) negative[k] = !negative[k];
  }
  bool moved = false;
  for (int k = 0; k < n / 8; ++k)
    index[k] = static_cast<uint16_t>(
        group_index(xb + 8 * k, w + 8 * k, scale, negative[k] ? kMinus : kPlus, L + 8 * k, &moved));
  if (moved) {
    float sum_qx = 0, sum_q2 = 0;
    for (int k = 0; k < n / 8; ++k) {
      const Levels& xx = negative[k] ? kMinus : kPlus;
      const uint8_t* l = grid().levels(index[k]);
      for (int j = 0; j < 8; ++j) {
        const float wj = w[8 * k + j];
        const float q = xx.v[l[j]];
        sum_qx += wj * q * xb[8 * k + j];
        sum_q2 += wj * q * q;
      }
    }
    if (sum_qx > 0 && sum_q2 > 0) scale = sum_qx / sum_q2;
  }
  return scale;
}

// The best candidate of a cut search so far: the one with the largest gain
// sum(w q x)^2 / sum(w q^2) (compared without dividing, as ggml), its least-squares scale,
// its cuts and its sign choice.
struct BestCut {
  float best = -FLT_MIN, scale = 0;
  int i1 = -1, i2 = -1, signs = 0;
  void offer(float sum_qx, float sum_q2, int c1, int c2, int s) {
    if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
      scale = sum_qx / sum_q2;
      best = scale * sum_qx;
      i1 = c1;
      i2 = c2;
      signs = s;
    }
  }
};

// ---- iq1_s ----

constexpr int kSubS = 32;
constexpr float kEpsS = 1e-12f;

// The search of one 32-value sub-block with max |x| >= kEpsS. False if no split has a
// positive sum(w q^2) (only with zero or non-finite weights; ggml aborts there).
bool fit_sub_block_s(const float* xb, const float* w, SubBlockFit* out) {
  int order[kSubS];
  sort_indices(xb, kSubS, order);
  float sum_x[kSubS + 1], sum_w[kSubS + 1];
  sum_x[0] = sum_w[0] = 0;
  for (int j = 0; j < kSubS; ++j) {
    const int i = order[j];
    sum_x[j + 1] = sum_x[j] + w[i] * xb[i];
    sum_w[j + 1] = sum_w[j] + w[i];
  }
  BestCut cut;
  for (int i1 = 0; i1 <= kSubS; ++i1) {
    for (int i2 = i1; i2 <= kSubS; ++i2) {
      const float x0 = sum_x[i1] - sum_x[0], x1 = sum_x[i2] - sum_x[i1], x2 = sum_x[kSubS] - sum_x[i2];
      const float w0 = sum_w[i1] - sum_w[0], w1 = sum_w[i2] - sum_w[i1], w2 = sum_w[kSubS] - sum_w[i2];
      for (int sign : {1, -1}) {
        const float* q = sign == 1 ? kPlus.v : kMinus.v;
        const float sum_qx = x0 * q[0] + x1 * q[1] + x2 * q[2];
        const float sum_q2 = w0 * q[0] * q[0] + w1 * q[1] * q[1] + w2 * q[2] * q[2];
        cut.offer(sum_qx, sum_q2, i1, i2, sign);
      }
    }
  }
  if (cut.i1 < 0) return false;
  std::fill(out->negative, out->negative + kSubS / 8, cut.signs == -1);
  out->scale = place_on_grid(xb, w, kSubS, order, cut.i1, cut.i2, cut.scale, out->negative, out->index);
  return true;
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

// The search of one 16-value sub-block with max |x| >= kEpsM; false as fit_sub_block_s.
//
// The sums of a candidate (cuts i1 <= i2, signs) run over the sorted positions in order; the
// part before i1 and the part from i1 to i2 are running sums shared between candidates, the
// part from i2 on is summed per candidate, so every sum is the same float sequence as
// summing the candidate element by element.
bool fit_sub_block_m(const float* xb, const float* w, SubBlockFit* out) {
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
  BestCut cut;
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
        cut.offer(sum_qx, sum_q2, i1, i2, s);
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
  if (cut.i1 < 0) return false;
  out->negative[0] = cut.signs >= 2;  // as group_levels
  out->negative[1] = (cut.signs & 1) != 0;
  out->scale = place_on_grid(xb, w, kSubM, order, cut.i1, cut.i2, cut.scale, out->negative, out->index);
  return true;
}

// A super-block's sub-blocks, fitted.
struct SuperBlockFit {
  float w[kQkK];                 // the weights of the header
  float scales[kQkK / 16];       // [n_sub_blocks]
  uint16_t index[kQkK / 8];      // grid index per group of 8
  float max_scale;
};

// The search of every sub-block of kSub values with max |x| >= eps. A sub-block that is
// skipped or whose search fails gets scale 0 and grid index 0, and keeps the delta signs in
// `negative` ([kQkK / 8], one per group of 8, carried along the row).
template <int kSub>
void fit_super_block(const float* x, const float* qw, float eps, bool (*fit)(const float*, const float*, SubBlockFit*),
                     bool* negative, SuperBlockFit* f) {
  constexpr int kGroupsPerSub = kSub / 8;
  super_block_weights(x, qw, kQkK, super_block_sigma2(x, 2), f->w);
  f->max_scale = 0;
  std::fill(f->index, f->index + kQkK / 8, 0);
  for (int ib = 0; ib < kQkK / kSub; ++ib) {
    const float* xb = x + kSub * ib;
    f->scales[ib] = 0;
    if (max_abs(xb, kSub) < eps) continue;
    SubBlockFit sb;
    if (!fit(xb, f->w + kSub * ib, &sb)) continue;
    std::copy(sb.index, sb.index + kGroupsPerSub, f->index + kGroupsPerSub * ib);
    std::copy(sb.negative, sb.negative + kGroupsPerSub, negative + kGroupsPerSub * ib);
    f->scales[ib] = sb.scale;
    f->max_scale = std::max(f->max_scale, sb.scale);
  }
}

// `negative`: the delta sign last chosen for each group position in this row.
void quantize_block_iq1_s(const float* x, const float* qw, bool* negative, BlockIQ1_S* out) {
  std::memset(out, 0, sizeof(*out));
  SuperBlockFit f;
  fit_super_block<kSubS>(x, qw, kEpsS, fit_sub_block_s, negative, &f);
  for (int ib = 0; ib < kQkK / kSubS; ++ib) {
    uint16_t h = 0;
    for (int k = 0; k < kSubS / 8; ++k) {
      const uint16_t index = f.index[(kSubS / 8) * ib + k];
      out->qs[(kSubS / 8) * ib + k] = static_cast<uint8_t>(index & 255);
      h = static_cast<uint16_t>(h | ((index >> 8) << (3 * k)));
    }
    out->qh[ib] = h;
  }
  if (f.max_scale == 0) return;
  const float d = f.max_scale / 15;
  out->d_f16 = f32_to_fp16(d * 1.125f);
  const float id = 1 / d;
  for (int ib = 0; ib < kQkK / kSubS; ++ib) {
    int l = odd_level(id, f.scales[ib], 7);
    if (negative[(kSubS / 8) * ib]) l |= 8;
    out->qh[ib] = static_cast<uint16_t>(out->qh[ib] | (l << 12));
  }
}

// `negative`: the delta sign last chosen for each group position in this row.
void quantize_block_iq1_m(const float* x, const float* qw, bool* negative, BlockIQ1_M* out) {
  std::memset(out, 0, sizeof(*out));
  SuperBlockFit f;
  fit_super_block<kSubM>(x, qw, kEpsM, fit_sub_block_m, negative, &f);
  for (int ib = 0; ib < kQkK / kSubM; ++ib) {
    out->qs[2 * ib + 0] = static_cast<uint8_t>(f.index[2 * ib] & 255);
    out->qs[2 * ib + 1] = static_cast<uint8_t>(f.index[2 * ib + 1] & 255);
    out->qh[ib] = static_cast<uint8_t>((f.index[2 * ib] >> 8) | ((f.index[2 * ib + 1] >> 8) << 4));
  }
  if (f.max_scale == 0) return;
  // Refit d over the super-block with every sub-block's 3-bit scale and grid points.
  uint16_t sc[4] = {};
  float d = f.max_scale / 15;
  const float id = 1 / d;
  float sum_qx = 0, sum_q2 = 0;
  for (int ib = 0; ib < kQkK / kSubM; ++ib) {
    const int l = odd_level(id, f.scales[ib], 7);
    sc[ib / 4] = static_cast<uint16_t>(sc[ib / 4] | (l << (3 * (ib % 4))));
    out->qh[ib] = static_cast<uint8_t>(out->qh[ib] | (negative[2 * ib] << 3) | (negative[2 * ib + 1] << 7));
    for (int k = 0; k < 2; ++k) {
      const int i8 = 2 * ib + k;
      const Levels& xx = negative[i8] ? kMinus : kPlus;
      const uint8_t* gl = grid().levels(f.index[i8]);
      for (int j = 0; j < 8; ++j) {
        const float q = xx.v[gl[j]] * static_cast<float>(2 * l + 1);
        sum_qx += f.w[8 * i8 + j] * q * x[8 * i8 + j];
        sum_q2 += f.w[8 * i8 + j] * q * q;
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
  bool negative[kQkK / 8] = {};
  for (int64_t b = 0; b < n / kQkK; ++b) quantize_block_iq1_s(x + kQkK * b, imatrix + kQkK * b, negative, out + b);
}

void quantize_iq1_m(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  LUMEN_DCHECK(n % kQkK == 0);
  auto* out = reinterpret_cast<BlockIQ1_M*>(dst);
  bool negative[kQkK / 8] = {};
  for (int64_t b = 0; b < n / kQkK; ++b)
    quantize_block_iq1_m(x + kQkK * b, imatrix ? imatrix + kQkK * b : nullptr, negative, out + b);
}

}  // namespace lumen::convert
