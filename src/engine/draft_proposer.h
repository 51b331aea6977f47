// Draft-model proposals: a second, smaller model sharing the tokenizer drafts k tokens per
// sequence autoregressively (one batched draft forward per draft position). The draft has its
// own paged KV cache and its own block manager (with prefix caching under the draft's key), so
// it never competes with the target for blocks. Per sequence it tracks how many context
// tokens have draft KV; a step first catches up on the tokens the target accepted since
// (usually 1 or 2, the whole prompt the first time, in chunks under a token budget), then
// drafts. Draft KV of rejected drafts is rolled back by moving that count back.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "runner/model_executor.h"
#include "engine/sequence.h"
#include "engine/spec_policy.h"
#include "kv/kv_cache_manager.h"

namespace lancet {

struct DraftRequest {
  Sequence* seq = nullptr;
  int32_t k = 0;  // drafts wanted
};

class DraftModelProposer {
 public:
  // max_catchup_tokens: draft tokens computed per step for catching up (prompt prefill).
  DraftModelProposer(ModelExecutor* draft, const BlockManagerConfig& kv, int64_t max_catchup_tokens);

  // Sets seq->spec_tokens (and spec_dists when the request samples) for each request; a
  // sequence still catching up, or one the draft cache cannot hold, gets none. Draft forward
  // times go to `policy` (may be null).
  Status propose(std::span<const DraftRequest> reqs, std::span<const int32_t> eos_token_ids, SpecPolicy* policy);
  // After verification: `accepted` of the proposed drafts were accepted (seq->tokens now holds them).
  void on_verified(Sequence* seq, int32_t accepted);
  // Frees the sequence's draft blocks (finish, abort, preemption).
  void release(SeqId id);
  int64_t num_free_blocks() const { return kv_.num_free_blocks(); }
  int64_t num_blocks() const { return kv_.num_blocks(); }

 private:
  // One sequence's share of a proposal: n context tokens from start to catch up on, then (when
  // drafting: the whole context is caught up this step) up to k drafts.
  struct Item {
    Sequence* seq;
    int32_t k;
    int64_t start, n;
    bool drafting;
  };
  // The sequences that draft this step, within the catch-up budget, their draft blocks taken.
  std::vector<Item> plan(std::span<const DraftRequest> reqs);
  Status catch_up(const std::vector<Item>& items, std::span<const int32_t> eos, SpecPolicy* policy);
  struct State {
    int64_t computed = 0;  // context tokens whose draft KV is valid
    int64_t base = 0;      // num_tokens when the current drafts were proposed
    int32_t proposed = 0;  // drafts proposed at base
  };
  ModelExecutor* draft_;
  KvCacheManager kv_;
  int64_t max_catchup_;
  std::unordered_map<SeqId, State> states_;
};

}  // namespace lancet
