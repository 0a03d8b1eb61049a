// KL-divergence of a (quantized) model from a base model, as llama-perplexity computes it
// (--kl-divergence-base / --kl-divergence), in its file format.
//
// Base file (llama-perplexity's "logits file"), little-endian:
//   "_logits_"  u32 n_ctx  i32 n_vocab  i32 n_chunk  i32 tokens[n_chunk * n_ctx]
//   then per chunk, per scored position (n_ctx/2 .. n_ctx-2), nv = 2 * ((n_vocab + 1) / 2) + 4
//   u16: f32 scale, f32 min_log_prob (4 u16), then n_vocab u16 q[i] (+ 0 padding) with
//     log p_base(i) ~= scale * q[i] + min_log_prob   for logits within 16 of the maximum,
//     q[i] = 0 (p ~ e^-16 or less) for the rest
// The tokens are the text's (before the BOS that replaces each chunk's first token), so the
// second run scores exactly the same positions.
//
// Statistics over every scored position (llama-perplexity's, same formulas):
//   KLD      sum_i p_base(i) (log p_base(i) - log p(i)) over tokens with log p_base > -16
//   Δppl     PPL(Q) - PPL(base), ln(PPL(Q)/PPL(base)) with uncertainties from the
//            covariance of the two NLLs
//   same top the argmax of the two distributions agrees
//   Δp       p(next token) - p_base(next token)
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace lumen::calib {

// u16 values per stored row.
inline int64_t kld_row_u16s(int64_t n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }

// Compresses one row of logits as llama-perplexity does (row: kld_row_u16s(n_vocab) u16s)
// and returns the NLL of next_token (max + log sum exp - logit[next]).
double compress_log_probs(std::span<const float> logits, int32_t next_token, uint16_t* row);

class KldBaseWriter {
 public:
  KldBaseWriter() = default;
  KldBaseWriter(const KldBaseWriter&) = delete;
  KldBaseWriter& operator=(const KldBaseWriter&) = delete;
  ~KldBaseWriter();
  // Writes the header and the tokens of the n_chunks chunks.
  Status open(const std::string& path, uint32_t n_ctx, int32_t n_vocab, int32_t n_chunks,
              std::span<const int32_t> tokens);
  // The next scored row (chunk by chunk, position by position).
  Status write_row(std::span<const float> logits, int32_t next_token);
  // Checks every row was written and renames the file into place.
  Status close();

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  int64_t n_vocab_ = 0;
  int64_t rows_left_ = 0;
  std::vector<uint16_t> row_;
};

struct KldBase {
  uint32_t n_ctx = 0;
  int32_t n_vocab = 0;
  int32_t n_chunk = 0;
  std::vector<int32_t> tokens;     // [n_chunk * n_ctx]
  std::vector<uint16_t> rows;      // [n_chunk][n_ctx - 1 - n_ctx/2][kld_row_u16s(n_vocab)]
  int64_t n_rows_per_chunk() const { return static_cast<int64_t>(n_ctx) - 1 - n_ctx / 2; }
  const uint16_t* row(int64_t chunk, int64_t idx) const {
    return rows.data() + (chunk * n_rows_per_chunk() + idx) * kld_row_u16s(n_vocab);
  }
};

// Reads and validates a base file (magic, sizes that add up to the file's, token ids in
// [0, n_vocab), finite scales). Errors name the file and what is wrong.
Result<KldBase> read_kld_base(const std::string& path);

struct KldSummary {
  int64_t count = 0;
  double ppl = 0, ppl_unc = 0;
  double ppl_base = 0, ppl_base_unc = 0;
  double cor = 0;                       // correlation of ln PPL(Q) and ln PPL(base)
  double log_ppl_ratio = 0, log_ppl_ratio_unc = 0;
  double ppl_ratio = 0, ppl_ratio_unc = 0;
  double ppl_diff = 0, ppl_diff_unc = 0;
  double kld = 0, kld_unc = 0;
  double kld_max = 0, kld_999 = 0, kld_99 = 0, kld_median = 0, kld_10 = 0, kld_5 = 0, kld_1 = 0, kld_min = 0;
  double dp_mean = 0, dp_mean_unc = 0;  // Δp (fractions, not %)
  double dp_max = 0, dp_999 = 0, dp_99 = 0, dp_95 = 0, dp_90 = 0, dp_75 = 0, dp_median = 0, dp_25 = 0, dp_10 = 0,
         dp_5 = 0, dp_1 = 0, dp_01 = 0, dp_min = 0;
  double dp_rms = 0, dp_rms_unc = 0;
  double same_top = 0, same_top_unc = 0;
};

// Accumulates the statistics of rows (one per scored position).
class KldStats {
 public:
  // `base_row`: the base file's row for this position.
  void add(std::span<const float> logits, const uint16_t* base_row, int32_t next_token);
  int64_t count() const { return count_; }
  // Running mean KLD and PPL figures (for per-chunk lines); percentiles need count() >= 1.
  KldSummary summary() const;

 private:
  double sum_nll_ = 0, sum_nll2_ = 0, sum_nll_base_ = 0, sum_nll_base2_ = 0, sum_nll_nll_base_ = 0;
  double sum_kld_ = 0, sum_kld2_ = 0, sum_p_diff_ = 0, sum_p_diff2_ = 0, sum_p_diff4_ = 0;
  int64_t n_same_top_ = 0, count_ = 0;
  std::vector<float> kld_values_, p_diff_values_;
};

}  // namespace lumen::calib
