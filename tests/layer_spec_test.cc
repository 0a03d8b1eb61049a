// Which layers slide and with which RoPE base, as the file states it: the period or per-layer
// flags of `<arch>.attention.sliding_window_pattern`, Gemma 3's `rope.freq_base_swa`, and
// the same facts reached from a Hugging Face config (layer_types, sliding_window_pattern,
// rope_local_base_freq; Mistral's sliding_window); a Gemma 3 file without a window.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/shared_dir.h"
#include "convert/synth.h"
#include "convert/type_rules.h"
#include "gguf/gguf_test_util.h"
#include "gguf/model_file.h"
#include "model/hparams.h"
#include "model/kv_layout.h"
#include "model/layer_spec.h"

namespace lumen::model {
namespace {

namespace fs = std::filesystem;
using gguf::MetaValue;
using gguf::ValueType;

const fs::path kArch = fs::path(LUMEN_TEST_DATA_DIR) / "arch";

gguf::ModelFile open_case(const std::string& name) {
  auto f = gguf::open_model((kArch / name / "model.gguf").string());
  EXPECT_TRUE(f.ok()) << f.message();
  return std::move(f).value();
}

std::vector<bool> sliding_of(const std::vector<LayerSpec>& specs) {
  std::vector<bool> s;
  for (const LayerSpec& l : specs) s.push_back(l.attn == AttnKind::kSliding);
  return s;
}

TEST(LayerSpecs, Gemma3DefaultsToFiveLocalToOneGlobalWithLocalBase10000) {
  gguf::ModelFile f = open_case("gemma3-swa");
  auto hp = read_hparams(f);
  ASSERT_TRUE(hp.ok()) << hp.message();
  ASSERT_EQ(hp->n_layer, 6);
  auto specs = read_layer_specs(f, *hp);
  ASSERT_TRUE(specs.ok()) << specs.message();
  EXPECT_EQ(sliding_of(*specs), (std::vector<bool>{true, true, true, true, true, false}));
  EXPECT_EQ((*specs)[0].rope.theta, 10000.0f);
  EXPECT_EQ((*specs)[5].rope.theta, hp->rope_theta);
  EXPECT_NE(hp->rope_theta, 10000.0f);
}

TEST(LayerSpecs, Gemma3ReadsTheLocalRopeBaseAndAPerLayerPattern) {
  gguf::ModelFile f = open_case("gemma3-swa");
  f.set_meta("gemma3.rope.freq_base_swa", MetaValue::of_f32(2500.0f));
  f.set_meta("gemma3.attention.sliding_window_pattern",
             MetaValue::of_int_array(ValueType::kBool, {0, 1, 1, 0, 1, 0}));
  auto hp = read_hparams(f);
  ASSERT_TRUE(hp.ok()) << hp.message();
  auto specs = read_layer_specs(f, *hp);
  ASSERT_TRUE(specs.ok()) << specs.message();
  EXPECT_EQ(sliding_of(*specs), (std::vector<bool>{false, true, true, false, true, false}));
  for (int il : {1, 2, 4}) EXPECT_EQ((*specs)[il].rope.theta, 2500.0f) << il;
  for (int il : {0, 3, 5}) EXPECT_EQ((*specs)[il].rope.theta, hp->rope_theta) << il;
  // The KV layout follows: three layers keep the whole sequence, three their window.
  auto layout = make_kv_layout(*hp, *specs);
  ASSERT_TRUE(layout.ok()) << layout.message();
  int full = 0, local = 0;
  for (const auto& g : layout->groups) (g.window > 0 ? local : full) += static_cast<int>(g.layers.size());
  EXPECT_EQ(full, 3);
  EXPECT_EQ(local, 3);
}

// A Gemma 3 file without `gemma3.attention.sliding_window` (as newer llama.cpp reads it, and
// as `lumen synth --sliding-window 0` writes it): no layer slides, and every layer keeps the
// file's RoPE base (the local base belongs to sliding layers).
TEST(LayerSpecs, Gemma3WithoutAWindowIsGlobalEverywhere) {
  auto c = convert::synth_preset("tiny-gemma3", shared_dir());
  ASSERT_TRUE(c.ok()) << c.message();
  c->sliding_window = 0;
  c->rules = *convert::make_type_rules("f32", "", "");
  const gguf::testing::TempDir scratch;  // removed with its files when the test ends
  const std::string path = scratch.file("gemma3-nowindow.gguf");
  ASSERT_TRUE(convert::synth_model(*c, path, nullptr).ok());
  auto f = gguf::open_model(path);
  ASSERT_TRUE(f.ok()) << f.message();
  ASSERT_EQ(f->find("gemma3.attention.sliding_window"), nullptr);
  auto hp = read_hparams(*f);
  ASSERT_TRUE(hp.ok()) << hp.message();
  auto specs = read_layer_specs(*f, *hp);
  ASSERT_TRUE(specs.ok()) << specs.message();
  EXPECT_EQ(sliding_of(*specs), std::vector<bool>(hp->n_layer, false));
  for (const LayerSpec& s : *specs) EXPECT_EQ(s.rope.theta, hp->rope_theta);
  EXPECT_NE(hp->rope_theta, 10000.0f);
  // Its Hugging Face twin says the same ("sliding_window": null).
  const std::string hf_dir = scratch.file("hf");
  ASSERT_TRUE(convert::synth_model_hf(*c, hf_dir, nullptr).ok());
  auto h = gguf::open_model(hf_dir);
  ASSERT_TRUE(h.ok()) << h.message();
  auto hp_hf = read_hparams(*h);
  ASSERT_TRUE(hp_hf.ok()) << hp_hf.message();
  auto specs_hf = read_layer_specs(*h, *hp_hf);
  ASSERT_TRUE(specs_hf.ok()) << specs_hf.message();
  EXPECT_EQ(sliding_of(*specs_hf), std::vector<bool>(hp->n_layer, false));
  for (const LayerSpec& s : *specs_hf) EXPECT_EQ(s.rope.theta, hp->rope_theta);
}

TEST(LayerSpecs, AnIntegerPatternIsAPeriod) {
  gguf::ModelFile f = open_case("gemma3-swa");
  f.set_meta("gemma3.attention.sliding_window_pattern", MetaValue::of_u32(3));
  auto hp = read_hparams(f);
  ASSERT_TRUE(hp.ok()) << hp.message();
  auto specs = read_layer_specs(f, *hp);
  ASSERT_TRUE(specs.ok()) << specs.message();
  EXPECT_EQ(sliding_of(*specs), (std::vector<bool>{true, true, false, true, true, false}));
}

TEST(LayerSpecs, BadPatternsAreRefusedNamingTheKey) {
  for (const MetaValue& bad : {MetaValue::of_int_array(ValueType::kBool, {1, 0}), MetaValue::of_u32(0),
                               MetaValue::of_string("6")}) {
    gguf::ModelFile f = open_case("gemma3-swa");
    f.set_meta("gemma3.attention.sliding_window_pattern", bad);
    auto hp = read_hparams(f);
    ASSERT_TRUE(hp.ok()) << hp.message();
    auto specs = read_layer_specs(f, *hp);
    ASSERT_FALSE(specs.ok());
    EXPECT_NE(specs.message().find("gemma3.attention.sliding_window_pattern"), std::string::npos) << specs.message();
  }
}

// A copy of a case's hf/ directory with config.json edited.
struct HfCopy {
  fs::path dir;
  HfCopy(const std::string& name, const nlohmann::json& patch) {
    dir = fs::path(::testing::TempDir()) / ("layer_spec_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::copy(kArch / name / "hf", dir, fs::copy_options::recursive);
    std::ifstream in(dir / "config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config.merge_patch(patch);
    std::ofstream(dir / "config.json") << config.dump(2);
  }
  ~HfCopy() { fs::remove_all(dir); }
};

TEST(LayerSpecs, HfLayerTypesAndLocalBaseReachTheSpecs) {
  HfCopy hf("gemma3-swa",
            {{"layer_types",
              {"full_attention", "sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
               "full_attention"}},
             {"rope_local_base_freq", 2500.0}});
  auto f = gguf::open_model(hf.dir.string());
  ASSERT_TRUE(f.ok()) << f.message();
  auto hp = read_hparams(*f);
  ASSERT_TRUE(hp.ok()) << hp.message();
  auto specs = read_layer_specs(*f, *hp);
  ASSERT_TRUE(specs.ok()) << specs.message();
  EXPECT_EQ(sliding_of(*specs), (std::vector<bool>{false, true, true, false, true, false}));
  EXPECT_EQ((*specs)[1].rope.theta, 2500.0f);
  EXPECT_EQ((*specs)[1].window, 16);
}

TEST(LayerSpecs, HfLayerTypesOfTheWrongLengthAreRefused) {
  HfCopy hf("gemma3-swa", {{"layer_types", {"full_attention", "sliding_attention"}}});
  auto f = gguf::open_model(hf.dir.string());
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("layer_types"), std::string::npos) << f.message();
}

TEST(LayerSpecs, HfMistralSlidingWindowSlidesEveryLayer) {
  auto f = gguf::open_model((kArch / "mistral-swa" / "hf").string());
  ASSERT_TRUE(f.ok()) << f.message();
  auto hp = read_hparams(*f);
  ASSERT_TRUE(hp.ok()) << hp.message();
  auto specs = read_layer_specs(*f, *hp);
  ASSERT_TRUE(specs.ok()) << specs.message();
  for (const LayerSpec& s : *specs) {
    EXPECT_EQ(s.attn, AttnKind::kSliding);
    EXPECT_EQ(s.window, 16);
  }
  // A window that covers the whole context is full attention.
  HfCopy full("mistral-swa", {{"sliding_window", 512}});
  auto g = gguf::open_model(full.dir.string());
  ASSERT_TRUE(g.ok()) << g.message();
  auto hp2 = read_hparams(*g);
  ASSERT_TRUE(hp2.ok()) << hp2.message();
  auto specs2 = read_layer_specs(*g, *hp2);
  ASSERT_TRUE(specs2.ok()) << specs2.message();
  for (const LayerSpec& s : *specs2) EXPECT_EQ(s.attn, AttnKind::kFull);
}

// Cross-layer KV sharing (llama-cla: layers 1 and 3 read the K/V of layers 0 and 2): only the
// two source layers store K/V, so a token costs half of what four storing layers would.
TEST(LayerSpecs, CrossLayerSharingStoresOnlyTheSourceLayers) {
  gguf::ModelFile f = open_case("llama-cla");
  auto hp = read_hparams(f);
  ASSERT_TRUE(hp.ok()) << hp.message();
  auto specs = read_layer_specs(f, *hp);
  ASSERT_TRUE(specs.ok()) << specs.message();
  auto layout = make_kv_layout(*hp, *specs);
  ASSERT_TRUE(layout.ok()) << layout.message();
  size_t per_token = 0;
  for (int32_t g = 0; g < layout->n_groups(); ++g) per_token += layout->group_bytes_per_token(g, 2);
  const size_t per_layer = size_t{2} * hp->n_kv_head * hp->head_dim * 2;  // K and V, f16
  int n_readers = 0;
  for (const LayerSpec& s : *specs) n_readers += s.kv_source_layer >= 0;
  ASSERT_EQ(hp->n_layer, 4);
  ASSERT_EQ(n_readers, 2);
  EXPECT_EQ(per_token, per_layer * 2);
  // Without the key, every layer stores its own (the file then lacks the readers' attn_k/v,
  // so only the layout is compared here).
  for (LayerSpec& s : *specs) s.kv_source_layer = -1;
  auto all = make_kv_layout(*hp, *specs);
  ASSERT_TRUE(all.ok()) << all.message();
  size_t all_per_token = 0;
  for (int32_t g = 0; g < all->n_groups(); ++g) all_per_token += all->group_bytes_per_token(g, 2);
  EXPECT_EQ(all_per_token, per_layer * 4);
}

}  // namespace
}  // namespace lumen::model
