// The 2-bit i-quants iq2_xxs, iq2_xs and iq2_s (256-value super-blocks, formats in
// kernels/quant_blocks.h). A group of 8 weights is one entry of a lattice grid
// (kernels/iq_grids.h: 256, 512 or 1024 entries whose elements are the odd levels 1, 3, 5 in
// units of a sub-block scale) times a sign per weight. So each group is fitted on |x| and the
// signs are stored apart: iq2_s keeps all 8 sign bits; iq2_xxs / iq2_xs keep 7 and imply the
// 8th by an even count of negatives, flipping the sign of the group's least important weight
// (smallest w x^2, first on ties) when the count is odd, so that weight is fitted as -|x|.
//
// Per sub-block (32 values for iq2_xxs, 16 for the others), as ggml's quantize_row_iq2_*_impl:
//   w        imatrix * sqrt(sigma2 + x^2), sigma2 = mean x^2 of the super-block (iq2_s: twice
//            that; iq2_s without an imatrix: sigma2 / 4 + x^2)
//   tries    for a set of inverse scales id, every element's level is round((id |x| - 1) / 2)
//            clamped to 0..2; a group whose 8 levels are not a grid entry is replaced by the
//            best of its precomputed nearest grid entries under sum sqrt(w) (s q - |x|)^2 at
//            s = 1 / id. The try with the largest weighted least-squares gain
//            sum(w q |x|)^2 / sum(w q^2) wins; its least-squares scale is kept.
//              iq2_xxs: id = (5 + 0.1 k) / (3 s0), k = -6..6, s0 from fit_positive over 0..4
//              iq2_xs / iq2_s: id = (5 + 0.1 k) / max|x|, k = -9..9
//   refit    the groups that were snapped to a neighbour (iq2_xxs: all groups) are re-derived
//            at the winning scale, then the scale is refitted by least squares
//   scales   d = max sub-block scale / 31 (iq2_s stores d * 0.9875), 4-bit sub-block scales
//            l = round((s / d - 1) / 2), decoded as d (2 l + 1) / 4 (iq2_xxs: 8 per 32 values,
//            iq2_xs / iq2_s: per 16)
//
// The neighbour lists: for every 8-tuple of levels 0..2 that is not a grid entry, all grid
// entries at the smallest squared distance (in the odd units) and, except for iq2_s, those at
// the second smallest, by distance then index. They are built once per grid into a
// function-local static.
//
// Every float operation runs in ggml's order (the searches compare sums), with contraction
// off (exact_float.h). ggml's searches carry some state in ways that only matter for degenerate
// sub-blocks (no try with a positive gain: the levels of the previous sub-block stay); that is
// reproduced. Where ggml would abort (a group still off the grid at the end, only possible when
// every weight of a sub-block is 0; no neighbour with a finite distance, only for inf / NaN
// sums), the group is written as grid entry 0 with scale 0, or the first neighbour is taken.
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/fp16.h"
#include "convert/exact_float.h"
#include "convert/quant_search.h"
#include "convert/quantize_types.h"
#include "kernels/iq_grids.h"
#include "kernels/quant_blocks.h"

namespace lumen::convert {
namespace {

using kernels::BlockIQ2_S;
using kernels::BlockIQ2_XS;
using kernels::BlockIQ2_XXS;
using kernels::kQkK;
using kernels::nearest_int;

constexpr int kMaxLevel = 2;          // levels 0..2, i.e. odd values 1, 3, 5
constexpr int kNumCodes = 0xAAAA + 1;  // 8 levels of 2 bits, each <= 2
constexpr float kGroupMaxEpsIq2s = 1e-8f;

// The level code of a group: 2 bits per element, element i in bits 2i..2i+1.
uint16_t level_code(const int8_t* L) {
  uint16_t u = 0;
  for (int i = 0; i < 8; ++i) u = static_cast<uint16_t>(u | (L[i] << (2 * i)));
  return u;
}

// One lattice grid with its search tables.
struct Iq2Grid {
  std::vector<std::array<int8_t, 8>> levels;  // [n_entries][8] levels 0..2 per element
  // [kNumCodes] level code -> grid index (>= 0), or -(1 + offset) of the code's neighbour
  // list in `neighbours` (-0x7fffffff for a code with a level 3, which no search produces)
  std::vector<int32_t> map;
  std::vector<uint16_t> neighbours;  // lists: count, then that many grid indices

  // The grid entry at the smallest weighted distance sum w (s (2 l + 1) - x)^2 among the
  // neighbours of the off-grid code u (first one on ties); its levels go to L.
  // Each term w (s q - x)^2 takes one of 3 values per element, so they are computed once
  // (the same float operations as per candidate) and each candidate's sum adds 8 of them in
  // element order.
  int best_neighbour(uint16_t u, const float* x, const float* w, float s, int8_t* L) const {
    const uint16_t* list = neighbours.data() + (-map[u] - 1);
    float term[8][kMaxLevel + 1];
    for (int i = 0; i < 8; ++i) {
      for (int l = 0; l <= kMaxLevel; ++l) {
        const float diff = s * static_cast<float>(2 * l + 1) - x[i];
        term[i][l] = w[i] * diff * diff;
      }
    }
    float best_d2 = FLT_MAX;
    int best = -1;
    for (int j = 1; j <= list[0]; ++j) {
      const int8_t* l = levels[list[j]].data();
      float d2 = 0;
      for (int i = 0; i < 8; ++i) d2 += term[i][l[i]];
      if (d2 < best_d2) {
        best_d2 = d2;
        best = list[j];
      }
    }
    if (best < 0) best = list[1];  // every sum NaN or inf (ggml asserts); any entry will do
    std::memcpy(L, levels[best].data(), 8);
    return best;
  }
};

// Builds the tables of a grid from its dequantization table (bytes 8, 25, 43 are levels
// 0, 1, 2). n_distances: how many distinct nearest distances each neighbour list spans.
Iq2Grid build_grid(const uint64_t* table, int n_entries, int n_distances) {
  Iq2Grid g;
  g.levels.resize(n_entries);
  g.map.assign(kNumCodes, -0x7fffffff);
  for (int e = 0; e < n_entries; ++e) {
    for (int i = 0; i < 8; ++i) {
      const auto byte = static_cast<uint8_t>(table[e] >> (8 * i));
      LUMEN_CHECK(byte == 8 || byte == 25 || byte == 43);
      g.levels[e][i] = static_cast<int8_t>(byte == 8 ? 0 : byte == 25 ? 1 : 2);
    }
    g.map[level_code(g.levels[e].data())] = e;
  }
  std::vector<int> d2(n_entries);
  for (int u = 0; u < kNumCodes; ++u) {
    int8_t L[8];
    bool valid = true;
    for (int i = 0; i < 8; ++i) {
      L[i] = static_cast<int8_t>((u >> (2 * i)) & 3);
      valid = valid && L[i] <= kMaxLevel;
    }
    if (!valid || g.map[u] >= 0) continue;
    // Levels differ by 1 <-> odd values by 2: distances in odd units are 4x these.
    for (int e = 0; e < n_entries; ++e) {
      int s = 0;
      for (int i = 0; i < 8; ++i) s += (g.levels[e][i] - L[i]) * (g.levels[e][i] - L[i]);
      d2[e] = s;
    }
    g.map[u] = -(1 + static_cast<int32_t>(g.neighbours.size()));
    const size_t count_at = g.neighbours.size();
    g.neighbours.push_back(0);
    int below = -1;  // entries at distances <= below are listed already
    for (int k = 0; k < n_distances; ++k) {
      int next = INT32_MAX;
      for (int e = 0; e < n_entries; ++e)
        if (d2[e] > below) next = std::min(next, d2[e]);
      if (next == INT32_MAX) break;
      for (int e = 0; e < n_entries; ++e)
        if (d2[e] == next) g.neighbours.push_back(static_cast<uint16_t>(e));
      below = next;
    }
    g.neighbours[count_at] = static_cast<uint16_t>(g.neighbours.size() - count_at - 1);
  }
  return g;
}

const Iq2Grid& grid_256() {
  static const Iq2Grid g = build_grid(kernels::kIq2xxsGrid, 256, 2);
  return g;
}
const Iq2Grid& grid_512() {
  static const Iq2Grid g = build_grid(kernels::kIq2xsGrid, 512, 2);
  return g;
}
const Iq2Grid& grid_1024() {
  static const Iq2Grid g = build_grid(kernels::kIq2sGrid, 1024, 1);
  return g;
}

// x^2 summed over the super-block, in order.
float sum_squares(const float* x) {
  float s = 0;
  for (int i = 0; i < kQkK; ++i) s += x[i] * x[i];
  return s;
}

// |x| of a group of 8 into xval with its sign bits; with even_signs, an odd number of
// negatives is made even by fitting the least important weight (smallest w x^2) as -|x|.
// Returns the sign bits (7 with even_signs, the 8th being implied).
uint8_t split_signs(const float* x, const float* w, bool even_signs, float* xval) {
  int n_neg = 0;
  uint8_t s = 0;
  for (int i = 0; i < 8; ++i) {
    if (x[i] >= 0) {
      xval[i] = x[i];
    } else {
      xval[i] = -x[i];
      ++n_neg;
      s = static_cast<uint8_t>(s | (1 << i));
    }
  }
  if (!even_signs) return s;
  if (n_neg % 2) {
    int i_min = 0;
    float min = w[0] * x[0] * x[0];
    for (int i = 1; i < 8; ++i) {
      const float v = w[i] * x[i] * x[i];
      if (v < min) {
        min = v;
        i_min = i;
      }
    }
    xval[i_min] = -xval[i_min];
    s = static_cast<uint8_t>(s ^ (1 << i_min));
  }
  return s & 127;
}

// Levels round((id x - 1) / 2) clamped to 0..2 for a group of 8.
void round_levels(float id, const float* xval, int8_t* L) {
  for (int i = 0; i < 8; ++i) {
    const int l = nearest_int(0.5f * (id * xval[i] - 1));
    L[i] = static_cast<int8_t>(std::max(0, std::min(kMaxLevel, l)));
  }
}

// Puts a group's levels on the grid at scale s (nearest neighbour if off it). Returns
// whether it was on the grid already.
bool snap_group(const Iq2Grid& g, float s, const float* xval, const float* waux, int8_t* L) {
  const uint16_t u = level_code(L);
  if (g.map[u] >= 0) return true;
  g.best_neighbour(u, xval, waux, s, L);
  return false;
}

// sum w x q and sum w q^2 over n values with q = 2 L + 1.
void weighted_sums(int n, const float* w, const float* xval, const int8_t* L, float* sum_qx, float* sum_q2) {
  float qx = 0, q2 = 0;
  for (int i = 0; i < n; ++i) {
    const float q = static_cast<float>(2 * L[i] + 1);
    qx += w[i] * xval[i] * q;
    q2 += w[i] * q * q;
  }
  *sum_qx = qx;
  *sum_q2 = q2;
}

// The grid index of a group's final levels, or -1 if they are off the grid.
int grid_index_of(const Iq2Grid& g, const int8_t* L) {
  for (int i = 0; i < 8; ++i)
    if (L[i] < 0 || L[i] > kMaxLevel) return -1;
  const int32_t idx = g.map[level_code(L)];
  return idx >= 0 ? idx : -1;
}

// 4-bit sub-block scale of s against the super-block scale d (id = 1 / d).
int sub_scale(float id, float s) { return std::max(0, std::min(15, nearest_int(0.5f * (id * s - 1)))); }

float larger(float a, float b) { return a > b ? a : b; }  // ggml's MAX, NaN order included

// --- iq2_xxs: sub-blocks of 32 ------------------------------------------------------------

struct Xxs32 {
  int grid_idx[4];
  uint8_t signs[4];
  float scale;
  bool zero;  // below the all-zero threshold: nothing written
};

// Fits one 32-value sub-block (the search of the header). L: scratch levels.
Xxs32 fit_xxs(const Iq2Grid& g, const float* xb, const float* qw, float sigma2, int8_t* L) {
  constexpr int kN = 32;
  float w[kN], waux[kN], xval[kN];
  int8_t Laux[kN];
  Xxs32 r{};
  for (int i = 0; i < kN; ++i) w[i] = qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]);
  for (int i = 0; i < kN; ++i) waux[i] = std::sqrt(w[i]);
  for (int k = 0; k < 4; ++k) r.signs[k] = split_signs(xb + 8 * k, w + 8 * k, true, xval + 8 * k);
  float max = xval[0];
  for (int i = 1; i < kN; ++i) max = larger(max, xval[i]);
  if (max < kGroupMaxEps) {
    std::memset(L, 0, kN);
    r.zero = true;
    return r;
  }
  float scale = fit_positive(kN, kMaxLevel + 2, xval, reinterpret_cast<uint8_t*>(L), w);
  const float eff_max = scale * (kMaxLevel + 1);
  float best = 0;
  for (int k = -6; k <= 6; ++k) {
    const float id = (5 + k * 0.1f) / eff_max;
    const float this_scale = 1 / id;
    for (int grp = 0; grp < 4; ++grp) {
      round_levels(id, xval + 8 * grp, Laux + 8 * grp);
      snap_group(g, this_scale, xval + 8 * grp, waux + 8 * grp, Laux + 8 * grp);
    }
    float sum_qx, sum_q2;
    weighted_sums(kN, w, xval, Laux, &sum_qx, &sum_q2);
    if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
      scale = sum_qx / sum_q2;
      best = scale * sum_qx;
      std::memcpy(L, Laux, kN);
    }
  }
  if (scale > 0) {
    const float id = 1 / scale;
    for (int grp = 0; grp < 4; ++grp) {
      round_levels(id, xval + 8 * grp, L + 8 * grp);
      snap_group(g, scale, xval + 8 * grp, waux + 8 * grp, L + 8 * grp);
    }
    float sum_qx, sum_q2;
    weighted_sums(kN, w, xval, L, &sum_qx, &sum_q2);
    if (sum_q2 > 0) scale = sum_qx / sum_q2;
  }
  if (scale < 0) {
    scale = -scale;
    for (uint8_t& s : r.signs) s = static_cast<uint8_t>(~s & 127);
  }
  for (int grp = 0; grp < 4; ++grp) {
    r.grid_idx[grp] = grid_index_of(g, L + 8 * grp);
    if (r.grid_idx[grp] < 0) {  // ggml aborts here; see the header
      r.grid_idx[grp] = 0;
      scale = 0;
    }
  }
  r.scale = scale;
  return r;
}

void quantize_block_iq2_xxs(const Iq2Grid& g, const float* x, const float* qw, int8_t* L, BlockIQ2_XXS* out) {
  const float sigma2 = sum_squares(x) / kQkK;
  uint32_t q2[16] = {};
  float scales[kQkK / 32];
  float max_scale = 0;
  for (int ib = 0; ib < kQkK / 32; ++ib) {
    const Xxs32 r = fit_xxs(g, x + 32 * ib, qw + 32 * ib, sigma2, L);
    scales[ib] = r.zero ? 0 : r.scale;
    if (r.zero) continue;
    for (int k = 0; k < 4; ++k) {
      q2[2 * ib] |= static_cast<uint32_t>(r.grid_idx[k]) << (8 * k);
      q2[2 * ib + 1] |= static_cast<uint32_t>(r.signs[k]) << (7 * k);
    }
    max_scale = larger(max_scale, r.scale);
  }
  out->d_f16 = f32_to_fp16(0.f);
  if (max_scale == 0) {
    std::memset(out->qs, 0, sizeof(out->qs));
    return;
  }
  const float d = max_scale / 31;
  out->d_f16 = f32_to_fp16(d);
  const float id = 1 / d;
  for (int ib = 0; ib < kQkK / 32; ++ib) q2[2 * ib + 1] |= static_cast<uint32_t>(sub_scale(id, scales[ib])) << 28;
  std::memcpy(out->qs, q2, sizeof(out->qs));
}

// --- iq2_xs and iq2_s: sub-blocks of 16 --------------------------------------------------

struct Group16 {
  int grid_idx[2];
  uint8_t signs[2];
  float scale;
  bool zero;  // below the all-zero threshold: nothing written
};

struct Fit16Options {
  bool even_signs;  // iq2_xs: 7 stored sign bits
  float eps;        // all-zero threshold on max |x|
  bool clear_levels_on_zero;
};

// Fits one 16-value sub-block with weights w. L: the levels, kept across sub-blocks (a
// sub-block whose every try has no gain reuses them, as ggml does).
Group16 fit_16(const Iq2Grid& g, const float* xb, const float* w, const Fit16Options& opt, int8_t* L) {
  constexpr int kN = 16;
  float waux[kN], xval[kN];
  int8_t Laux[kN];
  Group16 r{};
  for (int i = 0; i < kN; ++i) waux[i] = std::sqrt(w[i]);
  for (int k = 0; k < 2; ++k) r.signs[k] = split_signs(xb + 8 * k, w + 8 * k, opt.even_signs, xval + 8 * k);
  float max = xval[0];
  for (int i = 1; i < kN; ++i) max = larger(max, xval[i]);
  if (max < opt.eps) {
    if (opt.clear_levels_on_zero) std::memset(L, 0, kN);
    r.zero = true;
    return r;
  }
  float best = 0;
  float scale = max / (2 * kMaxLevel + 1);
  bool on_grid[2] = {true, true};
  for (int k = -9; k <= 9; ++k) {
    const float id = (5 + k * 0.1f) / max;
    const float this_scale = 1 / id;
    bool on_grid_aux[2];
    for (int grp = 0; grp < 2; ++grp) {
      round_levels(id, xval + 8 * grp, Laux + 8 * grp);
      on_grid_aux[grp] = snap_group(g, this_scale, xval + 8 * grp, waux + 8 * grp, Laux + 8 * grp);
    }
    float sum_qx, sum_q2;
    weighted_sums(kN, w, xval, Laux, &sum_qx, &sum_q2);
    if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
      scale = sum_qx / sum_q2;
      best = scale * sum_qx;
      std::memcpy(L, Laux, kN);
      on_grid[0] = on_grid_aux[0];
      on_grid[1] = on_grid_aux[1];
    }
  }
  if ((!on_grid[0] || !on_grid[1]) && scale > 0) {
    const float id = 1 / scale;
    for (int grp = 0; grp < 2; ++grp) {
      if (on_grid[grp]) continue;
      round_levels(id, xval + 8 * grp, L + 8 * grp);
      snap_group(g, scale, xval + 8 * grp, waux + 8 * grp, L + 8 * grp);
    }
    float sum_qx, sum_q2;
    weighted_sums(kN, w, xval, L, &sum_qx, &sum_q2);
    if (sum_q2 > 0) scale = sum_qx / sum_q2;
  }
  if (scale < 0) {
    scale = -scale;
    for (uint8_t& s : r.signs) s = static_cast<uint8_t>(opt.even_signs ? ~s & 127 : ~s);
  }
  for (int grp = 0; grp < 2; ++grp) {
    r.grid_idx[grp] = grid_index_of(g, L + 8 * grp);
    if (r.grid_idx[grp] < 0) {  // ggml aborts here; see the header
      r.grid_idx[grp] = 0;
      scale = 0;
    }
  }
  r.scale = scale;
  return r;
}

void quantize_block_iq2_xs(const Iq2Grid& g, const float* x, const float* qw, int8_t* L, BlockIQ2_XS* out) {
  constexpr Fit16Options kOpt{true, kGroupMaxEps, true};
  const float sigma2 = sum_squares(x) / kQkK;
  std::memset(out, 0, sizeof(*out));
  float scales[kQkK / 16];
  float max_scale = 0;
  for (int ib = 0; ib < kQkK / 16; ++ib) {
    const float* xb = x + 16 * ib;
    float w[16];
    for (int i = 0; i < 16; ++i) w[i] = qw[16 * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    const Group16 r = fit_16(g, xb, w, kOpt, L);
    scales[ib] = r.zero ? 0 : r.scale;
    if (r.zero) continue;
    for (int k = 0; k < 2; ++k)
      out->qs[2 * ib + k] = static_cast<uint16_t>(r.grid_idx[k] | (r.signs[k] << 9));
    max_scale = larger(max_scale, r.scale);
  }
  if (max_scale == 0) {
    std::memset(out->qs, 0, sizeof(out->qs));
    return;
  }
  const float d = max_scale / 31;
  out->d_f16 = f32_to_fp16(d);
  const float id = 1 / d;
  for (int ib = 0; ib < kQkK / 16; ++ib)
    out->scales[ib / 2] = static_cast<uint8_t>(out->scales[ib / 2] | (sub_scale(id, scales[ib]) << (4 * (ib % 2))));
}

void quantize_block_iq2_s(const Iq2Grid& g, const float* x, const float* qw, int8_t* L, BlockIQ2_S* out) {
  constexpr Fit16Options kOpt{false, kGroupMaxEpsIq2s, false};
  const float sigma2 = 2 * sum_squares(x) / kQkK;
  std::memset(out, 0, sizeof(*out));
  float scales[kQkK / 16];
  float max_scale = 0;
  for (int ib = 0; ib < kQkK / 16; ++ib) {
    const float* xb = x + 16 * ib;
    float w[16];
    if (qw) {
      for (int i = 0; i < 16; ++i) w[i] = qw[16 * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    } else {
      for (int i = 0; i < 16; ++i) w[i] = 0.25f * sigma2 + xb[i] * xb[i];
    }
    const Group16 r = fit_16(g, xb, w, kOpt, L);
    scales[ib] = r.zero ? 0 : r.scale;
    if (r.zero) continue;
    for (int k = 0; k < 2; ++k) {
      const int i8 = 2 * ib + k;
      out->qs[i8] = static_cast<uint8_t>(r.grid_idx[k] & 255);
      out->qh[i8 / 4] = static_cast<uint8_t>(out->qh[i8 / 4] | ((r.grid_idx[k] >> 8) << (2 * (i8 % 4))));
      out->qs[kQkK / 8 + i8] = r.signs[k];
    }
    max_scale = larger(max_scale, r.scale);
  }
  if (max_scale == 0) return;
  const float d = max_scale / 31;
  out->d_f16 = f32_to_fp16(d * 0.9875f);
  const float id = 1 / d;
  for (int ib = 0; ib < kQkK / 16; ++ib)
    out->scales[ib / 2] = static_cast<uint8_t>(out->scales[ib / 2] | (sub_scale(id, scales[ib]) << (4 * (ib % 2))));
}

}  // namespace

void quantize_iq2_xxs(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  LUMEN_DCHECK(n % kQkK == 0);
  LUMEN_CHECK_MSG(imatrix != nullptr, "iq2_xxs needs an importance matrix");
  const Iq2Grid& g = grid_256();
  int8_t L[32] = {};
  auto* out = reinterpret_cast<BlockIQ2_XXS*>(dst);
  for (int64_t b = 0; b < n / kQkK; ++b) quantize_block_iq2_xxs(g, x + kQkK * b, imatrix + kQkK * b, L, out + b);
}

void quantize_iq2_xs(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  LUMEN_DCHECK(n % kQkK == 0);
  LUMEN_CHECK_MSG(imatrix != nullptr, "iq2_xs needs an importance matrix");
  const Iq2Grid& g = grid_512();
  int8_t L[16] = {};
  auto* out = reinterpret_cast<BlockIQ2_XS*>(dst);
  for (int64_t b = 0; b < n / kQkK; ++b) quantize_block_iq2_xs(g, x + kQkK * b, imatrix + kQkK * b, L, out + b);
}

void quantize_iq2_s(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  LUMEN_DCHECK(n % kQkK == 0);
  const Iq2Grid& g = grid_1024();
  int8_t L[16] = {};
  auto* out = reinterpret_cast<BlockIQ2_S*>(dst);
  for (int64_t b = 0; b < n / kQkK; ++b)
    quantize_block_iq2_s(g, x + kQkK * b, imatrix ? imatrix + kQkK * b : nullptr, L, out + b);
}

}  // namespace lumen::convert
