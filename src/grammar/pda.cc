#include "grammar/pda.h"

#include <algorithm>
#include <map>

namespace lumen::grammar {
namespace {

// UTF-8 length boundaries: the largest scalar value of each encoded length.
constexpr uint32_t kMaxOfLen[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

int encode(uint32_t c, uint8_t* out) {
  if (c < 0x80) {
    out[0] = static_cast<uint8_t>(c);
    return 1;
  }
  if (c < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (c >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (c >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (c >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  return 4;
}

// [lo, hi] all of one encoded length. Splits until every byte position of the encodings of
// lo and hi spans a full range: then the sequence of per-position byte ranges encodes
// exactly [lo, hi]. A split is needed where lo and hi differ above the low 6*i bits but lo
// does not start (or hi does not end) a block of 2^(6*i) values.
void split_same_length(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>* out) {
  uint8_t a[4], b[4];
  const int n = encode(lo, a);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_same_length(lo, lo | m, out);
        split_same_length((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split_same_length(lo, (hi & ~m) - 1, out);
        split_same_length(hi & ~m, hi, out);
        return;
      }
    }
  }
  encode(hi, b);
  ByteRangeSeq seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
  out->push_back(std::move(seq));
}

struct RuleAlts {
  std::string name;
  std::vector<std::vector<Elem>> alts;
};

}  // namespace

std::vector<ByteRangeSeq> utf8_sequences(uint32_t lo, uint32_t hi) {
  std::vector<ByteRangeSeq> out;
  std::vector<std::pair<uint32_t, uint32_t>> parts;
  if (hi > 0x10FFFF) hi = 0x10FFFF;
  if (lo > hi) return out;
  // Drop the surrogates.
  if (lo < 0xD800 && hi > 0xDFFF) {
    parts = {{lo, 0xD7FF}, {0xE000, hi}};
  } else if (lo >= 0xD800 && hi <= 0xDFFF) {
    return out;
  } else if (lo >= 0xD800 && lo <= 0xDFFF) {
    parts = {{0xE000, hi}};
  } else if (hi >= 0xD800 && hi <= 0xDFFF) {
    parts = {{lo, 0xD7FF}};
  } else {
    parts = {{lo, hi}};
  }
  for (auto [a, b] : parts) {
    for (int len = 1; len <= 4; ++len) {
      const uint32_t min_len = len == 1 ? 0 : kMaxOfLen[len - 1] + 1;
      const uint32_t x = std::max(a, min_len), y = std::min(b, kMaxOfLen[len]);
      if (x <= y) split_same_length(x, y, &out);
    }
  }
  return out;
}

class PdaBuilder {
 public:
  explicit PdaBuilder(const Grammar& g) : g_(g) {}

  Result<Pda> build(const PdaLimits& limits) {
    for (const Rule& r : g_.rules) rules_.push_back(RuleAlts{r.name, {}});
    for (size_t r = 0; r < g_.rules.size(); ++r) {
      for (const Alternative& alt : g_.rules[r].alts) {
        std::vector<Elem> elems;
        for (const Item& it : alt) emit_item(static_cast<int32_t>(r), it, &elems);
        rules_[r].alts.push_back(std::move(elems));
      }
    }
    Pda p;
    p.root_ = g_.root;
    p.sets_ = std::move(sets_);
    p.rule_alt_begin_.push_back(0);
    for (size_t r = 0; r < rules_.size(); ++r) {
      p.rule_names_.push_back(rules_[r].name);
      for (std::vector<Elem>& alt : rules_[r].alts) {
        p.alt_starts_.push_back(static_cast<int32_t>(p.elems_.size()));
        for (Elem& e : alt) {
          e.rule = static_cast<int32_t>(r);
          p.elems_.push_back(e);
        }
        Elem end;
        end.kind = ElemKind::kEnd;
        end.arg = static_cast<int32_t>(r);
        end.rule = static_cast<int32_t>(r);
        p.elems_.push_back(end);
        if (static_cast<int32_t>(p.elems_.size()) > limits.max_elements)
          return error("grammar: more than " + std::to_string(limits.max_elements) + " elements once compiled to bytes");
      }
      p.rule_alt_begin_.push_back(static_cast<int32_t>(p.alt_starts_.size()));
    }
    LUMEN_TRY(p.analyze(limits));
    return p;
  }

 private:
  int32_t set_index(const ByteSet& s) {
    auto it = set_ids_.find(s.bits);
    if (it != set_ids_.end()) return it->second;
    const auto id = static_cast<int32_t>(sets_.size());
    sets_.push_back(s);
    set_ids_.emplace(s.bits, id);
    return id;
  }

  Elem bytes_elem(const ByteSet& s) {
    Elem e;
    e.kind = ElemKind::kBytes;
    e.arg = set_index(s);
    return e;
  }

  void emit_item(int32_t rule, const Item& it, std::vector<Elem>* out) {
    if (it.kind == Item::Kind::kRule || it.kind == Item::Kind::kRepeat) {
      Elem e;
      e.kind = it.kind == Item::Kind::kRule ? ElemKind::kRule : ElemKind::kRepeat;
      e.arg = it.rule;
      e.min = it.min;
      e.max = it.max;
      out->push_back(e);
      return;
    }
    // A single code point: its bytes in a row.
    if (it.chars.size() == 1 && it.chars[0].lo == it.chars[0].hi) {
      uint8_t buf[4];
      const int n = encode(it.chars[0].lo, buf);
      for (int i = 0; i < n; ++i) {
        ByteSet s;
        s.add(buf[i]);
        out->push_back(bytes_elem(s));
      }
      return;
    }
    if (it.chars.back().hi < 0x80) {  // ASCII only: one byte
      ByteSet s;
      for (const CodeRange& r : it.chars) s.add_range(static_cast<uint8_t>(r.lo), static_cast<uint8_t>(r.hi));
      out->push_back(bytes_elem(s));
      return;
    }
    // A rule whose alternatives are byte-range sequences; sequences that differ only in
    // their first byte share one alternative.
    std::map<std::vector<std::pair<uint8_t, uint8_t>>, ByteSet> by_tail;  // (length, tail) -> leads
    for (const CodeRange& r : it.chars) {
      for (const ByteRangeSeq& seq : utf8_sequences(r.lo, r.hi)) {
        std::vector<std::pair<uint8_t, uint8_t>> key(seq.begin() + 1, seq.end());
        key.insert(key.begin(), {static_cast<uint8_t>(seq.size()), 0});
        by_tail[key].add_range(seq[0].first, seq[0].second);
      }
    }
    const auto sub = static_cast<int32_t>(rules_.size());
    rules_.push_back(RuleAlts{rules_[static_cast<size_t>(rule)].name + "_c" + std::to_string(sub), {}});
    for (const auto& [key, leads] : by_tail) {
      std::vector<Elem> alt;
      alt.push_back(bytes_elem(leads));
      for (size_t i = 1; i < key.size(); ++i) {
        ByteSet s;
        s.add_range(key[i].first, key[i].second);
        alt.push_back(bytes_elem(s));
      }
      rules_[static_cast<size_t>(sub)].alts.push_back(std::move(alt));
    }
    Elem e;
    e.kind = ElemKind::kRule;
    e.arg = sub;
    out->push_back(e);
  }

  const Grammar& g_;
  std::vector<RuleAlts> rules_;
  std::vector<ByteSet> sets_;
  std::map<std::array<uint64_t, 4>, int32_t> set_ids_;
};

// Gives each use of a small, narrow, non-recursive rule its own copy, so that the rule's
// completion continues at one known place (Pda::continuation) and the precomputed masks need
// not check the tokens that run past its end against the real stack. `ws ::= " "?` used in
// twenty places is the typical case; wide rules (string contents) stay shared, since every
// copy of a wide rule costs a walk over most of the vocabulary when the grammar is compiled.
Grammar inline_shared_rules(const Grammar& in, const PdaLimits& limits) {
  Grammar g = in;
  const auto n = static_cast<int32_t>(g.rules.size());
  auto refs_of = [&](const Rule& r, auto&& fn) {
    for (const Alternative& alt : r.alts)
      for (const Item& it : alt)
        if (it.kind != Item::Kind::kChars) fn(it.rule);
  };
  // Depth-first order from the root; rules on a cycle are recursive.
  std::vector<int32_t> order;          // callers before callees (reverse postorder)
  std::vector<uint8_t> state(static_cast<size_t>(n), 0);  // 0 new, 1 open, 2 done
  std::vector<bool> recursive(static_cast<size_t>(n), false);
  {
    std::vector<std::pair<int32_t, std::vector<int32_t>>> stack;
    auto open = [&](int32_t r) {
      std::vector<int32_t> out;
      refs_of(g.rules[static_cast<size_t>(r)], [&](int32_t s) { out.push_back(s); });
      state[static_cast<size_t>(r)] = 1;
      stack.push_back({r, std::move(out)});
    };
    open(g.root);
    while (!stack.empty()) {
      auto& [r, out] = stack.back();
      if (out.empty()) {
        state[static_cast<size_t>(r)] = 2;
        order.push_back(r);
        stack.pop_back();
        continue;
      }
      const int32_t s = out.back();
      out.pop_back();
      if (state[static_cast<size_t>(s)] == 1) {  // a cycle: everything on the path from s to r
        for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
          recursive[static_cast<size_t>(it->first)] = true;
          if (it->first == s) break;
        }
      } else if (state[static_cast<size_t>(s)] == 0) {
        open(s);
      }
    }
    std::reverse(order.begin(), order.end());
  }
  // Size (items, a wide class counting as many) and width of each rule with what it uses.
  constexpr int64_t kMaxInlineItems = 48;
  constexpr uint32_t kMaxNarrowChars = 64;
  std::vector<int64_t> size(static_cast<size_t>(n), 0);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int32_t r = *it;
    int64_t total = 0;
    for (const Alternative& alt : g.rules[static_cast<size_t>(r)].alts)
      for (const Item& item : alt) {
        if (item.kind == Item::Kind::kChars) {
          uint64_t width = 0;
          for (const CodeRange& cr : item.chars) width += cr.hi - cr.lo + 1;
          total += width > kMaxNarrowChars ? kMaxInlineItems + 1 : 1;
        } else {
          total += 1 + (recursive[static_cast<size_t>(item.rule)] ? kMaxInlineItems + 1 : size[static_cast<size_t>(item.rule)]);
        }
      }
    size[static_cast<size_t>(r)] = std::min<int64_t>(total, kMaxInlineItems + 1);
  }
  // Every use of every rule: (rule, alternative, item).
  struct Site {
    int32_t rule, alt, item;
  };
  std::vector<std::vector<Site>> sites(static_cast<size_t>(n));
  auto add_sites = [&](int32_t r) {
    const Rule& rule = g.rules[static_cast<size_t>(r)];
    for (size_t a = 0; a < rule.alts.size(); ++a)
      for (size_t i = 0; i < rule.alts[a].size(); ++i)
        if (rule.alts[a][i].kind != Item::Kind::kChars)
          sites[static_cast<size_t>(rule.alts[a][i].rule)].push_back({r, static_cast<int32_t>(a), static_cast<int32_t>(i)});
  };
  for (int32_t r : order) add_sites(r);
  int64_t budget = limits.max_inline_items;
  for (int32_t r : order) {  // callers first: their copies exist before r is looked at
    const size_t n_uses = sites[static_cast<size_t>(r)].size();  // (sites grows below)
    if (r == g.root || recursive[static_cast<size_t>(r)] || size[static_cast<size_t>(r)] > kMaxInlineItems || n_uses < 2)
      continue;
    for (size_t k = 1; k < n_uses && budget >= size[static_cast<size_t>(r)]; ++k) {
      budget -= size[static_cast<size_t>(r)];
      const auto copy = static_cast<int32_t>(g.rules.size());
      Rule clone = g.rules[static_cast<size_t>(r)];
      clone.name += "_i" + std::to_string(copy);
      g.rules.push_back(std::move(clone));
      sites.emplace_back();
      const Site site = sites[static_cast<size_t>(r)][k];
      g.rules[static_cast<size_t>(site.rule)].alts[static_cast<size_t>(site.alt)][static_cast<size_t>(site.item)].rule = copy;
      add_sites(copy);
    }
  }
  return g;
}

Result<Pda> Pda::compile(const Grammar& grammar, const PdaLimits& limits) {
  if (grammar.root < 0 || grammar.root >= static_cast<int32_t>(grammar.rules.size()))
    return error("grammar: no root rule");
  const Grammar inlined = inline_shared_rules(grammar, limits);
  PdaBuilder b(inlined);
  return b.build(limits);
}

namespace {

Continuation join(const Continuation& a, const Continuation& b) {
  using K = Continuation::Kind;
  if (a.kind == K::kNone) return b;
  if (b.kind == K::kNone || a == b) return a;
  return Continuation{K::kMany, -1};
}

}  // namespace

Status Pda::analyze(const PdaLimits& limits) {
  const auto n_rules = static_cast<size_t>(rule_names_.size());
  auto body = [&](const Elem& e) { return static_cast<size_t>(e.arg); };

  // Nullable rules (fixed point).
  nullable_.assign(n_rules, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n_rules; ++r) {
      if (nullable_[r]) continue;
      for (int32_t a = alt_begin(static_cast<int32_t>(r)); a < alt_end(static_cast<int32_t>(r)) && !nullable_[r]; ++a) {
        bool all = true;
        for (int32_t p = alt_start(a); elems_[p].kind != ElemKind::kEnd && all; ++p) {
          const Elem& e = elems_[p];
          if (e.kind == ElemKind::kBytes) all = false;
          else if (e.kind == ElemKind::kRule) all = nullable_[body(e)];
          else all = e.max == 0 || e.min == 0 || nullable_[body(e)];
        }
        if (all) nullable_[r] = changed = true;
      }
    }
  }
  // x{m,n} of a nullable x is x{0,n}; bounded ones may not be long (each empty iteration
  // would be a step of the matcher).
  for (Elem& e : elems_) {
    if (e.kind != ElemKind::kRepeat || !nullable_[body(e)]) continue;
    e.min = 0;
    if (e.max > limits.max_nullable_repeat)
      return error("grammar: rule '" + rule_names_[static_cast<size_t>(e.rule)] + "' repeats '" +
                   rule_names_[body(e)] + "', which can match the empty string, up to " + std::to_string(e.max) +
                   " times (at most " + std::to_string(limits.max_nullable_repeat) + ", or unbounded)");
  }

  // Left recursion: rule r reaches itself through items that can all match "" before it.
  {
    std::vector<std::vector<int32_t>> left(n_rules);
    for (size_t r = 0; r < n_rules; ++r) {
      for (int32_t a = alt_begin(static_cast<int32_t>(r)); a < alt_end(static_cast<int32_t>(r)); ++a) {
        for (int32_t p = alt_start(a); elems_[p].kind != ElemKind::kEnd; ++p) {
          const Elem& e = elems_[p];
          if (e.kind == ElemKind::kBytes) break;
          if (e.kind == ElemKind::kRepeat && e.max == 0) continue;
          left[r].push_back(e.arg);
          const bool passes = e.kind == ElemKind::kRule ? nullable_[body(e)] : e.min == 0 || nullable_[body(e)];
          if (!passes) break;
        }
      }
    }
    std::vector<uint8_t> color(n_rules, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<int32_t, size_t>> stack;
    for (size_t start = 0; start < n_rules; ++start) {
      if (color[start]) continue;
      stack.push_back({static_cast<int32_t>(start), 0});
      color[start] = 1;
      while (!stack.empty()) {
        auto& [r, next] = stack.back();
        const auto& out = left[static_cast<size_t>(r)];
        if (next == out.size()) {
          color[static_cast<size_t>(r)] = 2;
          stack.pop_back();
          continue;
        }
        const int32_t s = out[next++];
        if (color[static_cast<size_t>(s)] == 1)
          return error("grammar: rule '" + rule_names_[static_cast<size_t>(s)] +
                       "' is left-recursive (it can reach itself without matching a character)");
        if (color[static_cast<size_t>(s)] == 0) {
          color[static_cast<size_t>(s)] = 1;
          stack.push_back({s, 0});
        }
      }
    }
  }

  // FIRST per rule (fixed point), then FOLLOW.
  first_.assign(n_rules, ByteSet{});
  auto first_from = [&](int32_t p, ByteSet* s) -> bool {  // returns nullable
    for (;; ++p) {
      const Elem& e = elems_[p];
      switch (e.kind) {
        case ElemKind::kEnd: return true;
        case ElemKind::kBytes: s->merge(sets_[static_cast<size_t>(e.arg)]); return false;
        case ElemKind::kRule:
          s->merge(first_[body(e)]);
          if (!nullable_[body(e)]) return false;
          break;
        case ElemKind::kRepeat:
          if (e.max != 0) {
            s->merge(first_[body(e)]);
            if (e.min > 0 && !nullable_[body(e)]) return false;
          }
          break;
      }
    }
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n_rules; ++r) {
      ByteSet s = first_[r];
      for (int32_t a = alt_begin(static_cast<int32_t>(r)); a < alt_end(static_cast<int32_t>(r)); ++a) first_from(alt_start(a), &s);
      changed |= first_[r].merge(s);
    }
  }
  follow_.assign(n_rules, ByteSet{});
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t p = 0; p < n_elems(); ++p) {
      const Elem& e = elems_[p];
      if (e.kind != ElemKind::kRule && !(e.kind == ElemKind::kRepeat && e.max != 0)) continue;
      ByteSet s;
      const bool rest_nullable = first_from(p + 1, &s);
      if (e.kind == ElemKind::kRepeat && (e.max < 0 || e.max > 1)) s.merge(first_[body(e)]);
      if (rest_nullable) s.merge(follow_[static_cast<size_t>(e.rule)]);
      changed |= follow_[body(e)].merge(s);
    }
  }

  // Reachable rules, and where each one's completion continues.
  std::vector<bool> reachable(n_rules, false);
  std::vector<int32_t> todo = {root_};
  reachable[static_cast<size_t>(root_)] = true;
  while (!todo.empty()) {
    const int32_t r = todo.back();
    todo.pop_back();
    for (int32_t a = alt_begin(r); a < alt_end(r); ++a) {
      for (int32_t p = alt_start(a); elems_[p].kind != ElemKind::kEnd; ++p) {
        const Elem& e = elems_[p];
        if (e.kind == ElemKind::kBytes) {
          byte_positions_.push_back(p);
        } else if (!reachable[body(e)] && !(e.kind == ElemKind::kRepeat && e.max == 0)) {
          reachable[body(e)] = true;
          todo.push_back(e.arg);
        }
      }
    }
  }
  std::sort(byte_positions_.begin(), byte_positions_.end());
  cont_.assign(n_rules, Continuation{});
  cont_[static_cast<size_t>(root_)] = Continuation{Continuation::Kind::kBottom, -1};
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t p = 0; p < n_elems(); ++p) {
      const Elem& e = elems_[p];
      if (!reachable[static_cast<size_t>(e.rule)]) continue;
      Continuation c;
      if (e.kind == ElemKind::kRule) {
        c = elems_[p + 1].kind == ElemKind::kEnd ? cont_[static_cast<size_t>(e.rule)]
                                                 : Continuation{Continuation::Kind::kReturn, p + 1};
      } else if (e.kind == ElemKind::kRepeat && e.max != 0) {
        c = Continuation{Continuation::Kind::kFrame, p};
      } else {
        continue;
      }
      const Continuation j = join(cont_[body(e)], c);
      if (!(j == cont_[body(e)])) {
        cont_[body(e)] = j;
        changed = true;
      }
    }
  }
  return Status();
}

}  // namespace lumen::grammar
