// Context shift (engine/context_shift.h) through the Engine API on the real tiny models
// and the synthetic architecture cases: after a shift, a completion continues exactly as
// a fresh run over the tokens it kept (the rest is recomputed), for full attention, sliding
// windows, partial rotary and scaled RoPE, and a shift never touches a block that another
// sequence shares.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "base/shared_dir.h"
#include "engine/context_shift.h"
#include "engine/engine.h"
#include "run_lumen.h"

namespace lumen::engine {
namespace {

constexpr int32_t kCtx = 64;

std::unique_ptr<Engine> make_engine(const std::string& path, int32_t max_seqs = 1,
                                    ContextShiftMode mode = ContextShiftMode::kRecompute) {
  EngineConfig c;
  c.context_shift_mode = mode;
  c.n_threads = 2;
  c.n_ctx = kCtx;
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
  std::vector<std::vector<std::pair<int32_t, float>>> top;  // per token, with top_logits
  FinishReason reason = FinishReason::kNone;
};

// Steps until every request added so far finished; the generated tokens by request id.
std::map<RequestId, Out> drain(Engine& e, std::map<RequestId, Out> out = {}) {
  while (e.has_work()) {
    for (RequestEvent& ev : e.step()) {
      Out& o = out[ev.request_id];
      o.tokens.insert(o.tokens.end(), ev.new_token_ids.begin(), ev.new_token_ids.end());
      o.top.insert(o.top.end(), ev.top.begin(), ev.top.end());
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

// Re-RoPE on a one-layer model: layer 0's K/V of a token depend on the token alone, so the
// moved rows are what a fresh run stores at the new positions, up to one more F16 rounding
// of K: the logits after the shift are a fresh run's within that, and so is the greedy text.
// (With more layers the moved rows also carry what the dropped tokens contributed, as in
// llama.cpp's shift: not a fresh run's.)
TEST(ContextShiftReRope, OneLayerModelMatchesAFreshRun) {
  const std::string path = ::testing::TempDir() + "lumen_shift_1layer_" + std::to_string(getpid()) + ".gguf";
  const lumen::testing::CmdResult r = lumen::testing::run_lumen(
      {"synth", "--preset", "tiny-llama", "--layers", "1", "--type", "f32", "--seed", "3", "-o", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const int32_t n_keep : {5, 16}) {
    SCOPED_TRACE("n_keep " + std::to_string(n_keep));
    auto e = make_engine(path, 1, ContextShiftMode::kReRope);
    ASSERT_TRUE(e);
    const std::vector<int32_t> prompt = prompt_of(*e, 20);
    Request req = greedy(prompt, kCtx + 8, true, n_keep);
    req.params.top_logits = 4;
    ASSERT_TRUE(e->add_request(req).ok());
    const Out shifted = drain(*e).begin()->second;
    ASSERT_EQ(shifted.tokens.size(), static_cast<size_t>(kCtx + 8));
    EXPECT_GE(e->metrics().context_shifts, 1u);  // the next one comes 8 or more tokens later
    EXPECT_EQ(e->check_invariants(), "");
    std::vector<int32_t> stream = prompt;
    stream.insert(stream.end(), shifted.tokens.begin(), shifted.tokens.end());
    const std::vector<int32_t> kept = kept_at_first_shift(stream, n_keep);
    auto fresh_engine = make_engine(path);
    Request fr = greedy(kept, 8, false);
    fr.params.top_logits = 4;
    ASSERT_TRUE(fresh_engine->add_request(fr).ok());
    const Out fresh = drain(*fresh_engine).begin()->second;
    const size_t first_after = kCtx + 1 - prompt.size();  // generated index of the first token after the shift
    ASSERT_EQ(fresh.top.size(), 8u);
    for (size_t j = 0; j < 8; ++j) {
      EXPECT_EQ(shifted.tokens[first_after + j], fresh.tokens[j]) << "token " << j;
      for (size_t t = 0; t < 4; ++t) {
        EXPECT_EQ(shifted.top[first_after + j][t].first, fresh.top[j][t].first) << "token " << j;
        EXPECT_NEAR(shifted.top[first_after + j][t].second, fresh.top[j][t].second, 1e-2) << "token " << j;
      }
    }
  }
  std::filesystem::remove(path);
}

// A second request shares the first's prompt blocks through the prefix cache while the
// first shifts (n_keep inside the shared block 0, which the shift then writes): the
// second's output is what it generates alone, and the first's is a fresh run's.
class ContextShiftSharing : public ::testing::TestWithParam<ContextShiftMode> {};

TEST_P(ContextShiftSharing, SharedBlocksAreNotWritten) {
  const std::string path = case_path("stories260K");
  auto e = make_engine(path, 2, GetParam());
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
  if (GetParam() == ContextShiftMode::kRecompute) {
    ASSERT_TRUE(solo->add_request(greedy(kept, n_a - (kCtx + 1 - 50), false)).ok());
    EXPECT_EQ(drain(*solo).begin()->second.tokens, std::vector<int32_t>(stream.begin() + kCtx + 1, stream.end()));
  }
  // The shifted completion's blocks were registered in the prefix cache only if they hold
  // what a fresh run computes (never after a re-RoPE): a request for its kept tokens gets
  // the same output from this engine as from a fresh one.
  auto id_c = e->add_request(greedy(kept, 16, false));
  ASSERT_TRUE(id_c.ok());
  const Out c = drain(*e)[*id_c];
  auto fresh = make_engine(path, 1);
  ASSERT_TRUE(fresh->add_request(greedy(kept, 16, false)).ok());
  EXPECT_EQ(c.tokens, drain(*fresh).begin()->second.tokens);
  EXPECT_EQ(e->check_invariants(), "");
}

INSTANTIATE_TEST_SUITE_P(Modes, ContextShiftSharing,
                         ::testing::Values(ContextShiftMode::kReRope, ContextShiftMode::kRecompute),
                         [](const auto& info) {
                           return std::string(info.param == ContextShiftMode::kReRope ? "rerope" : "recompute");
                         });

}  // namespace
}  // namespace lumen::engine
