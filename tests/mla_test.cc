// Multi-head latent attention (deepseek2, src/model/mla_block.cc): what lumen reads from a
// DeepSeek-2 file, the KV layout (one row of latent + rope key per token and layer, no V),
// and the absorbed form lumen runs against the expanded form (per-head keys and values
// made from the latent, as llama.cpp c392e5094 and the paper compute it), computed here in
// double over a context of 300 tokens. The whole model is checked against llama.cpp by the
// architecture goldens (tests/data/arch: deepseek2-mla, deepseek2-lite-mla,
// deepseek3-sigmoid-router).
#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/thread_pool.h"
#include "gguf/model_file.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace lumen::model {
namespace {

const std::string kArch = std::string(LUMEN_TEST_DATA_DIR) + "/arch/";

gguf::ModelFile open_case(const std::string& name) {
  auto f = gguf::open_model(kArch + name + "/model.gguf");
  EXPECT_TRUE(f.ok()) << f.message();
  return std::move(f).value();
}

TEST(Mla, HParamsSpecsAndTheLatentKvLayout) {
  for (const char* name : {"deepseek2-mla", "deepseek2-lite-mla"}) {
    SCOPED_TRACE(name);
    const bool lite = std::string(name) == "deepseek2-lite-mla";
    auto m = Model::load(open_case(name), ModelLimits{});
    ASSERT_TRUE(m.ok()) << m.message();
    const HParams& hp = m->hparams();
    EXPECT_EQ(hp.arch, Arch::kDeepseek2);
    EXPECT_TRUE(hp.is_mla());
    EXPECT_EQ(hp.n_lora_kv, 32);
    EXPECT_EQ(hp.n_lora_q, lite ? 0 : 24);
    EXPECT_EQ(hp.rope_dims, 16);
    EXPECT_EQ(hp.head_dim, 32);
    EXPECT_EQ(hp.head_dim_v, 16);
    EXPECT_EQ(hp.n_layer_dense_lead, 1);
    EXPECT_EQ(hp.n_ff_shexp, hp.n_ff_exp);  // one shared expert
    EXPECT_EQ(hp.rope_scaling_type, "yarn");
    for (int32_t il = 0; il < hp.n_layer; ++il) {
      const LayerSpec& s = m->layer_specs()[il];
      EXPECT_TRUE(s.mla);
      EXPECT_EQ(s.moe, il >= 1);
      EXPECT_EQ(s.shared_expert, il >= 1);
      EXPECT_EQ(s.rope.ext_factor, 1.0f);
    }
    // One group, one row of kv_lora_rank + rope dims per token and layer, no V.
    const KvLayout& kvl = m->kv_layout();
    ASSERT_EQ(kvl.n_groups(), 1);
    EXPECT_TRUE(kvl.k_only);
    EXPECT_EQ(kvl.n_kv_head, 1);
    EXPECT_EQ(kvl.head_dim, 32 + 16);
    EXPECT_EQ(kvl.group_bytes_per_token(0, 2), size_t{48} * hp.n_layer * 2);
    kv::KvCacheConfig c;
    c.n_slots = kvl.n_slots(0);
    c.n_kv_head = kvl.n_kv_head;
    c.head_dim = kvl.head_dim;
    c.k_only = kvl.k_only;
    c.n_blocks = 4;
    EXPECT_EQ(c.bytes_per_token(), size_t{48} * hp.n_layer * 2);
    auto s = kv::KvStorage::allocate(c);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(s->view().v_offset_bytes, 0u);  // V aliases K
    EXPECT_EQ(s->view().slot_stride_bytes, size_t{4} * 16 * 48 * 2);
  }
}

TEST(Mla, BadMetadataIsRefusedNamingTheKey) {
  auto load_error = [](gguf::ModelFile f) {
    auto m = Model::load(std::move(f), ModelLimits{});
    return m.ok() ? std::string() : m.message();
  };
  {
    gguf::ModelFile f = open_case("deepseek2-mla");
    f.set_meta("deepseek2.rope.dimension_count", gguf::MetaValue::of_u32(32));
    EXPECT_NE(load_error(std::move(f)).find("rope.dimension_count 32 must be smaller"), std::string::npos);
  }
  {
    gguf::ModelFile f = open_case("deepseek2-mla");
    f.set_meta("deepseek2.leading_dense_block_count", gguf::MetaValue::of_u32(9));
    EXPECT_NE(load_error(std::move(f)).find("'deepseek2.leading_dense_block_count'"), std::string::npos);
  }
  {
    gguf::ModelFile f = open_case("deepseek2-mla");
    f.set_meta("deepseek2.attention.kv_lora_rank", gguf::MetaValue::of_u32(40));
    EXPECT_NE(load_error(std::move(f)).find("attn_kv_a_mqa.weight' has shape"), std::string::npos);
  }
  {
    gguf::ModelFile f = open_case("deepseek2-mla");
    f.set_meta("deepseek2.expert_gating_func", gguf::MetaValue::of_u32(3));
    EXPECT_NE(load_error(std::move(f)).find("'deepseek2.expert_gating_func'"), std::string::npos);
  }
}

// The expanded form of one layer's attention in double: out [T][H * v] from the layer's
// normed inputs xn [T][n_embd] at positions 0..T-1.
std::vector<double> expanded_attention(const Model& m, int32_t il, const std::vector<float>& xn, int64_t T) {
  const HParams& hp = m.hparams();
  const LayerSpec& s = m.layer_specs()[il];
  const LayerWeights& l = m.weights().layers[il];
  const int64_t E = hp.n_embd, H = hp.n_head, L = hp.n_lora_kv, R = hp.rope_dims, qk = hp.head_dim;
  const int64_t nope = hp.qk_nope_dim(), V = hp.head_dim_v;
  auto mat = [](const TensorView& w, int64_t row) { return reinterpret_cast<const float*>(w.row(row)); };
  auto matvec = [&](const TensorView& w, const double* x, int64_t n_out, int64_t n_in, double* y) {
    EXPECT_EQ(w.dtype, DType::kF32);
    for (int64_t o = 0; o < n_out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < n_in; ++i) acc += mat(w, o)[i] * x[i];
      y[o] = acc;
    }
  };
  auto rmsnorm = [&](double* x, int64_t n, const float* w) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const double inv = 1.0 / std::sqrt(ss / n + hp.rms_eps);
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * w[i];
  };
  kernels::RopeParams rp;  // the layer's RoPE (YaRN) on rows of R dims
  rp.head_dim = rp.n_rot = static_cast<int32_t>(R);
  rp.theta = s.rope.theta;
  rp.freq_scale = s.rope.freq_scale;
  rp.attn_factor = s.rope.attn_factor;
  rp.layout = hp.rope_layout;
  rp.ext_factor = s.rope.ext_factor;
  rp.corr_low = s.rope.corr_low;
  rp.corr_high = s.rope.corr_high;
  auto rope = [&](double* x, int32_t pos) {
    std::vector<float> f(x, x + R);
    kernels::rope(kernels::reference_kernel_table(), rp, f.data(), 1, 1, &pos);
    for (int64_t i = 0; i < R; ++i) x[i] = f[i];
  };
  std::vector<double> q(T * H * qk), k(T * H * qk), v(T * H * V);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> x(xn.begin() + t * E, xn.begin() + (t + 1) * E);
    if (hp.n_lora_q > 0) {
      std::vector<double> ql(hp.n_lora_q);
      matvec(l.wq_a, x.data(), hp.n_lora_q, E, ql.data());
      rmsnorm(ql.data(), hp.n_lora_q, l.q_a_norm);
      matvec(l.wq_b, ql.data(), H * qk, hp.n_lora_q, q.data() + t * H * qk);
    } else {
      matvec(l.wq, x.data(), H * qk, E, q.data() + t * H * qk);
    }
    std::vector<double> kv(L + R);
    matvec(l.wkv_a, x.data(), L + R, E, kv.data());
    rmsnorm(kv.data(), L, l.kv_a_norm);
    rope(kv.data() + L, static_cast<int32_t>(t));
    for (int64_t h = 0; h < H; ++h) {
      rope(q.data() + (t * H + h) * qk + nope, static_cast<int32_t>(t));
      double* kh = k.data() + (t * H + h) * qk;
      for (int64_t d = 0; d < nope; ++d) {  // k_nope_h = c . (head h's k rows of wkv_b)
        double acc = 0;
        for (int64_t c = 0; c < L; ++c) acc += mat(l.wkv_b, h * (nope + V) + d)[c] * kv[c];
        kh[d] = acc;
      }
      for (int64_t d = 0; d < R; ++d) kh[nope + d] = kv[L + d];  // the shared rope key
      for (int64_t j = 0; j < V; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < L; ++c) acc += mat(l.wkv_b, h * (nope + V) + nope + j)[c] * kv[c];
        v[(t * H + h) * V + j] = acc;
      }
    }
  }
  std::vector<double> out(T * H * V, 0.0), p(T);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j <= t; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < qk; ++d) dot += q[(t * H + h) * qk + d] * k[(j * H + h) * qk + d];
        p[j] = dot * s.attn_scale;
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (int64_t j = 0; j <= t; ++j)
        for (int64_t d = 0; d < V; ++d) out[(t * H + h) * V + d] += p[j] / sum * v[(j * H + h) * V + d];
    }
  return out;
}

// 300 tokens: four prefill chunks of 64, then 44 decode steps (over more than one
// 256-key chunk: the flash-decoding split path of the absorbed form, two key chunks of the
// expanded one), with an f32 cache; every layer's attention output (the input of
// attn_output) against the expanded form in double. lumen runs each of its forms alone
// (absorbed; expanded, decode too) and both (prefill chunks expanded, decode absorbed).
struct MlaForm {
  const char* name;
  int32_t mla_expand_tokens;  // ModelLimits::mla_expand_tokens
};
constexpr MlaForm kMlaForms[] = {{"absorbed", -1}, {"expanded", 1}, {"expanded prefill", 64}};

TEST(Mla, AbsorbedAndExpandedAttentionEqualTheExpandedFormOverALongContext) {
  for (int run = 0; run < 2 * static_cast<int>(std::size(kMlaForms)); ++run) {
    const char* name = run % 2 == 0 ? "deepseek2-mla" : "deepseek2-lite-mla";
    const MlaForm& form = kMlaForms[run / 2];
    SCOPED_TRACE(std::string(name) + ", " + form.name);
    constexpr int64_t kT = 300, kChunk = 64, kPrefill = 256;
    ModelLimits limits;
    limits.max_batch_tokens = kChunk;
    limits.max_logit_rows = kChunk;
    limits.max_ctx = kT;
    limits.n_threads = 2;
    limits.mla_expand_tokens = form.mla_expand_tokens;
    auto m = Model::load(open_case(name), limits);
    ASSERT_TRUE(m.ok()) << m.message();
    const HParams& hp = m->hparams();
    const KvLayout& kvl = m->kv_layout();
    kv::KvCacheConfig c;
    c.n_slots = kvl.n_slots(0);
    c.n_kv_head = kvl.n_kv_head;
    c.head_dim = kvl.head_dim;
    c.k_only = kvl.k_only;
    c.n_blocks = kT / 16 + 2;
    c.dtypes = {DType::kF32, DType::kF32};
    auto storage = kv::KvStorage::allocate(c);
    ASSERT_TRUE(storage.ok()) << storage.message();
    std::vector<int32_t> table;  // scrambled: logical order != physical order
    for (int32_t i = 0; i < c.n_blocks; ++i) table.push_back((i * 7 + 3) % c.n_blocks);
    const std::span<const int32_t> tables[1] = {table};
    const KvStorageView views[1] = {storage->view()};

    std::map<int32_t, std::vector<float>> xn, got;  // per layer, [T][...] in position order
    m->set_tap([&](std::string_view what, int32_t il, int32_t /*expert_idx*/, std::span<const float> v) {
      if (what == "attn_norm") xn[il].insert(xn[il].end(), v.begin(), v.end());
      if (what == "attn_out") got[il].insert(got[il].end(), v.begin(), v.end());
    });
    ThreadPool pool(2);
    std::vector<int32_t> ids(kT);
    for (int64_t i = 0; i < kT; ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % hp.n_vocab);
    for (int64_t pos = 0; pos < kT;) {
      const int64_t n = pos < kPrefill ? kChunk : 1;
      const std::vector<int32_t> chunk(ids.begin() + pos, ids.begin() + pos + n);
      const ForwardSeq seq{0, static_cast<int32_t>(n), pos, tables};
      const int32_t row = static_cast<int32_t>(n - 1);
      const ForwardBatch batch{chunk, std::span<const ForwardSeq>(&seq, 1), std::span<const int32_t>(&row, 1)};
      m->forward(kernels::best_kernel_table(), pool, batch, views);
      pos += n;
    }
    const int64_t HV = int64_t{hp.n_head} * hp.head_dim_v;
    for (int32_t il = 0; il < hp.n_layer; ++il) {
      ASSERT_EQ(static_cast<int64_t>(got[il].size()), kT * HV);
      const std::vector<double> want = expanded_attention(*m, il, xn[il], kT);
      double max_ref = 0, max_err = 0;
      for (int64_t i = 0; i < kT * HV; ++i) {
        max_ref = std::max(max_ref, std::abs(want[i]));
        max_err = std::max(max_err, std::abs(want[i] - got[il][i]));
      }
      EXPECT_LT(max_err, 1e-4 * max_ref) << "layer " << il << ": max |d| " << max_err << " of " << max_ref;
    }
  }
}

}  // namespace
}  // namespace lumen::model
