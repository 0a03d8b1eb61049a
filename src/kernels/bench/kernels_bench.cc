// Kernel microbenchmarks (Google Benchmark). Matmul reports weight bandwidth (GB/s of
// weight bytes streamed) and GFLOP/s; attention reports keys/s.
//
// Built as build/lumen_kernels_bench (cmake/lumen.cmake: src/LAYER/bench/*_bench.cc);
// e.g. build/lumen_kernels_bench --benchmark_filter=Matmul
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "base/fp16.h"
#include "base/huge_buffer.h"
#include "base/thread_pool.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "kernels/quant_blocks.h"

namespace lumen::kernels {
namespace {

std::vector<std::byte> random_weight_bytes(DType dt, int64_t n_rows, int64_t n) {
  std::vector<std::byte> w(row_bytes(dt, n) * n_rows);
  std::mt19937 rng(1);
  for (auto& b : w) b = static_cast<std::byte>(rng() & 0xff);
  // Sane fp16 scales so nothing is inf/nan.
  const DTypeInfo& info = dtype_info(dt);
  const size_t n_blocks = w.size() / info.block_bytes;
  const uint16_t d = f32_to_fp16(0.01f);
  for (size_t i = 0; i < n_blocks; ++i)
    for (int16_t off : info.f16_offsets)
      if (off >= 0) std::memcpy(w.data() + i * info.block_bytes + off, &d, 2);
  if (dt == DType::kF16) for (size_t i = 0; i < w.size() / 2; ++i) reinterpret_cast<uint16_t*>(w.data())[i] = f32_to_fp16(0.01f * (i % 7));
  if (dt == DType::kF32) for (size_t i = 0; i < w.size() / 4; ++i) reinterpret_cast<float*>(w.data())[i] = 0.01f * (i % 7);
  return w;
}

// args: table index, dtype, n_in, n_out, n_tokens, n_threads, interleaved (0/1: the weights
// copied into the table's interleaved layout as the model does at load; skipped when the
// table has none for the dtype)
void BM_Matmul(benchmark::State& state) {
  const auto tables = available_kernel_tables();
  if (state.range(0) >= static_cast<int64_t>(tables.size())) {
    state.SkipWithError("table not available");
    return;
  }
  const KernelTable& k = *tables[state.range(0)];
  const DType dt = static_cast<DType>(state.range(1));
  const int64_t n_in = state.range(2), n_out = state.range(3), n_tokens = state.range(4);
  ThreadPool pool(static_cast<int>(state.range(5)));
  const std::vector<std::byte> wdata = random_weight_bytes(dt, n_out, n_in);
  TensorView w;
  w.dtype = dt;
  w.n_dims = 2;
  w.ne[0] = n_in;
  w.ne[1] = n_out;
  w.data = wdata.data();
  w.n_bytes = wdata.size();
  // The interleaved copy lies on 2 MiB pages as the model's does (HugeBuffer): on 4 KiB
  // pages an out-of-cache stream pays a TLB miss per page and the hardware prefetchers stop
  // at every page boundary, which is not what decode sees.
  HugeBuffer il;
  if (state.range(6) != 0) {
    const InterleavedKernels& ik = find_matmul_kernels(k, dt)->interleaved;
    if (ik.layout == nullptr) {
      state.SkipWithError("no interleaved layout");
      return;
    }
    const size_t group_bytes = ik.group_bytes(n_in);
    const size_t il_bytes = (n_out + ik.rows - 1) / ik.rows * group_bytes;
    auto buf = HugeBuffer::allocate(il_bytes, "interleaved weights");
    if (!buf.ok()) {
      state.SkipWithError(buf.message().c_str());
      return;
    }
    il = std::move(*buf);
    for (int64_t r0 = 0; r0 < n_out; r0 += ik.rows)
      ik.pack(n_in, w.data + r0 * w.row_stride_bytes(), w.row_stride_bytes(), std::min<int64_t>(ik.rows, n_out - r0),
              il.data() + r0 / ik.rows * group_bytes);
    w.interleaved = il.data();
    w.interleaved_layout = ik.layout;
    w.interleaved_n_bytes = il_bytes;
  }
  std::vector<float> x(n_in * n_tokens, 0.5f), y(n_out * n_tokens);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.001f * (i % 1000) - 0.5f;
  std::vector<std::byte> scratch(matmul_scratch_bytes(dt, n_in, n_tokens, pool.n_threads()));
  for (auto _ : state) {
    matmul(k, pool, w, x.data(), n_tokens, y.data(), scratch.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(k.name) + " " + std::string(dtype_name(dt)) + (il.data() == nullptr ? "" : " interleaved"));
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(wdata.size()) * state.iterations(),
                                              benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n_in * n_out * n_tokens * state.iterations() * 1e-9,
                                                 benchmark::Counter::kIsRate);
}

void MatmulArgs(benchmark::internal::Benchmark* b) {
  // The AVX-512 table's interleaved kernels, decode and prefill, every dtype they cover.
  for (int threads : {1, 2})
    for (int64_t n_tokens : {1, 64})
      for (DType dt : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K})
        b->Args({2, static_cast<int>(dt), 4864, 896, n_tokens, threads, 1});
  // The AVX2 table's (8-row groups) against its file-layout kernels, gemma2-2b's ffn_up shape.
  for (int il : {0, 1})
    for (int64_t n_tokens : {1, 64, 512})
      for (DType dt : {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K})
        b->Args({1, static_cast<int>(dt), 2304, 9216, n_tokens, 2, il});
  // One thread, the AVX2 interleaved q4_0 / q4_K tiles at the widths of a speculative verify
  // (k + 1 = 4, 9, 17 tokens) and of prefill: compute-bound from a few columns on, so
  // `perf stat -e cycles` gives the tile's cost per MAC even on a busy machine.
  for (int64_t n_tokens : {1, 4, 9, 17, 64, 512})
    for (DType dt : {DType::kQ4_0, DType::kQ4_K})
      b->Args({1, static_cast<int>(dt), 2304, 9216, n_tokens, 1, 1});
  // The same for the legacy types' tiles, and q4_0 at gemma2-2b's ffn_down (9216 -> 2304) and
  // qwen2.5-0.5b's ffn_up (896 -> 4864) shapes.
  for (int64_t n_tokens : {9, 17, 64, 512}) {
    for (DType dt : {DType::kQ5_0, DType::kQ8_0}) b->Args({1, static_cast<int>(dt), 2304, 9216, n_tokens, 1, 1});
    b->Args({1, static_cast<int>(DType::kQ4_0), 9216, 2304, n_tokens, 1, 1});
    b->Args({1, static_cast<int>(DType::kQ4_0), 896, 4864, n_tokens, 1, 1});
  }
  // q4_0 at OLMoE's expert shapes (gate / up 2048 -> 1024, down 1024 -> 2048) and the widths
  // its experts get in a pp512 step (a few tokens to all 512).
  for (int64_t n_tokens : {8, 32, 128, 320, 512})
    for (int64_t n_in : {2048, 1024}) b->Args({1, static_cast<int>(DType::kQ4_0), n_in, 3072 - n_in, n_tokens, 1, 1});
  // One thread, the AVX2 interleaved K- and i-quant tiles of llama.cpp's Q4_K_M / Q5_K_M /
  // IQ4_XS mixes at llama-3.2-1b's ffn shapes (2048 -> 8192 up / gate, 8192 -> 2048 down):
  // verify widths and prefill.
  for (int64_t n_tokens : {9, 17, 64, 512})
    for (DType dt : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS})
      for (int64_t n_in : {2048, 8192}) b->Args({1, static_cast<int>(dt), n_in, 10240 - n_in, n_tokens, 1, 1});
  // llama-3.2-1b's tied q6_K output head (2048 -> 128256, 215 MB) cut to an eighth (27 MB,
  // still out of cache): decode and the verify widths, one thread.
  for (int64_t n_tokens : {1, 4, 9, 17})
    b->Args({1, static_cast<int>(DType::kQ6_K), 2048, 128256 / 8, n_tokens, 1, 1});
  // A speculative verify's widths (1 + k columns) on the AVX-512 table, one thread, 2048 x
  // 2048 (in the L3): what a verify of k proposals costs in compute per type.
  for (int64_t n_tokens : {1, 2, 3, 4, 5, 8, 9})
    for (DType dt : {DType::kQ4_0, DType::kQ4_K, DType::kQ6_K}) b->Args({2, static_cast<int>(dt), 2048, 2048, n_tokens, 1, 1});
  // Decode's compute cost per table: one thread, one column, 2048 x 256 (<= 557 KB, in the
  // L2): the rate a decode tile could stream at if memory kept up.
  for (int table : {1, 2})
    for (DType dt : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K}) b->Args({table, static_cast<int>(dt), 2048, 256, 1, 1, 1});
  // Decode out of cache (~75 MB of q4_0 weights, more than the L3): the memory-bound case.
  for (int table : {1, 2})
    for (int threads : {1, 2})
      for (DType dt : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K})
        b->Args({table, static_cast<int>(dt), 8192, 16384, 1, threads, 1});
  // The AVX2 decode kernels' compute cost: one thread, one column, weights that stay in the
  // L2 (2048 x 128, <= 280 KB), so the CPU time per call is the kernel's own (usable on a
  // loaded machine); each type of llama.cpp's Q4_0 / Q4_K_M / Q5_K_M / IQ4_XS mixes.
  for (int il : {0, 1})
    for (DType dt : {DType::kQ4_0, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
                     DType::kIQ4_XS})
      b->Args({1, static_cast<int>(dt), 2048, 128, 1, 1, il});
  // The types whose AVX-512 kernels came in session 14 (q5_0, q5_K, iq4_nl, iq4_xs) and
  // later (q4_1, q5_1: the AVX2 table's row kernel is what the AVX-512 table ran before), the
  // AVX-512 table (2) against the AVX2 one (1), file layout (il 0) and interleaved (il 1):
  // one thread, decode widths 1..8 on weights that stay in the L2 (2048 x 128; CPU time per
  // call is the kernel's own), prefill at 64 and 512 columns (2048 x 2048), and decode out
  // of cache (8192 x 8192, 2 threads: the memory-bound case). Also q4_0 on the AVX-512 table,
  // the yardstick for the legacy types (its AVX2 cases are above and below).
  auto avx512_cases = [&](int table, DType dt) {
    for (int il : {0, 1}) {
      for (int64_t n_tokens = 1; n_tokens <= 8; ++n_tokens)
        b->Args({table, static_cast<int>(dt), 2048, 128, n_tokens, 1, il});
      for (int64_t n_tokens : {64, 512}) b->Args({table, static_cast<int>(dt), 2048, 2048, n_tokens, 1, il});
      b->Args({table, static_cast<int>(dt), 8192, 8192, 1, 2, il});
    }
  };
  for (int table : {1, 2})
    for (DType dt : {DType::kQ5_0, DType::kQ5_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kQ4_1, DType::kQ5_1})
      avx512_cases(table, dt);
  avx512_cases(2, DType::kQ4_0);
  // The i-quants below 4 bits: one thread, one column, 2048 x 128 (in the L2), the row
  // kernels' own compute rate per byte (they are compute-bound at decode).
  for (DType dt : {DType::kIQ3_S, DType::kIQ3_XXS, DType::kIQ2_S, DType::kIQ2_XS, DType::kIQ2_XXS, DType::kIQ1_S,
                   DType::kIQ1_M})
    for (int table : {1, 2}) b->Args({table, static_cast<int>(dt), 2048, 128, 1, 1, 0});
  for (int table = 0; table < 3; ++table) {
    for (int threads : {1, 2}) {
      // qwen2-0.5B-ish: ffn_up/gate 896 -> 4864 (q4_0, q8_0, f16), ffn_down 4864 -> 896 (K types)
      for (DType dt : {DType::kQ4_0, DType::kQ8_0, DType::kF16, DType::kF32})
        b->Args({table, static_cast<int>(dt), 896, 4864, 1, threads, 0});
      for (DType dt : {DType::kQ4_K, DType::kQ6_K})
        b->Args({table, static_cast<int>(dt), 4864, 896, 1, threads, 0});
      for (DType dt : {DType::kQ4_0, DType::kQ8_0})
        b->Args({table, static_cast<int>(dt), 896, 4864, 64, threads, 0});
      for (DType dt : {DType::kQ4_K, DType::kQ6_K})
        b->Args({table, static_cast<int>(dt), 4864, 896, 64, threads, 0});
    }
  }
}
BENCHMARK(BM_Matmul)->Apply(MatmulArgs)->UseRealTime()->MinTime(0.3);

// qwen2.5-0.5b's attention shape (14 heads, 2 kv heads, head_dim 64) over n_layers paged
// caches of n_ctx keys each (blocks of 16, in order), every layer's K and V rows written
// from the same values through kv_store.
struct QwenAttention {
  AttentionParams p;
  PagedKvView kv;
  HugeBuffer ks, vs;  // [n_layers][n_blocks] block strides each; 2 MiB pages as the engine's cache
  std::vector<int32_t> table;
  int32_t n_blocks = 0;

  QwenAttention(const KernelTable& k, DType dt, int64_t n_ctx, size_t n_layers, bool flash) {
    p.n_head = 14;
    p.n_kv_head = 2;
    p.head_dim = 64;
    p.scale = 0.125f;
    p.flash = flash;
    kv.k_dtype = kv.v_dtype = dt;
    kv.block_size = 16;
    kv.n_kv_head = p.n_kv_head;
    kv.head_dim = p.head_dim;
    kv.set_dense_strides();
    n_blocks = static_cast<int32_t>((n_ctx + 15) / 16);
    ks = HugeBuffer::allocate(kv.k_block_stride_bytes * n_blocks * n_layers, "bench K").value();
    vs = HugeBuffer::allocate(kv.v_block_stride_bytes * n_blocks * n_layers, "bench V").value();
    table.resize(n_blocks);
    for (int32_t i = 0; i < n_blocks; ++i) table[i] = i;
    kv.block_table = table;
    std::vector<float> kvals(n_ctx * 2 * 64);
    for (size_t i = 0; i < kvals.size(); ++i) kvals[i] = 0.01f * (i % 97);
    for (size_t l = 0; l < n_layers; ++l) {
      use_layer(l);
      kv_store(k, kv, 0, n_ctx, kvals.data(), kvals.data());
    }
    use_layer(0);
  }
  void use_layer(size_t l) {
    kv.k_base = ks.data() + l * kv.k_block_stride_bytes * n_blocks;
    kv.v_base = vs.data() + l * kv.v_block_stride_bytes * n_blocks;
  }
};

// The kernel table of arg 0 (available_kernel_tables() index), or null after skipping the
// benchmark where this host has no such table.
const KernelTable* table_arg(benchmark::State& state) {
  const auto tables = available_kernel_tables();
  if (state.range(0) < static_cast<int64_t>(tables.size())) return tables[state.range(0)];
  state.SkipWithError("table not available");
  return nullptr;
}

std::vector<float> bench_queries(int64_t n_tokens) {
  std::vector<float> q(n_tokens * 14 * 64);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 0.02f * (i % 13);
  return q;
}

// args: table index, kv dtype, n_ctx, n_threads, n_tokens (the last n_tokens positions
// are queries: 1 = decode, n_ctx = whole prefill), flash attention (0 / 1)
void BM_Attention(benchmark::State& state) {
  const KernelTable* table = table_arg(state);
  if (table == nullptr) return;
  const KernelTable& k = *table;
  const DType dt = static_cast<DType>(state.range(1));
  const int64_t n_ctx = state.range(2);
  ThreadPool pool(static_cast<int>(state.range(3)));
  QwenAttention a(k, dt, n_ctx, 1, state.range(5) != 0);
  const int64_t n_tokens = state.range(4);
  const std::vector<float> q = bench_queries(n_tokens);
  std::vector<float> out(q.size());
  std::vector<std::byte> scratch(attention_scratch_bytes(a.p, n_tokens, n_ctx, pool.n_threads()));
  for (auto _ : state) {
    attention(k, pool, a.p, a.kv, q.data(), n_ctx - n_tokens, n_tokens, out.data(), scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetLabel(std::string(k.name) + " " + std::string(dtype_name(dt)) + (a.p.flash ? " flash" : ""));
  // Query-key pairs (causal) x 14 heads x 2 dot products of 64 x 2 flop.
  double pairs = 0;
  for (int64_t t = 0; t < n_tokens; ++t) pairs += static_cast<double>(n_ctx - n_tokens + t + 1);
  state.counters["GFLOP/s"] = benchmark::Counter(pairs * 14 * 2 * 64 * 2 * 1e-9 * state.iterations(),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Attention)
    ->ArgsProduct({{0, 1, 2}, {static_cast<int>(DType::kF16)}, {64, 128, 512, 4096}, {1, 2}, {1}, {0, 1}})
    ->ArgsProduct({{0, 1, 2}, {static_cast<int>(DType::kQ8_0), static_cast<int>(DType::kQ4_0)}, {4096}, {1, 2}, {1}, {1}})
    ->Args({0, static_cast<int>(DType::kF16), 512, 1, 512, 0})
    ->Args({1, static_cast<int>(DType::kF16), 512, 1, 512, 0})
    ->Args({2, static_cast<int>(DType::kF16), 512, 1, 512, 0})
    ->Args({1, static_cast<int>(DType::kF16), 512, 1, 512, 1})
    ->UseRealTime();

// Decode at depth as the model sees it: one query token against n_ctx cached keys of
// qwen2.5-0.5b's attention shape, flash attention, cycling over enough layers' caches
// (>= 64 MiB) that the KV streams from memory, not L3. Reports the KV bytes read per
// second (K and V of every key, "KV GB/s": per core at 1 thread; CPU time of the calling
// thread, so read 1-thread figures under load). args: table index, kv dtype, n_ctx,
// n_threads.
void BM_AttentionDepth(benchmark::State& state) {
  const KernelTable* table = table_arg(state);
  if (table == nullptr) return;
  const KernelTable& k = *table;
  const DType dt = static_cast<DType>(state.range(1));
  const int64_t n_ctx = state.range(2);
  ThreadPool pool(static_cast<int>(state.range(3)));
  const size_t one_layer = 2 * 2 * row_bytes(dt, 64) * static_cast<size_t>((n_ctx + 15) / 16 * 16);  // K, V x 2 heads
  const size_t n_layers = (size_t{64} << 20) / one_layer + 1;
  QwenAttention a(k, dt, n_ctx, n_layers, true);
  const std::vector<float> q = bench_queries(1);
  std::vector<float> out(q.size());
  std::vector<std::byte> scratch(attention_scratch_bytes(a.p, 1, n_ctx, pool.n_threads()));
  size_t l = 0;
  for (auto _ : state) {
    a.use_layer(l);
    attention(k, pool, a.p, a.kv, q.data(), n_ctx - 1, 1, out.data(), scratch.data());
    benchmark::DoNotOptimize(out.data());
    l = (l + 1) % n_layers;
  }
  state.SetLabel(std::string(k.name) + " " + std::string(dtype_name(dt)));
  const double kv_bytes = static_cast<double>(n_ctx) * a.p.n_kv_head * (a.kv.k_row_bytes() + a.kv.v_row_bytes());
  state.counters["KV_GB/s"] = benchmark::Counter(kv_bytes * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionDepth)
    ->ArgsProduct({{1, 2},
                   {static_cast<int>(DType::kF16), static_cast<int>(DType::kQ8_0), static_cast<int>(DType::kQ4_0)},
                   {4096, 16384},
                   {1, 2}});

}  // namespace
}  // namespace lumen::kernels

BENCHMARK_MAIN();
