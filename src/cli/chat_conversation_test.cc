#include "cli/chat_conversation.h"

#include <random>

#include <gtest/gtest.h>

namespace lumen::cli {
namespace {

TEST(ChatConversation, RoundTrip) {
  const std::vector<tok::ChatMessage> m = {{"system", "be brief"}, {"user", "hi \"there\"\n"}, {"assistant", "héllo"}};
  auto back = conversation_from_json(conversation_to_json(m));
  ASSERT_TRUE(back.ok()) << back.message();
  ASSERT_EQ(back->size(), 3u);
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ((*back)[i].role, m[i].role);
    EXPECT_EQ((*back)[i].content, m[i].content);
  }
}

TEST(ChatConversation, BadFilesNameTheField) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {Case{"", "not valid JSON"}, Case{"[]", "\"messages\" array"},
                        Case{R"({"messages": [1]})", "messages[0]: expected an object"},
                        Case{R"({"messages": [{"role": "user"}]})", "messages[0].content"},
                        Case{R"({"messages": [{"role": 3, "content": "x"}]})", "messages[0].role"},
                        Case{R"({"messages": [{"role": "tool", "content": "x"}]})", "'tool'"},
                        Case{R"({"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "y"}]})",
                             "messages[1]: a system message may only come first"}}) {
    auto r = conversation_from_json(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.message().find(c.says), std::string::npos) << r.message();
  }
}

// Random byte flips, truncations and insertions of a valid file: an error or a conversation,
// never a crash (runs under ASan in `make test-asan`).
TEST(ChatConversationFuzz, MutatedFilesGiveErrorsNotCrashes) {
  const std::string valid = conversation_to_json({{"system", "s"}, {"user", "u"}, {"assistant", "a"}});
  std::mt19937 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string s = valid;
    const int n_edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < n_edits && !s.empty(); ++e) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s[at] = static_cast<char>(rng()); break;
        case 1: s.resize(at); break;
        default: s.insert(at, 1, "{}[]\",:\\0"[rng() % 9]); break;
      }
    }
    auto r = conversation_from_json(s);
    if (!r.ok()) continue;
    for (const tok::ChatMessage& m : *r) EXPECT_TRUE(m.role == "system" || m.role == "user" || m.role == "assistant");
  }
}

}  // namespace
}  // namespace lumen::cli
