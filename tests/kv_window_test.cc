// Sliding-window KV at engine level (issue 12, acceptance 3): a Gemma-3-like model
// (tests/data/arch/gemma3-swa: tiny-gemma3, 6 layers, layers 0-4 local with window 16,
// layer 5 global) generating far past its window. After every step the one sequence holds
// exactly the global layer's blocks for its whole length plus the local layers' blocks that
// the next query can still see — read from the pools and from the metrics /metrics renders
// (lumen_kv_sequence_bytes) — and the invariants hold.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"

namespace lumen::engine {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(EngineKvWindow, LocalLayersKeepOnlyTheirWindowWhileTheSequenceRuns) {
  EngineConfig c;
  c.n_threads = 1;
  c.n_ctx = 512;
  c.max_batch_tokens = 32;
  c.max_seqs = 1;
  c.block_size = 16;
  auto e = Engine::create(std::string(LUMEN_TEST_DATA_DIR) + "/arch/gemma3-swa/model.gguf", c);
  ASSERT_TRUE(e.ok()) << e.message();
  Engine& eng = **e;
  const model::KvLayout& layout = eng.model().kv_layout();
  ASSERT_EQ(layout.n_groups(), 2);
  ASSERT_EQ(layout.groups[0].window, 0);
  ASSERT_EQ(layout.groups[0].layers, (std::vector<int32_t>{5}));
  ASSERT_EQ(layout.groups[1].window, 16);
  ASSERT_EQ(layout.groups[1].layers, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  const int64_t w = 16, bs = 16;
  const kv::KvManager& kv = eng.kv();
  const size_t full_block_bytes = kv.usage(0).block_bytes, local_block_bytes = kv.usage(1).block_bytes;
  // f16 K and V of 2 kv heads x 16 dims, 16 tokens: 1 global layer / 5 local layers.
  EXPECT_EQ(full_block_bytes, size_t{1 * 2 * 2 * 16 * 2 * 16});
  EXPECT_EQ(local_block_bytes, size_t{5 * 2 * 2 * 16 * 2 * 16});

  Request r;
  r.prompt_ids = eng.tokenizer().encode("Once upon a time", true, false);
  r.params.max_tokens = 400;
  r.params.ignore_eos = true;
  r.params.sampling.temperature = 0;
  const auto n_prompt = static_cast<int64_t>(r.prompt_ids.size());
  ASSERT_TRUE(eng.add_request(std::move(r)).ok());
  int64_t n_generated = 0;
  int64_t n_checked = 0;
  while (eng.has_work()) {
    bool finished = false;
    for (const RequestEvent& ev : eng.step()) {
      n_generated += static_cast<int64_t>(ev.new_token_ids.size());
      finished |= ev.request_finished;
    }
    ASSERT_EQ(eng.check_invariants(), "");
    if (finished) break;
    // Computed: the prompt and every generated token but the newest (computed next step).
    const int64_t L = n_prompt + n_generated - 1;
    const int64_t n_full = ceil_div(L, bs);
    const int64_t n_local = n_full - std::max<int64_t>(0, L - w + 1) / bs;  // what query L sees
    ASSERT_EQ(kv.pool(0).n_used(), n_full) << "L " << L;
    ASSERT_EQ(kv.pool(1).n_used(), n_local) << "L " << L;
    ASSERT_LE(n_local, 2);  // window 16 spans at most two blocks of 16
    const EngineMetrics m = eng.metrics();
    ASSERT_EQ(m.kv_seq_bytes_max, static_cast<uint64_t>(n_full * full_block_bytes + n_local * local_block_bytes));
    ASSERT_EQ(m.kv_groups.size(), 2u);
    ASSERT_EQ(m.kv_groups[1].n_used, n_local);
    ++n_checked;
  }
  EXPECT_EQ(n_generated, 400);
  EXPECT_GT(n_checked, 390);
  EXPECT_EQ(eng.kv_blocks_in_use(), 0);
}

}  // namespace
}  // namespace lumen::engine
