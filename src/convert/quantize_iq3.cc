// The 3-bit i-quants iq3_xxs and iq3_s (formats in kernels/quant_blocks.h): 256-value
// super-blocks with an fp16 scale d and a 4-bit scale per group of 32; the magnitudes of every
// 4 consecutive values are one point of a lattice of 4-vectors with odd coordinates
// q = 2l + 1 (l = 0..7), and the signs are stored apart. The lattice is a subset of the 8^4
// possible tuples: 256 points for iq3_xxs (kIq3xxsGrid), 512 for iq3_s (kIq3sGrid).
//
// Per group of 32 (ggml's quantize_row_iq3_xxs_impl / quantize_row_iq3_s_impl):
//   w       imatrix * sqrt(sigma2 + x^2) with an importance matrix (sigma2 = 2 mean(x^2) of the
//           super-block), x^2 without; tuples are matched under sqrt(w)
//   signs   a = |x|, the signs kept apart. iq3_xxs keeps 7 sign bits per 8 values and derives
//           the eighth from an even count of negatives: in an 8-run with an odd count, the
//           value with the least w x^2 (the first on ties) is quantized with its sign wrong,
//           i.e. its magnitude enters the fit negated
//   search  inverse scales id = (15 + 0.2 k) / max(a), k = -15..15 (iq3_xxs) or -9..9 (iq3_s):
//           levels l = clamp(round((id a - 1) / 2), 0, 7); a tuple that is not a lattice point
//           takes the best of its neighbours (below) at scale 1/id. The levels of the k with
//           the largest gain sum(w q a)^2 / sum(w q^2) are kept, with their least-squares scale
//   refine  if a kept tuple was off the lattice and the scale is positive: tuples re-derived at
//           that scale (iq3_xxs: only the off-lattice ones; iq3_s: all), then the least-squares
//           scale again
//   super   d = max group scale / 31, stored as fp16(d * 1.0125) (iq3_xxs) or fp16(d * 1.033)
//           (iq3_s); each group's 4-bit scale is clamp(round((s / d - 1) / 2), 0, 15)
//
// Neighbours of an off-lattice tuple: the lattice points at its 2 (iq3_xxs) or 3 (iq3_s)
// smallest squared distances, in (distance, point index) order; the first with the least
// sum sqrt(w) (scale q - a)^2 wins (ties keep the earlier).
//
// ggml's quirks, kept so the bytes are the same:
//   - iq3_xxs: when no k of the search has a positive gain (values so small that the sums
//     underflow), the levels and on-lattice flags of the row's previous group are used; an
//     all-zero group (max(a) < 1e-8) zeroes the levels but not the flags. ggml starts a row
//     with them uninitialised; here with zero levels, all off the lattice.
//   - iq3_s: an all-zero group (max(a) == 0) does not advance the position qs and signs are
//     written at, so the next groups' indices and signs land one slot early (their qh bits
//     and scales stay at their own group).
// Where ggml aborts (a huge value makes a weight infinite, so every neighbour's error is inf
// or NaN, or a scale NaN), lumen takes the first neighbour, or scale 0.
#include <algorithm>
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

using kernels::BlockIQ3_S;
using kernels::BlockIQ3_XXS;
using kernels::kQkK;

constexpr int kGroup = 32;              // values per 4-bit scale
constexpr int kGroups = kQkK / kGroup;  // 8 per super-block
constexpr int kTuples = kGroup / 4;     // lattice points per group
constexpr int kMaxLevel = 7;            // l in 0..7, q = 2l + 1
constexpr float kXxsGroupMaxEps = 1e-8f;

// A lattice and its search tables, built once from the dequantization grid; a tuple's code
// holds element i's level at bits 3i.
using Iq3Lattice = IqLattice<4, kMaxLevel>;

const Iq3Lattice& xxs_lattice() {
  // kIq3xxsGrid holds the dequantized magnitudes 4, 12, .., 52, 62 for levels 0..7.
  static const Iq3Lattice lat(kernels::kIq3xxsGrid, 256, 2, [](uint8_t b) {
    return b == 62 ? 7 : (b % 8 == 4 ? (b - 4) / 8 : -1);
  });
  return lat;
}

const Iq3Lattice& s_lattice() {
  // kIq3sGrid holds q = 2l + 1 itself.
  static const Iq3Lattice lat(kernels::kIq3sGrid, 512, 3, [](uint8_t b) { return b % 2 == 1 ? (b - 1) / 2 : -1; });
  return lat;
}

// What differs between the two types' group search.
struct GroupSearch {
  const Iq3Lattice& lat;
  int n_steps;     // inverse scales (15 + 0.2 k) / max for k = -n_steps..n_steps
  bool refit_all;  // refine every tuple (iq3_s) or only the off-lattice ones (iq3_xxs)
};

// A group's levels and whether each tuple came out on the lattice in the search. Carried from
// group to group within a row (the iq3_xxs quirk in the header).
struct GroupLevels {
  uint8_t L[kGroup] = {};
  bool on_lattice[kTuples] = {};
};

// The search and refinement of one group with max(a) = amax > 0: returns its scale, levels
// in `kept` (which holds the previous group's when no step has a positive gain).
float fit_group(const GroupSearch& gs, const float* a, const float* w, const float* sw, float amax,
                GroupLevels& kept) {
  float best_gain = 0;
  float scale = amax / 15;
  GroupLevels trial;
  for (int k = -gs.n_steps; k <= gs.n_steps; ++k) {
    const float id = (15 + static_cast<float>(k) * 0.2f) / amax;
    const float trial_scale = 1 / id;
    for (int t = 0; t < kTuples; ++t)
      trial.on_lattice[t] = snap_to_grid(gs.lat, a + 4 * t, sw + 4 * t, id, trial_scale, trial.L + 4 * t);
    float sum_qa, sum_q2;
    weighted_odd_sums(kGroup, w, a, trial.L, &sum_qa, &sum_q2);
    if (sum_q2 > 0 && sum_qa * sum_qa > best_gain * sum_q2) {
      scale = sum_qa / sum_q2;
      best_gain = scale * sum_qa;
      kept = trial;
    }
  }
  const bool all_on = std::all_of(kept.on_lattice, kept.on_lattice + kTuples, [](bool b) { return b; });
  if (all_on || !(scale > 0)) return scale;
  const float id = 1 / scale;
  for (int t = 0; t < kTuples; ++t) {
    if (!gs.refit_all && kept.on_lattice[t]) continue;
    snap_to_grid(gs.lat, a + 4 * t, sw + 4 * t, id, scale, kept.L + 4 * t);
  }
  float sum_qa, sum_q2;
  weighted_odd_sums(kGroup, w, a, kept.L, &sum_qa, &sum_q2);
  if (sum_q2 > 0) scale = sum_qa / sum_q2;
  return scale;
}

// The group at x split for the search: weights w, tuple-matching weights sw = sqrt(w),
// magnitudes a and sign bytes (bit i of signs[r]: value 8r + i is negative; with even_signs
// the even-parity rule of the header). Returns max(a).
float split_group(const float* x, const float* qw, float sigma2, bool even_signs, float* w, float* sw, float* a,
                  uint8_t* signs) {
  for (int i = 0; i < kGroup; ++i) w[i] = qw ? qw[i] * std::sqrt(sigma2 + x[i] * x[i]) : x[i] * x[i];
  for (int i = 0; i < kGroup; ++i) sw[i] = std::sqrt(w[i]);
  for (int r = 0; r < kGroup / 8; ++r) signs[r] = split_signs(x + 8 * r, w + 8 * r, even_signs, a + 8 * r);
  float m = a[0];
  for (int i = 1; i < kGroup; ++i) m = m > a[i] ? m : a[i];
  return m;
}

int lattice_point(const Iq3Lattice& lat, const uint8_t* L) {
  const int p = lat.point_of(Iq3Lattice::code(L));
  LUMEN_DCHECK(p >= 0);  // levels always come from lattice points
  return std::max(p, 0);
}

void quantize_superblock_iq3_xxs(const float* x, const float* qw, GroupLevels& levels, BlockIQ3_XXS* out) {
  const GroupSearch gs{xxs_lattice(), 15, false};
  std::memset(out, 0, sizeof(*out));
  uint8_t* indices = out->qs;                      // [group][tuple]
  uint32_t signs_scale[kGroups] = {};              // 4 x 7 sign bits, scale code at bits 28..31
  float scales[kGroups];
  float max_scale = 0;
  const float sigma2 = super_block_sigma2(x, 2);
  for (int g = 0; g < kGroups; ++g) {
    float w[kGroup], sw[kGroup], a[kGroup];
    uint8_t signs[kGroup / 8];
    const float amax = split_group(x + kGroup * g, qw ? qw + kGroup * g : nullptr, sigma2, true, w, sw, a, signs);
    if (amax < kXxsGroupMaxEps) {
      scales[g] = 0;
      std::memset(levels.L, 0, sizeof(levels.L));
      continue;
    }
    float scale = flip_if_negative(fit_group(gs, a, w, sw, amax, levels), true, signs, kGroup / 8);
    if (!(scale >= 0)) scale = 0;  // NaN: ggml aborts
    for (int t = 0; t < kTuples; ++t)
      indices[kTuples * g + t] = static_cast<uint8_t>(lattice_point(gs.lat, levels.L + 4 * t));
    signs_scale[g] = signs[0] | (signs[1] << 7) | (signs[2] << 14) | (static_cast<uint32_t>(signs[3]) << 21);
    scales[g] = scale;
    max_scale = max_scale > scale ? max_scale : scale;
  }
  if (max_scale == 0) {
    std::memset(out, 0, sizeof(*out));
    return;
  }
  const float d = max_scale / 31;
  out->d_f16 = f32_to_fp16(d * 1.0125f);
  const float id = 1 / d;
  for (int g = 0; g < kGroups; ++g) signs_scale[g] |= static_cast<uint32_t>(odd_level(id, scales[g], 15)) << 28;
  std::memcpy(out->qs + kGroups * kTuples, signs_scale, sizeof(signs_scale));
}

void quantize_superblock_iq3_s(const float* x, const float* qw, GroupLevels& levels, BlockIQ3_S* out) {
  const GroupSearch gs{s_lattice(), 9, true};
  std::memset(out, 0, sizeof(*out));
  float scales[kGroups];
  float max_scale = 0;
  int slot = 0;  // where the next group's qs and signs go (see the header)
  const float sigma2 = super_block_sigma2(x, 2);
  for (int g = 0; g < kGroups; ++g) {
    float w[kGroup], sw[kGroup], a[kGroup];
    uint8_t signs[kGroup / 8];
    const float amax = split_group(x + kGroup * g, qw ? qw + kGroup * g : nullptr, sigma2, false, w, sw, a, signs);
    if (amax == 0) {
      scales[g] = 0;
      continue;
    }
    std::fill(levels.on_lattice, levels.on_lattice + kTuples, false);
    float scale = flip_if_negative(fit_group(gs, a, w, sw, amax, levels), false, signs, kGroup / 8);
    if (!(scale >= 0)) scale = 0;  // NaN: ggml aborts
    for (int t = 0; t < kTuples; ++t) {
      const int p = lattice_point(gs.lat, levels.L + 4 * t);
      out->qs[kTuples * slot + t] = static_cast<uint8_t>(p & 255);
      out->qh[g] = static_cast<uint8_t>(out->qh[g] | ((p >> 8) << t));
    }
    std::memcpy(out->signs + (kGroup / 8) * slot, signs, sizeof(signs));
    ++slot;
    scales[g] = scale;
    max_scale = max_scale > scale ? max_scale : scale;
  }
  if (max_scale == 0) return;
  const float d = max_scale / 31;
  out->d_f16 = f32_to_fp16(d * 1.033f);
  const float id = 1 / d;
  for (int g = 0; g < kGroups; g += 2)
    out->scales[g / 2] = static_cast<uint8_t>(odd_level(id, scales[g], 15) | (odd_level(id, scales[g + 1], 15) << 4));
}

template <typename Block, typename QuantizeSuperBlock>
void quantize_row(const float* x, std::byte* dst, int64_t n, const float* imatrix, QuantizeSuperBlock quantize) {
  LUMEN_DCHECK(n % kQkK == 0);
  auto* out = reinterpret_cast<Block*>(dst);
  GroupLevels levels;  // carried from group to group (the iq3_xxs quirk in the header)
  for (int64_t b = 0; b < n / kQkK; ++b) quantize(x + kQkK * b, imatrix ? imatrix + kQkK * b : nullptr, levels, out + b);
}

}  // namespace

void quantize_iq3_xxs(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  quantize_row<BlockIQ3_XXS>(x, dst, n, imatrix, quantize_superblock_iq3_xxs);
}

void quantize_iq3_s(const float* x, std::byte* dst, int64_t n, const float* imatrix) {
  quantize_row<BlockIQ3_S>(x, dst, n, imatrix, quantize_superblock_iq3_s);
}

}  // namespace lumen::convert
