#include "server/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <ctime>

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
constexpr std::string_view kPythonTag = "<|python_tag|>";     // Llama 3.1's token before a call
constexpr std::string_view kR7bAction = "<|START_ACTION|>";
constexpr std::string_view kR7bActionEnd = "<|END_ACTION|>";
constexpr std::string_view kR7bOther[] = {"<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_THINKING|>",
                                          "<|END_THINKING|>"};
constexpr std::string_view kR1Calls = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kR1CallsEnd = "<｜tool▁calls▁end｜>";
constexpr std::string_view kR1Call = "<｜tool▁call▁begin｜>";
constexpr std::string_view kR1CallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kR1Sep = "<｜tool▁sep｜>";
constexpr std::string_view kFireCalls = "functools[";  // after a space; the "[" opens the array
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";

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

// firefunction-v2's template reads the tools as a JSON text `functions` and the time as
// `datetime` (the request's chat_template_kwargs may override both).
void add_firefunction_vars(Json& ctx, const Json& tools) {
  ctx["functions"] = tools.dump(2);
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[64];
  std::strftime(buf, sizeof buf, "%b %d %Y %H:%M:%S GMT", &utc);
  ctx["datetime"] = std::string(buf);
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

bool is_tool(const ToolRequest& tools, std::string_view name) {
  return std::any_of(tools.functions.begin(), tools.functions.end(),
                     [&](const ToolFunction& f) { return f.name == name; });
}

// A call object -> ToolCall, if it names one of the tools and has an arguments object.
bool to_call(const Json& j, const ToolRequest& tools, ToolCall* out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const std::string name = j["name"].get<std::string>();
  if (!is_tool(tools, name)) return false;
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  if (!j.contains(key)) return false;
  Json args = j[key];
  if (args.is_string()) args = parse(args.get<std::string>());  // double-encoded
  if (!args.is_object()) return false;
  out->name = name;
  out->arguments = dump(args);
  return true;
}

// Scans JSON text from text[pos], brackets counted outside strings. With stop_at_comma: the
// first ',' at depth 0 (text.size() when there is none). Otherwise text[pos] is '{' or '[':
// one past the bracket that closes it (npos when it does not close).
size_t scan_json(std::string_view text, size_t pos, bool stop_at_comma) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = pos; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0 && !stop_at_comma) return i + 1;
      depth = std::max(depth, 0);
    } else if (c == ',' && depth == 0 && stop_at_comma) {
      return i;
    }
  }
  return stop_at_comma ? text.size() : std::string_view::npos;
}
size_t json_value_end(std::string_view text, size_t pos) { return scan_json(text, pos, false); }

// A call from a name and an arguments text (an object, or a string holding one).
bool named_call(std::string_view name, std::string_view args_text, const ToolRequest& tools, ToolCall* out) {
  if (!is_tool(tools, name)) return false;
  Json args = parse(trim(args_text));
  if (args.is_string()) args = parse(args.get<std::string>());
  if (!args.is_object()) return false;
  out->name = std::string(name);
  out->arguments = dump(args);
  return true;
}

std::string erase_all(std::string s, std::string_view what) {
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at)) s.erase(at, what.size());
  return s;
}

// command-r7b: the action block's array of {"tool_call_id", "tool_name", "parameters"}.
ToolOutput parse_command_r7b(std::string_view text, const ToolRequest& tools) {
  ToolOutput none{{}, std::string(text)};
  const size_t open = text.find(kR7bAction);
  ToolOutput out;
  std::string content;
  if (open != std::string_view::npos) {
    const size_t body = open + kR7bAction.size();
    size_t close = text.find(kR7bActionEnd, body);
    const size_t after = close == std::string_view::npos ? text.size() : close + kR7bActionEnd.size();
    if (close == std::string_view::npos) close = text.size();
    const Json actions = parse(trim(text.substr(body, close - body)));
    if (actions.is_discarded()) return none;
    for (const Json& a : actions.is_array() ? actions : Json::array({actions})) {
      ToolCall call;
      if (!a.is_object() || !a.contains("tool_name") || !a["tool_name"].is_string() || !a.contains("parameters"))
        return none;
      const Json& p = a["parameters"];
      if (!named_call(a["tool_name"].get<std::string>(), p.is_string() ? p.get<std::string>() : dump(p), tools, &call))
        return none;
      out.calls.push_back(std::move(call));
    }
    content = std::string(text.substr(0, open)) + std::string(text.substr(after));
  } else {
    content = std::string(text);
  }
  for (std::string_view m : kR7bOther) content = erase_all(std::move(content), m);
  out.content = std::string(trim(content));
  return out;
}

// deepseek-r1: calls between kR1Calls and kR1CallsEnd, each "function" kR1Sep NAME, then the
// arguments, usually fenced as ```json ... ```.
ToolOutput parse_deepseek_r1(std::string_view text, const ToolRequest& tools) {
  ToolOutput none{{}, std::string(text)};
  const size_t open = text.find(kR1Calls);
  if (open == std::string_view::npos) return none;
  ToolOutput out;
  size_t pos = open + kR1Calls.size();
  for (;;) {
    const size_t at = std::min(text.find_first_not_of(" \n\r\t", pos), text.size());
    if (text.substr(at).starts_with(kR1CallsEnd)) {
      pos = at + kR1CallsEnd.size();
      break;
    }
    if (at >= text.size()) {  // cut off after the last call
      pos = at;
      break;
    }
    if (!text.substr(at).starts_with(kR1Call)) return none;
    const size_t sep = text.find(kR1Sep, at);
    if (sep == std::string_view::npos) return none;
    const size_t name_begin = sep + kR1Sep.size();
    const size_t nl = text.find('\n', name_begin);
    if (nl == std::string_view::npos) return none;
    const std::string_view name = trim(text.substr(name_begin, nl - name_begin));
    const size_t brace = text.find('{', nl);
    if (brace == std::string_view::npos) return none;
    const std::string_view fence = trim(text.substr(nl, brace - nl));
    if (!fence.empty() && fence != "```json" && fence != "```") return none;
    const size_t end = json_value_end(text, brace);
    if (end == std::string_view::npos) return none;
    ToolCall call;
    if (!named_call(name, text.substr(brace, end - brace), tools, &call)) return none;
    out.calls.push_back(std::move(call));
    pos = end;
    pos = std::min(text.find_first_not_of(" \n\r\t`", pos), text.size());
    if (text.substr(pos).starts_with(kR1CallEnd)) pos += kR1CallEnd.size();
  }
  out.content = std::string(trim(std::string(text.substr(0, open)) + std::string(text.substr(pos))));
  return out;
}

// A function name as OpenAI allows them: [A-Za-z0-9_-]+ (and '.', which some tools use).
size_t name_end(std::string_view text, size_t pos) {
  while (pos < text.size() && (std::isalnum(static_cast<unsigned char>(text[pos])) || text[pos] == '_' ||
                               text[pos] == '-' || text[pos] == '.'))
    ++pos;
  return pos;
}

// functionary-v3.2: [>>>]NAME\n{ARGS} ... ; NAME "all" is text up to the next ">>>"; the
// python tool may take raw code instead of an object.
ToolOutput parse_functionary_v32(std::string_view text, const ToolRequest& tools) {
  ToolOutput none{{}, std::string(text)};
  ToolOutput out;
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text.substr(pos).starts_with(">>>")) pos += 3;
    const size_t ne = name_end(text, pos);
    if (ne == pos || ne >= text.size() || text[ne] != '\n') return none;
    const std::string_view name = text.substr(pos, ne - pos);
    const size_t body = ne + 1;
    size_t next = text.find(">>>", body);
    if (next == std::string_view::npos) next = text.size();
    if (name == "all") {
      content += text.substr(body, next - body);
      pos = next;
      continue;
    }
    ToolCall call;
    const std::string_view rest = trim(text.substr(body, next - body));
    if (!rest.empty() && rest.front() == '{') {
      const size_t end = json_value_end(text, text.find('{', body));
      if (end == std::string_view::npos || !named_call(name, text.substr(body, end - body), tools, &call)) return none;
      if (!trim(text.substr(end, next - end)).empty()) return none;
    } else if ((name == "python" || name == "ipython") && is_tool(tools, name)) {
      call.name = std::string(name);
      call.arguments = dump(Json{{"code", std::string(rest)}});
    } else {
      return none;
    }
    out.calls.push_back(std::move(call));
    pos = next;
  }
  out.content = std::string(trim(content));
  return out;
}

// functionary-v3.1: <function=NAME>{ARGS}</function> among text; <|python_tag|>CODE to the end.
ToolOutput parse_functionary_v31(std::string_view text, const ToolRequest& tools) {
  ToolOutput none{{}, std::string(text)};
  ToolOutput out;
  std::string content;
  size_t pos = 0;
  for (;;) {
    const size_t open = text.find(kFunctionOpen, pos);
    const size_t tag = text.find(kPythonTag, pos);
    if (tag != std::string_view::npos && (open == std::string_view::npos || tag < open)) {
      const char* py = is_tool(tools, "python") ? "python" : is_tool(tools, "ipython") ? "ipython" : nullptr;
      if (py == nullptr) return none;
      content += text.substr(pos, tag - pos);
      out.calls.push_back({py, dump(Json{{"code", std::string(text.substr(tag + kPythonTag.size()))}})});
      break;
    }
    if (open == std::string_view::npos) {
      content += text.substr(pos);
      break;
    }
    content += text.substr(pos, open - pos);
    const size_t name_begin = open + kFunctionOpen.size();
    const size_t ne = name_end(text, name_begin);
    if (ne >= text.size() || text[ne] != '>') return none;
    const size_t brace = text.find_first_not_of(" \n\r\t", ne + 1);
    if (brace == std::string_view::npos || text[brace] != '{') return none;
    const size_t end = json_value_end(text, brace);
    ToolCall call;
    if (end == std::string_view::npos ||
        !named_call(text.substr(name_begin, ne - name_begin), text.substr(brace, end - brace), tools, &call))
      return none;
    out.calls.push_back(std::move(call));
    pos = end;
    const size_t close = text.find_first_not_of(" \n\r\t", pos);
    if (close != std::string_view::npos && text.substr(close).starts_with(kFunctionClose))
      pos = close + kFunctionClose.size();
  }
  if (out.calls.empty()) return none;
  out.content = std::string(trim(content));
  return out;
}

// firefunction-v2: text, then " functools[" and an array of {"name", "arguments"}.
ToolOutput parse_firefunction_v2(std::string_view text, const ToolRequest& tools) {
  ToolOutput none{{}, std::string(text)};
  const size_t open = text.find(kFireCalls);
  if (open == std::string_view::npos) return none;
  const size_t bracket = open + kFireCalls.size() - 1;
  const size_t end = json_value_end(text, bracket);
  const Json calls = end == std::string_view::npos ? Json(Json::value_t::discarded) : parse(text.substr(bracket, end - bracket));
  if (!calls.is_array() || calls.empty() || !trim(text.substr(end)).empty()) return none;
  ToolOutput out;
  for (const Json& j : calls) {
    ToolCall call;
    if (!to_call(j, tools, &call)) return none;
    out.calls.push_back(std::move(call));
  }
  out.content = std::string(trim(text.substr(0, open)));
  return out;
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

// Llama 3.1's built-in tools after <|python_tag|>: NAME.call(key=JSON, ...), e.g.
// brave_search.call(query="weather in Oslo"): a call of NAME with those arguments.
bool builtin_call(std::string_view t, const ToolRequest& tools, ToolCall* out) {
  const size_t dot = t.find(".call(");
  if (dot == 0 || dot == std::string_view::npos || !t.ends_with(")")) return false;
  const std::string_view name = t.substr(0, dot);
  const auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; };
  if (!std::all_of(name.begin(), name.end(), name_char)) return false;
  std::string_view args = t.substr(dot + 6, t.size() - dot - 7);
  Json obj = Json::object();
  while (!trim(args).empty()) {
    args = trim(args);
    const size_t key_end = name_end(args, 0);
    if (key_end == 0 || key_end >= args.size() || args[key_end] != '=') return false;
    const size_t i = scan_json(args, key_end + 1, /*stop_at_comma=*/true);  // the value's end
    const Json value = parse(trim(args.substr(key_end + 1, i - key_end - 1)));
    if (value.is_discarded()) return false;
    obj[std::string(args.substr(0, key_end))] = value;
    args = i < args.size() ? args.substr(i + 1) : std::string_view();
  }
  return named_call(name, dump(obj), tools, out);
}

ToolOutput parse_json_calls(std::string_view text, const ToolRequest& tools) {
  ToolOutput none{{}, std::string(text)};
  std::string_view t = trim(text);
  if (t.starts_with(kMistralCalls)) t = trim(t.substr(kMistralCalls.size()));
  if (t.starts_with(kPythonTag)) {
    t = trim(t.substr(kPythonTag.size()));
    if (ToolCall call; builtin_call(t, tools, &call)) return ToolOutput{{std::move(call)}, ""};
  }
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

const char* tool_format_name(ToolFormat format) {
  switch (format) {
    case ToolFormat::kJson: return "json";
    case ToolFormat::kHermes: return "hermes";
    case ToolFormat::kCommandR7b: return "command-r7b";
    case ToolFormat::kDeepseekR1: return "deepseek-r1";
    case ToolFormat::kFunctionaryV32: return "functionary-v3.2";
    case ToolFormat::kFunctionaryV31: return "functionary-v3.1";
    case ToolFormat::kFirefunctionV2: return "firefunction-v2";
  }
  return "?";
}

std::vector<std::string_view> tool_format_markers(ToolFormat format) {
  switch (format) {
    case ToolFormat::kJson: return {kMistralCalls, kPythonTag};
    case ToolFormat::kHermes: return {kOpen, kClose};
    case ToolFormat::kCommandR7b: return {kR7bAction, kR7bActionEnd, kR7bOther[0], kR7bOther[1], kR7bOther[2], kR7bOther[3]};
    case ToolFormat::kDeepseekR1: return {kR1Calls, kR1CallsEnd, kR1Call, kR1CallEnd, kR1Sep};
    case ToolFormat::kFunctionaryV31: return {kPythonTag};
    case ToolFormat::kFunctionaryV32:
    case ToolFormat::kFirefunctionV2: return {};
  }
  return {};
}

TemplateTools template_tools(std::string_view source) {
  TemplateTools tt;
  auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  tt.takes_tools = has("tools") && has("tool_call");
  if (!tt.takes_tools) return tt;
  if (has(kR1Calls)) tt.format = ToolFormat::kDeepseekR1;
  else if (has("<|END_THINKING|><|START_ACTION|>")) tt.format = ToolFormat::kCommandR7b;
  else if (has(">>>all")) tt.format = ToolFormat::kFunctionaryV32;
  else if (has(" functools[")) tt.format = ToolFormat::kFirefunctionV2;
  else if (has(kOpen)) tt.format = ToolFormat::kHermes;
  else if (has("<|start_header_id|>") && has(kFunctionOpen)) tt.format = ToolFormat::kFunctionaryV31;
  else if (has("\"parameters\": ")) tt.args_key = "parameters";
  return tt;
}

TemplateTools template_tools(std::string_view source, const tok::ChatTemplate& chat_template) {
  TemplateTools tt = template_tools(source);
  if (!tt.takes_tools) return tt;
  const Json tools = Json::array({{{"type", "function"},
                                   {"function", {{"name", "probe"}, {"description", "probe"},
                                                 {"parameters", {{"type", "object"},
                                                                 {"properties", {{"a", {{"type", "string"}}}}}}}}}}});
  auto renders = [&](const Json& arguments) {
    Json call = {{"id", "c1"}, {"type", "function"}, {"function", {{"name", "probe"}, {"arguments", arguments}}}};
    Json ctx = {{"messages", Json::array({{{"role", "user"}, {"content", "q"}},
                                          {{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({call})}},
                                          {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "r"}}})},
                {"tools", tools},
                {"add_generation_prompt", true},
                {"bos_token", ""},
                {"eos_token", ""}};
    if (tt.format == ToolFormat::kFirefunctionV2) add_firefunction_vars(ctx, tools);
    return chat_template.render_json(dump(ctx)).ok();
  };
  tt.string_arguments = !renders(Json{{"a", "x"}}) && renders("{\"a\": \"x\"}");
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
          if (!tt.string_arguments) call["function"]["arguments"] = arguments_value(c);
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
  if (tt.takes_tools && pr.tools.active()) {
    ctx["tools"] = parse(pr.tools.tools_json);
    if (tt.format == ToolFormat::kFirefunctionV2) add_firefunction_vars(ctx, ctx["tools"]);
  }
  if (!pr.template_kwargs_json.empty()) {
    const Json kwargs = parse(pr.template_kwargs_json);
    for (const auto& [k, v] : kwargs.items()) ctx[k] = v;
  }
  return dump(ctx);
}

Result<std::string> tool_call_gbnf(const ToolRequest& tools, const TemplateTools& tt) {
  // The offered functions (all, or the named one) and their arguments' schemas.
  std::vector<std::pair<std::string, Json>> offered;
  std::string args_rules;  // "args-<k>" for the k-th offered function (formats that write the name outside the JSON)
  for (size_t i = 0; i < tools.functions.size(); ++i) {
    const ToolFunction& f = tools.functions[i];
    if (tools.choice == ToolRequest::Choice::kNamed && f.name != tools.named) continue;
    Json params = parse(f.parameters);
    if (params.is_discarded() || !params.is_object()) params = Json::object();
    if (params.empty()) params = {{"type", "object"}};  // arguments are an object
    const std::string field = "tools[" + std::to_string(i) + "].function.parameters";
    auto rule = grammar::json_schema_to_gbnf_rule(dump(params), "args-" + std::to_string(offered.size()));
    if (!rule.ok()) {
      const std::string& m = rule.message();
      const std::string p = "json_schema: ";
      return error(field + ": " + (m.rfind(p, 0) == 0 ? m.substr(p.size()) : m));
    }
    args_rules += *rule;
    offered.emplace_back(f.name, std::move(params));
  }
  LUMEN_CHECK(!offered.empty());
  const bool several = tools.choice == ToolRequest::Choice::kRequired && tools.parallel;
  // One rule for a call object of any offered function: {name_key: NAME, args_key: ARGS}
  // (command-r7b's also with its tool_call_id).
  auto object_rule = [&](const std::string& name_key, const std::string& args_key, bool call_id) -> Result<std::string> {
    Json branches = Json::array();
    for (const auto& [name, params] : offered) {
      Json props = Json::object();
      Json required = Json::array();
      if (call_id) {
        Json ids = Json::array();
        for (int k = 0; k < 10; ++k) ids.push_back(std::to_string(k));
        props["tool_call_id"] = {{"type", "string"}, {"enum", ids}};
        required.push_back("tool_call_id");
      }
      props[name_key] = {{"const", name}};
      props[args_key] = params;
      required.push_back(name_key);
      required.push_back(args_key);
      branches.push_back({{"type", "object"}, {"properties", props}, {"required", required}, {"additionalProperties", false}});
    }
    const Json schema = branches.size() == 1 ? branches[0] : Json{{"anyOf", branches}};
    return grammar::json_schema_to_gbnf_rule(dump(schema), "tool-call");
  };
  // "a" ( "b" | "c" ) for the names: GBNF literals of the names followed by each rule.
  auto by_name = [&](const std::string& before, const std::string& between, const std::string& after) {
    std::string alts;
    for (size_t i = 0; i < offered.size(); ++i) {
      if (i) alts += " | ";
      alts += Json(before + offered[i].first + between).dump() + " args-" + std::to_string(i) +
              (after.empty() ? "" : " " + Json(after).dump());
    }
    return "( " + alts + " )";
  };
  const auto lit = [](std::string_view s) { return Json(std::string(s)).dump(); };
  std::string root;
  switch (tt.format) {
    case ToolFormat::kHermes: {
      LUMEN_ASSIGN_OR_RETURN(std::string call, object_rule("name", tt.args_key, false));
      root = "root ::= call-block" + std::string(several ? " ( \"\\n\" call-block )*\n" : "\n");
      root += "call-block ::= \"<tool_call>\\n\" tool-call \"\\n</tool_call>\"\n";
      return root + call;
    }
    case ToolFormat::kJson: {
      LUMEN_ASSIGN_OR_RETURN(std::string call, object_rule("name", tt.args_key, false));
      return "root ::= tool-call" + std::string(several ? " ( \"\\n\" tool-call )*\n" : "\n") + call;
    }
    case ToolFormat::kFirefunctionV2: {
      LUMEN_ASSIGN_OR_RETURN(std::string call, object_rule("name", "arguments", false));
      return "root ::= \" functools[\" tool-call" + std::string(several ? " ( \", \" tool-call )*" : "") + " \"]\"\n" + call;
    }
    case ToolFormat::kCommandR7b: {
      LUMEN_ASSIGN_OR_RETURN(std::string call, object_rule("tool_name", "parameters", true));
      return "root ::= " + lit(std::string(kR7bAction) + "[") + " tool-call" + (several ? " ( \", \" tool-call )*" : "") +
             " " + lit("]" + std::string(kR7bActionEnd)) + "\n" + call;
    }
    case ToolFormat::kDeepseekR1: {
      const std::string& args = args_rules;
      root = "root ::= " + lit(kR1Calls) + " r1-call" + (several ? "+ " : " ") + lit(kR1CallsEnd) + "\n";
      root += "r1-call ::= " + by_name(std::string(kR1Call) + "function" + std::string(kR1Sep), "\n```json\n",
                                       "\n```" + std::string(kR1CallEnd)) + "\n";
      return root + args;
    }
    case ToolFormat::kFunctionaryV32: {
      const std::string& args = args_rules;
      root = "root ::= fn-call" + std::string(several ? " ( \">>>\" fn-call )*\n" : "\n");
      root += "fn-call ::= " + by_name("", "\n", "") + "\n";
      return root + args;
    }
    case ToolFormat::kFunctionaryV31: {
      const std::string& args = args_rules;
      root = "root ::= fn-call" + std::string(several ? "+\n" : "\n");
      root += "fn-call ::= " + by_name(std::string(kFunctionOpen), ">", std::string(kFunctionClose)) + "\n";
      return root + args;
    }
  }
  return error("tools: unknown tool-call format");
}

ToolOutput parse_tool_output(std::string_view text, const ToolRequest& tools, ToolFormat format) {
  ToolOutput out{{}, std::string(text)};
  switch (format) {
    case ToolFormat::kHermes:
      if (text.find(kOpen) != std::string_view::npos) out = parse_hermes(text, tools);
      break;
    case ToolFormat::kCommandR7b: out = parse_command_r7b(text, tools); break;
    case ToolFormat::kDeepseekR1: out = parse_deepseek_r1(text, tools); break;
    case ToolFormat::kFunctionaryV32: out = parse_functionary_v32(text, tools); break;
    case ToolFormat::kFunctionaryV31: out = parse_functionary_v31(text, tools); break;
    case ToolFormat::kFirefunctionV2: out = parse_firefunction_v2(text, tools); break;
    case ToolFormat::kJson: break;
  }
  if (!out.calls.empty()) return out;
  // The json format (the fallback system message's), whatever the template's.
  ToolOutput json = parse_json_calls(text, tools);
  if (!json.calls.empty()) return json;
  return out;  // plain text (command-r7b's without its response markers)
}

}  // namespace lumen::server
