// ModelRunner: turns the scheduler's plan into a forward pass and hands back logits rows.
//
//   SchedulerOutput (chunks: seq, pos0, n)  +  RunnerSeq per chunk (tokens, block tables,
//   which rows it wants)  ->  copy-on-write copies  ->  ForwardBatch (token ids, positions,
//   per-group block tables, logit rows)  ->  Model::forward  ->  StepLogits (rows per chunk)
//
// It never sees a request or a sequence object (plain data in, plain data out) and owns
// the batch buffers, sized at creation: building a batch allocates nothing.
//
// Single-threaded by contract (the engine thread); compute parallelism is inside forward.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/thread_pool.h"
#include "engine/scheduler.h"
#include "kernels/kernel_table.h"
#include "kv/kv_manager.h"
#include "engine/request.h"
#include "model/model.h"

namespace lumen::engine {

// Which logits rows one sequence asks for in a step: one struct for every kind of request.
struct LogitRows {
  // Every row of a chunk that starts in the prompt (prompt logprobs: row p scores p + 1).
  bool prompt_rows = false;
  // Rows at the end of a chunk that catches up: 1 = the row the next token is sampled from;
  // k + 1 = the rows that verify k speculated tokens (speculative decoding plugs in here).
  int32_t n_last = 1;
  // An embedding request: no logits rows; instead the hidden-state rows its pooling reads
  // (every prompt row for kMean, position 0 for kCls, the prompt's last for kLast).
  Pooling embed = Pooling::kNone;
};

// What the runner needs of one scheduled sequence.
struct RunnerSeq {
  std::span<const int32_t> tokens;         // every known token; the chunk is [pos0, pos0 + n)
  std::span<const kv::BlockTable> tables;  // [n_groups]
  int64_t n_prompt = 0;
  LogitRows rows;
};

// The logits rows of one chunk: positions pos_first .. pos_first + n_rows - 1.
struct ChunkLogits {
  int32_t row_begin = 0;  // first row in StepLogits::logits
  int32_t n_rows = 0;     // 0: the chunk asked for none
  int64_t pos_first = 0;
  int32_t embd_row_begin = 0;  // first row in StepLogits::embd
  int32_t n_embd_rows = 0;     // hidden-state rows of the chunk (embedding requests)
  int64_t embd_pos_first = 0;  // position of its first one
};

struct StepLogits {
  std::span<const float> logits;        // [n rows][n_vocab], valid until the next run
  int32_t n_vocab = 0;
  std::span<const ChunkLogits> chunks;  // [plan.chunks.size()], in plan order
  std::span<const float> embd;          // [n hidden rows][n_embd] output-normed (embeddings)
  int32_t n_embd = 0;

  std::span<const float> row(int32_t r) const { return logits.subspan(static_cast<size_t>(r) * n_vocab, n_vocab); }
  // The last row of chunk i (the one the next token is sampled from). Precondition: n_rows > 0.
  std::span<const float> last_row(size_t i) const { return row(chunks[i].row_begin + chunks[i].n_rows - 1); }
  std::span<const float> embd_row(int32_t r) const { return embd.subspan(static_cast<size_t>(r) * n_embd, n_embd); }
};

class ModelRunner {
 public:
  // References must outlive the runner. max_seqs bounds the chunks of a step.
  ModelRunner(model::Model& model, const kernels::KernelTable& kernels, ThreadPool& pool, kv::KvManager& kv,
              int32_t max_batch_tokens, int32_t max_seqs);

  // Performs the plan's copy-on-write copies, runs its chunks (seqs[i] for plan.chunks[i])
  // through the model, and returns the rows each asked for.
  StepLogits run(const SchedulerOutput& plan, std::span<const RunnerSeq> seqs);

 private:
  void add_embd_rows(const ScheduledChunk& c, const RunnerSeq& s, int32_t begin, ChunkLogits& cl);

  model::Model& model_;
  const kernels::KernelTable& kernels_;
  ThreadPool& pool_;
  kv::KvManager& kv_;
  std::vector<int32_t> tokens_;                   // [<= max_batch_tokens]
  std::vector<model::ForwardSeq> seqs_;           // [<= max_seqs]
  std::vector<std::span<const int32_t>> tables_;  // [<= max_seqs][n_groups]
  std::vector<int32_t> logit_rows_;               // [<= max_batch_tokens]
  std::vector<int32_t> embd_rows_;                // [<= max_batch_tokens]
  std::vector<ChunkLogits> chunk_logits_;         // [<= max_seqs]
};

}  // namespace lumen::engine
