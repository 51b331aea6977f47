// Structured outputs as a TokenConstraint (runner/token_constraint.h): a compiled grammar over
// one model's token trie, with the token mask of every matcher state met so far cached (states
// repeat: the inside of a string, the point after a key, ...). CompiledGrammar is shared by
// every request with the same grammar (constraint_cache.h); GrammarConstraint is one
// sequence's matcher over it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runner/token_constraint.h"
#include "structured/grammar.h"
#include "structured/matcher.h"
#include "structured/token_trie.h"

namespace lancet::structured {

class CompiledGrammar {
 public:
  CompiledGrammar(std::unique_ptr<Grammar> grammar, std::shared_ptr<const TokenTrie> trie, MatcherOptions options = {},
                  size_t max_cached_masks = 2048);

  const Grammar& grammar() const { return *grammar_; }
  const TokenTrie& trie() const { return *trie_; }
  Matcher start() const { return Matcher(grammar_.get(), options_); }
  // The mask of a state, from the cache or computed (and cached). Thread-safe.
  std::shared_ptr<const std::vector<uint32_t>> mask(const Matcher& state) const;
  size_t cached_masks() const;

 private:
  std::unique_ptr<Grammar> grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  MatcherOptions options_;
  size_t max_cached_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<uint32_t>>> cache_;
};

class GrammarConstraint : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<const CompiledGrammar> compiled);

  std::unique_ptr<TokenConstraint> clone() const override;
  void allowed_tokens(int64_t vocab, std::vector<uint32_t>* allowed) const override;
  bool accept(int32_t token) override;
  bool complete() const override { return matcher_.complete(); }
  bool done() const override { return matcher_.done(); }
  const Matcher& matcher() const { return matcher_; }

 private:
  std::shared_ptr<const CompiledGrammar> compiled_;
  Matcher matcher_;
};

}  // namespace lancet::structured
