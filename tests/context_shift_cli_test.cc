// Context shift through the `lumen` binary: `run` past its context, and `lumen chat` in a
// 512-token context for 200 turns through a pipe (issue 16, acceptance 5).
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/shared_dir.h"
#include "run_lumen.h"

namespace lumen::testing {
namespace {

const std::string kTiny = "models/TinyStories-656K/TinyStories-656K-Q8_0.gguf";
std::string tiny() { return shared_dir() + "/" + kTiny; }

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

TEST(CliContextShift, RunGoesPastTheContext) {
  CmdResult r = run_lumen({"run", "-m", tiny(), "-p", "Once upon a time", "-n", "200", "-c", "32", "--temp", "0",
                           "--ignore-eos", "--json", "--keep", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["finish_reason"], "length");
  EXPECT_EQ(j["generated_ids"].size(), 200u);
  // Bad flags are errors naming the flag.
  r = run_lumen({"run", "-m", tiny(), "-p", "x", "--keep", "2", "--no-context-shift"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--keep"), std::string::npos) << r.err;
  r = run_lumen({"run", "-m", tiny(), "-p", "x", "--keep", "many"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--keep"), std::string::npos) << r.err;
}

// 200 turns in a 512-token context: the oldest turns leave the conversation as it grows,
// and every turn still gets its reply (24 tokens each, --ignore-eos).
TEST(CliContextShift, ChatKeepsAnsweringFor200Turns) {
  std::string input;
  for (int i = 0; i < 200; ++i) input += "Tell me about the cat number " + std::to_string(i) + ".\n";
  input += "/stats\n";
  CmdResult r = run_lumen({"chat", "-m", tiny(), "-c", "512", "-n", "24", "--ignore-eos", "--temp", "0", "--system",
                           "You are a storyteller.", "--history-file", ""},
                          input);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.err, "gen 24 tok"), 200u) << r.err.substr(0, 2000);
  EXPECT_NE(r.out.find("session: 200 turn(s)"), std::string::npos) << r.out.substr(r.out.size() - 2000);
  EXPECT_GE(count(r.out, "[context shift: the "), 5u);
  EXPECT_EQ(count(r.out, "context is full"), 0u);
  EXPECT_EQ(count(r.out, "the context holds"), 0u);
  // Without context shift the same chat stops fitting.
  r = run_lumen({"chat", "-m", tiny(), "-c", "512", "-n", "24", "--ignore-eos", "--temp", "0", "--history-file", "",
                 "--no-context-shift"},
                input.substr(0, input.find("number 40")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GE(count(r.out, "the context holds 512"), 1u);
}

// A reply longer than the whole context shifts inside the reply and goes on.
TEST(CliContextShift, ChatReplyLongerThanTheContext) {
  CmdResult r = run_lumen({"chat", "-m", tiny(), "-c", "64", "-n", "150", "--ignore-eos", "--temp", "0",
                           "--history-file", ""},
                          "Hi\nAgain\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.err, "gen 150 tok"), 2u) << r.err;
  EXPECT_EQ(count(r.out, "context is full"), 0u) << r.out;
}

}  // namespace
}  // namespace lumen::testing
