// What a client asks of the engine, and what it gets back. Plain data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sample/sampler.h"
#include "spec/adaptive.h"

namespace lumen::grammar {
class CompiledGrammar;
}

namespace lumen::engine {

using RequestId = uint64_t;

// How an embedding request turns its prompt's hidden states (after the output norm) into
// one vector: their mean, the first token's (CLS), or the last token's. kNone: a
// generation request.
enum class Pooling : uint8_t { kNone, kMean, kCls, kLast };
const char* pooling_name(Pooling pooling);

struct GenerationParams {
  sample::SamplingParams sampling;
  int32_t max_tokens = 128;           // generated tokens at most; 0 = prompt only
  bool ignore_eos = false;            // keep going past end-of-generation tokens
  std::vector<std::string> stop;      // stop strings (not included in the output text)
  int32_t top_logits = 0;             // report the K largest logits of every step
  bool prompt_logprobs = false;       // report log p(prompt[i] | prompt[<i]) for i >= 1
  bool hash_logits = false;           // report a hash of the first generated token's logits
  int32_t n = 1;                      // completions sampled from the one prompt (share its KV)
  int32_t logprobs = -1;              // -1: none; 0: the chosen token's; K: + the top K
  int32_t priority = 0;               // lower runs first (FCFS among equals)
  std::string cache_salt;             // prefix-cache namespace: only equal salts share blocks
  bool speculative = true;            // false: never speculate for this request (engine-wide setting)
  // Constrained decoding (null: none): every generated token keeps the text a prefix of the
  // grammar's language; each of the n completions has its own matcher. Compiled against this
  // engine's vocabulary (grammar::TokenTable::build(tokenizer, n_vocab)). The completion ends
  // (finish reason stop) as soon as the grammar allows nothing more, whatever ignore_eos says.
  // Logprobs stay the model's own distribution, before the grammar's mask.
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  // An embedding request (not kNone): the prompt is computed (never looked up in the prefix
  // cache: every position's hidden state is needed) and pooled into RequestEvent::embedding,
  // L2-normalised; nothing is sampled. Needs max_tokens == 0, n == 1, no grammar or
  // logprobs, and an engine created with EngineConfig::enable_embeddings.
  Pooling embed = Pooling::kNone;
  // Context shift (llama.cpp's; `lumen run` and `lumen chat`): a completion that fills the
  // context while generating keeps its first n_keep tokens, drops the oldest half of the
  // rest and goes on (context_shift.h). Off: it ends with FinishReason::kContextFull.
  // Not with prompt_logprobs (the prompt's positions would move).
  bool context_shift = false;
  int32_t n_keep = 0;                 // tokens kept at the start (clamped to the context)
  // Control tokens whose text the output keeps (they render empty otherwise, as llama.cpp's
  // token_to_piece without special): the markers of a tool-call format (llama.cpp's
  // preserved tokens), so that the server's parser finds them. Sorted, unique.
  std::vector<int32_t> keep_special;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;                                   // log p(id) under the model
  std::vector<std::pair<int32_t, float>> top;          // top-K (id, logprob), if asked
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // summed over the n completions
  int32_t cached_tokens = 0;      // prompt tokens whose KV came from the prefix cache
  spec::SpecCounts spec = {};     // speculative decoding, summed over the n completions
};

struct Request {
  std::vector<int32_t> prompt_ids;    // already tokenized (BOS included as the model wants)
  GenerationParams params;
};

enum class FinishReason : uint8_t { kNone, kEos, kLength, kStop, kContextFull, kCancelled, kError };
const char* finish_reason_name(FinishReason reason);

struct RequestTimings {
  double arrival_ms = 0;
  double first_scheduled_ms = 0;  // when its first token entered a forward step (queue time)
  double first_token_ms = 0;   // when the first generated token was sampled
  double finish_ms = 0;
  int32_t n_prompt = 0;
  int32_t n_generated = 0;
  double ttft_ms() const { return first_token_ms - arrival_ms; }
  // mean time per output token after the first
  double tpot_ms() const {
    return n_generated > 1 ? (finish_ms - first_token_ms) / (n_generated - 1) : 0.0;
  }
};

// One step's news for one request.
struct RequestEvent {
  RequestId request_id = 0;
  int32_t seq_index = 0;                                     // which of the n completions
  std::vector<int32_t> new_token_ids;                        // usually one
  std::string text_delta;                                    // UTF-8 complete, stop-trimmed
  std::vector<std::vector<std::pair<int32_t, float>>> top;   // per new token, if asked
  std::vector<double> prompt_logprobs;                       // when the prompt finished, if asked
  std::vector<int32_t> prompt_argmax;                        // argmax id at each prompt position
  uint64_t logits_hash = 0;                                  // with hash_logits, on the first token
  std::vector<TokenLogprob> logprobs;                        // per new token, if asked
  std::vector<float> embedding;   // [n_embd] an embedding request's vector, on its last event
  bool request_finished = false;  // all n completions are done (the last event of the request)
  Usage usage;                    // set on the request's last event
  RequestTimings timings;         // set on the request's last event
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;                                         // set with kError

  // Back to a fresh event, keeping the buffers' capacity (the engine reuses its events).
  void clear() {
    request_id = 0;
    seq_index = 0;
    new_token_ids.clear();
    text_delta.clear();
    top.clear();
    prompt_logprobs.clear();
    prompt_argmax.clear();
    logits_hash = 0;
    logprobs.clear();
    embedding.clear();
    request_finished = false;
    usage = {};
    timings = {};
    finished = false;
    finish_reason = FinishReason::kNone;
    error.clear();
  }
};


}  // namespace lumen::engine
