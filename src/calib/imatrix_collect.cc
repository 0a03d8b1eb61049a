#include "calib/imatrix_collect.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace lumen::calib {
namespace {

// llama-imatrix ignores dense matrix products of fewer tokens (single-token decode steps).
constexpr int64_t kMinRows = 16;

// What a tap means for the matrices it feeds.
enum class Feed : uint8_t {
  kDense,    // [n_rows][n_in] input rows of the matrix (a pass of >= kMinRows rows is a call)
  kExpert,   // one expert's input rows of a 3-D expert weight (no call: see kMoeCall)
  kMoeCall,  // once per MoE layer and pass: a call of the layer's expert weights
};

struct TapFeeds {
  std::string_view tap;
  Feed feed;
  std::string_view suffixes[6];  // the matrices (blk.N.<suffix>.weight) it feeds
};
constexpr TapFeeds kFeeds[] = {
    {"attn_norm", Feed::kDense, {"attn_q", "attn_k", "attn_v", "attn_qkv", "attn_q_a", "attn_kv_a_mqa"}},
    {"attn_q_a_norm", Feed::kDense, {"attn_q_b"}},    // MLA: the normed q bottleneck
    {"attn_kv_a_norm", Feed::kDense, {"attn_kv_b"}},  // MLA: the normed latent (without the rope key)
    {"attn_out", Feed::kDense, {"attn_output"}},
    {"ffn_norm", Feed::kDense,
     {"ffn_gate", "ffn_up", "ffn_gate_inp", "ffn_gate_shexp", "ffn_up_shexp", "ffn_gate_inp_shexp"}},
    {"ffn_act", Feed::kDense, {"ffn_down"}},
    {"ffn_act_shexp", Feed::kDense, {"ffn_down_shexp"}},
    {"ffn_moe_in", Feed::kExpert, {"ffn_gate_exps", "ffn_up_exps"}},
    {"ffn_moe_act", Feed::kExpert, {"ffn_down_exps"}},
    {"ffn_moe_logits", Feed::kMoeCall, {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}},
};

const TapFeeds* find_feeds(std::string_view tap) {
  for (const TapFeeds& f : kFeeds)
    if (f.tap == tap) return &f;
  return nullptr;
}

}  // namespace

ImatrixCollector::ImatrixCollector(const gguf::ModelFile& file) {
  for (const gguf::TensorInfo& t : file.tensors()) {
    int layer = -1;
    char suffix[64] = {};
    // "blk.<N>.<suffix>.weight" (1-D too: qwen2moe's ffn_gate_inp_shexp is a vector that
    // llama.cpp multiplies as a matrix of one row)
    if (std::sscanf(t.name.c_str(), "blk.%d.%63[^.].weight", &layer, suffix) != 2) continue;
    if (t.name != "blk." + std::to_string(layer) + "." + suffix + ".weight") continue;
    for (const TapFeeds& f : kFeeds) {
      for (std::string_view s : f.suffixes) {
        if (s.empty() || s != suffix) continue;
        targets_[{std::string(f.tap), layer}].push_back(t.name);
        Stat& st = stats_[t.name];
        st.n_in = t.view.ne[0];
        st.n_mat = f.feed == Feed::kDense ? 1 : static_cast<int32_t>(t.view.n_dims == 3 ? t.view.ne[2] : 1);
        st.sum_x2.assign(static_cast<size_t>(st.n_in * st.n_mat), 0.0);
        st.n_rows.assign(static_cast<size_t>(st.n_mat), 0);
      }
    }
  }
}

void ImatrixCollector::on_tap(std::string_view tap_name, int32_t layer_idx, int32_t expert_idx,
                              std::span<const float> values) {
  const TapFeeds* f = find_feeds(tap_name);
  if (f == nullptr || (f->feed == Feed::kExpert) != (expert_idx >= 0)) return;
  auto it = targets_.find({std::string(tap_name), layer_idx});
  if (it == targets_.end()) return;
  for (const std::string& name : it->second) {
    Stat& st = stats_.at(name);
    if (f->feed == Feed::kMoeCall) {
      ++st.n_calls;
      continue;
    }
    if (st.n_in <= 0 || values.size() % static_cast<size_t>(st.n_in) != 0) continue;  // another width
    const int64_t n_rows = static_cast<int64_t>(values.size()) / st.n_in;
    const int32_t mat = f->feed == Feed::kExpert ? expert_idx : 0;
    if (mat >= st.n_mat || (f->feed == Feed::kDense && n_rows < kMinRows)) continue;
    double* sum = st.sum_x2.data() + int64_t{mat} * st.n_in;
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* x = values.data() + r * st.n_in;
      for (int64_t j = 0; j < st.n_in; ++j) sum[j] += static_cast<double>(x[j]) * x[j];
    }
    st.n_rows[static_cast<size_t>(mat)] += n_rows;
    if (f->feed == Feed::kDense) ++st.n_calls;
  }
}

convert::Imatrix ImatrixCollector::result(int32_t n_chunks, std::string dataset) const {
  convert::Imatrix m;
  m.n_chunks = n_chunks;
  m.dataset = std::move(dataset);
  for (const auto& [name, st] : stats_) {
    if (st.n_calls == 0 || std::find(st.n_rows.begin(), st.n_rows.end(), 0) != st.n_rows.end()) continue;
    convert::ImatrixEntry e;
    e.n_calls = st.n_calls;
    e.values.resize(st.sum_x2.size());
    // Stored as llama-imatrix stores it: per matrix (expert) the mean over its rows, times
    // the calls.
    for (size_t j = 0; j < e.values.size(); ++j) {
      const int64_t n_rows = st.n_rows[j / static_cast<size_t>(st.n_in)];
      e.values[j] = static_cast<float>(st.sum_x2[j] / static_cast<double>(n_rows) * st.n_calls);
    }
    m.entries.emplace(name, std::move(e));
  }
  return m;
}

std::vector<std::string> ImatrixCollector::partial() const {
  std::vector<std::string> out;
  for (const auto& [name, st] : stats_)
    if (st.n_calls > 0 && std::find(st.n_rows.begin(), st.n_rows.end(), 0) != st.n_rows.end()) out.push_back(name);
  return out;
}

std::map<std::string, convert::ImatrixSums> ImatrixCollector::sums() const {
  std::map<std::string, convert::ImatrixSums> out;
  for (const auto& [name, st] : stats_) {
    if (st.n_calls == 0) continue;
    convert::ImatrixSums& e = out[name];
    e.in_sum2.assign(st.sum_x2.begin(), st.sum_x2.end());
    e.counts.assign(st.n_rows.begin(), st.n_rows.end());
  }
  return out;
}

}  // namespace lumen::calib
