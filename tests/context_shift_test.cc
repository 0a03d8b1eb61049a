// Context shift (engine/context_shift.h) through the Engine API on the real tiny models
// and the synthetic architecture cases: after a shift, a completion continues exactly as
// a fresh run over the tokens it kept (the rest is recomputed), for full attention, sliding
// windows, partial rotary and scaled RoPE, and a shift never touches a block that another
// sequence shares.
#include <gtest/gtest.h>

#include "base/shared_dir.h"
#include "engine/context_shift.h"
#include "engine/engine.h"

namespace lumen::engine {
namespace {

constexpr int32_t kCtx = 64;

std::unique_ptr<Engine> make_engine(const std::string& path, int32_t max_seqs = 1, int32_t n_ctx = kCtx) {
  EngineConfig c;
  c.n_threads = 2;
  c.n_ctx = n_ctx;
  c.max_batch_tokens = 32;  // recomputing the rest takes more than one chunk
  c.max_seqs = max_seqs;
  c.block_size = 16;
  auto e = Engine::create(path, c);
  EXPECT_TRUE(e.ok()) << path << ": " << e.message();
  return e.ok() ? std::move(e).value() : nullptr;
}

Request greedy(const std::vector<int32_t>& prompt, int32_t n, bool shift, int32_t n_keep = 0) {
  Request r;
  r.prompt_ids = prompt;
  r.params.max_tokens = n;
  r.params.ignore_eos = true;
  r.params.sampling.temperature = 0;
  r.params.context_shift = shift;
  r.params.n_keep = n_keep;
  return r;
}

struct Out {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
};

// Steps until every request added so far finished; the generated tokens by request id.
std::map<RequestId, Out> drain(Engine& e, std::map<RequestId, Out> out = {}) {
  while (e.has_work()) {
    for (RequestEvent& ev : e.step()) {
      Out& o = out[ev.request_id];
      o.tokens.insert(o.tokens.end(), ev.new_token_ids.begin(), ev.new_token_ids.end());
      if (ev.finished) o.reason = ev.finish_reason;
    }
  }
  return out;
}

std::vector<int32_t> prompt_of(const Engine& e, int32_t n) {
  std::vector<int32_t> p;
  const int32_t n_vocab = e.tokenizer().n_vocab();
  for (int32_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((7919ll * (i + 3)) % (n_vocab - 3)) + 3);
  if (e.tokenizer().bos_id() >= 0) p[0] = e.tokenizer().bos_id();
  return p;
}

// The tokens a completion keeps at its first shift: stream = prompt + generated.
std::vector<int32_t> kept_at_first_shift(const std::vector<int32_t>& stream, int32_t n_keep) {
  const ContextShiftPlan plan = plan_context_shift(kCtx, n_keep);
  std::vector<int32_t> kept(stream.begin(), stream.begin() + plan.n_keep);
  kept.insert(kept.end(), stream.begin() + plan.n_keep + plan.n_discard, stream.begin() + kCtx + 1);
  return kept;
}

std::string case_path(const std::string& name) {
  if (name == "stories260K") return shared_dir() + "/models/stories260K/stories260K.gguf";
  return std::string(LUMEN_TEST_DATA_DIR) + "/arch/" + name + "/model.gguf";
}

struct ShiftCase {
  std::string model;
  int32_t n_keep;
};

void PrintTo(const ShiftCase& c, std::ostream* os) { *os << c.model << " n_keep " << c.n_keep; }

class ContextShift : public ::testing::TestWithParam<ShiftCase> {};

// A completion that runs far past its context keeps going, and what it generates after its
// first shift is what a fresh run over the kept tokens generates (bit for bit: the kernels
// are batch invariant, and the shifted part is recomputed).
TEST_P(ContextShift, ContinuesExactlyLikeAFreshRunOverTheKeptTokens) {
  const ShiftCase& c = GetParam();
  auto e = make_engine(case_path(c.model));
  ASSERT_TRUE(e);
  const std::vector<int32_t> prompt = prompt_of(*e, 20);
  const int32_t n_gen = 3 * kCtx;  // several shifts
  ASSERT_TRUE(e->add_request(greedy(prompt, n_gen, true, c.n_keep)).ok());
  const Out shifted = drain(*e).begin()->second;
  EXPECT_EQ(shifted.reason, FinishReason::kLength);
  ASSERT_EQ(shifted.tokens.size(), static_cast<size_t>(n_gen));
  EXPECT_GE(e->metrics().context_shifts, 3u);
  EXPECT_EQ(e->kv_blocks_in_use(), 0);
  EXPECT_EQ(e->check_invariants(), "");

  std::vector<int32_t> stream = prompt;
  stream.insert(stream.end(), shifted.tokens.begin(), shifted.tokens.end());
  const std::vector<int32_t> kept = kept_at_first_shift(stream, c.n_keep);
  // Until its next shift the completion has kCtx + 1 - kept.size() tokens to generate.
  const auto n_after = static_cast<int32_t>(kCtx + 1 - kept.size());
  auto fresh_engine = make_engine(case_path(c.model));
  ASSERT_TRUE(fresh_engine->add_request(greedy(kept, n_after, false)).ok());
  const Out fresh = drain(*fresh_engine).begin()->second;
  const std::vector<int32_t> after(stream.begin() + kCtx + 1, stream.begin() + kCtx + 1 + n_after);
  EXPECT_EQ(fresh.tokens, after);
}

INSTANTIATE_TEST_SUITE_P(Models, ContextShift,
                         ::testing::Values(ShiftCase{"stories260K", 0}, ShiftCase{"stories260K", 5},
                                           ShiftCase{"stories260K", 16}, ShiftCase{"qwen2", 5},
                                           ShiftCase{"stablelm-partial-rotary", 5}, ShiftCase{"phi3-longrope", 5},
                                           ShiftCase{"mistral-swa", 5}, ShiftCase{"mistral-swa", 16},
                                           ShiftCase{"gemma3-swa", 16}, ShiftCase{"gemma2-swa", 5}),
                         [](const auto& info) {
                           std::string n = info.param.model + "_keep" + std::to_string(info.param.n_keep);
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// Off, the completion ends when the next token would not fit (the old behaviour).
TEST(ContextShiftOff, EndsWithContextFull) {
  auto e = make_engine(case_path("stories260K"));
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->add_request(greedy(prompt_of(*e, 20), 200, false)).ok());
  const Out out = drain(*e).begin()->second;
  EXPECT_EQ(out.reason, FinishReason::kContextFull);
  EXPECT_EQ(out.tokens.size(), static_cast<size_t>(kCtx + 1 - 20));
  EXPECT_EQ(e->metrics().context_shifts, 0u);
}

// Nothing to drop (n_keep covers the context): the completion ends as without shift.
TEST(ContextShiftOff, KeepingEverythingEndsWithContextFull) {
  auto e = make_engine(case_path("stories260K"));
  ASSERT_TRUE(e);
  ASSERT_TRUE(e->add_request(greedy(prompt_of(*e, 20), 200, true, kCtx)).ok());
  EXPECT_EQ(drain(*e).begin()->second.reason, FinishReason::kContextFull);
  Request bad = greedy(prompt_of(*e, 20), 10, true, -1);
  EXPECT_FALSE(e->add_request(bad).ok());
}

// A second request shares the first's prompt blocks through the prefix cache while the
// first shifts (n_keep inside the shared block 0, which the shift then writes): the
// second's output is what it generates alone, and the first's is a fresh run's.
TEST(ContextShiftSharing, SharedBlocksAreNotWritten) {
  const std::string path = case_path("stories260K");
  auto e = make_engine(path, 2);
  auto solo = make_engine(path, 1);
  ASSERT_TRUE(e && solo);
  const std::vector<int32_t> a = prompt_of(*e, 50);
  std::vector<int32_t> b(a.begin(), a.begin() + 32);  // two whole blocks shared
  for (int32_t i = 0; i < 8; ++i) b.push_back(a[static_cast<size_t>(40 - i)]);
  const int32_t n_a = 40, n_b = 24;
  auto id_a = e->add_request(greedy(a, n_a, true, 5));
  ASSERT_TRUE(id_a.ok());
  std::map<RequestId, Out> out;
  for (RequestEvent& ev : e->step()) out[ev.request_id].tokens = ev.new_token_ids;  // a's prompt in
  auto id_b = e->add_request(greedy(b, n_b, false));
  ASSERT_TRUE(id_b.ok());
  out = drain(*e, std::move(out));
  EXPECT_EQ(e->metrics().context_shifts, 1u);
  EXPECT_EQ(e->metrics().cached_tokens, 32u);  // b really shared a's blocks
  EXPECT_EQ(e->check_invariants(), "");

  ASSERT_TRUE(solo->add_request(greedy(b, n_b, false)).ok());
  EXPECT_EQ(out[*id_b].tokens, drain(*solo).begin()->second.tokens);
  std::vector<int32_t> stream = a;
  stream.insert(stream.end(), out[*id_a].tokens.begin(), out[*id_a].tokens.end());
  const std::vector<int32_t> kept = kept_at_first_shift(stream, 5);
  ASSERT_TRUE(solo->add_request(greedy(kept, n_a - (kCtx + 1 - 50), false)).ok());
  EXPECT_EQ(drain(*solo).begin()->second.tokens, std::vector<int32_t>(stream.begin() + kCtx + 1, stream.end()));
}

}  // namespace
}  // namespace lumen::engine
