#include "cli/line_reader.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#if LUMEN_HAVE_LIBEDIT
#include <histedit.h>
#endif

namespace lumen::cli {
namespace {

// The one piece of process-wide state here: a signal handler can reach nothing else.
volatile sig_atomic_t g_sigint = 0;
void on_sigint(int) { g_sigint = 1; }
struct sigaction g_previous_sigint {};

}  // namespace

InterruptFlag::InterruptFlag() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read blocked at the prompt returns EINTR
  sigaction(SIGINT, &sa, &g_previous_sigint);
  g_sigint = 0;
}

InterruptFlag::~InterruptFlag() { sigaction(SIGINT, &g_previous_sigint, nullptr); }
bool InterruptFlag::raised() const { return g_sigint != 0; }
void InterruptFlag::clear() { g_sigint = 0; }

std::string default_chat_history_path() {
  const char* state = std::getenv("XDG_STATE_HOME");
  if (state && *state) return std::string(state) + "/lumen/chat_history";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.local/state/lumen/chat_history";
  return "";
}

struct LineReader::Impl {
  std::string history_path;
  std::string prompt;  // what prompt_fn shows
#if LUMEN_HAVE_LIBEDIT
  EditLine* el = nullptr;
  History* hist = nullptr;
  static const char* prompt_fn(EditLine* el) {
    void* self = nullptr;
    el_get(el, EL_CLIENTDATA, &self);
    return static_cast<Impl*>(self)->prompt.c_str();
  }
#endif
};

LineReader::LineReader(const std::string& history_path) : impl_(std::make_unique<Impl>()) {
  impl_->history_path = history_path;
#if LUMEN_HAVE_LIBEDIT
  if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) return;
  impl_->el = el_init("lumen", stdin, stdout, stderr);
  if (!impl_->el) return;
  impl_->hist = history_init();
  HistEvent ev;
  history(impl_->hist, &ev, H_SETSIZE, 1000);
  history(impl_->hist, &ev, H_SETUNIQUE, 1);
  if (!history_path.empty()) history(impl_->hist, &ev, H_LOAD, history_path.c_str());
  el_set(impl_->el, EL_CLIENTDATA, impl_.get());
  el_set(impl_->el, EL_PROMPT, &Impl::prompt_fn);
  el_set(impl_->el, EL_EDITOR, "emacs");
  el_set(impl_->el, EL_HIST, history, impl_->hist);
  el_source(impl_->el, nullptr);  // the user's ~/.editrc, if any
#endif
}

LineReader::~LineReader() {
#if LUMEN_HAVE_LIBEDIT
  if (impl_->el) el_end(impl_->el);
  if (impl_->hist) history_end(impl_->hist);
#endif
}

bool LineReader::editing() const {
#if LUMEN_HAVE_LIBEDIT
  return impl_->el != nullptr;
#else
  return false;
#endif
}

LineReader::ReadStatus LineReader::read(const std::string& prompt, std::string* line) {
  line->clear();
#if LUMEN_HAVE_LIBEDIT
  if (impl_->el) {
    impl_->prompt = prompt;
    int n = 0;
    errno = 0;
    const char* s = el_gets(impl_->el, &n);
    if (!s || n < 0) {
      if (errno == EINTR || g_sigint) {
        el_reset(impl_->el);
        std::fputs("\n", stdout);
        return ReadStatus::kInterrupted;
      }
      return ReadStatus::kEof;
    }
    line->assign(s, static_cast<size_t>(n));
    if (!line->empty() && line->back() == '\n') line->pop_back();
    return ReadStatus::kLine;
  }
#endif
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  char* buf = nullptr;
  size_t cap = 0;
  errno = 0;
  const ssize_t n = ::getline(&buf, &cap, stdin);
  if (n < 0) {
    std::free(buf);
    const bool interrupted = errno == EINTR || g_sigint;
    clearerr(stdin);
    if (interrupted) std::fputs("\n", stdout);
    return interrupted ? ReadStatus::kInterrupted : ReadStatus::kEof;
  }
  line->assign(buf, static_cast<size_t>(n));
  std::free(buf);
  if (!line->empty() && line->back() == '\n') line->pop_back();
  return ReadStatus::kLine;
}

void LineReader::add_history(const std::string& line) {
#if LUMEN_HAVE_LIBEDIT
  if (!impl_->hist || line.empty()) return;
  HistEvent ev;
  history(impl_->hist, &ev, H_ENTER, line.c_str());
  if (impl_->history_path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(impl_->history_path).parent_path(), ec);
  history(impl_->hist, &ev, H_SAVE, impl_->history_path.c_str());
#else
  (void)line;
#endif
}

}  // namespace lumen::cli
