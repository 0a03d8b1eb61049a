// Property test of the KvManager (STYLE 14): random admissions with prefix hits, chunked
// prefill, decode, forks (n > 1), preemption, speculative-style truncation with new tokens,
// and finishing, over layouts of 1-3 groups with windows smaller and larger than a block.
// After every operation:
//   - every pool's invariants hold (check_invariants),
//   - every sequence's tables are sound and every position a future query can see is
//     backed by a live block (check_seq),
//   - the storage holds the right K/V: each computed position p of a sequence is written
//     with a fingerprint of the tokens 0..p (as a model's K/V depends on that prefix), and
//     every visible position must read back its own sequence's fingerprint. Wrong prefix
//     hits, a missed copy-on-write or a rewritten cached block all show up here.
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "kv/kv_manager.h"

namespace lumen::kv {
namespace {

constexpr int32_t kBs = 4;
constexpr int32_t kCtx = 96;
constexpr int32_t kMaxRollback = 3;  // truncate goes back at most this far

uint32_t fingerprint(std::span<const int32_t> tokens, int64_t pos) {
  uint32_t h = 2166136261u;
  for (int64_t i = 0; i <= pos; ++i) h = (h ^ static_cast<uint32_t>(tokens[i])) * 16777619u;
  return h;
}

struct Seq {
  std::vector<int32_t> tokens;
  int64_t n_computed = 0;
  // Tokens that are never rolled back (the last kMaxRollback computed ones may be, like
  // speculated tokens): truncate stops here and windows are released up to here only.
  int64_t n_committed = 0;
  bool running = false;
  SeqKv kv;
};

class Driver {
 public:
  Driver(std::vector<KvGroupSpec> groups, uint32_t seed, bool prefix_cache) : rng_(seed) {
    KvManagerConfig c;
    c.groups = std::move(groups);
    c.n_kv_head = 1;
    c.head_dim = 2;
    c.block_size = kBs;
    c.dtypes = {DType::kF32, DType::kF32};
    c.n_ctx = kCtx;
    c.max_seqs = 3;
    c.max_batch_tokens = 8;
    c.enable_prefix_cache = prefix_cache;
    auto m = KvManager::create(c);
    EXPECT_TRUE(m.ok()) << m.message();
    m_ = std::move(m).value();
  }

  void run(int n_ops) {
    for (int op = 0; op < n_ops; ++op) {
      step();
      check(op);
      if (::testing::Test::HasFailure()) return;
    }
    for (Seq& s : seqs_) m_.release_all(s.kv);
    seqs_.clear();
    EXPECT_EQ(m_.check_invariants(), "");
    for (int32_t g = 0; g < m_.n_groups(); ++g) EXPECT_EQ(m_.pool(g).n_used(), 0);
  }

  int64_t n_hits = 0, n_preempted = 0, n_truncated = 0, n_released = 0;

 private:
  int rand(int n) { return static_cast<int>(rng_() % n); }

  // Prompts share prefixes often: they draw from a few stems.
  std::vector<int32_t> new_prompt() {
    std::vector<int32_t> t;
    const int stem = rand(3);
    const int n_stem = rand(4) * kBs + rand(kBs);
    for (int i = 0; i < n_stem; ++i) t.push_back(100 * stem + i);
    const int n_own = 1 + rand(12);
    for (int i = 0; i < n_own; ++i) t.push_back(rand(5));
    return t;
  }

  void write_kv(Seq& s, int64_t from, int64_t to) {
    for (int32_t g = 0; g < m_.n_groups(); ++g) {
      const KvStorageView& v = m_.views()[g];
      for (int32_t slot = 0; slot < v.n_slots; ++slot) {
        const PagedKvView lv = v.layer_view(slot, s.kv.tables[g].ids());
        for (int64_t p = from; p < to; ++p) {
          const uint32_t f = fingerprint(s.tokens, p) + slot;
          std::memcpy(lv.k_addr(p, 0), &f, 4);
          const uint32_t fv = ~f;
          std::memcpy(lv.v_addr(p, 0), &fv, 4);
        }
      }
    }
  }

  // Schedules n tokens of s (with a lookahead) and "computes" them.
  bool compute(Seq& s, int32_t n) {
    std::vector<BlockCopy> copies;
    if (!m_.allocate_slots(s.kv, s.n_computed, n, rand(3), &copies)) return false;
    m_.copy_blocks(copies);
    write_kv(s, s.n_computed, s.n_computed + n);
    s.n_computed += n;
    m_.cache_full_blocks(s.kv, s.tokens, s.n_computed);
    s.n_committed = std::max(s.n_committed, s.n_computed - kMaxRollback);
    const int32_t before = live_blocks(s);
    m_.release_out_of_window(s.kv, s.n_committed);
    n_released += before - live_blocks(s);
    return true;
  }

  int32_t live_blocks(const Seq& s) const {
    int32_t n = 0;
    for (const BlockTable& t : s.kv.tables) n += t.n_live();
    return n;
  }

  void preempt(Seq& s) {
    m_.release_all(s.kv);
    s.n_computed = 0;
    s.running = false;
    ++n_preempted;
  }

  void log(const std::string& line) {
    log_.push_back(line);
    if (log_.size() > 12) log_.erase(log_.begin());
  }
  std::string trace() const {
    std::string s;
    for (const std::string& l : log_) s += "  " + l + "\n";
    return s;
  }

  void step() {
    const int what = rand(10);
    if (what == 0 || seqs_.empty()) {  // a new request
      if (seqs_.size() >= 6) return;
      Seq s;
      s.tokens = new_prompt();
      m_.init_seq(s.kv, 42);
      seqs_.push_back(std::move(s));
      return;
    }
    Seq& s = seqs_[rand(static_cast<int>(seqs_.size()))];
    const size_t idx = &s - seqs_.data();
    const std::string who = "seq " + std::to_string(idx) + " (" + std::to_string(s.n_computed) + "/" +
                            std::to_string(s.tokens.size()) + "): ";
    if (!s.running) {  // admission: prefix hit, then a first chunk
      const int64_t hit = m_.acquire_prefix(s.kv, s.tokens);
      log(who + "admit, hit " + std::to_string(hit));
      n_hits += hit > 0;
      s.n_computed = s.n_committed = hit;
      const int64_t behind = static_cast<int64_t>(s.tokens.size()) - s.n_computed;
      if (compute(s, static_cast<int32_t>(std::min<int64_t>(behind, 1 + rand(8))))) {
        s.running = true;
      } else {
        m_.release_all(s.kv);
        s.n_computed = 0;
      }
      return;
    }
    log(who + "op " + std::to_string(what));
    if (what == 1) {  // finish
      m_.release_all(s.kv);
      seqs_.erase(seqs_.begin() + idx);
      return;
    }
    if (what == 2) {  // preempt (recompute later)
      preempt(s);
      return;
    }
    if (what == 3 && seqs_.size() < 6) {  // fork: a sibling sharing everything so far
      Seq c;
      c.tokens = s.tokens;
      c.n_computed = s.n_computed;
      c.n_committed = s.n_committed;
      c.running = true;
      m_.fork(s.kv, s.n_computed, c.kv);
      seqs_.push_back(std::move(c));
      return;
    }
    if (what == 4 && s.n_computed > s.n_committed) {  // speculative rollback, then other tokens
      const int64_t n = std::max(s.n_committed, s.n_computed - 1 - rand(kMaxRollback));
      m_.truncate(s.kv, n);
      s.n_computed = n;
      s.tokens.resize(n);
      s.tokens.push_back(7 + rand(3));
      ++n_truncated;
      return;
    }
    // catch up: a chunk of the prompt, or one new token (decode)
    if (s.n_computed == static_cast<int64_t>(s.tokens.size())) {
      if (static_cast<int32_t>(s.tokens.size()) >= kCtx - kBs) {
        m_.release_all(s.kv);
        seqs_.erase(seqs_.begin() + idx);
        return;
      }
      s.tokens.push_back(rand(5));
    }
    const int64_t behind = static_cast<int64_t>(s.tokens.size()) - s.n_computed;
    if (!compute(s, static_cast<int32_t>(std::min<int64_t>(behind, 1 + rand(8))))) preempt(s);
  }

  void check(int op) {
    ASSERT_EQ(m_.check_invariants(), "") << "op " << op;
    for (const Seq& s : seqs_) {
      if (!s.running) {
        for (const BlockTable& t : s.kv.tables) ASSERT_EQ(t.n_blocks(), 0) << "op " << op;
        continue;
      }
      ASSERT_EQ(m_.check_seq(s.kv, s.n_computed), "") << "op " << op;
      for (int32_t g = 0; g < m_.n_groups(); ++g) {
        SCOPED_TRACE("last operations:\n" + trace());
        const KvStorageView& v = m_.views()[g];
        const int32_t w = m_.config().groups[g].window;
        // What a query at n_computed (the next one) can see.
        const int64_t first = w == 0 ? 0 : std::max<int64_t>(0, s.n_computed - w + 1);
        for (int32_t slot = 0; slot < v.n_slots; ++slot) {
          const PagedKvView lv = v.layer_view(slot, s.kv.tables[g].ids());
          for (int64_t p = first; p < s.n_computed; ++p) {
            uint32_t k = 0, vv = 0;
            std::memcpy(&k, lv.k_addr(p, 0), 4);
            std::memcpy(&vv, lv.v_addr(p, 0), 4);
            const uint32_t want = fingerprint(s.tokens, p) + slot;
            ASSERT_EQ(k, want) << "op " << op << " group " << g << " slot " << slot << " pos " << p;
            ASSERT_EQ(vv, ~want) << "op " << op << " group " << g << " pos " << p;
          }
        }
      }
    }
  }

  std::mt19937 rng_;
  std::vector<std::string> log_;
  KvManager m_;
  std::vector<Seq> seqs_;
};

struct Layout {
  const char* name;
  std::vector<KvGroupSpec> groups;
};

TEST(KvManagerProperty, RandomLifecyclesKeepInvariantsAndContent) {
  const std::vector<Layout> layouts = {
      {"full", {{2, 0}}},
      {"full + window 3 (< block)", {{1, 0}, {2, 3}}},
      {"full + window 5 + window 17 (> block)", {{1, 0}, {1, 5}, {2, 17}}},
      {"sliding only, window 6", {{2, 6}}},
      {"two sliding, windows 2 and 9", {{1, 2}, {1, 9}}},
  };
  for (const Layout& l : layouts) {
    for (bool prefix_cache : {true, false}) {
      for (uint32_t seed = 1; seed <= 6; ++seed) {
        SCOPED_TRACE(std::string(l.name) + (prefix_cache ? "" : ", no prefix cache") + ", seed " +
                     std::to_string(seed));
        Driver d(l.groups, seed, prefix_cache);
        d.run(1500);
        if (HasFailure()) return;
        if (prefix_cache) {
          EXPECT_GT(d.n_hits, 0);
        }
        EXPECT_GT(d.n_preempted + d.n_truncated, 0);
        if (l.groups.back().window > 0) {
          EXPECT_GT(d.n_released, 0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace lumen::kv
