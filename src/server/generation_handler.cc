// POST /v1/completions and /v1/chat/completions: validate -> chat template -> encode ->
// AsyncEngine::submit -> events -> one JSON body or an SSE stream.
//
// A worker thread owns its request from submit to the last event. While it waits for the
// next event it wakes every idle_poll_ms to check that the client is still connected (the
// transport sees the hang-up: HttpRequest::client_gone) and that the server is not
// stopping; a client that has gone gets its request cancelled at once, which frees its KV
// blocks. A stream's writes wait while the client reads slower than tokens come; only this
// thread waits (the engine thread queues events in the RequestStream).
#include <chrono>
#include <algorithm>
#include <random>

#include "base/log.h"
#include "base/timer.h"
#include "server/openai_response.h"
#include "server/reasoning.h"
#include "server/routing_key.h"
#include "server/serving_state.h"

namespace lumen::server {
namespace {

using engine::FinishReason;
using engine::RequestEvent;

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The events of one running request, folded into per-choice state, usage and latency
// observations. Used by one thread at a time (the handler, then the content provider).
class RequestRun {
 public:
  RequestRun(std::shared_ptr<engine::RequestStream> stream, int32_t n_choices, int32_t n_prompt,
             double t_arrival_ms)
      : stream_(std::move(stream)), choices_(n_choices), per_choice_(n_choices), n_prompt_(n_prompt),
        t_arrival_ms_(t_arrival_ms) {}

  // Blocks up to `timeout` for the next event, folds it in and returns it (false: none came).
  bool wait_next(RequestEvent* ev, std::chrono::milliseconds timeout, ServerMetrics& metrics) {
    if (!stream_->wait_next(ev, timeout)) return false;
    fold(*ev, metrics);
    return true;
  }
  bool done() const { return done_; }
  void cancel() {
    stream_->cancel();
    cancelled_by_server_ = true;
  }
  bool cancelled_by_server() const { return cancelled_by_server_; }
  const std::string& error() const { return error_; }
  bool failed() const { return !error_.empty(); }
  // Cancelled by the engine itself (shutdown), not by this handler.
  bool engine_cancelled() const { return engine_cancelled_; }
  std::vector<ChoiceResult>& choices() { return choices_; }

  engine::Usage usage() const {
    if (have_engine_usage_) return usage_;
    engine::Usage u;  // the engine did not report: count what came through
    u.prompt_tokens = n_prompt_;
    u.completion_tokens = n_generated_;
    return u;
  }

  // Records the request's latencies (if it completed) and how it ended.
  void record(ServerMetrics& metrics) const {
    Outcome outcome = Outcome::kStop;
    if (failed()) outcome = Outcome::kError;
    else if (!done_ || cancelled_by_server_ || engine_cancelled_) outcome = Outcome::kCancelled;
    else if (std::any_of(choices_.begin(), choices_.end(), [](const ChoiceResult& c) {
               return c.finish_reason == FinishReason::kLength || c.finish_reason == FinishReason::kContextFull;
             }))
      outcome = Outcome::kLength;
    metrics.count_outcome(outcome);
    if (outcome != Outcome::kStop && outcome != Outcome::kLength) return;
    const engine::RequestTimings& t = timings_;
    if (t.arrival_ms > 0 && t.finish_ms > 0) {  // the engine's clock: from its arrival
      if (t.n_generated > 0 && t.first_token_ms > 0) metrics.ttft_s.observe(t.ttft_ms() / 1e3);
      if (t.first_scheduled_ms > 0) metrics.queue_s.observe((t.first_scheduled_ms - t.arrival_ms) / 1e3);
      metrics.e2e_s.observe((t.finish_ms - t.arrival_ms) / 1e3);
    } else {  // the handler's clock: from the HTTP request
      if (t_first_token_ms_ > 0) metrics.ttft_s.observe((t_first_token_ms_ - t_arrival_ms_) / 1e3);
      metrics.e2e_s.observe((t_last_event_ms_ - t_arrival_ms_) / 1e3);
    }
  }

  double ttft_ms() const { return t_first_token_ms_ > 0 ? t_first_token_ms_ - t_arrival_ms_ : 0; }
  double elapsed_ms() const { return (t_last_event_ms_ > 0 ? t_last_event_ms_ : now_ms()) - t_arrival_ms_; }

 private:
  void fold(const RequestEvent& ev, ServerMetrics& metrics) {
    const double t = now_ms();
    t_last_event_ms_ = t;
    if (ev.seq_index >= 0 && ev.seq_index < static_cast<int32_t>(choices_.size())) {
      PerChoice& pc = per_choice_[ev.seq_index];
      ChoiceResult& c = choices_[ev.seq_index];
      const size_t k = ev.new_token_ids.size();
      if (k > 0) {
        if (t_first_token_ms_ == 0) t_first_token_ms_ = t;
        if (pc.t_last_token_ms > 0)  // spread a multi-token event evenly over its tokens
          for (size_t i = 0; i < k; ++i) metrics.itl_s.observe((t - pc.t_last_token_ms) / 1e3 / k);
        pc.t_last_token_ms = t;
        n_generated_ += static_cast<int32_t>(k);
      }
      if (ev.finished) {
        pc.finished = true;
        c.finish_reason = ev.finish_reason;
      }
    } else {
      LUMEN_LOG_WARN("server: engine event for choice %d of a %zu-choice request ignored", ev.seq_index,
                     choices_.size());
    }
    if (ev.finish_reason == FinishReason::kError) error_ = ev.error.empty() ? "engine error" : ev.error;
    if (ev.finish_reason == FinishReason::kCancelled && !cancelled_by_server_) engine_cancelled_ = true;
    if (ev.request_finished) {
      done_ = true;
      usage_ = ev.usage;
      timings_ = ev.timings;
      have_engine_usage_ = ev.usage.prompt_tokens > 0;
    }
    // Robust to an engine that marks each choice finished but not the request.
    if (std::all_of(per_choice_.begin(), per_choice_.end(), [](const PerChoice& p) { return p.finished; }))
      done_ = true;
  }

  struct PerChoice {
    double t_last_token_ms = 0;
    bool finished = false;
  };

  std::shared_ptr<engine::RequestStream> stream_;
  std::vector<ChoiceResult> choices_;
  std::vector<PerChoice> per_choice_;
  int32_t n_prompt_ = 0;
  int32_t n_generated_ = 0;
  double t_arrival_ms_ = 0;
  double t_first_token_ms_ = 0;
  double t_last_event_ms_ = 0;
  bool done_ = false;
  bool cancelled_by_server_ = false;
  bool engine_cancelled_ = false;
  bool have_engine_usage_ = false;
  engine::Usage usage_;
  engine::RequestTimings timings_;
  std::string error_;
};

const char* endpoint_name(Endpoint e) { return e == Endpoint::kChatCompletions ? "chat" : "completions"; }

void log_request(const HandlerEnv& env, Endpoint endpoint, bool stream, int status, int32_t n, const RequestRun& run) {
  if (!env.config->log_requests) return;
  const engine::Usage u = run.usage();
  LUMEN_LOG_INFO("%s %d stream=%d n=%d prompt_tokens=%d completion_tokens=%d cached_tokens=%d ttft_ms=%.1f e2e_ms=%.1f%s",
                 endpoint_name(endpoint), status, stream ? 1 : 0, n, u.prompt_tokens, u.completion_tokens,
                 u.cached_tokens, run.ttft_ms(), run.elapsed_ms(), run.done() ? "" : " (client gone)");
}

// Everything a stream needs while it runs.
struct StreamJob {
  StreamJob(RequestRun r, ResponseHeader h, const ServingState* s, HandlerEnv e, ToolRequest t)
      : run(std::move(r)), header(std::move(h)), state(s), env(e), text_offset(run.choices().size(), 0),
        tools(std::move(t)) {
    if (header.reasoning)
      splitters.assign(text_offset.size(), ReasoningSplitter(header.reasoning_open, s->reasoning_tags));
  }
  RequestRun run;
  ResponseHeader header;
  const ServingState* state;
  HandlerEnv env;
  std::vector<int64_t> text_offset;
  ToolRequest tools;  // header.tools: each choice's text is held in run.choices() until it ends
  std::vector<ReasoningSplitter> splitters;  // header.reasoning: one per choice
};

// A finished choice's text -> its tool calls and the content around them.
void parse_choice_tools(ChoiceResult& c, const ToolRequest& tools, ToolFormat format) {
  ToolOutput out = parse_tool_output(c.text, tools, format);
  c.tool_calls = std::move(out.calls);
  if (!c.tool_calls.empty()) c.text = std::move(out.content);
}

// The SSE text for one event ("" if there is nothing to tell the client).
std::string event_chunks(StreamJob& job, const RequestEvent& ev) {
  const tok::Tokenizer& tk = job.state->engine->tokenizer();
  if (ev.finish_reason == FinishReason::kError) {
    ApiError e;
    e.http_status = 500;
    e.type = "server_error";
    e.message = ev.error.empty() ? "engine error" : ev.error;
    return sse_error_event(api_error_json(e));
  }
  if (ev.finish_reason == FinishReason::kCancelled) {
    ApiError e;
    e.http_status = 503;
    e.type = "server_error";
    e.message = "the request was cancelled: the server is shutting down";
    return sse_error_event(api_error_json(e));
  }
  if (ev.seq_index < 0 || ev.seq_index >= static_cast<int32_t>(job.text_offset.size())) return "";
  std::string out;
  std::string text = ev.text_delta;
  if (job.header.reasoning) {  // the <think> part goes out as reasoning_content deltas
    ReasoningSplitter& sp = job.splitters[ev.seq_index];
    ReasoningText d = sp.feed(ev.text_delta);
    if (ev.finished) {
      ReasoningText rest = sp.finish();
      d.reasoning += rest.reasoning;
      d.content += rest.content;
    }
    if (!d.reasoning.empty()) out = sse_reasoning_chunk(job.header, ev.seq_index, d.reasoning);
    text = std::move(d.content);
  }
  if (job.header.tools) {
    ChoiceResult& c = job.run.choices()[ev.seq_index];
    c.text += text;
    if (!ev.finished) return out;
    parse_choice_tools(c, job.tools, job.state->template_tools.format);
    return out + sse_tool_choice_end(job.header, ev.seq_index, c);
  }
  if (text.empty() && ev.logprobs.empty() && !ev.finished) return out;
  return out + sse_token_chunk(job.header, ev.seq_index, text, ev.logprobs,
                               ev.finished ? ev.finish_reason : FinishReason::kNone, tk,
                               &job.text_offset[ev.seq_index]);
}

// Writes the SSE events of a running request until its end, the client's hang-up or the
// server's stop (then an error event and [DONE]). Returns when the stream is complete.
void run_stream(StreamJob& job, StreamWriter& out) {
  const auto poll = std::chrono::milliseconds(job.env.config->idle_poll_ms);
  std::string first;
  if (job.header.endpoint == Endpoint::kChatCompletions)
    for (size_t i = 0; i < job.text_offset.size(); ++i) first += sse_role_chunk(job.header, static_cast<int32_t>(i));
  if (!first.empty() && !out.write(first)) return;
  for (;;) {
    // Checked before every event: a request that streams without pause must still end
    // when the server stops.
    if (job.env.stopping->load()) {
      job.run.cancel();
      ApiError e{503, "the server is shutting down: the request was ended before it finished", "server_error", "", ""};
      out.write(sse_error_event(api_error_json(e)) + kSseDone);
      return;
    }
    RequestEvent ev;
    if (!job.run.wait_next(&ev, poll, *job.env.metrics)) {
      if (out.client_gone()) return;
      continue;
    }
    std::string chunk = event_chunks(job, ev);
    if (job.run.done()) {
      if (job.header.include_usage && !job.run.failed() && !job.run.engine_cancelled())
        chunk += sse_usage_chunk(job.header, job.run.usage());
      chunk += kSseDone;
    }
    if (!chunk.empty() && !out.write(chunk)) return;
    if (job.run.done()) return;
    if (out.client_gone()) return;
  }
}

// Non-streaming: waits for the whole request, then answers with one JSON body.
void serve_whole(RequestRun& run, const ResponseHeader& header, const ServingState& state, const HandlerEnv& env,
                 const ToolRequest& tools, const HttpRequest& req, HttpResponse& res) {
  const auto poll = std::chrono::milliseconds(env.config->idle_poll_ms);
  while (!run.done()) {
    RequestEvent ev;
    const bool got = run.wait_next(&ev, poll, *env.metrics);
    if (got && ev.seq_index >= 0 && ev.seq_index < static_cast<int32_t>(run.choices().size())) {
      ChoiceResult& c = run.choices()[ev.seq_index];
      c.text += ev.text_delta;
      c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    }
    if (run.done()) break;
    if (env.stopping->load()) {
      run.cancel();
      send_error(res, ApiError{503, "the server is shutting down", "server_error", "", ""});
      return;
    }
    if (req.client_gone()) {
      run.cancel();
      res.status = 499;  // nginx's "client closed request": nobody reads it, the logs do
      return;
    }
  }
  if (run.failed()) {
    send_error(res, ApiError{500, run.error(), "server_error", "", ""});
    return;
  }
  if (run.engine_cancelled()) {
    send_error(res, ApiError{503, "the request was cancelled: the server is shutting down", "server_error", "", ""});
    return;
  }
  for (ChoiceResult& c : run.choices()) {
    if (header.reasoning) {
      ReasoningText r = split_reasoning(c.text, header.reasoning_open, state.reasoning_tags);
      c.reasoning = std::move(r.reasoning);
      c.text = std::move(r.content);
    }
    if (header.tools) parse_choice_tools(c, tools, state.template_tools.format);
  }
  res.status = 200;
  res.set_content(completion_response_json(header, run.choices(), run.usage(), state.engine->tokenizer()),
                  "application/json");
}

// The prompt's token ids, or a 400 naming the field.
Result<std::vector<int32_t>> prompt_ids(const ServingState& state, const ParsedRequest& pr, bool* opens_reasoning) {
  const tok::Tokenizer& tk = state.engine->tokenizer();
  if (pr.endpoint == Endpoint::kChatCompletions) return chat_prompt_ids(state, pr, opens_reasoning);
  if (pr.prompt_is_ids) return pr.prompt_ids;
  // Special-token texts in the prompt are recognised, as llama.cpp's and vLLM's servers do.
  return tk.encode(pr.prompt_text, /*add_special=*/true, /*parse_special=*/true);
}

// tool_choice "required" or a named function: the grammar of a call (cached like the others).
Status tool_grammar(const ServingState& state, ParsedRequest& pr) {
  using Choice = ToolRequest::Choice;
  if (!pr.tools.active() || (pr.tools.choice != Choice::kRequired && pr.tools.choice != Choice::kNamed))
    return Status();
  LUMEN_ASSIGN_OR_RETURN(std::string gbnf, tool_call_gbnf(pr.tools, state.template_tools));
  auto g = state.grammars->get(gbnf);
  if (!g.ok()) return error("tools: " + g.message());
  pr.params.grammar = std::move(g).value();
  return Status();
}

// The opt-in truncations (README "Context limits"), before fit_context checks the rest.
// "truncation": "auto" drops the oldest turn (a user message and the replies after it) while
// the prompt leaves no room for max_tokens (or for one token, without max_tokens), keeping
// the leading system messages and the latest user turn; "truncate_prompt_tokens": k keeps
// the last k tokens (-1: the room).
Status truncate_prompt(const ServingState& state, ParsedRequest& pr, std::vector<int32_t>* ids) {
  const int64_t room = state.limits.n_ctx - (pr.max_tokens_given ? pr.params.max_tokens : 1);
  if (pr.truncate_oldest_turns) {
    std::vector<tok::ChatMessage>& m = pr.messages;
    for (;;) {
      if (static_cast<int64_t>(ids->size()) <= room) break;
      size_t first = 0;  // the oldest turn starts after the leading system messages
      while (first < m.size() && m[first].role == "system") ++first;
      size_t last_user = m.size();
      for (size_t i = m.size(); i-- > first;)
        if (m[i].role == "user") {
          last_user = i;
          break;
        }
      if (first >= last_user || last_user == m.size()) break;  // nothing older than the latest user turn
      size_t end = first + 1;  // the turn: its user message and what answers it
      while (end < last_user && m[end].role != "user") ++end;
      m.erase(m.begin() + static_cast<ptrdiff_t>(first), m.begin() + static_cast<ptrdiff_t>(end));
      LUMEN_ASSIGN_OR_RETURN(*ids, chat_prompt_ids(state, pr));  // (with its tools, if any)
    }
  }
  if (pr.truncate_prompt_tokens != 0) {
    const int64_t k = pr.truncate_prompt_tokens > 0 ? pr.truncate_prompt_tokens : std::max<int64_t>(room, 1);
    if (static_cast<int64_t>(ids->size()) > k) ids->erase(ids->begin(), ids->end() - k);
  }
  return Status();
}

// Context arithmetic: the prompt must leave room, and prompt + max_tokens must fit.
Status fit_context(const ServingState& state, ParsedRequest& pr, int32_t n_prompt) {
  const int32_t n_ctx = state.limits.n_ctx;
  const char* prompt_field = pr.endpoint == Endpoint::kChatCompletions ? "messages" : "prompt";
  if (n_prompt == 0) return error(std::string(prompt_field) + ": no tokens");
  if (n_prompt >= n_ctx)
    return error(std::string(prompt_field) + ": " + std::to_string(n_prompt) +
                 " tokens leave no room to generate in the context of " + std::to_string(n_ctx) + " tokens");
  if (!pr.max_tokens_given) {
    pr.params.max_tokens = n_ctx - n_prompt;
  } else if (static_cast<int64_t>(n_prompt) + pr.params.max_tokens > n_ctx) {
    return error("max_tokens: the prompt's " + std::to_string(n_prompt) + " tokens + max_tokens " +
                 std::to_string(pr.params.max_tokens) + " exceed the context of " + std::to_string(n_ctx) +
                 " tokens");
  }
  return Status();
}

}  // namespace

void send_error(HttpResponse& res, const ApiError& error) {
  res.status = error.http_status;
  if (error.http_status == 503) res.set_header("Retry-After", "1");
  if (error.http_status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(api_error_json(error), "application/json");
}

namespace {

Result<std::vector<int32_t>> encode_chat(const ServingState& state, const Result<std::string>& text) {
  const tok::Tokenizer& tk = state.engine->tokenizer();
  if (!text.ok()) return error("messages: the chat template cannot render them: " + text.message());
  std::vector<int32_t> ids = tk.encode(*text, /*add_special=*/false, /*parse_special=*/true);
  if (tk.add_bos() && tk.bos_id() >= 0 && (ids.empty() || ids[0] != tk.bos_id())) ids.insert(ids.begin(), tk.bos_id());
  return ids;
}

}  // namespace

Result<std::vector<int32_t>> chat_prompt_ids(const ServingState& state, std::span<const tok::ChatMessage> messages) {
  return encode_chat(state, state.chat_template.render(messages, /*add_generation_prompt=*/true, state.bos_text,
                                                       state.eos_text));
}

Result<std::vector<int32_t>> chat_prompt_ids(const ServingState& state, const ParsedRequest& pr,
                                             bool* opens_reasoning) {
  const bool json = needs_tool_rendering(pr) || !pr.template_kwargs_json.empty();
  const Result<std::string> text =
      json ? state.chat_template.render_json(tool_chat_context(pr, state.template_tools, state.bos_text, state.eos_text))
           : state.chat_template.render(pr.messages, /*add_generation_prompt=*/true, state.bos_text, state.eos_text);
  if (opens_reasoning) *opens_reasoning = text.ok() && prompt_opens_reasoning(*text, state.reasoning_tags);
  return encode_chat(state, text);
}

void handle_generation(const ServingState& state, const HandlerEnv& env, Endpoint endpoint,
                       const HttpRequest& req, HttpResponse& res) {
  const double t_arrival = now_ms();
  auto parsed = parse_generation_request(req.body, endpoint, state.limits);
  if (!parsed.ok()) return send_error(res, api_error_from_status(parsed.status()));
  ParsedRequest& pr = *parsed;
  if (!pr.model.empty() && !serves_model(state, pr.model)) return send_error(res, model_not_found(state, pr.model));
  auto grammar = compile_constraint(*state.grammars, pr.constraint);
  if (!grammar.ok()) return send_error(res, api_error_from_status(grammar.status()));
  pr.params.grammar = std::move(grammar).value();
  if (Status st = tool_grammar(state, pr); !st.ok()) return send_error(res, api_error_from_status(st));
  // The control tokens the parsers need to see: the tool format's markers, the reasoning tags.
  if (pr.tools.active()) pr.params.keep_special = state.tool_markers;
  if (endpoint == Endpoint::kChatCompletions && state.reasoning) {
    std::vector<int32_t>& keep = pr.params.keep_special;
    keep.insert(keep.end(), state.reasoning_markers.begin(), state.reasoning_markers.end());
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
  }
  bool opens_reasoning = false;
  auto ids = prompt_ids(state, pr, &opens_reasoning);
  if (!ids.ok()) return send_error(res, api_error_from_status(ids.status()));
  if (Status st = truncate_prompt(state, pr, &*ids); !st.ok()) return send_error(res, api_error_from_status(st));
  const int32_t n_prompt = static_cast<int32_t>(ids->size());
  if (Status st = fit_context(state, pr, n_prompt); !st.ok()) return send_error(res, api_error_from_status(st));
  res.set_header("X-Routing-Key", routing_key(req.header_value("X-Session-Id"), pr.user, pr.params.cache_salt, *ids));
  if (!pr.seed_given) pr.params.sampling.seed = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();

  engine::Request request;
  request.prompt_ids = std::move(ids).value();
  request.params = pr.params;
  const int32_t n_choices = pr.params.n;
  auto stream = state.engine->submit(std::move(request));
  if (!stream.ok()) {
    if (stream.status().code() == StatusCode::kUnavailable) env.metrics->count_outcome(Outcome::kRejected);
    return send_error(res, api_error_from_status(stream.status()));
  }

  ResponseHeader header;
  header.endpoint = endpoint;
  header.id = std::string(endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-") +
              std::to_string(state.created_s) + "-" + std::to_string((*stream)->id());
  header.created_s = unix_seconds();
  header.model = state.model_name;
  header.logprobs = pr.params.logprobs;
  header.include_usage = pr.include_usage;
  header.tools = pr.tools.active();
  header.reasoning = endpoint == Endpoint::kChatCompletions && state.reasoning;
  header.reasoning_open = opens_reasoning;
  RequestRun run(std::move(stream).value(), n_choices, n_prompt, t_arrival);

  if (!pr.stream) {
    serve_whole(run, header, state, env, pr.tools, req, res);
    run.record(*env.metrics);
    log_request(env, endpoint, false, res.status, n_choices, run);
    return;
  }
  auto job = std::make_shared<StreamJob>(std::move(run), std::move(header), &state, env, std::move(pr.tools));
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_stream("text/event-stream", [job, endpoint, n_choices](StreamWriter& out) {
    run_stream(*job, out);
    if (!job->run.done()) job->run.cancel();  // the client went away (or the server stops)
    job->run.record(*job->env.metrics);
    log_request(job->env, endpoint, true, 200, n_choices, job->run);
  });
}

}  // namespace lumen::server
