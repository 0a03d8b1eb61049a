#include "spec/draft_model.h"

#include <algorithm>

#include "base/check.h"
#include "gguf/model_file.h"
#include "spec/rejection.h"

namespace lumen::spec {

DraftModelProposer::DraftModelProposer(model::Model model, const DraftModelConfig& config,
                                       const kernels::KernelTable& kernels, ThreadPool& pool)
    : config_(config), model_(std::move(model)), kernels_(kernels), pool_(pool) {}
DraftModelProposer::~DraftModelProposer() = default;

Result<std::unique_ptr<DraftModelProposer>> DraftModelProposer::create(const DraftModelConfig& config,
                                                                       const tok::Tokenizer& target_vocab,
                                                                       int32_t target_n_vocab,
                                                                       const kernels::KernelTable& kernels,
                                                                       ThreadPool& pool) {
  const std::string what = "--draft-model " + config.path + ": ";
  auto file = gguf::open_model(config.path);
  if (!file.ok()) return error(what + file.message());
  auto vocab = tok::Tokenizer::from_model_file(*file);
  if (!vocab.ok()) return error(what + vocab.message());
  auto hp = model::read_hparams(*file);
  if (!hp.ok()) return error(what + hp.message());
  // Proposals are token ids: they mean the same text only under the same vocabulary.
  if (hp->n_vocab != target_n_vocab || vocab->n_vocab() != target_vocab.n_vocab())
    return error(what + "its vocabulary has " + std::to_string(vocab->n_vocab()) + " tokens (" +
                 std::to_string(hp->n_vocab) + " embedding rows), the target's " +
                 std::to_string(target_vocab.n_vocab()) + " (" + std::to_string(target_n_vocab) +
                 "): a draft needs the target's vocabulary");
  for (int32_t id = 0; id < vocab->n_vocab(); ++id) {
    if (vocab->token_to_piece(id, true) != target_vocab.token_to_piece(id, true))
      return error(what + "token " + std::to_string(id) + " is '" + vocab->token_to_piece(id, true) +
                   "' in the draft but '" + target_vocab.token_to_piece(id, true) +
                   "' in the target: a draft needs the target's vocabulary");
  }
  model::ModelLimits limits;
  limits.max_batch_tokens = config.max_batch_tokens;
  limits.max_logit_rows = std::min(config.max_seqs, config.max_batch_tokens);
  limits.max_ctx = config.n_ctx + config.draft_max;
  limits.n_threads = config.n_threads;
  limits.flash_attn = config.flash_attn;
  limits.rotate_qk = config.rotate_k;
  auto m = model::Model::load(std::move(*file), limits);
  if (!m.ok()) return error(what + m.message());
  if (config.interleave_weights) m->interleave_weights(kernels, pool, config.interleave_cache_dir);

  std::unique_ptr<DraftModelProposer> d(new DraftModelProposer(std::move(*m), config, kernels, pool));
  kv::KvManagerConfig kc = kv::kv_config_for_layout(d->model_.kv_layout());
  kc.block_size = config.block_size;
  kc.dtypes = config.kv_dtypes;
  kc.n_ctx = config.n_ctx + config.draft_max;
  kc.max_seqs = config.max_seqs;
  kc.max_batch_tokens = config.max_batch_tokens;
  kc.enable_prefix_cache = false;
  auto kvm = kv::KvManager::create(kc);
  if (!kvm.ok()) return error(what + kvm.message());
  d->kv_ = std::move(*kvm);
  d->slots_.resize(static_cast<size_t>(config.max_seqs));
  for (SeqState& s : d->slots_) {
    d->kv_.init_seq(s.kv, 0);
    s.fed.reserve(static_cast<size_t>(config.n_ctx + config.draft_max));
  }
  const auto n_groups = static_cast<size_t>(d->kv_.n_groups());
  d->batch_tokens_.reserve(config.max_batch_tokens);
  d->batch_seqs_.reserve(config.max_seqs);
  d->tables_.reserve(config.max_seqs * n_groups);
  d->logit_rows_.reserve(config.max_seqs);
  d->active_.reserve(config.max_seqs);
  d->by_seq_.reserve(config.max_seqs);
  d->pending_.reserve(config.max_seqs);
  d->one_token_.resize(config.max_seqs);
  d->consumed_.resize(config.max_seqs);
  return d;
}

DraftModelProposer::SeqState* DraftModelProposer::state_for(const ProposeSeq& p) {
  SeqState* free_slot = nullptr;
  for (SeqState& s : slots_) {
    if (s.seq_id == p.seq_id) return &s;
    if (s.seq_id == 0 && !free_slot) free_slot = &s;
  }
  if (!free_slot) return nullptr;
  free_slot->seq_id = p.seq_id;
  // The request's settings without penalties, on a stream of its own (once per sequence).
  sample::SamplingParams sp = p.sampling ? *p.sampling : sample::SamplingParams{.temperature = 0};
  sp.repeat_penalty = 1.0f;
  sp.presence_penalty = 0.0f;
  sp.frequency_penalty = 0.0f;
  sp.seed = sp.seed * 6364136223846793005ull + 1442695040888963407ull;
  free_slot->sampler = std::make_unique<sample::Sampler>(sp, model_.hparams().n_vocab);
  return free_slot;
}

void DraftModelProposer::release(uint64_t seq_id) {
  for (SeqState& s : slots_) {
    if (s.seq_id != seq_id) continue;
    kv_.release_all(s.kv);
    s.fed.clear();
    s.sampler.reset();
    s.seq_id = 0;
  }
}

std::span<const float> DraftModelProposer::feed(std::span<SeqState* const> states,
                                                std::span<const std::span<const int32_t>> tokens, bool want_rows) {
  const auto n_groups = static_cast<size_t>(kv_.n_groups());
  std::fill(consumed_.begin(), consumed_.end(), 0);
  std::span<const float> logits;
  for (;;) {
    batch_tokens_.clear();
    batch_seqs_.clear();
    tables_.clear();
    logit_rows_.clear();
    copies_.clear();
    int32_t budget = config_.max_batch_tokens;
    for (size_t i = 0; i < states.size() && budget > 0; ++i) {
      const auto rem = static_cast<int32_t>(tokens[i].size()) - consumed_[i];
      if (rem <= 0) continue;
      const int32_t take = std::min(rem, budget);
      SeqState& st = *states[i];
      const auto pos0 = static_cast<int64_t>(st.fed.size());
      const bool ok = kv_.allocate_slots(st.kv, pos0, take, 0, &copies_);
      LUMEN_CHECK(ok);  // sized for max_seqs sequences of n_ctx + draft_max tokens
      const auto begin = static_cast<int32_t>(batch_tokens_.size());
      const std::span<const int32_t> part = tokens[i].subspan(consumed_[i], take);
      batch_tokens_.insert(batch_tokens_.end(), part.begin(), part.end());
      st.fed.insert(st.fed.end(), part.begin(), part.end());
      const size_t tb = tables_.size();
      for (size_t g = 0; g < n_groups; ++g) tables_.push_back(st.kv.tables[g].ids());
      batch_seqs_.push_back({begin, take, pos0, std::span(tables_).subspan(tb, n_groups)});
      consumed_[i] += take;
      budget -= take;
      if (want_rows && consumed_[i] == static_cast<int32_t>(tokens[i].size())) {
        st.row = static_cast<int32_t>(logit_rows_.size());
        logit_rows_.push_back(begin + take - 1);
      }
    }
    if (batch_seqs_.empty()) return logits;
    LUMEN_CHECK(!want_rows || logits.empty());  // rows come from one forward (single tokens)
    kv_.copy_blocks(copies_);
    logits = model_.forward(kernels_, pool_, model::ForwardBatch{batch_tokens_, batch_seqs_, logit_rows_}, kv_.views());
  }
}

void DraftModelProposer::propose(std::span<ProposeSeq> seqs) {
  LUMEN_CHECK(seqs.size() <= slots_.size());
  by_seq_.clear();
  pending_.clear();
  int32_t max_n = 0;
  for (ProposeSeq& p : seqs) {
    p.n_out = 0;
    p.probs_valid = false;
    SeqState* st = state_for(p);
    LUMEN_CHECK(st != nullptr);  // at most max_seqs sequences speculate, each released when done
    // Keep what the draft computed of the committed tokens (the previous step's accepted
    // proposals); the last committed token is always fed again below (its logits give d0).
    const size_t len = p.tokens.size();
    LUMEN_CHECK(len >= 1);
    const size_t limit = std::min(st->fed.size(), len - 1);
    const size_t m = static_cast<size_t>(
        std::mismatch(st->fed.begin(), st->fed.begin() + static_cast<ptrdiff_t>(limit), p.tokens.begin()).first -
        st->fed.begin());
    if (m < st->fed.size()) {
      kv_.truncate(st->kv, static_cast<int64_t>(m));
      st->fed.resize(m);
    }
    by_seq_.push_back(st);
    pending_.push_back(p.tokens.subspan(m, len - 1 - m));
    max_n = std::max(max_n, p.max_n);
  }
  feed(by_seq_, pending_, false);  // catch-up: no logits needed
  const auto n_vocab = static_cast<size_t>(model_.hparams().n_vocab);
  for (int32_t j = 0; j < max_n; ++j) {
    // One token per sequence that still proposes: the last committed token, then d(j-1).
    active_.clear();
    pending_.clear();
    for (size_t i = 0; i < seqs.size(); ++i) {
      const ProposeSeq& p = seqs[i];
      if (j >= p.max_n) continue;
      one_token_[i] = j == 0 ? p.tokens.back() : p.out_tokens[static_cast<size_t>(j - 1)];
      active_.push_back(by_seq_[i]);
      pending_.push_back(std::span<const int32_t>(&one_token_[i], 1));
    }
    const std::span<const float> logits = feed(active_, pending_, /*want_rows=*/true);
    for (size_t i = 0; i < seqs.size(); ++i) {
      ProposeSeq& p = seqs[i];
      if (j >= p.max_n) continue;
      SeqState& st = *by_seq_[i];
      const std::span<const float> row = logits.subspan(static_cast<size_t>(st.row) * n_vocab, n_vocab);
      int32_t d;
      if (st.sampler->greedy()) {
        d = st.sampler->sample(row);
      } else {
        const std::span<float> q = p.out_probs.subspan(static_cast<size_t>(j) * n_vocab, n_vocab);
        st.sampler->distribution(row, q);
        d = draw_from(q, st.sampler->uniform());
        p.probs_valid = true;
      }
      p.out_tokens[static_cast<size_t>(j)] = d;
      p.n_out = j + 1;
    }
  }
  // Sliding-window groups give back what no later query can see. The next call rolls back
  // at most to fed.size() - draft_max (the proposals fed beyond the committed tokens), so
  // everything a query there can see stays.
  for (SeqState* st : by_seq_)
    kv_.release_out_of_window(st->kv, std::max<int64_t>(0, static_cast<int64_t>(st->fed.size()) - config_.draft_max - 1));
}

}  // namespace lumen::spec
