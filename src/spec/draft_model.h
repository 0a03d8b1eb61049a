// Draft-model proposer: a small model with the target's vocabulary proposes k tokens by
// running its own forward passes, with its own KV cache (its own KvManager: blocks, tables),
// batched over the sequences that speculate this step.
//
// Each call, per sequence: the draft's cache holds `fed` (the tokens it has computed). The
// sequence's committed tokens share a prefix with it (the previous step's accepted
// proposals); the rest of the draft's cache is truncated, and
//
//   catch-up   fed..len-2 of the committed tokens, no logits      (batched, chunked)
//   j = 0      the last committed token -> logits -> d0 ~ q0
//   j = 1..    d(j-1) -> logits -> dj ~ qj                          (one token per sequence)
//
// so k proposals cost k one-token forward passes of the draft plus its catch-up. q is the
// draft's distribution under the request's sampler settings without penalties (any q keeps
// verification exact; a q close to the target's makes acceptance likely); greedy requests
// get the draft's argmax as a deterministic proposal.
//
// Single-threaded by contract (the engine thread); compute parallelism in forward().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/kernel_table.h"
#include "kv/kv_manager.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "spec/proposer.h"
#include "tokenizer/tokenizer.h"

namespace lumen::spec {

struct DraftModelConfig {
  std::string path;
  int32_t max_seqs = 1;
  int32_t draft_max = 8;
  int32_t n_ctx = 4096;
  int32_t max_batch_tokens = 512;
  int32_t block_size = 16;
  KvDTypes kv_dtypes = {};
  bool flash_attn = false;
  bool rotate_k = false;  // model::ModelLimits::rotate_qk (the target's setting)
  int n_threads = 1;
  bool interleave_weights = true;
  std::string interleave_cache_dir;
};

class DraftModelProposer final : public Proposer {
 public:
  // Loads the draft and checks that its vocabulary is the target's, token for token
  // (error names the first difference).
  static Result<std::unique_ptr<DraftModelProposer>> create(const DraftModelConfig& config,
                                                            const tok::Tokenizer& target_vocab,
                                                            int32_t target_n_vocab, const kernels::KernelTable& kernels,
                                                            ThreadPool& pool);
  ~DraftModelProposer() override;

  void propose(std::span<ProposeSeq> seqs) override;
  void release(uint64_t seq_id) override;
  const char* name() const override { return "draft"; }
  bool samples() const override { return true; }

 private:
  struct SeqState {
    uint64_t seq_id = 0;           // 0: free slot
    kv::SeqKv kv;
    std::vector<int32_t> fed;      // tokens whose K/V are in the draft's cache; capacity n_ctx + draft_max
    std::unique_ptr<sample::Sampler> sampler;
    int32_t row = -1;              // this forward's logits row, or -1
  };
  DraftModelProposer(model::Model model, const DraftModelConfig& config, const kernels::KernelTable& kernels,
                     ThreadPool& pool);
  SeqState* state_for(const ProposeSeq& p);
  // Feeds tokens[i] (positions fed.size()..) of each (state, tokens) pair; returns the
  // logits (one row per pair with want_row, in state->row).
  std::span<const float> feed(std::span<SeqState* const> states, std::span<const std::span<const int32_t>> tokens,
                              bool want_rows);

  DraftModelConfig config_;
  model::Model model_;
  const kernels::KernelTable& kernels_;
  ThreadPool& pool_;
  kv::KvManager kv_;
  std::vector<SeqState> slots_;                      // [max_seqs]
  // forward() work space, sized at creation
  std::vector<int32_t> batch_tokens_;                // [<= max_batch_tokens]
  std::vector<model::ForwardSeq> batch_seqs_;        // [<= max_seqs]
  std::vector<std::span<const int32_t>> tables_;     // [<= max_seqs * n_groups]
  std::vector<int32_t> logit_rows_;                  // [<= max_seqs]
  std::vector<kv::BlockCopy> copies_;
  std::vector<SeqState*> by_seq_;                    // [<= max_seqs] state of propose()'s seqs[i]
  std::vector<SeqState*> active_;                    // [<= max_seqs] this forward's sequences
  std::vector<int32_t> consumed_;                    // [max_seqs] feed(): tokens fed so far
  std::vector<std::span<const int32_t>> pending_;    // [<= max_seqs]
  std::vector<int32_t> one_token_;                   // [max_seqs] this round's token per sequence
};

}  // namespace lumen::spec
