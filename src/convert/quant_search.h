// Scale searches shared by the quantizers: for a small group of values x[0..n), find a scale
// (and for the asymmetric types a min) and integer levels so that scale * level (+ min)
// approximates x under a weighted squared (or absolute) error.
//
// Each search is ggml's (named after it below) operation by operation in f32, because the
// searches compare errors and a sum rounded differently can pick another candidate: the bytes
// must match llama-quantize's. The .cc turns floating-point contraction off for that reason.
//
//   fit_symmetric      x ~ s * (L - nmax),  L in [0, 2 nmax)        (make_qx_quants)
//   fit_symmetric_q3   x ~ s * L,           L in [-nmax, nmax)      (make_q3_quants)
//   fit_asymmetric     x ~ s * L - m, m >= 0, L in [0, nmax]        (make_qkx2 / make_qkx3_quants)
//   fit_positive       x ~ s * L,           L in [0, nmax], x >= 0  (make_qp_quants)
#pragma once

#include <cstdint>

namespace lumen::convert {

// Below this magnitude a group counts as all zeros (ggml's GROUP_MAX_EPS).
inline constexpr float kGroupMaxEps = 1e-15f;

// How fit_symmetric weighs each value's error when no weights are given.
enum class SymmetricWeight : int8_t {
  kNone = 0,    // no search: levels from the grid that maps the largest |x| to -nmax
  kSquare = 1,  // x^2
  kOne = 2,     // 1
  kAbs = 3,     // |x|
  kSqrtAbs = 4, // sqrt|x|
};

// Levels L[i] = nmax + clamp(round(x / s), -nmax, nmax - 1). Starts from the grid that maps
// the signed value of largest magnitude to -nmax, then tries 18 grids -(nmax + 0.1 k) / max
// (k = -9..9, k != 0) and keeps the one with the largest weighted least-squares gain
// sum(w x l)^2 / sum(w l^2); the scale is that grid's least-squares scale. `qw` (n weights)
// overrides `weight`. An all-zero group (max |x| < kGroupMaxEps) gets L = 0, scale 0.
// `early_exit` (ggml's negative rmse_type): no search, returns the mean of the first grid's
// scale and its least-squares scale.
float fit_symmetric(int n, int nmax, const float* x, int8_t* L, SymmetricWeight weight, const float* qw,
                    bool early_exit = false);

// q3_K's fit: L[i] in [0, 2 nmax) as above; with do_rmse the levels are then refined one at a
// time (up to 5 passes) whenever moving one level raises the x^2-weighted gain.
float fit_symmetric_q3(int n, int nmax, const float* x, int8_t* L, bool do_rmse);

// Asymmetric fit x ~ s * L - neg_min with neg_min >= 0 (written to *neg_min), L in [0, nmax].
// Starts from the min/max grid, then for k = 0..n_steps tries the grid with
// (nmax + rmin + rdelta k) levels over the range, refits (s, m) by weighted least squares on
// those levels (m clamped to <= 0) and keeps the candidate with the smallest weighted error
// (|d| with use_abs_error, else d^2). `weights` null: w = x^2 (make_qkx3's default). A flat
// group gets L = 0 and scale 0. n <= 256.
float fit_asymmetric(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* neg_min, float rmin,
                     float rdelta, int n_steps, bool use_abs_error);

// Fit of non-negative values (the sub-block scales or mins of q2_K / q4_K / q5_K under an
// importance matrix) to levels L in [0, nmax]: picks the best of 9 grids by weighted MSE, then
// refines single levels (up to 5 passes) while the least-squares gain rises. Returns the
// least-squares scale. All zero: L = 0, scale 0.
float fit_positive(int n, int nmax, const float* x, uint8_t* L, const float* weights);

}  // namespace lumen::convert
