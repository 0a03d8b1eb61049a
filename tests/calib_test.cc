// `lumen imatrix` and `lumen perplexity --kl-divergence[-base]` against llama.cpp's tools
// (c392e5094), through the binary:
//   imatrix: on the synthetic F16 models of tests/quant_mix_test.cc and two small
//            mixtures of experts (Mixtral, Qwen2-MoE), and the same text, lumen's file
//            holds the entries, calls and values of llama-imatrix's, the experts' too
//            (tests/data/quant/*.imatrix, tools/quant_mix_goldens.sh)
//   KLD:     the log-probability file lumen writes for stories260K is llama-perplexity's
//            (tests/data/kld, tools/kld_goldens.sh) up to the models' logit differences,
//            and lumen's KL-divergence of a Q4_K_M against llama-perplexity's file gives
//            llama-perplexity's figures
// and the errors both commands give for bad input.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/shared_dir.h"
#include "convert/imatrix_file.h"
#include "gguf/model_file.h"
#include "run_lumen.h"

namespace lumen::testing {
namespace {

std::string data_path(const std::string& rel) { return std::string(LUMEN_TEST_DATA_DIR) + "/" + rel; }

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "lumen_calib_" + std::to_string(::getpid()) + "_" + name;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// The first n bytes of War and Peace, as the golden scripts cut them (head -c).
std::string war_and_peace_head(size_t n, const std::string& name) {
  const std::string path = temp_path(name);
  write_bytes(path, read_bytes(shared_dir() + "/corpus/war-and-peace.txt").substr(0, n));
  return path;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---------------------------------------------------------------------------------------
// lumen imatrix

struct ImatrixModel {
  const char* name;               // tests/data/quant/<name>.imatrix
  std::vector<std::string> synth;  // as tools/quant_mix_goldens.sh passes them
};

const ImatrixModel kImatrixModels[] = {
    {"qwen2-h160",
     {"--preset", "tiny-qwen2", "--hidden", "160", "--heads", "5", "--kv-heads", "1", "--ffn", "256", "--layers", "8"}},
    {"llama-h256",
     {"--preset", "tiny-llama", "--hidden", "256", "--heads", "4", "--kv-heads", "2", "--ffn", "256", "--layers", "8"}},
};

std::string synth_f16(const ImatrixModel& m) {
  const std::string out = temp_path(std::string(m.name) + "-f16.gguf");
  std::vector<std::string> args = {"synth"};
  args.insert(args.end(), m.synth.begin(), m.synth.end());
  for (const char* a : {"--type", "f16", "-t", "2", "-o"}) args.push_back(a);
  args.push_back(out);
  const CmdResult r = run_lumen(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return out;
}

// lumen imatrix of model m on text (-c 128, 8 chunks, as tools/quant_mix_goldens.sh runs
// llama-imatrix) against the committed llama-imatrix file: the same entries, calls, and
// values within 1e-2; and lumen quantize --type quant_type takes lumen's file.
void expect_matches_llama_imatrix(const ImatrixModel& m, const std::string& text, const char* quant_type) {
  SCOPED_TRACE(m.name);
  {
    const std::string f16 = synth_f16(m);
    const std::string ours = temp_path(std::string(m.name) + ".imatrix");
    const CmdResult r = run_lumen({"imatrix", "-m", f16, "-f", text, "-o", ours, "-c", "128", "--chunks", "8", "-t", "2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto mine = convert::read_imatrix(ours);
    auto theirs = convert::read_imatrix(data_path(std::string("quant/") + m.name + ".imatrix"));
    ASSERT_TRUE(mine.ok()) << mine.message();
    ASSERT_TRUE(theirs.ok()) << theirs.message();
    EXPECT_EQ(mine->n_chunks, theirs->n_chunks);
    EXPECT_EQ(mine->dataset, text);
    ASSERT_EQ(mine->entries.size(), theirs->entries.size());
    double worst = 0;
    std::string worst_name;
    for (const auto& [name, want] : theirs->entries) {
      auto it = mine->entries.find(name);
      ASSERT_NE(it, mine->entries.end()) << name;
      const convert::ImatrixEntry& got = it->second;
      EXPECT_EQ(got.n_calls, want.n_calls) << name;
      ASSERT_EQ(got.values.size(), want.values.size()) << name;
      for (size_t j = 0; j < want.values.size(); ++j) {
        const double rel = std::abs(got.values[j] - want.values[j]) / std::max(1e-12, std::abs(double{want.values[j]}));
        if (rel > worst) {
          worst = rel;
          worst_name = name;
        }
      }
    }
    // Measured: 2.7e-3 (llama-h256, blk.7.ffn_down), from the models' own rounding (ggml
    // multiplies f16 weights with f16-rounded activations; f32 sums against double here).
    // The experts' entries are as close (1.2e-3, mixtral-h256 blk.1.ffn_down_exps) when
    // both route every token to the same experts. A token whose K-th and next expert are
    // a near tie can go either way (tiny-mixtral at --hidden 128: one token in layer 1, 0.2
    // on two experts' entries), so the MoE models here have no such token.
    EXPECT_LT(worst, 1e-2) << worst_name;
    std::printf("  %s: %zu entries as llama-imatrix's, values within %.1e (worst %s)\n", m.name,
                mine->entries.size(), worst, worst_name.c_str());

    // Our file is a valid --imatrix for lumen quantize (llama-quantize reads the same bytes).
    const std::string q = temp_path("q.gguf");
    const CmdResult rq = run_lumen({"quantize", f16, q, "--type", quant_type, "--imatrix", ours});
    EXPECT_EQ(rq.exit_code, 0) << rq.err;
    std::remove(q.c_str());
    std::remove(ours.c_str());
    std::remove(f16.c_str());
  }
}

// `lumen imatrix` run twice on the same text, writing the .dat form to `dat` and the GGUF
// form to `gg`; both read back, and the GGUF file opened.
struct BothForms {
  std::optional<convert::Imatrix> dat, gguf;
  std::optional<gguf::ModelFile> file;
};
void imatrix_both_forms(const std::string& f16, const std::string& text, const char* ctx, const char* chunks,
                        const std::string& dat, const std::string& gg, BothForms* out) {
  for (const std::string& path : {dat, gg}) {
    const CmdResult r = run_lumen({"imatrix", "-m", f16, "-f", text, "-o", path, "-c", ctx, "--chunks", chunks, "-t", "2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  auto a = convert::read_imatrix(dat);
  auto b = convert::read_imatrix(gg);
  ASSERT_TRUE(a.ok()) << a.message();
  ASSERT_TRUE(b.ok()) << b.message();
  auto file = gguf::open_gguf(gg);
  ASSERT_TRUE(file.ok()) << file.message();
  out->dat = std::move(*a);
  out->gguf = std::move(*b);
  out->file = std::move(*file);
}

// Every entry of `a` has the importance of the same entry of `b` within 1e-6 relative (the
// .dat and the GGUF form of one run: f32 sums over counts against means times calls).
void expect_same_importance(const convert::Imatrix& a, const convert::Imatrix& b) {
  for (const auto& [name, e] : a.entries) {
    const std::vector<float> wa = a.weights(name), wb = b.weights(name);
    ASSERT_EQ(wa.size(), wb.size()) << name;
    for (size_t j = 0; j < wa.size(); ++j)
      ASSERT_NEAR(wb[j], wa[j], 1e-6 * std::max(1.0f, std::abs(wa[j]))) << name << " column " << j;
  }
}

TEST(CalibImatrix, MatchesLlamaImatrix) {
  const std::string text = war_and_peace_head(200000, "calib.txt");
  for (const ImatrixModel& m : kImatrixModels) expect_matches_llama_imatrix(m, text, "q4_k_m");
  std::remove(text.c_str());
}

// Mixture-of-experts models (as tools/quant_mix_goldens.sh makes them): the 3-D expert
// weights per expert over the tokens routed to it, the router and the shared expert. iq2_xxs
// needs an importance matrix entry for every matrix it quantizes, the experts' included.
const ImatrixModel kImatrixMoeModels[] = {
    {"mixtral-h256", {"--preset", "tiny-mixtral", "--hidden", "256", "--ffn", "256", "--layers", "2"}},
    {"qwen2moe-h128", {"--preset", "tiny-qwen2moe", "--hidden", "128", "--layers", "2"}},
    // multi-head latent attention: attn_q_a / attn_q_b / attn_kv_a_mqa / attn_kv_b, a dense
    // leading layer, shared experts
    {"deepseek2-mla", {"--preset", "tiny-deepseek2"}},
};

TEST(CalibImatrix, MatchesLlamaImatrixOnMixturesOfExperts) {
  const std::string text = war_and_peace_head(200000, "calib-moe.txt");
  for (const ImatrixModel& m : kImatrixMoeModels) expect_matches_llama_imatrix(m, text, "iq2_xxs");
  std::remove(text.c_str());
}

// The GGUF form keeps a row count per expert ([1, n_expert]); an expert weight some expert
// of which no token reached is left out of the .dat form (as c392e5094's llama-imatrix does:
// that form has no count per expert) and kept in the GGUF form with that expert's count 0.
TEST(CalibImatrix, ExpertCountsInTheGgufForm) {
  const std::string text = war_and_peace_head(20000, "calib-experts.txt");
  const ImatrixModel m{"moe64", {"--preset", "tiny-mixtral", "--hidden", "64", "--ffn", "32", "--layers", "2",
                                 "--experts", "64"}};
  const std::string f16 = synth_f16(m);
  const std::string dat = temp_path("experts.dat"), gg = temp_path("experts.gguf");
  for (const char* n_chunks : {"8", "1"}) {  // 512 and 64 (token, expert) pairs
    SCOPED_TRACE(std::string("chunks ") + n_chunks);
    BothForms both;
    ASSERT_NO_FATAL_FAILURE(imatrix_both_forms(f16, text, "32", n_chunks, dat, gg, &both));
    const std::optional<convert::Imatrix>& a = both.dat;
    const std::optional<convert::Imatrix>& b = both.gguf;
    const std::optional<gguf::ModelFile>& file = both.file;
    const gguf::TensorInfo* counts = file->find_tensor("blk.1.ffn_down_exps.weight.counts");
    const gguf::TensorInfo* sums = file->find_tensor("blk.1.ffn_down_exps.weight.in_sum2");
    ASSERT_NE(counts, nullptr);
    ASSERT_NE(sums, nullptr);
    EXPECT_EQ(counts->view.shape_string(), "[1, 64]");
    EXPECT_EQ(sums->view.shape_string(), "[32, 64]");  // [n_ff, n_expert]
    const float* c = reinterpret_cast<const float*>(counts->view.data);
    const float n_rows = std::accumulate(c, c + 64, 0.0f);
    EXPECT_EQ(n_rows, std::stof(n_chunks) * 32 * 2) << "tokens x experts per token";
    const bool all_used = std::find(c, c + 64, 0.0f) == c + 64;
    if (std::string(n_chunks) == "1") {
      EXPECT_FALSE(all_used);  // 64 pairs reach 64 experts only if all differ
    }
    EXPECT_EQ(b->entries.size(), 16u);  // 4 attention, router, 3 expert weights; 2 layers
    EXPECT_EQ(a->entries.size(), all_used ? 16u : 10u);
    expect_same_importance(*a, *b);
  }
  for (const std::string& p : {dat, gg, f16, text}) std::remove(p.c_str());
}

// -o NAME.gguf writes the GGUF form newer llama-imatrix writes; it holds the same statistics
// (sums over token counts) as the .dat form of the same run.
TEST(CalibImatrix, GgufOutputHoldsTheSameImportance) {
  const std::string text = war_and_peace_head(60000, "calib-gguf.txt");
  const ImatrixModel& m = kImatrixModels[1];
  const std::string f16 = synth_f16(m);
  const std::string dat = temp_path("im.dat"), gg = temp_path("im.gguf");
  BothForms both;
  ASSERT_NO_FATAL_FAILURE(imatrix_both_forms(f16, text, "128", "4", dat, gg, &both));
  const std::optional<convert::Imatrix>& a = both.dat;
  const std::optional<convert::Imatrix>& b = both.gguf;
  const std::optional<gguf::ModelFile>& file = both.file;
  EXPECT_EQ(file->get_int("imatrix.chunk_size"), 128);
  EXPECT_EQ(file->get_int("imatrix.chunk_count"), 4);
  const gguf::TensorInfo* counts = file->find_tensor("blk.0.attn_q.weight.counts");
  ASSERT_NE(counts, nullptr);
  EXPECT_EQ(reinterpret_cast<const float*>(counts->view.data)[0], 4 * 128.0f);  // tokens
  EXPECT_EQ(b->n_chunks, a->n_chunks);
  EXPECT_EQ(b->dataset, text);
  ASSERT_EQ(b->entries.size(), a->entries.size());
  expect_same_importance(*a, *b);
  for (const std::string& p : {dat, gg, f16, text}) std::remove(p.c_str());
}

TEST(CalibImatrix, RejectsBadInput) {
  const ImatrixModel& m = kImatrixModels[1];
  const std::string f16 = synth_f16(m);
  const std::string out = temp_path("bad.imatrix");
  const std::string short_text = war_and_peace_head(300, "short.txt");
  const std::string text = war_and_peace_head(20000, "text.txt");
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const Case cases[] = {
      {{"imatrix", "-m", f16, "-o", out}, "missing -f/--file"},
      {{"imatrix", "-m", f16, "-f", temp_path("no-such.txt"), "-o", out}, "no-such.txt"},
      {{"imatrix", "-m", f16, "-f", short_text, "-o", out, "-c", "128"}, "at least 2 chunks"},
      {{"imatrix", "-m", f16, "-f", text, "-o", out, "-c", "8"}, "-c must be at least 16"},
      {{"imatrix", "-m", f16, "-f", text, "-o", out, "-c", "64", "--chunks", "0"}, "--chunks"},
      {{"imatrix", "-m", temp_path("no-such.gguf"), "-f", text, "-o", out}, "no-such.gguf"},
      {{"imatrix", "-m", f16, "-f", text, "-o", temp_path("no-dir") + "/x.imatrix", "-c", "64"}, "cannot write"},
  };
  for (const Case& c : cases) {
    const CmdResult r = run_lumen(c.args);
    EXPECT_NE(r.exit_code, 0) << c.message;
    EXPECT_TRUE(contains(r.err, c.message)) << "want '" << c.message << "' in: " << r.err;
    EXPECT_FALSE(std::ifstream(out).good()) << c.message << ": an output was written";
  }

  // lumen quantize --imatrix: another model's matrix, a damaged file, a missing one.
  const std::string q = temp_path("q.gguf");
  const std::string other = data_path("quant/qwen2-h160.imatrix");
  const std::string cut = temp_path("cut.imatrix");
  write_bytes(cut, read_bytes(other).substr(0, 1000));
  const Case quantize_cases[] = {
      {{"quantize", f16, q, "--type", "q4_k_m", "--imatrix", other}, "another model"},
      {{"quantize", f16, q, "--type", "q4_k_m", "--imatrix", cut}, "cut.imatrix"},
      {{"quantize", f16, q, "--type", "q4_k_m", "--imatrix", temp_path("none.imatrix")}, "none.imatrix"},
  };
  for (const Case& c : quantize_cases) {
    const CmdResult r = run_lumen(c.args);
    EXPECT_NE(r.exit_code, 0) << c.message;
    EXPECT_TRUE(contains(r.err, c.message)) << "want '" << c.message << "' in: " << r.err;
    EXPECT_FALSE(std::ifstream(q).good()) << c.message << ": an output was written";
  }
  for (const std::string& p : {f16, short_text, text, cut}) std::remove(p.c_str());
}

// ---------------------------------------------------------------------------------------
// lumen perplexity --kl-divergence-base / --kl-divergence

const char kStories[] = "/models/stories260K/stories260K.gguf";
constexpr int kKldCtx = 64, kKldChunks = 4, kStoriesVocab = 512;
constexpr size_t kRowU16s = 2 * ((kStoriesVocab + 1) / 2) + 4;  // llama-perplexity's row size

// llama-perplexity's figures (tests/data/kld/stories260K-q4_k_m.txt).
std::map<std::string, double> read_figures(const std::string& path) {
  std::map<std::string, double> m;
  std::ifstream in(path);
  std::string key;
  double v;
  while (in >> key >> v) m[key] = v;
  return m;
}

// log p of every vocabulary entry in row `r` of a base file (with the dropped tail at the
// row's minimum).
std::vector<float> row_log_probs(const std::string& file, size_t r) {
  const size_t header = 20 + 4 * kKldCtx * kKldChunks;
  const char* row = file.data() + header + r * kRowU16s * 2;
  float scale, min_log_prob;
  std::memcpy(&scale, row, 4);
  std::memcpy(&min_log_prob, row + 4, 4);
  std::vector<float> lp(kStoriesVocab);
  for (int i = 0; i < kStoriesVocab; ++i) {
    uint16_t q;
    std::memcpy(&q, row + 8 + 2 * i, 2);
    lp[i] = scale * q + min_log_prob;
  }
  return lp;
}

TEST(CalibKld, BaseFileAndFiguresMatchLlamaPerplexity) {
  const std::string model = shared_dir() + kStories;
  const std::string text = war_and_peace_head(20000, "kld.txt");
  const std::string golden_base = data_path("kld/stories260K-c64.kld");

  // The base file: llama-perplexity's header and tokens, its log-probabilities up to the
  // two engines' logit differences.
  const std::string ours = temp_path("stories260K.kld");
  CmdResult r = run_lumen({"perplexity", "-m", model, "-f", text, "-c", std::to_string(kKldCtx), "--chunks",
                           std::to_string(kKldChunks), "--kl-divergence-base", ours});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string mine = read_bytes(ours), theirs = read_bytes(golden_base);
  ASSERT_EQ(mine.size(), theirs.size());
  const size_t header = 20 + 4 * kKldCtx * kKldChunks;
  EXPECT_EQ(mine.substr(0, header), theirs.substr(0, header)) << "header or tokens differ";
  const size_t n_rows = (mine.size() - header) / (2 * kRowU16s);
  EXPECT_EQ(n_rows, size_t{kKldChunks} * (kKldCtx - 1 - kKldCtx / 2));
  double worst = 0;
  for (size_t row = 0; row < n_rows; ++row) {
    const std::vector<float> a = row_log_probs(mine, row), b = row_log_probs(theirs, row);
    for (int i = 0; i < kStoriesVocab; ++i)
      if (b[i] > -12) worst = std::max(worst, double{std::abs(a[i] - b[i])});
  }
  // Measured 2.8e-3 (about 12 steps of the file's 16-bit grid), within the 2e-2 the logit
  // goldens allow stories260K (tests/golden_test.cc).
  EXPECT_LT(worst, 1e-2);
  std::printf("  base file: header and tokens identical, log-probs within %.1e of llama-perplexity's\n", worst);

  // A model against its own base file: no divergence (the file's 16-bit rounding only).
  r = run_lumen({"perplexity", "-m", model, "--kl-divergence-base", ours, "--kl-divergence", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json self = nlohmann::json::parse(r.out)["kl_divergence"];
  EXPECT_LT(self["kld_mean"].get<double>(), 1e-5);
  EXPECT_EQ(self["same_top"].get<double>(), 1.0);
  EXPECT_EQ(self["n_tokens_scored"].get<int64_t>(), static_cast<int64_t>(n_rows));

  // lumen's Q4_K_M (llama-quantize's bytes) against llama-perplexity's base file.
  const std::string q = temp_path("stories260K-q4_k_m.gguf");
  r = run_lumen({"quantize", model, q, "--type", "q4_k_m"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_lumen({"perplexity", "-m", q, "--kl-divergence-base", golden_base, "--kl-divergence", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json got = nlohmann::json::parse(r.out)["kl_divergence"];
  const std::map<std::string, double> want = read_figures(data_path("kld/stories260K-q4_k_m.txt"));
  // Computed from the base file alone: the same to its printed digits.
  EXPECT_NEAR(got["ppl_base"].get<double>(), want.at("ppl_base"), 1e-5);
  // Measured: mean KLD 0.04052 vs 0.04027, PPL 70.20 vs 70.49, same top 89.5% in both,
  // 99th percentile 0.396 vs 0.392 (the quantized models' logits differ slightly).
  EXPECT_NEAR(got["kld_mean"].get<double>(), want.at("kld_mean"), 0.05 * want.at("kld_mean"));
  EXPECT_NEAR(got["kld_99"].get<double>(), want.at("kld_99"), 0.05 * want.at("kld_99"));
  EXPECT_NEAR(got["kld_median"].get<double>(), want.at("kld_median"), 0.05 * want.at("kld_median"));
  EXPECT_NEAR(got["ppl"].get<double>(), want.at("ppl"), 0.02 * want.at("ppl"));
  EXPECT_NEAR(got["same_top"].get<double>(), want.at("same_top"), 0.025);
  EXPECT_NEAR(got["dp_rms"].get<double>(), want.at("dp_rms"), 0.1 * want.at("dp_rms"));
  std::printf("  q4_k_m vs f32: mean KLD %.5f (llama-perplexity %.5f), same top %.3f (%.3f), ppl %.3f (%.3f)\n",
              got["kld_mean"].get<double>(), want.at("kld_mean"), got["same_top"].get<double>(), want.at("same_top"),
              got["ppl"].get<double>(), want.at("ppl"));
  // The text summary prints the same figures.
  r = run_lumen({"perplexity", "-m", q, "--kl-divergence-base", golden_base, "--kl-divergence"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "Mean    KLD:")) << r.out;
  EXPECT_TRUE(contains(r.out, "Same top p:")) << r.out;
  for (const std::string& p : {ours, q, text}) std::remove(p.c_str());
}

TEST(CalibKld, RejectsBadInput) {
  const std::string model = shared_dir() + kStories;
  const std::string other_vocab = shared_dir() + "/models/TinyStories-656K/TinyStories-656K-Q8_0.gguf";
  const std::string base = data_path("kld/stories260K-c64.kld");
  const std::string bytes = read_bytes(base);
  const std::string cut = temp_path("cut.kld"), magic = temp_path("magic.kld"), token = temp_path("token.kld");
  write_bytes(cut, bytes.substr(0, bytes.size() - 100));
  write_bytes(magic, "_notlog_" + bytes.substr(8));
  std::string bad_token = bytes;
  const int32_t t = 100000;
  std::memcpy(bad_token.data() + 20 + 4 * 5, &t, 4);
  write_bytes(token, bad_token);
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const Case cases[] = {
      {{"perplexity", "-m", model, "--kl-divergence"}, "--kl-divergence needs --kl-divergence-base"},
      {{"perplexity", "-m", model, "--kl-divergence-base", temp_path("none.kld"), "--kl-divergence"}, "none.kld"},
      {{"perplexity", "-m", model, "--kl-divergence-base", cut, "--kl-divergence"}, "truncated"},
      {{"perplexity", "-m", model, "--kl-divergence-base", magic, "--kl-divergence"}, "not a log-probability file"},
      {{"perplexity", "-m", model, "--kl-divergence-base", token, "--kl-divergence"}, "token 5 is 100000"},
      {{"perplexity", "-m", model, "--kl-divergence-base", base, "--kl-divergence", "-c", "128"}, "differs from the base"},
      {{"perplexity", "-m", other_vocab, "--kl-divergence-base", base, "--kl-divergence"}, "vocabulary of 512"},
  };
  for (const Case& c : cases) {
    const CmdResult r = run_lumen(c.args);
    EXPECT_NE(r.exit_code, 0) << c.message;
    EXPECT_TRUE(contains(r.err, c.message)) << "want '" << c.message << "' in: " << r.err;
  }
  // Writing a base file where it cannot be written: an error, no partial file.
  const std::string text = war_and_peace_head(20000, "bad-kld.txt");
  const std::string nowhere = temp_path("no-dir") + "/base.kld";
  const CmdResult r = run_lumen({"perplexity", "-m", model, "-f", text, "-c", "64", "--kl-divergence-base", nowhere});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.err, "cannot write")) << r.err;
  for (const std::string& p : {cut, magic, token, text}) std::remove(p.c_str());
}

// ---------------------------------------------------------------------------------------
// lumen quantize --awq

double kld_mean_of(const std::string& model, const std::string& base, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"perplexity", "-m", model, "--kl-divergence-base", base, "--kl-divergence", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const CmdResult r = run_lumen(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  return j.is_object() ? j["kl_divergence"]["kld_mean"].get<double>() : -1;
}

// Issue 16, acceptance 2: a quantized KV cache against the f16 cache, both with flash
// attention, as mean KL-divergence over War and Peace. The shared models' heads (8, 16) cannot
// hold 32-element blocks, so this runs the head-size-32 synth model of the flash goldens
// (tests/data/fa); docs/perf.md has the figures of a real model (qwen2.5-0.5b). Measured
// (avx2): q8_0 1.9e-4, q4_0 2.9e-2; a q8_0 quantizer that truncates instead of rounding gives
// 4.6e-4 and fails the q8_0 bound (the plain-data f16 rounding: 3e-8).
TEST(CalibKld, QuantizedKvCacheStaysCloseToF16) {
  const std::string model = data_path("fa/fa-llama-hd32-f16/model.gguf");
  const std::string text = war_and_peace_head(20000, "kv-kld.txt"), base = temp_path("kv-f16.kld");
  const CmdResult r = run_lumen({"perplexity", "-m", model, "-f", text, "-c", "128", "--chunks", "8", "-t", "1", "-fa",
                                 "on", "--kv-type", "f16", "--kl-divergence-base", base});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double q8 = kld_mean_of(model, base, {"-t", "1", "-fa", "on", "--kv-type", "q8_0"});
  const double q4 = kld_mean_of(model, base, {"-t", "1", "-fa", "on", "--kv-type", "q4_0"});
  const double f16 = kld_mean_of(model, base, {"-t", "1", "-fa", "on", "--kv-type", "f16"});
  std::printf("  mean KLD vs the f16 cache: q8_0 %.3g, q4_0 %.3g, f16 itself %.3g\n", q8, q4, f16);
  EXPECT_LT(f16, 1e-5);  // the base file's 16-bit rounding only
  EXPECT_GT(q8, f16);
  EXPECT_LT(q8, 3e-4);
  EXPECT_GT(q4, 10 * q8);
  EXPECT_LT(q4, 6e-2);
  for (const std::string& p : {text, base}) std::remove(p.c_str());
}

// TinyStories-656K (real weights): scales searched on the first 60 kB of War and Peace lower
// q4_0's mean KL-divergence from f32 on text 1 MB further on (measured 0.0735 -> 0.0669), and
// every layer group's searched error is at most its plain one (alpha = 0 is in the grid).
TEST(CalibAwq, LowersTheKldOfQ4_0OnHeldOutText) {
  const std::string f32 = temp_path("ts656k-f32.gguf");
  CmdResult r = run_lumen({"quantize", shared_dir() + "/models/TinyStories-656K", f32, "--type", "f32"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string wp = read_bytes(shared_dir() + "/corpus/war-and-peace.txt");
  ASSERT_GT(wp.size(), 1200000u);
  const std::string calib = temp_path("awq-calib.txt"), score = temp_path("awq-score.txt");
  write_bytes(calib, wp.substr(0, 60000));
  write_bytes(score, wp.substr(1000000, 120000));
  const std::string base = temp_path("ts656k.kld");
  r = run_lumen({"perplexity", "-m", f32, "-f", score, "-c", "256", "--chunks", "16", "--kl-divergence-base", base});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const std::string plain = temp_path("ts656k-q4_0.gguf"), awq = temp_path("ts656k-q4_0-awq.gguf");
  r = run_lumen({"quantize", f32, plain, "--type", "q4_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_lumen({"quantize", f32, awq, "--type", "q4_0", "--awq", calib, "--awq-ctx", "256", "-v"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // "  blk.0.attn_norm.weight  alpha 0.40  error 812.9 -> 766.6", one line per group
  std::istringstream lines(r.err);
  int n_groups = 0, n_scaled = 0;
  for (std::string line; std::getline(lines, line);) {
    float alpha = 0, before = 0, after = 0;
    const size_t at = line.find("alpha ");
    if (at == std::string::npos || std::sscanf(line.c_str() + at, "alpha %f error %f -> %f", &alpha, &before, &after) != 3)
      continue;
    ++n_groups;
    n_scaled += alpha > 0;
    EXPECT_LE(after, before) << line;
  }
  EXPECT_EQ(n_groups, 4) << r.err;  // 2 layers x (attn_norm, ffn_norm)
  EXPECT_GT(n_scaled, 0) << r.err;

  const double k_plain = kld_mean_of(plain, base), k_awq = kld_mean_of(awq, base);
  std::printf("  TinyStories-656K q4_0 mean KLD: plain %.5f, awq %.5f\n", k_plain, k_awq);
  EXPECT_GT(k_plain, 0);
  EXPECT_LT(k_awq, k_plain);
  for (const std::string& p : {f32, calib, score, base, plain, awq}) std::remove(p.c_str());
}

TEST(CalibAwq, RejectsBadInput) {
  const std::string model = shared_dir() + kStories;
  const std::string gemma = temp_path("gemma2.gguf"), out = temp_path("awq-out.gguf");
  CmdResult r = run_lumen({"synth", "--preset", "tiny-gemma2", "--type", "f32", "-o", gemma});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string tiny_text = temp_path("awq-tiny.txt"), text = war_and_peace_head(20000, "awq.txt");
  write_bytes(tiny_text, "Once upon a time");
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const Case cases[] = {
      {{"quantize", model, out, "--type", "q4_0", "--awq", temp_path("none.txt")}, "none.txt"},
      {{"quantize", model, out, "--type", "q4_0", "--awq", tiny_text, "--awq-ctx", "64"}, "less than one chunk"},
      {{"quantize", gemma, out, "--type", "q4_0", "--awq", text, "--awq-ctx", "64"}, "architecture 'gemma2'"},
      {{"quantize", model, out, "--type", "q4_0", "--awq", text, "--awq-ctx", "8"}, "--awq-ctx"},
  };
  for (const Case& c : cases) {
    const CmdResult res = run_lumen(c.args);
    EXPECT_NE(res.exit_code, 0) << c.message;
    EXPECT_TRUE(contains(res.err, c.message)) << "want '" << c.message << "' in: " << res.err;
  }
  for (const std::string& p : {gemma, out, tiny_text, text}) std::remove(p.c_str());
}

}  // namespace
}  // namespace lumen::testing
