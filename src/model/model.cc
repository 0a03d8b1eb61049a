// Model: loading (hyper-parameters, layer specs, weights, work buffers), the interleaved
// weight copies, the page advice for the mapped weights, and forward(), which hands the
// batch to the architecture's forward file (model/arch/*.cc).
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
#include <vector>
#include <initializer_list>
#include <span>

#include "base/check.h"
#include "base/huge_buffer.h"
#include "base/read_probe.h"
#include "model/interleaved_cache.h"
#include "model/blocks.h"
#include "model/model.h"

namespace lumen::model {

namespace {

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

// Returns, with `refresh`, the fraction of the weights' whole 2 MiB pages mapped so after
// the refresh (populate_range_on_huge_pages); else (or for a file that is not GGUF, or
// weights smaller than one 2 MiB page) -1.
double advise_weight_pages(const gguf::ModelFile& file, bool refresh) {
  auto [lo, hi] = weight_range(file);
  lo = (lo + kHugePage - 1) & ~(kHugePage - 1);  // whole huge pages inside the weights
  hi &= ~(kHugePage - 1);
  if (file.container() != "gguf" || hi <= lo) return -1;
  void* p = reinterpret_cast<void*>(lo);
  const size_t n = hi - lo;
  if (madvise(p, n, MADV_HUGEPAGE) != 0 || !refresh) return -1;
  return populate_range_on_huge_pages(file.path(), static_cast<const std::byte*>(p), n, 0.5);
}

// How fast the pool reads the mapped copies against the same bytes in anonymous memory
// (base/read_probe.h): kProbeChunks chunks of 2 MiB spread over the copies, copied into an
// anonymous buffer, then read alternately, the best of three reads each: 64 MiB a side,
// so that each read evicts the other's bytes from a last-level cache of up to about 48 MiB
// (a larger one serves both reads alike, and nothing is copied). 40-60 ms of load on the
// Cascade Lake VM (docs/perf.md, session 28). Copies under four times the sample are not
// probed (both rates 0): a small model's reads weigh little, and the sample would be much
// of it.
struct MappingProbe {
  double mapped_gbps = 0;
  double memory_gbps = 0;
};
MappingProbe probe_mapping(const std::byte* data, size_t n_bytes, ThreadPool& pool) {
  constexpr size_t kChunk = size_t{2} << 20;
  constexpr size_t kProbeChunks = 32;
  MappingProbe r;
  const size_t n_whole = n_bytes / kChunk;
  if (n_whole < 4 * kProbeChunks) return r;
  Result<HugeBuffer> sample = HugeBuffer::allocate(kProbeChunks * kChunk, "read probe");
  if (!sample.ok()) return r;
  std::vector<const std::byte*> mapped(kProbeChunks), memory(kProbeChunks);
  for (size_t i = 0; i < kProbeChunks; ++i) {
    mapped[i] = data + (i * n_whole / kProbeChunks) * kChunk;
    std::byte* dst = sample.value().data() + i * kChunk;
    std::memcpy(dst, mapped[i], kChunk);
    memory[i] = dst;
  }
  for (int round = 0; round < 3; ++round) {
    r.mapped_gbps = std::max(r.mapped_gbps, read_chunks_gbps(pool, mapped, kChunk));
    r.memory_gbps = std::max(r.memory_gbps, read_chunks_gbps(pool, memory, kChunk));
  }
  return r;
}

}  // namespace

Model::InterleaveReport Model::interleave_weights(const kernels::KernelTable& k, ThreadPool& pool,
                                                  const std::string& cache_dir, Progress* progress) {
  InterleaveReport report;
  const InterleavePlan plan = plan_interleave(weights_, k);
  if (plan.entries.empty()) return report;
  const bool views_are_file_mapping = file_->container() == "gguf";  // else owned buffers
  const std::byte* copies = nullptr;
  if (!cache_dir.empty()) {
    Result<InterleavedCache> c = open_or_build_interleaved_cache(plan, file_->path(), cache_dir, pool, views_are_file_mapping, progress);
    if (c.ok()) {
      report.cache_path = c.value().file.path();
      report.cache_built = c.value().built;
      report.cache_huge_fraction = c.value().huge_fraction;
      copies = c.value().data;
      interleaved_file_ = std::move(c).value().file;
      // Where the file stayed on 4 KiB pages (a kernel without huge pages for files, or
      // small folios another process keeps mapped), a copy in anonymous memory is on 2 MiB
      // pages: decode streams it faster, for one memcpy at load. On 2 MiB pages too, the
      // page cache can sit where it reads slower than fresh anonymous memory (a NUMA
      // node's far memory; on this project's VM half of the cache files, read at 0.70-0.89x):
      // the probe reads a sample of both, and a slow mapping is copied as well (the
      // copy is then this process's own, no longer shared with other processes mapping
      // the file).
      const bool anon_huge = anonymous_huge_pages_enabled();
      bool copy = report.cache_huge_fraction < 0.5;
      if (!copy && anon_huge) {
        const MappingProbe probe = probe_mapping(copies, plan.n_bytes, pool);
        report.cache_read_gbps = probe.mapped_gbps;
        report.memory_read_gbps = probe.memory_gbps;
        copy = mapping_reads_slow(probe.mapped_gbps, probe.memory_gbps);
      }
      if (copy && anon_huge) {
        if (Result<HugeBuffer> mem = HugeBuffer::allocate(plan.n_bytes, "interleaved weights"); mem.ok()) {
          interleaved_memory_ = std::move(mem).value();
          std::memcpy(interleaved_memory_.data(), copies, plan.n_bytes);
          copies = interleaved_memory_.data();
          interleaved_file_ = MappedFile();
          report.cache_copied_to_memory = true;
        }
      }
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
    if (progress) progress->start("", plan.n_bytes, "bytes");
    pack_interleaved(plan, interleaved_memory_.data(), pool, PackRelease{views_are_file_mapping, false}, progress);
    if (progress) progress->finish();
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
  if (limits.max_batch_tokens <= 0 || limits.max_logit_rows <= 0 || limits.max_ctx <= 0)
    return error("model: limits must be positive");
  LUMEN_ASSIGN_OR_RETURN(m.hp_, read_hparams(*m.file_));
  LUMEN_ASSIGN_OR_RETURN(m.specs_, read_layer_specs(*m.file_, m.hp_));
  LUMEN_ASSIGN_OR_RETURN(m.kv_layout_, make_kv_layout(m.hp_, m.specs_));
  if (limits.rotate_qk && m.kv_layout_.k_only)
    return error("--rotate-k: latent attention (" + m.hp_.arch_key +
                 ") caches a compressed latent, not per-head keys; it cannot be rotated");
  LUMEN_ASSIGN_OR_RETURN(m.weights_, bind_weights(*m.file_, m.hp_, m.specs_, limits.max_ctx));
  m.weights_huge_fraction_ = advise_weight_pages(*m.file_, limits.refresh_page_cache_for_huge_pages);
  m.limits_ = limits;
  m.ws_ = std::make_unique<Workspace>(make_workspace(m.hp_, m.specs_, m.weights_, limits));
  return m;
}

std::span<const float> Model::embeddings() const {
  return std::span<const float>(ws_->embd.data(), static_cast<size_t>(ws_->n_embd_rows) * hp_.n_embd);
}

bool Model::can_move_kv(DType k_dtype) const {
  if (k_dtype != DType::kF16 && k_dtype != DType::kF32) return false;
  // Latent attention rows (K-only) hold the rope key after the latent, and V aliases K:
  // moving them is not kv_move's row rotation. They are recomputed (as llama.cpp cannot
  // shift deepseek2 either).
  if (kv_layout_.k_only) return false;
  if (limits_.rotate_qk) return false;  // cached keys are rotated: RoPE no longer applies to them
  for (const KvLayout::Group& g : kv_layout_.groups)
    if (g.window != 0) return false;
  return true;
}

void Model::move_kv(const kernels::KernelTable& k, std::span<const KvStorageView> kv_groups,
                    std::span<const std::span<const int32_t>> src_tables,
                    std::span<const std::span<const int32_t>> dst_tables, int64_t src_pos0, int64_t dst_pos0,
                    int64_t n) const {
  const auto delta = static_cast<int32_t>(dst_pos0 - src_pos0);
  for (int32_t il = 0; il < hp_.n_layer; ++il) {
    const KvLayout::LayerKv& lkv = kv_layout_.layers[il];
    if (lkv.group < 0 || lkv.source_layer >= 0) continue;  // no attention, or reads another layer's rows
    const int32_t set = ws_->rope_set_of_layer[il];
    const kernels::RopeParams* rope = set >= 0 ? &ws_->rope_sets[set] : nullptr;
    const KvStorageView& g = kv_groups[lkv.group];
    kernels::kv_move(k, g.layer_view(lkv.slot, src_tables[lkv.group]), g.layer_view(lkv.slot, dst_tables[lkv.group]),
                     src_pos0, dst_pos0, n, rope, delta);
  }
}

std::span<const float> Model::forward(const kernels::KernelTable& k, ThreadPool& pool,
                                      const ForwardBatch& batch, std::span<const KvStorageView> kv_groups) {
  const int64_t T = static_cast<int64_t>(batch.token_ids.size());
  const int64_t R = static_cast<int64_t>(batch.logit_rows.size());
  LUMEN_CHECK(T > 0 && T <= limits_.max_batch_tokens);
  LUMEN_CHECK(R <= limits_.max_logit_rows && R <= T);
  LUMEN_CHECK(static_cast<int64_t>(batch.embd_rows.size()) <= std::min<int64_t>(limits_.max_embd_rows, T));
  ws_->n_embd_rows = 0;
  const KvLayout& kvl = kv_layout_;
  LUMEN_CHECK(static_cast<int32_t>(kv_groups.size()) == kvl.n_groups());
  for (int32_t g = 0; g < kvl.n_groups(); ++g) {
    const KvStorageView& v = kv_groups[g];
    LUMEN_CHECK(v.n_slots == kvl.n_slots(g) && v.n_kv_head == kvl.n_kv_head && v.head_dim == kvl.head_dim);
    LUMEN_CHECK_MSG(kvl.k_only == (v.v_offset_bytes == 0), "forward: KV storage with and without V rows mixed up");
  }
  LUMEN_CHECK_MSG(pool.n_threads() <= limits_.n_threads, "forward: more threads than the scratch was sized for");
  for (const ForwardSeq& s : batch.seqs) {
    LUMEN_CHECK(s.token_begin >= 0 && s.n_tokens > 0 && s.token_begin + s.n_tokens <= T);
    LUMEN_CHECK(static_cast<int32_t>(s.block_tables.size()) == kvl.n_groups());
    LUMEN_CHECK(s.pos0 + s.n_tokens <= limits_.max_ctx);
  }
  Pass p{k, pool, hp_, specs_, weights_, kv_layout_, *ws_, batch, kv_groups, tap_, T};
  switch (hp_.arch) {
    case Arch::kLlama:
    case Arch::kQwen2:
    case Arch::kQwen3:
    case Arch::kSmollm3:
    case Arch::kPhi3:
    case Arch::kQwen2Moe:
    case Arch::kQwen3Moe:
    case Arch::kOlmoe: return forward_llama(p);
    case Arch::kGemma:
    case Arch::kGemma2:
    case Arch::kGemma3: return forward_gemma(p);
    case Arch::kStablelm:
    case Arch::kStarcoder2: return forward_stablelm(p);
    case Arch::kDeepseek2: return forward_deepseek2(p);
  }
  LUMEN_CHECK_MSG(false, "forward: unknown architecture");
  return {};
}

}  // namespace lumen::model
