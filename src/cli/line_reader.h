// Reading the user's lines for `lumen chat`: on a terminal through libedit (Debian's
// libedit-dev: emacs-style editing, arrow keys, history kept in a file), else plain reads
// from stdin (a pipe, a file), so the chat runs the same way without a terminal.
//
// Ctrl-C: an InterruptFlag turns SIGINT into a flag instead of ending the process. A read
// that Ctrl-C interrupts returns kInterrupted (the half-typed line is dropped); code that
// runs for long (a reply being generated) polls the flag between steps.
#pragma once

#include <memory>
#include <string>

namespace lumen::cli {

// Installs a SIGINT handler that sets a flag (no SA_RESTART, so a blocked read returns);
// the previous handler comes back on destruction. One at a time per process.
class InterruptFlag {
 public:
  InterruptFlag();
  ~InterruptFlag();
  InterruptFlag(const InterruptFlag&) = delete;
  InterruptFlag& operator=(const InterruptFlag&) = delete;

  bool raised() const;  // Ctrl-C since the last clear()
  void clear();
};

class LineReader {
 public:
  enum class ReadStatus { kLine, kInterrupted, kEof };

  // history_path: where the history is loaded from and saved to ("" = not kept); used only
  // on a terminal. Uses libedit when stdin and stdout are terminals and lumen was built
  // with it.
  explicit LineReader(const std::string& history_path);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // One line without its newline.
  ReadStatus read(const std::string& prompt, std::string* line);
  // Remembers a line (a whole message) for the arrow keys, and saves the history file.
  void add_history(const std::string& line);
  bool editing() const;  // libedit is in use

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Where `lumen chat` keeps its history by default: $XDG_STATE_HOME/lumen/chat_history, else
// ~/.local/state/lumen/chat_history, else "" (not kept).
std::string default_chat_history_path();

}  // namespace lumen::cli
