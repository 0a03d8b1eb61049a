// Chat template interpreter: lexer (text + tag tokens, whitespace control applied here)
// -> recursive-descent parser (AST of statements and expressions) -> tree-walking
// evaluator over a small dynamic Value type. See chat_template.h for the subset.
//
// This file is the public API and the render context; the interpreter is split by
// responsibility into private pieces:
//   chat_template_internal.h              limits, source positions, character classes,
//                                         UTF-8 code points, filter / test names
//   chat_template_value.h / _value.cc     the dynamic Value type and its spellings
//   chat_template_ast.h                   tokens, the AST, the lex / parse entry points
//   chat_template_lexer.cc                source -> tokens
//   chat_template_parser.cc               tokens -> AST
//   chat_template_eval.h / _eval.cc       Renderer: statements, expressions, operators,
//                                         global functions
//   chat_template_filters.cc              Renderer: methods, filters and tests
#include "tokenizer/chat_template.h"

#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/json_util.h"
#include "tokenizer/chat_template_ast.h"
#include "tokenizer/chat_template_eval.h"
#include "tokenizer/chat_template_internal.h"
#include "tokenizer/chat_template_value.h"

namespace lumen::tok {

using chat_template_detail::Body;
using chat_template_detail::Dict;
using chat_template_detail::List;
using chat_template_detail::Renderer;
using chat_template_detail::Token;
using chat_template_detail::Value;
using chat_template_detail::bool_value;
using chat_template_detail::dict_value;
using chat_template_detail::float_value;
using chat_template_detail::int_value;
using chat_template_detail::kMaxContextBytes;
using chat_template_detail::kMaxListItems;
using chat_template_detail::kMaxNesting;
using chat_template_detail::kMaxSourceBytes;
using chat_template_detail::list_value;
using chat_template_detail::none_value;
using chat_template_detail::string_value;

namespace {

// nlohmann::ordered_json -> Value, keeping key order; depth-bounded.
Result<Value> from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxNesting) return error("chat template context: JSON nested too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none_value();
    case nlohmann::ordered_json::value_t::boolean: return bool_value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return int_value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return float_value(static_cast<double>(u));
      return int_value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return float_value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string_value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      if (j.size() > kMaxListItems) return error("chat template context: JSON array longer than the list limit");
      List items;
      for (const auto& item : j) {
        LUMEN_ASSIGN_OR_RETURN(Value v, from_json(item, depth + 1));
        items.push_back(std::move(v));
      }
      return list_value(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      for (const auto& [k, item] : j.items()) {
        LUMEN_ASSIGN_OR_RETURN(Value v, from_json(item, depth + 1));
        items.emplace_back(k, std::move(v));
      }
      return dict_value(std::move(items));
    }
    default: return error("chat template context: unsupported JSON value");
  }
}

Result<std::string> render_program(const ChatTemplateProgram& program, Dict globals) {
  // The interpreter reports every failure as a Status; this guard only catches
  // allocation failure so that no exception leaves the layer.
  try {
    Renderer renderer(program, std::move(globals));
    return renderer.run();
  } catch (const std::exception& e) {
    return error(std::string("chat template: render failed: ") + e.what());
  }
}

}  // namespace

ChatTemplate::ChatTemplate() = default;
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  if (source.size() > kMaxSourceBytes) {
    return error("chat template: source of " + std::to_string(source.size()) + " bytes exceeds the limit of " +
                 std::to_string(kMaxSourceBytes));
  }
  try {
    LUMEN_ASSIGN_OR_RETURN(std::vector<Token> tokens, chat_template_detail::lex_template(source));
    LUMEN_ASSIGN_OR_RETURN(Body body, chat_template_detail::parse_tokens(std::move(tokens)));
    ChatTemplate t;
    t.program_ = std::make_unique<ChatTemplateProgram>();
    t.program_->body = std::move(body);
    return t;
  } catch (const std::exception& e) {
    return error(std::string("chat template: parse failed: ") + e.what());
  }
}

Result<std::string> ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                         std::string_view bos_token, std::string_view eos_token) const {
  if (!program_) return error("chat template: render() on an empty ChatTemplate");
  List list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    list.push_back(dict_value(Dict{{"role", string_value(m.role)}, {"content", string_value(m.content)}}));
  }
  Dict globals = {
      {"messages", list_value(std::move(list))},
      {"add_generation_prompt", bool_value(add_generation_prompt)},
      {"bos_token", string_value(std::string(bos_token))},
      {"eos_token", string_value(std::string(eos_token))},
  };
  return render_program(*program_, std::move(globals));
}

Result<std::string> ChatTemplate::render_json(std::string_view context_json) const {
  if (!program_) return error("chat template: render_json() on an empty ChatTemplate");
  if (context_json.size() > kMaxContextBytes) {
    return error("chat template context: " + std::to_string(context_json.size()) + " bytes exceeds the limit of " +
                 std::to_string(kMaxContextBytes));
  }
  auto parsed = gguf::parse_ordered_json(context_json);
  if (!parsed.ok()) return error("chat template context: " + parsed.message());
  const nlohmann::ordered_json& j = *parsed;
  if (!j.is_object()) return error("chat template context: expected a JSON object");
  LUMEN_ASSIGN_OR_RETURN(Value context, from_json(j, 0));
  return render_program(*program_, *context.dict);
}

}  // namespace lumen::tok
