// Embedding requests through the engine (GenerationParams::embed): the pooled vector
// matches a reference pooling of the model's hidden states computed here from the last
// layer's output tap (a plain RMSNorm with the output norm's weights, in double), and is
// the same whether the text runs alone, in a batch of 32 beside other texts, or prefilled
// in small chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "base/shared_dir.h"
#include "engine/engine.h"
#include "run_lumen.h"

namespace lumen::engine {
namespace {

std::string model_path() { return shared_dir() + "/models/TinyStories-656K/TinyStories-656K-Q8_0.gguf"; }

std::unique_ptr<Engine> make_engine(int32_t batch, int32_t max_seqs, bool embeddings = true) {
  EngineConfig c;
  c.n_threads = 2;
  c.n_ctx = 256;
  c.max_batch_tokens = batch;
  c.max_seqs = max_seqs;
  c.enable_embeddings = embeddings;
  auto e = Engine::create(model_path(), c);
  EXPECT_TRUE(e.ok()) << e.message();
  return e.ok() ? std::move(e).value() : nullptr;
}

Request embed_request(const Engine& e, const std::string& text, Pooling pooling) {
  Request r;
  r.prompt_ids = e.tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/false);
  r.params.max_tokens = 0;
  r.params.embed = pooling;
  return r;
}

// Runs the requests together; their embeddings by index.
std::vector<std::vector<float>> embed_all(Engine& e, const std::vector<Request>& requests) {
  std::map<RequestId, size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto id = e.add_request(requests[i]);
    EXPECT_TRUE(id.ok()) << id.message();
    if (id.ok()) index[*id] = i;
  }
  std::vector<std::vector<float>> out(requests.size());
  while (e.has_work())
    for (RequestEvent& ev : e.step()) {
      EXPECT_TRUE(ev.new_token_ids.empty());  // nothing is generated
      EXPECT_NE(ev.finish_reason, FinishReason::kError) << ev.error;
      if (!ev.embedding.empty()) out[index.at(ev.request_id)] = ev.embedding;
    }
  EXPECT_EQ(e.kv_blocks_in_use(), 0);  // no KV kept afterwards
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(double{a[i]} - b[i]));
  return a.size() == b.size() ? d : 1e9;
}

const std::vector<std::string>& texts() {
  static const std::vector<std::string> kTexts = {
      "Once upon a time, there was a little girl named Lily.",
      "The dog ran to the park and played with a red ball all day long.",
      "Tom liked to eat apples.",
      "One day, a big bird flew over the house and sang a happy song for everyone to hear.",
  };
  return kTexts;
}

// The reference: the last layer's output rows of the prompt (tapped during a one-chunk
// forward), RMS-normed with the output norm's weights, pooled, L2-normalised, in double.
std::vector<float> reference_embedding(const std::string& text, Pooling pooling) {
  auto e = make_engine(256, 1);
  if (!e) return {};
  const model::HParams& hp = e->hparams();
  std::vector<float> last_layer;  // [T][n_embd]
  e->set_model_tap([&](std::string_view name, int32_t il, int32_t /*expert_idx*/, std::span<const float> v) {
    if (name == "layer_out" && il == hp.n_layer - 1) last_layer.assign(v.begin(), v.end());
  });
  const Request r = embed_request(*e, text, pooling);
  const auto T = static_cast<int64_t>(r.prompt_ids.size());
  embed_all(*e, {r});
  const int64_t E = hp.n_embd;
  EXPECT_EQ(static_cast<int64_t>(last_layer.size()), T * E);
  if (static_cast<int64_t>(last_layer.size()) != T * E) return {};
  const float* w = e->model().weights().output_norm;
  std::vector<double> pooled(static_cast<size_t>(E), 0.0);
  for (int64_t t = 0; t < T; ++t) {
    const bool take = pooling == Pooling::kMean || (pooling == Pooling::kCls && t == 0) ||
                      (pooling == Pooling::kLast && t == T - 1);
    if (!take) continue;
    double ss = 0;
    for (int64_t j = 0; j < E; ++j) ss += double{last_layer[t * E + j]} * last_layer[t * E + j];
    const double inv = 1.0 / std::sqrt(ss / E + hp.rms_eps);
    for (int64_t j = 0; j < E; ++j) pooled[j] += last_layer[t * E + j] * inv * w[j];
  }
  if (pooling == Pooling::kMean)
    for (double& v : pooled) v /= static_cast<double>(T);
  double n2 = 0;
  for (double v : pooled) n2 += v * v;
  std::vector<float> out(static_cast<size_t>(E));
  for (int64_t j = 0; j < E; ++j) out[j] = static_cast<float>(pooled[j] / std::sqrt(n2));
  return out;
}

class EmbeddingsPooling : public ::testing::TestWithParam<Pooling> {};

TEST_P(EmbeddingsPooling, MatchesAReferencePoolingOfTheHiddenStates) {
  auto e = make_engine(256, 1);
  ASSERT_TRUE(e);
  for (const std::string& text : texts()) {
    const std::vector<float> want = reference_embedding(text, GetParam());
    const std::vector<std::vector<float>> got = embed_all(*e, {embed_request(*e, text, GetParam())});
    ASSERT_EQ(got[0].size(), static_cast<size_t>(e->hparams().n_embd));
    double n2 = 0;
    for (float v : got[0]) n2 += double{v} * v;
    EXPECT_NEAR(n2, 1.0, 1e-5);
    EXPECT_LT(max_abs_diff(got[0], want), 1e-5) << pooling_name(GetParam()) << ": " << text;
  }
}

// Alone, in a batch of 32 (beside other texts, several steps of 8 sequences), and
// prefilled in chunks of 5 tokens: the same vector within 1e-5 (in fact the same bits: the
// kernels are batch invariant).
TEST_P(EmbeddingsPooling, SameAloneInABatchOf32AndChunked) {
  auto solo = make_engine(256, 1);
  auto batched = make_engine(64, 8);
  auto chunked = make_engine(5, 2);
  ASSERT_TRUE(solo && batched && chunked);
  std::vector<Request> batch;
  for (int i = 0; i < 32; ++i) batch.push_back(embed_request(*batched, texts()[i % texts().size()], GetParam()));
  const std::vector<std::vector<float>> together = embed_all(*batched, batch);
  const std::vector<std::vector<float>> in_chunks = embed_all(*chunked, batch);
  for (size_t k = 0; k < texts().size(); ++k) {
    const std::vector<float> alone = embed_all(*solo, {batch[k]})[0];
    ASSERT_FALSE(alone.empty());
    for (size_t i = k; i < batch.size(); i += texts().size()) {
      EXPECT_LT(max_abs_diff(alone, together[i]), 1e-5) << "batch item " << i;
      EXPECT_LT(max_abs_diff(alone, in_chunks[i]), 1e-5) << "chunked item " << i;
    }
  }
  // Different texts give different vectors (the test can tell them apart); not with CLS
  // pooling: in a causal model the first position (BOS) sees nothing else.
  if (GetParam() != Pooling::kCls) {
    EXPECT_GT(max_abs_diff(together[0], together[1]), 1e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(All, EmbeddingsPooling, ::testing::Values(Pooling::kMean, Pooling::kCls, Pooling::kLast),
                         [](const auto& info) { return std::string(pooling_name(info.param)); });

// Embedding requests run beside generation in the same steps, and a generation's tokens do
// not change because an embedding ran beside it.
TEST(Embeddings, RunBesideGeneration) {
  auto e = make_engine(64, 4);
  ASSERT_TRUE(e);
  Request gen;
  gen.prompt_ids = e->tokenizer().encode(texts()[0], true, false);
  gen.params.max_tokens = 12;
  gen.params.ignore_eos = true;
  gen.params.sampling.temperature = 0;
  auto run = [&](bool with_embeddings) {
    std::vector<int32_t> tokens;
    std::vector<float> embedding;
    auto gid = e->add_request(gen);
    EXPECT_TRUE(gid.ok());
    if (with_embeddings) {
      for (int i = 0; i < 3; ++i) EXPECT_TRUE(e->add_request(embed_request(*e, texts()[1 + i], Pooling::kMean)).ok());
    }
    while (e->has_work())
      for (RequestEvent& ev : e->step()) {
        if (ev.request_id == *gid) tokens.insert(tokens.end(), ev.new_token_ids.begin(), ev.new_token_ids.end());
        else if (!ev.embedding.empty()) embedding = ev.embedding;
      }
    EXPECT_EQ(with_embeddings, !embedding.empty());
    return tokens;
  };
  const std::vector<int32_t> alone = run(false);
  EXPECT_EQ(alone.size(), 12u);
  EXPECT_EQ(run(true), alone);
}

// The same text embedded twice: the second does not take the first's prefix-cache blocks
// (pooling needs every position's hidden state) and gives the same vector.
TEST(Embeddings, PrefixCacheIsNotUsedForPooling) {
  auto e = make_engine(64, 2);
  ASSERT_TRUE(e);
  const Request r = embed_request(*e, texts()[0] + " " + texts()[1] + " " + texts()[3], Pooling::kMean);
  ASSERT_GT(r.prompt_ids.size(), 32u);  // two full KV blocks the cache keeps
  const std::vector<float> first = embed_all(*e, {r})[0];
  const std::vector<float> second = embed_all(*e, {r})[0];
  EXPECT_EQ(max_abs_diff(first, second), 0.0);
  EXPECT_EQ(e->metrics().cached_tokens, 0u);
}

TEST(Embeddings, RefusedWithoutRoomOrWithGenerationFields) {
  auto off = make_engine(64, 1, /*embeddings=*/false);
  ASSERT_TRUE(off);
  auto st = off->add_request(embed_request(*off, "hello", Pooling::kLast));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--embeddings"), std::string::npos) << st.message();
  auto on = make_engine(64, 2);
  ASSERT_TRUE(on);
  Request r = embed_request(*on, "hello", Pooling::kLast);
  r.params.max_tokens = 4;
  EXPECT_FALSE(on->add_request(r).ok());
  r.params.max_tokens = 0;
  r.params.n = 2;
  EXPECT_FALSE(on->add_request(r).ok());
}

// llama.cpp's own embeddings of the same texts (llama-server --embeddings --pooling P at
// c392e5094; tools/llamacpp_embeddings_golden.sh wrote the file): within 1e-5.
TEST(Embeddings, MatchLlamaCppGolden) {
  std::ifstream f(std::string(LUMEN_TEST_DATA_DIR) + "/embeddings/llamacpp_tinystories656k.json");
  ASSERT_TRUE(f.good());
  const nlohmann::json golden = nlohmann::json::parse(f);
  auto e = make_engine(64, 2);
  ASSERT_TRUE(e);
  for (const auto& [name, pooling] : {std::pair{"last", Pooling::kLast}, std::pair{"mean", Pooling::kMean}}) {
    std::vector<Request> requests;
    for (const auto& text : golden["inputs"]) requests.push_back(embed_request(*e, text.get<std::string>(), pooling));
    const std::vector<std::vector<float>> got = embed_all(*e, requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::vector<float> want = golden["pooling"][name][i].get<std::vector<float>>();
      EXPECT_LT(max_abs_diff(got[i], want), 1e-5) << name << " input " << i;
    }
  }
}

// lumen embed prints the same vector (one JSON array) as the engine request, i.e. llama.cpp's.
TEST(Embeddings, CliEmbedPrintsTheVector) {
  std::ifstream f(std::string(LUMEN_TEST_DATA_DIR) + "/embeddings/llamacpp_tinystories656k.json");
  const nlohmann::json golden = nlohmann::json::parse(f);
  testing::CmdResult r = testing::run_lumen({"embed", "-m", model_path(), "-p", golden["inputs"][0].get<std::string>(),
                                             "--pooling", "last", "-t", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<float> got = nlohmann::json::parse(r.out).get<std::vector<float>>();
  EXPECT_LT(max_abs_diff(got, golden["pooling"]["last"][0].get<std::vector<float>>()), 1e-5);
  testing::CmdResult bad = testing::run_lumen({"embed", "-m", model_path(), "-p", "x", "--pooling", "max"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--pooling"), std::string::npos) << bad.err;
}

TEST(Embeddings, ModelPoolingFromMetadata) {
  model::HParams hp;
  hp.pooling_type = -1;  // a decoder LLM names none: the last token
  EXPECT_EQ(*model_pooling(hp), Pooling::kLast);
  hp.pooling_type = 1;
  EXPECT_EQ(*model_pooling(hp), Pooling::kMean);
  hp.pooling_type = 2;
  EXPECT_EQ(*model_pooling(hp), Pooling::kCls);
  hp.pooling_type = 3;
  EXPECT_EQ(*model_pooling(hp), Pooling::kLast);
  hp.pooling_type = 4;  // rank: a reranker head lumen does not have
  EXPECT_FALSE(model_pooling(hp).ok());
}

}  // namespace
}  // namespace lumen::engine
