#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "base/check.h"

namespace lumen::tok {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  bool literal = false;
  ~Code() {
    if (code) pcre2_code_free(code);
  }
};

Regex::Regex() = default;
Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

Result<Regex> Regex::compile(std::string_view pattern, bool literal) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2 rejects UCP together with LITERAL (it has no classes to apply it to).
  const uint32_t options = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                                   &error_code, &error_offset, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(error_code, buf, sizeof(buf));
    return error("regex '" + std::string(pattern) + "': " + reinterpret_cast<const char*>(buf) +
                 " at offset " + std::to_string(error_offset));
  }
  Regex re;
  re.code_ = std::make_unique<Code>();
  re.code_->code = code;
  re.code_->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  re.code_->literal = literal;
  re.pattern_ = std::string(pattern);
  return re;
}

namespace {

// PCRE2 (10.42) with UCP counts U+180E MONGOLIAN VOWEL SEPARATOR as \s and \h, as Perl
// does; it left Unicode's White_Space property in Unicode 6.3, and llama.cpp's pre-tokenizers
// (its whitespace table), Rust's regex and Oniguruma (tokenizer.json) do not treat it as
// space: "x \u180e." is one GPT-2 piece there, two here. So patterns match a copy of the
// subject in which it is U+200B ZERO WIDTH SPACE: also a format character (Cf) outside
// \s, and also 3 bytes, so the matches' offsets are the subject's. (A pattern that names
// U+180E itself would no longer find it: no tokenizer pattern does.)
constexpr std::string_view kMongolianVowelSeparator = "\xE1\xA0\x8E";
constexpr std::string_view kZeroWidthSpace = "\xE2\x80\x8B";

}  // namespace

void Regex::find_all(std::string_view subject, std::vector<Span>* matches, std::vector<int>* groups) const {
  LUMEN_CHECK(code_ && code_->code);
  std::string replaced;
  if (!code_->literal && subject.find(kMongolianVowelSeparator) != std::string_view::npos) {
    replaced = std::string(subject);
    for (size_t at = replaced.find(kMongolianVowelSeparator); at != std::string::npos;
         at = replaced.find(kMongolianVowelSeparator, at + kZeroWidthSpace.size()))
      replaced.replace(at, kZeroWidthSpace.size(), kZeroWidthSpace);
    subject = replaced;
  }
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  LUMEN_CHECK(md != nullptr);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t start = 0;
  while (start <= subject.size()) {
    // The subject was validated by the caller (sanitize_utf8), so skip PCRE2's check.
    int rc = pcre2_match(code_->code, s, subject.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // Very long runs can exhaust the default 32 KiB JIT stack: retry with the interpreter,
      // which keeps its backtracking frames on the heap.
      rc = pcre2_match(code_->code, s, subject.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    }
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH (or a limit on hostile input: stop matching)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      matches->push_back({b, e});
      if (groups) {
        int group = 0;
        for (int g = 1; g < rc; ++g) {
          if (ov[2 * g] != PCRE2_UNSET) {
            group = g;
            break;
          }
        }
        groups->push_back(group);
      }
      start = e;
    } else {
      // Empty match: step one code point forward.
      start = e + 1;
      while (start < subject.size() && (static_cast<uint8_t>(subject[start]) & 0xC0) == 0x80) ++start;
    }
  }
  pcre2_match_data_free(md);
}

void split_by_matches(size_t subject_size, const std::vector<Span>& matches, SplitBehavior behavior,
                      bool invert, std::vector<Span>* out) {
  // 1. The subject as alternating parts, each flagged "is delimiter".
  struct Part {
    Span span;
    bool delim;
  };
  std::vector<Part> parts;
  parts.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const Span& m : matches) {
    if (m.begin > prev) parts.push_back({{prev, m.begin}, invert});
    parts.push_back({m, !invert});
    prev = m.end;
  }
  if (prev < subject_size) parts.push_back({{prev, subject_size}, invert});

  // 2. Combine by behavior (HF semantics), then drop removed and empty pieces.
  std::vector<Part> kept;
  kept.reserve(parts.size());
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Part& p : parts) if (!p.delim) kept.push_back(p);
      break;
    case SplitBehavior::kIsolated:
      kept = parts;
      break;
    case SplitBehavior::kContiguous: {
      bool prev_delim = false;
      for (const Part& p : parts) {
        if (!kept.empty() && p.delim == prev_delim) {
          kept.back().span.end = p.span.end;
        } else {
          kept.push_back(p);
        }
        prev_delim = p.delim;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_delim = false;
      for (const Part& p : parts) {
        if (p.delim && !prev_delim && !kept.empty()) {
          kept.back().span.end = p.span.end;
        } else {
          kept.push_back(p);
        }
        prev_delim = p.delim;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_delim = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->delim && !prev_delim && !kept.empty()) {
          kept.back().span.begin = it->span.begin;
        } else {
          kept.push_back(*it);
        }
        prev_delim = it->delim;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (const Part& p : kept) {
    if (p.span.end > p.span.begin) out->push_back(p.span);
  }
}

}  // namespace lumen::tok
