#include "calib/kld.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "convert/exact_float.h"
#include "kernels/quant_blocks.h"

namespace lumen::calib {
namespace {

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

// Sorted values -> the value at `fraction`, interpolated (llama-perplexity's percentile).
double percentile(const std::vector<float>& v, float fraction) {
  if (fraction <= 0) return v.front();
  if (fraction >= 1) return v.back();
  float p = fraction * static_cast<float>(v.size() - 1);
  const size_t ip = static_cast<size_t>(p);
  p -= static_cast<float>(ip);
  return (1 - p) * v[ip] + p * v[std::min(ip + 1, v.size() - 1)];
}

double median(const std::vector<float>& v) {
  return v.size() % 2 == 0 ? 0.5f * (v[v.size() / 2] + v[v.size() / 2 - 1]) : v[v.size() / 2];
}

// (mean, its standard error) of values with the given sum and sum of squares.
std::pair<double, double> mean_and_uncertainty(double sum, double sum2, int64_t count) {
  if (count < 1) return {0.0, 0.0};
  const double f = sum / count;
  double df = sum2 / count - f * f;
  df = df > 0 && count > 10 ? std::sqrt(df / (count - 1)) : 0.0;
  return {f, df};
}

double covariance(double sum_a, double sum_b, double sum_ab, int64_t count) {
  if (count < 10) return 0.0;
  return (sum_ab / count - (sum_a / count) * (sum_b / count)) / (count - 1);
}

}  // namespace

double compress_log_probs(std::span<const float> logits, int32_t next_token, uint16_t* row) {
  const int64_t n = static_cast<int64_t>(logits.size());
  float max_logit = logits[0];
  float min_logit = logits[0];
  for (int64_t i = 1; i < n; ++i) {
    max_logit = std::max(max_logit, logits[i]);
    min_logit = std::min(min_logit, logits[i]);
  }
  // Only the top 16 nats are kept: anything below is stored as "p ~ 0".
  min_logit = std::max(min_logit, max_logit - 16);
  double sum_exp = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.f;
  std::memcpy(row, &scale, 4);
  std::memcpy(row + 2, &min_log_prob, 4);
  uint16_t* q = row + 4;
  std::memset(q, 0, static_cast<size_t>(kld_row_u16s(n) - 4) * sizeof(uint16_t));
  if (scale != 0) {
    const float inv_scale = 1 / scale;
    for (int64_t i = 0; i < n; ++i)
      q[i] = logits[i] > min_logit ? static_cast<uint16_t>(kernels::nearest_int(inv_scale * (logits[i] - min_logit))) : 0;
  }
  return max_logit + log_sum_exp - logits[next_token];
}

KldBaseWriter::~KldBaseWriter() {
  if (f_) {
    std::fclose(f_);
    std::remove((path_ + ".tmp").c_str());
  }
}

Status KldBaseWriter::open(const std::string& path, uint32_t n_ctx, int32_t n_vocab, int32_t n_chunks,
                           std::span<const int32_t> tokens) {
  path_ = path;
  f_ = std::fopen((path + ".tmp").c_str(), "wb");
  if (!f_) return error("cannot write '" + path + ".tmp'");
  n_vocab_ = n_vocab;
  rows_left_ = static_cast<int64_t>(n_chunks) * (static_cast<int64_t>(n_ctx) - 1 - n_ctx / 2);
  row_.assign(static_cast<size_t>(kld_row_u16s(n_vocab)), 0);
  const size_t n_tokens = static_cast<size_t>(n_chunks) * n_ctx;
  if (tokens.size() < n_tokens) return error("kl-divergence base: fewer tokens than the chunks need");
  bool ok = std::fwrite(kMagic, 1, 8, f_) == 8 && std::fwrite(&n_ctx, 4, 1, f_) == 1 &&
            std::fwrite(&n_vocab, 4, 1, f_) == 1 && std::fwrite(&n_chunks, 4, 1, f_) == 1 &&
            std::fwrite(tokens.data(), 4, n_tokens, f_) == n_tokens;
  return ok ? Status() : error("writing '" + path + ".tmp' failed");
}

Status KldBaseWriter::write_row(std::span<const float> logits, int32_t next_token) {
  if (!f_ || rows_left_ <= 0) return error("kl-divergence base: more rows than the header announced");
  compress_log_probs(logits, next_token, row_.data());
  if (std::fwrite(row_.data(), sizeof(uint16_t), row_.size(), f_) != row_.size())
    return error("writing '" + path_ + ".tmp' failed");
  --rows_left_;
  return Status();
}

Status KldBaseWriter::close() {
  if (!f_) return error("kl-divergence base: not open");
  const bool ok = std::fclose(f_) == 0;
  f_ = nullptr;
  const std::string tmp = path_ + ".tmp";
  if (!ok || rows_left_ != 0) {
    std::remove(tmp.c_str());
    return error(ok ? "kl-divergence base: " + std::to_string(rows_left_) + " rows missing" : "writing '" + tmp + "' failed");
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    std::remove(tmp.c_str());
    return error("cannot rename '" + tmp + "' to '" + path_ + "'");
  }
  return Status();
}

Result<KldBase> read_kld_base(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error("cannot open '" + path + "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto fail = [&](const std::string& what) { return error("'" + path + "': " + what); };
  if (bytes.size() < 20 || std::memcmp(bytes.data(), kMagic, 8) != 0)
    return fail("not a log-probability file (no \"_logits_\" header)");
  KldBase b;
  std::memcpy(&b.n_ctx, bytes.data() + 8, 4);
  std::memcpy(&b.n_vocab, bytes.data() + 12, 4);
  std::memcpy(&b.n_chunk, bytes.data() + 16, 4);
  if (b.n_ctx < 4 || b.n_ctx > (1u << 24)) return fail("n_ctx " + std::to_string(b.n_ctx) + " is out of range");
  if (b.n_vocab < 1 || b.n_vocab > (1 << 24)) return fail("n_vocab " + std::to_string(b.n_vocab) + " is out of range");
  if (b.n_chunk < 1 || b.n_chunk > (1 << 24)) return fail("n_chunk " + std::to_string(b.n_chunk) + " is out of range");
  const uint64_t n_tokens = static_cast<uint64_t>(b.n_chunk) * b.n_ctx;  // < 2^48
  const uint64_t chunk_u16 = static_cast<uint64_t>(b.n_rows_per_chunk()) * kld_row_u16s(b.n_vocab);  // < 2^49
  // The rows' size would overflow 64 bits for some headers: compare per chunk first.
  const bool too_big = chunk_u16 > bytes.size() / 2 / static_cast<uint64_t>(b.n_chunk);
  const uint64_t n_u16 = too_big ? 0 : static_cast<uint64_t>(b.n_chunk) * chunk_u16;
  const uint64_t want = 20 + 4 * n_tokens + 2 * n_u16;
  if (too_big || bytes.size() != want)
    return fail(std::to_string(bytes.size()) + " bytes, but n_ctx " + std::to_string(b.n_ctx) + ", n_vocab " +
                std::to_string(b.n_vocab) + " and " + std::to_string(b.n_chunk) + " chunks need " +
                (too_big ? std::string("more") : std::to_string(want)) + " (truncated, or written with another model?)");
  b.tokens.resize(n_tokens);
  std::memcpy(b.tokens.data(), bytes.data() + 20, 4 * n_tokens);
  for (size_t i = 0; i < b.tokens.size(); ++i)
    if (b.tokens[i] < 0 || b.tokens[i] >= b.n_vocab)
      return fail("token " + std::to_string(i) + " is " + std::to_string(b.tokens[i]) + ", not in [0, n_vocab)");
  b.rows.resize(n_u16);
  std::memcpy(b.rows.data(), bytes.data() + 20 + 4 * n_tokens, 2 * n_u16);
  for (int64_t c = 0; c < b.n_chunk; ++c)
    for (int64_t r = 0; r < b.n_rows_per_chunk(); ++r) {
      float d[2];
      std::memcpy(d, b.row(c, r), 8);
      if (!std::isfinite(d[0]) || !std::isfinite(d[1]) || d[0] < 0)
        return fail("chunk " + std::to_string(c) + " row " + std::to_string(r) + ": bad scale " + std::to_string(d[0]) +
                    " / min log-prob " + std::to_string(d[1]));
    }
  return b;
}

void KldStats::add(std::span<const float> logits, const uint16_t* base_row, int32_t tok) {
  const int64_t n = static_cast<int64_t>(logits.size());
  float max_logit = logits[0];
  int64_t imax = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (logits[i] > max_logit) {
      max_logit = logits[i];
      imax = i;
    }
  }
  double sum_exp = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  float scale, min_log_prob;
  std::memcpy(&scale, base_row, 4);
  std::memcpy(&min_log_prob, base_row + 2, 4);
  const uint16_t* q = base_row + 4;

  // The products below are f32, as llama-perplexity computes them, then summed in double.
  const float nll = max_logit + log_sum_exp - logits[tok];
  sum_nll_ += nll;
  sum_nll2_ += nll * nll;
  const float nll_base = -(scale * q[tok] + min_log_prob);
  sum_nll_base_ += nll_base;
  sum_nll_base2_ += nll_base * nll_base;
  sum_nll_nll_base_ += nll * nll_base;

  const float log_norm = max_logit + log_sum_exp;  // log p(i) = logits[i] - log_norm
  double kld = 0;
  int64_t imax_base = -1;
  float p_log_base_max = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float p_log_base = scale * q[i] + min_log_prob;
    if (i == 0 || p_log_base > p_log_base_max) {
      p_log_base_max = p_log_base;
      imax_base = i;
    }
    if (p_log_base > -16.f) kld += std::exp(p_log_base) * (p_log_base - logits[i] + log_norm);
  }
  sum_kld_ += kld;
  sum_kld2_ += kld * kld;
  ++count_;
  n_same_top_ += imax == imax_base;

  const float p_diff = std::exp(-nll) - std::exp(-nll_base);
  sum_p_diff_ += p_diff;
  const double p_diff2 = p_diff * p_diff;
  sum_p_diff2_ += p_diff2;
  sum_p_diff4_ += p_diff2 * p_diff2;
  kld_values_.push_back(static_cast<float>(kld));
  p_diff_values_.push_back(p_diff);
}

KldSummary KldStats::summary() const {
  KldSummary s;
  s.count = count_;
  if (count_ == 0) return s;
  const auto log_ppl = mean_and_uncertainty(sum_nll_, sum_nll2_, count_);
  s.ppl = std::exp(log_ppl.first);
  s.ppl_unc = s.ppl * log_ppl.second;
  const auto log_ppl_base = mean_and_uncertainty(sum_nll_base_, sum_nll_base2_, count_);
  s.ppl_base = std::exp(log_ppl_base.first);
  s.ppl_base_unc = s.ppl_base * log_ppl_base.second;
  const double cov = covariance(sum_nll_, sum_nll_base_, sum_nll_nll_base_, count_);
  s.cor = cov / (log_ppl.second * log_ppl_base.second);
  s.log_ppl_ratio = log_ppl.first - log_ppl_base.first;
  s.log_ppl_ratio_unc =
      std::sqrt(log_ppl.second * log_ppl.second + log_ppl_base.second * log_ppl_base.second - 2.0 * cov);
  s.ppl_ratio = std::exp(s.log_ppl_ratio);
  s.ppl_ratio_unc = s.ppl_ratio * s.log_ppl_ratio_unc;
  s.ppl_diff = s.ppl - s.ppl_base;
  s.ppl_diff_unc =
      std::sqrt(s.ppl_unc * s.ppl_unc + s.ppl_base_unc * s.ppl_base_unc - 2.0 * s.ppl * s.ppl_base * cov);
  const auto kld = mean_and_uncertainty(sum_kld_, sum_kld2_, count_);
  s.kld = kld.first;
  s.kld_unc = kld.second;
  std::vector<float> k = kld_values_, d = p_diff_values_;
  std::sort(k.begin(), k.end());
  std::sort(d.begin(), d.end());
  s.kld_max = k.back();
  s.kld_999 = percentile(k, 0.999f);
  s.kld_99 = percentile(k, 0.990f);
  s.kld_median = median(k);
  s.kld_10 = percentile(k, 0.100f);
  s.kld_5 = percentile(k, 0.050f);
  s.kld_1 = percentile(k, 0.010f);
  s.kld_min = k.front();
  const auto dp = mean_and_uncertainty(sum_p_diff_, sum_p_diff2_, count_);
  s.dp_mean = dp.first;
  s.dp_mean_unc = dp.second;
  s.dp_max = d.back();
  s.dp_999 = percentile(d, 0.999f);
  s.dp_99 = percentile(d, 0.990f);
  s.dp_95 = percentile(d, 0.950f);
  s.dp_90 = percentile(d, 0.900f);
  s.dp_75 = percentile(d, 0.750f);
  s.dp_median = median(d);
  s.dp_25 = percentile(d, 0.250f);
  s.dp_10 = percentile(d, 0.100f);
  s.dp_5 = percentile(d, 0.050f);
  s.dp_1 = percentile(d, 0.010f);
  s.dp_01 = percentile(d, 0.001f);
  s.dp_min = d.front();
  const auto mse = mean_and_uncertainty(sum_p_diff2_, sum_p_diff4_, count_);
  s.dp_rms = std::sqrt(mse.first);
  s.dp_rms_unc = s.dp_rms > 0 ? 0.5 / s.dp_rms * mse.second : 0.0;
  s.same_top = static_cast<double>(n_same_top_) / count_;
  s.same_top_unc = count_ > 1 ? std::sqrt(s.same_top * (1.0 - s.same_top) / (count_ - 1)) : 0.0;
  return s;
}

}  // namespace lumen::calib
