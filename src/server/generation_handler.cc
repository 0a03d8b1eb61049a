// POST /v1/completions and /v1/chat/completions: validate -> chat template -> encode ->
// AsyncEngine::submit -> events -> one JSON body or an SSE stream.
//
// A handler thread owns its request from submit to the last event. While it waits for the
// next event it wakes every idle_poll_ms to check that the client is still connected
// (ConnectionProbe) and that the server is not stopping; a client that has gone gets its
// request cancelled at once, which frees its KV blocks.
#include <httplib.h>

#include <chrono>
#include <algorithm>
#include <random>

#include "base/log.h"
#include "base/timer.h"
#include "server/connection_probe.h"
#include "server/openai_response.h"
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

// Asks at most once per interval whether the client is still there; the socket is
// looked up on the first question (the /proc scan is only worth it for requests that last).
class LazyProbe {
 public:
  LazyProbe(const httplib::Request& req, double interval_ms)
      : local_addr_(req.local_addr), remote_addr_(req.remote_addr), local_port_(req.local_port),
        remote_port_(req.remote_port), interval_ms_(interval_ms), t_next_ms_(now_ms() + interval_ms) {}
  // Whether the client has gone, if the interval has passed since the last question.
  bool due_and_gone() {
    const double t = now_ms();
    if (t < t_next_ms_) return false;
    t_next_ms_ = t + interval_ms_;
    return peer_gone();
  }
  bool peer_gone() {
    search();
    return probe_.peer_gone();
  }
  // Finds the socket now. A stream must do this before its first write: once the client
  // has gone, that write draws a reset, and a reset socket has no peer address to match.
  void search() {
    if (searched_) return;
    probe_ = ConnectionProbe::find(local_addr_, local_port_, remote_addr_, remote_port_);
    searched_ = true;
    if (!probe_.found()) LUMEN_LOG_DEBUG("server: connection probe found no socket; disconnects are seen on write");
  }

 private:
  std::string local_addr_, remote_addr_;
  int local_port_, remote_port_;
  double interval_ms_, t_next_ms_;
  bool searched_ = false;
  ConnectionProbe probe_;
};

const char* endpoint_name(Endpoint e) { return e == Endpoint::kChatCompletions ? "chat" : "completions"; }

void log_request(const HandlerEnv& env, Endpoint endpoint, bool stream, int status, int32_t n, const RequestRun& run) {
  if (!env.config->log_requests) return;
  const engine::Usage u = run.usage();
  LUMEN_LOG_INFO("%s %d stream=%d n=%d prompt_tokens=%d completion_tokens=%d cached_tokens=%d ttft_ms=%.1f e2e_ms=%.1f%s",
                 endpoint_name(endpoint), status, stream ? 1 : 0, n, u.prompt_tokens, u.completion_tokens,
                 u.cached_tokens, run.ttft_ms(), run.elapsed_ms(), run.done() ? "" : " (client gone)");
}

// Everything the SSE content provider needs; shared by the provider and its releaser.
struct StreamJob {
  StreamJob(RequestRun r, ResponseHeader h, const ServingState* s, HandlerEnv e, const httplib::Request& req)
      : run(std::move(r)), header(std::move(h)), state(s), env(e), probe(req, e.config->idle_poll_ms),
        text_offset(run.choices().size(), 0) {}
  RequestRun run;
  ResponseHeader header;
  const ServingState* state;
  HandlerEnv env;
  LazyProbe probe;
  std::vector<int64_t> text_offset;
  bool started = false;
  bool ended = false;  // [DONE] written
};

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
  if (ev.text_delta.empty() && ev.logprobs.empty() && !ev.finished) return "";
  return sse_token_chunk(job.header, ev.seq_index, ev.text_delta, ev.logprobs,
                         ev.finished ? ev.finish_reason : FinishReason::kNone, tk, &job.text_offset[ev.seq_index]);
}

bool write_all(httplib::DataSink& sink, const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); }

// One call of the chunked content provider: waits for one event (or a poll interval) and
// writes what it means. Returning false aborts the response (the releaser cancels).
bool provide_stream(StreamJob& job, httplib::DataSink& sink) {
  const auto poll = std::chrono::milliseconds(job.env.config->idle_poll_ms);
  if (!job.started) {
    job.started = true;
    std::string out;
    if (job.header.endpoint == Endpoint::kChatCompletions)
      for (size_t i = 0; i < job.text_offset.size(); ++i) out += sse_role_chunk(job.header, static_cast<int32_t>(i));
    if (!write_all(sink, out)) return false;
  }
  if (job.ended) {
    sink.done();
    return true;
  }
  RequestEvent ev;
  if (!job.run.wait_next(&ev, poll, *job.env.metrics)) {
    if (job.env.stopping->load()) {
      job.run.cancel();
      ApiError e{503, "the server is shutting down", "server_error", "", ""};
      job.ended = true;
      const bool ok = write_all(sink, sse_error_event(api_error_json(e)) + kSseDone);
      sink.done();
      return ok;
    }
    return !job.probe.peer_gone();  // false: the client has gone; the releaser cancels
  }
  // Writes into a closed connection can succeed for a while (socket buffers); ask the
  // kernel too, so a client that hangs up mid-stream is cancelled within idle_poll_ms.
  if (job.probe.due_and_gone()) return false;
  std::string out = event_chunks(job, ev);
  if (job.run.done()) {
    if (job.header.include_usage && !job.run.failed() && !job.run.engine_cancelled())
      out += sse_usage_chunk(job.header, job.run.usage());
    out += kSseDone;
    job.ended = true;
  }
  if (!write_all(sink, out)) return false;
  if (job.ended) sink.done();
  return true;
}

// Non-streaming: waits for the whole request, then answers with one JSON body.
void serve_whole(RequestRun& run, const ResponseHeader& header, const ServingState& state, const HandlerEnv& env,
                 const httplib::Request& req, httplib::Response& res) {
  LazyProbe probe(req, env.config->idle_poll_ms);
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
    // Events keep coming while it runs, so ask between them too (at most once per poll).
    if (got ? probe.due_and_gone() : probe.peer_gone()) {
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
  res.status = 200;
  res.set_content(completion_response_json(header, run.choices(), run.usage(), state.engine->tokenizer()),
                  "application/json");
}

// The prompt's token ids, or a 400 naming the field.
Result<std::vector<int32_t>> prompt_ids(const ServingState& state, const ParsedRequest& pr) {
  const tok::Tokenizer& tk = state.engine->tokenizer();
  if (pr.endpoint == Endpoint::kChatCompletions) return chat_prompt_ids(state, pr.messages);
  if (pr.prompt_is_ids) return pr.prompt_ids;
  // Special-token texts in the prompt are recognised, as llama.cpp's and vLLM's servers do.
  return tk.encode(pr.prompt_text, /*add_special=*/true, /*parse_special=*/true);
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

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  if (error.http_status == 503) res.set_header("Retry-After", "1");
  if (error.http_status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(api_error_json(error), "application/json");
}

Result<std::vector<int32_t>> chat_prompt_ids(const ServingState& state, std::span<const tok::ChatMessage> messages) {
  const tok::Tokenizer& tk = state.engine->tokenizer();
  auto text = state.chat_template.render(messages, /*add_generation_prompt=*/true, state.bos_text, state.eos_text);
  if (!text.ok()) return error("messages: the chat template cannot render them: " + text.message());
  std::vector<int32_t> ids = tk.encode(*text, /*add_special=*/false, /*parse_special=*/true);
  if (tk.add_bos() && tk.bos_id() >= 0 && (ids.empty() || ids[0] != tk.bos_id())) ids.insert(ids.begin(), tk.bos_id());
  return ids;
}

void handle_generation(const ServingState& state, const HandlerEnv& env, Endpoint endpoint,
                       const httplib::Request& req, httplib::Response& res) {
  const double t_arrival = now_ms();
  auto parsed = parse_generation_request(req.body, endpoint, state.limits);
  if (!parsed.ok()) return send_error(res, api_error_from_status(parsed.status()));
  ParsedRequest& pr = *parsed;
  if (!pr.model.empty() && pr.model != state.model_name) {
    ApiError e{404, "the model '" + pr.model + "' does not exist (this server serves '" + state.model_name + "')",
               "invalid_request_error", "model", "model_not_found"};
    return send_error(res, e);
  }
  auto ids = prompt_ids(state, pr);
  if (!ids.ok()) return send_error(res, api_error_from_status(ids.status()));
  const int32_t n_prompt = static_cast<int32_t>(ids->size());
  if (Status st = fit_context(state, pr, n_prompt); !st.ok()) return send_error(res, api_error_from_status(st));
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
  RequestRun run(std::move(stream).value(), n_choices, n_prompt, t_arrival);

  if (!pr.stream) {
    serve_whole(run, header, state, env, req, res);
    run.record(*env.metrics);
    log_request(env, endpoint, false, res.status, n_choices, run);
    return;
  }
  auto job = std::make_shared<StreamJob>(std::move(run), std::move(header), &state, env, req);
  job->probe.search();
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream", [job](size_t, httplib::DataSink& sink) { return provide_stream(*job, sink); },
      [job, endpoint, n_choices](bool) {
        // Called once when the response ends, however it ends.
        if (!job->run.done()) job->run.cancel();
        job->run.record(*job->env.metrics);
        log_request(job->env, endpoint, true, 200, n_choices, job->run);
      });
}

}  // namespace lumen::server
