// Verification of proposed tokens: the rule that makes speculative decoding exact.
//
// At each verified position the target model gives logits; the request's sampler chain
// (penalties, top-k, top-p, min-p, temperature) turns them into the distribution p that
// plain decoding would sample from. The proposer offered token d, drawn from its own
// distribution q (a deterministic proposer, such as n-gram lookup, has q = one-hot at d).
//
//   accept d with probability min(1, p(d) / q(d))
//   otherwise emit a token from the residual r(x) = max(0, p(x) - q(x)) / sum_y max(0, p(y) - q(y))
//
// For every x:  P(emit x) = q(x) min(1, p(x)/q(x)) + P(reject) r(x)
//                         = min(q(x), p(x)) + (1 - sum_y min(q(y), p(y))) r(x)  =  p(x),
// since sum_y max(0, p(y) - q(y)) = 1 - sum_y min(q(y), p(y)). So the emitted token is an
// exact sample of p whatever the proposer does; a good proposer only makes acceptance
// likely. Greedy (temperature 0) is the special case p = one-hot at the target's argmax:
// d is accepted iff it is the argmax, and the residual is the argmax itself.
//
// Penalties see the tokens accepted so far at each position because the caller feeds the
// sampler each emitted token (Sampler::accept) before verifying the next position.
#pragma once

#include <cstdint>
#include <span>

#include "sample/sampler.h"

namespace lumen::spec {

struct VerifyDraw {
  int32_t token = 0;      // the token emitted at this position
  bool accepted = false;  // token == the proposed one, by acceptance (not by a residual draw)
};

// The rule above as a pure function. p: the target distribution [n_vocab] (sums to 1);
// q: the proposer's distribution [n_vocab], or empty for a deterministic proposer (q =
// one-hot at d); u_accept, u_residual: uniforms in [0, 1) (u_residual is read only on
// rejection). Accepts iff u_accept * q(d) < p(d). The residual draw walks ids in ascending
// order and returns the first whose running (double) sum exceeds u_residual * total; if the
// residual has no mass (p == q up to rounding), it draws from p the same way.
VerifyDraw verify_draft_token(std::span<const float> p, std::span<const float> q, int32_t d, double u_accept,
                              double u_residual);

// A draw from probabilities `probs` (any positive total) with uniform u in [0, 1): the
// first id, ascending, whose running double sum exceeds u * total (what a sampling
// proposer uses to draw its proposal from its q).
int32_t draw_from(std::span<const float> probs, double u);

// One position with a request's sampler: p from sampler.distribution(target_logits) (into
// p_work, [n_vocab]), uniforms from the sampler's own stream (so a seed reproduces the run).
// A greedy sampler needs no distribution: the token is sampler.sample(target_logits), the
// same call plain decoding makes, and d is accepted iff it equals it.
// `allowed` (optional): a constraint's token mask (a grammar's), applied to p exactly as
// sampler.sample() applies it; d outside it has p(d) = 0 and is never accepted.
// Does not call sampler.accept: the caller appends the emitted token.
VerifyDraw verify_position(sample::Sampler& sampler, std::span<const float> target_logits, int32_t d,
                           std::span<const float> q, std::span<float> p_work,
                           std::span<const uint64_t> allowed = {});

}  // namespace lumen::spec
