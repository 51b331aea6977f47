// DeviceTokenRing: the feed staging, the draws into alternating slots and the copies back.
#include "runner/device_token_ring.h"

#include <string>

#include "core/thread_pool.h"

namespace lancet {

Status DeviceTokenRing::prepare_feeds(std::span<const TokenFeed> feeds, int64_t num_tokens) {
  if (pending_.size() >= 2) return FailedPrecondition("async step: two steps are already launched");
  const int64_t num_samples = last_ >= 0 ? slots_[last_].count : 0;
  RETURN_IF_ERROR(check_token_feeds(feeds, num_tokens, num_samples));
  num_feeds_ = static_cast<int64_t>(feeds.size());
  if (feeds.empty()) return OkStatus();
  feed_host_.resize(2 * feeds.size());
  for (size_t i = 0; i < feeds.size(); ++i) {
    feed_host_[2 * i] = feeds[i].token;
    feed_host_[2 * i + 1] = feeds[i].sample;
  }
  const size_t bytes = feed_host_.size() * sizeof(int32_t);
  // The old buffer is released in the backend's order, after the steps that read it.
  if (feed_dev_.nbytes() < bytes) {
    ASSIGN_OR_RETURN(feed_dev_, be_.alloc(bytes + bytes / 2));
  }
  // copy_to_device has staged pageable memory when it returns: feed_host_ may change at once.
  return be_.copy_to_device(feed_dev_.data(), feed_host_.data(), bytes);
}

Status DeviceTokenRing::apply_feeds(int32_t* token_ids) {
  if (num_feeds_ == 0) return OkStatus();
  return be_.scatter_tokens(token_ids, slots_[last_].dev.as<const int32_t>(), feed_dev_.as<const int32_t>(),
                            num_feeds_);
}

Status DeviceTokenRing::sample(const float* logits, int64_t num_rows, int64_t vocab,
                               std::span<const DeviceSampleRow> rows) {
  Slot& s = slots_[next_];
  const int64_t n = static_cast<int64_t>(rows.size());
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(int32_t);
  // This slot's last step was collected: nothing reads its buffers any more.
  if (s.dev.nbytes() < bytes) {
    ASSIGN_OR_RETURN(s.dev, be_.alloc(bytes * 2));
    ASSIGN_OR_RETURN(s.host, be_.alloc_host(bytes * 2));
  }
  if (n > 0) {
    if (be_.supports_device_sampling()) {
      RETURN_IF_ERROR(be_.sample_rows_async(logits, num_rows, vocab, rows, s.dev.as<int32_t>()));
    } else {
      // Backend memory is the host's (the CPU): the same draws as the CPU sampler, over the
      // thread pool at large batches, written where device draws would be.
      host_logits_.resize(static_cast<size_t>(num_rows * vocab));
      RETURN_IF_ERROR(be_.copy_to_host(host_logits_.data(), logits, host_logits_.size() * sizeof(float)));
      host_tokens_.resize(rows.size());
      for (const DeviceSampleRow& r : rows)
        if (r.row < 0 || r.row >= num_rows)
          return InvalidArgument("async step: row " + std::to_string(r.row) + " outside the step's " +
                                 std::to_string(num_rows) + " logits rows");
      auto draw = [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i)
          host_tokens_[i] = draw_sample_row(
              std::span<const float>(host_logits_).subspan(static_cast<size_t>(rows[i].row * vocab), vocab), rows[i]);
      };
      if (n >= 8) default_thread_pool().parallel_for(n, draw);
      else draw(0, n, 0);
      RETURN_IF_ERROR(be_.copy_to_device(s.dev.data(), host_tokens_.data(), static_cast<size_t>(n) * sizeof(int32_t)));
    }
  }
  ASSIGN_OR_RETURN(s.copy, be_.copy_to_host_async(s.host.data(), s.dev.data(), static_cast<size_t>(n) * sizeof(int32_t)));
  s.count = n;
  pending_.push_back(next_);
  last_ = next_;
  next_ ^= 1;
  return OkStatus();
}

Status DeviceTokenRing::collect(std::vector<int32_t>* tokens) {
  if (pending_.empty()) return FailedPrecondition("async step: nothing launched to collect");
  Slot& s = slots_[pending_.front()];
  pending_.pop_front();
  const Status st = s.copy->wait();
  s.copy.reset();
  RETURN_IF_ERROR(st);
  const int32_t* h = s.host.as<const int32_t>();
  tokens->assign(h, h + s.count);
  return OkStatus();
}

}  // namespace lancet
