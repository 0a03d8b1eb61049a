// Mixture-of-experts files: what lumen reads from their metadata (expert counts, sizes,
// whether the router weights are renormalised), how it refuses bad ones (naming the key or
// the tensor), and that the bytes a decoded token reads count only the experts it is routed
// to. The numerics are checked against llama.cpp by the architecture goldens
// (tests/data/arch: qwen3moe, olmoe, mixtral, qwen2moe-shared-expert) and for batch
// invariance by batch_invariance_test.cc.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "gguf/model_file.h"
#include "model/hparams.h"
#include "model/layer_spec.h"
#include "model/model.h"
#include "model/weights.h"

namespace lumen::model {
namespace {

namespace fs = std::filesystem;
using gguf::MetaValue;

const fs::path kArch = fs::path(LUMEN_TEST_DATA_DIR) / "arch";

gguf::ModelFile open_case(const std::string& name) {
  auto f = gguf::open_model((kArch / name / "model.gguf").string());
  EXPECT_TRUE(f.ok()) << f.message();
  return std::move(f).value();
}

TEST(Moe, HParamsAndSpecsOfEachFamily) {
  struct Want {
    const char* name;
    Arch arch;
    int32_t n_ff_exp, n_ff_shexp;
    bool norm, shared, qk_norm_whole;
  };
  for (const Want& w : {Want{"qwen3moe", Arch::kQwen3Moe, 16, 0, true, false, false},
                        Want{"olmoe", Arch::kOlmoe, 16, 0, false, false, true},
                        Want{"mixtral", Arch::kLlama, 16, 0, true, false, false},
                        Want{"qwen2moe-shared-expert", Arch::kQwen2Moe, 16, 32, false, true, false}}) {
    SCOPED_TRACE(w.name);
    gguf::ModelFile f = open_case(w.name);
    auto hp = read_hparams(f);
    ASSERT_TRUE(hp.ok()) << hp.message();
    EXPECT_EQ(hp->arch, w.arch);
    EXPECT_TRUE(hp->is_moe());
    EXPECT_EQ(hp->n_expert, 8);
    EXPECT_EQ(hp->n_expert_used, 2);
    EXPECT_EQ(hp->n_ff_exp, w.n_ff_exp);
    EXPECT_EQ(hp->n_ff_shexp, w.n_ff_shexp);
    EXPECT_EQ(hp->expert_weights_norm, w.norm);
    auto specs = read_layer_specs(f, *hp);
    ASSERT_TRUE(specs.ok()) << specs.message();
    for (const LayerSpec& s : *specs) {
      EXPECT_TRUE(s.moe);
      EXPECT_EQ(s.shared_expert, w.shared);
      EXPECT_EQ(s.qk_norm_whole, w.qk_norm_whole);
    }
  }
  // A llama file without experts stays dense.
  gguf::ModelFile dense = open_case("llama-gqa");
  auto hp = read_hparams(dense);
  ASSERT_TRUE(hp.ok()) << hp.message();
  EXPECT_FALSE(hp->is_moe());
}

TEST(Moe, BadMetadataAndTensorsAreRefusedNamingThem) {
  auto load_error = [](gguf::ModelFile f) {
    auto m = Model::load(std::move(f), ModelLimits{});
    return m.ok() ? std::string() : m.message();
  };
  {
    gguf::ModelFile f = open_case("qwen3moe");
    f.set_meta("qwen3moe.expert_used_count", MetaValue::of_u32(9));
    EXPECT_NE(load_error(std::move(f)).find("'qwen3moe.expert_used_count' = 9 is out of range [1, 8]"),
              std::string::npos);
  }
  {
    gguf::ModelFile f = open_case("olmoe");
    f.set_meta("olmoe.expert_count", MetaValue::of_string("eight"));
    EXPECT_NE(load_error(std::move(f)).find("'olmoe.expert_count' must be an integer"), std::string::npos);
  }
  {
    gguf::ModelFile f = open_case("qwen2");  // a dense-only architecture with experts declared
    f.set_meta("qwen2.expert_count", MetaValue::of_u32(4));
    EXPECT_NE(load_error(std::move(f)).find("has no mixture-of-experts form"), std::string::npos);
  }
  {
    gguf::ModelFile f = open_case("qwen2moe-shared-expert");  // experts of 32 expected: the tensors have 16
    f.set_meta("qwen2moe.expert_feed_forward_length", MetaValue::of_u32(32));
    const std::string msg = load_error(std::move(f));
    EXPECT_NE(msg.find("tensor 'blk.0.ffn_gate_exps.weight' has shape [64, 16, 8], expected [64, 32, 8]"),
              std::string::npos)
        << msg;
  }
  {
    gguf::ModelFile f = open_case("mixtral");  // 16 experts declared, 8 stored
    f.set_meta("llama.expert_count", MetaValue::of_u32(16));
    const std::string msg = load_error(std::move(f));
    EXPECT_NE(msg.find("'blk.0.ffn_gate_inp.weight' has shape [64, 8], expected [64, 16]"), std::string::npos) << msg;
  }
}

// Decode reads the router and n_expert_used experts per MoE layer, not all of them.
TEST(Moe, BytesPerTokenCountTheExpertsUsed) {
  auto bytes_with_used = [](uint32_t n_used) {
    gguf::ModelFile f = open_case("olmoe");
    f.set_meta("olmoe.expert_used_count", MetaValue::of_u32(n_used));
    auto m = Model::load(std::move(f), ModelLimits{});
    EXPECT_TRUE(m.ok()) << m.message();
    return weight_bytes_per_token(m->weights(), m->hparams());
  };
  // One expert of tiny-olmoe: gate and up [64 -> 16], down [16 -> 64], f32; 3 layers.
  const uint64_t expert_bytes = 3 * 64 * 16 * 4;
  EXPECT_EQ(bytes_with_used(8) - bytes_with_used(2), 3 * 6 * expert_bytes);
  EXPECT_EQ(bytes_with_used(3) - bytes_with_used(2), 3 * expert_bytes);
}

}  // namespace
}  // namespace lumen::model
