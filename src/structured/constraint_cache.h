// One model's structured-output grammars: the model's token trie and the compiled grammars
// requests asked for, by their canonical text (a repeated schema is compiled, and its masks
// computed, once). constraint() gives a TokenConstraint in the start state for SamplingParams.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "runner/token_constraint.h"
#include "structured/grammar_constraint.h"
#include "structured/json_schema_compiler.h"
#include "structured/output_format.h"
#include "structured/token_trie.h"

namespace lancet::structured {

struct ConstraintCacheConfig {
  // Memory: up to max_grammars x max_masks_per_grammar masks of vocab / 8 bytes (16 KiB for
  // Llama 3's vocabulary: 128 MiB at most with these).
  size_t max_grammars = 32;        // compiled grammars kept (all dropped when full)
  size_t max_masks_per_grammar = 256;
  MatcherOptions matcher;
  SchemaCompileOptions schema;
};

class ConstraintCache {
 public:
  ConstraintCache(std::shared_ptr<const TokenTrie> trie, ConstraintCacheConfig config = {});

  // InvalidArgument when the schema uses something unsupported (the message names it).
  StatusOr<std::shared_ptr<const TokenConstraint>> constraint(const OutputFormat& format);
  size_t num_grammars() const;

 private:
  std::shared_ptr<const TokenTrie> trie_;
  ConstraintCacheConfig config_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const CompiledGrammar>> grammars_;
};

}  // namespace lancet::structured
