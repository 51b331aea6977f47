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

class FakePagedModel : public ModelExecutor {
 public:
  static constexpr int64_t kVocab = 64;

  FakePagedModel(int64_t blocks, int32_t bs) : blocks_(blocks), bs_(bs), cache_(blocks * bs, -1) {}
  int64_t vocab_size() const override { return kVocab; }
  int32_t block_size() const override { return bs_; }
  int64_t num_blocks() const override { return blocks_; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    logits->clear();
    for (const SeqStepInput& in : batch) {
      for (size_t j = 0; j < in.tokens.size(); ++j) {
        const int64_t p = in.start_pos + static_cast<int64_t>(j);
        if (p / bs_ >= static_cast<int64_t>(in.block_table.size())) return Internal("block table too short");
        cache_[in.block_table[p / bs_] * bs_ + p % bs_] = in.tokens[j];
      }
      if (!in.need_logits) continue;
      const int64_t len = in.start_pos + static_cast<int64_t>(in.tokens.size());
      std::vector<int32_t> ctx(len);
      for (int64_t p = 0; p < len; ++p) ctx[p] = cache_[in.block_table[p / bs_] * bs_ + p % bs_];
      for (int32_t v = 0; v < kVocab; ++v) logits->push_back(context_logit(ctx, v));
    }
    return OkStatus();
  }

 private:
  int64_t blocks_;
  int32_t bs_;
  std::vector<int32_t> cache_;
};

}  // namespace lancet::testing
