// A per-sequence constraint on the tokens a sequence may sample next (structured outputs:
// structured/grammar_constraint.h implements it over a grammar). The engine asks it for the
// allowed set before each sampled row, routes the row to host sampling with that set
// (sampler.h masks the others to -inf), and feeds it each accepted token. The runner and the
// engine know nothing of grammars or text: only token ids and bitmasks.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace lancet {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // A copy in the same state (each of a request's n sequences gets its own).
  virtual std::unique_ptr<TokenConstraint> clone() const = 0;
  // allowed: [ceil(vocab / 32)] words; bit t of word t / 32 set = token t may come next. End
  // tokens are not set: the engine adds them while complete().
  virtual void allowed_tokens(int64_t vocab, std::vector<uint32_t>* allowed) const = 0;
  // Advances over an accepted token; false when the token was not allowed (state unchanged).
  virtual bool accept(int32_t token) = 0;
  // The output so far is a whole document.
  virtual bool complete() const = 0;
  // Complete, and no token may follow: the sequence ends here.
  virtual bool done() const = 0;
};

}  // namespace lancet
