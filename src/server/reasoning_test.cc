// The <think> splitter: whole texts, the same texts streamed in every chunking, and the
// template / prompt checks.
#include "server/reasoning.h"

#include <gtest/gtest.h>

namespace lumen::server {
namespace {

struct Case {
  const char* text;
  bool starts_inside;
  const char* reasoning;
  const char* content;
};

const Case kCases[] = {
    {"<think>\nLet me add.\n</think>\n\n4", false, "Let me add.", "4"},
    {"  <think>a b</think>c", false, "a b", "c"},
    {"<think></think>\n\nno thoughts", false, "", "no thoughts"},
    {"<think>\n\n</think>\n\n", false, "", ""},                       // Qwen3 with thinking off
    {"Let me add.\n</think>\n\n4", true, "Let me add.", "4"},          // DeepSeek-R1: the prompt opened it
    {"\nstill thinking when cut off \n", true, "still thinking when cut off", ""},
    {"<think>cut off", false, "cut off", ""},
    {"4, no reasoning", false, "", "4, no reasoning"},
    {"  plain <think>text</think> later", false, "", "  plain <think>text</think> later"},  // not at the start
    {"<thin", false, "", "<thin"},                                     // a tag that never completes
    {"<think>a </thinking> b</think>c </think>", false, "a </thinking> b", "c </think>"},
    {"", false, "", ""},
    {"", true, "", ""},
};

TEST(ReasoningSplit, WholeTexts) {
  for (const Case& c : kCases) {
    const ReasoningText r = split_reasoning(c.text, c.starts_inside);
    EXPECT_EQ(r.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(r.content, c.content) << c.text;
  }
}

// Streamed in pieces of every size, the joined deltas are the whole-text split, and no
// piece of a tag leaks out.
TEST(ReasoningSplit, StreamedEqualsWhole) {
  for (const Case& c : kCases) {
    const std::string text = c.text;
    for (size_t step = 1; step <= 4; ++step) {
      ReasoningSplitter s(c.starts_inside);
      std::string reasoning, content;
      for (size_t i = 0; i < text.size(); i += step) {
        const ReasoningText d = s.feed(std::string_view(text).substr(i, step));
        reasoning += d.reasoning;
        content += d.content;
        if (std::string_view(c.reasoning).find("<") == std::string_view::npos) {
          EXPECT_EQ(reasoning.find('<'), std::string::npos) << text << " step " << step;
        }
      }
      const ReasoningText d = s.finish();
      reasoning += d.reasoning;
      content += d.content;
      EXPECT_EQ(reasoning, c.reasoning) << text << " step " << step;
      EXPECT_EQ(content, c.content) << text << " step " << step;
    }
  }
}

TEST(ReasoningSplit, ThinkingTemplatesAndPrompts) {
  EXPECT_TRUE(template_thinks("{{ '<think>\\n' }}{% if enable_thinking is false %}x{% endif %}"));
  EXPECT_FALSE(template_thinks("{% for m in messages %}{{ m.content }}{% endfor %}"));
  EXPECT_TRUE(prompt_opens_reasoning("<｜Assistant｜><think>\n"));
  EXPECT_TRUE(prompt_opens_reasoning("<think>"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
}

// Command-R7B's own tags: found in its template, split whole and streamed like <think>.
TEST(ReasoningSplit, CommandRTags) {
  const std::string_view source =
      "{% if message.tool_plan %}<|START_THINKING|>{{ message.tool_plan }}<|END_THINKING|>{% endif %}";
  const ReasoningTags tags = reasoning_tags(source);
  EXPECT_EQ(tags.open, "<|START_THINKING|>");
  EXPECT_EQ(tags.close, "<|END_THINKING|>");
  EXPECT_TRUE(template_thinks(source));
  EXPECT_EQ(reasoning_tags("{{ '<think>' }}").open, "<think>");
  const std::string text = "<|START_THINKING|>I will look it up.<|END_THINKING|><|START_RESPONSE|>Sunny.";
  ReasoningText whole = split_reasoning(text, false, tags);
  EXPECT_EQ(whole.reasoning, "I will look it up.");
  EXPECT_EQ(whole.content, "<|START_RESPONSE|>Sunny.");
  EXPECT_EQ(split_reasoning(text, false).content, text);  // <think> tags: nothing to split
  for (size_t step = 1; step <= 5; ++step) {
    ReasoningSplitter s(false, tags);
    std::string reasoning, content;
    for (size_t i = 0; i < text.size(); i += step) {
      const ReasoningText d = s.feed(std::string_view(text).substr(i, step));
      reasoning += d.reasoning;
      content += d.content;
    }
    const ReasoningText d = s.finish();
    EXPECT_EQ(reasoning + d.reasoning, whole.reasoning) << step;
    EXPECT_EQ(content + d.content, whole.content) << step;
  }
  EXPECT_TRUE(prompt_opens_reasoning("<|CHATBOT_TOKEN|><|START_THINKING|>\n", tags));
  EXPECT_FALSE(prompt_opens_reasoning("<|CHATBOT_TOKEN|><|START_THINKING|>\n", {}));
}

}  // namespace
}  // namespace lumen::server
