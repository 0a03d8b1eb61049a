#include "server/tool_calls.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "gguf/json_util.h"
#include "grammar/json_schema.h"

namespace lumen::server {
namespace {

// Ordered: the tools' schemas reach the template, and a call's arguments the client, in the
// order they were written.
using Json = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";  // Mistral's token before a JSON array of calls

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// A discarded value when the text is not JSON.
Json parse(std::string_view text) {
  auto r = gguf::parse_ordered_json(text);
  return r.ok() ? std::move(r).value() : Json(Json::value_t::discarded);
}

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// An OpenAI tool call's arguments string as the object templates expect (a string that is
// not JSON stays a string).
Json arguments_value(const Json& call) {
  const Json* f = call.contains("function") ? &call["function"] : nullptr;
  if (!f || !f->contains("arguments") || !(*f)["arguments"].is_string()) return Json::object();
  Json v = parse((*f)["arguments"].get<std::string>());
  return v.is_discarded() ? (*f)["arguments"] : v;
}

// One call in the json format's text: {"name": ..., "arguments": ...}.
std::string call_text(const std::string& name, const Json& arguments) {
  return dump(Json{{"name", name}, {"arguments", arguments}});
}

std::string tools_system_text(const ParsedRequest& pr) {
  std::string s =
      "You can call these functions. To call one, answer with only a JSON object per call, one per line: "
      "{\"name\": <function name>, \"arguments\": <arguments object>}.\n";
  const Json tools = parse(pr.tools.tools_json);
  if (tools.is_array())
    for (const Json& t : tools) s += dump(t.value("function", Json::object())) + "\n";
  return s;
}

// A call object -> ToolCall, if it names one of the tools and has an arguments object.
bool to_call(const Json& j, const ToolRequest& tools, ToolCall* out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const std::string name = j["name"].get<std::string>();
  if (std::none_of(tools.functions.begin(), tools.functions.end(),
                   [&](const ToolFunction& f) { return f.name == name; }))
    return false;
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  if (!j.contains(key)) return false;
  Json args = j[key];
  if (args.is_string()) args = parse(args.get<std::string>());  // double-encoded
  if (!args.is_object()) return false;
  out->name = name;
  out->arguments = dump(args);
  return true;
}

ToolOutput parse_hermes(std::string_view text, const ToolRequest& tools) {
  ToolOutput out;
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) {
      content += text.substr(pos);
      break;
    }
    content += text.substr(pos, open - pos);
    const size_t body = open + kOpen.size();
    size_t close = text.find(kClose, body);
    const size_t end = close == std::string_view::npos ? text.size() : close + kClose.size();
    if (close == std::string_view::npos) close = text.size();  // cut off at the end: still try
    ToolCall call;
    const Json j = parse(trim(text.substr(body, close - body)));
    if (j.is_discarded() || !to_call(j, tools, &call)) return ToolOutput{{}, std::string(text)};
    out.calls.push_back(std::move(call));
    pos = end;
  }
  out.content = std::string(out.calls.empty() ? text : trim(content));
  return out;
}

ToolOutput parse_json_calls(std::string_view text, const ToolRequest& tools) {
  ToolOutput none{{}, std::string(text)};
  std::string_view t = trim(text);
  if (t.starts_with(kMistralCalls)) t = trim(t.substr(kMistralCalls.size()));
  if (t.empty() || (t.front() != '{' && t.front() != '[')) return none;
  ToolOutput out;
  auto take = [&](const Json& j) {
    ToolCall call;
    if (!to_call(j, tools, &call)) return false;
    out.calls.push_back(std::move(call));
    return true;
  };
  if (const Json whole = parse(t); !whole.is_discarded()) {
    if (whole.is_array()) {
      for (const Json& j : whole)
        if (!take(j)) return none;
    } else if (!take(whole)) {
      return none;
    }
    return out.calls.empty() ? none : out;
  }
  // One object per line.
  size_t pos = 0;
  while (pos < t.size()) {
    size_t nl = t.find('\n', pos);
    if (nl == std::string_view::npos) nl = t.size();
    const std::string_view line = trim(t.substr(pos, nl - pos));
    pos = nl + 1;
    if (line.empty()) continue;
    const Json j = parse(line);
    if (j.is_discarded() || !take(j)) return none;
  }
  return out.calls.empty() ? none : out;
}

}  // namespace

TemplateTools template_tools(std::string_view source) {
  TemplateTools tt;
  tt.takes_tools = source.find("tools") != std::string_view::npos && source.find("tool_call") != std::string_view::npos;
  tt.format = tt.takes_tools && source.find(kOpen) != std::string_view::npos ? ToolFormat::kHermes : ToolFormat::kJson;
  if (tt.takes_tools && tt.format == ToolFormat::kJson && source.find("\"parameters\": ") != std::string_view::npos)
    tt.args_key = "parameters";
  return tt;
}

bool needs_tool_rendering(const ParsedRequest& pr) {
  if (pr.tools.active()) return true;
  return std::any_of(pr.tool_turns.begin(), pr.tool_turns.end(), [](const ParsedRequest::ToolTurn& t) {
    return !t.tool_calls_json.empty() || !t.tool_call_id.empty();
  });
}

std::string tool_chat_context(const ParsedRequest& pr, const TemplateTools& tt, std::string_view bos,
                              std::string_view eos) {
  Json messages = Json::array();
  bool merged_first = false;
  if (!tt.takes_tools && pr.tools.active()) {
    // The tool list goes into the system message (the first one, or a new one).
    const std::string text = tools_system_text(pr);
    merged_first = !pr.messages.empty() && pr.messages[0].role == "system";
    messages.push_back({{"role", "system"}, {"content", merged_first ? pr.messages[0].content + "\n\n" + text : text}});
  }
  for (size_t i = 0; i < pr.messages.size(); ++i) {
    const tok::ChatMessage& m = pr.messages[i];
    const ParsedRequest::ToolTurn t = i < pr.tool_turns.size() ? pr.tool_turns[i] : ParsedRequest::ToolTurn{};
    if (i == 0 && merged_first) continue;  // merged into the system message above
    Json j = {{"role", m.role}, {"content", m.content}};
    if (!t.tool_calls_json.empty()) {
      const Json calls = parse(t.tool_calls_json);
      if (tt.takes_tools) {
        Json out = Json::array();
        for (const Json& c : calls) {
          Json call = c;
          call["function"]["arguments"] = arguments_value(c);
          out.push_back(std::move(call));
        }
        j["tool_calls"] = std::move(out);
      } else {
        std::string text = m.content;
        for (const Json& c : calls) {
          if (!text.empty()) text += "\n";
          text += call_text(c["function"].value("name", ""), arguments_value(c));
        }
        j["content"] = text;
      }
    }
    if (m.role == "tool") {
      if (tt.takes_tools) {
        j["tool_call_id"] = t.tool_call_id;
      } else {
        j["role"] = "user";
        j["content"] = "Result of the call " + t.tool_call_id + ": " + m.content;
      }
    }
    messages.push_back(std::move(j));
  }
  Json ctx = {{"messages", std::move(messages)},
              {"add_generation_prompt", true},
              {"bos_token", std::string(bos)},
              {"eos_token", std::string(eos)}};
  if (tt.takes_tools && pr.tools.active()) ctx["tools"] = parse(pr.tools.tools_json);
  if (!pr.template_kwargs_json.empty()) {
    const Json kwargs = parse(pr.template_kwargs_json);
    for (const auto& [k, v] : kwargs.items()) ctx[k] = v;
  }
  return dump(ctx);
}

Result<std::string> tool_call_gbnf(const ToolRequest& tools, const TemplateTools& tt) {
  Json branches = Json::array();
  for (size_t i = 0; i < tools.functions.size(); ++i) {
    const ToolFunction& f = tools.functions[i];
    if (tools.choice == ToolRequest::Choice::kNamed && f.name != tools.named) continue;
    Json params = parse(f.parameters);
    if (params.is_discarded() || !params.is_object()) params = Json::object();
    if (params.empty()) params = {{"type", "object"}};  // arguments are an object
    const std::string field = "tools[" + std::to_string(i) + "].function.parameters";
    if (auto check = grammar::json_schema_to_gbnf(dump(params)); !check.ok()) {
      const std::string& m = check.message();
      const std::string p = "json_schema: ";
      return error(field + ": " + (m.rfind(p, 0) == 0 ? m.substr(p.size()) : m));
    }
    branches.push_back({{"type", "object"},
                        {"properties", {{"name", {{"const", f.name}}}, {tt.args_key, params}}},
                        {"required", {"name", tt.args_key}},
                        {"additionalProperties", false}});
  }
  LUMEN_CHECK(!branches.empty());
  const Json schema = branches.size() == 1 ? branches[0] : Json{{"anyOf", branches}};
  LUMEN_ASSIGN_OR_RETURN(std::string gbnf, grammar::json_schema_to_gbnf(dump(schema)));
  // The converter's start rule becomes the call rule; nothing else refers to "root".
  LUMEN_CHECK(gbnf.rfind("root ::= ", 0) == 0);
  gbnf = "tool-call ::= " + gbnf.substr(9);
  const bool several = tools.choice == ToolRequest::Choice::kRequired && tools.parallel;
  std::string root;
  if (tt.format == ToolFormat::kHermes) {
    root = "root ::= call-block";
    root += several ? " ( \"\\n\" call-block )*\n" : "\n";
    root += "call-block ::= \"<tool_call>\\n\" tool-call \"\\n</tool_call>\"\n";
  } else {
    root = std::string("root ::= tool-call") + (several ? " ( \"\\n\" tool-call )*\n" : "\n");
  }
  return root + gbnf;
}

ToolOutput parse_tool_output(std::string_view text, const ToolRequest& tools, ToolFormat format) {
  if (format == ToolFormat::kHermes && text.find(kOpen) != std::string_view::npos) return parse_hermes(text, tools);
  return parse_json_calls(text, tools);
}

}  // namespace lumen::server
