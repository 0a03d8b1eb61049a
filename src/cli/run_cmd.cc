// lumen run: one prompt in, a continuation out (streamed), timings on stderr;
// --json prints one object with ids, text, optional per-step top logits and timings.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/timer.h"
#include "cli/common.h"

namespace lumen::cli {
namespace {

std::vector<OptionSpec> run_specs() {
  std::vector<OptionSpec> s = concat(concat(engine_option_specs(), spec_option_specs()), sampling_option_specs());
  s = concat(s, context_shift_option_specs());
  return concat(concat(s, {
      {{"-p", "--prompt"}, "TEXT", "prompt text"},
      {{"-f", "--file"}, "PATH", "read the prompt from a file"},
      {{"--no-bos"}, "", "do not add BOS/EOS to the prompt even if the model asks for it"},
      {{"--no-parse-special"}, "", "treat special-token texts in the prompt as plain text"},
      {{"--json"}, "", "print one JSON object instead of streaming text"},
      {{"--top-logits"}, "K", "with --json: the K largest logits of every step"},
  }), grammar_option_specs());
}

void print_timings(const engine::RequestTimings& t, double load_ms, bool to_json, nlohmann::json* j) {
  const double prefill_ms = t.ttft_ms();
  const double prompt_tok_s = prefill_ms > 0 ? t.n_prompt / (prefill_ms / 1000.0) : 0.0;
  const double gen_ms = t.finish_ms - t.first_token_ms;
  const double gen_tok_s = (t.n_generated > 1 && gen_ms > 0) ? (t.n_generated - 1) / (gen_ms / 1000.0) : 0.0;
  if (to_json) {
    (*j)["timings"] = {{"load_ms", load_ms},       {"ttft_ms", t.ttft_ms()},
                       {"tpot_ms", t.tpot_ms()},   {"prompt_tok_s", prompt_tok_s},
                       {"gen_tok_s", gen_tok_s},   {"n_prompt", t.n_prompt},
                       {"n_generated", t.n_generated}};
    return;
  }
  std::fprintf(stderr,
               "\n\nlumen: load %.1f ms | prompt %d tokens, %.1f tok/s | generated %d tokens, "
               "%.1f tok/s | ttft %.1f ms | tpot %.2f ms\n",
               load_ms, t.n_prompt, prompt_tok_s, t.n_generated, gen_tok_s, t.ttft_ms(), t.tpot_ms());
}

}  // namespace

int cmd_run(int argc, char** argv, int first) {
  ArgParser args("run", "lumen run -m MODEL -p PROMPT [-n N] [options]", run_specs());
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  auto config = engine_config_from_args(args);
  auto gen = generation_params_from_args(args);
  auto top_logits = args.get_int("--top-logits", 0, 0, 1 << 20);
  const Status spec_st = config.ok() ? spec_config_from_args(args, &config->spec) : Status::ok_status();
  const Status shift_st = config.ok() ? context_shift_mode_from_args(args, &*config) : Status::ok_status();
  for (const Status* st : {&config.status(), &gen.status(), &top_logits.status(), &spec_st, &shift_st}) {
    if (!st->ok()) {
      std::fprintf(stderr, "error: %s\n", st->message().c_str());
      return 2;
    }
  }
  std::string prompt = args.get_or("--prompt", "");
  if (auto path = args.get("--file")) {
    auto text = read_text_file(*path);
    if (!text.ok()) {
      std::fprintf(stderr, "error: --file: %s\n", text.message().c_str());
      return 2;
    }
    prompt = *text;
  }
  if (!args.positional().empty()) {
    std::fprintf(stderr, "error: unexpected argument '%s' (use -p for the prompt)\n",
                 args.positional()[0].c_str());
    return 2;
  }
  const bool json = args.has("--json");
  gen->top_logits = static_cast<int32_t>(*top_logits);

  std::unique_ptr<engine::Engine> eng = load_engine_or_report(args, *config);
  if (!eng) return 1;
  auto constraint = grammar_from_args(args, *eng);
  if (!constraint.ok()) {
    std::fprintf(stderr, "error: %s\n", constraint.message().c_str());
    return 2;
  }
  const tok::Tokenizer& tk = eng->tokenizer();
  engine::Request req;
  req.prompt_ids = tk.encode(prompt, !args.has("--no-bos"), !args.has("--no-parse-special"));
  req.params = *gen;
  req.params.grammar = std::move(constraint).value();
  const int32_t n_bos = !req.prompt_ids.empty() && req.prompt_ids[0] == tk.bos_id() ? 1 : 0;
  if (Status st = context_shift_from_args(args, n_bos, n_bos, static_cast<int32_t>(req.prompt_ids.size()), &req.params);
      !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 2;
  }
  nlohmann::json out;
  out["prompt_ids"] = req.prompt_ids;
  auto id = eng->add_request(std::move(req));
  if (!id.ok()) {
    std::fprintf(stderr, "error: %s\n", id.message().c_str());
    return 1;
  }
  if (!json) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  std::vector<int32_t> generated;
  std::string text;
  nlohmann::json steps = nlohmann::json::array();
  engine::FinishReason reason = engine::FinishReason::kNone;
  engine::Usage usage;
  while (eng->has_work()) {
    for (engine::RequestEvent& ev : eng->step()) {
      for (size_t i = 0; i < ev.new_token_ids.size(); ++i) {
        generated.push_back(ev.new_token_ids[i]);
        if (json && gen->top_logits > 0) {
          nlohmann::json top = nlohmann::json::array();
          for (const auto& [tid, logit] : ev.top[i]) top.push_back({tid, logit});
          steps.push_back({{"id", ev.new_token_ids[i]}, {"top", top}});
        }
      }
      text += ev.text_delta;
      if (!json && !ev.text_delta.empty()) {
        std::fwrite(ev.text_delta.data(), 1, ev.text_delta.size(), stdout);
        std::fflush(stdout);
      }
      if (ev.request_finished) usage = ev.usage;
      if (ev.finished) {
        reason = ev.finish_reason;
        if (reason == engine::FinishReason::kError)
          std::fprintf(stderr, "\nerror: %s\n", ev.error.c_str());
      }
    }
  }
  const engine::RequestTimings t = eng->timings(*id).value_or(engine::RequestTimings{});
  if (json) {
    out["generated_ids"] = generated;
    out["text"] = text;
    out["finish_reason"] = engine::finish_reason_name(reason);
    if (gen->top_logits > 0) out["steps"] = steps;
    if (config->spec.kind != spec::ProposerKind::kNone)
      out["spec"] = {{"proposed", usage.spec.proposed},
                     {"accepted", usage.spec.accepted},
                     {"target_steps", usage.spec.target_steps}};
    print_timings(t, eng->load_ms(), true, &out);
    std::puts(out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    print_timings(t, eng->load_ms(), false, nullptr);
  }
  return reason == engine::FinishReason::kError ? 1 : 0;
}

}  // namespace lumen::cli
