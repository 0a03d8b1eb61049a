// Driving an interactive `lumen` in a terminal from a test: a tmux session on a private
// server socket, keys sent with send-keys, the screen (with scrollback) read with
// capture-pane, and waits that poll the screen up to a deadline rather than sleeping fixed
// times. The command runs under `sh -c 'trap : INT; ...; echo "[exit $?]"; sleep'` so that its exit
// status stays on the screen.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "run_lumen.h"

namespace lumen::testing {

inline bool have_tmux() { return std::system("command -v tmux >/dev/null 2>&1") == 0; }

class TmuxSession {
 public:
  // Starts `command` (a shell command line) in a width x height terminal.
  TmuxSession(const std::string& command, int width = 120, int height = 40) {
    static int counter = 0;
    socket_ = "lumen-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    // The shell traps SIGINT (Ctrl-C reaches the whole foreground group) to outlive the command.
    const std::string wrapped = "trap : INT; " + command + "; echo \"[exit $?]\"; sleep 600";
    ok_ = run("new-session -d -s t -x " + std::to_string(width) + " -y " + std::to_string(height) + " " +
              sh_quote("sh -c " + sh_quote(wrapped))) == 0;
  }
  ~TmuxSession() { run("kill-server"); }
  bool ok() const { return ok_; }

  // Keys as tmux names them ("Left", "Enter", "C-c") or literal text (literal = true).
  void keys(const std::string& k, bool literal = false) { run("send-keys -t t " + std::string(literal ? "-l " : "") + sh_quote(k)); }
  void type(const std::string& text) { keys(text, true); }
  void line(const std::string& text) {
    type(text);
    keys("Enter");
  }

  // The screen and its scrollback, trailing blank lines trimmed.
  std::string screen() const {
    std::string out;
    FILE* p = popen(("tmux -L " + socket_ + " capture-pane -p -J -S -5000 -t t 2>/dev/null").c_str(), "r");
    if (!p) return out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
  }
  // Polls the screen until pred holds (true) or the deadline passes (false).
  bool wait_for(const std::function<bool(const std::string&)>& pred, double seconds = 60) const {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      if (pred(screen())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    return pred(screen());
  }
  // Until `text` occurs at least `count` times.
  bool wait_for_text(const std::string& text, int count = 1, double seconds = 60) const {
    return wait_for([&](const std::string& s) { return occurrences(s, text) >= count; }, seconds);
  }
  static int occurrences(const std::string& s, const std::string& text) {
    int n = 0;
    for (size_t pos = s.find(text); pos != std::string::npos; pos = s.find(text, pos + text.size())) ++n;
    return n;
  }

 private:
  int run(const std::string& args) const { return std::system(("tmux -L " + socket_ + " " + args + " >/dev/null 2>&1").c_str()); }
  std::string socket_;
  bool ok_ = false;
};

}  // namespace lumen::testing
