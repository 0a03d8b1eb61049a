#include "spec/ngram.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"

namespace lumen::spec {

int32_t ngram_lookup(std::span<const int32_t> tokens, int32_t n_min, int32_t n_max, std::span<int32_t> out) {
  const auto len = static_cast<int64_t>(tokens.size());
  if (out.empty()) return 0;
  for (int32_t n = std::min<int64_t>(n_max, len - 1); n >= n_min; --n) {
    const int32_t* key = tokens.data() + len - n;
    // Latest start s < len - n whose n tokens equal the key; what follows it is [s + n, ...).
    for (int64_t s = len - n - 1; s >= 0; --s) {
      if (std::memcmp(tokens.data() + s, key, sizeof(int32_t) * static_cast<size_t>(n)) != 0) continue;
      const int64_t avail = len - (s + n);  // >= 1 since s + n < len
      const auto m = static_cast<int32_t>(std::min<int64_t>(avail, static_cast<int64_t>(out.size())));
      std::copy_n(tokens.data() + s + n, m, out.data());
      return m;
    }
  }
  return 0;
}

NgramProposer::NgramProposer(int32_t n_min, int32_t n_max) : n_min_(n_min), n_max_(n_max) {
  LUMEN_CHECK(n_min >= 1 && n_min <= n_max);
}

void NgramProposer::propose(std::span<ProposeSeq> seqs) {
  for (ProposeSeq& s : seqs) {
    s.n_out = ngram_lookup(s.tokens, n_min_, n_max_, s.out_tokens.first(static_cast<size_t>(s.max_n)));
    s.probs_valid = false;
  }
}

}  // namespace lumen::spec
