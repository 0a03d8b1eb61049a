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
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/fp16.h"
#include "convert/exact_float.h"
#include "convert/iq_lattice.h"
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

constexpr int kMaxLevel = 2;  // levels 0..2, i.e. odd values 1, 3, 5
constexpr float kGroupMaxEpsIq2s = 1e-8f;

using Iq2Grid = IqLattice<8, kMaxLevel>;

// The dequantization tables hold bytes 8, 25, 43 for levels 0, 1, 2. n_shells: how many
// distinct nearest distances each neighbour list spans.
Iq2Grid build_grid(const uint64_t* table, int n_points, int n_shells) {
  return Iq2Grid(table, n_points, n_shells, [](uint8_t b) { return b == 8 ? 0 : b == 25 ? 1 : b == 43 ? 2 : -1; });
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

// The grid index of a group's final levels, or -1 if they are off the grid (levels up to 4
// come from fit_positive when no try of iq2_xxs had a gain).
int grid_index_of(const Iq2Grid& g, const uint8_t* L) {
  for (int i = 0; i < 8; ++i)
    if (L[i] > kMaxLevel) return -1;
  return g.point_of(Iq2Grid::code(L));
}

float larger(float a, float b) { return a > b ? a : b; }  // ggml's MAX, NaN order included

// --- one sub-block: 32 values (iq2_xxs) or 16 (iq2_xs, iq2_s) -----------------------------

// What differs between the three types' sub-block search (the header's tries and refit).
struct SubBlockOptions {
  bool even_signs;            // iq2_xxs, iq2_xs: 7 stored sign bits per group
  float eps;                  // all-zero threshold on max |x|
  bool clear_levels_on_zero;  // an all-zero sub-block zeroes the carried levels
  bool start_from_fit_positive;  // iq2_xxs: tries around fit_positive's scale; else around max |x|
  int n_steps;                // tries k = -n_steps..n_steps
  bool refit_all;             // iq2_xxs: refit every group; else only the ones snapped to a neighbour
};

constexpr SubBlockOptions kXxsOptions{true, kGroupMaxEps, true, true, 6, true};
constexpr SubBlockOptions kXsOptions{true, kGroupMaxEps, true, false, 9, false};
constexpr SubBlockOptions kSOptions{false, kGroupMaxEpsIq2s, false, false, 9, false};

template <int kGroups>
struct SubBlockFit {
  int grid_idx[kGroups];
  uint8_t signs[kGroups];
  float scale;
  bool zero;  // below the all-zero threshold: nothing written
};

// Fits one sub-block of kGroups groups of 8 with weights w (the search of the header). L: the
// levels, kept across sub-blocks (a sub-block whose every try has no gain reuses them, as ggml
// does).
template <int kGroups>
SubBlockFit<kGroups> fit_sub_block(const Iq2Grid& g, const float* xb, const float* w, const SubBlockOptions& opt,
                                   uint8_t* L) {
  constexpr int kN = 8 * kGroups;
  float waux[kN], xval[kN];
  uint8_t Laux[kN];
  SubBlockFit<kGroups> r{};
  for (int i = 0; i < kN; ++i) waux[i] = std::sqrt(w[i]);
  for (int k = 0; k < kGroups; ++k) r.signs[k] = split_signs(xb + 8 * k, w + 8 * k, opt.even_signs, xval + 8 * k);
  float max = xval[0];
  for (int i = 1; i < kN; ++i) max = larger(max, xval[i]);
  if (max < opt.eps) {
    if (opt.clear_levels_on_zero) std::memset(L, 0, kN);
    r.zero = true;
    return r;
  }
  float scale, eff_max;
  if (opt.start_from_fit_positive) {
    scale = fit_positive(kN, kMaxLevel + 2, xval, L, w);
    eff_max = scale * (kMaxLevel + 1);
  } else {
    scale = max / (2 * kMaxLevel + 1);
    eff_max = max;
  }
  float best = 0;
  bool on_grid[kGroups];
  std::fill(on_grid, on_grid + kGroups, true);
  for (int k = -opt.n_steps; k <= opt.n_steps; ++k) {
    const float id = (5 + k * 0.1f) / eff_max;
    const float this_scale = 1 / id;
    bool on_grid_aux[kGroups];
    for (int grp = 0; grp < kGroups; ++grp)
      on_grid_aux[grp] = snap_to_grid(g, xval + 8 * grp, waux + 8 * grp, id, this_scale, Laux + 8 * grp);
    float sum_qx, sum_q2;
    weighted_odd_sums(kN, w, xval, Laux, &sum_qx, &sum_q2);
    if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
      scale = sum_qx / sum_q2;
      best = scale * sum_qx;
      std::memcpy(L, Laux, kN);
      std::copy(on_grid_aux, on_grid_aux + kGroups, on_grid);
    }
  }
  const bool all_on_grid = std::all_of(on_grid, on_grid + kGroups, [](bool b) { return b; });
  if ((opt.refit_all || !all_on_grid) && scale > 0) {
    const float id = 1 / scale;
    for (int grp = 0; grp < kGroups; ++grp) {
      if (!opt.refit_all && on_grid[grp]) continue;
      snap_to_grid(g, xval + 8 * grp, waux + 8 * grp, id, scale, L + 8 * grp);
    }
    float sum_qx, sum_q2;
    weighted_odd_sums(kN, w, xval, L, &sum_qx, &sum_q2);
    if (sum_q2 > 0) scale = sum_qx / sum_q2;
  }
  scale = flip_if_negative(scale, opt.even_signs, r.signs, kGroups);
  for (int grp = 0; grp < kGroups; ++grp) {
    r.grid_idx[grp] = grid_index_of(g, L + 8 * grp);
    if (r.grid_idx[grp] < 0) {  // ggml aborts here; see the header
      r.grid_idx[grp] = 0;
      scale = 0;
    }
  }
  r.scale = scale;
  return r;
}

// Fits the kQkK / (8 kGroups) sub-blocks of a super-block under the weights of the header
// (qw null: iq2_s's weights without an imatrix). Returns the largest scale.
template <int kGroups>
float fit_super_block(const Iq2Grid& g, const float* x, const float* qw, float sigma2, const SubBlockOptions& opt,
                      uint8_t* L, SubBlockFit<kGroups>* fits) {
  constexpr int kN = 8 * kGroups;
  float max_scale = 0;
  for (int ib = 0; ib < kQkK / kN; ++ib) {
    const float* xb = x + kN * ib;
    float w[kN];
    if (qw) {
      for (int i = 0; i < kN; ++i) w[i] = qw[kN * ib + i] * std::sqrt(sigma2 + xb[i] * xb[i]);
    } else {
      for (int i = 0; i < kN; ++i) w[i] = 0.25f * sigma2 + xb[i] * xb[i];
    }
    fits[ib] = fit_sub_block<kGroups>(g, xb, w, opt, L);
    if (fits[ib].zero) fits[ib].scale = 0;
    else max_scale = larger(max_scale, fits[ib].scale);
  }
  return max_scale;
}

// --- the three block layouts --------------------------------------------------------------

void quantize_block_iq2_xxs(const Iq2Grid& g, const float* x, const float* qw, uint8_t* L, BlockIQ2_XXS* out) {
  SubBlockFit<4> fits[kQkK / 32];
  const float max_scale = fit_super_block(g, x, qw, super_block_sigma2(x, 1), kXxsOptions, L, fits);
  out->d_f16 = f32_to_fp16(0.f);
  if (max_scale == 0) {
    std::memset(out->qs, 0, sizeof(out->qs));
    return;
  }
  uint32_t q2[16] = {};
  for (int ib = 0; ib < kQkK / 32; ++ib) {
    if (fits[ib].zero) continue;
    for (int k = 0; k < 4; ++k) {
      q2[2 * ib] |= static_cast<uint32_t>(fits[ib].grid_idx[k]) << (8 * k);
      q2[2 * ib + 1] |= static_cast<uint32_t>(fits[ib].signs[k]) << (7 * k);
    }
  }
  const float d = max_scale / 31;
  out->d_f16 = f32_to_fp16(d);
  const float id = 1 / d;
  for (int ib = 0; ib < kQkK / 32; ++ib)
    q2[2 * ib + 1] |= static_cast<uint32_t>(odd_level(id, fits[ib].scale, 15)) << 28;
  std::memcpy(out->qs, q2, sizeof(out->qs));
}

// iq2_xs and iq2_s: 4-bit scales of the 16 sub-blocks against d = max_scale / 31, two a byte.
void pack_scales_16(float max_scale, const SubBlockFit<2>* fits, uint8_t* scales) {
  const float id = 1 / (max_scale / 31);
  for (int ib = 0; ib < kQkK / 16; ++ib)
    scales[ib / 2] = static_cast<uint8_t>(scales[ib / 2] | (odd_level(id, fits[ib].scale, 15) << (4 * (ib % 2))));
}

void quantize_block_iq2_xs(const Iq2Grid& g, const float* x, const float* qw, uint8_t* L, BlockIQ2_XS* out) {
  std::memset(out, 0, sizeof(*out));
  SubBlockFit<2> fits[kQkK / 16];
  const float max_scale = fit_super_block(g, x, qw, super_block_sigma2(x, 1), kXsOptions, L, fits);
  if (max_scale == 0) return;
  for (int ib = 0; ib < kQkK / 16; ++ib) {
    if (fits[ib].zero) continue;
    for (int k = 0; k < 2; ++k)
      out->qs[2 * ib + k] = static_cast<uint16_t>(fits[ib].grid_idx[k] | (fits[ib].signs[k] << 9));
  }
  out->d_f16 = f32_to_fp16(max_scale / 31);
  pack_scales_16(max_scale, fits, out->scales);
}

void quantize_block_iq2_s(const Iq2Grid& g, const float* x, const float* qw, uint8_t* L, BlockIQ2_S* out) {
  std::memset(out, 0, sizeof(*out));
  SubBlockFit<2> fits[kQkK / 16];
  const float max_scale = fit_super_block(g, x, qw, super_block_sigma2(x, 2), kSOptions, L, fits);
  // ggml writes the grid indices and signs before it knows the super-block is all zero.
  for (int ib = 0; ib < kQkK / 16; ++ib) {
    if (fits[ib].zero) continue;
    for (int k = 0; k < 2; ++k) {
      const int i8 = 2 * ib + k;
      out->qs[i8] = static_cast<uint8_t>(fits[ib].grid_idx[k] & 255);
      out->qh[i8 / 4] = static_cast<uint8_t>(out->qh[i8 / 4] | ((fits[ib].grid_idx[k] >> 8) << (2 * (i8 % 4))));
      out->qs[kQkK / 8 + i8] = fits[ib].signs[k];
    }
  }
  if (max_scale == 0) return;
  out->d_f16 = f32_to_fp16(max_scale / 31 * 0.9875f);
  pack_scales_16(max_scale, fits, out->scales);
}

// Quantizes a row super-block by super-block (qw null without an imatrix).
template <typename Block>
void quantize_row(const Iq2Grid& g, const float* x, std::byte* dst, int64_t n, const float* imatrix,
                  void (*quantize_block)(const Iq2Grid&, const float*, const float*, uint8_t*, Block*)) {
  LUMEN_DCHECK(n % kQkK == 0);
  uint8_t L[32] = {};  // levels carried from sub-block to sub-block (see fit_sub_block)
  auto* out = reinterpret_cast<Block*>(dst);
  for (int64_t b = 0; b < n / kQkK; ++b)
    quantize_block(g, x + kQkK * b, imatrix ? imatrix + kQkK * b : nullptr, L, out + b);
}

}  // namespace

void quantize_iq2_xxs(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  LUMEN_CHECK_MSG(imatrix != nullptr, "iq2_xxs needs an importance matrix");
  quantize_row(grid_256(), x, dst, n, imatrix, quantize_block_iq2_xxs);
}

void quantize_iq2_xs(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  LUMEN_CHECK_MSG(imatrix != nullptr, "iq2_xs needs an importance matrix");
  quantize_row(grid_512(), x, dst, n, imatrix, quantize_block_iq2_xs);
}

void quantize_iq2_s(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  quantize_row(grid_1024(), x, dst, n, imatrix, quantize_block_iq2_s);
}

}  // namespace lumen::convert
