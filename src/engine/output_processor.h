// OutputProcessor: what happens to a step's logits rows, per sequence —
//
//   prompt rows -> prompt logprobs (if asked)
//   last row    -> sample -> append token -> logprobs / top logits (if asked)
//   k + 1 rows  -> verify k proposed tokens (speculation: process_spec_chunk) -> append
//                  the accepted ones and one more, each through the same per-token path
//               -> EOS? -> detokenize (streaming, UTF-8 whole) -> stop strings -> length,
//                  context -> finish
//
// and the events that tell the client. It works on the engine's Sequence objects but never
// touches the KV cache or the scheduler's lists: the engine releases what finished.
//
// Events of one step go out in order, and a request's last event — the only one with
// request_finished, usage and timings — is the last of its events in the step
// (complete_requests). Consumers stop reading a request at that event, so whichever of its
// n completions finishes last in processing order must not carry it before the others'.
//
// Single-threaded by contract (the engine thread).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "tokenizer/tokenizer.h"

namespace lumen::engine {

class OutputProcessor {
 public:
  OutputProcessor(const tok::Tokenizer& tokenizer, int32_t n_ctx, int32_t max_seqs, int32_t n_vocab);

  // Starts a step (or a cancel): forgets the previous step's finished requests.
  void begin_step() { done_.clear(); }

  // Consumes chunk i of the step for `seq`: prompt logprobs from its prompt rows; when the
  // chunk catches up, the next token from its last row (or kLength when the sequence has
  // all its tokens). Fills ev (request id and completion index included).
  void process_chunk(Sequence& seq, const ScheduledChunk& c, const StepLogits& logits, size_t i, RequestEvent& ev);
  // Chunk i verified c.n_spec proposed tokens, seq.draft[0, c.n_spec), which the engine has
  // already taken off the end of seq.tokens. Row j of the chunk (position c.pos0 + j)
  // decides position c.pos0 + j + 1:
  //
  //   rows:      r0        r1        r2        r3            (c.n_spec = 3)
  //   verifies:  d0        d1        d2        (bonus)
  //   e.g.       accept    accept    reject -> residual token x; r3 unused
  //   emitted:   d0 d1 x                     (d2 dropped)
  //
  // Each emitted token goes through the per-token path (sampler history, logprobs, EOS,
  // stop strings, length), so penalties at position j see the tokens accepted before it,
  // and the sequence can finish in the middle. With a grammar, position j's distribution is
  // masked by the matcher after the tokens emitted before it (a proposal outside the mask
  // is rejected), so speculation stays exact for constrained requests too. Returns how many proposals were emitted
  // (accepted); the engine truncates the KV of the rest.
  int32_t process_spec_chunk(Sequence& seq, const ScheduledChunk& c, const StepLogits& logits, size_t i,
                             RequestEvent& ev);
  // The first token of a forked completion, sampled from its parent's row.
  void sample_first(Sequence& child, std::span<const float> row, RequestEvent& ev);
  // Ends a completion: flushes held-back text (not after a stop string or a cancel), sets
  // the event's finish fields, counts its tokens into the request's usage. The engine
  // releases its KV blocks.
  void finish(Sequence& seq, FinishReason reason, RequestEvent& ev);

  // After the step's events are written: every request whose completions have all
  // finished gets request_finished, usage and timings on its last event among `events`.
  std::span<RequestState* const> complete_requests(std::span<RequestEvent> events);
  // Requests whose last completion finished since begin_step() (for the engine to retire).
  std::span<RequestState* const> finished_requests() const { return done_; }

  uint64_t n_generated_tokens() const { return n_generated_tokens_; }
  // Whether a completion that filled the context goes on after a context shift
  // (context_shift.h; the engine shifts it before the next step) instead of finishing.
  bool can_shift_context(const Sequence& seq) const;

  // Called with the logits of every prompt row that scores a prompt token, of requests that
  // ask for prompt_logprobs (Engine::set_prompt_logits_observer).
  using PromptLogitsFn = std::function<void(RequestId id, int64_t pos, std::span<const float> logits)>;
  void set_prompt_logits_observer(PromptLogitsFn fn) { prompt_logits_observer_ = std::move(fn); }

 private:
  // An embedding request's chunk: pools its hidden-state rows; the vector on `ev` at the end.
  void pool_embedding(Sequence& seq, const ScheduledChunk& c, const StepLogits& logits, size_t i, RequestEvent& ev);
  // Samples the sequence's next token (under its grammar, if any) and processes it.
  void sample_and_process(Sequence& seq, std::span<const float> logits, RequestEvent& ev);
  // The grammar's mask for the sequence's next token into seq.mask; false (the sequence
  // finished with an error) when no token can continue the text.
  bool fill_grammar_mask(Sequence& seq, RequestEvent& ev);
  void process_new_token(Sequence& seq, int32_t token_id, std::span<const float> logits, RequestEvent& ev);

  const tok::Tokenizer& tokenizer_;
  int32_t n_ctx_;
  uint64_t n_generated_tokens_ = 0;
  std::vector<RequestState*> done_;  // requests whose last completion finished this step
  std::vector<float> probs_;         // [n_vocab] the target distribution while verifying
  PromptLogitsFn prompt_logits_observer_;
};

// FNV-1a over the bytes of the logits: lets a benchmark prove it computed the same thing.
uint64_t hash_floats(std::span<const float> values);

}  // namespace lumen::engine
