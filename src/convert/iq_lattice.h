// What the i-quant quantizers (quantize_iq1.cc, quantize_iq2.cc, quantize_iq3.cc) share: a
// lattice grid with its search tables, and the small steps of their searches.
//
// A grid (kernels/iq_grids.h) is a list of points, each a tuple of kDim levels 0..kMaxLevel
// (a group of kDim values is stored as the index of one point). A tuple of levels has a code,
// level i at bits kBits * i. A search rounds a group to a tuple; when that tuple is not a
// point, it takes the best of the tuple's neighbours: the points at its n_shells smallest
// squared distances (in levels), by distance then point index. That order decides equal
// errors, so it is ggml's; n_shells is ggml's per type (iq1: 3, iq2_xxs / iq2_xs: 2, iq2_s: 1,
// iq3_xxs: 2, iq3_s: 3).
//
// Every float operation runs in ggml's order, contraction off (exact_float.h): the searches
// compare sums, and a sum rounded differently can pick another candidate.
#pragma once

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "convert/exact_float.h"
#include "kernels/quant_blocks.h"

namespace lumen::convert {

template <int kDim, int kMaxLevel>
class IqLattice {
 public:
  static constexpr int kBits = std::bit_width(static_cast<unsigned>(kMaxLevel));
  static constexpr int kNumCodes = [] {  // 1 + the code of (kMaxLevel, .., kMaxLevel)
    int c = 0;
    for (int i = 0; i < kDim; ++i) c |= kMaxLevel << (kBits * i);
    return c + 1;
  }();

  // `grid[p]` holds point p's kDim elements, element i in byte i; level_of(byte) is its level.
  template <typename Word, typename LevelOf>
  IqLattice(const Word* grid, int n_points, int n_shells, LevelOf level_of) : levels_(size_t(n_points) * kDim) {
    LUMEN_CHECK(n_points <= INT16_MAX);
    for (int p = 0; p < n_points; ++p) {
      for (int i = 0; i < kDim; ++i) {
        const int l = level_of(static_cast<uint8_t>(grid[p] >> (8 * i)));
        LUMEN_CHECK(l >= 0 && l <= kMaxLevel);
        levels_[kDim * p + i] = static_cast<uint8_t>(l);
      }
    }
    build_tables(n_points, n_shells);
  }
  IqLattice(const IqLattice&) = delete;
  IqLattice& operator=(const IqLattice&) = delete;

  static int code(const uint8_t* L) {
    int c = 0;
    for (int i = 0; i < kDim; ++i) c |= L[i] << (kBits * i);
    return c;
  }
  // The point with these levels, -1 off the grid. code < kNumCodes.
  int point_of(int code) const { return point_of_[code]; }
  const uint8_t* levels(int point) const { return levels_.data() + kDim * point; }

  // The neighbour of the off-grid `code` with the least sum w[i] (scale value[l_i] - x[i])^2,
  // the first one on ties (and the first if every sum is NaN or inf, where ggml asserts); its
  // levels go to L.
  // Each term takes one of kMaxLevel + 1 values per element, so they are computed once (the
  // same float operations as per candidate) and a candidate's sum adds kDim of them in order.
  int best_neighbour(int code, const float* x, const float* w, float scale, const float* value, uint8_t* L) const {
    const uint32_t begin = nb_begin_[code], end = nb_begin_[code + 1];
    LUMEN_DCHECK(end > begin);
    float term[kDim][kMaxLevel + 1];
    for (int i = 0; i < kDim; ++i) {
      for (int l = 0; l <= kMaxLevel; ++l) {
        const float diff = scale * value[l] - x[i];
        term[i][l] = w[i] * diff * diff;
      }
    }
    float best_err = FLT_MAX;
    int best = nb_[begin];
    for (uint32_t j = begin; j < end; ++j) {
      const uint8_t* lv = levels(nb_[j]);
      float err = 0;
      for (int i = 0; i < kDim; ++i) err += term[i][lv[i]];
      if (err < best_err) {
        best_err = err;
        best = nb_[j];
      }
    }
    std::memcpy(L, levels(best), kDim);
    return best;
  }

 private:
  void build_tables(int n_points, int n_shells) {
    point_of_.assign(kNumCodes, -1);
    for (int p = 0; p < n_points; ++p) point_of_[code(levels(p))] = static_cast<int16_t>(p);
    constexpr int kMaxD2 = kDim * kMaxLevel * kMaxLevel;
    nb_begin_.assign(kNumCodes + 1, 0);
    std::vector<int> d2_of(n_points);
    for (int c = 0; c < kNumCodes; ++c) {
      nb_begin_[c] = static_cast<uint32_t>(nb_.size());
      bool valid = true;  // no level above kMaxLevel (those codes are never searched)
      for (int i = 0; i < kDim; ++i) valid = valid && ((c >> (kBits * i)) & ((1 << kBits) - 1)) <= kMaxLevel;
      if (!valid || point_of_[c] >= 0) continue;
      bool present[kMaxD2 + 1] = {};
      for (int p = 0; p < n_points; ++p) {
        int d2 = 0;
        for (int i = 0; i < kDim; ++i) {
          const int diff = levels(p)[i] - ((c >> (kBits * i)) & ((1 << kBits) - 1));
          d2 += diff * diff;
        }
        d2_of[p] = d2;
        present[d2] = true;
      }
      int shells = 0;
      for (int d2 = 0; d2 <= kMaxD2 && shells < n_shells; ++d2) {
        if (!present[d2]) continue;
        ++shells;
        for (int p = 0; p < n_points; ++p)
          if (d2_of[p] == d2) nb_.push_back(static_cast<uint16_t>(p));
      }
    }
    nb_begin_[kNumCodes] = static_cast<uint32_t>(nb_.size());
  }

  std::vector<uint8_t> levels_;     // [n_points][kDim] levels
  std::vector<int16_t> point_of_;   // [kNumCodes] code -> point, -1 off the grid
  std::vector<uint32_t> nb_begin_;  // [kNumCodes + 1] neighbours of code c: nb_[nb_begin_[c] .. nb_begin_[c + 1])
  std::vector<uint16_t> nb_;        // point indices, nearest shell first
};

// The level l in 0..max_level whose odd value 2 l + 1 is nearest to id * x (x over a scale
// 1 / id): the lattice levels of iq2 / iq3 and the sub-block scale codes of iq1 / iq2 / iq3.
inline int odd_level(float id, float x, int max_level) {
  return std::clamp(kernels::nearest_int(0.5f * (id * x - 1)), 0, max_level);
}

// The odd values 2 l + 1 of levels l, as floats (the `value` of a best_neighbour call).
inline constexpr float kOddValues[8] = {1, 3, 5, 7, 9, 11, 13, 15};

// Rounds the magnitudes a[0..kDim) at inverse scale id to levels L and puts them on the grid
// (the best neighbour at scale 1 / id = `scale` under weights sw when off it). Returns whether
// the rounded tuple was a point already.
template <int kDim, int kMaxLevel>
bool snap_to_grid(const IqLattice<kDim, kMaxLevel>& lat, const float* a, const float* sw, float id, float scale,
                  uint8_t* L) {
  for (int i = 0; i < kDim; ++i) L[i] = static_cast<uint8_t>(odd_level(id, a[i], kMaxLevel));
  const int code = lat.code(L);
  if (lat.point_of(code) >= 0) return true;
  lat.best_neighbour(code, a, sw, scale, kOddValues, L);
  return false;
}

// sum w a q and sum w q^2 over n values with q = 2 L + 1.
inline void weighted_odd_sums(int n, const float* w, const float* a, const uint8_t* L, float* sum_qa,
                              float* sum_q2) {
  float qa = 0, q2 = 0;
  for (int i = 0; i < n; ++i) {
    const float q = static_cast<float>(2 * L[i] + 1);
    qa += w[i] * a[i] * q;
    q2 += w[i] * q * q;
  }
  *sum_qa = qa;
  *sum_q2 = q2;
}

// |x| of a group of 8 into a with its sign bits (bit i: x[i] negative or NaN). With
// even_signs (7 stored sign bits, the 8th implied by an even count of negatives) an odd count
// is made even by fitting the least important value (smallest w x^2, first on ties) as -|x|;
// then only the low 7 bits are returned.
inline uint8_t split_signs(const float* x, const float* w, bool even_signs, float* a) {
  int n_neg = 0;
  uint8_t s = 0;
  for (int i = 0; i < 8; ++i) {
    const bool neg = !(x[i] >= 0);
    a[i] = neg ? -x[i] : x[i];
    s = static_cast<uint8_t>(s | (neg << i));
    n_neg += neg;
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
    a[i_min] = -a[i_min];
    s = static_cast<uint8_t>(s ^ (1 << i_min));
  }
  return s & 127;
}

// A negative least-squares scale (not reached with non-negative weights) becomes positive by
// flipping every stored sign bit, as ggml does (with even_signs the 7 stored bits of a byte).
inline float flip_if_negative(float scale, bool even_signs, uint8_t* signs, int n_signs) {
  if (!(scale < 0)) return scale;
  for (int k = 0; k < n_signs; ++k) signs[k] = static_cast<uint8_t>(even_signs ? ~signs[k] & 127 : ~signs[k]);
  return -scale;
}

// factor * mean(x^2) over a 256-value super-block, summed in order.
inline float super_block_sigma2(const float* x, float factor) {
  float sum_x2 = 0;
  for (int i = 0; i < kernels::kQkK; ++i) sum_x2 += x[i] * x[i];
  return factor * sum_x2 / kernels::kQkK;
}

}  // namespace lumen::convert
