// Grammar lookup and compilation.
#include "structured/constraint_cache.h"

#include "structured/gbnf_grammar.h"

namespace lancet::structured {
namespace {

std::string format_key(const OutputFormat& f) {
  switch (f.kind) {
    case OutputFormat::Kind::kJsonObject:
      return "object";
    case OutputFormat::Kind::kJsonSchema:
      return "schema:" + f.schema.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    case OutputFormat::Kind::kRegex:
      return "regex:" + f.pattern;
    case OutputFormat::Kind::kGrammar:
      return "gbnf:" + f.grammar;
    case OutputFormat::Kind::kChoice:
      return "choice:" + nlohmann::json(f.choices).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return "";
}

}  // namespace

ConstraintCache::ConstraintCache(std::shared_ptr<const TokenTrie> trie, ConstraintCacheConfig config)
    : trie_(std::move(trie)), config_(config) {}

size_t ConstraintCache::num_grammars() const {
  std::lock_guard<std::mutex> lock(mu_);
  return grammars_.size();
}

StatusOr<std::shared_ptr<const TokenConstraint>> ConstraintCache::constraint(const OutputFormat& format) {
  const std::string key = format_key(format);
  std::shared_ptr<const CompiledGrammar> compiled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = grammars_.find(key); it != grammars_.end()) compiled = it->second;
  }
  if (!compiled) {
    std::unique_ptr<Grammar> g;
    switch (format.kind) {
      case OutputFormat::Kind::kJsonObject:
        g = any_json_object_grammar();
        break;
      case OutputFormat::Kind::kJsonSchema: {
        ASSIGN_OR_RETURN(g, compile_json_schema(format.schema, config_.schema));
        break;
      }
      case OutputFormat::Kind::kRegex: {
        ASSIGN_OR_RETURN(g, regex_grammar(format.pattern));
        break;
      }
      case OutputFormat::Kind::kGrammar: {
        ASSIGN_OR_RETURN(g, gbnf_grammar(format.grammar));
        break;
      }
      case OutputFormat::Kind::kChoice:
        if (format.choices.empty() || format.choices.size() > kMaxAlternatives)
          return InvalidArgument("between 1 and " + std::to_string(kMaxAlternatives) + " choices are supported");
        for (const std::string& c : format.choices)
          if (c.empty()) return InvalidArgument("a choice must not be empty");
        g = choice_grammar(format.choices);
        break;
    }
    compiled = std::make_shared<CompiledGrammar>(std::move(g), trie_, config_.matcher, config_.max_masks_per_grammar);
    std::lock_guard<std::mutex> lock(mu_);
    if (grammars_.size() >= config_.max_grammars) grammars_.clear();
    grammars_.emplace(key, compiled);
  }
  return std::shared_ptr<const TokenConstraint>(std::make_shared<GrammarConstraint>(compiled));
}

}  // namespace lancet::structured
