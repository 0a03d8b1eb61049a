#include "calib/awq.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "calib/chunks.h"
#include "convert/quantize.h"
#include "convert/quantize_ref.h"
#include "engine/engine.h"
#include "kernels/ops.h"
#include "kernels/type_table.h"

namespace lumen::calib {
namespace {

struct GroupKind {
  std::string_view tap;    // the norm's output tap
  std::string_view norm;   // blk.N.<norm>.weight
  std::string_view matrices[3];
};
constexpr GroupKind kGroups[] = {
    {"attn_norm", "attn_norm", {"attn_q", "attn_k", "attn_v"}},
    {"ffn_norm", "ffn_norm", {"ffn_gate", "ffn_up", ""}},
};

std::string layer_tensor(int32_t il, std::string_view suffix) {
  return "blk." + std::to_string(il) + "." + std::string(suffix) + ".weight";
}

// AWQ's scales for exponent alpha: a^alpha, kept above 1e-4, normalized by the geometric
// mean of their extremes so they straddle 1.
std::vector<float> scales_for(const std::vector<double>& mean_abs, double alpha) {
  std::vector<float> s(mean_abs.size());
  double lo = INFINITY, hi = 0;
  for (size_t j = 0; j < s.size(); ++j) {
    const double v = std::max(std::pow(mean_abs[j], alpha), 1e-4);
    s[j] = static_cast<float>(v);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const double norm = std::sqrt(lo * hi);
  for (float& v : s) v = static_cast<float>(v / norm);
  return s;
}

// One matrix of a group: its f32 weights and how it will be quantized.
struct GroupMatrix {
  std::string name;
  DType type;
  int64_t n_rows;
  std::vector<float> w;        // [n_rows][n_in]
  std::vector<float> imatrix;  // [n_in] or empty
};

// sum over the sample rows x and every output of (x . (w - Q(w s) / s))^2.
double output_error(const std::vector<GroupMatrix>& mats, const std::vector<float>& s, const std::vector<float>& x,
                    int64_t n_x, const kernels::KernelTable& k, ThreadPool& pool) {
  const int64_t n_in = static_cast<int64_t>(s.size());
  double err = 0;
  for (const GroupMatrix& m : mats) {
    std::vector<float> d(m.w.size());
    std::vector<float> w_imatrix;
    if (!m.imatrix.empty()) {
      w_imatrix = m.imatrix;
      for (int64_t j = 0; j < n_in; ++j) w_imatrix[j] /= s[j] * s[j];
    }
    const size_t q_bytes = row_bytes(m.type, n_in);
    pool.parallel_for(m.n_rows, [&](int64_t begin, int64_t end, int) {
      std::vector<float> ws(n_in), back(n_in);
      std::vector<std::byte> q(q_bytes);
      for (int64_t r = begin; r < end; ++r) {
        const float* w = m.w.data() + r * n_in;
        for (int64_t j = 0; j < n_in; ++j) ws[j] = w[j] * s[j];
        convert::quantize_row(m.type, ws.data(), q.data(), n_in, w_imatrix.empty() ? nullptr : w_imatrix.data());
        kernels::dequantize_row(m.type, q.data(), back.data(), n_in);
        for (int64_t j = 0; j < n_in; ++j) d[r * n_in + j] = w[j] - back[j] / s[j];
      }
    });
    TensorView dv;
    dv.dtype = DType::kF32;
    dv.n_dims = 2;
    dv.ne[0] = n_in;
    dv.ne[1] = m.n_rows;
    dv.data = reinterpret_cast<const std::byte*>(d.data());
    dv.n_bytes = d.size() * sizeof(float);
    std::vector<float> y(static_cast<size_t>(n_x * m.n_rows));
    std::vector<std::byte> scratch(kernels::matmul_scratch_bytes(DType::kF32, n_in, n_x, pool.n_threads()) + 64);
    kernels::matmul(k, pool, dv, x.data(), n_x, y.data(), scratch.data());
    for (float v : y) err += static_cast<double>(v) * v;
  }
  return err;
}

}  // namespace

bool awq_supports_arch(std::string_view arch) {
  return arch == "llama" || arch == "mistral" || arch == "qwen2" || arch == "qwen3";
}

AwqCollector::AwqCollector(int64_t n_embd, int32_t n_layer, int64_t rows_per_pass, int64_t max_rows)
    : n_embd_(n_embd), rows_per_pass_(std::max<int64_t>(1, rows_per_pass)), max_rows_(max_rows) {
  (void)n_layer;
}

void AwqCollector::on_tap(std::string_view tap_name, int32_t layer_idx, std::span<const float> values) {
  if (tap_name != "attn_norm" && tap_name != "ffn_norm") return;
  if (values.size() % static_cast<size_t>(n_embd_) != 0) return;
  const int64_t n_tokens = static_cast<int64_t>(values.size()) / n_embd_;
  Group& g = groups_[{std::string(tap_name), layer_idx}];
  if (g.sum_abs.empty()) g.sum_abs.assign(static_cast<size_t>(n_embd_), 0.0);
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t j = 0; j < n_embd_; ++j) g.sum_abs[j] += std::fabs(values[t * n_embd_ + j]);
  g.n_tokens += n_tokens;
  // Sample rows evenly over the pass (the middle of each stride).
  const int64_t stride = std::max<int64_t>(1, n_tokens / rows_per_pass_);
  for (int64_t t = stride / 2, taken = 0; t < n_tokens && taken < rows_per_pass_ && g.n_rows() < max_rows_;
       t += stride, ++taken)
    g.rows.insert(g.rows.end(), values.begin() + t * n_embd_, values.begin() + (t + 1) * n_embd_);
}

const AwqCollector::Group* AwqCollector::group(std::string_view tap_name, int32_t il) const {
  auto it = groups_.find({std::string(tap_name), il});
  return it == groups_.end() ? nullptr : &it->second;
}

Result<AwqResult> search_awq_scales(const gguf::ModelFile& file, const AwqCollector& acts,
                                    const std::map<std::string, DType>& types, const AwqSearchOptions& options,
                                    const kernels::KernelTable& k, ThreadPool& pool) {
  const int64_t n_in = acts.n_embd();
  const std::string arch(file.get_string("general.architecture").value_or(""));
  const int32_t n_layer = static_cast<int32_t>(file.get_int(arch + ".block_count").value_or(0));
  AwqResult result;
  if (options.progress) options.progress->start("awq", static_cast<uint64_t>(n_layer) * std::size(kGroups), "groups");
  uint64_t n_done = 0;
  for (int32_t il = 0; il < n_layer; ++il) {
    for (const GroupKind& kind : kGroups) {
      ++n_done;
      const AwqCollector::Group* g = acts.group(kind.tap, il);
      const gguf::TensorInfo* norm = file.find_tensor(layer_tensor(il, kind.norm));
      if (!g || g->n_rows() == 0 || !norm || norm->view.n_dims != 1 || norm->view.ne[0] != n_in) continue;
      // A bias after the norm would need the same division; those models are not scaled.
      if (file.find_tensor("blk." + std::to_string(il) + "." + std::string(kind.norm) + ".bias")) continue;
      std::vector<GroupMatrix> mats;
      bool usable = true;
      for (std::string_view suffix : kind.matrices) {
        if (suffix.empty()) continue;
        const std::string name = layer_tensor(il, suffix);
        const gguf::TensorInfo* t = file.find_tensor(name);
        auto type = types.find(name);
        if (!t || type == types.end() || t->view.n_dims != 2 || t->view.ne[0] != n_in ||
            !dtype_info(type->second).is_quantized || !convert::can_quantize_to(type->second) ||
            !kernels::can_dequantize(t->view.dtype)) {
          usable = false;
          break;
        }
        GroupMatrix m{name, type->second, t->view.ne[1], {}, {}};
        m.w.resize(static_cast<size_t>(m.n_rows * n_in));
        for (int64_t r = 0; r < m.n_rows; ++r) kernels::dequantize_row(t->view.dtype, t->view.row(r), m.w.data() + r * n_in, n_in);
        if (options.imatrix) m.imatrix = options.imatrix->weights(name);
        if (!m.imatrix.empty() && static_cast<int64_t>(m.imatrix.size()) != n_in)
          return error("imatrix: entry '" + name + "' does not fit the matrix");
        mats.push_back(std::move(m));
      }
      if (!usable || mats.empty()) continue;
      std::vector<double> mean_abs(g->sum_abs.size());
      for (size_t j = 0; j < mean_abs.size(); ++j) mean_abs[j] = g->sum_abs[j] / static_cast<double>(g->n_tokens);

      AwqGroupResult gr{std::string(norm->name), {}, 0.0f, 0.0, 0.0};
      for (const GroupMatrix& m : mats) gr.matrices.push_back(m.name);
      std::vector<float> best_s;
      for (int i = 0; i <= options.n_grid; ++i) {
        const double alpha = static_cast<double>(i) / options.n_grid;
        std::vector<float> s = scales_for(mean_abs, alpha);
        const double err = output_error(mats, s, g->rows, g->n_rows(), k, pool);
        if (i == 0) gr.err_plain = gr.err_best = err;
        if (err < gr.err_best) {
          gr.err_best = err;
          gr.alpha = static_cast<float>(alpha);
          best_s = std::move(s);
        }
      }
      if (gr.alpha > 0) {
        for (const GroupMatrix& m : mats) result.scales.column_scales[m.name] = best_s;
        result.scales.norm_divisors[gr.norm] = best_s;
      }
      result.groups.push_back(std::move(gr));
      if (options.progress) options.progress->update(n_done, norm->name);
    }
  }
  if (options.progress) options.progress->finish();
  return result;
}

Result<AwqResult> awq_from_text(const std::string& model_path, const std::string& text,
                                const convert::TypeRules& rules, const AwqRunOptions& options,
                                AwqRunReport* report) {
  engine::EngineConfig c;
  c.n_threads = options.n_threads;
  c.n_ctx = options.n_ctx;
  c.max_batch_tokens = options.n_ctx;
  c.max_logit_rows = options.n_ctx;
  c.max_seqs = 1;
  c.interleave_weights = false;  // the search reads the file's matrices; no copies needed
  auto eng = engine::Engine::create(model_path, c);
  if (!eng.ok()) return error("awq: " + eng.message());
  const std::string arch((*eng)->model().file().get_string("general.architecture").value_or(""));
  if (!awq_supports_arch(arch))
    return error("awq: architecture '" + arch + "' is not supported (lumen folds scales into the RMSNorm of " +
                 "llama, mistral, qwen2 and qwen3, whose normed activations feed only q/k/v and gate/up)");
  const std::vector<int32_t> tokens = (*eng)->tokenizer().encode(text, true, false);
  const int64_t n_chunks = count_chunks(static_cast<int64_t>(tokens.size()), options.n_ctx, options.max_chunks);
  if (n_chunks == 0)
    return error("awq: the calibration text has " + std::to_string(tokens.size()) + " tokens, less than one chunk of " +
                 std::to_string(options.n_ctx));
  const model::HParams& hp = (*eng)->hparams();
  AwqCollector acts(hp.n_embd, hp.n_layer, (options.max_rows + n_chunks - 1) / n_chunks, options.max_rows);
  (*eng)->set_model_tap([&](std::string_view name, int32_t il, int32_t /*expert_idx*/, std::span<const float> v) {
    acts.on_tap(name, il, v);
  });
  LUMEN_TRY(run_chunks(**eng, tokens, options.n_ctx, n_chunks, ChunkObserver{}));
  (*eng)->set_model_tap(nullptr);
  if (report) *report = AwqRunReport{static_cast<int64_t>(tokens.size()), n_chunks};
  LUMEN_ASSIGN_OR_RETURN(auto types, convert::plan_quantized_types((*eng)->model().file(), rules));
  ThreadPool pool(std::max(1, options.n_threads));
  return search_awq_scales((*eng)->model().file(), acts, types, options.search, kernels::best_kernel_table(), pool);
}

}  // namespace lumen::calib
