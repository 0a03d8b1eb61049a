// lumen chat: an interactive conversation. Each turn renders the whole conversation with
// the model's chat template, runs it through the engine (the prefix cache finds the turns
// before) and streams the reply.
//
// On a terminal the input line is edited with libedit (line_reader.h). Ctrl-C during a
// reply stops the reply and keeps the chat (what was shown stays in the conversation);
// Ctrl-C twice at the prompt quits. A line ending in '\' continues on the next line, and a
// line `"""` opens a block that runs to the next `"""` line (for pasting). Commands start
// with '/' (/help lists them; '//' sends a literal '/').
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/log.h"
#include "base/mapped_file.h"
#include "base/timer.h"
#include "cli/chat_conversation.h"
#include "cli/common.h"
#include "cli/line_reader.h"
#include "tokenizer/chat_template.h"

namespace lumen::cli {
namespace {

// Used when the model ships no template (as llama.cpp does, ChatML).
constexpr const char* kChatMlTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

constexpr const char* kHelp =
    "commands:\n"
    "  /help            this list\n"
    "  /clear           forget the conversation (the system message stays)\n"
    "  /system [TEXT]   set the system message (without TEXT: show it)\n"
    "  /save FILE       write the conversation as JSON\n"
    "  /load FILE       read a conversation written by /save\n"
    "  /stats           this session's speed: prompt and generation tok/s, TTFT, context use\n"
    "  /set n N         tokens per reply at most (-1: until end of turn or a full context)\n"
    "  /set temp T      sampling temperature (0: greedy)\n"
    "  /exit            quit (also Ctrl-D, or Ctrl-C twice at the prompt)\n"
    "input: a line ending in \\ continues on the next; \"\"\" opens a block up to the next \"\"\" line;\n"
    "Ctrl-C during a reply stops it and keeps the chat.\n";

// Speed of one reply, and the session's sums.
struct TurnStats {
  int64_t n_prompt = 0;         // tokens in the rendered conversation
  int64_t n_prompt_cached = 0;  // of which the prefix cache held the KV
  int64_t n_gen = 0;
  double prompt_ms = 0;         // first scheduled -> first token
  double gen_ms = 0;            // first token -> last token
  double ttft_ms = 0;
};

struct SessionStats {
  int64_t n_turns = 0;
  TurnStats sum;
  int64_t n_ctx_used = 0;  // tokens of the last turn's prompt + reply

  void add(const TurnStats& t) {
    ++n_turns;
    sum.n_prompt += t.n_prompt;
    sum.n_prompt_cached += t.n_prompt_cached;
    sum.n_gen += t.n_gen;
    sum.prompt_ms += t.prompt_ms;
    sum.gen_ms += t.gen_ms;
    sum.ttft_ms += t.ttft_ms;
    n_ctx_used = t.n_prompt + t.n_gen;
  }
};

double rate(double n, double ms) { return ms > 0 ? n / (ms / 1000.0) : 0.0; }

std::string turn_line(const TurnStats& t, int64_t n_ctx) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "prompt %" PRId64 " tok (%" PRId64 " cached) %.1f tok/s | TTFT %.0f ms | gen %" PRId64
                " tok %.1f tok/s | context %" PRId64 "/%" PRId64,
                t.n_prompt, t.n_prompt_cached, rate(static_cast<double>(t.n_prompt - t.n_prompt_cached), t.prompt_ms),
                t.ttft_ms, t.n_gen, rate(static_cast<double>(std::max<int64_t>(t.n_gen - 1, 0)), t.gen_ms),
                t.n_prompt + t.n_gen, n_ctx);
  return buf;
}

class ChatSession {
 public:
  // gen.context_shift: a conversation that outgrows the context drops its oldest turns,
  // and a reply that fills it shifts (context_shift.h) keeping gen.n_keep tokens, or the
  // BOS and system message when n_keep < 0.
  ChatSession(engine::Engine& eng, tok::ChatTemplate tmpl, engine::GenerationParams gen, bool verbose_prompt)
      : eng_(eng), tk_(eng.tokenizer()), tmpl_(std::move(tmpl)), gen_(gen), verbose_prompt_(verbose_prompt) {
    bos_ = tk_.bos_id() >= 0 ? std::string(tk_.token_text(tk_.bos_id())) : "";
    eos_ = tk_.eos_id() >= 0 ? std::string(tk_.token_text(tk_.eos_id())) : "";
  }

  void set_system(const std::string& text) {
    if (!messages_.empty() && messages_[0].role == "system") messages_.erase(messages_.begin());
    if (!text.empty()) messages_.insert(messages_.begin(), {"system", text});
  }
  // Returns false when the command asks to quit.
  bool command(const std::string& line);
  void turn(const std::string& text, InterruptFlag& interrupt);

 private:
  void clear() {  // keeps the system message
    const bool sys = !messages_.empty() && messages_[0].role == "system";
    messages_.resize(sys ? 1 : 0);
  }
  std::vector<int32_t> encode(const std::string& prompt) const {
    // The template writes BOS itself when the model wants it.
    std::vector<int32_t> ids = tk_.encode(prompt, false, true);
    if (tk_.add_bos() && tk_.bos_id() >= 0 && (ids.empty() || ids[0] != tk_.bos_id())) ids.insert(ids.begin(), tk_.bos_id());
    return ids;
  }
  void show_prompt(const std::string& prompt, const std::vector<int32_t>& ids) const;
  // The conversation rendered and encoded for the next reply; with context shift, the
  // oldest user/assistant turns (never the system message or the new message) are dropped
  // first when it would leave less than a quarter of the context for the reply, down to
  // half of the context (so that the next turns find it in the prefix cache again).
  Result<std::vector<int32_t>> render_prompt(std::string* text);
  // Tokens of the rendered prompt's start that the system message (and BOS) take.
  int32_t system_tokens(std::span<const int32_t> ids) const;
  void print_stats() const;

  engine::Engine& eng_;
  const tok::Tokenizer& tk_;
  tok::ChatTemplate tmpl_;
  engine::GenerationParams gen_;
  bool verbose_prompt_;
  std::string bos_, eos_;
  std::vector<tok::ChatMessage> messages_;
  SessionStats stats_;
};

Result<std::vector<int32_t>> ChatSession::render_prompt(std::string* text) {
  const int64_t n_ctx = eng_.config().n_ctx;
  const size_t first_turn = !messages_.empty() && messages_[0].role == "system" ? 1 : 0;
  int32_t n_dropped = 0;
  for (;;) {
    LUMEN_ASSIGN_OR_RETURN(*text, tmpl_.render(messages_, true, bos_, eos_));
    std::vector<int32_t> ids = encode(*text);
    const auto n = static_cast<int64_t>(ids.size());
    const bool droppable = messages_.size() >= first_turn + 3 && messages_[first_turn].role == "user" &&
                           messages_[first_turn + 1].role == "assistant";
    const bool too_long = n_dropped == 0 ? n > n_ctx * 3 / 4 : n > n_ctx / 2;
    if (!gen_.context_shift || !too_long || !droppable) {
      if (n_dropped > 0)
        std::printf("[context shift: the %d oldest message(s) left the conversation (%" PRId64 " tokens now)]\n",
                    n_dropped, n);
      return ids;
    }
    messages_.erase(messages_.begin() + static_cast<ptrdiff_t>(first_turn),
                    messages_.begin() + static_cast<ptrdiff_t>(first_turn) + 2);
    n_dropped += 2;
  }
}

int32_t ChatSession::system_tokens(std::span<const int32_t> ids) const {
  const int32_t n_bos = !ids.empty() && ids[0] == tk_.bos_id() ? 1 : 0;
  if (messages_.empty() || messages_[0].role != "system") return n_bos;
  auto sys = tmpl_.render(std::span(messages_).first(1), false, bos_, eos_);
  if (!sys.ok()) return n_bos;
  const std::vector<int32_t> sys_ids = encode(*sys);
  // Kept only if the conversation's tokens start with it (templates may render it apart).
  if (sys_ids.size() > ids.size() || !std::equal(sys_ids.begin(), sys_ids.end(), ids.begin())) return n_bos;
  return static_cast<int32_t>(sys_ids.size());
}

void ChatSession::show_prompt(const std::string& prompt, const std::vector<int32_t>& ids) const {
  std::fprintf(stderr, "--- prompt (%zu tokens) ---\n%s\n--- tokens ---\n", ids.size(), prompt.c_str());
  for (size_t i = 0; i < ids.size(); ++i)
    std::fprintf(stderr, "%6d '%s'%s", ids[i], std::string(tk_.token_text(ids[i])).c_str(), i % 6 == 5 ? "\n" : "  ");
  std::fputs("\n---\n", stderr);
}

void ChatSession::print_stats() const {
  const TurnStats& s = stats_.sum;
  std::printf("session: %" PRId64 " turn(s) | prompt %" PRId64 " tok (%" PRId64 " cached) %.1f tok/s | mean TTFT %.0f ms"
              " | gen %" PRId64 " tok %.1f tok/s | context %" PRId64 "/%d | %zu message(s) | kernels %s, %d threads\n",
              stats_.n_turns, s.n_prompt, s.n_prompt_cached, rate(static_cast<double>(s.n_prompt - s.n_prompt_cached), s.prompt_ms),
              stats_.n_turns ? s.ttft_ms / stats_.n_turns : 0.0, s.n_gen,
              rate(static_cast<double>(std::max<int64_t>(s.n_gen - stats_.n_turns, 0)), s.gen_ms), stats_.n_ctx_used,
              eng_.config().n_ctx, messages_.size(), std::string(eng_.kernel_name()).c_str(), eng_.config().n_threads);
}

bool ChatSession::command(const std::string& line) {
  std::istringstream in(line);
  std::string cmd, arg;
  in >> cmd;
  std::getline(in >> std::ws, arg);
  if (cmd == "/exit" || cmd == "/quit") return false;
  if (cmd == "/help") {
    std::fputs(kHelp, stdout);
  } else if (cmd == "/clear") {
    clear();
    std::printf("chat cleared%s\n", messages_.empty() ? "" : " (system message kept)");
  } else if (cmd == "/system") {
    if (arg.empty()) {
      std::printf("system: %s\n", !messages_.empty() && messages_[0].role == "system" ? messages_[0].content.c_str() : "(none)");
    } else {
      set_system(arg);
      std::printf("system message set\n");
    }
  } else if (cmd == "/save") {
    std::ofstream out(arg, std::ios::binary);
    out << conversation_to_json(messages_);
    out.close();
    if (arg.empty() || !out) std::printf("/save: cannot write '%s'\n", arg.c_str());
    else std::printf("saved %zu message(s) to %s\n", messages_.size(), arg.c_str());
  } else if (cmd == "/load") {
    Result<std::string> text = read_text_file(arg);
    Result<std::vector<tok::ChatMessage>> m =
        text.ok() ? conversation_from_json(*text) : Result<std::vector<tok::ChatMessage>>(text.status());
    if (!m.ok()) {
      std::printf("/load: %s: %s\n", arg.c_str(), m.message().c_str());
    } else {
      messages_ = std::move(m).value();
      std::printf("loaded %zu message(s) from %s\n", messages_.size(), arg.c_str());
    }
  } else if (cmd == "/stats") {
    print_stats();
  } else if (cmd == "/set") {
    std::istringstream a(arg);
    std::string key;
    double v = 0;
    if (!(a >> key >> v) || !a.eof() || (key != "n" && key != "temp") || (key == "temp" && !(v >= 0 && v <= 100)) ||
        (key == "n" && (v < -1 || v > (1 << 24) || v != static_cast<int64_t>(v)))) {
      std::printf("/set: expected 'n N' (N >= -1) or 'temp T' (0..100), got '%s'\n", arg.c_str());
    } else if (key == "n") {
      gen_.max_tokens = v < 0 ? (1 << 30) : static_cast<int32_t>(v);
      std::printf("n = %s\n", v < 0 ? "until end of turn" : std::to_string(static_cast<int64_t>(v)).c_str());
    } else {
      gen_.sampling.temperature = static_cast<float>(v);
      std::printf("temp = %g\n", v);
    }
  } else {
    std::printf("unknown command %s (/help lists them; start with // to send a '/')\n", cmd.c_str());
  }
  return true;
}

void ChatSession::turn(const std::string& text, InterruptFlag& interrupt) {
  messages_.push_back({"user", text});
  std::string prompt;
  auto ids = render_prompt(&prompt);
  if (!ids.ok()) {
    std::fprintf(stderr, "error: chat template: %s\n", ids.message().c_str());
    messages_.pop_back();
    return;
  }
  engine::Request req;
  req.prompt_ids = std::move(ids).value();
  const int64_t n_prompt = static_cast<int64_t>(req.prompt_ids.size());
  const int32_t n_ctx = eng_.config().n_ctx;
  if (verbose_prompt_) show_prompt(prompt, req.prompt_ids);
  if (n_prompt >= n_ctx) {
    std::printf("[the conversation is %" PRId64 " tokens and the context holds %d: /clear to start over, or restart "
                "with a larger -c]\n", n_prompt, n_ctx);
    messages_.pop_back();
    return;
  }
  req.params = gen_;
  if (gen_.n_keep < 0) req.params.n_keep = system_tokens(req.prompt_ids);
  auto id = eng_.add_request(std::move(req));
  if (!id.ok()) {
    std::fprintf(stderr, "error: %s\n", id.message().c_str());
    messages_.pop_back();
    return;
  }
  interrupt.clear();
  std::string reply;
  TurnStats t;
  t.n_prompt = n_prompt;
  engine::FinishReason reason = engine::FinishReason::kNone;
  bool stopped = false;
  while (eng_.has_work()) {
    if (interrupt.raised()) {
      eng_.cancel(*id);
      stopped = true;
      break;
    }
    for (engine::RequestEvent& ev : eng_.step()) {
      reply += ev.text_delta;
      t.n_gen += static_cast<int64_t>(ev.new_token_ids.size());
      std::fwrite(ev.text_delta.data(), 1, ev.text_delta.size(), stdout);
      std::fflush(stdout);
      if (ev.request_finished) t.n_prompt_cached = ev.usage.cached_tokens;
      if (ev.finished) reason = ev.finish_reason;
      if (ev.finish_reason == engine::FinishReason::kError) std::fprintf(stderr, "\nerror: %s\n", ev.error.c_str());
    }
  }
  interrupt.clear();
  if (const std::optional<engine::RequestTimings> tm = eng_.timings(*id)) {
    if (tm->first_token_ms > 0) {
      t.ttft_ms = tm->first_token_ms - tm->arrival_ms;
      t.prompt_ms = tm->first_token_ms - tm->first_scheduled_ms;
      t.gen_ms = tm->finish_ms - tm->first_token_ms;
    }
  }
  std::fputs("\n", stdout);
  if (stopped) std::printf("[stopped]\n");
  if (reason == engine::FinishReason::kContextFull)
    std::printf("[the context is full (%d tokens): /clear to start over, or restart with a larger -c]\n", n_ctx);
  std::fflush(stdout);
  std::fprintf(stderr, "[%s]\n", turn_line(t, n_ctx).c_str());
  stats_.add(t);
  messages_.push_back({"assistant", reply});
}

// Reads one message: a line, a line continued with trailing backslashes, or a """ block.
// kInterrupted / kEof pass through (what was typed so far is dropped).
LineReader::ReadStatus read_message(LineReader& reader, std::string* message) {
  std::string line;
  LineReader::ReadStatus st = reader.read("> ", &line);
  if (st != LineReader::ReadStatus::kLine) return st;
  message->clear();
  if (line == "\"\"\"") {
    for (;;) {
      st = reader.read("", &line);
      if (st != LineReader::ReadStatus::kLine) return st;
      if (line == "\"\"\"") break;
      *message += (message->empty() ? "" : "\n") + line;
    }
    return LineReader::ReadStatus::kLine;
  }
  while (!line.empty() && line.back() == '\\') {
    line.pop_back();
    *message += line + "\n";
    st = reader.read("... ", &line);
    if (st != LineReader::ReadStatus::kLine) return st;
  }
  *message += line;
  return LineReader::ReadStatus::kLine;
}

}  // namespace

int cmd_chat(int argc, char** argv, int first) {
  std::vector<OptionSpec> specs = concat(engine_option_specs(), sampling_option_specs());
  specs = concat(specs, context_shift_option_specs());
  specs.push_back({{"--system"}, "TEXT", "system message"});
  specs.push_back({{"--chat-template-file"}, "PATH", "use this Jinja chat template instead of the model's"});
  specs.push_back({{"--verbose-prompt"}, "", "show each turn's rendered prompt and its tokens (stderr)"});
  specs.push_back({{"--history-file"}, "PATH", "input history on a terminal (default ~/.local/state/lumen/chat_history; '' = none)"});
  ArgParser args("chat", "lumen chat -m MODEL [--system TEXT] [options]", specs);
  int rc = 0;
  if (!parse_or_report(args, argc, argv, first, rc)) return rc;
  auto config = engine_config_from_args(args);
  auto gen = generation_params_from_args(args);
  const Status shift_st = config.ok() ? context_shift_mode_from_args(args, &*config) : Status::ok_status();
  for (const Status* st : {&config.status(), &gen.status(), &shift_st}) {
    if (!st->ok()) {
      std::fprintf(stderr, "error: %s\n", st->message().c_str());
      return 2;
    }
  }
  if (!args.has("--n-predict")) gen->max_tokens = 1 << 30;  // a reply runs to its end of turn

  std::string source;
  if (auto path = args.get("--chat-template-file")) {
    auto text = read_text_file(*path);
    if (!text.ok()) {
      std::fprintf(stderr, "error: --chat-template-file: %s\n", text.message().c_str());
      return 2;
    }
    source = *text;
  }
  std::unique_ptr<engine::Engine> eng = load_engine_or_report(args, *config);
  if (!eng) return 1;
  // n_keep < 0: the BOS and system message, counted at each turn (ChatSession).
  const tok::Tokenizer& tk = eng->tokenizer();
  if (Status st = context_shift_from_args(args, tk.add_bos() && tk.bos_id() >= 0 ? 1 : 0, -1, -1, &*gen); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.message().c_str());
    return 2;
  }
  if (source.empty()) source = eng->tokenizer().chat_template();
  if (source.empty()) {
    std::fprintf(stderr, "lumen chat: the model has no chat template; using ChatML\n");
    source = kChatMlTemplate;
  }
  auto tmpl = tok::ChatTemplate::parse(source);
  if (!tmpl.ok()) {
    std::fprintf(stderr, "error: chat template: %s\n", tmpl.message().c_str());
    return 1;
  }
  ChatSession chat(*eng, std::move(tmpl).value(), *gen, args.has("--verbose-prompt"));
  if (auto sys = args.get("--system")) chat.set_system(*sys);
  InterruptFlag interrupt;
  LineReader reader(args.has("--history-file") ? args.get_or("--history-file", "") : default_chat_history_path());
  std::fprintf(stderr, "lumen chat: type a message and press enter; /help for commands, Ctrl-D or /exit to quit\n");
  bool interrupted_at_prompt = false;
  for (;;) {
    std::string message;
    const LineReader::ReadStatus st = read_message(reader, &message);
    if (st == LineReader::ReadStatus::kEof) break;
    if (st == LineReader::ReadStatus::kInterrupted) {
      interrupt.clear();
      if (interrupted_at_prompt) break;
      interrupted_at_prompt = true;
      std::printf("(Ctrl-C again to quit, or /exit)\n");
      continue;
    }
    interrupted_at_prompt = false;
    if (message.empty()) continue;
    reader.add_history(message);
    if (message[0] == '/' && message.rfind("//", 0) != 0) {
      if (!chat.command(message)) break;
      continue;
    }
    chat.turn(message[0] == '/' ? message.substr(1) : message, interrupt);
  }
  return 0;
}

}  // namespace lumen::cli
