// Engine-level tests: one code path for every client, so these drive the Engine API
// directly on the real tiny models.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include "base/shared_dir.h"

namespace lumen::engine {
namespace {

std::string model_path() {
  return shared_dir() + "/models/TinyStories-656K/TinyStories-656K-Q8_0.gguf";
}

std::unique_ptr<Engine> make_engine(int32_t batch, int32_t max_seqs = 1) {
  EngineConfig c;
  c.n_threads = 2;
  c.n_ctx = 256;
  c.max_batch_tokens = batch;
  c.max_seqs = max_seqs;
  auto e = Engine::create(model_path(), c);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(e).value() : nullptr;
}

std::vector<int32_t> run_greedy(Engine& e, const std::vector<int32_t>& prompt, int n) {
  Request r;
  r.prompt_ids = prompt;
  r.params.max_tokens = n;
  r.params.ignore_eos = true;
  r.params.sampling.temperature = 0;
  auto id = e.add_request(r);
  EXPECT_TRUE(id.ok()) << id.message();
  std::vector<int32_t> out;
  while (e.has_work())
    for (RequestEvent& ev : e.step()) out.insert(out.end(), ev.new_token_ids.begin(), ev.new_token_ids.end());
  return out;
}

// A prompt prefilled in chunks of 7 tokens continues exactly like one prefilled at once:
// chunked prefill is the same arithmetic as catching up.
TEST(Engine, ChunkedPrefillEqualsWholePrefill) {
  auto whole = make_engine(512);
  auto chunked = make_engine(7);
  ASSERT_TRUE(whole && chunked);
  const std::vector<int32_t> prompt =
      whole->tokenizer().encode("Once upon a time, there was a little girl named Lily. She loved to play.", true, false);
  ASSERT_GT(prompt.size(), 14u);
  EXPECT_EQ(run_greedy(*whole, prompt, 24), run_greedy(*chunked, prompt, 24));
  EXPECT_EQ(whole->kv_blocks_in_use(), 0);
  EXPECT_EQ(chunked->kv_blocks_in_use(), 0);
}

// Several sequences in one batch produce what each produces alone (greedy).
TEST(Engine, BatchedSequencesEqualSolo) {
  auto solo = make_engine(512, 1);
  auto batched = make_engine(64, 4);
  ASSERT_TRUE(solo && batched);
  const char* prompts[] = {"Once upon a time", "Lily and Tom went to the park.", "The little dog was sad because",
                           "One day"};
  std::vector<std::vector<int32_t>> want;
  std::vector<RequestId> ids;
  for (const char* p : prompts) {
    const auto ids_p = solo->tokenizer().encode(p, true, false);
    want.push_back(run_greedy(*solo, ids_p, 20));
    Request r;
    r.prompt_ids = ids_p;
    r.params.max_tokens = 20;
    r.params.ignore_eos = true;
    r.params.sampling.temperature = 0;
    auto id = batched->add_request(r);
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  std::map<RequestId, std::vector<int32_t>> got;
  while (batched->has_work())
    for (RequestEvent& ev : batched->step())
      got[ev.request_id].insert(got[ev.request_id].end(), ev.new_token_ids.begin(), ev.new_token_ids.end());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(got[ids[i]], want[i]) << prompts[i];
  EXPECT_EQ(batched->kv_blocks_in_use(), 0);
}

TEST(Engine, RejectsBadRequestsWithNamedField) {
  auto e = make_engine(64);
  ASSERT_TRUE(e);
  Request r;
  auto id = e->add_request(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.message().find("prompt"), std::string::npos);
  r.prompt_ids = {1, 2, 3};
  r.params.max_tokens = -1;
  id = e->add_request(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.message().find("max_tokens"), std::string::npos);
  r.params.max_tokens = 4;
  r.prompt_ids = {1, 999999};
  id = e->add_request(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.message().find("token id"), std::string::npos);
  r.prompt_ids.assign(300, 5);
  id = e->add_request(r);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.message().find("context"), std::string::npos);
  EXPECT_FALSE(e->has_work());
}

TEST(Engine, CancelFreesBlocks) {
  auto e = make_engine(64, 2);
  ASSERT_TRUE(e);
  Request r;
  r.prompt_ids = e->tokenizer().encode("Once upon a time", true, false);
  r.params.max_tokens = 100;
  r.params.ignore_eos = true;
  auto id = e->add_request(r);
  ASSERT_TRUE(id.ok());
  e->step();
  e->step();
  EXPECT_GT(e->kv_blocks_in_use(), 0);
  e->cancel(*id);
  EXPECT_EQ(e->kv_blocks_in_use(), 0);
  EXPECT_FALSE(e->has_work());
}

}  // namespace
}  // namespace lumen::engine
