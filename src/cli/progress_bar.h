// The terminal renderer of convert::Progress: on a terminal a bar redrawn in place on stderr
//
//   quantize [############..................]  41%  blk.11.ffn_down.weight   12.4 s
//
// (at most ~10 redraws a second), and otherwise (a pipe, a log file) a plain line at every
// 10% so logs stay readable:
//
//   quantize: 40% (blk.11.ffn_down.weight, 12.1 s)
//
// Both end with a line that says how long the job took.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include "convert/progress.h"

namespace lumen::cli {

class ProgressBar : public convert::Progress {
 public:
  // Draws on `out`; `interactive` picks the redrawn bar (default: whether out is a terminal).
  explicit ProgressBar(std::FILE* out = stderr);
  ProgressBar(std::FILE* out, bool interactive);

  void start(std::string_view what, uint64_t total, std::string_view unit) override;
  void update(uint64_t done, std::string_view item) override;
  void finish() override;

 private:
  double seconds() const;
  void draw(uint64_t done, std::string_view item);

  std::FILE* out_;
  bool interactive_;
  std::string what_;
  std::string unit_;
  uint64_t total_ = 0;
  uint64_t done_ = 0;
  int last_decile_ = -1;
  bool active_ = false;
  std::chrono::steady_clock::time_point t0_;
  std::chrono::steady_clock::time_point last_draw_;
};

// The progress of a load that packs the interleaved weights (Engine's load_progress): when
// it writes a cache file, one line saying what, where and how big, then on a terminal a
// bar ("interleave [####....]"); elsewhere just the line (a load is over in seconds).
class LoadProgress : public convert::Progress {
 public:
  explicit LoadProgress(std::FILE* out = stderr);
  LoadProgress(std::FILE* out, bool interactive);

  void start(std::string_view what, uint64_t total, std::string_view unit) override;
  void update(uint64_t done, std::string_view item) override;
  void finish() override;

 private:
  std::FILE* out_;
  bool interactive_;
  ProgressBar bar_;
};

}  // namespace lumen::cli
