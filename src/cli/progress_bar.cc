#include "cli/progress_bar.h"

#include <unistd.h>

#include <algorithm>

namespace lumen::cli {
namespace {

constexpr int kBarWidth = 30;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);

}  // namespace

ProgressBar::ProgressBar(std::FILE* out) : ProgressBar(out, ::isatty(::fileno(out)) != 0) {}

ProgressBar::ProgressBar(std::FILE* out, bool interactive) : out_(out), interactive_(interactive) {}

double ProgressBar::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

void ProgressBar::start(std::string_view what, uint64_t total, std::string_view unit) {
  what_ = what;
  unit_ = unit;
  total_ = total;
  done_ = 0;
  last_decile_ = 0;
  active_ = true;
  t0_ = std::chrono::steady_clock::now();
  last_draw_ = t0_ - kRedrawInterval;
  if (!interactive_) std::fprintf(out_, "%s: 0%% of %llu %s\n", what_.c_str(), static_cast<unsigned long long>(total), unit_.c_str());
}

void ProgressBar::update(uint64_t done, std::string_view item) {
  if (!active_) return;
  done_ = std::min(done, total_);
  const int percent = total_ ? static_cast<int>(100 * done_ / total_) : 100;
  if (!interactive_) {
    const int decile = percent / 10;
    if (decile > last_decile_ && decile < 10) {
      last_decile_ = decile;
      std::fprintf(out_, "%s: %d%% (%.*s, %.1f s)\n", what_.c_str(), 10 * decile, static_cast<int>(item.size()),
                   item.data(), seconds());
      std::fflush(out_);
    }
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  draw(done_, item);
}

void ProgressBar::draw(uint64_t done, std::string_view item) {
  const int percent = total_ ? static_cast<int>(100 * done / total_) : 100;
  const int filled = total_ ? static_cast<int>(kBarWidth * done / total_) : kBarWidth;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kBarWidth, '.');
  // \r returns to the line start, \033[K clears what a longer previous line left.
  std::fprintf(out_, "\r%s [%s] %3d%%  %-36.*s %6.1f s\033[K", what_.c_str(), bar.c_str(), percent,
               static_cast<int>(std::min<size_t>(item.size(), 36)), item.data(), seconds());
  std::fflush(out_);
}

void ProgressBar::finish() {
  if (!active_) return;
  active_ = false;
  if (interactive_) {
    draw(done_, "");
    std::fprintf(out_, "\n");
  } else {
    std::fprintf(out_, "%s: %s after %.1f s\n", what_.c_str(), done_ >= total_ ? "done" : "stopped", seconds());
  }
  std::fflush(out_);
}

LoadProgress::LoadProgress(std::FILE* out) : LoadProgress(out, ::isatty(::fileno(out)) != 0) {}

LoadProgress::LoadProgress(std::FILE* out, bool interactive) : out_(out), interactive_(interactive), bar_(out, interactive) {}

void LoadProgress::start(std::string_view what, uint64_t total, std::string_view unit) {
  if (!what.empty()) {
    std::fprintf(out_, "lumen: first load of this model file: writing %.1f MiB of weights in the kernels' interleaved "
                       "layout to %.*s (once; later loads map it)\n",
                 static_cast<double>(total) / 1048576.0, static_cast<int>(what.size()), what.data());
    std::fflush(out_);
  }
  if (interactive_) bar_.start("interleave", total, unit);
}

void LoadProgress::update(uint64_t done, std::string_view item) {
  if (interactive_) bar_.update(done, item);
}

void LoadProgress::finish() {
  if (interactive_) bar_.finish();
}

}  // namespace lumen::cli
