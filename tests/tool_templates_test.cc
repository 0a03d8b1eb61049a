// Tool calling against real chat templates (tests/data/chat_templates, SOURCES.md there):
// the request's tools and its earlier call and result render through the template, the
// format detected from the template is the one the model is told to answer in, and a
// hand-written answer in that format parses back into the call (and, where the call
// grammar applies, is a text of the grammar).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/compiled_grammar.h"
#include "grammar/matcher.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_template.h"

#ifndef LUMEN_TEST_DATA_DIR
#error "LUMEN_TEST_DATA_DIR must name tests/data"
#endif

namespace lumen::server {
namespace {

using Json = nlohmann::json;

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(LUMEN_TEST_DATA_DIR) + "/chat_templates/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Llama 3's template without tool support (the one llama-3.2 GGUFs converted from the base
// tokenizer carry): tools go into a system message.
constexpr const char* kPlainLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}";

// The schema lists "unit" before "city": where a template shows the schema, that order stays.
const char* kBody = R"({"tools": [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
     "parameters": {"type": "object", "properties": {"unit": {"type": "string", "enum": ["C", "F"]},
                                                     "city": {"type": "string", "description": "City name"}},
                    "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "Local time",
     "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}],
  "tool_choice": "required", "parallel_tool_calls": false,
  "messages": [
    {"role": "user", "content": "What's the weather in Oslo?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call00001", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"unit\": \"C\", \"city\": \"Oslo\"}"}}]},
    {"role": "tool", "tool_call_id": "call00001", "content": "sunny and 21 degrees"},
    {"role": "assistant", "content": "It is sunny in Oslo."},
    {"role": "user", "content": "And in Paris?"}]})";

struct Case {
  const char* name;
  std::string source;
  bool takes_tools;
  ToolFormat format;
  const char* args_key;
  std::string answer;  // what the model would write, in the template's own format
  bool grammar_text;   // the answer is a text of the call grammar
};

TEST(ToolTemplates, RealTemplatesRenderToolsAndParseTheirFormat) {
  const std::string call = R"({"name": "get_weather", "arguments": {"unit": "C", "city": "Paris"}})";
  const Case cases[] = {
      {"qwen2.5", read_template("qwen2.5.jinja"), true, ToolFormat::kHermes, "arguments",
       "<tool_call>\n" + call + "\n</tool_call>", true},
      {"qwen3", read_template("qwen3.jinja"), true, ToolFormat::kHermes, "arguments",
       "<tool_call>\n" + call + "\n</tool_call>", true},
      {"llama3.2", read_template("llama3.2.jinja"), true, ToolFormat::kJson, "parameters",
       R"({"name": "get_weather", "parameters": {"unit": "C", "city": "Paris"}})", true},
      {"mistral-nemo", read_template("mistral-nemo.jinja"), true, ToolFormat::kJson, "arguments",
       R"([TOOL_CALLS][{"name": "get_weather", "arguments": {"unit": "C", "city": "Paris"}, "id": "a1b2c3d4e"}])",
       false},
      {"llama3 (no tools)", kPlainLlama3, false, ToolFormat::kJson, "arguments", call, true},
      {"hermes3", read_template("hermes3-tool-use.jinja"), true, ToolFormat::kHermes, "arguments",
       "<tool_call>\n" + call + "\n</tool_call>", true},
      {"command-r7b", read_template("command-r7b-tool-use.jinja"), true, ToolFormat::kCommandR7b, "arguments",
       R"(<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"unit": "C", "city": "Paris"}}]<|END_ACTION|>)",
       true},
      {"functionary-v3.2", read_template("functionary-v3.2.jinja"), true, ToolFormat::kFunctionaryV32, "arguments",
       "get_weather\n{\"unit\": \"C\", \"city\": \"Paris\"}", true},
      {"functionary-v3.1", read_template("functionary-v3.1.jinja"), true, ToolFormat::kFunctionaryV31, "arguments",
       R"(<function=get_weather>{"unit": "C", "city": "Paris"}</function>)", true},
      {"firefunction-v2", read_template("firefunction-v2.jinja"), true, ToolFormat::kFirefunctionV2, "arguments",
       R"( functools[{"name": "get_weather", "arguments": {"unit": "C", "city": "Paris"}}])", true},
  };
  ParserLimits limits;
  limits.n_vocab = 100;
  limits.n_ctx = 100;
  auto pr = parse_generation_request(kBody, Endpoint::kChatCompletions, limits);
  ASSERT_TRUE(pr.ok()) << pr.message();
  auto vocab = grammar::TokenTable::from_pieces({"a"}, {});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto t = tok::ChatTemplate::parse(c.source);
    ASSERT_TRUE(t.ok()) << t.message();
    const TemplateTools tt = template_tools(c.source, *t);
    EXPECT_EQ(tt.takes_tools, c.takes_tools);
    EXPECT_EQ(tt.format, c.format);
    EXPECT_EQ(tt.args_key, c.args_key);
    auto text = t->render_json(tool_chat_context(*pr, tt, "<s>", "</s>"));
    ASSERT_TRUE(text.ok()) << text.message();
    // The tools, the earlier call, its result and the new question are all in the prompt.
    for (const char* want : {"get_weather", "City name", "get_time", "Oslo", "sunny and 21 degrees", "And in Paris?"})
      EXPECT_NE(text->find(want), std::string::npos) << want << " missing from\n" << *text;
    if (c.takes_tools) {  // the template shows the schema: its property order stays
      const size_t unit = text->find("\"unit\""), city = text->find("\"city\"");
      ASSERT_NE(unit, std::string::npos) << *text;
      EXPECT_LT(unit, city) << *text;
    }
    const ToolOutput out = parse_tool_output(c.answer, pr->tools, tt.format);
    ASSERT_EQ(out.calls.size(), 1u) << c.answer;
    EXPECT_EQ(out.calls[0].name, "get_weather");
    EXPECT_EQ(Json::parse(out.calls[0].arguments), Json::parse(R"({"unit": "C", "city": "Paris"})"));
    EXPECT_EQ(out.content, "");
    if (!c.grammar_text) continue;
    auto gbnf = tool_call_gbnf(pr->tools, tt);
    ASSERT_TRUE(gbnf.ok()) << gbnf.message();
    auto g = grammar::CompiledGrammar::from_gbnf(*gbnf, vocab);
    ASSERT_TRUE(g.ok()) << g.message();
    grammar::GrammarMatcher m(*g);
    EXPECT_TRUE(m.accept_bytes(c.answer) && m.can_end()) << c.answer << "\n" << *gbnf;
  }
}

}  // namespace
}  // namespace lumen::server
