// Progress on stderr: a bar redrawn in place on a terminal (tmux, from Debian; skipped
// without it) for the first load that writes the interleaved cache, quantize, perplexity and
// bench; never a bar in piped output (plain lines at most).
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "base/shared_dir.h"
#include "tmux_session.h"

namespace lumen::testing {
namespace {

namespace fs = std::filesystem;

const std::string kTiny = "models/TinyStories-656K/TinyStories-656K-Q8_0.gguf";
const std::string kStories = "models/stories260K/stories260K.gguf";

std::string shared(const std::string& rel) { return shared_dir() + "/" + rel; }

std::string tmp(const std::string& name) { return ::testing::TempDir() + "lumen_progress_" + std::to_string(getpid()) + "_" + name; }

// The commands of both tests: a first load (fresh cache dir), quantize, perplexity --json, bench.
std::vector<std::vector<std::string>> commands() {
  return {{"run", "-m", shared(kTiny), "-p", "Once", "-n", "2", "--cache-dir", tmp("cache")},
          {"quantize", shared(kStories), tmp("q8.gguf"), "--type", "q8_0"},
          {"perplexity", "-m", shared(kTiny), "-f", shared("corpus/war-and-peace.txt"), "-c", "64", "--chunks", "3", "--json"},
          {"bench", "-m", shared(kTiny), "-p", "8", "-n", "4", "-r", "1", "-t", "1"}};
}

void clean() {
  fs::remove_all(tmp("cache"));
  fs::remove(tmp("q8.gguf"));
}

TEST(ProgressTerminal, BarsOnATerminal) {
  if (!have_tmux()) GTEST_SKIP() << "tmux is not installed (scripts/setup.sh installs it)";
  clean();
  std::string script;
  for (const auto& cmd : commands()) {
    script += sh_quote(lumen_bin());
    for (const std::string& a : cmd) script += " " + sh_quote(a);
    script += " >/dev/null && ";  // stdout aside: the screen shows stderr
  }
  TmuxSession t(script + "true", 160, 50);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t.wait_for_text("[exit 0]", 1, 120)) << t.screen();
  const std::string s = t.screen();
  EXPECT_NE(s.find("first load of this model file: writing"), std::string::npos) << s;
  for (const std::string bar : {"interleave [#", "quantize [#", "perplexity [#", "bench [#"}) {
    EXPECT_NE(s.find(bar), std::string::npos) << bar << "\n" << s;
  }
  EXPECT_NE(s.find("] 100%"), std::string::npos) << s;
  clean();
}

TEST(ProgressTerminal, NoBarsInPipedOutput) {
  clean();
  for (const auto& cmd : commands()) {
    const CmdResult r = run_lumen(cmd);
    ASSERT_EQ(r.exit_code, 0) << cmd[0] << ": " << r.err;
    EXPECT_EQ(r.err.find("[#"), std::string::npos) << cmd[0] << ": " << r.err;
    EXPECT_EQ(r.err.find('\r'), std::string::npos) << cmd[0] << ": " << r.err;
    EXPECT_EQ(r.out.find('\r'), std::string::npos) << cmd[0] << ": " << r.out;
  }
  clean();
}

}  // namespace
}  // namespace lumen::testing
