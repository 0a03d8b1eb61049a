// PCRE2 adapter: compiled patterns (UTF + UCP, JIT when available) and the split operations
// pre-tokenizers are made of. Matching is thread-safe (per-call match data).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace lumen::tok {

struct Span {  // [begin, end) byte offsets
  size_t begin;
  size_t end;
};

class Regex {
 public:
  Regex();
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Compiles `pattern` (PCRE2 syntax, which accepts the Oniguruma / fancy-regex subsets used
  // by tokenizer.json files). literal = true quotes it.
  static Result<Regex> compile(std::string_view pattern, bool literal = false);

  // Appends the non-overlapping matches in `subject` (valid UTF-8) to *matches, left to
  // right. Empty matches are skipped. Lookarounds see only `subject`. With `groups`, also
  // appends per match the number of the first capture group that took part (0 if none).
  void find_all(std::string_view subject, std::vector<Span>* matches, std::vector<int>* groups = nullptr) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::unique_ptr<Code> code_;
  std::string pattern_;
};

// How a split keeps the delimiters (Hugging Face SplitDelimiterBehavior).
enum class SplitBehavior : uint8_t { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits [0, subject.size()) into pieces by `matches` (sorted, non-overlapping), as HF's
// NormalizedString::split: `invert` swaps the roles of matches and gaps. Appends non-empty
// pieces to *out.
void split_by_matches(size_t subject_size, const std::vector<Span>& matches, SplitBehavior behavior,
                      bool invert, std::vector<Span>* out);

}  // namespace lumen::tok
