// --rotate-k against keys with outlier channels (as trained models have; synth's
// --k-outliers): the randomized Hadamard rotation spreads each outlier over the head, so a
// q8_0 / q4_0 K cache quantizes it with less error and the teacher-forced log-probabilities
// of a prompt stay closer to the f16 cache's. Without outliers it changes little.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "base/shared_dir.h"
#include "convert/synth.h"
#include "convert/type_rules.h"
#include "engine/engine.h"
#include "gguf/gguf_test_util.h"

namespace lumen {
namespace {

namespace fs = std::filesystem;

std::string synth_outlier_model(const fs::path& dir, int64_t k_outliers) {
  auto c = convert::synth_preset("tiny-llama", shared_dir());
  EXPECT_TRUE(c.ok()) << c.message();
  if (!c.ok()) return "";
  c->n_embd = 256;
  c->n_head = 4;
  c->n_kv_head = 2;
  c->n_head_dim = 64;
  c->n_layer = 2;
  c->n_ff = 256;
  c->seed = 5;
  c->k_outliers = k_outliers;
  c->k_outlier_scale = 16;
  c->rules = *convert::make_type_rules("f16", "", "");
  const std::string path = (dir / ("outliers-" + std::to_string(k_outliers) + ".gguf")).string();
  const Status st = convert::synth_model(*c, path, nullptr);
  EXPECT_TRUE(st.ok()) << st.message();
  return st.ok() ? path : "";
}

// log p(prompt[i] | prompt[<i]) for i >= 1 with this cache.
std::vector<double> prompt_logprobs(const std::string& path, KvDTypes types, bool rotate) {
  engine::EngineConfig c;
  c.n_threads = 2;
  c.n_ctx = 512;
  c.max_batch_tokens = 512;
  c.max_logit_rows = 512;  // every prompt position's logits
  c.kv_dtypes = types;
  c.rotate_k = rotate;
  auto e = engine::Engine::create(path, c);
  EXPECT_TRUE(e.ok()) << e.message();
  if (!e.ok()) return {};
  engine::Request r;
  r.prompt_ids = (*e)->tokenizer().encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
      "friends. One day, she saw a big red ball under a tree. She ran to the ball and kicked it very hard, and it "
      "flew over the fence into the garden of an old man who lived next door.",
      true, false);
  r.params.max_tokens = 1;
  r.params.prompt_logprobs = true;
  const auto id = (*e)->add_request(r);
  EXPECT_TRUE(id.ok()) << id.message();
  std::vector<double> out;
  while ((*e)->has_work())
    for (const engine::RequestEvent& ev : (*e)->step())
      if (!ev.prompt_logprobs.empty()) out = ev.prompt_logprobs;
  EXPECT_GT(out.size(), 60u);
  return out;
}

double mean_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += std::abs(a[i] - b[i]);
  return a.empty() ? 0 : s / static_cast<double>(a.size());
}

TEST(KvRotation, OutlierKeysLoseLessInAQuantizedCache) {
  const gguf::testing::TempDir scratch;  // removed with its files when the test ends
  const fs::path dir = scratch.path();
  for (int64_t k_outliers : {0, 2}) {
    SCOPED_TRACE("outlier channels per head: " + std::to_string(k_outliers));
    const std::string path = synth_outlier_model(dir, k_outliers);
    ASSERT_FALSE(path.empty());
    const std::vector<double> base = prompt_logprobs(path, {DType::kF16, DType::kF16}, false);
    for (DType k : {DType::kQ8_0, DType::kQ4_0}) {
      SCOPED_TRACE(std::string(dtype_name(k)));
      const double plain = mean_abs_diff(prompt_logprobs(path, {k, DType::kF16}, false), base);
      const double rotated = mean_abs_diff(prompt_logprobs(path, {k, DType::kF16}, true), base);
      std::printf("k_outliers %lld, K %s: mean |d logprob| vs f16: plain %.5f, rotated %.5f\n",
                  static_cast<long long>(k_outliers), std::string(dtype_name(k)).c_str(), plain, rotated);
      EXPECT_GT(plain, 0.0);
      if (k_outliers > 0) EXPECT_LT(rotated, 0.75 * plain) << "the rotation spreads the outliers";
      else EXPECT_LT(rotated, 1.5 * plain) << "without outliers it neither helps much nor hurts";
    }
  }
}

// Latent attention caches a compressed latent shared by all heads, not per-head keys:
// --rotate-k would do nothing there, so it is refused by name; so is a -ctv, as the cache
// has no V rows.
TEST(KvRotation, LatentAttentionRefusesItAndAVType) {
  const gguf::testing::TempDir scratch;
  const fs::path dir = scratch.path();
  auto c = convert::synth_preset("tiny-deepseek2", shared_dir());
  ASSERT_TRUE(c.ok()) << c.message();
  c->rules = *convert::make_type_rules("f16", "", "");
  const std::string path = (dir / "mla.gguf").string();
  ASSERT_TRUE(convert::synth_model(*c, path, nullptr).ok());
  engine::EngineConfig ec;
  ec.n_threads = 1;
  ec.n_ctx = 128;
  ec.kv_dtypes = {DType::kQ8_0, DType::kF16};
  ec.rotate_k = true;
  auto e = engine::Engine::create(path, ec);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("--rotate-k"), std::string::npos) << e.message();
  // Nor is a V type taken that its cache (no V rows) would ignore.
  ec.rotate_k = false;
  ec.kv_dtypes = {DType::kF16, DType::kQ8_0};
  auto v = engine::Engine::create(path, ec);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.message().find("-ctv q8_0"), std::string::npos) << v.message();
  ec.kv_dtypes = {DType::kF32, DType::kF16};  // -ctk alone: fine
  auto k_only = engine::Engine::create(path, ec);
  EXPECT_TRUE(k_only.ok()) << k_only.message();
}

}  // namespace
}  // namespace lumen
