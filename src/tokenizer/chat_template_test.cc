#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <span>
#include <string>
#include <vector>

#include "base/shared_dir.h"

// Expected strings were produced by Hugging Face's renderer settings
// (jinja2 ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
// extensions=[loopcontrols]) with HF's tojson and raise_exception) and checked in here.

namespace lumen::tok {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string hf_dir(const std::string& name) { return shared_dir() + "/tokenizers/hf/" + name; }

// The chat_template string of a tokenizer_config.json, or "" if absent.
std::string config_template(const std::string& name) {
  const std::string text = read_file(hf_dir(name) + "/tokenizer_config.json");
  if (text.empty()) return {};
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.contains("chat_template") || !j["chat_template"].is_string()) return {};
  return j["chat_template"].get<std::string>();
}

std::string render_ok(const std::string& source, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                      std::string_view bos, std::string_view eos) {
  Result<ChatTemplate> t = ChatTemplate::parse(source);
  EXPECT_TRUE(t.ok()) << t.message();
  if (!t.ok()) return {};
  Result<std::string> out = t->render(messages, add_generation_prompt, bos, eos);
  EXPECT_TRUE(out.ok()) << out.message();
  return out.ok() ? *out : std::string();
}

// Parse + render; returns the error message ("" if both succeeded).
std::string render_error(const std::string& source, const std::vector<ChatMessage>& messages = {}) {
  Result<ChatTemplate> t = ChatTemplate::parse(source);
  if (!t.ok()) return t.message();
  Result<std::string> out = t->render(messages, false, "<s>", "</s>");
  return out.ok() ? std::string() : out.message();
}

const std::vector<ChatMessage> kWithSystem = {
    {"system", "You are terse."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "  What is 2+2? \n"}};
const std::vector<ChatMessage> kNoSystem = {{"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}};

// Qwen2's template (Qwen2 / Qwen2.5 tokenizer_config.json).
constexpr const char* kQwen2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

// The classic Llama-2 chat template (meta-llama/Llama-2-*-chat-hf).
constexpr const char* kLlama2Template =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}";

TEST(ChatTemplateReal, TinyLlamaFromSharedDir) {
  const std::string source = read_file(hf_dir("llama2-tinyllama") + "/chat_template.jinja");
  if (source.empty()) GTEST_SKIP() << "no " << hf_dir("llama2-tinyllama");
  EXPECT_EQ(render_ok(source, kWithSystem, true, "<s>", "</s>"),
            "<|system|>\nYou are terse.</s>\n"
            "<|user|>\nHi</s>\n"
            "<|assistant|>\nHello!</s>\n"
            "<|user|>\n  What is 2+2? \n</s>\n"
            "<|assistant|>\n");
  EXPECT_EQ(render_ok(source, kNoSystem, false, "<s>", "</s>"),
            "<|user|>\nHi</s>\n<|assistant|>\nHello!</s>\n<|user|>\nBye</s>\n");
}

TEST(ChatTemplateReal, Qwen2ChatMl) {
  EXPECT_EQ(render_ok(kQwen2Template, kNoSystem, true, "", "<|im_end|>"),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render_ok(kQwen2Template, kWithSystem, false, "", "<|im_end|>"),
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\n  What is 2+2? \n<|im_end|>\n");
}

// The qwen2-qwen3 directory holds Qwen3's template (namespace(), messages[::-1],
// split / lstrip chains, tojson, "is string", "is false").
TEST(ChatTemplateReal, Qwen3FromTokenizerConfig) {
  const std::string source = config_template("qwen2-qwen3");
  if (source.empty()) GTEST_SKIP() << "no chat_template in " << hf_dir("qwen2-qwen3");
  EXPECT_EQ(render_ok(source, kWithSystem, true, "", "<|im_end|>"),
            "<|im_start|>system\nYou are terse.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\n  What is 2+2? \n<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateReal, Qwen3ToolsAndThinkingViaJsonContext) {
  const std::string source = config_template("qwen2-qwen3");
  if (source.empty()) GTEST_SKIP() << "no chat_template in " << hf_dir("qwen2-qwen3");
  Result<ChatTemplate> t = ChatTemplate::parse(source);
  ASSERT_TRUE(t.ok()) << t.message();
  const char* context = R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "<think>\nNeed the tool.\n</think>\n\n",
       "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "sunny, 22C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "add_generation_prompt": true, "enable_thinking": false})";
  Result<std::string> out = t->render_json(context);
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(*out,
            "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
            "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
            "\"properties\": {\"city\": {\"type\": \"string\"}}}}}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
            "<args-json-object>}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nNeed the tool.\n</think>\n\n"
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nsunny, 22C\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatTemplateReal, Llama3FromTokenizerConfig) {
  const std::string source = config_template("llama3");
  if (source.empty()) GTEST_SKIP() << "no chat_template in " << hf_dir("llama3");
  EXPECT_EQ(render_ok(source, kWithSystem, true, "<|begin_of_text|>", "<|end_of_text|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateReal, Llama2Inst) {
  EXPECT_EQ(render_ok(kLlama2Template, kWithSystem, false, "<s>", "</s>"),
            "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] What is 2+2? [/INST]");
  EXPECT_EQ(render_ok(kLlama2Template, kNoSystem, false, "<s>", "</s>"),
            "<s>[INST] Hi [/INST] Hello! </s><s>[INST] Bye [/INST]");
}

TEST(ChatTemplateErrors, RaiseExceptionMessageSurfaces) {
  const std::string msg = render_error(kLlama2Template, {{"user", "a"}, {"user", "b"}});
  EXPECT_NE(msg.find("Conversation roles must alternate user/assistant/user/assistant/..."), std::string::npos) << msg;
  EXPECT_NE(msg.find("raise_exception"), std::string::npos) << msg;
}

struct ErrorCase {
  const char* source;
  const char* expected;  // substring of the message, including the position
};

TEST(ChatTemplateErrors, ParseErrorsNameConstructAndPosition) {
  const ErrorCase cases[] = {
      {"ok\n  {% include 'x' %}", "2:3: unsupported tag 'include'"},
      {"{% import 'x' as y %}", "1:1: unsupported tag 'import'"},
      {"{% from 'x' import y %}", "1:1: unsupported tag 'from'"},
      {"{% extends 'x' %}", "1:1: unsupported tag 'extends'"},
      {"{% block b %}{% endblock %}", "1:1: unsupported tag 'block'"},
      {"{% macro m() %}{% endmacro %}{% call m() %}x{% endcall %}", "1:30: unsupported tag 'call'"},
      {"{% macro m() %}never closed", "1:1: unterminated 'macro' block (missing '{% endmacro %}')"},
      {"{% macro m(a=1, b) %}{% endmacro %}", "1:17: macro parameter 'b' without a default follows one with a default"},
      {"{% macro m(a, a) %}{% endmacro %}", "1:15: duplicate macro parameter 'a'"},
      {"{% macro m %}{% endmacro %}", "1:12: expected '('"},
      {"{% for x in [1] %}{% macro m() %}{% break %}{% endmacro %}{% endfor %}", "'break' outside of a for loop"},
      {"{% filter frob %}x{% endfilter %}", "1:11: unknown filter 'frob'"},
      {"{% filter upper %}never closed", "unterminated 'filter' block"},
      {"{% frobnicate %}", "unknown tag 'frobnicate'"},
      {"{% if true %}never closed", "1:1: unterminated 'if' block (missing '{% endif %}')"},
      {"{% for x in [1] %}\n{{ x }}", "1:1: unterminated 'for' block"},
      {"{% if x %}{% endfor %}", "1:11: unexpected 'endfor'"},
      {"{% endif %}", "unexpected 'endif'"},
      {"{{ x", "1:1: unterminated '{{' tag"},
      {"a {% if x", "1:3: unterminated '{%' tag"},
      {"{# no end", "unterminated comment"},
      {"{{ 'abc }}", "unterminated string literal"},
      {"{{ x | frob }}", "1:8: unknown filter 'frob'"},
      {"{{ x is frob }}", "unknown test 'frob'"},
      {"{{ }}", "empty expression"},
      {"{{ 1 + }}", "expected an expression"},
      {"{{ (1 }}", "unexpected '}'"},
      {"{% break %}", "'break' outside of a for loop"},
      {"{% for x in xs recursive %}{% endfor %}", "recursive"},
      {"{{ 99999999999999999999 }}", "out of range"},
  };
  for (const ErrorCase& c : cases) {
    const std::string msg = render_error(c.source);
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.source << " -> \"" << msg << "\"";
    EXPECT_EQ(msg.rfind("chat template", 0), 0u) << msg;
  }
}

TEST(ChatTemplateErrors, RenderErrors) {
  const ErrorCase cases[] = {
      {"{{ undefined_x + 'a' }}", "'undefined_x' is undefined"},
      {"{{ 'a' + 1 }}", "unsupported operand types for +: string and integer"},
      {"{{ 1 / 0 }}", "division by zero"},
      {"{{ 9223372036854775807 + 1 }}", "integer overflow"},
      {"{{ nosuchfunction(1) }}", "'nosuchfunction' is undefined and cannot be called"},
      {"{% for x in 5 %}{% endfor %}", "cannot iterate over integer"},
      {"{% set y.z = 1 %}", "only namespace() objects allow it"},
      {"{{ [1][::0] }}", "slice step cannot be zero"},
      {"{{ x | tojson }}", "not JSON serializable"},
      // Jinja's messages for undefined values and generators (map / select / ...).
      {"{{ {'a': 1}.b + 'x' }}", "'dict object' has no attribute 'b'"},
      {"{{ [1][3] + 'x' }}", "list object has no element 3"},
      {"{{ [1].startswith('a') }}", "'list object' has no attribute 'startswith'"},
      // Attributes, items and methods of undefined values fail with the first message.
      {"{{ undefined_name.attr }}", "1:18: 'undefined_name' is undefined"},
      {"{{ {'a': 1}.b.c }}", "'dict object' has no attribute 'b'"},
      {"{{ {'a': 1}.b[0] }}", "'dict object' has no attribute 'b'"},
      {"{{ [1][5].strip() }}", "list object has no element 5"},
      {"{{ messages | map(attribute='role') | tojson }}", "Object of type generator is not JSON serializable"},
      {"{{ messages | selectattr('role') | length }}", "object of type 'generator' has no len()"},
      // Macro calls: arguments are checked as Jinja does.
      {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "1:35: macro 'm' takes not more than 1 argument(s)"},
      {"{% macro m(a) %}{% endmacro %}{{ m(z=1) }}", "macro 'm' takes no keyword argument 'z'"},
      {"{% macro m(a) %}{% endmacro %}{{ m(1, a=2) }}", "macro 'm' got multiple values for argument 'a'"},
      {"{% macro m(a) %}{{ a + 1 }}{% endmacro %}{{ m() }}", "'a' is undefined"},
  };
  for (const ErrorCase& c : cases) {
    const std::string msg = render_error(c.source);
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.source << " -> \"" << msg << "\"";
  }
}

// Hostile templates fail with a Status in bounded time instead of crashing or hanging.
TEST(ChatTemplateErrors, HostileTemplatesAreBounded) {
  const auto t0 = std::chrono::steady_clock::now();
  const ErrorCase cases[] = {
      {"{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", "evaluation budget"},
      {"{% for i in range(1000000) %}{% endfor %}", "range() longer than"},
      {"{{ 'a' * 100000000000 }}", "exceeds the size limit"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
       "exceeds the size limit"},
      {"{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
       "list exceeds the size limit"},
      {"{% set s = 'x' * 1000000 %}{% for i in range(100000) %}{{ s | length }}{% endfor %}", "evaluation budget"},
      {"{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}", "nested too deeply"},
      {"{{ 2 ** 64 }}", "integer overflow"},
      // A macro calling itself without end, once per call or twice (2^depth calls).
      {"{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "macro calls nested too deeply"},
      {"{% macro m(n) %}{% if n < 40 %}{{ m(n + 1) }}{{ m(n + 1) }}{% endif %}{% endmacro %}{{ m(0) }}", "evaluation budget"},
      {"{% macro m(s) %}{{ m(s ~ s) }}{% endmacro %}{{ m('x') }}", "exceeds the size limit"},
      {"{% macro m() %}{% for i in range(100000) %}{{ i }}{% endfor %}{% endmacro %}{% for i in range(100000) %}{{ m() }}{% endfor %}",
       "evaluation budget"},
  };
  for (const ErrorCase& c : cases) {
    const std::string msg = render_error(c.source);
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.source << " -> \"" << msg << "\"";
  }
  // Deep nesting is refused at parse time (it would overflow the evaluator's stack).
  EXPECT_NE(render_error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nested too deeply"),
            std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  EXPECT_NE(render_error(chain + " }}").find("nested too deeply"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_NE(render_error(blocks).find("nested too deeply"), std::string::npos);
  EXPECT_NE(render_error(std::string(2 << 20, 'x')).find("exceeds the limit"), std::string::npos);
  // Macro recursion through deeply nested blocks and expressions: each call stays within
  // the parser's nesting limits, so the evaluator's own depth limit must stop it before
  // the C++ stack overflows (ASan's frames are several KB).
  std::string deep = "{% macro m(n) %}";
  for (int i = 0; i < 95; ++i) deep += "{% if true %}";
  deep += "{{ " + std::string(90, '(') + "m(n + 1)" + std::string(90, ')') + " }}";
  for (int i = 0; i < 95; ++i) deep += "{% endif %}";
  deep += "{% endmacro %}{{ m(0) }}";
  EXPECT_NE(render_error(deep).find("evaluation nested too deeply"), std::string::npos) << render_error(deep);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 60.0);  // generous for sanitizer builds; ~1 s in release
}

// A long legitimate conversation stays well inside the work budget.
TEST(ChatTemplateReal, LongConversationRenders) {
  std::vector<ChatMessage> messages;
  std::string content;
  for (int i = 0; i < 2000; ++i) content += "word ";
  for (int i = 0; i < 400; ++i) messages.push_back({i % 2 ? "assistant" : "user", content});  // 4 MB
  const std::string out = render_ok(kQwen2Template, messages, true, "", "<|im_end|>");
  EXPECT_GT(out.size(), 4000000u);
}

struct Case {
  const char* source;
  const char* expected;
};

// Each case's source rendered over a fixed 3-message conversation (add_generation_prompt,
// bos "<s>", eos "</s>") gives exactly its expected string.
void expect_renders(std::span<const Case> cases) {
  const std::vector<ChatMessage> messages = {{"system", "S"}, {"user", "Hi"}, {"assistant", " a b "}};
  for (const Case& c : cases) {
    Result<ChatTemplate> t = ChatTemplate::parse(c.source);
    ASSERT_TRUE(t.ok()) << c.source << " -> " << t.message();
    Result<std::string> out = t->render(messages, true, "<s>", "</s>");
    ASSERT_TRUE(out.ok()) << c.source << " -> " << out.message();
    EXPECT_EQ(*out, c.expected) << c.source;
  }
}

// Semantics table: whitespace control, loops, scoping, expressions, filters, tests, methods.
TEST(ChatTemplateSemantics, MatchesJinjaWithHfSettings) {
  const Case cases[] = {
    {"  {% if true %}\n  x\n  {% endif %}\n  y", "  x\n  y"},
    {"a {% if true %}b{% endif %}\nc\n", "a bc"},
    {"{{ 'x' }}  {% if true %}b{% endif %}", "x  b"},
    {"  {# c #}\nq", "q"},
    {"a\n  {%- if true %}b{% endif %}", "ab"},
    {"a  \n  {%+ if true %}b{% endif %}", "a  \n  b"},
    {"{% if true +%}\nb{% endif %}", "\nb"},
    {"{% if true -%}  \n\n  b  {%- endif %}  c", "b  c"},
    {"x {{- ' y ' -}} z", "x y z"},
    {"line1\n{% for i in [1,2] %}\n  item {{ i }}\n{% endfor %}\nend\n", "line1\n  item 1\n  item 2\nend"},
    {"a\r\nb{% if true %}\r\nc{% endif %}\r\n", "a\nbc"},
    {"{{ 'a' }}\n{{ 'b' }}\n", "a\nb"},
    {"a {#- x #} b {# y -#} c", "a b c"},
    {"{% raw %}{{ kept }}{% endraw %}", "{{ kept }}"},
    {"{% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}", "103TrueFalse3;212FalseFalse3;321FalseTrue3;"},
    {"{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", "-2;1-3;2-;"},
    {"{% for x in [1, 2, 3] if x > 1 %}{{ x }}/{{ loop.length }} {% else %}E{% endfor %}", "2/2 3/2 "},
    {"{% for x in [] %}x{% else %}empty{% endfor %}", "empty"},
    {"{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", "a=1;b=2;"},
    {"{% for x in [1, 2, 3, 4] %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% if x == 3 %}{% break %}{% endif %}{% endfor %}", "23"},
    {"{% set x = 5 %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}{% endfor %}|{{ x }}", "[5][5]|5"},
    {"{% set ns = namespace(total=0, seen=false) %}{% for i in [1, 2, 3] %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}", "6"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}", "12"},
    {"{% set x %}captured {{ 1 + 1 }}{% endset %}[{{ x }}]", "[captured 2]"},
    {"{% if 7 > 10 %}big{% elif 7 > 5 %}mid{% else %}small{% endif %}", "mid"},
    {"{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ - 2 ** 2 }} {{ 3 / 2 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1e16 }}", "3 -4 2 1024 4 1.5 0.30000000000000004 1e-05 1e+16"},
    {"{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2, 3] }} {{ 1 < 2 < 3 }}", "a1NoneTrue ababab [1, 2, 3] True"},
    {"{{ 0 or 'd' }} {{ 1 and 'y' }} {{ 'x' if false else 'z' }} {{ not 0 }}", "d y z True"},
    {"{{ 'b' in 'abc' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }}", "True False True"},
    {"{{ messages[1].content }}{{ messages[1]['role'] }}{{ messages[-1].content }}{{ messages[5] is defined }}", "Hiuser a b False"},
    {"{{ messages[1:] | length }} {{ 'héllo'[::-1] }} {{ 'héllo'[1:3] }} {{ [1, 2, 3][::2] }}", "2 olléh él [1, 3]"},
    {"{{ undefined_name }}|{{ undefined_name | length }}|{{ undefined_name is defined }}|{{ {}.a is defined }}", "|0|False|False"},
    {"{{ [1, 'a', none, true, 1.5] }} {{ {'k': [1, {'z': none}]} }} {{ 'it\\'s' }}", "[1, 'a', None, True, 1.5] {'k': [1, {'z': None}]} it's"},
    {"{{ '  x  ' | trim }}|{{ 'ab' | upper }}|{{ 'AB' | lower }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}", "x|AB|ab|Hello World|Hello"},
    {"{{ [3, 1, 2] | join(', ') }}|{{ [3, 1, 2] | first }}|{{ [3, 1, 2] | last }}|{{ 'abc' | list }}|{{ [1, 2] | reverse | list }}", "3, 1, 2|3|2|['a', 'b', 'c']|[2, 1]"},
    {"{{ none | default('d') }}|{{ '' | default('d', true) }}|{{ 'x' | default('d') }}|{{ '3' | int + 1 }}|{{ 2 | float }}|{{ -3 | abs }}", "None|d|x|4|2.0|3"},
    {"{{ messages | map(attribute='role') | join(',') }}|{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|{{ messages | rejectattr('role', 'eq', 'user') | map(attribute='content') | list }}", "system,user,assistant|1|['S', ' a b ']"},
    {"{{ {'b': [1, 2.5, none, true], 'a': 'x\"y\\n'} | tojson }}|{{ [1, {'k': 'v'}] | tojson(indent=2) }}|{{ 'é' | tojson }}", "{\"b\": [1, 2.5, null, true], \"a\": \"x\\\"y\\n\"}|[\n  1,\n  {\n    \"k\": \"v\"\n  }\n]|\"é\""},
    {"{{ '<a&b>' | e }}|{{ 'aXbX' | replace('X', '-') }}|{{ [1, 1, 2] | unique | list }}|{{ {'a': 1} | items | list }}", "&lt;a&amp;b&gt;|a-b-|[1, 2]|[['a', 1]]"},  // tuples are lists here
    {"{{ none is none }}{{ 1 is number }}{{ 'a' is string }}{{ true is boolean }}{{ false is false }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ {} is mapping }}{{ 1 is not none }}", "TrueTrueTrueTrueTrueTrueTrueTrueTrue"},
    {"{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'ab  '.rstrip() }}|{{ '\\n\\nab'.lstrip('\\n') }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'bc')) }}", "a b|a|ab|ab|True|True"},
    {"{{ 'a b  c'.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a b c'.split(' ', 1) }}|{{ 'x</think>y'.split('</think>')[-1] }}|{{ ', '.join(['a', 'b']) }}|{{ 'abc'.upper() }}", "['a', 'b', 'c']|['a', 'b', '', 'c']|['a', 'b c']|y|a, b|ABC"},
    {"{{ {'a': 1}.get('a') }}|{{ {'a': 1}.get('z', 5) }}|{{ {'a': 1}.keys() | list }}|{{ range(3) | list }}|{{ range(5, 0, -2) | list }}", "1|5|['a']|[0, 1, 2]|[5, 3, 1]"},
  };
  expect_renders(cases);
}

// {% macro %}, {% filter %}, indent and Markup; expected strings from jinja2 with HF's
// settings (tests/data/chat_templates/render_jinja2.py's environment).
TEST(ChatTemplateSemantics, MacrosAndFilterBlocksMatchJinja) {
  const Case cases[] = {
    // positional and keyword arguments, defaults, missing arguments undefined
    {"{% macro m(a, b='B', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m(b=5, a=4) }}{{ m() }}",
     "[1|B|None][1|2|None][1|B|3][4|5|None][|B|None]"},
    // defaults are evaluated per call, see top-level variables and earlier parameters
    {"{% set d = 7 %}{% macro m(x=d, y=x * 2) %}{{ x }},{{ y }}{% endmacro %}{{ m() }}|{{ m(1) }}", "7,14|1,2"},
    // recursion
    {"{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n }}*{{ fact(n - 1) }}{% endif %}{% endmacro %}{{ fact(4) }}", "4*3*2*1"},
    // scoping: top-level variables yes, the caller's loop variables no; sets stay local
    {"{% set top = 'T' %}{% macro m() %}{{ top }}{{ x is defined }}{{ i is defined }}{{ loop is defined }}{% endmacro %}{% for i in [1] %}{% set x = 1 %}{{ m() }}{% endfor %}",
     "TFalseFalseFalse"},
    {"{% macro m() %}{% set top = 'local' %}{{ top }}{% endmacro %}{% set top = 'T' %}{{ m() }}{{ top }}", "localT"},
    {"{% macro m(messages) %}{{ messages | length }}{% endmacro %}{{ m([1]) }}{{ messages | length }}", "13"},
    {"{% for x in [1, 2] %}{% macro m() %}{{ x is defined }}{% endmacro %}{{ m() }}{% endfor %}", "TrueTrue"},  // closure
    {"{% set ns = namespace(n=0) %}{% macro bump() %}{% set ns.n = ns.n + 1 %}{% endmacro %}{{ bump() }}{{ bump() }}{{ ns.n }}", "2"},
    // a call is a string value in expressions; macros call macros
    {"{% macro m(x) %}<{{ x }}>{% endmacro %}{{ 'a' + m(1) }}|{{ m('xy') | length }}|{{ m(1) ~ m(2) }}", "a<1>|4|<1><2>"},
    {"{% macro a() %}A{% endmacro %}{% macro b() %}{{ a() }}B{% endmacro %}{{ b() }}", "AB"},
    // whitespace control, trim_blocks / lstrip_blocks
    {"{%- macro m(x) -%}\n  <{{ x }}>\n{%- endmacro -%}\n{{ m(1) }}\n{% macro n() %}\n  k\n{% endmacro %}\n[{{ n() }}]", "<1>\n[  k\n]"},
    // filter blocks
    {"{% filter upper %}ab{{ 'c' }}{% endfilter %}|{% filter trim | upper %}  x  {% endfilter %}|{% filter replace('a', 'b') %}aaa{% endfilter %}",
     "ABC|X|bbb"},
    // indent
    {"{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, first=true) }}|{{ 'a\n\nb\n' | indent(blank=true) }}|{{ 'a\r\nb' | indent('> ') }}",
     "a\n  b\n\n  c|  a\n  b|a\n    \n    b\n    |a\n> b"},
    // Markup: + escapes the plain side (functionary v3.1's tools JSON); ~ makes plain text
    {"{{ 'x'|safe + '\"<' }}|{{ '\"' + '&'|safe }}|{{ '<'|e|e }}|{{ ('a'|safe) ~ '<' }}|{{ ('<'|safe + '>') | length }}",
     "x&#34;&lt;|&#34;&|&lt;|a<|5"},
  };
  expect_renders(cases);
}

TEST(ChatTemplateSemantics, TrailingNewlineDroppedAndVariables) {
  EXPECT_EQ(render_ok("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}\n", {}, true, "<s>", "</s>"),
            "<s>|</s>|True");
  EXPECT_EQ(render_ok("x\n\n", {}, false, "", ""), "x\n");
}

TEST(ChatTemplateSemantics, RenderJsonContext) {
  Result<ChatTemplate> t = ChatTemplate::parse(
      "{% for m in messages %}{{ m.role }}:{{ m.content }}{% if m.tool_calls %}+{{ m.tool_calls | tojson }}{% endif %};"
      "{% endfor %}{{ custom | tojson }}");
  ASSERT_TRUE(t.ok()) << t.message();
  Result<std::string> out = t->render_json(
      R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null,
          "tool_calls": [{"z": 1, "a": 2}]}], "custom": {"b": 1.5, "a": [true, null, "é"]}})");
  ASSERT_TRUE(out.ok()) << out.message();
  // Keys keep their JSON order (as Python's dicts), so tojson output matches HF's.
  EXPECT_EQ(*out, "user:q;assistant:None+[{\"z\": 1, \"a\": 2}];{\"b\": 1.5, \"a\": [true, null, \"é\"]}");
  EXPECT_FALSE(t->render_json("not json").ok());
  EXPECT_FALSE(t->render_json("[1, 2]").ok());
}

// Repeating an empty sequence by a huge count must be instant (it once spun forever).
TEST(ChatTemplateSemantics, EmptyRepetitionByHugeCount) {
  for (const char* src : {"{{ [] * 9223372036854775807 }}", "{{ '' * 9223372036854775807 }}|",
                          "{{ 9223372036854775807 * '' }}|"}) {
    Result<ChatTemplate> t = ChatTemplate::parse(src);
    ASSERT_TRUE(t.ok()) << src;
    Result<std::string> out = t->render(kNoSystem, false, "", "");
    ASSERT_TRUE(out.ok()) << src << ": " << out.message();
  }
}

TEST(ChatTemplateSemantics, MoveAndEmpty) {
  Result<ChatTemplate> t = ChatTemplate::parse("{{ messages | length }}");
  ASSERT_TRUE(t.ok());
  ChatTemplate moved = std::move(t).value();
  Result<std::string> out = moved.render(kNoSystem, false, "", "");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "3");
  ChatTemplate empty;
  EXPECT_FALSE(empty.render(kNoSystem, false, "", "").ok());
}

#ifdef LUMEN_TEST_DATA_DIR
// The chat template parser takes untrusted input (a GGUF's tokenizer.chat_template, a
// request's template): mutants of the real templates of tests/data/chat_templates (spans
// deleted, duplicated, swapped; hostile fragments such as self-calling macros and unclosed
// tags spliced in) must parse and render to a result or a Status, in bounded time. Runs
// under ASan + UBSan in `make test` (the Fuzz tests).
TEST(ChatTemplateFuzz, MutatedRealTemplatesFailCleanly) {
  const std::string dir = std::string(LUMEN_TEST_DATA_DIR) + "/chat_templates/";
  const auto spec = nlohmann::ordered_json::parse(read_file(dir + "conversations.json"));
  nlohmann::ordered_json conv;
  for (const auto& c : spec["conversations"]) {
    if (c["name"] == "tools-two-calls-string-arguments") conv = c;
  }
  ASSERT_FALSE(conv.is_null());
  static constexpr const char* kFragments[] = {
      "{%", "%}", "{{", "}}", "{%- ", " -%}", "(", ")", "[", "]", "'", "|indent(2)", "|safe", "|e", "|tojson",
      "{% macro m(a, b=1) %}{{ m(a, b) }}{% endmacro %}{{ m(1) }}",
      "{% macro n(x) %}{% for i in range(1000) %}{{ n(x ~ x) }}{% endfor %}{% endmacro %}{{ n('ab') }}",
      "{% endmacro %}", "{% filter upper %}", "{% endfilter %}", "{% for x in messages %}", "{% endfor %}",
      "{{ m(z=1) }}", "{% call m() %}", "{% set x = x ~ x %}",
  };
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  auto next = [&rng](uint64_t n) {  // xorshift64*, in [0, n)
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return static_cast<size_t>((rng * 0x2545F4914F6CDD1Dull) % n);
  };
  const auto t0 = std::chrono::steady_clock::now();
  int n_ok = 0, n_err = 0;
  for (const auto& [tname, templ] : spec["templates"].items()) {
    const std::string source = read_file(dir + templ["file"].get<std::string>());
    ASSERT_FALSE(source.empty()) << tname;
    nlohmann::ordered_json ctx;  // render_jinja2.py's context()
    ctx["messages"] = conv["messages"];
    ctx["tools"] = conv["tools"];
    ctx["add_generation_prompt"] = conv["add_generation_prompt"];
    ctx["bos_token"] = templ["bos_token"];
    ctx["eos_token"] = templ["eos_token"];
    if (templ.contains("extra")) {
      for (const auto& [k, v] : templ["extra"].items()) ctx[k] = v;
    }
    const std::string ctx_json = ctx.dump();
    for (int variant = 0; variant < 100; ++variant) {
      std::string s = source;
      for (int edits = 1 + static_cast<int>(next(3)); edits > 0; --edits) {
        const size_t at = next(s.size() + 1);
        const size_t len = std::min(s.size() - at, next(64));
        switch (next(4)) {
          case 0: s.erase(at, len); break;
          case 1: s.insert(at, s.substr(at, len)); break;
          case 2: s.insert(at, kFragments[next(std::size(kFragments))]); break;
          default:
            if (len > 1) std::swap(s[at], s[at + len - 1]);
        }
      }
      Result<ChatTemplate> t = ChatTemplate::parse(s);
      if (!t.ok()) {
        EXPECT_EQ(t.message().rfind("chat template", 0), 0u) << t.message();
        ++n_err;
        continue;
      }
      Result<std::string> out = t->render_json(ctx_json);
      (out.ok() ? n_ok : n_err) += 1;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ chat ] %d mutants rendered, %d refused, %.1f s\n", n_ok, n_err, seconds);
  EXPECT_GT(n_ok, 0);
  EXPECT_GT(n_err, 0);
}
#endif

}  // namespace
}  // namespace lumen::tok
