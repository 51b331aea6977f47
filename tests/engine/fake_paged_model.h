// A fake paged model for the engine tests: it writes each new token into its cache slot and
// gives logits that depend on the whole context as read back through the block table
// (context_logit), so any block-table, slot, prefix-cache or token-feed mistake changes the
// output.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/context_logits.h"
#include "runner/model_executor.h"

namespace lancet::testing {

// Tokens kept by cache slot, as a paged KV cache keeps their keys: write() stores a step's new
// tokens in the slots its block table gives, context() reads a sequence's first len tokens back
// through its block table. The engine tests' fake models build their logits on what it reads,
// so a block-table, slot or token-feed mistake changes their output.
class PagedTokenCache {
 public:
  PagedTokenCache(int64_t blocks, int32_t bs) : bs_(bs), cache_(static_cast<size_t>(blocks * bs), -1) {}
  Status write(const SeqStepInput& in) {
    for (size_t j = 0; j < in.tokens.size(); ++j) {
      const int64_t p = in.start_pos + static_cast<int64_t>(j);
      if (p / bs_ >= static_cast<int64_t>(in.block_table.size())) return Internal("block table too short");
      cache_[static_cast<size_t>(in.block_table[p / bs_] * bs_ + p % bs_)] = in.tokens[j];
    }
    return OkStatus();
  }
  std::vector<int32_t> context(const SeqStepInput& in, int64_t len) const {
    std::vector<int32_t> ctx(static_cast<size_t>(len));
    for (int64_t p = 0; p < len; ++p) ctx[p] = cache_[static_cast<size_t>(in.block_table[p / bs_] * bs_ + p % bs_)];
    return ctx;
  }

 private:
  int32_t bs_;
  std::vector<int32_t> cache_;
};

class FakePagedModel : public ModelExecutor {
 public:
  static constexpr int64_t kVocab = 64;

  FakePagedModel(int64_t blocks, int32_t bs) : blocks_(blocks), bs_(bs), cache_(blocks, bs) {}
  int64_t vocab_size() const override { return kVocab; }
  int32_t block_size() const override { return bs_; }
  int64_t num_blocks() const override { return blocks_; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    logits->clear();
    for (const SeqStepInput& in : batch) {
      RETURN_IF_ERROR(cache_.write(in));
      if (!in.need_logits) continue;
      const std::vector<int32_t> ctx = cache_.context(in, in.start_pos + static_cast<int64_t>(in.tokens.size()));
      for (int32_t v = 0; v < kVocab; ++v) logits->push_back(context_logit(ctx, v));
    }
    return OkStatus();
  }

 private:
  int64_t blocks_;
  int32_t bs_;
  PagedTokenCache cache_;
};

}  // namespace lancet::testing
