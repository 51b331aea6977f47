// CompiledGrammar's mask cache and the per-sequence matcher.
#include "structured/grammar_constraint.h"

#include <algorithm>

#include "structured/token_mask.h"

namespace lancet::structured {

CompiledGrammar::CompiledGrammar(std::unique_ptr<Grammar> grammar, std::shared_ptr<const TokenTrie> trie,
                                 MatcherOptions options, size_t max_cached_masks)
    : grammar_(std::move(grammar)), trie_(std::move(trie)), options_(options), max_cached_(max_cached_masks) {
  options_.longest_token = std::min(options_.longest_token, trie_->longest_token());
}

std::shared_ptr<const std::vector<uint32_t>> CompiledGrammar::mask(const Matcher& state) const {
  const std::string key = state.state_key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  }
  auto m = std::make_shared<std::vector<uint32_t>>();
  compute_token_mask(state, *trie_, m.get());
  std::lock_guard<std::mutex> lock(mu_);
  // Bounded memory: states with numbers or bounded strings are many; start over when full.
  if (cache_.size() >= max_cached_) cache_.clear();
  cache_.emplace(key, m);
  return m;
}

size_t CompiledGrammar::cached_masks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_.size();
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const CompiledGrammar> compiled)
    : compiled_(std::move(compiled)), matcher_(compiled_->start()) {}

std::unique_ptr<TokenConstraint> GrammarConstraint::clone() const { return std::make_unique<GrammarConstraint>(*this); }

void GrammarConstraint::allowed_tokens(int64_t vocab, std::vector<uint32_t>* allowed) const {
  const auto m = compiled_->mask(matcher_);
  allowed->assign(static_cast<size_t>((vocab + 31) / 32), 0u);
  std::copy_n(m->begin(), std::min(m->size(), allowed->size()), allowed->begin());
}

bool GrammarConstraint::accept(int32_t token) {
  const std::string_view bytes = compiled_->trie().token_bytes(token);
  if (bytes.empty()) return false;
  return matcher_.feed(bytes);
}

}  // namespace lancet::structured
