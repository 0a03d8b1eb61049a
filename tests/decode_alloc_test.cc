// Nothing on the per-token path allocates: a decode step of the engine (scheduling, the KV
// manager, the model runner's batch, the forward pass, sampling, detokenizing, stop
// strings, events) makes no heap allocation once the running sequences are past their
// prompts. Counted by replacing the global operator new in this test binary: the counter
// only counts while a test arms it, on the arming thread and the thread pool's workers alike.
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include <gtest/gtest.h>

#include "base/shared_dir.h"
#include "engine/engine.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_n_allocs{0};

void* counted_alloc(size_t n, size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) g_n_allocs.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align) : std::malloc(n);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(size_t n) { return counted_alloc(n, 0); }
void* operator new[](size_t n) { return counted_alloc(n, 0); }
void* operator new(size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<size_t>(a)); }
void* operator new[](size_t n, std::align_val_t a) { return counted_alloc(n, static_cast<size_t>(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace lumen::engine {
namespace {

// Allocations made by fn().
template <typename Fn>
int64_t count_allocs(Fn&& fn) {
  g_n_allocs = 0;
  g_counting = true;
  fn();
  g_counting = false;
  return g_n_allocs.load();
}

TEST(DecodeAllocations, CounterSeesAllocations) {
  EXPECT_GT(count_allocs([] {
              std::string s(1000, 'x');
              asm volatile("" : : "r"(s.data()) : "memory");  // keep the allocation
            }),
            0);
}

TEST(DecodeAllocations, DecodeStepsAllocateNothing) {
  EngineConfig c;
  c.n_threads = 2;
  c.n_ctx = 256;
  c.max_batch_tokens = 64;
  c.max_seqs = 4;
  auto e = Engine::create(shared_dir() + "/models/TinyStories-656K/TinyStories-656K-Q8_0.gguf", c);
  ASSERT_TRUE(e.ok()) << e.message();
  Engine& eng = **e;
  // Three completions decoding side by side (two of them forked from one request, so the
  // copy-on-write path has run), sampling with temperature and a stop string that never
  // matches, so every piece of the output path runs.
  for (const char* prompt : {"Once upon a time", "The little dog"}) {
    Request r;
    r.prompt_ids = eng.tokenizer().encode(prompt, true, false);
    r.params.max_tokens = 120;
    r.params.ignore_eos = true;
    r.params.sampling.temperature = 0.8f;
    r.params.sampling.top_p = 0.9f;
    r.params.stop = {"zzzz"};
    r.params.n = prompt[0] == 'O' ? 2 : 1;
    ASSERT_TRUE(eng.add_request(std::move(r)).ok());
  }
  int64_t n_tokens = 0;
  for (int i = 0; i < 8; ++i)  // prompts, forks, first tokens
    for (const RequestEvent& ev : eng.step()) n_tokens += static_cast<int64_t>(ev.new_token_ids.size());
  ASSERT_EQ(eng.metrics().n_running, 3);
  int64_t n_decoded = 0;
  const int64_t n_allocs = count_allocs([&] {
    for (int i = 0; i < 40; ++i)
      for (const RequestEvent& ev : eng.step()) n_decoded += static_cast<int64_t>(ev.new_token_ids.size());
  });
  EXPECT_EQ(n_decoded, 3 * 40);
  EXPECT_EQ(n_allocs, 0) << "heap allocations in 40 decode steps of 3 sequences";
}

}  // namespace
}  // namespace lumen::engine
