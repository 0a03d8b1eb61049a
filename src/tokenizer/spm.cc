// SentencePiece-style BPE over token scores, as llama.cpp's llm_tokenizer_spm.
//
//   "▁Hello"  ->  symbols  ▁ H e l l o           (one per UTF-8 character)
//             ->  queue every adjacent pair whose concatenation is a token, keyed by its score
//             ->  pop the best (highest score, then leftmost), merge, queue the two new pairs
//
// A popped pair is stale when either side has changed since it was queued; then the sizes no
// longer add up (symbols only grow, a merged-away right symbol has size 0) and it is skipped.
// Each merge queues at most two pairs, so the whole fragment costs O(n log n).
#include <algorithm>
#include <queue>

#include "tokenizer/encoders.h"
#include "tokenizer/unicode.h"

namespace lumen::tok {
namespace {

struct SpmSymbol {
  uint32_t begin;  // byte offset into the fragment
  uint32_t n;      // byte length; 0 once merged into its left neighbour
  int32_t prev;    // index of the previous live symbol, -1 at the start
  int32_t next;    // index of the next live symbol, -1 at the end
};

struct SpmBigram {
  float score;
  int32_t left;
  int32_t right;
  uint32_t n;  // byte length of the merged text
};

struct SpmBigramOrder {  // std::priority_queue pops the "largest": best score, then leftmost
  bool operator()(const SpmBigram& a, const SpmBigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

namespace {

void spm_encode_segment(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out) {
  if (text.empty()) return;
  std::vector<SpmSymbol> symbols;
  symbols.reserve(text.size());
  for (size_t offs = 0; offs < text.size();) {
    const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(text[offs])), text.size() - offs);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(offs), static_cast<uint32_t>(n), index - 1,
                       offs + n == text.size() ? -1 : index + 1});
    offs += n;
  }

  std::priority_queue<SpmBigram, std::vector<SpmBigram>, SpmBigramOrder> queue;
  auto try_add_bigram = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const SpmSymbol& l = symbols[left];
    const uint32_t n = l.n + symbols[right].n;
    const int32_t id = vocab.find(text.substr(l.begin, n));
    if (id < 0) return;
    queue.push({vocab.tokens[id].score, left, right, n});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add_bigram(i - 1, i);

  while (!queue.empty()) {
    const SpmBigram bigram = queue.top();
    queue.pop();
    SpmSymbol& left = symbols[bigram.left];
    SpmSymbol& right = symbols[bigram.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.n) continue;  // stale
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add_bigram(left.prev, bigram.left);
    try_add_bigram(bigram.left, left.next);
  }

  for (int32_t i = 0; i != -1; i = symbols[i].next) {
    const SpmSymbol& sym = symbols[i];
    const std::string_view piece = text.substr(sym.begin, sym.n);
    if (const int32_t id = vocab.find(piece); id >= 0) {
      out->push_back(id);
      continue;
    }
    // Every merged symbol is a token, so this is one character that is not: spell it in
    // byte tokens. Without byte tokens llama.cpp throws; we emit one <unk> instead.
    bool all_bytes = true;
    for (char c : piece) all_bytes = all_bytes && vocab.byte_ids[static_cast<uint8_t>(c)] >= 0;
    if (all_bytes) {
      for (char c : piece) out->push_back(vocab.byte_ids[static_cast<uint8_t>(c)]);
    } else if (vocab.unk_id >= 0) {
      out->push_back(vocab.unk_id);
    }
  }
}

}  // namespace

void spm_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>* out) {
  if (vocab.split_before_metaspace) {
    for_each_metaspace_word(text, [&](std::string_view word) { spm_encode_segment(vocab, word, out); });
  } else {
    spm_encode_segment(vocab, text, out);
  }
}

}  // namespace lumen::tok
