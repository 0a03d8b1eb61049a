// Output constraints of a request (response_format, grammar, json_schema) turned into the
// compiled grammars the engine enforces. Compiling runs on the handler's thread, before the
// request is queued, so the engine thread only ever steps matchers.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "grammar/compiled_grammar.h"
#include "grammar/token_table.h"
#include "server/request_parser.h"

namespace lumen::server {

// GBNF for a constraint, or an error naming its field, e.g.
// "response_format.json_schema.schema: /properties/tags: unsupported keyword 'uniqueItems'".
Result<std::string> constraint_gbnf(const OutputConstraint& constraint);

// Compiled grammars by GBNF text, the most recently used `capacity` kept. Thread-safe: the
// lock guards only the map; compiling happens outside it (two threads may compile the same
// text at once; both results are equal).
class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const grammar::TokenTable> vocab, size_t capacity);
  Result<std::shared_ptr<const grammar::CompiledGrammar>> get(const std::string& gbnf);
  const grammar::TokenTable& vocab() const { return *vocab_; }

 private:
  std::shared_ptr<const grammar::TokenTable> vocab_;
  size_t capacity_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const grammar::CompiledGrammar>>> lru_;  // front: newest
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

// The grammar a request asks for (null when none), or a 400-grade error naming the field.
Result<std::shared_ptr<const grammar::CompiledGrammar>> compile_constraint(GrammarCache& cache,
                                                                           const OutputConstraint& constraint);

}  // namespace lumen::server
