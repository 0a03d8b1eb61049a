// Test helpers for the convert layer: temp paths, shared data, and running a model file
// through lumen's model to compare logits before and after a conversion.
// (Needs lumen_model and lumen_kv linked into lumen_convert_tests.)
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "base/shared_dir.h"
#include "base/thread_pool.h"
#include "gguf/model_file.h"
#include "kernels/ops.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace lumen::convert::testing {

inline std::string shared_path(const std::string& rel) { return shared_dir() + "/" + rel; }

inline std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "lumen_convert_" + std::to_string(::getpid()) + "_" + name;
}

// Logits [ids.size()][n_vocab] of `ids` run as one batch from position 0, with the scalar
// reference kernels and an F32 KV cache (so differences come from the weights alone).
inline Result<std::vector<float>> model_logits(const std::string& path, const std::vector<int32_t>& ids,
                                               int32_t* n_vocab) {
  LUMEN_ASSIGN_OR_RETURN(gguf::ModelFile file, gguf::open_model(path));
  const auto n = static_cast<int32_t>(ids.size());
  model::ModelLimits limits;
  limits.max_batch_tokens = n;
  limits.max_logit_rows = n;
  limits.max_ctx = n;
  limits.n_threads = 1;
  LUMEN_ASSIGN_OR_RETURN(model::Model m, model::Model::load(std::move(file), limits));
  const model::HParams& hp = m.hparams();
  const model::KvLayout& layout = m.kv_layout();
  const int32_t n_blocks = (n + 15) / 16 + 1;
  std::vector<kv::KvStorage> kv;  // one per KV group, all read through the same table
  std::vector<KvStorageView> views;
  for (int32_t g = 0; g < layout.n_groups(); ++g) {
    kv::KvCacheConfig c;
    c.n_slots = layout.n_slots(g);
    c.n_kv_head = layout.n_kv_head;
    c.head_dim = layout.head_dim;
    c.k_only = layout.k_only;
    c.block_size = 16;
    c.n_blocks = n_blocks;
    c.dtypes = {DType::kF32, DType::kF32};
    LUMEN_ASSIGN_OR_RETURN(kv::KvStorage s, kv::KvStorage::allocate(c));
    kv.push_back(std::move(s));
    views.push_back(kv.back().view());
  }
  std::vector<int32_t> table(n_blocks);
  std::iota(table.begin(), table.end(), 0);
  const std::vector<std::span<const int32_t>> tables(layout.n_groups(), table);
  std::vector<int32_t> rows(n);
  std::iota(rows.begin(), rows.end(), 0);
  model::ForwardSeq seq{0, n, 0, tables};
  model::ForwardBatch batch{ids, std::span<const model::ForwardSeq>(&seq, 1), rows};
  ThreadPool pool(1);
  std::span<const float> logits = m.forward(kernels::reference_kernel_table(), pool, batch, views);
  *n_vocab = hp.n_vocab;
  return std::vector<float>(logits.begin(), logits.end());
}

struct LogitsDiff {
  double max_abs = 0;        // max |a - b|
  double max_ref = 0;        // max |a|
  double rel_rms = 0;        // rms(a - b) / rms(a)
  int n_argmax_differ = 0;   // rows whose argmax differs
};

inline LogitsDiff compare_logits(const std::vector<float>& a, const std::vector<float>& b, int32_t n_vocab) {
  LogitsDiff d;
  EXPECT_EQ(a.size(), b.size());
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double e = static_cast<double>(a[i]) - b[i];
    d.max_abs = std::max(d.max_abs, std::fabs(e));
    d.max_ref = std::max(d.max_ref, std::fabs(static_cast<double>(a[i])));
    err2 += e * e;
    ref2 += static_cast<double>(a[i]) * a[i];
  }
  d.rel_rms = ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0;
  for (size_t row = 0; row + n_vocab <= std::min(a.size(), b.size()); row += n_vocab) {
    const auto ia = std::max_element(a.begin() + row, a.begin() + row + n_vocab) - a.begin();
    const auto ib = std::max_element(b.begin() + row, b.begin() + row + n_vocab) - b.begin();
    d.n_argmax_differ += ia != ib;
  }
  return d;
}

}  // namespace lumen::convert::testing
