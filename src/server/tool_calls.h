// OpenAI tool calling on /v1/chat/completions: how tools reach the prompt, the grammar that
// enforces a call (tool_choice "required" or a named function), and the parser that turns
// a completion's text back into tool_calls.
//
// The text of a call follows the model's chat template, recognised from its source as
// llama.cpp does (the first that matches):
//   deepseek-r1 ("<｜tool▁calls▁begin｜>"): <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//       ```json {ARGS} ```<｜tool▁call▁end｜> ... <｜tool▁calls▁end｜> (newlines after NAME, "json" and ARGS)
//   command-r7b ("<|END_THINKING|><|START_ACTION|>"): <|START_ACTION|>[{"tool_call_id": "0",
//       "tool_name": NAME, "parameters": {ARGS}}, ...]<|END_ACTION|>; text in <|START_RESPONSE|> .. <|END_RESPONSE|>
//   functionary-v3.2 (">>>all"): after the prompt's ">>>", NAME\n{ARGS}, further calls >>>NAME\n{ARGS};
//       "all\n" starts plain text
//   firefunction-v2 (" functools["):  functools[{"name": NAME, "arguments": {ARGS}}, ...]
//   hermes ("<tool_call>", e.g. Qwen 2.5 / 3, Hermes):
//       <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
//   functionary-v3.1 ("<|start_header_id|>" and "<function="): <function=NAME>{ARGS}</function>;
//       <|python_tag|>CODE is a call of the tool "python" (or "ipython") with {"code": CODE}
//   json (every other template, ChatML included): one JSON object per call, one per line
//       {"name": "get_weather", "arguments": {"city": "Paris"}}
//     ("parameters" for the arguments where the template asks so, as Llama 3.x's do; a JSON
//     array of calls, and Mistral's "[TOOL_CALLS]" or Llama 3.1's "<|python_tag|>" before
//     it, parse too; so does Llama 3.1's built-in form <|python_tag|>NAME.call(key=JSON, ...))
// Every format's parser also takes the json format (a model told the json format by the
// fallback system message below). The markers that are control tokens in the model's
// vocabulary (tool_format_markers) are kept in the output text of a request with tools
// (GenerationParams::keep_special), as llama.cpp's preserved tokens, so the parser sees them.
// Templates that take `tools` (they mention tools and tool_call) get the request's tools
// (firefunction-v2's also as the `functions` text it reads), the assistant turns'
// tool_calls (arguments as objects) and the tool turns as they are; other templates get a
// system message that lists the tools and the json format, the earlier calls as assistant
// text in that format and tool results as user turns.
//
// Functions of their inputs (no engine, no HTTP; firefunction's `datetime` is the clock's),
// tested in tool_calls_test.cc and tests/tool_templates_test.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/request_parser.h"
#include "tokenizer/chat_template.h"

namespace lumen::server {

enum class ToolFormat : uint8_t {
  kJson,
  kHermes,
  kCommandR7b,
  kDeepseekR1,
  kFunctionaryV32,
  kFunctionaryV31,
  kFirefunctionV2,
};
const char* tool_format_name(ToolFormat format);

// The texts that delimit calls (and, for command-r7b, text and reasoning) in a format's
// output: the ones the model writes as special tokens of their own.
std::vector<std::string_view> tool_format_markers(ToolFormat format);

// What a chat template can do with tools (from its source).
struct TemplateTools {
  bool takes_tools = false;  // renders `tools` and `tool_calls` itself
  ToolFormat format = ToolFormat::kJson;
  // The key of a call's arguments in the json format: Llama 3.x templates ask for
  // {"name": ..., "parameters": ...}; the parser takes either.
  std::string args_key = "arguments";
  // The assistant turns' call arguments go to the template as their JSON text, not as an
  // object: the template concatenates them to strings (functionary's, firefunction's).
  bool string_arguments = false;
};
TemplateTools template_tools(std::string_view template_source);
// template_tools() plus string_arguments, found by rendering a probe conversation with a
// call both ways (objects first, as most templates want them).
TemplateTools template_tools(std::string_view template_source, const tok::ChatTemplate& chat_template);

// Whether the request needs the tool-aware rendering (tools to offer, or tool turns).
bool needs_tool_rendering(const ParsedRequest& pr);

// The render_json context for the chat template (messages, tools, add_generation_prompt,
// bos_token, eos_token, and the request's chat_template_kwargs), as described above.
std::string tool_chat_context(const ParsedRequest& pr, const TemplateTools& tt, std::string_view bos,
                              std::string_view eos);

// GBNF whose every complete text is a call (several with parallel_tool_calls, for
// "required") in the template's format, arguments valid against the function's parameters schema.
// Only for tool_choice "required" or a named function; a schema the grammar layer cannot
// honour is an error naming "tools[i].function.parameters".
Result<std::string> tool_call_gbnf(const ToolRequest& tools, const TemplateTools& tt);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object as compact text
};
struct ToolOutput {
  std::vector<ToolCall> calls;  // empty: the text is plain content
  std::string content;          // the text outside the calls (trimmed); all of it without calls
};

// Splits a completion into content and calls. A call must name one of the tools and carry
// an arguments object ("parameters", Llama 3's name, is taken too); when any part that
// looks like a call does not parse, the whole text is content.
ToolOutput parse_tool_output(std::string_view text, const ToolRequest& tools, ToolFormat format);

}  // namespace lumen::server
