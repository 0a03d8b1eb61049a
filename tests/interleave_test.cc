// Interleaved weights (kernel_table.h, InterleavedKernels): the copies change no output, and
// their cache file (model/interleaved_cache.h) is built once, reused, rebuilt when stale or
// damaged, and replaced by an in-memory copy when it cannot be written.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "base/huge_buffer.h"
#include "base/shared_dir.h"
#include "convert/synth.h"
#include "convert/type_rules.h"
#include "engine/engine.h"
#include "gguf/gguf_test_util.h"
#include "gguf/model_file.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "model/model.h"

namespace lumen {
namespace {

namespace fs = std::filesystem;

std::string model_path() { return shared_dir() + "/models/TinyStories-656K/TinyStories-656K-Q8_0.gguf"; }

using gguf::testing::TempDir;  // a fresh directory, removed with its files when the test ends

std::vector<int32_t> greedy(const engine::EngineConfig& cfg, int n, const std::string& path = model_path()) {
  engine::EngineConfig c = cfg;
  c.n_threads = 2;
  c.n_ctx = 256;
  c.max_batch_tokens = 64;
  auto e = engine::Engine::create(path, c);
  EXPECT_TRUE(e.ok()) << e.message();
  if (!e.ok()) return {};
  engine::Request r;
  r.prompt_ids = (*e)->tokenizer().encode("Once upon a time, there was a little girl who loved to play in the park", true, false);
  r.params.max_tokens = n;
  r.params.ignore_eos = true;
  r.params.sampling.temperature = 0;
  EXPECT_TRUE((*e)->add_request(r).ok());
  std::vector<int32_t> out;
  while ((*e)->has_work())
    for (engine::RequestEvent& ev : (*e)->step()) out.insert(out.end(), ev.new_token_ids.begin(), ev.new_token_ids.end());
  return out;
}

model::Model::InterleaveReport interleave(const std::string& path, const std::string& cache_dir,
                                          const kernels::KernelTable& k = kernels::best_kernel_table()) {
  auto file = gguf::open_model(path);
  EXPECT_TRUE(file.ok()) << file.message();
  model::ModelLimits limits;
  limits.max_batch_tokens = 16;
  limits.max_logit_rows = 1;
  limits.max_ctx = 64;
  limits.n_threads = 2;
  auto m = model::Model::load(std::move(file).value(), limits);
  EXPECT_TRUE(m.ok()) << m.message();
  ThreadPool pool(2);
  return m.value().interleave_weights(k, pool, cache_dir);
}

bool has_interleaved_kernels() {
  return kernels::find_matmul_kernels(kernels::best_kernel_table(), DType::kQ8_0)->interleaved.layout != nullptr;
}

// Prefill (many activation rows) and decode (one) through the copies give the tokens the
// file's layout gives, whether the copies are in memory or in the cache file.
TEST(Interleave, OutputsEqualTheFileLayout) {
  engine::EngineConfig off;
  off.interleave_weights = false;
  const std::vector<int32_t> want = greedy(off, 40);
  ASSERT_EQ(want.size(), 40u);
  engine::EngineConfig mem;
  EXPECT_EQ(greedy(mem, 40), want) << "interleaved in memory";
  engine::EngineConfig cached;
  const TempDir scratch;
  cached.interleave_cache_dir = scratch.path();
  EXPECT_EQ(greedy(cached, 40), want) << "interleaved cache, built";
  EXPECT_EQ(greedy(cached, 40), want) << "interleaved cache, reused";
}

// A mixture of experts: every expert is its own matrix (a view into the 3-D tensor), so each
// gets its own interleaved copy, and the outputs are those of the file's layout.
TEST(Interleave, ExpertsGetCopiesAndTheSameOutputs) {
  if (!has_interleaved_kernels()) GTEST_SKIP() << "no interleaved kernels on this CPU";
  const TempDir scratch;
  const fs::path dir = scratch.path();
  auto c = convert::synth_preset("tiny-qwen3moe", shared_dir());
  ASSERT_TRUE(c.ok()) << c.message();
  c->rules = *convert::make_type_rules("q8_0", "", "");
  c->n_ff_exp = 32;  // whole q8_0 blocks in ffn_down_exps' rows
  const std::string path = (dir / "moe-q8_0.gguf").string();
  ASSERT_TRUE(convert::synth_model(*c, path, nullptr).ok());
  // 3 layers x 8 experts x gate, up, down of 64 x 32 at q8_0 (34 bytes per 32 weights).
  const model::Model::InterleaveReport report = interleave(path, "");
  EXPECT_GE(report.n_bytes, size_t{3} * 8 * 3 * 64 * 32 / 32 * 34);
  engine::EngineConfig off;
  off.interleave_weights = false;
  const std::vector<int32_t> want = greedy(off, 24, path);
  ASSERT_EQ(want.size(), 24u);
  EXPECT_EQ(greedy(engine::EngineConfig{}, 24, path), want);
}

// The same for llama-quantize's Q4_K_M mix: q4_K + q6_K at rows of 256 (tiny-llama widened),
// q5_0 + q8_0 where rows are not a multiple of 256 (tiny-qwen2, as qwen2.5-0.5b).
TEST(Interleave, Q4_K_MMixOutputsEqualTheFileLayout) {
  const TempDir scratch;
  const fs::path dir = scratch.path();
  struct Case {
    const char* preset;
    int64_t width;
    std::vector<DType> want_types;
  };
  const Case cases[] = {{"tiny-llama", 256, {DType::kQ4_K, DType::kQ6_K}}, {"tiny-qwen2", 64, {DType::kQ5_0, DType::kQ8_0}}};
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.preset);
    auto c = convert::synth_preset(cs.preset, shared_dir());
    ASSERT_TRUE(c.ok()) << c.message();
    c->n_embd = c->n_ff = cs.width;
    c->rules = *convert::make_type_rules("q4_k_m", "", "");
    const std::string path = (dir / (std::string(cs.preset) + "-q4_k_m.gguf")).string();
    ASSERT_TRUE(convert::synth_model(*c, path, nullptr).ok());
    auto file = gguf::open_model(path);
    ASSERT_TRUE(file.ok()) << file.message();
    for (DType want : cs.want_types) {
      bool found = false;
      for (const auto& t : file->tensors()) found = found || t.view.dtype == want;
      EXPECT_TRUE(found) << "no " << dtype_name(want) << " tensor: the case does not test its layout";
    }
    engine::EngineConfig off;
    off.interleave_weights = false;
    const std::vector<int32_t> want = greedy(off, 24, path);
    ASSERT_EQ(want.size(), 24u);
    engine::EngineConfig on;
    on.interleave_cache_dir = "";
    EXPECT_EQ(greedy(on, 24, path), want);
  }
}

// --refresh-pages (EngineConfig::refresh_page_cache): a GGUF file just written sits in the
// page cache in small folios; with the flag, load drops and re-reads it through the
// MADV_HUGEPAGE mapping, so its weights map on 2 MiB pages; without it nothing is measured.
TEST(Interleave, RefreshPagesPutsTheWeightsOnHugePages) {
  const TempDir scratch;
  const fs::path dir = scratch.path();
  auto c = convert::synth_preset("tiny-llama", shared_dir());
  ASSERT_TRUE(c.ok()) << c.message();
  c->n_embd = c->n_ff = 512;
  c->rules = *convert::make_type_rules("f32", "", "");  // ~25 MiB: whole 2 MiB pages inside
  const std::string path = (dir / "refresh-f32.gguf").string();
  ASSERT_TRUE(convert::synth_model(*c, path, nullptr).ok());
  engine::EngineConfig cfg;
  cfg.n_threads = 1;
  cfg.n_ctx = 64;
  cfg.max_batch_tokens = 16;
  cfg.interleave_weights = false;
  {
    auto e = engine::Engine::create(path, cfg);
    ASSERT_TRUE(e.ok()) << e.message();
    EXPECT_LT((*e)->model().weights_huge_fraction(), 0.0);
  }
  cfg.refresh_page_cache = true;
  auto e = engine::Engine::create(path, cfg);
  ASSERT_TRUE(e.ok()) << e.message();
  const double fraction = (*e)->model().weights_huge_fraction();
  fs::remove_all(dir);
  if (!anonymous_huge_pages_enabled()) GTEST_SKIP() << "transparent huge pages are off on this machine";
  ASSERT_GE(fraction, 0.0) << "the flag did not reach the model";
  if (fraction < 0.9) {
    // As MappedFile.PopulateOnHugePages...: some kernels / filesystems never map files on
    // 2 MiB pages; the mechanism is tested there, the wiring here.
    GTEST_SKIP() << "this kernel / filesystem mapped " << fraction << " of the file on 2 MiB pages";
  }
}

TEST(Interleave, CacheIsBuiltOnceReusedAndRebuiltWhenStale) {
  if (!has_interleaved_kernels()) GTEST_SKIP() << "no interleaved kernels on this CPU";
  const TempDir scratch;
  const fs::path dir = scratch.path();
  const fs::path model = dir / "model.gguf";  // a copy whose mtime the test may change
  fs::copy_file(model_path(), model);
  const std::string cache = (dir / "cache").string();

  const model::Model::InterleaveReport first = interleave(model.string(), cache);
  EXPECT_TRUE(first.cache_error.empty()) << first.cache_error;
  EXPECT_GT(first.n_bytes, 0u);
  EXPECT_TRUE(first.cache_built);
  ASSERT_FALSE(first.cache_path.empty());
  EXPECT_EQ(fs::path(first.cache_path).parent_path(), fs::path(cache));
  const auto size = fs::file_size(first.cache_path);
  EXPECT_GT(size, first.n_bytes);

  const model::Model::InterleaveReport second = interleave(model.string(), cache);
  EXPECT_FALSE(second.cache_built) << "a valid cache must be reused";
  EXPECT_EQ(second.cache_path, first.cache_path);

  // Damaged header: rebuilt in place.
  {
    std::fstream f(first.cache_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('#');
  }
  const model::Model::InterleaveReport damaged = interleave(model.string(), cache);
  EXPECT_TRUE(damaged.cache_built) << "a damaged cache must be rebuilt";
  EXPECT_EQ(fs::file_size(first.cache_path), size);

  // Truncated: rebuilt.
  fs::resize_file(first.cache_path, size / 2);
  const model::Model::InterleaveReport truncated = interleave(model.string(), cache);
  EXPECT_TRUE(truncated.cache_built) << "a truncated cache must be rebuilt";
  EXPECT_EQ(fs::file_size(first.cache_path), size);

  // Another model's cache in the same directory (here: the same bytes at another path).
  const fs::path other = dir / "other.gguf";
  fs::copy_file(model, other);
  const model::Model::InterleaveReport other_report = interleave(other.string(), cache);
  EXPECT_TRUE(other_report.cache_built);
  EXPECT_NE(other_report.cache_path, first.cache_path);

  // The model file changed (new mtime): a new cache file, not the old one.
  const struct timespec times[2] = {{0, UTIME_OMIT}, {1234567890, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, model.c_str(), times, 0), 0);
  const model::Model::InterleaveReport changed = interleave(model.string(), cache);
  EXPECT_TRUE(changed.cache_built);
  EXPECT_NE(changed.cache_path, first.cache_path);

  // The old version's file is gone (it can never be valid again), the other model's stays,
  // and no temporary files are left behind.
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(cache)) files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  std::vector<std::string> want = {changed.cache_path, other_report.cache_path};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(files, want);
}

TEST(Interleave, UnwritableCacheFallsBackToMemoryWithAReason) {
  if (!has_interleaved_kernels()) GTEST_SKIP() << "no interleaved kernels on this CPU";
  const TempDir scratch;
  const fs::path dir = scratch.path();
  const fs::path blocker = dir / "not-a-dir";
  std::ofstream(blocker) << "x";
  const model::Model::InterleaveReport r = interleave(model_path(), (blocker / "cache").string());
  EXPECT_GT(r.n_bytes, 0u) << "the copies must still be made, in memory";
  EXPECT_TRUE(r.cache_path.empty());
  EXPECT_NE(r.cache_error.find("not-a-dir"), std::string::npos) << r.cache_error;
}

TEST(Interleave, TablesWithoutInterleavedKernelsCopyNothing) {
  const model::Model::InterleaveReport r = interleave(model_path(), "", kernels::reference_kernel_table());
  EXPECT_EQ(r.n_bytes, 0u);
  EXPECT_TRUE(r.cache_path.empty());
  EXPECT_TRUE(r.cache_error.empty());
}

}  // namespace
}  // namespace lumen
