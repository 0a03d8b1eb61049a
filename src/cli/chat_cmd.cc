// lumen chat: an interactive conversation. Each turn renders the whole conversation with
// the model's chat template, runs it through the engine and streams the reply.
#include <cstdio>
#include <iostream>

#include "base/log.h"
#include "base/mapped_file.h"
#include "cli/common.h"
#include "tokenizer/chat_template.h"

namespace lumen::cli {
namespace {

// Used when the model ships no template (as llama.cpp does, ChatML).
constexpr const char* kChatMlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

}  // namespace

int cmd_chat(int argc, char** argv, int first) {
  std::vector<OptionSpec> specs = concat(engine_option_specs(), sampling_option_specs());
  specs.push_back({{"--system"}, "TEXT", "system message"});
  specs.push_back({{"--chat-template-file"}, "PATH", "use this Jinja chat template instead of the model's"});
  ArgParser args("chat", "lumen chat -m MODEL [--system TEXT] [options]", specs);
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  auto config = engine_config_from_args(args);
  auto gen = generation_params_from_args(args);
  for (const Status* st : {&config.status(), &gen.status()}) {
    if (!st->ok()) {
      std::fprintf(stderr, "error: %s\n", st->message().c_str());
      return 2;
    }
  }
  std::unique_ptr<engine::Engine> eng = load_engine_or_report(args, *config);
  if (!eng) return 1;
  const tok::Tokenizer& tk = eng->tokenizer();
  std::string source = tk.chat_template();
  if (auto path = args.get("--chat-template-file")) {
    auto text = read_text_file(*path);
    if (!text.ok()) {
      std::fprintf(stderr, "error: --chat-template-file: %s\n", text.message().c_str());
      return 2;
    }
    source = *text;
  }
  if (source.empty()) {
    std::fprintf(stderr, "lumen chat: the model has no chat template; using ChatML\n");
    source = kChatMlTemplate;
  }
  auto tmpl = tok::ChatTemplate::parse(source);
  if (!tmpl.ok()) {
    std::fprintf(stderr, "error: chat template: %s\n", tmpl.message().c_str());
    return 1;
  }
  const std::string bos = tk.bos_id() >= 0 ? std::string(tk.token_text(tk.bos_id())) : "";
  const std::string eos = tk.eos_id() >= 0 ? std::string(tk.token_text(tk.eos_id())) : "";
  std::vector<tok::ChatMessage> messages;
  if (auto sys = args.get("--system")) messages.push_back({"system", *sys});
  std::fprintf(stderr, "lumen chat: type a message and press enter; Ctrl-D or /exit to quit\n");
  std::string line;
  for (;;) {
    std::fputs("\n> ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line.empty()) continue;
    messages.push_back({"user", line});
    auto prompt = tmpl->render(messages, true, bos, eos);
    if (!prompt.ok()) {
      std::fprintf(stderr, "error: chat template: %s\n", prompt.message().c_str());
      messages.pop_back();
      continue;
    }
    engine::Request req;
    // The template writes BOS itself when the model wants it.
    req.prompt_ids = tk.encode(*prompt, false, true);
    if (tk.add_bos() && tk.bos_id() >= 0 && (req.prompt_ids.empty() || req.prompt_ids[0] != tk.bos_id()))
      req.prompt_ids.insert(req.prompt_ids.begin(), tk.bos_id());
    req.params = *gen;
    auto id = eng->add_request(std::move(req));
    if (!id.ok()) {
      std::fprintf(stderr, "error: %s\n", id.message().c_str());
      messages.pop_back();
      continue;
    }
    std::string reply;
    while (eng->has_work()) {
      for (engine::RequestEvent& ev : eng->step()) {
        reply += ev.text_delta;
        std::fwrite(ev.text_delta.data(), 1, ev.text_delta.size(), stdout);
        std::fflush(stdout);
        if (ev.finish_reason == engine::FinishReason::kError)
          std::fprintf(stderr, "\nerror: %s\n", ev.error.c_str());
      }
    }
    std::fputs("\n", stdout);
    messages.push_back({"assistant", reply});
  }
  return 0;
}

}  // namespace lumen::cli
