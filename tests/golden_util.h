// Shared helpers for the golden tests: reading llama.cpp reference files and running a
// model teacher-forced through the paged KV cache.
#pragma once

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/shared_dir.h"
#include "base/thread_pool.h"
#include "gguf/model_file.h"
#include "kernels/ops.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace lumen::testing {

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

inline std::string shared_path(const std::string& rel) { return shared_dir() + "/" + rel; }

// One sequence, teacher-forced: prefill a prompt, then feed tokens one at a time through
// the paged KV cache (block size 16, so every sequence spans several blocks) exactly as
// generation does.
class TeacherForcer {
 public:
  TeacherForcer(const std::string& model_path, int32_t n_ctx, bool reference_kernels,
                int n_threads = 2, KvDTypes kv_dtypes = {}, bool flash_attn = false)
      : pool_(n_threads),
        kernels_(reference_kernels ? &kernels::reference_kernel_table()
                                   : &kernels::best_kernel_table()) {
    auto file = gguf::open_model(model_path);
    if (!file.ok()) {
      ADD_FAILURE() << file.message();
      return;
    }
    load(std::move(file).value(), n_ctx, reference_kernels, n_threads, kv_dtypes, flash_attn);
  }
  // Loads an already opened file; on failure ok() is false and load_error() says why
  // (no test failure is added: the caller decides, e.g. to skip an unsupported model).
  // mla_expand_tokens: model::ModelLimits::mla_expand_tokens (MLA's expanded form).
  TeacherForcer(gguf::ModelFile file, int32_t n_ctx, bool reference_kernels, int n_threads, KvDTypes kv_dtypes,
                bool flash_attn = false, int32_t mla_expand_tokens = 0)
      : pool_(n_threads),
        kernels_(reference_kernels ? &kernels::reference_kernel_table()
                                   : &kernels::best_kernel_table()) {
    quiet_ = true;
    load(std::move(file), n_ctx, reference_kernels, n_threads, kv_dtypes, flash_attn, mla_expand_tokens);
  }

  bool ok() const { return model_ && static_cast<int32_t>(kv_.size()) == model_->kv_layout().n_groups(); }
  const std::string& load_error() const { return load_error_; }
  const model::Model& model() const { return *model_; }
  int32_t n_vocab() const { return model_->hparams().n_vocab; }

  // Clears the sequence and runs `ids` as one batch from position 0; returns the logits
  // of the rows asked for (all rows if all_rows, else the last).
  std::vector<float> prefill(const std::vector<int32_t>& ids, bool all_rows = false) {
    n_past_ = 0;
    return run(ids, all_rows);
  }
  // Appends one token at the next position; returns its logits.
  std::vector<float> decode(int32_t id) { return run({id}, false); }
  // Appends `ids` as one batch at the next positions (a chunk of a chunked prefill).
  std::vector<float> extend(const std::vector<int32_t>& ids, bool all_rows) { return run(ids, all_rows); }

 private:
  void fail(const std::string& msg) {
    load_error_ = msg;
    if (!quiet_) ADD_FAILURE() << msg;
  }

  void load(gguf::ModelFile file, int32_t n_ctx, bool reference_kernels, int n_threads, KvDTypes kv_dtypes,
            bool flash_attn, int32_t mla_expand_tokens = 0) {
    model::ModelLimits limits;
    limits.mla_expand_tokens = mla_expand_tokens;
    limits.max_batch_tokens = n_ctx;
    limits.max_logit_rows = n_ctx;
    limits.max_ctx = n_ctx;
    limits.n_threads = n_threads;
    limits.flash_attn = flash_attn;
    auto m = model::Model::load(std::move(file), limits);
    if (!m.ok()) {
      fail(m.message());
      return;
    }
    model_ = std::make_unique<model::Model>(std::move(m).value());
    // As the engine does: the SIMD kernels read the interleaved copies (in memory here).
    if (!reference_kernels) (void)model_->interleave_weights(*kernels_, pool_, "");
    // One storage per KV group of the model, all indexed by the same scrambled table
    // (logical order != physical order); nothing is released, so any window is served.
    const model::KvLayout& layout = model_->kv_layout();
    const int32_t n_blocks = (n_ctx + 15) / 16 + 2;
    for (int32_t g = 0; g < layout.n_groups(); ++g) {
      kv::KvCacheConfig c;
      c.n_slots = layout.n_slots(g);
      c.n_kv_head = layout.n_kv_head;
      c.head_dim = layout.head_dim;
      c.k_only = layout.k_only;
      c.block_size = 16;
      c.n_blocks = n_blocks;
      c.dtypes = kv_dtypes;
      auto s = kv::KvStorage::allocate(c);
      if (!s.ok()) {
        fail(s.message());
        return;
      }
      kv_.push_back(std::move(s).value());
      kv_views_.push_back(kv_.back().view());
    }
    for (int32_t i = 0; i < n_blocks; ++i) table_.push_back((i * 7 + 3) % n_blocks);
    tables_.assign(layout.n_groups(), table_);
  }

  std::vector<float> run(const std::vector<int32_t>& ids, bool all_rows) {
    std::vector<int32_t> rows;
    if (all_rows) {
      for (int32_t i = 0; i < static_cast<int32_t>(ids.size()); ++i) rows.push_back(i);
    } else {
      rows.push_back(static_cast<int32_t>(ids.size()) - 1);
    }
    model::ForwardSeq seq{0, static_cast<int32_t>(ids.size()), n_past_, tables_};
    model::ForwardBatch batch{ids, std::span<const model::ForwardSeq>(&seq, 1), rows};
    std::span<const float> logits = model_->forward(*kernels_, pool_, batch, kv_views_);
    n_past_ += static_cast<int64_t>(ids.size());
    return std::vector<float>(logits.begin(), logits.end());
  }

  ThreadPool pool_;
  const kernels::KernelTable* kernels_;
  bool quiet_ = false;
  std::string load_error_;
  std::unique_ptr<model::Model> model_;
  std::vector<kv::KvStorage> kv_;        // [n_groups]
  std::vector<KvStorageView> kv_views_;  // [n_groups]
  std::vector<int32_t> table_;
  std::vector<std::span<const int32_t>> tables_;  // [n_groups], all table_
  int64_t n_past_ = 0;
};

inline double logsumexp_d(const std::vector<float>& v, size_t off, size_t n) {
  double mx = -INFINITY;
  for (size_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(v[off + i]));
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(v[off + i]) - mx);
  return mx + std::log(s);
}

inline int32_t argmax_of(const std::vector<float>& v, size_t off, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; ++i)
    if (v[off + i] > v[off + best]) best = i;
  return static_cast<int32_t>(best);
}

}  // namespace lumen::testing
