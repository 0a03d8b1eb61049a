// End-to-end tests of the `lumen` binary on the real tiny models in ../shared.
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/shared_dir.h"
#include "run_lumen.h"

namespace lumen::testing {
namespace {

std::string shared(const std::string& rel) { return shared_dir() + "/" + rel; }

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

const std::string kStories = "models/stories260K/stories260K.gguf";
const std::string kTiny = "models/TinyStories-656K/TinyStories-656K-Q8_0.gguf";

// Free-running greedy text equals llama.cpp's for stories260K once_upon_a_time (its top-2
// margins are wide), through the full path: tokenizer, engine, sampler, detokenizer.
TEST(CliRun, GreedyMatchesGoldenStories260K) {
  const nlohmann::json g = read_json(shared("golden/stories260K/once_upon_a_time.json"));
  const int n = static_cast<int>(g["generated_ids"].size());
  CmdResult r = run_lumen({"run", "-m", shared(kStories), "-p", g["prompt"], "-n", std::to_string(n),
                           "--temp", "0", "--ignore-eos", "--json", "--top-logits", "10", "-c", "512"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], g["prompt_ids"]);
  EXPECT_EQ(j["generated_ids"], g["generated_ids"]);
  EXPECT_EQ(j["text"], g["generated_text"]);
  ASSERT_EQ(j["steps"].size(), static_cast<size_t>(n));
  EXPECT_EQ(j["steps"][0]["top"].size(), 10u);
  EXPECT_EQ(j["steps"][0]["top"][0][0], g["steps"][0]["top"][0][0]);
  EXPECT_NEAR(j["steps"][0]["top"][0][1].get<double>(), g["steps"][0]["top"][0][1].get<double>(), 2e-2);
  for (const char* key : {"load_ms", "ttft_ms", "tpot_ms", "prompt_tok_s", "gen_tok_s"})
    EXPECT_TRUE(j["timings"].contains(key)) << key;
}

TEST(CliRun, HumanOutputStreamsPromptAndTimings) {
  CmdResult r = run_lumen({"run", "-m", shared(kTiny), "-p", "Once upon a time", "-n", "16", "--temp", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time", 0), 0u) << r.out;
  EXPECT_GT(r.out.size(), std::string("Once upon a time").size());
  EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
}

TEST(CliRun, IgnoreEosGeneratesExactlyN) {
  CmdResult r = run_lumen({"run", "-m", shared(kTiny), "-p", "The end.", "-n", "100", "--temp", "0",
                           "--ignore-eos", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["generated_ids"].size(), 100u);
}

TEST(CliRun, SameSeedSameOutput) {
  auto sample = [](const std::string& seed) {
    CmdResult r = run_lumen({"run", "-m", shared("models/TinyStories-656K"), "-p", "Lily", "--temp", "0.8",
                             "--top-p", "0.9", "--seed", seed, "-n", "40", "--ignore-eos", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["generated_ids"] : nlohmann::json();
  };
  const nlohmann::json a = sample("7"), b = sample("7"), c = sample("8");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(CliRun, StopStringEndsGenerationAndIsNotPrinted) {
  const nlohmann::json g = read_json(shared("golden/stories260K/once_upon_a_time.json"));
  const std::string text = g["generated_text"];
  // A stop string from the middle of the known greedy continuation.
  const std::string stop = text.substr(40, 6);
  CmdResult r = run_lumen({"run", "-m", shared(kStories), "-p", g["prompt"], "-n", "48", "--temp", "0",
                           "--json", "--stop", stop});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["finish_reason"], "stop");
  EXPECT_EQ(j["text"], text.substr(0, text.find(stop)));
}

TEST(CliRun, AllThreeContainersRun) {
  for (const std::string& m : {shared(kStories), shared("models/stories260K/stories260K.bin"),
                               shared("models/TinyStories-656K/"), shared(kTiny)}) {
    CmdResult r = run_lumen({"run", "-m", m, "-p", "Once upon a time", "-n", "8", "--temp", "0", "--json"});
    EXPECT_EQ(r.exit_code, 0) << m << ": " << r.err;
    if (r.exit_code == 0) {
      EXPECT_FALSE(nlohmann::json::parse(r.out)["generated_ids"].empty()) << m;
    }
  }
}

TEST(CliRun, ContextLimitFinishesCleanly) {
  CmdResult r = run_lumen({"run", "-m", shared(kTiny), "-p", "Once upon a time", "-n", "500", "-c", "32",
                           "--temp", "0", "--ignore-eos", "--json", "--no-context-shift"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["finish_reason"], "context_full");
  EXPECT_EQ(j["prompt_ids"].size() + j["generated_ids"].size(), 33u);  // last token never evaluated
}

TEST(CliErrors, BadInputGetsClearErrors) {
  CmdResult r = run_lumen({"run", "-m", "/nonexistent/model.gguf", "-p", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
  r = run_lumen({"run", "-m", shared(kTiny), "--temp", "hot"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--temp"), std::string::npos) << r.err;
  r = run_lumen({"run", "-m", shared(kTiny), "--no-such-flag"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--no-such-flag"), std::string::npos) << r.err;
  r = run_lumen({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  r = run_lumen({"run", "-m", shared(kTiny), "-p", std::string(2000, 'a'), "-c", "64"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("context"), std::string::npos) << r.err;
  // A file that is not a model at all.
  r = run_lumen({"info", "-m", shared("corpus/war-and-peace.txt")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("error"), std::string::npos) << r.err;
}

// Characters outside a vocab without byte tokens map to <unk> instead of crashing.
TEST(CliRun, OutOfVocabCharactersMapToUnk) {
  CmdResult r = run_lumen({"run", "-m", shared(kTiny), "-p", "Tom (the cat) said ~ 日本 #", "-n", "4",
                           "--temp", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  bool has_unk = false;
  for (int id : j["prompt_ids"]) has_unk |= id == 0;
  EXPECT_TRUE(has_unk);
}

struct PplCase {
  const char* model;
  const char* golden;
  double rel_tol;
};

TEST(CliPerplexity, MatchesLlamaPerplexity) {
  const PplCase cases[] = {
      {"models/stories260K/stories260K.gguf", "golden/stories260K/ppl_war_and_peace_0_4096.json", 1e-3},
      {"models/TinyStories-656K/TinyStories-656K-Q8_0.gguf",
       "golden/TinyStories-656K-Q8_0/ppl_war_and_peace_0_4096.json", 5e-3},
  };
  for (const PplCase& c : cases) {
    const nlohmann::json g = read_json(shared(c.golden));
    const std::string text_path = ::testing::TempDir() + "ppl_text_" + std::to_string(getpid()) + ".txt";
    {
      std::ofstream f(text_path, std::ios::binary);
      f << g["text"].get<std::string>();
    }
    CmdResult r = run_lumen({"perplexity", "-m", shared(c.model), "-f", text_path, "-c",
                             std::to_string(g["settings"]["n_ctx"].get<int>()), "--json"});
    std::remove(text_path.c_str());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const double ppl = j["ppl"], want = g["ppl"];
    EXPECT_LE(std::abs(ppl - want) / want, c.rel_tol) << c.model << ": ppl " << ppl << " vs " << want;
    EXPECT_EQ(j["n_chunks"], g["n_chunks"]);
    EXPECT_EQ(j["n_tokens_scored"], g["count"]);
    EXPECT_EQ(j["n_tokens"], g["n_tokens"]);
    std::printf("[ golden ] %s perplexity %.6f vs llama.cpp %.6f (rel %.2e)\n", c.model, ppl, want,
                std::abs(ppl - want) / want);
  }
}

TEST(CliTokenize, VectorsReproduceOutFiles) {
  for (const char* name : {"llama-spm", "gpt-2", "bert-bge", "phi-3"}) {
    const std::string base = shared(std::string("tokenizers/vocab/ggml-vocab-") + name + ".gguf");
    CmdResult r = run_lumen({"tokenize", "-m", base, "--vectors", base + ".inp"});
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    std::ifstream f(base + ".out");
    const std::string want((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    // Compare line by line (the .out may lack a trailing newline).
    auto lines = [](const std::string& s) {
      std::vector<std::string> v;
      size_t a = 0;
      while (a < s.size()) {
        size_t b = s.find('\n', a);
        if (b == std::string::npos) b = s.size();
        std::string line = s.substr(a, b - a);
        while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
        while (!line.empty() && line.front() == ' ') line.erase(0, 1);
        v.push_back(line);
        a = b + 1;
      }
      return v;
    };
    EXPECT_EQ(lines(r.out), lines(want)) << name;
  }
}

TEST(CliChat, AppliesTemplateAndStreamsReplies) {
  // The tiny model has no chat template: lumen falls back to ChatML and says so.
  CmdResult r = run_lumen({"chat", "-m", shared(kTiny), "-n", "8", "--temp", "0"}, "Hello there\nHow are you?\n/exit\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("ChatML"), std::string::npos) << r.err;
  EXPECT_GE(std::count(r.out.begin(), r.out.end(), '>'), 3) << r.out;  // three prompts shown
  // An explicit template file (TinyLlama's) renders and runs.
  r = run_lumen({"chat", "-m", shared(kStories), "-n", "4", "--temp", "0", "--chat-template-file",
                 shared("tokenizers/hf/llama2-tinyllama/chat_template.jinja")}, "Hi\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A broken template is a clear error, not a crash.
  const std::string bad = ::testing::TempDir() + "bad_template.jinja";
  {
    std::ofstream f(bad);
    f << "{% for m in messages %}{{ m.content }";
  }
  r = run_lumen({"chat", "-m", shared(kTiny), "--chat-template-file", bad}, "Hi\n");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("template"), std::string::npos) << r.err;
}

TEST(CliInfo, DescribesEveryContainer) {
  for (const std::string& m : {shared(kStories), shared("models/stories260K/stories260K.bin"),
                               shared("models/TinyStories-656K"), shared(kTiny)}) {
    CmdResult r = run_lumen({"info", "-m", m, "--json"});
    ASSERT_EQ(r.exit_code, 0) << m << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["arch"], "llama") << m;
    EXPECT_GT(j["n_params"].get<int64_t>(), 0);
    EXPECT_TRUE(j.contains("tokenizer")) << m << ": " << r.out;
  }
}

// `lumen info` counts the KV cache by layer group, as the engine allocates it: a Gemma-3-like
// file (tiny-gemma3: layers 0-4 local, window 16; layer 5 global; 2 kv heads x 16 dims) holds
// the global layer's K/V for every token and the local layers' for the window only.
TEST(CliInfo, KvBytesPerGroupAndPerSequence) {
  CmdResult r = run_lumen({"info", "-m", std::string(LUMEN_TEST_DATA_DIR) + "/arch/gemma3-swa/model.gguf", "--json",
                           "-c", "512"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["kv_groups"].size(), 2u) << r.out;
  EXPECT_EQ(j["kv_groups"][0]["window"], 0);
  EXPECT_EQ(j["kv_groups"][0]["layers"], nlohmann::json::array({5}));
  EXPECT_EQ(j["kv_groups"][0]["bytes_per_token_f16"], 2 * 2 * 16 * 2);
  EXPECT_EQ(j["kv_groups"][1]["window"], 16);
  EXPECT_EQ(j["kv_groups"][1]["layers"], nlohmann::json::array({0, 1, 2, 3, 4}));
  EXPECT_EQ(j["kv_groups"][1]["bytes_per_token_f16"], 5 * 2 * 2 * 16 * 2);
  EXPECT_EQ(j["kv_sequence_tokens"], 512);
  // 512 tokens: every one in the global layer; the local layers' one block (496..511) that
  // the next query (512, seeing 497..512) reads.
  EXPECT_EQ(j["kv_groups"][1]["bytes_per_sequence_f16"], 640 * 16);
  EXPECT_EQ(j["kv_bytes_per_sequence_f16"], 128 * 512 + 640 * 16);
  r = run_lumen({"info", "-m", std::string(LUMEN_TEST_DATA_DIR) + "/arch/gemma3-swa/model.gguf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("window 16: 5 layers (0,1,2,3,4)"), std::string::npos) << r.out;
  // Cross-layer KV sharing: layers 1 and 3 store nothing, a token costs two layers' K/V.
  r = run_lumen({"info", "-m", std::string(LUMEN_TEST_DATA_DIR) + "/arch/llama-cla/model.gguf", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json cla = nlohmann::json::parse(r.out);
  EXPECT_EQ(cla["kv_bytes_per_token_f16"], 2 * 2 * 2 * 16 * 2) << r.out;
  ASSERT_EQ(cla["kv_groups"].size(), 1u) << r.out;
  EXPECT_EQ(cla["kv_groups"][0]["layers"], nlohmann::json::array({0, 2}));
}

// A mixture of experts: experts, experts per token, and the parameters a token goes through
// (tiny-olmoe: 3 layers x 8 experts x gate, up, down of 64 x 16; a token uses 2 of the 8, so
// 6/8 of the 73,728 expert parameters are not active).
TEST(CliInfo, MixtureOfExpertsActiveParams) {
  const std::string m = std::string(LUMEN_TEST_DATA_DIR) + "/arch/olmoe/model.gguf";
  CmdResult r = run_lumen({"info", "-m", m, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_expert"], 8);
  EXPECT_EQ(j["n_expert_used"], 2);
  EXPECT_EQ(j["n_ff_exp"], 16);
  EXPECT_EQ(j["expert_weights_norm"], false);
  EXPECT_EQ(j["n_params"].get<int64_t>() - j["active_params"].get<int64_t>(), 3 * 8 * 3 * 64 * 16 * 6 / 8);
  r = run_lumen({"info", "-m", m});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("experts:    8, 2 used per token (weights as routed) | expert ffn 16"), std::string::npos) << r.out;
  // A dense model has no expert fields.
  r = run_lumen({"info", "-m", std::string(LUMEN_TEST_DATA_DIR) + "/arch/llama-gqa/model.gguf", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(nlohmann::json::parse(r.out).contains("n_expert")) << r.out;
}

// Multi-head latent attention: a token's KV is one row of latent + rope key per layer
// (tiny-deepseek2: 4 layers x (32 + 16) f16 = 384 bytes), not per-head K and V (4 layers x 2
// x 4 heads x 32 x 2 = 2048 bytes); the roofline counts the same.
TEST(CliInfo, LatentAttentionKvBytesPerToken) {
  const std::string m = std::string(LUMEN_TEST_DATA_DIR) + "/arch/deepseek2-mla/model.gguf";
  CmdResult r = run_lumen({"info", "-m", m, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_bytes_per_token_f16"], 4 * (32 + 16) * 2) << r.out;
  EXPECT_EQ(j["kv_bytes_per_token"], 4 * (32 + 16) * 2) << r.out;  // the cache's types (f16 by default)
  EXPECT_EQ(j["mla"]["kv_lora_rank"], 32);
  EXPECT_EQ(j["mla"]["kv_row"], 48);
  EXPECT_EQ(j["n_layer_dense_lead"], 1);
  EXPECT_TRUE(j["kv_k_only"].get<bool>()) << r.out;  // the cache holds no V rows, so no V type
  EXPECT_EQ(j["kv_type_k"], "f16") << r.out;
  EXPECT_TRUE(j["kv_type_v"].is_null()) << r.out;
  r = run_lumen({"info", "-m", m});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("mla:        latent 32 + rope key 16 cached per token and layer"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kv cache:   K f16 only (no V rows), per token: 384 bytes"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("V f16"), std::string::npos) << r.out;
  // A model with per-head K and V prints both.
  r = run_lumen({"info", "-m", std::string(LUMEN_TEST_DATA_DIR) + "/arch/llama-gqa/model.gguf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("kv cache:   K f16, V f16, per token:"), std::string::npos) << r.out;
  r = run_lumen({"roofline", "-m", m, "--hw", "a100-80g", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["kv_elems_per_token"], 4 * (32 + 16)) << r.out;
  // At real shapes: DeepSeek-V2-Lite's 27 layers x (512 + 64).
  r = run_lumen({"roofline", "--preset", "deepseek-v2-lite", "--hw", "a100-80g", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["kv_elems_per_token"], 27 * (512 + 64)) << r.out;
}

// `lumen bench --json`: one object per test with the issue's fields; each tg run's % of
// bandwidth against the readings around it (consecutive runs share one), the test's % their
// median; a peak RSS that does not count the 512 MiB bandwidth buffers (a tiny model's run
// stays far below one).
TEST(CliBench, JsonReportsEachTestAndTheBandwidthAroundItsRuns) {
  CmdResult r = run_lumen({"bench", "-m", shared(kTiny), "-t", "1", "-p", "8", "-n", "4", "-d", "16", "-r", "2",
                           "--membw", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json a = nlohmann::json::parse(r.out);
  ASSERT_TRUE(a.is_array());
  ASSERT_EQ(a.size(), 3u) << r.out;
  const char* names[] = {"pp8", "tg4", "tg4@d16"};
  double highest = 0;
  std::vector<double> last_readings;
  for (size_t i = 0; i < a.size(); ++i) {
    const nlohmann::json& j = a[i];
    SCOPED_TRACE(j.dump());
    EXPECT_EQ(j["test"], names[i]);
    EXPECT_EQ(j["threads"], 1);
    EXPECT_EQ(j["model"], "TinyStories-656K-Q8_0.gguf");
    EXPECT_EQ(j["type"], "q8_0");
    const double tok_s = j["tok_s"].get<double>();
    EXPECT_GT(tok_s, 0);
    EXPECT_LE(j["tok_s_min"].get<double>(), tok_s);
    EXPECT_GE(j["tok_s_max"].get<double>(), tok_s);
    EXPECT_EQ(j["logits_hash"].get<std::string>().size(), 16u);
    EXPECT_LT(j["peak_rss_mib"].get<double>(), 256.0);
    const double best = j["membw_gb_s"].get<double>();
    EXPECT_GT(best, 0);
    if (i == 0) {
      highest = best;
      EXPECT_TRUE(j["gb_s"].is_null());
      EXPECT_TRUE(j["pct_bandwidth"].is_null());
      continue;
    }
    EXPECT_EQ(best, highest);  // the same run-wide figure on every test
    const double gb_s = j["gb_s"].get<double>();
    EXPECT_NEAR(gb_s, tok_s * j["weight_bytes_per_token"].get<double>() / 1e9, gb_s * 0.5);  // + KV bytes
    const std::vector<double> readings = j["membw_readings_gb_s"].get<std::vector<double>>();
    const std::vector<double> runs = j["pct_bandwidth_runs"].get<std::vector<double>>();
    ASSERT_EQ(runs.size(), 2u);
    ASSERT_EQ(readings.size(), 3u);  // before run 1, between, after run 2
    for (double x : readings) EXPECT_LE(x, best);
    if (i == 2) {
      EXPECT_EQ(readings.front(), last_readings.back());  // shared with the test before
    }
    last_readings = readings;
    // Each run's % is against the higher of its two readings, so it lies between the test's
    // GB/s range over the higher reading and over the lower one.
    const double gb_min = j["tok_s_min"].get<double>() * gb_s / tok_s, gb_max = j["tok_s_max"].get<double>() * gb_s / tok_s;
    for (size_t k = 0; k < runs.size(); ++k) {
      const double hi = std::max(readings[k], readings[k + 1]);
      EXPECT_GE(runs[k], 100 * gb_min / hi * (1 - 1e-9));
      EXPECT_LE(runs[k], 100 * gb_max / hi * (1 + 1e-9));
    }
    EXPECT_NEAR(j["pct_bandwidth"].get<double>(), (runs[0] + runs[1]) / 2, 1e-9 * runs[0]);
  }
}

// --membw-every MS: readings inside the tg runs too, after every MS ms of decoding (the
// tiny model gets them only when asked: it fits in the caches, which a reading flushes).
// Each run's roof is its stretches' readings weighted by decode time, so it lies within the
// readings' range, and its % is its GB/s over that roof; the % against the readings at the
// run's two ends only is reported beside it.
TEST(CliBench, MembwEveryReadsTheBandwidthInsideTheRuns) {
  CmdResult r = run_lumen({"bench", "-m", shared(kTiny), "-t", "1", "-p", "0", "-n", "400", "-r", "2", "--membw",
                           "--membw-every", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json a = nlohmann::json::parse(r.out);
  ASSERT_EQ(a.size(), 1u) << r.out;
  const nlohmann::json& j = a[0];
  SCOPED_TRACE(j.dump());
  EXPECT_EQ(j["test"], "tg400");
  const std::vector<double> readings = j["membw_readings_gb_s"].get<std::vector<double>>();
  const std::vector<double> roofs = j["roof_gb_s_runs"].get<std::vector<double>>();
  const std::vector<double> runs = j["pct_bandwidth_runs"].get<std::vector<double>>();
  ASSERT_EQ(roofs.size(), 2u);
  ASSERT_EQ(runs.size(), 2u);
  // 400 tokens take well over 4 ms here: at least one reading inside each run.
  EXPECT_GE(readings.size(), 5u);
  const double lo = *std::min_element(readings.begin(), readings.end());
  const double hi = *std::max_element(readings.begin(), readings.end());
  const double tok_s = j["tok_s"].get<double>(), gb_s = j["gb_s"].get<double>();
  const double gb_min = j["tok_s_min"].get<double>() * gb_s / tok_s, gb_max = j["tok_s_max"].get<double>() * gb_s / tok_s;
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_GE(roofs[k], lo * (1 - 1e-9));
    EXPECT_LE(roofs[k], hi * (1 + 1e-9));
    EXPECT_GE(runs[k], 100 * gb_min / roofs[k] * (1 - 1e-9));
    EXPECT_LE(runs[k], 100 * gb_max / roofs[k] * (1 + 1e-9));
  }
  EXPECT_NEAR(j["pct_bandwidth"].get<double>(), (runs[0] + runs[1]) / 2, 1e-9 * runs[0]);
  EXPECT_GT(j["pct_bandwidth_run_ends"].get<double>(), 0);
  // The text report says where the readings were taken.
  r = run_lumen({"bench", "-m", shared(kTiny), "-t", "1", "-p", "0", "-n", "400", "-r", "1", "--membw", "--membw-every", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("of the bandwidth read during its runs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("after every 2 ms of its decoding"), std::string::npos) << r.out;
  // Without --membw there is nothing to read.
  r = run_lumen({"bench", "-m", shared(kTiny), "-t", "1", "-p", "0", "-n", "4", "--membw-every", "2"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--membw-every needs --membw"), std::string::npos) << r.err;
}

// A tg test's depth is prefilled in batches of --batch-size (default 512), whatever -p is:
// with -p 0 the batch used to be 1 token, so a depth of 4096 took 4096 decode steps (minutes
// on qwen2.5-0.5b, for every cache type). The steps are reported per run.
TEST(CliBench, DepthIsPrefilledInBatchesNotOneTokenPerStep) {
  CmdResult r = run_lumen({"bench", "-m", shared(kTiny), "-t", "1", "-p", "0", "-n", "2", "-d", "40", "-r", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json a = nlohmann::json::parse(r.out);
  ASSERT_EQ(a.size(), 2u) << r.out;
  EXPECT_FALSE(a[0].contains("depth_prefill_steps")) << a[0].dump();  // tg2: no depth
  EXPECT_EQ(a[1]["test"], "tg2@d40");
  EXPECT_EQ(a[1]["depth_prefill_steps"], nlohmann::json::array({1, 1})) << a[1].dump();
  EXPECT_GT(a[1]["depth_prefill_tok_s"].get<double>(), 0);
  r = run_lumen({"bench", "-m", shared(kTiny), "-t", "1", "-p", "0", "-n", "2", "-d", "40", "-r", "1", "-b", "16", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  a = nlohmann::json::parse(r.out);
  ASSERT_EQ(a.size(), 2u) << r.out;
  EXPECT_EQ(a[1]["depth_prefill_steps"], nlohmann::json::array({3})) << a[1].dump();  // 16 + 16 + 8
}

// `lumen bench --grammar-file` / `--json-schema`: TPOT with and without the grammar, the
// mask's cost replayed per step; a bad grammar is a clear error.
TEST(CliBench, GrammarReportsTpotRatioAndMaskCost) {
  const std::string g = ::testing::TempDir() + "bench_letters.gbnf";
  std::ofstream(g) << "root ::= [a-z ]+\n";
  CmdResult r = run_lumen({"bench", "-m", shared(kStories), "-t", "1", "-n", "12", "-r", "2", "--grammar-file", g, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out)[0];
  EXPECT_EQ(j["test"], "grammar") << r.out;
  EXPECT_EQ(j["runs"], 4) << r.out;  // 2 repetitions x 2 prompts
  EXPECT_GT(j["tpot_ms_plain"].get<double>(), 0) << r.out;
  EXPECT_GT(j["tpot_ms_grammar"].get<double>(), 0) << r.out;
  EXPECT_NEAR(j["tpot_ratio"].get<double>(), j["tpot_ms_grammar"].get<double>() / j["tpot_ms_plain"].get<double>(), 1e-9);
  EXPECT_EQ(j["mask_steps"], 4 * 12) << r.out;  // every token of every constrained run replayed
  EXPECT_LE(j["mask_us_p50"].get<double>(), j["mask_us_p99"].get<double>());
  EXPECT_LE(j["mask_us_p99"].get<double>(), j["mask_us_max"].get<double>());
  std::ofstream(g) << "root ::= [a-z\n";
  r = run_lumen({"bench", "-m", shared(kStories), "-t", "1", "-n", "4", "--grammar-file", g});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--grammar-file"), std::string::npos) << r.err;
}

// `lumen bench --spec replay --draft-fixed`: every target step after the first verifies
// exactly --draft-max proposals, all accepted (21 tokens at k = 4: the prefill's token, then
// 4 steps of 5), so the reported speedup is the one at that k; --draft-fixed needs replay.
TEST(CliBench, ReplayWithFixedDraftVerifiesKProposalsEveryStep) {
  CmdResult r = run_lumen({"bench", "-m", shared(kStories), "-t", "1", "-n", "21", "-r", "1", "--spec", "replay",
                           "--draft-max", "4", "--draft-fixed", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out)[0];
  SCOPED_TRACE(j.dump());
  EXPECT_EQ(j["draft_fixed"], true);
  const int64_t runs = j["runs"].get<int64_t>();
  ASSERT_GT(runs, 0);
  EXPECT_EQ(j["generated"].get<int64_t>(), runs * 21);
  EXPECT_EQ(j["target_steps"].get<int64_t>(), runs * 5);
  EXPECT_EQ(j["proposed"].get<int64_t>(), runs * 16);
  EXPECT_EQ(j["accepted"].get<int64_t>(), runs * 16);
  EXPECT_DOUBLE_EQ(j["tokens_per_target_step"].get<double>(), 21.0 / 5);
  r = run_lumen({"bench", "-m", shared(kStories), "-t", "1", "-n", "8", "--spec", "random", "--draft-fixed"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--draft-fixed"), std::string::npos) << r.err;
}

// `--vs-roofline`: every test carries the prediction, its ratio and the binding roof; pp's
// ratio is its tok/s over the prediction, tg's the median of its runs' (each against the
// roof at its own bandwidth readings).
TEST(CliBench, VsRooflineReportsPredictionAndRoof) {
  CmdResult r = run_lumen({"bench", "-m", shared(kTiny), "-t", "1", "-p", "8", "-n", "4", "-r", "2",
                           "--vs-roofline", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json a = nlohmann::json::parse(r.out);
  ASSERT_EQ(a.size(), 2u) << r.out;
  for (const nlohmann::json& j : a) {
    SCOPED_TRACE(j.dump());
    const double predicted = j["predicted_tok_s"].get<double>();
    const double ratio = j["ratio_to_predicted"].get<double>();
    EXPECT_GT(predicted, 0);
    EXPECT_TRUE(j["binding_roof"] == "memory" || j["binding_roof"] == "compute");
    if (j["test"] == "pp8") {
      EXPECT_NEAR(ratio, j["tok_s"].get<double>() / predicted, 1e-9 * ratio);
    } else {
      // Two runs: the ratio is the mean of theirs, each within [min, max] tok/s over a
      // prediction between the lowest and the highest reading's.
      const std::vector<double> readings = j["membw_readings_gb_s"].get<std::vector<double>>();
      const double lo = *std::min_element(readings.begin(), readings.end());
      const double hi = *std::max_element(readings.begin(), readings.end());
      EXPECT_GE(ratio, j["tok_s_min"].get<double>() / (predicted * hi / lo) * (1 - 1e-9));
      EXPECT_LE(ratio, j["tok_s_max"].get<double>() / (predicted * lo / hi) * (1 + 1e-9));
    }
  }
}

}  // namespace
}  // namespace lumen::testing

namespace lumen::testing {
namespace {

// KV cache types and flash attention from the command line (llama.cpp's flags): bad
// values name the flag and the allowed values; a type only flash attention reads refuses
// -fa off; info counts the types' bytes; a run with a quantized cache works end to end.
TEST(CliKvType, FlagsNameTheFlagAndTheTypes) {
  const std::string hd32 = std::string(LUMEN_TEST_DATA_DIR) + "/fa/fa-llama-hd32-f16/model.gguf";
  CmdResult r = run_lumen({"run", "-m", shared(kTiny), "-p", "x", "--kv-type", "q5_1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--kv-type: 'q5_1' is not a KV cache type (f32, f16, bf16, q8_0, q4_0)"), std::string::npos)
      << r.err;
  r = run_lumen({"run", "-m", shared(kTiny), "-p", "x", "-ctk", "int8"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--cache-type-k: 'int8'"), std::string::npos) << r.err;
  r = run_lumen({"run", "-m", hd32, "-p", "x", "-ctv", "q4_0", "-fa", "off"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("-fa off: a q4_0 KV cache"), std::string::npos) << r.err;
  r = run_lumen({"run", "-m", hd32, "-p", "x", "-fa", "sometimes"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("-fa/--flash-attn: 'sometimes' is not on, off or auto"), std::string::npos) << r.err;
  // Head size 16 is not a whole number of 32-element blocks.
  r = run_lumen({"run", "-m", shared(kTiny), "-p", "x", "--kv-type", "q8_0", "-n", "2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("do not divide the head size 16"), std::string::npos) << r.err;
  // 2 layers x 2 kv heads x (a q8_0 row of 32: 34 bytes + a q4_0 row: 18 bytes).
  r = run_lumen({"info", "-m", hd32, "--json", "-ctk", "q8_0", "-ctv", "q4_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_bytes_per_token"], 2 * 2 * (34 + 18)) << r.out;
  EXPECT_EQ(j["kv_bytes_per_token_f16"], 2 * 2 * (64 + 64)) << r.out;
  EXPECT_EQ(j["kv_type_k"], "q8_0");
  EXPECT_EQ(j["kv_type_v"], "q4_0");
  for (const char* fa : {"on", "auto"}) {
    r = run_lumen({"run", "-m", hd32, "-p", "Once upon a time", "-n", "4", "--temp", "0", "-ctk", "q8_0", "-ctv", "q4_0",
                   "-fa", fa});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
}

}  // namespace
}  // namespace lumen::testing
