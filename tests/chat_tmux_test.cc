// `lumen chat` in a real terminal (tmux, from Debian; skipped without it): line editing with
// the arrow keys, history, Ctrl-C during a reply, the commands, the per-turn and session
// speed. Every wait polls the screen up to a deadline (no fixed sleeps), so a slow machine
// makes the test slower, not flaky.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/shared_dir.h"
#include "tmux_session.h"

namespace lumen::testing {
namespace {

const std::string kTiny = "models/TinyStories-656K/TinyStories-656K-Q8_0.gguf";

// The chat's history file, one per test binary, removed when the binary exits.
const std::string& history_path() {
  struct TempFile {
    std::string path;
    ~TempFile() {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  };
  static const TempFile file{::testing::TempDir() + "lumen_chat_history_" + std::to_string(getpid())};
  return file.path;
}

std::string chat_command(const std::string& extra) {
  const std::string& hist = history_path();
  std::filesystem::remove(hist);
  return sh_quote(lumen_bin()) + " chat -m " + sh_quote(shared_dir() + "/" + kTiny) +
         " --temp 0 --history-file " + sh_quote(hist) + " " + extra;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, false);
}

std::string dump(const TmuxSession& t) { return "screen:\n" + t.screen(); }

// The last line of the screen is an empty prompt: the chat waits for input.
bool at_prompt(const std::string& s) {
  const size_t nl = s.rfind('\n');
  return s.substr(nl == std::string::npos ? 0 : nl + 1) == ">";
}

TEST(ChatTerminal, EditingCtrlCClearAndStats) {
  if (!have_tmux()) GTEST_SKIP() << "tmux is not installed (scripts/setup.sh installs it)";
  // Replies of exactly 16 tokens until /set n -1 makes one run until the 4096-token context
  // is full: long enough to be stopped with Ctrl-C however fast the machine is.
  TmuxSession t(chat_command("-n 16 --ignore-eos -c 4096"));
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t.wait_for_text("/help for commands")) << dump(t);
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);

  // Turn 1: a typo fixed with the arrow keys.
  t.type("Once upon a tme");
  t.keys("Left");
  t.keys("Left");
  t.type("i");
  t.keys("Enter");
  ASSERT_TRUE(t.wait_for_text("gen 16 tok", 1)) << dump(t);
  EXPECT_TRUE(t.wait_for_text("> Once upon a time")) << dump(t);
  // Turn 2: the last line recalled with Up and edited.
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);
  t.keys("Up");
  for (int i = 0; i < 4; ++i) t.keys("BSpace");
  t.type("day");
  t.keys("Enter");
  ASSERT_TRUE(t.wait_for_text("gen 16 tok", 2)) << dump(t);
  EXPECT_TRUE(t.wait_for_text("> Once upon a day")) << dump(t);

  // Turn 3: a reply without a limit, stopped by Ctrl-C once it is streaming.
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);
  t.line("/set n -1");
  ASSERT_TRUE(t.wait_for_text("n = until end of turn")) << dump(t);
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);
  t.line("Tell me a long story");
  ASSERT_TRUE(t.wait_for([](const std::string& s) {
    const size_t at = s.rfind("> Tell me a long story");
    return at != std::string::npos && s.size() > at + 200;  // the reply is streaming
  })) << dump(t);
  t.keys("C-c");
  ASSERT_TRUE(t.wait_for_text("[stopped]", 1, 30)) << dump(t);
  ASSERT_TRUE(t.wait_for_text("gen ", 3)) << dump(t);  // its speed line
  EXPECT_EQ(TmuxSession::occurrences(t.screen(), "[exit"), 0) << dump(t);  // still running
  EXPECT_EQ(TmuxSession::occurrences(t.screen(), "context is full"), 0) << dump(t);  // stopped, not finished

  // The conversation holds the edited lines and the stopped reply.
  const std::string saved = ::testing::TempDir() + "lumen_chat_saved_" + std::to_string(getpid()) + ".json";
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);
  t.line("/save " + saved);
  ASSERT_TRUE(t.wait_for_text("saved 6 message(s)")) << dump(t);
  nlohmann::json j = read_json(saved);
  ASSERT_TRUE(j.is_object()) << j;
  ASSERT_EQ(j["messages"].size(), 6u) << j;
  EXPECT_EQ(j["messages"][0]["content"], "Once upon a time");
  EXPECT_EQ(j["messages"][2]["content"], "Once upon a day");
  EXPECT_EQ(j["messages"][4]["content"], "Tell me a long story");
  EXPECT_FALSE(j["messages"][5]["content"].get<std::string>().empty());

  // /clear, then another turn: the conversation is that turn alone.
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);
  t.line("/clear");
  ASSERT_TRUE(t.wait_for_text("chat cleared")) << dump(t);
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);
  t.line("/set n 16");
  ASSERT_TRUE(t.wait_for_text("n = 16")) << dump(t);
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);
  t.line("Lily went out");
  ASSERT_TRUE(t.wait_for_text("gen 16 tok", 3)) << dump(t);
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);
  t.line("/save " + saved);
  ASSERT_TRUE(t.wait_for_text("saved 2 message(s)")) << dump(t);
  j = read_json(saved);
  ASSERT_EQ(j["messages"].size(), 2u) << j;
  EXPECT_EQ(j["messages"][0]["content"], "Lily went out");
  std::filesystem::remove(saved);

  // Session speed.
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);
  t.line("/stats");
  ASSERT_TRUE(t.wait_for_text("session: 4 turn(s)")) << dump(t);
  const std::string s = t.screen();
  EXPECT_NE(s.find("tok/s | mean TTFT"), std::string::npos) << s;

  // Ctrl-C at the prompt warns once; /exit quits cleanly.
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);
  t.keys("C-c");
  ASSERT_TRUE(t.wait_for_text("(Ctrl-C again to quit")) << dump(t);
  EXPECT_EQ(TmuxSession::occurrences(t.screen(), "[exit"), 0) << dump(t);
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);
  t.line("/exit");
  EXPECT_TRUE(t.wait_for_text("[exit 0]", 1, 30)) << dump(t);
}

TEST(ChatTerminal, SecondCtrlCAtThePromptQuits) {
  if (!have_tmux()) GTEST_SKIP() << "tmux is not installed (scripts/setup.sh installs it)";
  TmuxSession t(chat_command("-n 4"));
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);
  t.keys("C-c");
  ASSERT_TRUE(t.wait_for_text("(Ctrl-C again to quit")) << dump(t);
  ASSERT_TRUE(t.wait_for(at_prompt)) << dump(t);
  t.keys("C-c");
  EXPECT_TRUE(t.wait_for_text("[exit 0]", 1, 30)) << dump(t);
}

}  // namespace
}  // namespace lumen::testing
