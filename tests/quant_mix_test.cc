// `lumen quantize` against llama-quantize (tests/data/quant, written by
// tools/quant_mix_goldens.sh with llama.cpp c392e5094): for small synthetic F16 models
// (one qwen2 with a hidden size that is not a multiple of 256, one llama whose every matrix
// is K-quant compatible), every llama.cpp mix with and without an importance matrix made by
// llama-imatrix must give each tensor the same type, and for every type lumen writes, the
// same bytes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/hash.h"
#include "base/shared_dir.h"
#include "convert/imatrix_file.h"
#include "convert/quantize.h"
#include "convert/quantize_ref.h"
#include "convert/synth.h"
#include "convert/type_rules.h"
#include "gguf/gguf_writer.h"
#include "gguf/model_file.h"

namespace lumen::convert {
namespace {

std::string data_path(const std::string& name) { return std::string(LUMEN_TEST_DATA_DIR) + "/quant/" + name; }

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "lumen_quant_mix_" + std::to_string(::getpid()) + "_" + name;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

uint64_t file_fnv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return fnv1a64(bytes);
}

struct GoldenTensor {
  std::string type;
  std::string hash;
};

struct Golden {
  std::string input_hash;
  // (mix, with imatrix) -> tensor name -> what llama-quantize wrote
  std::map<std::pair<std::string, bool>, std::map<std::string, GoldenTensor>> runs;
  std::set<std::string> mixes;
};

Golden read_golden(const std::string& name) {
  Golden g;
  std::ifstream in(data_path(name + ".txt"));
  EXPECT_TRUE(in.good()) << data_path(name + ".txt");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    if (line.starts_with("# input ")) {
      std::string hash_word, input_word;
      ls >> hash_word >> input_word >> g.input_hash;
      continue;
    }
    std::string mix, tensor, type, hash;
    int im = 0;
    if (!(ls >> mix >> im >> tensor >> type >> hash)) continue;
    g.runs[{mix, im != 0}][tensor] = GoldenTensor{type, hash};
    g.mixes.insert(mix);
  }
  return g;
}

struct MixModel {
  const char* name;
  const char* preset;
  int64_t hidden, heads, kv_heads, ffn, layers;  // as tools/quant_mix_goldens.sh passes them
};

void PrintTo(const MixModel& m, std::ostream* os) { *os << m.name; }

constexpr MixModel kModels[] = {
    {"qwen2-h160", "tiny-qwen2", 160, 5, 1, 256, 8},
    {"llama-h256", "tiny-llama", 256, 4, 2, 256, 8},
};

// The F16 model the goldens were made from (as tools/quant_mix_goldens.sh synthesizes it).
void write_f16(const MixModel& m, const std::string& path) {
  auto c = synth_preset(m.preset, shared_dir());
  ASSERT_TRUE(c.ok()) << c.message();
  c->n_embd = m.hidden;
  c->n_head = m.heads;
  c->n_kv_head = m.kv_heads;
  c->n_ff = m.ffn;
  c->n_layer = m.layers;
  c->rules = *make_type_rules("f16", "", "");
  c->n_threads = 2;
  ASSERT_TRUE(synth_model(*c, path, nullptr).ok());
}

// Types lumen plans for the F16 file under `rules`, by tensor name.
std::map<std::string, DType> planned_types(const gguf::ModelFile& f, const TypeRules& rules) {
  std::vector<TensorDesc> descs;
  for (const gguf::TensorInfo& t : f.tensors())
    descs.push_back(TensorDesc{t.name, std::span<const int64_t>(t.view.ne, t.view.n_dims), t.view.dtype});
  const std::string arch(*f.get_string("general.architecture"));
  const MixModelInfo model =
      make_mix_model_info(arch, *f.get_int(arch + ".block_count"), *f.get_int(arch + ".attention.head_count"),
                          *f.get_int(arch + ".attention.head_count_kv"), 0);
  auto types = plan_tensor_types(rules, model, descs);
  EXPECT_TRUE(types.ok()) << types.message();
  std::map<std::string, DType> out;
  for (size_t i = 0; types.ok() && i < descs.size(); ++i) out[std::string(descs[i].name)] = (*types)[i];
  return out;
}

class QuantMixTest : public ::testing::TestWithParam<MixModel> {};

TEST_P(QuantMixTest, SameTypesAndBytesAsLlamaQuantize) {
  const MixModel& m = GetParam();
  const Golden golden = read_golden(m.name);
  ASSERT_FALSE(golden.runs.empty());
  const std::string f16 = temp_path(std::string(m.name) + "-f16.gguf");
  ASSERT_NO_FATAL_FAILURE(write_f16(m, f16));
  ASSERT_EQ(hex64(file_fnv(f16)), golden.input_hash)
      << "lumen synth no longer writes the F16 input the goldens were made from: regenerate tests/data/quant "
         "with tools/quant_mix_goldens.sh";
  auto f16_file = gguf::open_model(f16);
  ASSERT_TRUE(f16_file.ok()) << f16_file.message();
  auto imatrix = read_imatrix(data_path(std::string(m.name) + ".imatrix"));
  ASSERT_TRUE(imatrix.ok()) << imatrix.message();

  int n_runs_bytes = 0, n_runs_types_only = 0, n_tensors_compared = 0;
  for (const std::string& mix : golden.mixes) {
    for (bool with_im : {false, true}) {
      SCOPED_TRACE(mix + (with_im ? " with imatrix" : " without imatrix"));
      TypeRules rules = *make_type_rules(mix, "", "");
      rules.has_imatrix = with_im;
      auto run = golden.runs.find({mix, with_im});
      if (run == golden.runs.end()) {
        // llama-quantize refused (a low-bit type without an importance matrix): lumen too.
        QuantizeOptions opt;
        opt.rules = rules;
        const Status st = quantize_model(f16, temp_path("refused.gguf"), opt, nullptr);
        EXPECT_FALSE(st.ok());
        EXPECT_NE(st.message().find("needs an importance matrix"), std::string::npos) << st.message();
        continue;
      }
      // Types, for every mix (also those lumen cannot write yet).
      const std::map<std::string, DType> types = planned_types(*f16_file, rules);
      ASSERT_EQ(types.size(), run->second.size());
      bool writable = true;
      for (const auto& [name, want] : run->second) {
        ASSERT_TRUE(types.count(name)) << name;
        EXPECT_EQ(dtype_name(types.at(name)), want.type) << name;
        writable &= types.at(name) == DType::kF16 || can_quantize_to(types.at(name));
      }
      if (!writable) {
        ++n_runs_types_only;
        continue;
      }
      // Bytes.
      QuantizeOptions opt;
      opt.rules = rules;
      opt.n_threads = 2;
      if (with_im) opt.imatrix = &*imatrix;
      const std::string out = temp_path("q.gguf");
      const Status st = quantize_model(f16, out, opt, nullptr);
      ASSERT_TRUE(st.ok()) << st.message();
      auto q = gguf::open_model(out);
      ASSERT_TRUE(q.ok()) << q.message();
      ASSERT_EQ(q->tensors().size(), run->second.size());
      for (const gguf::TensorInfo& t : q->tensors()) {
        const GoldenTensor& want = run->second.at(t.name);
        EXPECT_EQ(dtype_name(t.view.dtype), want.type) << t.name;
        EXPECT_EQ(hex64(fnv1a64(t.view.data, t.view.n_bytes)), want.hash) << t.name << " (" << want.type << ")";
        ++n_tensors_compared;
      }
      ++n_runs_bytes;
      std::remove(out.c_str());
    }
  }
  std::printf("  %s: %d runs compared byte for byte (%d tensors), %d runs by type only (lumen cannot write a type yet)\n",
              m.name, n_runs_bytes, n_tensors_compared, n_runs_types_only);
  std::remove(f16.c_str());
}

// A mix that needs importance data for a tensor says what is missing: the importance matrix
// when none was given; the entry when the given one lacks it. (The refusal of a type lumen has
// no quantizer for was checked here with iq2_xxs; every type of every mix is writable now.)
TEST(QuantMixRefusal, NamesWhatIsMissing) {
  const MixModel& m = kModels[1];  // llama-h256: every matrix is i-quant compatible
  const std::string f16 = temp_path("refusal-f16.gguf");
  ASSERT_NO_FATAL_FAILURE(write_f16(m, f16));
  auto imatrix = read_imatrix(data_path(std::string(m.name) + ".imatrix"));
  ASSERT_TRUE(imatrix.ok()) << imatrix.message();
  const std::string out = temp_path("refused.gguf");
  auto quantize = [&](const char* mix, const Imatrix* im) {
    QuantizeOptions opt;
    opt.rules = *make_type_rules(mix, "", "");
    opt.rules.has_imatrix = im != nullptr;
    opt.imatrix = im;
    opt.n_threads = 2;
    return quantize_model(f16, out, opt, nullptr);
  };

  // iq2_xxs: lumen writes it, and only with importance data.
  Status st = quantize("iq2_xxs", nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("needs an importance matrix"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("no quantizer"), std::string::npos) << st.message();
  st = quantize("iq2_xxs", &*imatrix);
  EXPECT_TRUE(st.ok()) << st.message();

  // q2_K_S: q2_K tensors need importance data, and lumen writes q2_K.
  st = quantize("q2_k_s", nullptr);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("needs an importance matrix"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("no quantizer"), std::string::npos) << st.message();
  Imatrix partial = *imatrix;
  ASSERT_EQ(partial.entries.erase("blk.3.attn_q.weight"), 1u);
  TypeRules rules = *make_type_rules("q2_k_s", "", "");
  rules.has_imatrix = true;
  auto f16_file = gguf::open_model(f16);
  ASSERT_TRUE(f16_file.ok()) << f16_file.message();
  ASSERT_EQ(planned_types(*f16_file, rules).at("blk.3.attn_q.weight"), DType::kQ2_K);
  st = quantize("q2_k_s", &partial);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("has no entry 'blk.3.attn_q.weight'"), std::string::npos) << st.message();
  EXPECT_TRUE(quantize("q2_k_s", &*imatrix).ok());
  std::remove(out.c_str());
  std::remove(f16.c_str());
}

// An importance matrix in the GGUF form newer llama-imatrix writes (NAME.in_sum2 /
// NAME.counts) feeds the quantizers the same weights as the .dat form: the same bytes.
TEST(QuantMixImatrix, GgufFormGivesTheSameBytesAsTheDatForm) {
  const MixModel& m = kModels[1];
  const std::string f16 = temp_path("gguf-im-f16.gguf");
  ASSERT_NO_FATAL_FAILURE(write_f16(m, f16));
  auto dat = read_imatrix(data_path(std::string(m.name) + ".imatrix"));
  ASSERT_TRUE(dat.ok()) << dat.message();
  gguf::GgufWriter w;
  w.set("general.type", gguf::MetaValue::of_string("imatrix"));
  w.set("imatrix.datasets", gguf::MetaValue::of_string_array({dat->dataset}));
  w.set("imatrix.chunk_count", gguf::MetaValue::of_u32(static_cast<uint32_t>(dat->n_chunks)));
  w.set("imatrix.chunk_size", gguf::MetaValue::of_u32(128));
  const std::vector<float> one = {1.0f};
  for (const auto& [name, e] : dat->entries) {
    const std::vector<float> v = dat->weights(name);  // sums over a count of 1
    ASSERT_TRUE(w.add_tensor_copy(name + ".in_sum2", DType::kF32, {static_cast<int64_t>(v.size()), 1},
                                  std::as_bytes(std::span(v))).ok());
    ASSERT_TRUE(w.add_tensor_copy(name + ".counts", DType::kF32, {1, 1}, std::as_bytes(std::span(one))).ok());
  }
  const std::string gguf_path = temp_path("imatrix.gguf");
  ASSERT_TRUE(w.write_file(gguf_path).ok());
  auto from_gguf = read_imatrix(gguf_path);
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.message();
  ASSERT_EQ(from_gguf->entries.size(), dat->entries.size());
  for (const char* mix : {"q4_k_m", "iq2_xxs", "iq3_s"}) {
    SCOPED_TRACE(mix);
    std::vector<uint64_t> hashes[2];
    for (int k = 0; k < 2; ++k) {
      QuantizeOptions opt;
      opt.rules = *make_type_rules(mix, "", "");
      opt.rules.has_imatrix = true;
      opt.imatrix = k == 0 ? &*dat : &*from_gguf;
      opt.n_threads = 2;
      const std::string out = temp_path("gguf-im-q.gguf");
      ASSERT_TRUE(quantize_model(f16, out, opt, nullptr).ok());
      auto q = gguf::open_model(out);
      ASSERT_TRUE(q.ok()) << q.message();
      for (const gguf::TensorInfo& t : q->tensors()) hashes[k].push_back(fnv1a64(t.view.data, t.view.n_bytes));
      std::remove(out.c_str());
    }
    EXPECT_EQ(hashes[0], hashes[1]);
  }
  std::remove(gguf_path.c_str());
  std::remove(f16.c_str());
}

INSTANTIATE_TEST_SUITE_P(Models, QuantMixTest, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<MixModel>& info) {
                           std::string n = info.param.name;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace lumen::convert
