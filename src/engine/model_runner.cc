#include "engine/model_runner.h"

#include <algorithm>

#include "base/check.h"

namespace lumen::engine {

ModelRunner::ModelRunner(model::Model& model, const kernels::KernelTable& kernels, ThreadPool& pool,
                         kv::KvManager& kv, int32_t max_batch_tokens, int32_t max_seqs)
    : model_(model), kernels_(kernels), pool_(pool), kv_(kv) {
  tokens_.reserve(max_batch_tokens);
  seqs_.reserve(max_seqs);
  tables_.reserve(static_cast<size_t>(max_seqs) * kv.n_groups());
  logit_rows_.reserve(max_batch_tokens);
  embd_rows_.reserve(max_batch_tokens);
  chunk_logits_.reserve(max_seqs);
}

// The hidden-state rows an embedding request's chunk contributes to its pooling: batch
// rows begin + r for the chunk's positions c.pos0 + r that the pooling reads.
void ModelRunner::add_embd_rows(const ScheduledChunk& c, const RunnerSeq& s, int32_t begin, ChunkLogits& cl) {
  int32_t first = 0, last = 0;  // chunk rows [first, last)
  switch (s.rows.embed) {
    case Pooling::kNone: break;
    case Pooling::kMean: last = c.n_tokens; break;
    case Pooling::kCls: last = c.pos0 == 0 ? 1 : 0; break;
    case Pooling::kLast:
      first = c.n_tokens - 1;
      last = c.catches_up ? c.n_tokens : first;
      break;
  }
  cl.embd_row_begin = static_cast<int32_t>(embd_rows_.size());
  cl.n_embd_rows = std::max(0, last - first);
  cl.embd_pos_first = c.pos0 + first;
  for (int32_t r = first; r < last; ++r) embd_rows_.push_back(begin + r);
}

StepLogits ModelRunner::run(const SchedulerOutput& plan, std::span<const RunnerSeq> seqs) {
  LUMEN_CHECK(seqs.size() == plan.chunks.size() && !plan.chunks.empty());
  kv_.copy_blocks(plan.copies);
  tokens_.clear();
  seqs_.clear();
  tables_.clear();
  logit_rows_.clear();
  embd_rows_.clear();
  chunk_logits_.clear();
  const auto n_groups = static_cast<size_t>(kv_.n_groups());
  // The spans into tables_ stay valid only if it never grows past its capacity.
  LUMEN_CHECK(tables_.capacity() >= seqs.size() * n_groups);
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    const RunnerSeq& s = seqs[i];
    const auto begin = static_cast<int32_t>(tokens_.size());
    tokens_.insert(tokens_.end(), s.tokens.begin() + c.pos0, s.tokens.begin() + c.pos0 + c.n_tokens);
    const size_t tables_begin = tables_.size();
    LUMEN_CHECK(s.tables.size() == n_groups);
    for (const kv::BlockTable& t : s.tables) tables_.push_back(t.ids());
    seqs_.push_back({begin, c.n_tokens, c.pos0, std::span(tables_).subspan(tables_begin, n_groups)});
    // Rows: every row of a chunk that starts in the prompt (prompt logprobs), else the
    // last n_last rows of a chunk that catches up.
    ChunkLogits cl;
    cl.row_begin = static_cast<int32_t>(logit_rows_.size());
    int32_t first = c.n_tokens;
    if (s.rows.embed != Pooling::kNone) {
      add_embd_rows(c, s, begin, cl);  // and no logits rows
    } else if (s.rows.prompt_rows && c.pos0 < s.n_prompt) {
      first = 0;
    } else if (c.catches_up) {
      first = c.n_tokens - std::min(std::max(s.rows.n_last, 1), c.n_tokens);
    }
    for (int32_t r = first; r < c.n_tokens; ++r) logit_rows_.push_back(begin + r);
    cl.n_rows = c.n_tokens - first;
    cl.pos_first = c.pos0 + first;
    chunk_logits_.push_back(cl);
  }
  const model::ForwardBatch batch{tokens_, seqs_, logit_rows_, embd_rows_};
  StepLogits out;
  out.logits = model_.forward(kernels_, pool_, batch, kv_.views());
  out.n_vocab = model_.hparams().n_vocab;
  out.embd = model_.embeddings();
  out.n_embd = model_.hparams().n_embd;
  out.chunks = chunk_logits_;
  return out;
}

}  // namespace lumen::engine
