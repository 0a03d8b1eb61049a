#include "calib/imatrix_collect.h"

#include <cstdio>
#include <utility>

namespace lumen::calib {
namespace {

// llama-imatrix ignores matrix products of fewer tokens (single-token decode steps).
constexpr int64_t kMinRows = 16;

struct TapFeeds {
  std::string_view tap;
  std::string_view suffixes[4];  // the matrices (blk.N.<suffix>.weight) it feeds
};
constexpr TapFeeds kFeeds[] = {
    {"attn_norm", {"attn_q", "attn_k", "attn_v", "attn_qkv"}},
    {"attn_out", {"attn_output", "", "", ""}},
    {"ffn_norm", {"ffn_gate", "ffn_up", "", ""}},
    {"ffn_act", {"ffn_down", "", "", ""}},
};

}  // namespace

ImatrixCollector::ImatrixCollector(const gguf::ModelFile& file) {
  for (const gguf::TensorInfo& t : file.tensors()) {
    int layer = -1;
    char suffix[64] = {};
    // "blk.<N>.<suffix>.weight"
    if (std::sscanf(t.name.c_str(), "blk.%d.%63[^.].weight", &layer, suffix) != 2 || t.view.n_dims < 2) continue;
    if (t.name != "blk." + std::to_string(layer) + "." + suffix + ".weight") continue;
    for (const TapFeeds& f : kFeeds) {
      for (std::string_view s : f.suffixes) {
        if (s.empty() || s != suffix) continue;
        targets_[{std::string(f.tap), layer}].push_back(t.name);
        Stat& st = stats_[t.name];
        st.n_in = t.view.ne[0];
        st.sum_x2.assign(static_cast<size_t>(st.n_in), 0.0);
      }
    }
  }
}

void ImatrixCollector::on_tap(std::string_view tap_name, int32_t layer_idx, std::span<const float> values) {
  auto it = targets_.find({std::string(tap_name), layer_idx});
  if (it == targets_.end()) return;
  for (const std::string& name : it->second) {
    Stat& st = stats_.at(name);
    if (st.n_in <= 0 || values.size() % static_cast<size_t>(st.n_in) != 0) continue;  // another width
    const int64_t n_rows = static_cast<int64_t>(values.size()) / st.n_in;
    if (n_rows < kMinRows) continue;
    for (int64_t r = 0; r < n_rows; ++r) {
      const float* x = values.data() + r * st.n_in;
      for (int64_t j = 0; j < st.n_in; ++j) st.sum_x2[j] += static_cast<double>(x[j]) * x[j];
    }
    st.n_rows += n_rows;
    ++st.n_calls;
  }
}

convert::Imatrix ImatrixCollector::result(int32_t n_chunks, std::string dataset) const {
  convert::Imatrix m;
  m.n_chunks = n_chunks;
  m.dataset = std::move(dataset);
  for (const auto& [name, st] : stats_) {
    if (st.n_calls == 0) continue;
    convert::ImatrixEntry e;
    e.n_calls = st.n_calls;
    e.values.resize(st.sum_x2.size());
    // Stored as llama-imatrix stores it: the mean over the rows, times the calls.
    for (size_t j = 0; j < e.values.size(); ++j)
      e.values[j] = static_cast<float>(st.sum_x2[j] / static_cast<double>(st.n_rows) * st.n_calls);
    m.entries.emplace(name, std::move(e));
  }
  return m;
}

std::map<std::string, convert::ImatrixSums> ImatrixCollector::sums() const {
  std::map<std::string, convert::ImatrixSums> out;
  for (const auto& [name, st] : stats_) {
    if (st.n_calls == 0) continue;
    convert::ImatrixSums& e = out[name];
    e.in_sum2.assign(st.sum_x2.begin(), st.sum_x2.end());
    e.count = static_cast<float>(st.n_rows);
  }
  return out;
}

}  // namespace lumen::calib
