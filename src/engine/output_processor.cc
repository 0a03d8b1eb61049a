#include "engine/output_processor.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "base/timer.h"
#include "engine/context_shift.h"
#include "spec/rejection.h"

namespace lumen::engine {

uint64_t hash_floats(std::span<const float> values) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = reinterpret_cast<const unsigned char*>(values.data());
  for (size_t i = 0; i < values.size_bytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

namespace {

// The k largest logits as (id, logit), descending, ties by id ascending. O(n log k).
// Only for requests that ask for top logits or logprobs.
std::vector<std::pair<int32_t, float>> top_logits(std::span<const float> logits, int32_t k) {
  auto better = [](const std::pair<int32_t, float>& a, const std::pair<int32_t, float>& b) {
    return a.second > b.second || (a.second == b.second && a.first < b.first);
  };
  std::vector<std::pair<int32_t, float>> heap;  // heap under `better`: the worst kept on top
  heap.reserve(k + 1);
  for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) {
    if (static_cast<int32_t>(heap.size()) < k) {
      heap.emplace_back(i, logits[i]);
      std::push_heap(heap.begin(), heap.end(), better);
    } else if (better({i, logits[i]}, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = {i, logits[i]};
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
  std::sort(heap.begin(), heap.end(), better);
  return heap;
}

}  // namespace

bool OutputProcessor::can_shift_context(const Sequence& seq) const {
  const GenerationParams& p = seq.req->params;
  return p.context_shift && !p.prompt_logprobs && plan_context_shift(n_ctx_, p.n_keep).n_discard > 0;
}

OutputProcessor::OutputProcessor(const tok::Tokenizer& tokenizer, int32_t n_ctx, int32_t max_seqs, int32_t n_vocab)
    : tokenizer_(tokenizer), n_ctx_(n_ctx), probs_(static_cast<size_t>(n_vocab)) {
  done_.reserve(max_seqs);
}

int32_t OutputProcessor::process_spec_chunk(Sequence& seq, const ScheduledChunk& c, const StepLogits& logits,
                                            size_t i, RequestEvent& ev) {
  RequestState& req = *seq.req;
  ev.request_id = req.id;
  ev.seq_index = seq.seq_index;
  const ChunkLogits& cl = logits.chunks[i];
  LUMEN_CHECK(c.catches_up && c.n_spec > 0 && cl.n_rows == c.n_spec + 1);
  LUMEN_CHECK(static_cast<int64_t>(seq.tokens.size()) == c.pos0 + 1);  // proposals taken off
  const auto n_vocab = static_cast<size_t>(logits.n_vocab);
  seq.spec.proposed += c.n_spec;  // counted before the tokens: the last one may finish the sequence
  int32_t n_accepted = 0;
  for (int32_t j = 0; j <= c.n_spec; ++j) {
    const std::span<const float> row = logits.row(cl.row_begin + j);
    if (j == c.n_spec) {  // every proposal accepted: the bonus token, a plain sample
      sample_and_process(seq, row, ev);
      break;
    }
    const std::span<const float> q =
        seq.draft_probs_valid ? std::span<const float>(seq.draft_probs).subspan(j * n_vocab, n_vocab)
                              : std::span<const float>();
    // With a grammar, p is masked by the matcher's state after the tokens accepted so far
    // (the proposer knows no grammar; a draft token outside the mask has p = 0 and is
    // rejected), so the emitted tokens are those plain constrained decoding would draw.
    std::span<const uint64_t> allowed;
    if (seq.matcher) {
      if (!fill_grammar_mask(seq, ev)) break;
      allowed = seq.mask;
    }
    const spec::VerifyDraw v = spec::verify_position(seq.sampler, row, seq.draft[j], q, probs_, allowed);
    if (v.accepted) {
      ++n_accepted;
      ++seq.spec.accepted;
    }
    if (seq.matcher)
      LUMEN_CHECK_MSG(seq.matcher->accept_token(v.token), "a token the grammar's mask allowed was refused");
    process_new_token(seq, v.token, row, ev);
    if (!v.accepted || seq.finished) break;
  }
  return n_accepted;
}

// Sums the chunk's hidden-state rows into the sequence's pooling, in position order (so the
// result does not depend on how the prompt was chunked), and when the prompt is done puts
// the pooled vector, L2-normalised, on the event.
void OutputProcessor::pool_embedding(Sequence& seq, const ScheduledChunk& c, const StepLogits& logits, size_t i,
                                     RequestEvent& ev) {
  const ChunkLogits& cl = logits.chunks[i];
  LUMEN_CHECK(seq.embd_sum.size() == static_cast<size_t>(logits.n_embd));
  for (int32_t r = 0; r < cl.n_embd_rows; ++r) {
    const std::span<const float> row = logits.embd_row(cl.embd_row_begin + r);
    for (size_t j = 0; j < row.size(); ++j) seq.embd_sum[j] += row[j];
    ++seq.n_embd_pooled;
  }
  if (!c.catches_up) return;
  LUMEN_CHECK_MSG(seq.n_embd_pooled > 0, "an embedding request's prompt ended without a pooled row");
  double norm2 = 0;
  for (double v : seq.embd_sum) norm2 += v * v;
  // Mean pooling divides by the count first; a scale does not change the normalised vector,
  // so every pooling ends the same way.
  const double scale = norm2 > 0 ? 1.0 / std::sqrt(norm2) : 0.0;
  ev.embedding.resize(seq.embd_sum.size());
  for (size_t j = 0; j < seq.embd_sum.size(); ++j) ev.embedding[j] = static_cast<float>(seq.embd_sum[j] * scale);
}

void OutputProcessor::process_chunk(Sequence& seq, const ScheduledChunk& c, const StepLogits& logits, size_t i,
                                    RequestEvent& ev) {
  RequestState& req = *seq.req;
  ev.request_id = req.id;
  ev.seq_index = seq.seq_index;
  const ChunkLogits& cl = logits.chunks[i];
  if (req.params.prompt_logprobs) {
    // Row at position p scores the prompt token at p + 1.
    for (int32_t r = 0; r < cl.n_rows; ++r) {
      const int64_t p = cl.pos_first + r;
      if (p + 1 >= req.n_prompt) break;
      std::span<const float> row = logits.row(cl.row_begin + r);
      if (prompt_logits_observer_) prompt_logits_observer_(req.id, p, row);
      seq.prompt_logprobs.push_back(sample::log_softmax_at(row, seq.tokens[p + 1]));
      seq.prompt_argmax.push_back(sample::argmax(row));
    }
  }
  if (req.params.embed != Pooling::kNone) pool_embedding(seq, c, logits, i, ev);
  if (!c.catches_up) return;
  if (req.params.prompt_logprobs && seq.sched.n_tokens_computed == req.n_prompt) {
    ev.prompt_logprobs = std::move(seq.prompt_logprobs);
    ev.prompt_argmax = std::move(seq.prompt_argmax);
  }
  if (seq.n_generated >= req.params.max_tokens) {
    finish(seq, FinishReason::kLength, ev);
    return;
  }
  LUMEN_CHECK(cl.n_rows > 0);
  const std::span<const float> last = logits.last_row(i);
  sample_and_process(seq, last, ev);
}

void OutputProcessor::sample_first(Sequence& child, std::span<const float> row, RequestEvent& ev) {
  ev.request_id = child.req->id;
  ev.seq_index = child.seq_index;
  sample_and_process(child, row, ev);
}

void OutputProcessor::sample_and_process(Sequence& seq, std::span<const float> logits, RequestEvent& ev) {
  if (!seq.matcher) {
    process_new_token(seq, seq.sampler.sample(logits), logits, ev);
    return;
  }
  if (!fill_grammar_mask(seq, ev)) return;
  const int32_t id = seq.sampler.sample(logits, seq.mask);
  LUMEN_CHECK_MSG(seq.matcher->accept_token(id), "a token the grammar's mask allowed was refused");
  process_new_token(seq, id, logits, ev);
}

bool OutputProcessor::fill_grammar_mask(Sequence& seq, RequestEvent& ev) {
  grammar::GrammarMatcher& m = *seq.matcher;
  bool any = m.fill_mask(seq.mask);
  if (any) {
    uint64_t bits = 0;
    for (const uint64_t w : seq.mask) bits |= w;
    any = bits != 0;
  }
  if (!any) {
    ev.error = m.failed() ? m.error() : "grammar: no token of the vocabulary can continue the text";
    finish(seq, FinishReason::kError, ev);
  }
  return any;
}

void OutputProcessor::process_new_token(Sequence& seq, int32_t token_id, std::span<const float> logits,
                                        RequestEvent& ev) {
  RequestState& req = *seq.req;
  if (req.timings.first_token_ms == 0) req.timings.first_token_ms = now_ms();
  if (seq.n_generated == 0 && req.params.hash_logits) ev.logits_hash = hash_floats(logits);
  seq.n_generated++;
  n_generated_tokens_++;
  seq.tokens.push_back(token_id);  // capacity n_ctx + 1: the scheduler's span stays valid
  seq.sched.tokens = seq.tokens;
  seq.sampler.accept(token_id);
  ev.new_token_ids.push_back(token_id);
  if (req.params.top_logits > 0) ev.top.push_back(top_logits(logits, req.params.top_logits));
  if (req.params.logprobs >= 0) {
    TokenLogprob lp;
    lp.id = token_id;
    const double lse = sample::logsumexp(logits);
    lp.logprob = static_cast<float>(logits[token_id] - lse);
    if (req.params.logprobs > 0) {
      for (const auto& [id, logit] : top_logits(logits, req.params.logprobs))
        lp.top.emplace_back(id, static_cast<float>(logit - lse));
    }
    ev.logprobs.push_back(std::move(lp));
  }
  if (tokenizer_.is_eog(token_id) && (!req.params.ignore_eos || seq.matcher)) {  // a grammar's end is the end
    finish(seq, FinishReason::kEos, ev);
    return;
  }
  ev.text_delta += seq.stop.push(seq.detok.push(token_id));
  if (seq.matcher && seq.matcher->must_end()) {
    finish(seq, FinishReason::kStop, ev);  // the grammar is complete and allows nothing more
  } else if (seq.stop.stopped()) {
    finish(seq, FinishReason::kStop, ev);
  } else if (seq.n_generated >= req.params.max_tokens) {
    finish(seq, FinishReason::kLength, ev);
  } else if (static_cast<int64_t>(seq.tokens.size()) > n_ctx_ && !can_shift_context(seq)) {
    finish(seq, FinishReason::kContextFull, ev);  // the next token would not fit
  }
}

void OutputProcessor::finish(Sequence& seq, FinishReason reason, RequestEvent& ev) {
  LUMEN_DCHECK(!seq.finished);
  ev.request_id = seq.req->id;
  ev.seq_index = seq.seq_index;
  if (reason != FinishReason::kStop && reason != FinishReason::kCancelled) {
    ev.text_delta += seq.stop.push(seq.detok.flush());
    ev.text_delta += seq.stop.flush();
  }
  ev.finished = true;
  ev.finish_reason = reason;
  seq.finished = true;
  RequestState& req = *seq.req;
  req.usage.completion_tokens += seq.n_generated;
  req.usage.spec.proposed += seq.spec.proposed;
  req.usage.spec.accepted += seq.spec.accepted;
  req.usage.spec.target_steps += seq.spec.target_steps;
  if (--req.n_live == 0) {
    req.timings.finish_ms = now_ms();
    req.timings.n_generated = req.usage.completion_tokens;
    if (req.timings.first_token_ms == 0) req.timings.first_token_ms = req.timings.finish_ms;
    if (req.timings.first_scheduled_ms == 0) req.timings.first_scheduled_ms = req.timings.finish_ms;
    done_.push_back(&req);
  }
}

std::span<RequestState* const> OutputProcessor::complete_requests(std::span<RequestEvent> events) {
  for (RequestState* req : done_) {
    LUMEN_CHECK(!req->finish_reported);
    for (size_t i = events.size(); i-- > 0;) {
      RequestEvent& ev = events[i];
      if (ev.request_id != req->id) continue;
      ev.request_finished = true;
      ev.usage = req->usage;
      ev.timings = req->timings;
      req->finish_reported = true;
      break;
    }
  }
  return done_;
}

}  // namespace lumen::engine
