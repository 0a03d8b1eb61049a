// The engine's per-request state: a request (RequestState) and its n completions
// (Sequence). Plain structs owned by the Engine; the scheduler sees a Sequence only
// through its SchedSeq, the model runner through a RunnerSeq, the output processor works
// on it directly.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/stop_matcher.h"
#include "grammar/matcher.h"
#include "sample/sampler.h"
#include "spec/adaptive.h"
#include "tokenizer/tokenizer.h"

namespace lumen::engine {

struct RequestState;

// One completion: the tokens it has, where it stands in the KV cache (its SchedSeq), and
// its own sampler, detokenizer, stop-string and grammar state.
struct Sequence {
  Sequence(RequestState* req_, int32_t seq_index_, const sample::SamplingParams& sp,
           const tok::Tokenizer& tokenizer, int32_t n_vocab, const std::vector<std::string>& stops,
           const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::vector<int32_t>& keep_special = {})
      : req(req_), seq_index(seq_index_), sampler(sp, n_vocab), detok(tokenizer, keep_special), stop(stops) {
    if (g) {
      matcher.emplace(g);
      mask.assign((static_cast<size_t>(n_vocab) + 63) / 64, 0);
    }
  }

  RequestState* req;
  int32_t seq_index;
  std::vector<int32_t> tokens;  // prompt + generated; capacity n_ctx + 1 (spans stay valid)
  int32_t n_generated = 0;
  SchedSeq sched;
  sample::Sampler sampler;
  tok::StreamingDetokenizer detok;
  StopMatcher stop;
  std::optional<grammar::GrammarMatcher> matcher;  // with a grammar: where the text stands in it
  std::vector<uint64_t> mask;                      // [ceil(n_vocab / 64)] allowed ids, per step
  std::vector<double> prompt_logprobs;  // accumulated over prompt chunks, if asked
  std::vector<int32_t> prompt_argmax;
  std::vector<double> embd_sum;  // [n_embd] embedding request: pooled hidden states so far
  int64_t n_embd_pooled = 0;     // rows summed into embd_sum
  bool finished = false;
  double shift_t0_ms = 0;  // a context shift's recompute is under way since then (0: none)
  // Speculation: this step's proposals (draft[0, sched.n_spec) also sit at the end of
  // `tokens` between proposing and verifying), the distributions a sampling proposer drew
  // them from ([draft_max][n_vocab], empty for deterministic proposers), and k's state.
  std::vector<int32_t> draft;
  std::vector<float> draft_probs;
  bool draft_probs_valid = false;
  spec::AdaptiveK spec_k;
  spec::SpecCounts spec;
};

// One request: n completions of one prompt. The first sequence computes the prompt; when
// it samples its first token the others are forked from it, sharing every prompt block.
struct RequestState {
  RequestId id = 0;
  GenerationParams params;
  int32_t n_prompt = 0;
  bool forked = false;
  int32_t n_live = 0;             // sequences not finished
  bool finish_reported = false;   // an event with request_finished went out
  Usage usage;
  RequestTimings timings;
  std::vector<uint64_t> seq_ids;
};

}  // namespace lumen::engine
