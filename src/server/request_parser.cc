// nlohmann::ordered_json (parsed in linear time by gguf::parse_ordered_json) keeps the key
// order of the body, so a JSON Schema's properties and the tools reach the grammar and the
// chat template in the order the client wrote them. It is used behind type checks; one
// try/catch per entry point keeps any exception it might still throw inside this adapter
// (STYLE 4).
#include "server/request_parser.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "gguf/json_util.h"

namespace lumen::server {
namespace {

using Json = nlohmann::ordered_json;

Status field_error(const std::string& path, const std::string& what) {
  return error(path + ": " + what);
}

std::string fmt_num(double x) {
  if (std::floor(x) == x && std::fabs(x) < 1e15) return std::to_string(static_cast<int64_t>(x));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// Reads typed fields of one JSON object; `prefix` names the object in error messages
// ("messages[3]"). Absent and null fields are "not given".
class ObjectReader {
 public:
  ObjectReader(const Json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  const Json* get(const char* key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  std::string path(const char* key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

  Status read_bool(const char* key, bool* out) const {
    const Json* v = get(key);
    if (!v) return Status();
    if (!v->is_boolean()) return type_error(key, "a boolean", *v);
    *out = v->get<bool>();
    return Status();
  }

  // Integers; an integral float (3.0) is accepted, 3.5 and "3" are not.
  Status read_int(const char* key, int64_t lo, int64_t hi, int64_t* out, bool* given = nullptr) const {
    const Json* v = get(key);
    if (!v) return Status();
    int64_t x = 0;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) return range_error(key, lo, hi, std::to_string(u));
      x = static_cast<int64_t>(u);
    } else if (v->is_number_integer()) {
      x = v->get<int64_t>();
    } else if (v->is_number_float()) {
      const double d = v->get<double>();
      if (!std::isfinite(d) || std::floor(d) != d) return type_error(key, "an integer", *v);
      if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
        return range_error(key, lo, hi, fmt_num(d));
      x = static_cast<int64_t>(d);
    } else {
      return type_error(key, "an integer", *v);
    }
    if (x < lo || x > hi) return range_error(key, lo, hi, std::to_string(x));
    *out = x;
    if (given) *given = true;
    return Status();
  }

  // Numbers in [lo, hi] (or (lo, hi] when lo_open).
  Status read_float(const char* key, double lo, double hi, bool lo_open, float* out) const {
    const Json* v = get(key);
    if (!v) return Status();
    if (!v->is_number()) return type_error(key, "a number", *v);
    const double d = v->get<double>();
    // The range is checked on the float the engine will see too: 1e-300 is > 0 but its
    // float is 0.
    const double f = static_cast<float>(d);
    if (!std::isfinite(d) || (lo_open ? d <= lo || f <= lo : d < lo || f < lo) || d > hi || f > hi)
      return field_error(path(key), std::string("must be in ") + (lo_open ? "(" : "[") + fmt_num(lo) + ", " +
                                        fmt_num(hi) + "], got " + fmt_num(d));
    *out = static_cast<float>(d);
    return Status();
  }

  Status read_string(const char* key, size_t max_bytes, std::string* out, bool* given = nullptr) const {
    const Json* v = get(key);
    if (!v) return Status();
    if (!v->is_string()) return type_error(key, "a string", *v);
    const std::string& s = v->get_ref<const std::string&>();
    if (s.size() > max_bytes)
      return field_error(path(key), "is " + std::to_string(s.size()) + " bytes, over the limit of " +
                                        std::to_string(max_bytes));
    *out = s;
    if (given) *given = true;
    return Status();
  }

  Status type_error(const char* key, const char* want, const Json& got) const {
    return field_error(path(key), std::string("expected ") + want + ", got " + got.type_name());
  }
  Status range_error(const char* key, int64_t lo, int64_t hi, const std::string& got) const {
    return field_error(path(key), "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                      "], got " + got);
  }

 private:
  const Json& obj_;
  std::string prefix_;
};

// Parses the body into a JSON object or says why not (without echoing the body).
Result<Json> parse_object(std::string_view body, const ParserLimits& limits) {
  if (static_cast<int64_t>(body.size()) > limits.max_body_bytes)
    return error("the request body is " + std::to_string(body.size()) + " bytes, over the limit of " +
                 std::to_string(limits.max_body_bytes));
  if (!json_depth_within(body, limits.max_depth))
    return error("the request body nests JSON deeper than " + std::to_string(limits.max_depth) + " levels");
  auto parsed = gguf::parse_ordered_json(body);
  if (!parsed.ok()) return error("the request body is " + parsed.message());
  Json j = std::move(parsed).value();
  if (!j.is_object())
    return error(std::string("the request body must be a JSON object, got ") + j.type_name());
  return j;
}

// OpenAI fields this server does not implement: accepted only at their default value.
Status check_unsupported(const ObjectReader& r, Endpoint endpoint) {
  if (const Json* v = r.get("echo"); v && !(v->is_boolean() && !v->get<bool>()))
    return field_error("echo", "not supported (only false)");
  if (const Json* v = r.get("best_of"); v && !(v->is_number_integer() && v->get<int64_t>() == 1))
    return field_error("best_of", "not supported (only 1; use n)");
  if (const Json* v = r.get("logit_bias"); v && !(v->is_object() && v->empty()))
    return field_error("logit_bias", "not supported");
  if (const Json* v = r.get("suffix"); v && !(v->is_string() && v->get_ref<const std::string&>().empty()))
    return field_error("suffix", "not supported");
  // The legacy function-calling fields; `tools` on /v1/completions.
  for (const char* key : {"functions", "tools"}) {
    if (endpoint == Endpoint::kChatCompletions && std::string_view(key) == "tools") continue;
    if (const Json* v = r.get(key); v && !(v->is_array() && v->empty()))
      return field_error(key, endpoint == Endpoint::kChatCompletions ? "not supported (use tools)"
                                                                     : "tool calling is only on /v1/chat/completions");
  }
  for (const char* key : {"function_call", "tool_choice"}) {
    if (endpoint == Endpoint::kChatCompletions && std::string_view(key) == "tool_choice") continue;
    if (const Json* v = r.get(key); v && !(v->is_string() && v->get_ref<const std::string&>() == "none"))
      return field_error(key, endpoint == Endpoint::kChatCompletions ? "not supported (use tool_choice)"
                                                                     : "tool calling is only on /v1/chat/completions");
  }
  // llama.cpp / vLLM sampling extensions that are not implemented: only their defaults.
  struct Default {
    const char* key;
    double value;
    const char* hint;
  };
  static constexpr Default kDefaults[] = {
      {"mirostat", 0, ""},         {"typical_p", 1, ""},       {"tfs_z", 1, ""},
      {"n_probs", 0, "; use logprobs / top_logprobs"},          {"dynatemp_range", 0, ""},
      {"xtc_probability", 0, ""},  {"dry_multiplier", 0, ""},  {"top_n_sigma", -1, ""},
  };
  for (const Default& d : kDefaults) {
    const Json* v = r.get(d.key);
    if (!v) continue;
    if (!v->is_number()) return r.type_error(d.key, "a number", *v);
    const double x = v->get<double>();
    if (x != d.value && !(std::string_view(d.key) == "top_n_sigma" && x <= 0))
      return field_error(d.key, "not supported (only " + fmt_num(d.value) + ")" + d.hint);
  }
  if (endpoint == Endpoint::kChatCompletions) {
    if (const Json* v = r.get("modalities"); v && !(v->is_array() && v->size() == 1 && (*v)[0] == "text"))
      return field_error("modalities", "only [\"text\"] is supported");
  }
  return Status();
}

// response_format, grammar, json_schema: at most one constraint.
Status parse_constraint(const ObjectReader& r, OutputConstraint* out) {
  using Kind = OutputConstraint::Kind;
  auto set = [&](Kind kind, std::string text, std::string field) -> Status {
    if (out->kind != Kind::kNone)
      return field_error(field.substr(0, field.find('.')), "give only one of response_format, grammar, json_schema (" +
                                                               out->field.substr(0, out->field.find('.')) +
                                                               " is given too)");
    *out = OutputConstraint{kind, std::move(text), std::move(field)};
    return Status();
  };
  if (const Json* v = r.get("response_format")) {
    if (!v->is_object()) return r.type_error("response_format", "an object", *v);
    const ObjectReader rf(*v, "response_format");
    std::string type;
    bool has_type = false;
    LUMEN_TRY(rf.read_string("type", 64, &type, &has_type));
    if (!has_type) return field_error("response_format.type", "required");
    if (type == "json_object") {
      if (const Json* schema = rf.get("schema")) {  // llama.cpp's extension
        LUMEN_TRY(set(Kind::kJsonSchema, schema->dump(), "response_format.schema"));
      } else {
        LUMEN_TRY(set(Kind::kJsonObject, "", "response_format"));
      }
    } else if (type == "json_schema") {
      const Json* js = rf.get("json_schema");
      if (!js) return field_error("response_format.json_schema", "required with type json_schema");
      if (!js->is_object()) return rf.type_error("json_schema", "an object", *js);
      const ObjectReader jr(*js, "response_format.json_schema");
      std::string name, description;
      bool strict = false;
      LUMEN_TRY(jr.read_string("name", 256, &name));
      LUMEN_TRY(jr.read_string("description", 1 << 16, &description));
      LUMEN_TRY(jr.read_bool("strict", &strict));
      const Json* schema = jr.get("schema");
      if (!schema) return field_error("response_format.json_schema.schema", "required");
      LUMEN_TRY(set(Kind::kJsonSchema, schema->dump(), "response_format.json_schema.schema"));
    } else if (type != "text") {
      return field_error("response_format.type", "must be text, json_object or json_schema; got \"" +
                                                     type.substr(0, 64) + "\"");
    }
  }
  if (const Json* v = r.get("grammar")) {
    if (!v->is_string()) return r.type_error("grammar", "a string (GBNF)", *v);
    LUMEN_TRY(set(Kind::kGbnf, v->get<std::string>(), "grammar"));
  }
  if (const Json* v = r.get("json_schema")) {
    if (!v->is_object() && !v->is_boolean()) return r.type_error("json_schema", "an object", *v);
    LUMEN_TRY(set(Kind::kJsonSchema, v->dump(), "json_schema"));
  }
  return Status();
}

Status parse_prompt(const ObjectReader& r, const ParserLimits& limits, ParsedRequest* out) {
  const Json* v = r.get("prompt");
  if (!v) return field_error("prompt", "required");
  const Json* p = v;
  // A batch of one prompt is the prompt itself; batches of several are not supported.
  if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    if (p->size() != 1) return field_error("prompt", "several prompts in one request are not supported");
    p = &(*p)[0];
  }
  if (p->is_string()) {
    out->prompt_text = p->get<std::string>();
    return Status();
  }
  if (!p->is_array()) return r.type_error("prompt", "a string or an array of token ids", *p);
  if (p->empty()) return field_error("prompt", "empty");
  if (static_cast<int64_t>(p->size()) > limits.n_ctx)
    return field_error("prompt", std::to_string(p->size()) + " tokens do not fit the context of " +
                                     std::to_string(limits.n_ctx) + " tokens");
  out->prompt_is_ids = true;
  out->prompt_ids.reserve(p->size());
  for (size_t i = 0; i < p->size(); ++i) {
    const Json& t = (*p)[i];
    const std::string where = "prompt[" + std::to_string(i) + "]";
    if (!t.is_number_integer()) return field_error(where, std::string("expected a token id, got ") + t.type_name());
    const int64_t id = t.is_number_unsigned() && t.get<uint64_t>() > INT32_MAX ? INT64_MAX : t.get<int64_t>();
    if (id < 0 || id >= limits.n_vocab)
      return field_error(where, "token id " + std::to_string(id) + " is out of range [0, " +
                                    std::to_string(limits.n_vocab) + ")");
    out->prompt_ids.push_back(static_cast<int32_t>(id));
  }
  return Status();
}

// content: a string, or an array of {"type": "text", "text": "..."} parts (joined).
Status parse_content(const Json& v, const std::string& path, std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return Status();
  }
  if (!v.is_array()) return field_error(path, std::string("expected a string or an array of parts, got ") + v.type_name());
  for (size_t j = 0; j < v.size(); ++j) {
    const std::string part_path = path + "[" + std::to_string(j) + "]";
    const Json& part = v[j];
    if (!part.is_object()) return field_error(part_path, std::string("expected an object, got ") + part.type_name());
    ObjectReader pr(part, part_path);
    std::string type;
    LUMEN_TRY(pr.read_string("type", 64, &type));
    if (type != "text") return field_error(pr.path("type"), "only \"text\" parts are supported");
    std::string text;
    bool given = false;
    LUMEN_TRY(pr.read_string("text", std::numeric_limits<size_t>::max(), &text, &given));
    if (!given) return field_error(pr.path("text"), "required");
    *out += text;
  }
  return Status();
}

// An assistant message's tool_calls: [{"id", "type": "function", "function": {"name", "arguments": string}}].
Status check_tool_calls(const Json& v, const std::string& path) {
  if (!v.is_array()) return field_error(path, std::string("expected an array, got ") + v.type_name());
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = path + "[" + std::to_string(i) + "]";
    if (!v[i].is_object()) return field_error(p, std::string("expected an object, got ") + v[i].type_name());
    ObjectReader cr(v[i], p);
    std::string type = "function", id;
    LUMEN_TRY(cr.read_string("type", 64, &type));
    if (type != "function") return field_error(cr.path("type"), "must be \"function\"");
    LUMEN_TRY(cr.read_string("id", 256, &id));
    const Json* f = cr.get("function");
    if (!f) return field_error(cr.path("function"), "required");
    if (!f->is_object()) return cr.type_error("function", "an object", *f);
    ObjectReader fr(*f, cr.path("function"));
    std::string name, arguments;
    bool has_name = false;
    LUMEN_TRY(fr.read_string("name", 256, &name, &has_name));
    if (!has_name || name.empty()) return field_error(fr.path("name"), "required");
    LUMEN_TRY(fr.read_string("arguments", std::string::npos, &arguments));
  }
  return Status();
}

// tools: [{"type": "function", "function": {"name", "description", "parameters", "strict"}}],
// tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}.
Status parse_tools(const ObjectReader& r, ToolRequest* out) {
  const Json* tools = r.get("tools");
  if (tools) {
    if (!tools->is_array()) return r.type_error("tools", "an array", *tools);
    if (tools->size() > 128) return field_error("tools", std::to_string(tools->size()) + " tools, over the limit of 128");
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string p = "tools[" + std::to_string(i) + "]";
      const Json& t = (*tools)[i];
      if (!t.is_object()) return field_error(p, std::string("expected an object, got ") + t.type_name());
      ObjectReader tr(t, p);
      std::string type;
      bool has_type = false;
      LUMEN_TRY(tr.read_string("type", 64, &type, &has_type));
      if (!has_type || type != "function") return field_error(tr.path("type"), "must be \"function\"");
      const Json* f = tr.get("function");
      if (!f) return field_error(tr.path("function"), "required");
      if (!f->is_object()) return tr.type_error("function", "an object", *f);
      ObjectReader fr(*f, tr.path("function"));
      ToolFunction fn;
      bool has_name = false;
      LUMEN_TRY(fr.read_string("name", 64, &fn.name, &has_name));
      if (!has_name) return field_error(fr.path("name"), "required");
      const bool name_ok = !fn.name.empty() && std::all_of(fn.name.begin(), fn.name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
      });
      if (!name_ok) return field_error(fr.path("name"), "must be 1 to 64 of a-z, A-Z, 0-9, _ and -");
      for (const ToolFunction& other : out->functions)
        if (other.name == fn.name) return field_error(fr.path("name"), "\"" + fn.name + "\" is given twice");
      std::string description;
      LUMEN_TRY(fr.read_string("description", 1 << 16, &description));
      bool strict = false;
      LUMEN_TRY(fr.read_bool("strict", &strict));
      if (const Json* params = fr.get("parameters")) {
        if (!params->is_object()) return fr.type_error("parameters", "an object (a JSON Schema)", *params);
        fn.parameters = params->dump();
      }
      out->functions.push_back(std::move(fn));
    }
    out->tools_json = tools->dump();
  }
  out->choice = out->functions.empty() ? ToolRequest::Choice::kNone : ToolRequest::Choice::kAuto;
  if (const Json* c = r.get("tool_choice")) {
    if (c->is_string()) {
      const std::string& s = c->get_ref<const std::string&>();
      if (s == "none") out->choice = ToolRequest::Choice::kNone;
      else if (s == "auto") out->choice = ToolRequest::Choice::kAuto;
      else if (s == "required") out->choice = ToolRequest::Choice::kRequired;
      else return field_error("tool_choice", "must be \"none\", \"auto\", \"required\" or a function; got \"" +
                                               s.substr(0, 64) + "\"");
    } else if (c->is_object()) {
      ObjectReader cr(*c, "tool_choice");
      std::string type;
      LUMEN_TRY(cr.read_string("type", 64, &type));
      if (type != "function") return field_error(cr.path("type"), "must be \"function\"");
      const Json* f = cr.get("function");
      if (!f || !f->is_object()) return field_error(cr.path("function"), "required: an object with a name");
      bool has_name = false;
      LUMEN_TRY(ObjectReader(*f, cr.path("function")).read_string("name", 64, &out->named, &has_name));
      if (!has_name) return field_error("tool_choice.function.name", "required");
      out->choice = ToolRequest::Choice::kNamed;
    } else {
      return r.type_error("tool_choice", "a string or an object", *c);
    }
    if (out->choice != ToolRequest::Choice::kNone && out->functions.empty())
      return field_error("tool_choice", "needs tools");
    if (out->choice == ToolRequest::Choice::kNamed &&
        std::none_of(out->functions.begin(), out->functions.end(),
                     [&](const ToolFunction& f) { return f.name == out->named; }))
      return field_error("tool_choice.function.name", "\"" + out->named + "\" is not one of the tools");
  }
  LUMEN_TRY(r.read_bool("parallel_tool_calls", &out->parallel));
  return Status();
}

// chat_template_kwargs: an object of extra template variables; the ones the server sets
// itself cannot be replaced.
Status parse_template_kwargs(const ObjectReader& r, std::string* out) {
  const Json* v = r.get("chat_template_kwargs");
  if (!v) return Status();
  if (!v->is_object()) return r.type_error("chat_template_kwargs", "an object", *v);
  for (const char* key : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
    if (v->contains(key))
      return field_error(std::string("chat_template_kwargs.") + key, "set by the server, cannot be given");
  if (!v->empty()) *out = v->dump();
  return Status();
}

Status parse_messages(const Json* v, const ParserLimits& limits, std::vector<tok::ChatMessage>* out,
                      std::vector<ParsedRequest::ToolTurn>* turns = nullptr) {
  if (!v) return field_error("messages", "required");
  if (!v->is_array()) return field_error("messages", std::string("expected an array, got ") + v->type_name());
  if (v->empty()) return field_error("messages", "empty");
  if (static_cast<int64_t>(v->size()) > limits.max_messages)
    return field_error("messages", std::to_string(v->size()) + " messages, over the limit of " +
                                       std::to_string(limits.max_messages));
  out->reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string path = "messages[" + std::to_string(i) + "]";
    const Json& m = (*v)[i];
    if (!m.is_object()) return field_error(path, std::string("expected an object, got ") + m.type_name());
    ObjectReader mr(m, path);
    tok::ChatMessage msg;
    ParsedRequest::ToolTurn turn;
    bool has_role = false;
    LUMEN_TRY(mr.read_string("role", 64, &msg.role, &has_role));
    if (!has_role) return field_error(mr.path("role"), "required");
    if (msg.role == "developer") msg.role = "system";  // OpenAI's newer name for it
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      return field_error(mr.path("role"), "must be one of system, developer, user, assistant, tool; got \"" +
                                              msg.role.substr(0, 64) + "\"");
    if (const Json* tc = mr.get("tool_calls"); tc && !(tc->is_array() && tc->empty())) {
      if (msg.role != "assistant") return field_error(mr.path("tool_calls"), "only on assistant messages");
      LUMEN_TRY(check_tool_calls(*tc, mr.path("tool_calls")));
      turn.tool_calls_json = tc->dump();
    }
    if (msg.role == "tool") {
      bool has_id = false;
      LUMEN_TRY(mr.read_string("tool_call_id", 256, &turn.tool_call_id, &has_id));
      if (!has_id) return field_error(mr.path("tool_call_id"), "required on tool messages");
    }
    if (const Json* c = mr.get("content")) {
      LUMEN_TRY(parse_content(*c, mr.path("content"), &msg.content));
    } else if (msg.role != "assistant") {
      return field_error(mr.path("content"), "required");
    }
    std::string name;
    LUMEN_TRY(mr.read_string("name", 256, &name));  // accepted, not used by the templates
    out->push_back(std::move(msg));
    if (turns) turns->push_back(std::move(turn));
  }
  return Status();
}

Status parse_stop(const ObjectReader& r, const ParserLimits& limits, std::vector<std::string>* out) {
  const Json* v = r.get("stop");
  if (!v) return Status();
  auto add = [&](const Json& s, const std::string& path) -> Status {
    if (!s.is_string()) return field_error(path, std::string("expected a string, got ") + s.type_name());
    const std::string& text = s.get_ref<const std::string&>();
    if (text.empty()) return field_error(path, "empty stop string");
    if (static_cast<int64_t>(text.size()) > limits.max_stop_bytes)
      return field_error(path, "is " + std::to_string(text.size()) + " bytes, over the limit of " +
                                   std::to_string(limits.max_stop_bytes));
    out->push_back(text);
    return Status();
  };
  if (v->is_string()) return add(*v, "stop");
  if (!v->is_array()) return r.type_error("stop", "a string or an array of strings", *v);
  if (static_cast<int64_t>(v->size()) > limits.max_stop)
    return field_error("stop", std::to_string(v->size()) + " stop strings, over the limit of " +
                                   std::to_string(limits.max_stop));
  for (size_t i = 0; i < v->size(); ++i) LUMEN_TRY(add((*v)[i], "stop[" + std::to_string(i) + "]"));
  return Status();
}

Status parse_sampling(const ObjectReader& r, const ParserLimits& limits, sample::SamplingParams* s,
                      bool* seed_given) {
  // OpenAI's defaults, not the CLI's.
  s->temperature = 1.0f;
  s->top_k = 0;
  s->top_p = 1.0f;
  s->min_p = 0.0f;
  s->repeat_penalty = 1.0f;
  s->presence_penalty = 0.0f;
  s->frequency_penalty = 0.0f;
  LUMEN_TRY(r.read_float("temperature", 0.0, 2.0, false, &s->temperature));
  LUMEN_TRY(r.read_float("top_p", 0.0, 1.0, true, &s->top_p));
  LUMEN_TRY(r.read_float("min_p", 0.0, 1.0, false, &s->min_p));
  int64_t top_k = 0;
  LUMEN_TRY(r.read_int("top_k", -1, limits.n_vocab, &top_k));
  s->top_k = top_k < 0 ? 0 : static_cast<int32_t>(top_k);  // -1 and 0: off
  LUMEN_TRY(r.read_float("presence_penalty", -2.0, 2.0, false, &s->presence_penalty));
  LUMEN_TRY(r.read_float("frequency_penalty", -2.0, 2.0, false, &s->frequency_penalty));
  LUMEN_TRY(r.read_float("repetition_penalty", 0.0, 10.0, true, &s->repeat_penalty));
  if (r.get("repeat_penalty")) {  // llama.cpp's name for it
    float rp = 1.0f;
    LUMEN_TRY(r.read_float("repeat_penalty", 0.0, 10.0, true, &rp));
    if (r.get("repetition_penalty") && rp != s->repeat_penalty)
      return field_error("repeat_penalty", "differs from repetition_penalty (give one of them)");
    s->repeat_penalty = rp;
  }
  for (const char* key : {"repeat_last_n", "penalty_last_n"}) {  // llama.cpp's window; -1: all
    int64_t window = s->penalty_last_n;
    LUMEN_TRY(r.read_int(key, -1, limits.n_ctx, &window));
    s->penalty_last_n = static_cast<int32_t>(window);
  }
  if (const Json* v = r.get("seed")) {
    if (v->is_number_unsigned()) s->seed = v->get<uint64_t>();
    else if (v->is_number_integer()) s->seed = static_cast<uint64_t>(v->get<int64_t>());
    else return r.type_error("seed", "an integer", *v);
    *seed_given = true;
  }
  return Status();
}

Status parse_logprobs(const ObjectReader& r, Endpoint endpoint, const ParserLimits& limits,
                      engine::GenerationParams* p) {
  if (endpoint == Endpoint::kCompletions) {
    int64_t k = -1;
    LUMEN_TRY(r.read_int("logprobs", 0, limits.max_logprobs, &k));
    p->logprobs = static_cast<int32_t>(k);
    return Status();
  }
  bool want = false;
  LUMEN_TRY(r.read_bool("logprobs", &want));
  int64_t top = -1;
  LUMEN_TRY(r.read_int("top_logprobs", 0, limits.max_logprobs, &top));
  if (top >= 0 && !want) return field_error("top_logprobs", "requires \"logprobs\": true");
  p->logprobs = want ? static_cast<int32_t>(std::max<int64_t>(top, 0)) : -1;
  return Status();
}

// "truncation" (OpenAI's values) and vLLM's "truncate_prompt_tokens".
Status parse_truncation(const ObjectReader& r, Endpoint endpoint, const ParserLimits& limits, ParsedRequest* out) {
  std::string truncation;
  LUMEN_TRY(r.read_string("truncation", 64, &truncation));
  if (!truncation.empty() && truncation != "auto" && truncation != "disabled")
    return field_error("truncation", "must be \"auto\" or \"disabled\", got '" + truncation + "'");
  if (truncation == "auto" && endpoint != Endpoint::kChatCompletions)
    return field_error("truncation", "\"auto\" drops chat turns: only on /v1/chat/completions "
                                     "(truncate_prompt_tokens cuts a prompt)");
  out->truncate_oldest_turns = truncation == "auto";
  int64_t k = 0;
  bool has_k = false;
  LUMEN_TRY(r.read_int("truncate_prompt_tokens", -1, limits.n_ctx, &k, &has_k));
  if (has_k && k == 0) return field_error("truncate_prompt_tokens", "must be >= 1 or -1, got 0");
  out->truncate_prompt_tokens = static_cast<int32_t>(k);
  return Status();
}

Status parse_generation(const Json& j, Endpoint endpoint, const ParserLimits& limits, ParsedRequest* out) {
  const ObjectReader r(j, "");
  out->endpoint = endpoint;
  LUMEN_TRY(check_unsupported(r, endpoint));
  LUMEN_TRY(r.read_string("model", limits.max_model_name_bytes, &out->model));
  if (endpoint == Endpoint::kCompletions) LUMEN_TRY(parse_prompt(r, limits, out));
  else LUMEN_TRY(parse_messages(r.get("messages"), limits, &out->messages, &out->tool_turns));

  engine::GenerationParams& p = out->params;
  int64_t max_tokens = 0, max_completion_tokens = 0;
  bool has_max_tokens = false, has_max_completion_tokens = false;
  LUMEN_TRY(r.read_int("max_tokens", 1, limits.n_ctx, &max_tokens, &has_max_tokens));
  LUMEN_TRY(r.read_int("max_completion_tokens", 1, limits.n_ctx, &max_completion_tokens,
                       &has_max_completion_tokens));
  if (has_max_tokens && has_max_completion_tokens && max_tokens != max_completion_tokens)
    return field_error("max_completion_tokens", "differs from max_tokens (give one of them)");
  out->max_tokens_given = has_max_tokens || has_max_completion_tokens;
  if (out->max_tokens_given)
    p.max_tokens = static_cast<int32_t>(has_max_completion_tokens ? max_completion_tokens : max_tokens);

  LUMEN_TRY(parse_sampling(r, limits, &p.sampling, &out->seed_given));
  LUMEN_TRY(parse_stop(r, limits, &p.stop));
  int64_t n = 1;
  LUMEN_TRY(r.read_int("n", 1, limits.max_n, &n));
  p.n = static_cast<int32_t>(n);
  LUMEN_TRY(parse_logprobs(r, endpoint, limits, &p));
  int64_t priority = 0;
  LUMEN_TRY(r.read_int("priority", -1000000, 1000000, &priority));
  p.priority = static_cast<int32_t>(priority);
  bool has_salt = false;
  LUMEN_TRY(r.read_string("cache_salt", static_cast<size_t>(limits.max_cache_salt_bytes), &p.cache_salt, &has_salt));
  if (has_salt && p.cache_salt.empty()) return field_error("cache_salt", "empty (omit it instead)");
  LUMEN_TRY(r.read_bool("ignore_eos", &p.ignore_eos));
  LUMEN_TRY(r.read_bool("speculative", &p.speculative));  // false: opt out of the server's speculation
  bool cache_prompt = true;  // llama.cpp's: the prefix cache is always on, and output is the same
  LUMEN_TRY(r.read_bool("cache_prompt", &cache_prompt));
  LUMEN_TRY(parse_constraint(r, &out->constraint));
  if (endpoint == Endpoint::kChatCompletions) {
    LUMEN_TRY(parse_template_kwargs(r, &out->template_kwargs_json));
    LUMEN_TRY(parse_tools(r, &out->tools));
    if (out->tools.active() && out->constraint.kind != OutputConstraint::Kind::kNone)
      return field_error(out->constraint.field.substr(0, out->constraint.field.find('.')),
                         "cannot be combined with tools (use tool_choice \"none\")");
  }
  LUMEN_TRY(r.read_string("user", 256, &out->user));  // a routing key (routing_key.h)
  LUMEN_TRY(parse_truncation(r, endpoint, limits, out));

  LUMEN_TRY(r.read_bool("stream", &out->stream));
  if (const Json* so = r.get("stream_options")) {
    if (!so->is_object()) return r.type_error("stream_options", "an object", *so);
    if (!out->stream) return field_error("stream_options", "only allowed with \"stream\": true");
    LUMEN_TRY(ObjectReader(*so, "stream_options").read_bool("include_usage", &out->include_usage));
  }
  return Status();
}

}  // namespace

bool json_depth_within(std::string_view text, int32_t max_depth) {
  int32_t depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

Result<ParsedRequest> parse_generation_request(std::string_view body, Endpoint endpoint,
                                               const ParserLimits& limits) {
  try {
    LUMEN_ASSIGN_OR_RETURN(Json j, parse_object(body, limits));
    ParsedRequest out;
    LUMEN_TRY(parse_generation(j, endpoint, limits, &out));
    return out;
  } catch (const std::exception& e) {  // a type check missed above: still a clean 400
    return error(std::string("the request could not be read: ") + e.what());
  }
}

Result<TokenizeRequest> parse_tokenize_request(std::string_view body, const ParserLimits& limits) {
  try {
    LUMEN_ASSIGN_OR_RETURN(Json j, parse_object(body, limits));
    const ObjectReader r(j, "");
    TokenizeRequest out;
    bool has_content = false, has_prompt = false;
    std::string prompt;
    const size_t max_bytes = static_cast<size_t>(limits.max_body_bytes);
    LUMEN_TRY(r.read_string("content", max_bytes, &out.text, &has_content));
    LUMEN_TRY(r.read_string("prompt", max_bytes, &prompt, &has_prompt));
    if (const Json* m = r.get("messages")) {
      LUMEN_TRY(parse_messages(m, limits, &out.messages));
      out.has_messages = true;
    }
    if (int{has_content} + int{has_prompt} + int{out.has_messages} != 1)
      return field_error("content", "give exactly one of content, prompt, messages");
    if (has_prompt) out.text = std::move(prompt);
    bool add_special = true;
    LUMEN_TRY(r.read_bool("add_special", &add_special));
    LUMEN_TRY(r.read_bool("add_special_tokens", &add_special));
    out.add_special = add_special;
    return out;
  } catch (const std::exception& e) {
    return error(std::string("the request could not be read: ") + e.what());
  }
}

Result<std::vector<int32_t>> parse_detokenize_request(std::string_view body, const ParserLimits& limits) {
  try {
    LUMEN_ASSIGN_OR_RETURN(Json j, parse_object(body, limits));
    const ObjectReader r(j, "");
    const Json* v = r.get("tokens");
    if (!v) return field_error("tokens", "required");
    if (!v->is_array()) return r.type_error("tokens", "an array of token ids", *v);
    std::vector<int32_t> ids;
    ids.reserve(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      const Json& t = (*v)[i];
      const std::string where = "tokens[" + std::to_string(i) + "]";
      if (!t.is_number_integer()) return field_error(where, std::string("expected a token id, got ") + t.type_name());
      const int64_t id = t.is_number_unsigned() && t.get<uint64_t>() > INT32_MAX ? INT64_MAX : t.get<int64_t>();
      if (id < 0 || id >= limits.n_vocab)
        return field_error(where, "token id " + std::to_string(id) + " is out of range [0, " +
                                      std::to_string(limits.n_vocab) + ")");
      ids.push_back(static_cast<int32_t>(id));
    }
    return ids;
  } catch (const std::exception& e) {
    return error(std::string("the request could not be read: ") + e.what());
  }
}

namespace {

// One embedding input given as token ids: 1..n_ctx ids in [0, n_vocab).
Status read_embedding_ids(const Json& v, const std::string& where, const ParserLimits& limits,
                          std::vector<int32_t>* out) {
  if (v.empty()) return field_error(where, "empty (an input needs at least one token)");
  if (static_cast<int64_t>(v.size()) > limits.n_ctx)
    return field_error(where, std::to_string(v.size()) + " tokens do not fit the context of " +
                                  std::to_string(limits.n_ctx));
  out->reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& t = v[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!t.is_number_integer()) return field_error(at, std::string("expected a token id, got ") + t.type_name());
    const int64_t id = t.is_number_unsigned() && t.get<uint64_t>() > INT32_MAX ? INT64_MAX : t.get<int64_t>();
    if (id < 0 || id >= limits.n_vocab)
      return field_error(at, "token id " + std::to_string(id) + " is out of range [0, " +
                                 std::to_string(limits.n_vocab) + ")");
    out->push_back(static_cast<int32_t>(id));
  }
  return Status();
}

Status read_embedding_inputs(const Json& v, const ParserLimits& limits, std::vector<EmbeddingInput>* out) {
  const std::string kWant = "a string, an array of strings, an array of token ids or an array of token id arrays";
  if (v.is_string()) {
    if (v.get_ref<const std::string&>().empty()) return field_error("input", "empty string");
    out->push_back({v.get<std::string>(), {}, false});
    return Status();
  }
  if (!v.is_array()) return field_error("input", "expected " + kWant + ", got " + v.type_name());
  if (v.empty()) return field_error("input", "empty array");
  if (v[0].is_number()) {  // one input as token ids
    EmbeddingInput in;
    in.is_ids = true;
    LUMEN_TRY(read_embedding_ids(v, "input", limits, &in.ids));
    out->push_back(std::move(in));
    return Status();
  }
  if (v.size() > static_cast<size_t>(kMaxEmbeddingInputs))
    return field_error("input", std::to_string(v.size()) + " inputs, over the limit of " +
                                    std::to_string(kMaxEmbeddingInputs));
  const bool texts = v[0].is_string();
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& item = v[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    EmbeddingInput in;
    if (texts) {
      if (!item.is_string()) return field_error(where, std::string("expected a string like input[0], got ") + item.type_name());
      if (item.get_ref<const std::string&>().empty()) return field_error(where, "empty string");
      in.text = item.get<std::string>();
    } else {
      if (!item.is_array())
        return field_error(where, std::string("expected an array of token ids, got ") + item.type_name());
      in.is_ids = true;
      LUMEN_TRY(read_embedding_ids(item, where, limits, &in.ids));
    }
    out->push_back(std::move(in));
  }
  return Status();
}

}  // namespace

Result<EmbeddingsRequest> parse_embeddings_request(std::string_view body, const ParserLimits& limits) {
  try {
    LUMEN_ASSIGN_OR_RETURN(Json j, parse_object(body, limits));
    const ObjectReader r(j, "");
    EmbeddingsRequest out;
    LUMEN_TRY(r.read_string("model", limits.max_model_name_bytes, &out.model));
    LUMEN_TRY(r.read_string("user", 256, &out.user));
    const Json* input = r.get("input");
    if (!input) return field_error("input", "required");
    LUMEN_TRY(read_embedding_inputs(*input, limits, &out.inputs));
    std::string format = "float";
    LUMEN_TRY(r.read_string("encoding_format", 16, &format));
    if (format != "float" && format != "base64")
      return field_error("encoding_format", "must be \"float\" or \"base64\", got \"" + format + "\"");
    out.base64 = format == "base64";
    LUMEN_TRY(r.read_int("dimensions", 1, 1 << 20, &out.dimensions));
    return out;
  } catch (const std::exception& e) {
    return error(std::string("the request could not be read: ") + e.what());
  }
}

}  // namespace lumen::server
