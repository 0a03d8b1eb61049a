// Tool calling's pure parts: the request fields, the output parser (tool_choice auto), the
// call grammar (required / named) and the template context.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "grammar/compiled_grammar.h"
#include "grammar/matcher.h"

namespace lumen::server {
namespace {

using Json = nlohmann::json;

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                  "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}}])";

ParsedRequest chat(const std::string& extra) {
  const std::string body = R"({"messages": [{"role": "user", "content": "hi"}], "tools": )" + std::string(kTools) +
                           (extra.empty() ? "" : ", " + extra) + "}";
  ParserLimits l;
  l.n_vocab = 100;
  l.n_ctx = 100;
  auto r = parse_generation_request(body, Endpoint::kChatCompletions, l);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? *r : ParsedRequest{};
}

Status parse_error(const std::string& body, Endpoint e = Endpoint::kChatCompletions) {
  ParserLimits l;
  l.n_vocab = 100;
  l.n_ctx = 100;
  auto r = parse_generation_request(body, e, l);
  return r.ok() ? Status() : r.status();
}

TEST(ToolRequestParse, ChoicesAndErrors) {
  EXPECT_EQ(chat("").tools.choice, ToolRequest::Choice::kAuto);
  EXPECT_EQ(chat(R"("tool_choice": "none")").tools.choice, ToolRequest::Choice::kNone);
  EXPECT_EQ(chat(R"("tool_choice": "required")").tools.choice, ToolRequest::Choice::kRequired);
  const ParsedRequest named = chat(R"("tool_choice": {"type": "function", "function": {"name": "now"}})");
  EXPECT_EQ(named.tools.choice, ToolRequest::Choice::kNamed);
  EXPECT_EQ(named.tools.named, "now");
  ASSERT_EQ(named.tools.functions.size(), 2u);
  EXPECT_EQ(named.tools.functions[1].parameters, "{}");
  const std::string m = R"({"messages": [{"role": "user", "content": "hi"}], )";
  struct Case {
    std::string body;
    std::string want;
  };
  const Case cases[] = {
      {m + R"("tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": {"type": "function", "function": {"name": "b"}}})",
       "tool_choice.function.name: \"b\" is not one of the tools"},
      {m + R"("tool_choice": "required"})", "tool_choice: needs tools"},
      {m + R"("tool_choice": "sometimes", "tools": [{"type": "function", "function": {"name": "a"}}]})",
       "tool_choice: must be"},
      {m + R"("tools": [{"type": "function", "function": {"name": "a b"}}]})", "tools[0].function.name: must be"},
      {m + R"("tools": [{"type": "function", "function": {"name": "a"}}, {"type": "function", "function": {"name": "a"}}]})",
       "tools[1].function.name: \"a\" is given twice"},
      {m + R"("tools": [{"type": "retrieval"}]})", "tools[0].type: must be \"function\""},
      {m + R"("tools": [{"type": "function", "function": {"name": "a", "parameters": 3}}]})",
       "tools[0].function.parameters: expected an object"},
      {m + R"("tools": [{"type": "function", "function": {"name": "a"}}], "response_format": {"type": "json_object"}})",
       "response_format: cannot be combined with tools"},
      {m + R"("functions": [{"name": "a"}]})", "functions: not supported (use tools)"},
      {R"({"messages": [{"role": "tool", "content": "1"}]})", "messages[0].tool_call_id: required"},
      {R"({"messages": [{"role": "user", "content": "1", "tool_calls": [{"type": "function", "function": {"name": "a"}}]}]})",
       "messages[0].tool_calls: only on assistant messages"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}]})",
       "messages[0].tool_calls[0].function.name: required"},
  };
  for (const Case& c : cases) {
    const Status st = parse_error(c.body);
    ASSERT_FALSE(st.ok()) << c.body;
    EXPECT_NE(st.message().find(c.want), std::string::npos) << st.message();
  }
  const Status on_completions = parse_error(R"({"prompt": "x", "tools": [{"type": "function", "function": {"name": "a"}}]})",
                                            Endpoint::kCompletions);
  EXPECT_NE(on_completions.message().find("tools: tool calling is only on /v1/chat/completions"), std::string::npos);
}

TEST(ToolOutputParse, JsonFormat) {
  const ToolRequest tools = chat("").tools;
  ToolOutput o = parse_tool_output(R"( {"name": "get_weather", "arguments": {"city": "Paris"}} )", tools,
                                   ToolFormat::kJson);
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(o.calls[0].arguments), Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(o.content, "");
  // Llama 3's "parameters", double-encoded arguments, several calls one per line, an array.
  o = parse_tool_output("{\"name\": \"now\", \"parameters\": {}}\n{\"name\": \"get_weather\", \"arguments\": "
                        "\"{\\\"city\\\": \\\"Rome\\\"}\"}",
                        tools, ToolFormat::kJson);
  ASSERT_EQ(o.calls.size(), 2u);
  EXPECT_EQ(o.calls[0].arguments, "{}");
  EXPECT_EQ(Json::parse(o.calls[1].arguments)["city"], "Rome");
  o = parse_tool_output(R"([{"name": "now", "arguments": {}}, {"name": "now", "arguments": {}}])", tools,
                        ToolFormat::kJson);
  EXPECT_EQ(o.calls.size(), 2u);
  // Not calls: plain text, an unknown function, no arguments, a broken object, JSON that is no call.
  for (const char* text : {"It is sunny in Paris.", R"({"name": "rain", "arguments": {}})", R"({"name": "now"})",
                           R"({"name": "now", "arguments": {})", R"({"city": "Paris"})", "{\"name\": \"now\", \"arguments\": {}}\nbye"}) {
    o = parse_tool_output(text, tools, ToolFormat::kJson);
    EXPECT_TRUE(o.calls.empty()) << text;
    EXPECT_EQ(o.content, text);
  }
}

TEST(ToolOutputParse, HermesFormat) {
  const ToolRequest tools = chat("").tools;
  ToolOutput o = parse_tool_output(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 2}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
      tools, ToolFormat::kHermes);
  ASSERT_EQ(o.calls.size(), 2u);
  EXPECT_EQ(o.content, "Let me check.");
  EXPECT_EQ(Json::parse(o.calls[0].arguments)["days"], 2);
  EXPECT_EQ(o.calls[1].name, "now");
  // Cut off before its closing tag: still a call. A broken one: everything is content.
  o = parse_tool_output("<tool_call>\n{\"name\": \"now\", \"arguments\": {}}", tools, ToolFormat::kHermes);
  EXPECT_EQ(o.calls.size(), 1u);
  const std::string broken = "<tool_call>\n{\"name\": \"now\", \"arguments\": \n</tool_call>";
  o = parse_tool_output(broken, tools, ToolFormat::kHermes);
  EXPECT_TRUE(o.calls.empty());
  EXPECT_EQ(o.content, broken);
  // Without the tag the json format still applies.
  EXPECT_EQ(parse_tool_output(R"({"name": "now", "arguments": {}})", tools, ToolFormat::kHermes).calls.size(), 1u);
}

TEST(ToolOutputParse, NativeFormats) {
  const ToolRequest tools = chat("").tools;
  struct Case {
    ToolFormat format;
    std::string text;
    std::vector<std::string> names;  // empty: no calls, the text is content
    std::string content;
  };
  const std::string oslo = R"({"city": "Oslo"})";
  const Case cases[] = {
      {ToolFormat::kCommandR7b,
       "<|START_THINKING|>I need the weather.<|END_THINKING|><|START_ACTION|>[\n  {\"tool_call_id\": \"0\", "
       "\"tool_name\": \"get_weather\", \"parameters\": " + oslo + "},\n  {\"tool_call_id\": \"1\", \"tool_name\": "
       "\"now\", \"parameters\": {}}\n]<|END_ACTION|>",
       {"get_weather", "now"}, "I need the weather."},
      {ToolFormat::kCommandR7b, "<|START_RESPONSE|>It is sunny.<|END_RESPONSE|>", {}, "It is sunny."},
      {ToolFormat::kCommandR7b, "<|START_ACTION|>[{\"tool_name\": \"rain\", \"parameters\": {}}]<|END_ACTION|>", {},
       "<|START_ACTION|>[{\"tool_name\": \"rain\", \"parameters\": {}}]<|END_ACTION|>"},
      {ToolFormat::kDeepseekR1,
       "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" + oslo +
           "\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```"
           "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       {"get_weather", "now"}, "Checking."},
      {ToolFormat::kDeepseekR1,  // cut off after its first call
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜>",
       {"now"}, ""},
      {ToolFormat::kDeepseekR1,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{\n```<｜tool▁call▁end｜>", {},
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{\n```<｜tool▁call▁end｜>"},
      {ToolFormat::kFunctionaryV32, "all\nLet me look.>>>get_weather\n" + oslo + ">>>now\n{}", {"get_weather", "now"},
       "Let me look."},
      {ToolFormat::kFunctionaryV32, "get_weather\n" + oslo, {"get_weather"}, ""},
      {ToolFormat::kFunctionaryV32, "all\nJust text, no calls.", {}, "Just text, no calls."},
      {ToolFormat::kFunctionaryV32, "get_weather\n{\"city\": ", {}, "get_weather\n{\"city\": "},
      {ToolFormat::kFunctionaryV31, "Sure. <function=get_weather>" + oslo + "</function><function=now>{}</function>",
       {"get_weather", "now"}, "Sure."},
      {ToolFormat::kFunctionaryV31, "<function=rain>{}</function>", {}, "<function=rain>{}</function>"},
      {ToolFormat::kFirefunctionV2, "On it. functools[{\"name\": \"get_weather\", \"arguments\": " + oslo + "}]",
       {"get_weather"}, "On it."},
      {ToolFormat::kFirefunctionV2, " functools[{\"name\": \"now\", \"arguments\": {}}] and more", {},
       " functools[{\"name\": \"now\", \"arguments\": {}}] and more"},
      // Every format also takes the json format (what the fallback system message asks for).
      {ToolFormat::kDeepseekR1, "{\"name\": \"now\", \"arguments\": {}}", {"now"}, ""},
      {ToolFormat::kJson, "<|python_tag|>{\"name\": \"now\", \"parameters\": {}}", {"now"}, ""},
      // Llama 3.1's built-in tool form.
      {ToolFormat::kJson, "<|python_tag|>get_weather.call(city=\"Oslo\")", {"get_weather"}, ""},
      {ToolFormat::kJson, "<|python_tag|>get_weather.call(city=Oslo)", {}, "<|python_tag|>get_weather.call(city=Oslo)"},
      {ToolFormat::kJson, "<|python_tag|>rain.call(city=\"Oslo\")", {}, "<|python_tag|>rain.call(city=\"Oslo\")"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(tool_format_name(c.format)) + ": " + c.text);
    const ToolOutput o = parse_tool_output(c.text, tools, c.format);
    ASSERT_EQ(o.calls.size(), c.names.size());
    for (size_t i = 0; i < c.names.size(); ++i) EXPECT_EQ(o.calls[i].name, c.names[i]);
    if (!c.names.empty() && c.names[0] == "get_weather") {
      EXPECT_EQ(Json::parse(o.calls[0].arguments), Json::parse(oslo));
    }
    EXPECT_EQ(o.content, c.content);
  }
  // functionary's python tool takes raw code.
  ToolRequest py = tools;
  py.functions.push_back({"python", "{}"});
  ToolOutput o = parse_tool_output("<|python_tag|>print(1 + 1)", py, ToolFormat::kFunctionaryV31);
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(Json::parse(o.calls[0].arguments)["code"], "print(1 + 1)");
  o = parse_tool_output("<|python_tag|>get_weather.call(city=\"a, b\", days=2, opts={\"x\": [1, 2]})", tools,
                        ToolFormat::kJson);
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(Json::parse(o.calls[0].arguments), Json::parse(R"({"city": "a, b", "days": 2, "opts": {"x": [1, 2]}})"));
  o = parse_tool_output(">>>python\nprint(2)", py, ToolFormat::kFunctionaryV32);
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(Json::parse(o.calls[0].arguments)["code"], "print(2)");
}

// Model output is whatever the sampler drew: cut, spliced and mutated native-format texts
// never crash a parser (the suite runs this under ASan), and whatever comes out as a call
// names an offered tool and carries a JSON object.
TEST(ToolOutputParse, MutatedNativeOutputsNeverCrash) {
  const ToolRequest tools = chat("").tools;
  const std::vector<std::string> seeds = {
      "<|START_THINKING|>x<|END_THINKING|><|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"now\", "
      "\"parameters\": {}}]<|END_ACTION|>",
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"a\\\"}\"}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      "all\nhi>>>get_weather\n{\"city\": \"O\"}>>>now\n{}",
      "<function=now>{}</function><|python_tag|>x",
      " functools[{\"name\": \"now\", \"arguments\": {\"a\": [1, {\"b\": \"]}\"}]}}]",
      "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
      "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]",
  };
  const ToolFormat formats[] = {ToolFormat::kJson,           ToolFormat::kHermes,          ToolFormat::kCommandR7b,
                                ToolFormat::kDeepseekR1,     ToolFormat::kFunctionaryV32, ToolFormat::kFunctionaryV31,
                                ToolFormat::kFirefunctionV2};
  std::mt19937 rng(18);
  const std::string alphabet = "{}[]\":,\\ \n>=<|a0";
  int n_calls = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string t = seeds[rng() % seeds.size()];
    const int n_edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < n_edits && !t.empty(); ++e) {
      const size_t at = rng() % t.size();
      switch (rng() % 4) {
        case 0: t.erase(at, 1 + rng() % 8); break;
        case 1: t.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 2: t[at] = static_cast<char>(rng() % 256); break;
        default: t = t.substr(0, at); break;  // cut off
      }
    }
    for (ToolFormat f : formats) {
      const ToolOutput o = parse_tool_output(t, tools, f);
      for (const ToolCall& c : o.calls) {
        ++n_calls;
        EXPECT_TRUE(c.name == "now" || c.name == "get_weather") << c.name;
        EXPECT_TRUE(Json::parse(c.arguments, nullptr, false).is_object()) << c.arguments;
      }
    }
  }
  EXPECT_GT(n_calls, 0);  // some mutants still parse
}

// Every text of the call grammar parses back into calls that name the right function.
TEST(ToolCallGrammar, AcceptsCallsAndRefusesOthers) {
  auto vocab = grammar::TokenTable::from_pieces({"a"}, {});
  for (ToolFormat format : {ToolFormat::kJson, ToolFormat::kHermes}) {
    ToolRequest named = chat(R"("tool_choice": {"type": "function", "function": {"name": "get_weather"}})").tools;
    auto gbnf = tool_call_gbnf(named, TemplateTools{true, format});
    ASSERT_TRUE(gbnf.ok()) << gbnf.message();
    auto g = grammar::CompiledGrammar::from_gbnf(*gbnf, vocab);
    ASSERT_TRUE(g.ok()) << g.message() << "\n" << *gbnf;
    auto accepts = [&](const std::string& text) {
      grammar::GrammarMatcher m(*g);
      return m.accept_bytes(text) && m.can_end();
    };
    const std::string call = R"({"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}})";
    const std::string wrap = format == ToolFormat::kHermes ? "<tool_call>\n" + call + "\n</tool_call>" : call;
    EXPECT_TRUE(accepts(wrap)) << *gbnf;
    EXPECT_EQ(parse_tool_output(wrap, named, format).calls.size(), 1u);
    EXPECT_FALSE(accepts(format == ToolFormat::kHermes ? call : "<tool_call>\n" + call + "\n</tool_call>"));
    EXPECT_FALSE(accepts(R"({"name": "now", "arguments": {}})"));                          // another function
    EXPECT_FALSE(accepts(R"({"name": "get_weather", "arguments": {"days": 3}})"));          // city is required
    EXPECT_FALSE(accepts(R"({"name": "get_weather", "arguments": {"city": 3}})"));          // a string
    ToolRequest required = chat(R"("tool_choice": "required")").tools;
    auto g2 = grammar::CompiledGrammar::from_gbnf(*tool_call_gbnf(required, TemplateTools{true, format}), vocab);
    ASSERT_TRUE(g2.ok());
    grammar::GrammarMatcher m(*g2);
    const std::string now = R"({"name": "now", "arguments": {}})";
    const std::string two = format == ToolFormat::kHermes
                                ? wrap + "\n<tool_call>\n" + now + "\n</tool_call>"
                                : wrap + "\n" + now;
    EXPECT_TRUE(m.accept_bytes(two) && m.can_end());  // parallel_tool_calls: several
  }
  ToolRequest bad = chat(R"("tool_choice": "required")").tools;
  bad.functions[1].parameters = R"({"type": "object", "properties": {"x": {"type": "array", "uniqueItems": true}}})";
  auto err = tool_call_gbnf(bad, TemplateTools{});
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.message().find("tools[1].function.parameters: /properties/x: unsupported keyword 'uniqueItems'"),
            std::string::npos)
      << err.message();
}

// The native formats' call grammars: a call (two with parallel calls) in the format is a
// text of the grammar and parses back; the json form, another function or bad arguments are not.
TEST(ToolCallGrammar, NativeFormats) {
  auto vocab = grammar::TokenTable::from_pieces({"a"}, {});
  const std::string w = R"({"city": "Oslo", "days": 3})";
  struct Case {
    ToolFormat format;
    std::string one;  // get_weather(w)
    std::string two;  // get_weather(w), now({})
  };
  const Case cases[] = {
      {ToolFormat::kCommandR7b,
       R"(<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": )" + w + "}]<|END_ACTION|>",
       R"(<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": )" + w +
           R"(}, {"tool_call_id": "1", "tool_name": "now", "parameters": {}}]<|END_ACTION|>)"},
      {ToolFormat::kDeepseekR1,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" + w +
           "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n" + w +
           "\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜>"
           "<｜tool▁calls▁end｜>"},
      {ToolFormat::kFunctionaryV32, "get_weather\n" + w, "get_weather\n" + w + ">>>now\n{}"},
      {ToolFormat::kFunctionaryV31, "<function=get_weather>" + w + "</function>",
       "<function=get_weather>" + w + "</function><function=now>{}</function>"},
      {ToolFormat::kFirefunctionV2, R"( functools[{"name": "get_weather", "arguments": )" + w + "}]",
       R"( functools[{"name": "get_weather", "arguments": )" + w + R"(}, {"name": "now", "arguments": {}}])"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(tool_format_name(c.format));
    TemplateTools tt;
    tt.takes_tools = true;
    tt.format = c.format;
    const ToolRequest named = chat(R"("tool_choice": {"type": "function", "function": {"name": "get_weather"}})").tools;
    const ToolRequest required = chat(R"("tool_choice": "required")").tools;
    auto g1 = tool_call_gbnf(named, tt);
    auto g2 = tool_call_gbnf(required, tt);
    ASSERT_TRUE(g1.ok() && g2.ok()) << g1.message() << g2.message();
    auto named_g = grammar::CompiledGrammar::from_gbnf(*g1, vocab);
    auto required_g = grammar::CompiledGrammar::from_gbnf(*g2, vocab);
    ASSERT_TRUE(named_g.ok()) << named_g.message() << "\n" << *g1;
    ASSERT_TRUE(required_g.ok()) << required_g.message() << "\n" << *g2;
    auto accepts = [](const auto& g, const std::string& text) {
      grammar::GrammarMatcher m(g);
      return m.accept_bytes(text) && m.can_end();
    };
    EXPECT_TRUE(accepts(*named_g, c.one)) << *g1;
    EXPECT_FALSE(accepts(*named_g, c.two));  // only the named function, once
    EXPECT_TRUE(accepts(*required_g, c.one));
    EXPECT_TRUE(accepts(*required_g, c.two)) << *g2;
    EXPECT_FALSE(accepts(*required_g, R"({"name": "get_weather", "arguments": )" + w + "}"));  // the json form
    std::string bad = c.one;
    bad.replace(bad.find("\"Oslo\""), 6, "7");  // city must be a string
    EXPECT_FALSE(accepts(*required_g, bad)) << bad;
    const ToolOutput o = parse_tool_output(c.two, required, c.format);
    ASSERT_EQ(o.calls.size(), 2u) << c.two;
    EXPECT_EQ(Json::parse(o.calls[0].arguments), Json::parse(w));
    EXPECT_EQ(o.calls[1].name, "now");
  }
}

TEST(ToolChatContext, NativeAndFallback) {
  ParserLimits l;
  l.n_vocab = 100;
  l.n_ctx = 100;
  const std::string body = std::string(R"({"tools": )") + kTools + R"(, "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]})";
  auto pr = parse_generation_request(body, Endpoint::kChatCompletions, l);
  ASSERT_TRUE(pr.ok()) << pr.message();
  ASSERT_TRUE(needs_tool_rendering(*pr));
  const Json native = Json::parse(tool_chat_context(*pr, {true, ToolFormat::kHermes}, "<s>", "</s>"));
  ASSERT_EQ(native["messages"].size(), 4u);
  EXPECT_EQ(native["tools"].size(), 2u);
  EXPECT_EQ(native["messages"][2]["tool_calls"][0]["function"]["arguments"]["city"], "Oslo");  // an object
  EXPECT_EQ(native["messages"][3]["role"], "tool");
  EXPECT_EQ(native["messages"][3]["tool_call_id"], "c1");
  const Json fallback = Json::parse(tool_chat_context(*pr, {false, ToolFormat::kJson}, "<s>", "</s>"));
  ASSERT_EQ(fallback["messages"].size(), 4u);
  EXPECT_FALSE(fallback.contains("tools"));
  const std::string sys = fallback["messages"][0]["content"];
  EXPECT_EQ(sys.rfind("Be brief.", 0), 0u);
  EXPECT_NE(sys.find("\"name\":\"get_weather\""), std::string::npos) << sys;
  EXPECT_EQ(fallback["messages"][2]["content"], R"({"name":"get_weather","arguments":{"city":"Oslo"}})");
  EXPECT_EQ(fallback["messages"][3]["role"], "user");
  EXPECT_NE(fallback["messages"][3]["content"].get<std::string>().find("sunny"), std::string::npos);
}

TEST(ToolTemplates, FormatFromTheSource) {
  EXPECT_FALSE(template_tools("{% for message in messages %}{{ message.content }}{% endfor %}").takes_tools);
  const TemplateTools hermes = template_tools("{% if tools %}{% for t in tools %}{{ t|tojson }}{% endfor %}{% endif %}"
                                              "{% for c in message.tool_calls %}<tool_call>{% endfor %}");
  EXPECT_TRUE(hermes.takes_tools);
  EXPECT_EQ(hermes.format, ToolFormat::kHermes);
  EXPECT_EQ(template_tools("{% if tools %}{{ tools }}{% endif %}{{ m.tool_calls }}").format, ToolFormat::kJson);
}

}  // namespace
}  // namespace lumen::server
