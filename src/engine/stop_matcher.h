// Stop strings over streamed text: text that could still be the beginning of a stop
// string is held back; once a stop string completes, everything from its first byte on
// is dropped and the request finishes.
#pragma once

#include <string>
#include <vector>

namespace lumen::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Feeds newly decoded text; returns the text that is safe to emit now.
  std::string push(const std::string& text);
  // True once a stop string has matched (push returns "" from then on).
  bool stopped() const { return stopped_; }
  // Releases the held-back text (end of generation without a match).
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace lumen::engine
