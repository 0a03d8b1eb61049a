#include "server/constraint.h"

#include "grammar/json_schema.h"

namespace lumen::server {
namespace {

// "json_schema: /a: what" -> "<field>: /a: what"; GBNF errors keep their "grammar: " when
// the field is `grammar`, else get the field in front.
std::string with_field(const std::string& field, const std::string& message) {
  for (const char* prefix : {"json_schema: ", "grammar: "}) {
    const std::string p = prefix;
    if (message.rfind(p, 0) == 0) {
      if (field == "grammar" && p == "grammar: ") return message;
      return field + ": " + message.substr(p == "grammar: " ? 0 : p.size());
    }
  }
  return field + ": " + message;
}

}  // namespace

Result<std::string> constraint_gbnf(const OutputConstraint& c) {
  switch (c.kind) {
    case OutputConstraint::Kind::kNone: return std::string();
    case OutputConstraint::Kind::kGbnf: return c.text;
    case OutputConstraint::Kind::kJsonObject: return grammar::any_json_gbnf(/*object_only=*/true);
    case OutputConstraint::Kind::kJsonSchema: {
      auto gbnf = grammar::json_schema_to_gbnf(c.text);
      if (!gbnf.ok()) return error(with_field(c.field, gbnf.message()));
      return std::move(gbnf).value();
    }
  }
  return std::string();
}

GrammarCache::GrammarCache(std::shared_ptr<const grammar::TokenTable> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(capacity) {}

Result<std::shared_ptr<const grammar::CompiledGrammar>> GrammarCache::get(const std::string& gbnf) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(gbnf);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  LUMEN_ASSIGN_OR_RETURN(std::shared_ptr<const grammar::CompiledGrammar> g,
                         grammar::CompiledGrammar::from_gbnf(gbnf, vocab_));
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.find(gbnf) == index_.end() && capacity_ > 0) {
    lru_.emplace_front(gbnf, g);
    index_.emplace(gbnf, lru_.begin());
    while (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  return g;
}

Result<std::shared_ptr<const grammar::CompiledGrammar>> compile_constraint(GrammarCache& cache,
                                                                           const OutputConstraint& c) {
  if (c.kind == OutputConstraint::Kind::kNone) return std::shared_ptr<const grammar::CompiledGrammar>();
  LUMEN_ASSIGN_OR_RETURN(std::string gbnf, constraint_gbnf(c));
  auto g = cache.get(gbnf);
  if (!g.ok()) return error(with_field(c.field, g.message()));
  return std::move(g).value();
}

}  // namespace lumen::server
