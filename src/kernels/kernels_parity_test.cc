// Parity tests: every entry of every kernel table this host can run, against the scalar
// reference table, on random and adversarial inputs (odd sizes and tails, extreme and
// subnormal scales, zeros, saturated quants, rounding ties). Each test collects every
// failure with its error and tolerance and reports them all before failing.
//
// Tolerances (see kernel_table.h): quantizers and gemm-vs-vec_dot are bit-exact; sums of
// f32 terms may differ by their accumulation order: |simd - ref| <= (k + 16) * 2^-23 * sum|terms|
// with k the number of terms one lane accumulates; expf-based entries within a few ulp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/fp16.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_test_util.h"
#include "kernels/ops.h"
#include "kernels/quant_blocks.h"

namespace lumen::kernels {
namespace {

constexpr double kUlp = 1.0 / (1 << 23);  // 2^-23: f32 relative spacing at 1

class FailureLog {
 public:
  void check(bool ok, const std::string& where, double err, double tol) {
    ++n_checks_;
    if (ok) return;
    char buf[160];
    std::snprintf(buf, sizeof(buf), "  err %.3g > tol %.3g", err, tol);
    failures_.push_back(where + buf);
  }
  void check_near(double got, double want, double tol, const std::string& where) {
    const double err = std::fabs(got - want);
    // got == want covers equal infinities (q8_1 block sums overflow fp16 on huge inputs).
    check(err <= tol || got == want || (std::isnan(got) && std::isnan(want)), where, err, tol);
  }
  void report() const {
    std::string all;
    for (const std::string& f : failures_) all += f + "\n";
    EXPECT_TRUE(failures_.empty()) << failures_.size() << " of " << n_checks_
                                   << " checks failed:\n" << all;
  }

 private:
  std::vector<std::string> failures_;
  int64_t n_checks_ = 0;
};

// The tables under test: all but the reference (which is the definition), and on a CPU with
// AVX512_VBMI also the AVX-512 table as a CPU without it fills it (its vpshufb tiles).
std::vector<const KernelTable*> simd_tables() {
  std::vector<const KernelTable*> out;
  for (const KernelTable* t : available_kernel_tables())
    if (t != &reference_kernel_table()) out.push_back(t);
  if (const KernelTable* t = avx512_table_without_vbmi()) out.push_back(t);
  return out;
}

TEST(KernelsParity, HostTables) {
  std::string names;
  for (const KernelTable* t : available_kernel_tables()) names += std::string(t->name) + " ";
  std::printf("cpu: %s\ntables: %s(best: %s)\n", cpu_features().describe().c_str(), names.c_str(),
              best_kernel_table().name);
  std::string want = "scalar";
  if (cpu_features().has_avx2_fma()) want = "avx2";
  if (cpu_features().has_avx512_vnni()) want = "avx512";
  EXPECT_EQ(std::string(best_kernel_table().name), want);
}

// ---- activation inputs -----------------------------------------------------------------

struct Activation {
  std::string name;
  std::vector<float> x;
};

std::vector<Activation> adversarial_activations(std::mt19937& rng, int64_t n) {
  std::vector<Activation> out;
  out.push_back({"normal", testing::random_floats(rng, n)});
  out.push_back({"large", testing::random_floats(rng, n, 3e4f)});
  out.push_back({"tiny", testing::random_floats(rng, n, 1e-30f)});  // fp16(d) underflows
  out.push_back({"huge", testing::random_floats(rng, n, 1e30f)});
  out.push_back({"zeros", std::vector<float>(n, 0.0f)});
  std::vector<float> ties(n);  // amax = 127 per block: x * id lands exactly on .5
  for (int64_t i = 0; i < n; ++i) ties[i] = i % 32 == 0 ? 127.0f : static_cast<float>(i % 17) - 8.5f;
  out.push_back({"ties", ties});
  std::vector<float> sym(n);  // +a and -a as largest magnitudes: q8_K picks the first
  for (int64_t i = 0; i < n; ++i) sym[i] = i % 7 == 3 ? (i % 2 ? 5.0f : -5.0f) : 0.25f * (i % 5);
  out.push_back({"sym_max", sym});
  std::vector<float> onehot(n, 0.0f);
  for (int64_t i = 0; i < n; i += 37) onehot[i] = -1.0f;
  out.push_back({"sparse", onehot});
  std::vector<float> denorm = testing::random_floats(rng, n, 1e-39f);
  out.push_back({"denormal", denorm});
  // Every quant at +127: with saturated weights, each int16 partial sum of a tile reaches
  // the bound its comment states (q5_K: 8 products of 31 * 127 per lane, one more overflows).
  out.push_back({"constant", std::vector<float>(n, 1.0f)});
  return out;
}

TEST(KernelsParity, ActivationQuantizersBitExact) {
  std::mt19937 rng(20);
  const KernelTable& ref = reference_kernel_table();
  FailureLog log;
  for (const KernelTable* t : simd_tables()) {
    for (DType dt : testing::matmul_types()) {
      const MatmulKernels* mk = find_matmul_kernels(*t, dt);
      const MatmulKernels* mr = find_matmul_kernels(ref, dt);
      if (mr->quantize_act == nullptr) continue;  // f32 activations
      const int64_t block = dtype_info(mr->act_dtype).block_size;
      for (int64_t n_blocks : {1, 3, 16}) {
        const int64_t n = (block == 1 ? 37 : block) * n_blocks;  // odd length for F16/BF16
        for (const Activation& a : adversarial_activations(rng, n)) {
          std::vector<std::byte> got(row_bytes(mk->act_dtype, n)), want(got.size());
          mk->quantize_act(a.x.data(), got.data(), n);
          mr->quantize_act(a.x.data(), want.data(), n);
          const bool same = std::memcmp(got.data(), want.data(), got.size()) == 0;
          log.check(same, std::string(t->name) + " quantize for " + std::string(dtype_name(dt)) +
                              " " + a.name + " n=" + std::to_string(n), same ? 0 : 1, 0);
        }
      }
    }
  }
  log.report();
}

// ---- weight inputs ---------------------------------------------------------------------

struct Weights {
  std::string name;
  std::vector<std::byte> w;  // n_rows rows
};

std::vector<Weights> adversarial_weights(std::mt19937& rng, DType dt, int64_t n_rows, int64_t n) {
  std::vector<Weights> out;
  out.push_back({"random", testing::random_weights(rng, dt, n_rows, n)});
  if (!dtype_info(dt).is_quantized) {
    Weights big{"wide_range", testing::random_weights(rng, dt, n_rows, n)};
    if (dt == DType::kF32) {
      auto* f = reinterpret_cast<float*>(big.w.data());
      for (int64_t i = 0; i < n * n_rows; ++i) f[i] *= (i % 3 == 0 ? 1e20f : 1e-20f);
    }
    out.push_back(big);
    return out;
  }
  Weights sat{"saturated", std::vector<std::byte>(row_bytes(dt, n) * n_rows)};
  // All quant bits set (q8_0: -1 everywhere; others: max nibbles/high bits) and max scales.
  std::memset(sat.w.data(), 0xff, sat.w.size());
  testing::set_f16_scales(dt, sat.w, f32_to_fp16(1.0f), f32_to_fp16(0.5f));
  out.push_back(sat);
  Weights q8min{"min_quants", std::vector<std::byte>(row_bytes(dt, n) * n_rows)};
  std::memset(q8min.w.data(), 0x80, q8min.w.size());  // q8_0: -128; q6_K scales -128
  testing::set_f16_scales(dt, q8min.w, f32_to_fp16(0.01f), f32_to_fp16(0.02f));
  out.push_back(q8min);
  Weights extreme{"extreme_scales", testing::random_weights(rng, dt, n_rows, n)};
  testing::set_f16_scales(dt, extreme.w, 0x7bff /* 65504 */, 0x0001 /* smallest subnormal */);
  out.push_back(extreme);
  Weights subnormal{"subnormal_scales", testing::random_weights(rng, dt, n_rows, n)};
  testing::set_f16_scales(dt, subnormal.w, 0x0003, 0x03ff);
  out.push_back(subnormal);
  Weights zero{"zero", std::vector<std::byte>(row_bytes(dt, n) * n_rows)};
  out.push_back(zero);
  return out;
}

// The 256-element i-quants: every table computes their widened integer form and then the
// reference's float steps in the reference's order (iq_blocks.h), so they are bit-exact.
bool iq_wide(DType dt) { return dtype_info(dt).name.starts_with("iq") && dt != DType::kIQ4_NL; }

// Whether table t's dots of dtype dt equal the reference's bit for bit: the wide i-quants,
// the AVX-512 table's own kernels (a row's avx512 entry follows the reference's block order;
// types without one inherit the AVX2 kernels, which sum in lanes), and every type with an
// interleaved layout (its plain kernels follow the reference's block order, so that the
// interleaved copies, which must equal vec_dot, equal the reference too).
bool exact_vs_reference(const KernelTable& t, DType dt) {
  return iq_wide(dt) || (std::string(t.name) == "avx512" && find_type_row(dt)->matmul.avx512 != nullptr) ||
         find_matmul_kernels(t, dt)->interleaved.layout != nullptr;
}

// Terms one SIMD lane accumulates for a dot of n elements of dtype dt.
double lane_terms(DType dt, int64_t n) {
  const int64_t block = dtype_info(dt).block_size;
  return block == 1 ? static_cast<double>(n) / 8 : static_cast<double>(n / block);
}

TEST(KernelsParity, VecDotAndGemm) {
  std::mt19937 rng(21);
  const KernelTable& ref = reference_kernel_table();
  FailureLog log;
  const int64_t n_rows = 5;
  for (const KernelTable* t : simd_tables()) {
    for (DType dt : testing::matmul_types()) {
      const MatmulKernels* mk = find_matmul_kernels(*t, dt);
      const MatmulKernels* mr = find_matmul_kernels(ref, dt);
      const int64_t block = dtype_info(dt).block_size;
      std::vector<int64_t> sizes;
      if (block == 1) sizes = {1, 7, 8, 31, 33, 100, 257, 1001};
      else sizes = {block, 2 * block, 3 * block, 7 * block, 33 * block};
      for (int64_t n : sizes) {
        for (const Weights& wt : adversarial_weights(rng, dt, n_rows, n)) {
          for (const Activation& a : adversarial_activations(rng, n)) {
            if (dt == DType::kF32 && a.name == "huge") continue;  // overflows f32 by design
            const std::string where = std::string(t->name) + " " + std::string(dtype_name(dt)) +
                                      " n=" + std::to_string(n) + " w=" + wt.name + " x=" + a.name;
            // Activations quantized by the reference (the quantizers are checked above).
            const int64_t n_cols = 6;
            const size_t xs = mr->quantize_act ? row_bytes(mr->act_dtype, n) : n * sizeof(float);
            std::vector<std::byte> xq(xs * n_cols);
            for (int64_t c = 0; c < n_cols; ++c) {
              if (mr->quantize_act) mr->quantize_act(a.x.data(), xq.data() + c * xs, n);
              else std::memcpy(xq.data() + c * xs, a.x.data(), xs);
            }
            const size_t ws = row_bytes(dt, n);
            const std::vector<float> xd = testing::dequantize(mr->act_dtype, xq.data(), n);
            std::vector<float> y(n_rows * n_cols);
            mk->gemm(n, wt.w.data(), ws, n_rows, xq.data(), xs, n_cols, y.data(), n_rows);
            for (int64_t r = 0; r < n_rows; ++r) {
              const std::byte* wr = wt.w.data() + r * ws;
              const float want = mr->vec_dot(n, wr, xq.data());
              const float got = mk->vec_dot(n, wr, xq.data());
              const std::vector<float> wd = testing::dequantize(dt, wr, n);
              const double mag = testing::abs_dot_double(wd.data(), xd.data(), n) +
                                 testing::q8_1_offset_magnitude(dt, wr, mr->act_dtype, xq.data(), n);
              const double tol = exact_vs_reference(*t, dt) ? 0.0 : (lane_terms(dt, n) + 16) * kUlp * mag;
              if (!(mag <= 1e36)) {
                // Near f32 overflow: whether a partial sum hits inf (and then inf - inf =
                // nan) depends on the summation order. Only require both to overflow or both
                // to stay finite-and-near.
                if (std::isfinite(want) && std::isfinite(got))
                  log.check_near(got, want, tol, where + " row " + std::to_string(r));
              } else {
                log.check_near(got, want, tol, where + " row " + std::to_string(r));
              }
              // Within one table, gemm tiles and vec_dot agree bit for bit (columns c share x).
              for (int64_t c = 0; c < n_cols; ++c) {
                const float g = y[c * n_rows + r];
                log.check(g == got || (std::isnan(g) && std::isnan(got)),
                          where + " gemm!=vec_dot row " + std::to_string(r) + " col " + std::to_string(c),
                          std::fabs(g - got), 0);
              }
            }
          }
        }
      }
    }
  }
  log.report();
}

// n_cols activation rows quantized by table `mr` (cycling through acts), row_bytes apart.
std::vector<std::byte> quantized_columns(const MatmulKernels& mr, const std::vector<Activation>& acts, int64_t n,
                                         int64_t n_cols) {
  const size_t xs = row_bytes(mr.act_dtype, n);
  std::vector<std::byte> xq(xs * n_cols);
  for (int64_t c = 0; c < n_cols; ++c) mr.quantize_act(acts[c % acts.size()].x.data(), xq.data() + c * xs, n);
  return xq;
}

// The side data of every activation row (ss bytes each; none when prepare is null).
std::vector<std::byte> side_data(PrepareSideFn prepare, const std::vector<std::byte>& xq, size_t xs, int64_t n,
                                 size_t ss, int64_t n_cols) {
  std::vector<std::byte> side(ss * n_cols + 1);
  if (prepare)
    for (int64_t c = 0; c < n_cols; ++c) prepare(xq.data() + c * xs, n, side.data() + c * ss);
  return side;
}

// The panel (prefill) path: pack + prepare_side + panel gemm equal the same table's vec_dot
// bit for bit, for every panel height and column count (tile tails included). Tables whose
// integer block dots follow the reference's block order ("avx512", for the types with an
// AVX-512 entry) also equal the reference bit for bit.
TEST(KernelsParity, PanelGemm) {
  std::mt19937 rng(24);
  const KernelTable& ref = reference_kernel_table();
  FailureLog log;
  for (const KernelTable* t : simd_tables()) {
    for (DType dt : testing::matmul_types(/*quantized_only=*/true)) {
      const bool exact_vs_ref = exact_vs_reference(*t, dt);
      const MatmulKernels* mk = find_matmul_kernels(*t, dt);
      const MatmulKernels* mr = find_matmul_kernels(ref, dt);
      const PanelKernels& pk = mk->panel;
      const int64_t block = dtype_info(dt).block_size;
      for (int64_t n : {block, 3 * block, 19 * block}) {
        const int64_t n_rows_max = pk.rows > 0 ? pk.rows : 16;
        for (const Weights& wt : adversarial_weights(rng, dt, n_rows_max, n)) {
          const int64_t n_cols = 19;  // 1..17 and 19: every tile width and tail
          const size_t xs = row_bytes(mr->act_dtype, n);
          const std::vector<std::byte> xq = quantized_columns(*mr, adversarial_activations(rng, n), n, n_cols);
          const size_t ws = row_bytes(dt, n);
          const std::string where = std::string(t->name) + " " + std::string(dtype_name(dt)) +
                                    " n=" + std::to_string(n) + " w=" + wt.name;
          for (int64_t r = 0; r < n_rows_max; ++r) {
            for (int64_t c = 0; c < n_cols; ++c) {
              const float got = mk->vec_dot(n, wt.w.data() + r * ws, xq.data() + c * xs);
              if (exact_vs_ref) {
                const float want = mr->vec_dot(n, wt.w.data() + r * ws, xq.data() + c * xs);
                log.check(got == want || (std::isnan(got) && std::isnan(want)),
                          where + " vec_dot!=ref row " + std::to_string(r) + " col " + std::to_string(c),
                          std::fabs(got - want), 0);
              }
            }
          }
          if (pk.rows == 0) continue;
          const size_t ss = pk.side_bytes(n);
          const std::vector<std::byte> side = side_data(pk.prepare_side, xq, xs, n, ss, n_cols);
          std::vector<std::byte> panel(pk.panel_bytes(n));
          for (int64_t n_rows : {int64_t{1}, int64_t{5}, n_rows_max}) {
            for (int64_t cols : {int64_t{1}, int64_t{4}, int64_t{7}, n_cols}) {
              pk.pack(n, wt.w.data(), ws, n_rows, panel.data());
              std::vector<float> y(cols * n_rows + 1, -1.0f);
              pk.gemm(n, panel.data(), n_rows, xq.data(), xs, side.data(), ss, cols, y.data(), n_rows);
              for (int64_t r = 0; r < n_rows; ++r) {
                for (int64_t c = 0; c < cols; ++c) {
                  const float want = mk->vec_dot(n, wt.w.data() + r * ws, xq.data() + c * xs);
                  const float got = y[c * n_rows + r];
                  log.check(got == want || (std::isnan(got) && std::isnan(want)),
                            where + " panel!=vec_dot rows " + std::to_string(n_rows) + " row " + std::to_string(r) +
                                " col " + std::to_string(c) + "/" + std::to_string(cols),
                            std::fabs(got - want), 0);
                }
              }
              log.check(y[cols * n_rows] == -1.0f, where + " panel wrote past y", 1, 0);
            }
          }
        }
      }
    }
  }
  log.report();
}

// The interleaved path: pack (whole matrices, several groups, a short last group) +
// prepare_side + gemm equal the same table's vec_dot bit for bit, for every column count
// (tile tails included), and write nothing past the groups or past y.
TEST(KernelsParity, InterleavedGemm) {
  std::mt19937 rng(25);
  const KernelTable& ref = reference_kernel_table();
  FailureLog log;
  int n_checked = 0;
  for (const KernelTable* t : simd_tables()) {
    for (DType dt : testing::matmul_types(/*quantized_only=*/true)) {
      const MatmulKernels* mk = find_matmul_kernels(*t, dt);
      const MatmulKernels* mr = find_matmul_kernels(ref, dt);
      const InterleavedKernels& ik = mk->interleaved;
      if (ik.layout == nullptr) continue;
      const int64_t block = dtype_info(dt).block_size;
      for (int64_t n : {block, 3 * block, 19 * block}) {
        const int64_t n_rows_max = 2 * ik.rows + 5;
        for (const Weights& wt : adversarial_weights(rng, dt, n_rows_max, n)) {
          const int64_t n_cols = 19;  // 1..17 and 19: every tile width and tail
          const size_t xs = row_bytes(mr->act_dtype, n);
          const std::vector<std::byte> xq = quantized_columns(*mr, adversarial_activations(rng, n), n, n_cols);
          const size_t ss = ik.side_bytes(n);
          const std::vector<std::byte> side = side_data(ik.prepare_side, xq, xs, n, ss, n_cols);
          const size_t ws = row_bytes(dt, n);
          const std::string where = std::string(t->name) + " " + std::string(dtype_name(dt)) +
                                    " n=" + std::to_string(n) + " w=" + wt.name;
          for (int64_t n_rows : {int64_t{1}, int64_t{5}, int64_t{ik.rows - 1}, int64_t{ik.rows}, int64_t{ik.rows + 5},
                                 n_rows_max}) {
            const int64_t n_groups = (n_rows + ik.rows - 1) / ik.rows;
            const size_t bytes = n_groups * ik.group_bytes(n);
            std::vector<std::byte> groups(bytes + 64, std::byte{0x5a});
            ik.pack(n, wt.w.data(), ws, n_rows, groups.data());
            bool guard_ok = true;
            for (size_t i = bytes; i < groups.size(); ++i) guard_ok = guard_ok && groups[i] == std::byte{0x5a};
            log.check(guard_ok, where + " pack wrote past its groups, rows " + std::to_string(n_rows), 1, 0);
            for (int64_t cols = 1; cols <= n_cols; cols += cols < 17 ? 1 : n_cols - 17) {
              std::vector<float> y(cols * n_rows + 1, -1.0f);
              ik.gemm(n, groups.data(), n_rows, xq.data(), xs, side.data(), ss, cols, y.data(), n_rows);
              for (int64_t r = 0; r < n_rows; ++r) {
                for (int64_t c = 0; c < cols; ++c) {
                  const float want = mk->vec_dot(n, wt.w.data() + r * ws, xq.data() + c * xs);
                  const float got = y[c * n_rows + r];
                  ++n_checked;
                  log.check(got == want || (std::isnan(got) && std::isnan(want)),
                            where + " interleaved!=vec_dot rows " + std::to_string(n_rows) + " row " +
                                std::to_string(r) + " col " + std::to_string(c) + "/" + std::to_string(cols),
                            std::fabs(got - want), 0);
                }
              }
              log.check(y[cols * n_rows] == -1.0f, where + " interleaved wrote past y", 1, 0);
            }
            // Decode: every activation (column) alone through the 1-column tiles, with and
            // without their software prefetch (gemm, the one this CPU runs, is one of the two).
            for (PanelGemmFn gemm : {ik.gemm_stream != nullptr ? ik.gemm_stream : ik.gemm, ik.gemm_prefetch})
            for (int64_t c = 0; gemm != nullptr && c < n_cols; ++c) {
              std::vector<float> y(n_rows + 1, -1.0f);
              gemm(n, groups.data(), n_rows, xq.data() + c * xs, xs, side.data() + c * ss, ss, 1, y.data(), n_rows);
              for (int64_t r = 0; r < n_rows; ++r) {
                const float want = mk->vec_dot(n, wt.w.data() + r * ws, xq.data() + c * xs);
                ++n_checked;
                log.check(y[r] == want || (std::isnan(y[r]) && std::isnan(want)),
                          where + " interleaved 1-column!=vec_dot rows " + std::to_string(n_rows) + " row " +
                              std::to_string(r) + " col " + std::to_string(c),
                          std::fabs(y[r] - want), 0);
              }
              log.check(y[n_rows] == -1.0f, where + " interleaved 1-column wrote past y", 1, 0);
            }
          }
        }
      }
    }
  }
  if (cpu_features().has_avx2_fma()) {
    EXPECT_GT(n_checked, 0) << "the avx2 / avx512 tables have no interleaved kernels";
  }
  log.report();
}

// The q8_0-activation group tiles (q4_0, q5_0, q8_0 weights) at the limits of their int16
// sums: activation blocks written directly (all +127, all -128, all -127, alternating, and
// mixed with zeros), against weights whose unsigned quants are all at their maximum (q4_0
// nibbles 15, q5_0 31: a lane's int16 sum reaches -30720 / -31744, the bounds the tiles'
// comments state) or minimum, every column count 1..17 and 19 and a short second group of
// a pair; bit for bit the reference's vec_dot. q8_0 weights meet no -128 activations: the
// activation quantizers never produce one and the sign trick (dot_i8) excludes it.
TEST(KernelsParity, InterleavedGemmInt16Limits) {
  const KernelTable& ref = reference_kernel_table();
  FailureLog log;
  int n_checked = 0;
  const int8_t patterns[][2] = {{127, 127}, {-128, -128}, {-127, -127}, {127, -128}, {-128, 0}, {0, 127}};
  for (const KernelTable* t : simd_tables()) {
    for (DType dt : {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0}) {
      const MatmulKernels* mk = find_matmul_kernels(*t, dt);
      const MatmulKernels* mr = find_matmul_kernels(ref, dt);
      const InterleavedKernels& ik = mk->interleaved;
      if (ik.layout == nullptr || mr->act_dtype != DType::kQ8_0) continue;
      for (int64_t n : {int64_t{kQk}, int64_t{5 * kQk}}) {
        const int64_t n_cols = 19, n_rows = 2 * ik.rows + 5;
        const size_t xs = row_bytes(DType::kQ8_0, n);
        std::vector<std::byte> xq(xs * n_cols);
        for (int64_t c = 0; c < n_cols; ++c) {
          const int8_t* pat = patterns[c % std::size(patterns)];
          if (dt == DType::kQ8_0 && (pat[0] == -128 || pat[1] == -128)) pat = patterns[2];
          auto* bx = reinterpret_cast<BlockQ8_0*>(xq.data() + c * xs);
          for (int64_t ib = 0; ib < n / kQk; ++ib) {
            bx[ib].d_f16 = f32_to_fp16(c % 2 ? 0.5f : 1.0f);
            for (int i = 0; i < kQk; ++i) bx[ib].qs[i] = pat[(i + ib) % 2];
          }
        }
        const size_t ss = ik.side_bytes(n);
        const std::vector<std::byte> side = side_data(ik.prepare_side, xq, xs, n, ss, n_cols);
        const size_t ws = row_bytes(dt, n);
        for (int fill : {0xff, 0x00, 0x80, 0x0f}) {
          std::vector<std::byte> w(ws * n_rows, static_cast<std::byte>(fill));
          testing::set_f16_scales(dt, w, f32_to_fp16(1.0f), f32_to_fp16(1.0f));
          std::vector<std::byte> groups((n_rows + ik.rows - 1) / ik.rows * ik.group_bytes(n));
          ik.pack(n, w.data(), ws, n_rows, groups.data());
          const std::string where = std::string(t->name) + " " + std::string(dtype_name(dt)) + " n=" +
                                    std::to_string(n) + " fill=" + std::to_string(fill);
          for (int64_t cols = 1; cols <= n_cols; cols += cols < 17 ? 1 : n_cols - 17) {
            std::vector<float> y(cols * n_rows, -1.0f);
            ik.gemm(n, groups.data(), n_rows, xq.data(), xs, side.data(), ss, cols, y.data(), n_rows);
            for (int64_t r = 0; r < n_rows; ++r) {
              for (int64_t c = 0; c < cols; ++c) {
                const float want = mr->vec_dot(n, w.data() + r * ws, xq.data() + c * xs);
                const float got = y[c * n_rows + r];
                ++n_checked;
                log.check(got == want, where + " row " + std::to_string(r) + " col " + std::to_string(c) + "/" +
                                           std::to_string(cols), std::fabs(got - want), 0);
              }
            }
          }
        }
      }
    }
  }
  if (cpu_features().has_avx2_fma()) {
    EXPECT_GT(n_checked, 0) << "the avx2 / avx512 tables have no q8_0-activation interleaved kernels";
  }
  log.report();
}

TEST(KernelsParity, RowKernels) {
  std::mt19937 rng(22);
  const KernelTable& ref = reference_kernel_table();
  FailureLog log;
  for (const KernelTable* t : simd_tables()) {
    for (int64_t n : {1, 7, 8, 15, 64, 896, 1001, 4864}) {
      for (float scale : {1.0f, 1e-3f, 30.0f, 1e15f}) {
        const std::string where = std::string(t->name) + " n=" + std::to_string(n) +
                                  " scale=" + std::to_string(scale);
        const std::vector<float> x = testing::random_floats(rng, n, scale);
        const std::vector<float> w = testing::random_floats(rng, n);
        // rms_norm: double sum in lanes, then the same f32 ops: ~1 ulp.
        for (bool with_weight : {true, false}) {
          std::vector<float> got(n), want(n);
          t->rms_norm_row(x.data(), with_weight ? w.data() : nullptr, n, 1e-5f, got.data());
          ref.rms_norm_row(x.data(), with_weight ? w.data() : nullptr, n, 1e-5f, want.data());
          for (int64_t i = 0; i < n; ++i)
            log.check_near(got[i], want[i], 2 * kUlp * std::fabs(want[i]),
                           where + " rms_norm i=" + std::to_string(i));
        }
        // silu_mul: polynomial expf, a few ulp; very negative gates go to (-)0 either way.
        if (scale <= 30.0f) {
          std::vector<float> got = x, want = x;
          t->silu_mul(got.data(), w.data(), n);
          ref.silu_mul(want.data(), w.data(), n);
          for (int64_t i = 0; i < n; ++i)
            log.check_near(got[i], want[i], 8 * kUlp * std::fabs(want[i]) + 1e-37,
                           where + " silu_mul i=" + std::to_string(i));
        }
        std::vector<float> got = x, want = x;
        t->add(got.data(), w.data(), n);
        ref.add(want.data(), w.data(), n);
        log.check(got == want, where + " add", 0, 0);
        // exp_sum on softmax-like inputs (<= 0 after max subtraction, down to -inf-ish).
        if (scale <= 30.0f) {
          std::vector<float> s1 = x, s2 = x;
          float max = -INFINITY;
          for (float v : x) max = std::max(max, v);
          const double sum1 = t->exp_sum(s1.data(), n, max);
          const double sum2 = ref.exp_sum(s2.data(), n, max);
          log.check_near(sum1, sum2, 8 * kUlp * sum2, where + " exp_sum sum");
          for (int64_t i = 0; i < n; ++i)
            log.check_near(s1[i], s2[i], 8 * kUlp * s2[i] + 1e-37, where + " exp_sum i=" + std::to_string(i));
        }
      }
    }
  }
  log.report();
}

// The KV cache's V dequantizers (flash attention): bit for bit the scalar ones, on random
// bytes (every scale bit pattern: subnormal, huge, inf and NaN scales, every quant) and runs
// of 1 to 9 rows of 64 values.
TEST(KernelsParity, KvDequantizersBitExact) {
  std::mt19937 rng(41);
  const KernelTable& ref = reference_kernel_table();
  FailureLog log;
  struct Type {
    const char* name;
    size_t block_bytes;
    DequantizeRowFn KernelTable::*fn;
  };
  const Type types[] = {{"q8_0", 34, &KernelTable::dequantize_q8_0}, {"q4_0", 18, &KernelTable::dequantize_q4_0}};
  for (const KernelTable* t : simd_tables()) {
    for (const Type& ty : types) {
      for (int64_t n : {32, 64, 128, 320, 576}) {
        std::vector<std::byte> src(n / 32 * ty.block_bytes);
        for (std::byte& b : src) b = static_cast<std::byte>(rng());
        std::vector<float> got(n), want(n);
        (t->*ty.fn)(src.data(), got.data(), n);
        (ref.*ty.fn)(src.data(), want.data(), n);
        bool same = true;
        for (int64_t i = 0; i < n; ++i)
          same &= std::memcmp(&got[i], &want[i], 4) == 0 || (std::isnan(got[i]) && std::isnan(want[i]));
        log.check(same, std::string(t->name) + " dequantize_" + ty.name + " n=" + std::to_string(n), 1, 0);
      }
    }
  }
  log.report();
}

TEST(KernelsParity, AttentionKernels) {
  std::mt19937 rng(23);
  const KernelTable& ref = reference_kernel_table();
  FailureLog log;
  for (const KernelTable* t : simd_tables()) {
    for (int32_t hd : {8, 40, 64, 80, 96, 128, 256, 3}) {
      for (int64_t n : {1, 5, 16, 33}) {
        const std::string where = std::string(t->name) + " hd=" + std::to_string(hd) + " n=" + std::to_string(n);
        const std::vector<float> kf = testing::random_floats(rng, n * hd, 2.0f);
        const std::vector<float> qf = testing::random_floats(rng, hd, 2.0f);
        std::vector<uint16_t> k16(kf.size()), q16(hd);
        for (size_t i = 0; i < kf.size(); ++i) k16[i] = f32_to_fp16(kf[i]);
        for (int32_t i = 0; i < hd; ++i) q16[i] = f32_to_fp16(qf[i]);
        const float scale = 0.125f;
        std::vector<float> got(n), want(n);
        for (bool f16 : {true, false}) {
          if (f16) {
            t->attn_scores_f16(k16.data(), n, q16.data(), hd, scale, got.data());
            ref.attn_scores_f16(k16.data(), n, q16.data(), hd, scale, want.data());
          } else {
            t->attn_scores_f32(kf.data(), n, qf.data(), hd, scale, got.data());
            ref.attn_scores_f32(kf.data(), n, qf.data(), hd, scale, want.data());
          }
          for (int64_t s = 0; s < n; ++s) {
            double mag = 0;
            for (int32_t i = 0; i < hd; ++i)
              mag += f16 ? std::fabs(double(fp16_to_f32(k16[s * hd + i])) * fp16_to_f32(q16[i]))
                         : std::fabs(double(kf[s * hd + i]) * qf[i]);
            log.check_near(got[s], want[s], (hd / 8.0 + 16) * kUlp * mag * scale,
                           where + (f16 ? " scores_f16" : " scores_f32") + " s=" + std::to_string(s));
          }
        }
        // P.V accumulation onto a non-zero accumulator.
        std::vector<float> p = testing::random_floats(rng, n);
        for (float& v : p) v = std::fabs(v);
        const std::vector<float> acc0 = testing::random_floats(rng, hd);
        for (bool f16 : {true, false}) {
          std::vector<float> a1 = acc0, a2 = acc0;
          if (f16) {
            t->attn_accum_f16(p.data(), k16.data(), n, hd, a1.data());
            ref.attn_accum_f16(p.data(), k16.data(), n, hd, a2.data());
          } else {
            t->attn_accum_f32(p.data(), kf.data(), n, hd, a1.data());
            ref.attn_accum_f32(p.data(), kf.data(), n, hd, a2.data());
          }
          for (int32_t i = 0; i < hd; ++i) {
            double mag = std::fabs(acc0[i]);
            for (int64_t s = 0; s < n; ++s) mag += std::fabs(double(p[s]) * kf[s * hd + i]);
            log.check_near(a1[i], a2[i], (n + 16) * kUlp * mag,
                           where + (f16 ? " accum_f16" : " accum_f32") + " i=" + std::to_string(i));
          }
        }
      }
    }
  }
  log.report();
}

// Flash attention's K-scores tiles (attn_key_scores_*): bit for bit the same table's
// vec_dot of the K type (and so, for q8_0 / q4_0, the reference's) for every key count
// (tile tails), query count (GQA groups times tokens), head size and adversarial input;
// rows and columns padded apart and every score written exactly once, in its own slot.
TEST(KernelsParity, AttentionKeyScores) {
  std::mt19937 rng(27);
  const KernelTable& ref = reference_kernel_table();
  FailureLog log;
  for (const KernelTable* t : available_kernel_tables()) {
    const std::pair<DType, GemmFn> entries[] = {{DType::kF16, t->attn_key_scores_f16},
                                                {DType::kQ8_0, t->attn_key_scores_q8_0},
                                                {DType::kQ4_0, t->attn_key_scores_q4_0}};
    for (const auto& [dt, scores] : entries) {
      if (scores == nullptr) continue;
      const MatmulKernels* mk = find_matmul_kernels(*t, dt);
      const MatmulKernels* mr = find_matmul_kernels(ref, dt);
      for (int64_t hd : {int64_t{32}, int64_t{64}, int64_t{96}, int64_t{128}, kAttnKeyScoresMaxDim}) {
        if (hd % dtype_info(dt).block_size != 0) continue;
        const int64_t n_keys_max = 40;
        const size_t ks = row_bytes(dt, hd) + 6, xs = row_bytes(mr->act_dtype, hd) + 10;
        for (const Weights& wt : adversarial_weights(rng, dt, n_keys_max, hd)) {
          std::vector<std::byte> k(ks * n_keys_max);
          for (int64_t r = 0; r < n_keys_max; ++r)
            std::memcpy(k.data() + r * ks, wt.w.data() + r * row_bytes(dt, hd), row_bytes(dt, hd));
          const std::vector<Activation> acts = adversarial_activations(rng, hd);
          for (int64_t n_cols : {1, 2, 3, 4, 7, 8, 9, 17, 33}) {
            std::vector<std::byte> xq(xs * n_cols);
            for (int64_t c = 0; c < n_cols; ++c) mr->quantize_act(acts[(c + n_cols) % acts.size()].x.data(), xq.data() + c * xs, hd);
            for (int64_t n_keys : {1, 5, 7, 8, 9, 15, 16, 17, 21, 31, 33, 40}) {
              const int64_t ys = n_keys + 3;
              std::vector<float> y(ys * n_cols, -7.0f);
              scores(hd, k.data(), ks, n_keys, xq.data(), xs, n_cols, y.data(), ys);
              const std::string where = std::string(t->name) + " " + std::string(dtype_name(dt)) + " hd=" +
                                        std::to_string(hd) + " w=" + wt.name + " keys=" + std::to_string(n_keys) +
                                        " cols=" + std::to_string(n_cols);
              for (int64_t c = 0; c < n_cols; ++c) {
                for (int64_t r = 0; r < ys; ++r) {
                  const float g = y[c * ys + r];
                  if (r >= n_keys) {
                    log.check(g == -7.0f, where + " wrote past its keys, col " + std::to_string(c), 1, 0);
                    continue;
                  }
                  const float want = mk->vec_dot(hd, k.data() + r * ks, xq.data() + c * xs);
                  const bool same = std::memcmp(&g, &want, sizeof(float)) == 0 || (std::isnan(g) && std::isnan(want));
                  log.check(same, where + " key " + std::to_string(r) + " col " + std::to_string(c),
                            std::fabs(g - want), 0);
                }
              }
            }
          }
        }
      }
    }
  }
  log.report();
}

// Group attention kernels: bit for bit the same table's single-head f32 kernels, for every
// head count (tile tails) and key count; row_max exact; scale_round bit-exact with the
// reference (fp16 round to nearest even, subnormals and overflow included); f16_to_f32 exact.
TEST(KernelsParity, AttentionGroupAndSoftmaxSteps) {
  std::mt19937 rng(25);
  const KernelTable& ref = reference_kernel_table();
  FailureLog log;
  for (const KernelTable* t : available_kernel_tables()) {
    for (int32_t hd : {32, 64, 128}) {
      for (int32_t n_heads : {1, 3, 4, 7, 8, 9}) {
        for (int64_t n : {1, 5, 16}) {
          const std::string where = std::string(t->name) + " hd=" + std::to_string(hd) + " heads=" +
                                    std::to_string(n_heads) + " n=" + std::to_string(n);
          const std::vector<float> k = testing::random_floats(rng, n * hd, 2.0f);
          const std::vector<float> q = testing::random_floats(rng, n_heads * hd, 2.0f);
          const size_t s_stride = 21;
          std::vector<float> got(n_heads * s_stride, -7.0f), want(n_heads * s_stride, -7.0f);
          t->attn_scores_group_f32(k.data(), n, q.data(), n_heads, hd, 0.125f, got.data(), s_stride);
          for (int32_t h = 0; h < n_heads; ++h)
            t->attn_scores_f32(k.data(), n, q.data() + h * hd, hd, 0.125f, want.data() + h * s_stride);
          log.check(got == want, where + " scores group != per head", 1, 0);
          std::vector<float> p = testing::random_floats(rng, n_heads * s_stride);
          const size_t a_stride = hd + 3;
          const std::vector<float> acc0 = testing::random_floats(rng, n_heads * a_stride);
          std::vector<float> a1 = acc0, a2 = acc0;
          t->attn_accum_group_f32(p.data(), s_stride, k.data(), n, n_heads, hd, a1.data(), a_stride);
          for (int32_t h = 0; h < n_heads; ++h)
            t->attn_accum_f32(p.data() + h * s_stride, k.data(), n, hd, a2.data() + h * a_stride);
          log.check(a1 == a2, where + " accum group != per head", 1, 0);
          // The f16 group entries, where a table has them: the same bits as the f32 entries
          // over the rows widened.
          if (t->attn_scores_group_f16 != nullptr || t->attn_accum_group_f16 != nullptr) {
            std::vector<uint16_t> kh(k.size());
            ref.f32_to_f16(k.data(), kh.data(), static_cast<int64_t>(k.size()));
            std::vector<float> kw(k.size());
            ref.f16_to_f32(kh.data(), kw.data(), static_cast<int64_t>(k.size()));
            std::vector<float> g16(n_heads * s_stride, -7.0f), g32(n_heads * s_stride, -7.0f);
            log.check(t->attn_scores_group_f16 != nullptr && t->attn_accum_group_f16 != nullptr,
                      where + " f16 group entries come in pairs", 1, 0);
            if (t->attn_scores_group_f16 == nullptr || t->attn_accum_group_f16 == nullptr) continue;
            t->attn_scores_group_f16(kh.data(), n, q.data(), n_heads, hd, 0.125f, g16.data(), s_stride);
            t->attn_scores_group_f32(kw.data(), n, q.data(), n_heads, hd, 0.125f, g32.data(), s_stride);
            log.check(g16 == g32, where + " scores group f16 != f32 of the widened rows", 1, 0);
            std::vector<float> b1 = acc0, b2 = acc0;
            t->attn_accum_group_f16(p.data(), s_stride, kh.data(), n, n_heads, hd, b1.data(), a_stride);
            t->attn_accum_group_f32(p.data(), s_stride, kw.data(), n, n_heads, hd, b2.data(), a_stride);
            log.check(b1 == b2, where + " accum group f16 != f32 of the widened rows", 1, 0);
          }
        }
      }
    }
    for (int64_t n : {0, 1, 7, 8, 17, 256, 1001}) {
      std::vector<float> s = testing::random_floats(rng, n, 30.0f);
      for (float& v : s) v = std::fabs(v) * 1e-3f;  // probabilities-like, some fp16 subnormal
      if (n > 3) s[2] = 7e4f, s[3] = 1e-9f;        // fp16 overflow and underflow after scaling
      log.check(t->row_max(s.data(), n) == ref.row_max(s.data(), n), std::string(t->name) + " row_max n=" +
                std::to_string(n), 1, 0);
      for (bool round : {true, false}) {
        std::vector<float> a = s, b = s;
        t->scale_round(a.data(), n, 0.73f, round);
        ref.scale_round(b.data(), n, 0.73f, round);
        log.check(a == b, std::string(t->name) + " scale_round n=" + std::to_string(n) + (round ? " f16" : ""), 1, 0);
      }
      std::vector<uint16_t> h(n);
      for (int64_t i = 0; i < n; ++i) h[i] = static_cast<uint16_t>(rng());  // every bit pattern, NaNs included
      std::vector<float> f1(n), f2(n);
      t->f16_to_f32(h.data(), f1.data(), n);
      ref.f16_to_f32(h.data(), f2.data(), n);
      bool same = true;
      for (int64_t i = 0; i < n; ++i) same &= std::memcmp(&f1[i], &f2[i], 4) == 0 || (std::isnan(f1[i]) && std::isnan(f2[i]));
      log.check(same, std::string(t->name) + " f16_to_f32 n=" + std::to_string(n), 1, 0);
      // f32 -> f16: normals, values that round to fp16 subnormals, zero, to overflow and
      // at the tie points, infinities, NaN with payloads; bit for bit.
      std::vector<float> x(n);
      const float specials[] = {0.0f, -0.0f, 65504.0f, 65520.0f, -65519.99f, 1e-8f, 2.98e-8f, 6.1e-5f,
                                -3.0e-6f, INFINITY, -INFINITY, NAN, -NAN, 1.00048828125f, 1.000732421875f};
      for (int64_t i = 0; i < n; ++i) {
        uint32_t bits = static_cast<uint32_t>(rng());
        std::memcpy(&x[i], &bits, 4);  // every bit pattern: NaN payloads, huge, tiny
        if (i % 3 == 0) x[i] = specials[rng() % std::size(specials)];
        if (i % 3 == 1) x[i] = std::ldexp(static_cast<float>(rng() % 4096) - 2048.0f, static_cast<int>(rng() % 40) - 36);
      }
      std::vector<uint16_t> h1(n, 0xdead), h2(n, 0xdead);
      t->f32_to_f16(x.data(), h1.data(), n);
      ref.f32_to_f16(x.data(), h2.data(), n);
      log.check(h1 == h2, std::string(t->name) + " f32_to_f16 n=" + std::to_string(n), 1, 0);
    }
  }
  log.report();
}

// The group P.V entries over q8_0 / q4_0 / f16 V rows (attn_values_q8_0 / _q4_0 / _f16),
// where a table has them: bit for bit the same table's dequantize_q8_0 / _q4_0 (f16_to_f32)
// of the rows followed by its attn_accum_group_f32, for any head count (flash attention only
// calls them up to max_heads, but the kernels take any). Rows are random blocks (every
// quant, scales from fp16 subnormals to 2^14, negative and zero; f16 rows random bits: NaNs,
// infinities, subnormals) v_stride bytes apart (padded past the row, so a
// kernel that assumed contiguous rows fails); every head count of the tiles, ragged key
// counts, head dims 32 .. 256; probabilities include masked keys (exact zeros).
TEST(KernelsParity, AttentionGroupValuesFromQuantizedRows) {
  std::mt19937 rng(26);
  FailureLog log;
  int n_tables = 0;
  for (const KernelTable* t : available_kernel_tables()) {
    for (DType dt : {DType::kQ8_0, DType::kQ4_0, DType::kF16}) {
      const AttnValuesKernels& values = dt == DType::kQ8_0   ? t->attn_values_q8_0
                                        : dt == DType::kQ4_0 ? t->attn_values_q4_0
                                                             : t->attn_values_f16;
      const AttnAccumGroupQFn accum_q = values.accum_group;
      if (accum_q == nullptr) continue;
      if (dt != DType::kF16) ++n_tables;
      const auto dequantize = [&](const std::byte* row, float* out, int64_t n_values) {
        if (dt == DType::kQ8_0) t->dequantize_q8_0(row, out, n_values);
        else if (dt == DType::kQ4_0) t->dequantize_q4_0(row, out, n_values);
        else t->f16_to_f32(reinterpret_cast<const uint16_t*>(row), out, n_values);
      };
      log.check(values.max_heads >= 1, std::string(t->name) + " max_heads >= 1", 1, 0);
      const size_t block_bytes = dt == DType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);  // q8_0 / q4_0
      for (int32_t hd : {32, 64, 96, 128, 256}) {
        for (int32_t n_heads : {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 33, 56}) {  // every tile, parts
          for (int64_t n : {1, 2, 5, 15, 16, 17, 33}) {
            const std::string where = std::string(t->name) + " " + std::string(dtype_name(dt)) + " hd=" +
                                      std::to_string(hd) + " heads=" + std::to_string(n_heads) + " n=" + std::to_string(n);
            const size_t v_row = row_bytes(dt, hd), v_stride = v_row + 6;
            std::vector<std::byte> v(n * v_stride);
            for (std::byte& b : v) b = static_cast<std::byte>(rng());
            const uint16_t scales[] = {0x0001, 0x8001, 0x0000, 0x03ff, 0x3c00, 0xbc00, 0x7400, 0x2e66, 0x1234};
            for (int64_t s = 0; s < n && dt != DType::kF16; ++s) {  // f16: random bits (NaN, inf, subnormals)
              for (int32_t ib = 0; ib < hd / kQk; ++ib) {
                const uint16_t d = rng() % 2 ? scales[rng() % std::size(scales)] : f32_to_fp16(std::ldexp(
                    static_cast<float>(rng() % 2000) - 1000.0f, static_cast<int>(rng() % 20) - 24));
                std::memcpy(v.data() + s * v_stride + ib * block_bytes, &d, sizeof(d));  // d_f16 comes first
              }
            }
            std::vector<float> vf(n * hd);
            for (int64_t s = 0; s < n; ++s) dequantize(v.data() + s * v_stride, vf.data() + s * hd, hd);
            const size_t p_stride = n + 3, a_stride = hd + 5;
            std::vector<float> p = testing::random_floats(rng, n_heads * p_stride);
            for (size_t i = 0; i < p.size(); ++i) p[i] = i % 7 == 3 ? 0.0f : std::fabs(p[i]);
            const std::vector<float> acc0 = testing::random_floats(rng, n_heads * a_stride, 4.0f);
            std::vector<float> got = acc0, want = acc0;
            accum_q(p.data(), p_stride, v.data(), v_stride, n, n_heads, hd, got.data(), a_stride);
            t->attn_accum_group_f32(p.data(), p_stride, vf.data(), n, n_heads, hd, want.data(), a_stride);
            log.check(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0,
                      where + " accum group from the cache's rows != widen + accum group f32", 1, 0);
          }
        }
      }
    }
  }
  // The avx2 and avx512 tables have both entries.
  const int n_simd = (cpu_features().has_avx2_fma() ? 1 : 0) + (cpu_features().has_avx512_vnni() ? 1 : 0);
  log.check(n_tables == 2 * n_simd, "the SIMD tables have both entries", 1, 0);
  log.report();
}

// exp_sum of the avx512 table: bit for bit the avx2 table's (the same operations per lane and
// the same double sums in the same order; softmax_avx512.cc), values and sum, for every
// length's tail (groups of 16, a last group of 8, 0-7 left), softmax inputs (<= 0) and
// outside them (overflow to inf, underflow to 0, the clamps).
TEST(KernelsParity, ExpSumSameBitsAsAvx2) {
  const KernelTable* avx2 = nullptr;
  for (const KernelTable* t : available_kernel_tables())
    if (std::string(t->name) == "avx2") avx2 = t;
  if (avx2 == nullptr) GTEST_SKIP() << "no AVX2 on this host";
  std::mt19937 rng(27);
  FailureLog log;
  for (const KernelTable* t : available_kernel_tables()) {
    if (t->exp_sum == avx2->exp_sum || std::string(t->name) == "scalar") continue;
    for (int64_t n = 0; n <= 1100; n += n < 80 ? 1 : 97) {  // 0..80, then long rows (sums that round)
      for (float spread : {1.0f, 30.0f, 200.0f}) {
        std::vector<float> s = testing::random_floats(rng, n, spread);
        const float max = n > 0 && rng() % 2 ? *std::max_element(s.begin(), s.end()) : 0.5f;
        if (n > 5) s[3] = max - 87.29f, s[4] = max - 87.31f, s[5] = max + 88.8f;  // clamps, overflow
        std::vector<float> a = s, b = s;
        const double sa = t->exp_sum(a.data(), n, max), sb = avx2->exp_sum(b.data(), n, max);
        const std::string where = std::string(t->name) + " exp_sum n=" + std::to_string(n) + " spread=" +
                                  std::to_string(spread);
        log.check(std::memcmp(&sa, &sb, sizeof(sa)) == 0, where + " sum", 1, 0);
        log.check(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0, where + " values", 1, 0);
      }
    }
    // Ones, then values of ~0.6 ulp(1.0) each, in every lane: a sum that rounds differently
    // in any other order (1 + 0.6u + 0.6u != 1 + 1.2u).
    for (int64_t n : {32, 48, 64}) {
      std::vector<float> a(n, -36.5545f), b;
      std::fill(a.begin(), a.begin() + 16, 0.0f);
      b = a;
      const double sa = t->exp_sum(a.data(), n, 0.0f), sb = avx2->exp_sum(b.data(), n, 0.0f);
      log.check(std::memcmp(&sa, &sb, sizeof(sa)) == 0, std::string(t->name) + " exp_sum rounding order n=" +
                std::to_string(n), 1, 0);
    }
  }
  log.report();
}

// silu_mul of the avx512 table: bit for bit the avx2 table's (softmax_avx512.cc), for every
// length's tail (groups of 16, 0-15 left) and gates from tiny to past expf's clamps (-87.3,
// 88.7: silu of a very negative gate is -0 or 0, of a large one the gate itself).
TEST(KernelsParity, SiluMulSameBitsAsAvx2) {
  const KernelTable* avx2 = nullptr;
  for (const KernelTable* t : available_kernel_tables())
    if (std::string(t->name) == "avx2") avx2 = t;
  if (avx2 == nullptr) GTEST_SKIP() << "no AVX2 on this host";
  std::mt19937 rng(29);
  FailureLog log;
  int n_checked = 0;
  for (const KernelTable* t : available_kernel_tables()) {
    if (t->silu_mul == avx2->silu_mul || std::string(t->name) == "scalar") continue;
    for (int64_t n = 0; n <= 1100; n += n < 80 ? 1 : 97) {
      for (float spread : {0.01f, 3.0f, 100.0f}) {
        std::vector<float> g = testing::random_floats(rng, n, spread);
        const std::vector<float> up = testing::random_floats(rng, n, 2.0f);
        if (n > 4) g[1] = -87.29f, g[2] = -87.31f, g[3] = 88.8f, g[4] = -1e-30f;
        std::vector<float> a = g, b = g;
        t->silu_mul(a.data(), up.data(), n);
        avx2->silu_mul(b.data(), up.data(), n);
        log.check(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0,
                  std::string(t->name) + " silu_mul n=" + std::to_string(n) + " spread=" + std::to_string(spread), 1,
                  0);
        ++n_checked;
      }
    }
  }
  if (cpu_features().has_avx512_vnni()) {
    EXPECT_GT(n_checked, 0) << "the avx512 table's silu_mul is the avx2 one";
  }
  log.report();
}

}  // namespace
}  // namespace lumen::kernels
