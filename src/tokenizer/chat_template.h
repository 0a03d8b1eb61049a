// Chat templates: a small interpreter for the Jinja subset real chat templates use
// (for / if / elif / else / set / macro / filter blocks, expressions with filters and
// tests, loop.*, string concatenation, indexing, method calls like .strip()). Anything outside the subset is
// a clear parse or render error naming the construct and its position.
//
// Semantics follow Hugging Face's apply_chat_template, which renders with
// jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]),
// its own tojson (json.dumps, ensure_ascii=False, insertion order) and the globals
// raise_exception and strftime_now:
//   - a block or comment tag eats the newline right after it; spaces and tabs before a
//     block or comment tag at the start of a line are dropped; "{%-" / "-%}" (and the
//     "{{-", "{#-" forms) strip all whitespace on that side; "+" disables both rules;
//   - newlines in the source are normalized to "\n" and one trailing newline is dropped;
//   - undefined names and missing keys are Jinja's Undefined: empty when printed, false,
//     empty when iterated; an attribute, index or method of one, arithmetic on one,
//     calling an unknown function, or tojson of one is an error with Jinja's message
//     ("'x' is undefined", "'dict object' has no attribute 'x'");
//   - |safe and |escape give Markup: "+" with a plain string HTML-escapes the plain side
//     (markupsafe), "~" and printing do not escape (no autoescape);
//   - map / select / reject / selectattr / rejectattr / unique give generators: tojson
//     and length refuse them as jinja2 does (|list first);
//   - {% macro name(a, b=default) %} defines a callable: a call renders its body with the
//     arguments bound (positional, keyword, defaults evaluated per call, missing ones
//     undefined) in its own scope over the scopes it was defined in, and gives the text.
// Supported: {{ }}, {% if/elif/else %}, {% for a[, b] in x [if c] %} with else and
// loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem,
// {% set %} (names, tuples, namespace attributes, {% set x %}...{% endset %}),
// {% break/continue %}, {% raw %}, {% generation %}, {% macro %} (no varargs / kwargs /
// caller), {% filter f | g(args) %}...{% endfilter %}, comments; literals (strings with
// escapes, ints, floats, true/false/none, lists, tuples (as lists), dicts); operators
// + - * / // % ** ~ == != < > <= >= and or not in, "not in", "x if c else y", chained
// comparisons; indexing, slices with steps, .attr; filters trim length count upper lower
// capitalize title string int float abs default join first last list reverse replace items
// tojson safe escape indent select reject selectattr rejectattr map unique; tests defined
// undefined none string number integer float boolean true false mapping iterable sequence
// callable even odd divisibleby eq ne lt le gt ge in lower upper sameas; string methods
// strip lstrip rstrip upper lower title capitalize startswith endswith split replace find
// count join; list methods count index; dict methods items keys values get; globals range
// namespace dict raise_exception strftime_now.
// Not supported (an error naming the tag or operator): call, include, import, from,
// extends, block, with, autoescape, do; "%" string formatting; recursive loops.
// Differences from Jinja that real templates do not rely on: tuples print as lists; ranges,
// dict views and iterators print as lists; strings index, slice and count by code point
// (UTF-8) but upper/lower/title and whitespace stripping are ASCII-only.
//
// Hostile templates cannot crash or hang the process: nesting depth, macro call and
// evaluation depth (recursion), evaluation work
// (steps plus bytes built), string and list sizes and the output size are bounded, and
// exceeding a bound is a render error.
//
// A ChatTemplate is immutable after parse(); render() may run concurrently from many
// threads.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace lumen::tok {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

class ChatTemplateProgram;  // parsed template, private to the layer

class ChatTemplate {
 public:
  ChatTemplate();
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  static Result<ChatTemplate> parse(std::string_view source);

  // Renders with the variables messages, add_generation_prompt, bos_token, eos_token.
  Result<std::string> render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                             std::string_view bos_token, std::string_view eos_token) const;

  // Renders with the members of a JSON object as the variables, e.g.
  //   {"messages": [{"role": "user", "content": "hi", "tool_calls": [...]}],
  //    "tools": [...], "add_generation_prompt": true, "bos_token": "<s>",
  //    "enable_thinking": false}
  // Object keys keep their order, so `| tojson` matches Python's output.
  Result<std::string> render_json(std::string_view context_json) const;

 private:
  std::unique_ptr<ChatTemplateProgram> program_;
};

}  // namespace lumen::tok
