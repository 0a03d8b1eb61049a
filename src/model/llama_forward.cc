// The llama-family forward pass (Llama 2/3, TinyLlama, SmolLM, Mistral; Qwen2 is the same
// network plus biases on the q/k/v projections and NeoX-layout RoPE).
//
// Per layer, for all T tokens of the batch at once (each weight matrix read once per
// layer for the whole batch):
//
//   xn   = rmsnorm(x) * attn_norm                        [T][n_embd]
//   q    = xn Wq^T (+ bq)    k = xn Wk^T (+ bk)    v = xn Wv^T (+ bv)
//   q, k = rope(q, pos), rope(k, pos)                    rotate pairs by pos * theta_i
//   cache[pos] = k, v                                    (paged; F16 by default)
//   a    = softmax(q k^T / sqrt(head_dim), causal) v     per sequence, GQA head mapping
//   x   += a Wo^T                                        residual
//   xn   = rmsnorm(x) * ffn_norm
//   x   += (silu(xn Wgate^T) * (xn Wup^T)) Wdown^T       SwiGLU MLP, residual
//
// then logits = rmsnorm(x[rows]) * output_norm  Wout^T, only for the requested rows.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <initializer_list>
#include <span>

#include "base/check.h"
#include "model/interleaved_cache.h"
#include "model/model.h"

namespace lumen::model {

// Work buffers, sized at load for limits.max_batch_tokens tokens.
struct Model::Workspace {
  std::vector<float> x;        // [T][n_embd] residual stream
  std::vector<float> xn;       // [T][n_embd] normed input of a sub-block
  std::vector<float> q;        // [T][n_head * head_dim]
  std::vector<float> k;        // [T][n_kv_head * head_dim]
  std::vector<float> v;        // [T][n_kv_head * head_dim]
  std::vector<float> attn;     // [T][n_head * head_dim]
  std::vector<float> gate;     // [T][n_ff]
  std::vector<float> up;       // [T][n_ff]
  std::vector<float> sel;      // [R][n_embd] rows selected for logits
  std::vector<float> logits;   // [R][n_vocab]
  std::vector<std::byte> scratch;  // max(matmul scratch, attention scratch)
  std::vector<int32_t> pos;        // [T] position of each token
  std::vector<float> rope_cos;     // [T][head_dim / 2] RoPE angles of each token's position,
  std::vector<float> rope_sin;     //   computed once per pass for all layers' q and k
};

namespace {

// Weights that share one input go through one matmul_fused call (the input is quantized
// once, one dispatch over all their rows) when they have the same dtype; a file that mixes
// dtypes (e.g. q4_K with a q6_K attn_v) gets one call per run of equal dtypes.
void matmul_group(const kernels::KernelTable& k, ThreadPool& pool,
                  std::initializer_list<kernels::MatmulTarget> targets, const float* x, int64_t n_tokens,
                  std::byte* scratch) {
  const kernels::MatmulTarget* t = targets.begin();
  while (t != targets.end()) {
    const kernels::MatmulTarget* run_end = t + 1;
    while (run_end != targets.end() && run_end->w->dtype == t->w->dtype) ++run_end;
    kernels::matmul_fused(k, pool, std::span<const kernels::MatmulTarget>(t, run_end), x, n_tokens, scratch);
    t = run_end;
  }
}

// ---- weight pages -----------------------------------------------------------------------
//
// Decode streams every weight once per token. On 4 KiB pages that is a TLB miss every 4 KiB
// (and a two-level walk in a VM); on 2 MiB pages the same stream ran 25% faster (qwen2.5
// 0.5B q4_0, 1 thread: 34 -> 43 tok/s). For an mmapped file the kernel uses 2 MiB pages
// where the page cache holds 2 MiB folios, i.e. where the file was read into the cache
// through a MADV_HUGEPAGE mapping.

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

// The address range covering the weights (tensors of a GGUF file are contiguous).
std::pair<uintptr_t, uintptr_t> weight_range(const gguf::ModelFile& file) {
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    const auto p = reinterpret_cast<uintptr_t>(t.view.data);
    lo = std::min(lo, p);
    hi = std::max(hi, p + t.view.n_bytes);
  }
  return {lo, hi};
}

// KiB of [lo, hi) mapped with 2 MiB file pages (FilePmdMapped of the mappings inside it).
int64_t pmd_mapped_kib(uintptr_t lo, uintptr_t hi) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  int64_t kib = 0;
  while (std::getline(in, line)) {
    unsigned long a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &a, &b) == 2 && line.find(':') > line.find(' ')) {
      inside = a < hi && b > lo;
    } else if (inside && line.rfind("FilePmdMapped:", 0) == 0) {
      kib += std::atol(line.c_str() + 14);
    }
  }
  return kib;
}

void advise_weight_pages(const gguf::ModelFile& file, bool refresh) {
  auto [lo, hi] = weight_range(file);
  lo = (lo + kHugePage - 1) & ~(kHugePage - 1);  // whole huge pages inside the weights
  hi &= ~(kHugePage - 1);
  if (file.container() != "gguf" || hi <= lo) return;
  void* p = reinterpret_cast<void*>(lo);
  const size_t n = hi - lo;
  if (madvise(p, n, MADV_HUGEPAGE) != 0 || !refresh) return;
#ifdef MADV_POPULATE_READ
  if (madvise(p, n, MADV_POPULATE_READ) != 0) return;
  if (pmd_mapped_kib(lo, hi) * 1024 >= static_cast<int64_t>(n / 2)) return;  // mostly huge already
  // Unmap our pages, drop the file's clean page cache (pages mapped elsewhere stay), read
  // it again through the MADV_HUGEPAGE mapping: readahead then fills 2 MiB folios.
  const int fd = open(file.path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  madvise(p, n, MADV_DONTNEED);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  madvise(p, n, MADV_POPULATE_READ);
#endif
}

}  // namespace

Model::InterleaveReport Model::interleave_weights(const kernels::KernelTable& k, ThreadPool& pool,
                                                  const std::string& cache_dir) {
  InterleaveReport report;
  const InterleavePlan plan = plan_interleave(weights_, k);
  if (plan.entries.empty()) return report;
  const bool views_are_file_mapping = file_->container() == "gguf";  // else owned buffers
  const std::byte* copies = nullptr;
  if (!cache_dir.empty()) {
    Result<InterleavedCache> c = open_or_build_interleaved_cache(plan, file_->path(), cache_dir, pool, views_are_file_mapping);
    if (c.ok()) {
      report.cache_path = c.value().file.path();
      report.cache_built = c.value().built;
      copies = c.value().data;
      interleaved_file_ = std::move(c).value().file;
    } else {
      report.cache_error = c.status().message();
    }
  }
  if (copies == nullptr) {
    Result<HugeBuffer> mem = HugeBuffer::allocate(plan.n_bytes, "interleaved weights");
    if (!mem.ok()) {
      report.cache_error += (report.cache_error.empty() ? "" : "; ") + mem.status().message();
      return report;  // the kernels keep reading the file's layout
    }
    interleaved_memory_ = std::move(mem).value();
    pack_interleaved(plan, interleaved_memory_.data(), pool, PackRelease{views_are_file_mapping, false});
    copies = interleaved_memory_.data();
  }
  bind_interleaved(plan, copies);
  for (const InterleavePlan::Entry& e : plan.entries) report.n_bytes += e.n_bytes;
  if (views_are_file_mapping) {
    // The copied matrices are no longer read from the file: unmap their pages (a
    // neighbour's bytes re-fault from the page cache if ever read: the mapping is
    // read-only). When every matrix has its copy, nothing but embedding rows is read from
    // the file any more (the small vectors are copies too): unmap all of it and map it
    // back on 4 KiB pages, so that a row does not bring 2 MiB of the file into the
    // resident set.
    if (plan.entries.size() == matrices(weights_).size()) {
      const auto [lo, hi] = weight_range(*file_);
      const uintptr_t from = lo & ~(kHugePage - 1);
      madvise(reinterpret_cast<void*>(from), hi - from, MADV_NOHUGEPAGE);
      release_pages(reinterpret_cast<const std::byte*>(lo), hi - lo);
    } else {
      for (const InterleavePlan::Entry& e : plan.entries) release_pages(e.t->data, e.t->n_bytes);
    }
  }
  return report;
}

Model::Model() = default;
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

Result<Model> Model::load(gguf::ModelFile file, const ModelLimits& limits) {
  Model m;
  m.file_ = std::make_unique<gguf::ModelFile>(std::move(file));
  LUMEN_ASSIGN_OR_RETURN(m.hp_, read_hparams(*m.file_));
  LUMEN_ASSIGN_OR_RETURN(m.weights_, bind_weights(*m.file_, m.hp_));
  // llama / qwen2: every layer full attention, storing its own K/V (one group).
  const std::vector<LayerAttn> attn(m.hp_.n_layer);
  LUMEN_ASSIGN_OR_RETURN(m.kv_layout_, build_kv_layout(attn, m.hp_.n_kv_head, m.hp_.head_dim));
  advise_weight_pages(*m.file_, limits.refresh_page_cache_for_huge_pages);
  if (limits.max_batch_tokens <= 0 || limits.max_logit_rows <= 0 || limits.max_ctx <= 0)
    return error("model: limits must be positive");
  m.limits_ = limits;
  const HParams& hp = m.hp_;
  const size_t T = limits.max_batch_tokens, R = limits.max_logit_rows;
  auto ws = std::make_unique<Workspace>();
  ws->x.resize(T * hp.n_embd);
  ws->xn.resize(T * hp.n_embd);
  ws->q.resize(T * hp.n_q_dim());
  ws->k.resize(T * hp.n_kv_dim());
  ws->v.resize(T * hp.n_kv_dim());
  ws->attn.resize(T * hp.n_q_dim());
  ws->gate.resize(T * hp.n_ff);
  ws->up.resize(T * hp.n_ff);
  ws->sel.resize(R * hp.n_embd);
  ws->pos.resize(T);
  ws->rope_cos.resize(T * (hp.head_dim / 2));
  ws->rope_sin.resize(T * (hp.head_dim / 2));
  ws->logits.resize(R * hp.n_vocab);
  size_t scratch = 0;
  auto need = [&](const TensorView& w, size_t rows) {
    scratch = std::max(scratch, kernels::matmul_scratch_bytes(w.dtype, w.ne[0], rows, limits.n_threads));
  };
  for (const TensorView* w : matrices(m.weights_)) need(*w, w == &m.weights_.output ? R : T);
  kernels::AttentionParams ap{hp.n_head, hp.n_kv_head, hp.head_dim, 1.0f};
  scratch = std::max(scratch, kernels::attention_scratch_bytes(ap, T, limits.max_ctx, limits.n_threads));
  ws->scratch.resize(scratch + 64);
  m.ws_ = std::move(ws);
  return m;
}

std::span<const float> Model::forward(const kernels::KernelTable& k, ThreadPool& pool,
                                      const ForwardBatch& batch, std::span<const KvStorageView> kv_groups) {
  const HParams& hp = hp_;
  Workspace& ws = *ws_;
  const int64_t T = static_cast<int64_t>(batch.token_ids.size());
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  LUMEN_CHECK(T > 0 && T <= limits_.max_batch_tokens);
  LUMEN_CHECK(R <= limits_.max_logit_rows && R <= T);
  const KvLayout& kvl = kv_layout_;
  LUMEN_CHECK(static_cast<int32_t>(kv_groups.size()) == kvl.n_groups());
  for (int32_t g = 0; g < kvl.n_groups(); ++g) {
    const KvStorageView& v = kv_groups[g];
    LUMEN_CHECK(v.n_slots == kvl.n_slots(g) && v.n_kv_head == kvl.n_kv_head && v.head_dim == kvl.head_dim);
  }
  LUMEN_CHECK_MSG(pool.n_threads() <= limits_.n_threads, "forward: more threads than the scratch was sized for");
  const int64_t E = hp.n_embd, Q = hp.n_q_dim(), KV = hp.n_kv_dim(), F = hp.n_ff;
  std::byte* scratch = ws.scratch.data();
  auto tap = [&](std::string_view name, int32_t il, const std::vector<float>& buf, int64_t n) {
    if (tap_) tap_(name, il, std::span<const float>(buf.data(), n));
  };

  // Position of every token (for RoPE), from the sequence slices.
  std::vector<int32_t>& pos = ws.pos;
  for (const ForwardSeq& s : batch.seqs) {
    LUMEN_CHECK(s.token_begin >= 0 && s.n_tokens > 0 && s.token_begin + s.n_tokens <= T);
    LUMEN_CHECK(static_cast<int32_t>(s.block_tables.size()) == kvl.n_groups());
    LUMEN_CHECK(s.pos0 + s.n_tokens <= limits_.max_ctx);
    for (int32_t i = 0; i < s.n_tokens; ++i) pos[s.token_begin + i] = static_cast<int32_t>(s.pos0 + i);
  }

  kernels::RopeParams rope{};
  rope.head_dim = hp.head_dim;
  rope.theta = hp.rope_theta;
  rope.freq_scale = hp.rope_freq_scale;
  rope.freq_factors = weights_.rope_freq_factors.empty() ? nullptr : weights_.rope_freq_factors.data();
  rope.layout = hp.rope_layout;
  kernels::AttentionParams ap{hp.n_head, hp.n_kv_head, hp.head_dim,
                              1.0f / std::sqrt(static_cast<float>(hp.head_dim))};

  kernels::rope_angles(rope, pos.data(), T, ws.rope_cos.data(), ws.rope_sin.data());
  kernels::get_rows(weights_.tok_embd, batch.token_ids.data(), T, ws.x.data());
  tap("embd", -1, ws.x, T * E);

  for (int32_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& l = weights_.layers[il];
    // --- attention block ---
    kernels::rms_norm(k, ws.x.data(), l.attn_norm, T, E, hp.rms_eps, ws.xn.data());
    tap("attn_norm", il, ws.xn, T * E);
    matmul_group(k, pool, {{&l.wq, ws.q.data()}, {&l.wk, ws.k.data()}, {&l.wv, ws.v.data()}}, ws.xn.data(), T,
                 scratch);
    if (l.bq) kernels::add_bias(ws.q.data(), l.bq, T, Q);
    if (l.bk) kernels::add_bias(ws.k.data(), l.bk, T, KV);
    if (l.bv) kernels::add_bias(ws.v.data(), l.bv, T, KV);
    kernels::rope_rotate(rope, ws.rope_cos.data(), ws.rope_sin.data(), ws.q.data(), T, hp.n_head);
    kernels::rope_rotate(rope, ws.rope_cos.data(), ws.rope_sin.data(), ws.k.data(), T, hp.n_kv_head);
    tap("q_rope", il, ws.q, T * Q);
    tap("k_rope", il, ws.k, T * KV);
    const KvLayout::LayerKv& lkv = kvl.layers[il];
    for (const ForwardSeq& s : batch.seqs) {
      const PagedKvView view = kv_groups[lkv.group].layer_view(lkv.slot, s.block_tables[lkv.group]);
      const int64_t t0 = s.token_begin;
      if (lkv.source_layer < 0)  // a CLA layer reads its source layer's K/V, stores nothing
        kernels::kv_store(k, view, s.pos0, s.n_tokens, ws.k.data() + t0 * KV, ws.v.data() + t0 * KV);
      kernels::attention(k, pool, ap, view, ws.q.data() + t0 * Q, s.pos0, s.n_tokens,
                         ws.attn.data() + t0 * Q, scratch);
    }
    tap("attn_out", il, ws.attn, T * Q);
    kernels::matmul(k, pool, l.wo, ws.attn.data(), T, ws.xn.data(), scratch);
    kernels::add_in_place(k, ws.x.data(), ws.xn.data(), T * E);  // residual

    // --- MLP block ---
    kernels::rms_norm(k, ws.x.data(), l.ffn_norm, T, E, hp.rms_eps, ws.xn.data());
    matmul_group(k, pool, {{&l.w_gate, ws.gate.data()}, {&l.w_up, ws.up.data()}}, ws.xn.data(), T, scratch);
    kernels::silu_mul(k, ws.gate.data(), ws.up.data(), T * F);
    kernels::matmul(k, pool, l.w_down, ws.gate.data(), T, ws.xn.data(), scratch);
    kernels::add_in_place(k, ws.x.data(), ws.xn.data(), T * E);  // residual
    tap("layer_out", il, ws.x, T * E);
  }

  if (R == 0) return {};
  for (int64_t r = 0; r < R; ++r) {
    const int32_t row = batch.logit_rows[r];
    LUMEN_CHECK(row >= 0 && row < T);
    std::memcpy(ws.sel.data() + r * E, ws.x.data() + int64_t{row} * E, E * sizeof(float));
  }
  kernels::rms_norm(k, ws.sel.data(), weights_.output_norm, R, E, hp.rms_eps, ws.xn.data());
  kernels::matmul(k, pool, weights_.output, ws.xn.data(), R, ws.logits.data(), scratch);
  return std::span<const float>(ws.logits.data(), R * hp.n_vocab);
}

}  // namespace lumen::model
