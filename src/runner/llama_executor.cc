// LlamaExecutor: batch -> StepMetadata (once) -> each rank's view -> forward -> logits rows or
// device-sampled tokens.
#include "runner/llama_executor.h"

#include <algorithm>
#include <string>
#include <utility>

#include "runner/step_builder.h"

namespace lancet {

StatusOr<std::unique_ptr<LlamaExecutor>> LlamaExecutor::create(LlamaModel& model, const KvBlockConfig& blocks,
                                                               DType kv_dtype, const LlamaExecutorOptions& opts) {
  std::unique_ptr<LlamaExecutor> e(new LlamaExecutor(model, blocks));
  bool graphs = opts.decode_graphs && !opts.op_timing;
  for (int r = 0; r < model.num_ranks(); ++r) {
    Backend& be = model.backend(r);
    RETURN_IF_ERROR(be.make_current());
    auto kv = KvBuffers::create(be, model.kv_buffer_config(r, blocks, kv_dtype));
    if (!kv.ok()) return model.num_ranks() > 1 ? kv.status().with_context("rank " + std::to_string(r)) : kv.status();
    e->kv_ptrs_.push_back(kv->get());
    e->kv_.push_back(std::move(*kv));
    e->uploaders_.push_back(std::make_unique<StepUploader>(be));
    graphs = graphs && be.supports_graphs();
  }
  RETURN_IF_ERROR(model.backend(0).make_current());
  if (opts.op_timing) {
    RETURN_IF_ERROR(model.backend(0).set_op_timing(true));
    e->op_timing_ = true;
  }
  if (graphs) e->graphs_ = std::make_unique<DecodeGraphs>(model, blocks.block_size, opts.max_graph_batch);
  return e;
}

LlamaExecutor::~LlamaExecutor() = default;

StepProfile LlamaExecutor::take_step_profile() {
  const std::lock_guard<std::mutex> lock(profile_mu_);
  return std::exchange(profile_, StepProfile{});
}

Status LlamaExecutor::set_kv_scales(const std::vector<float>& k, const std::vector<float>& v) {
  for (auto& kv : kv_) RETURN_IF_ERROR(kv->set_scales(k, v));
  return OkStatus();
}

Status LlamaExecutor::check_step(const StepMetadata& st) const {
  const int64_t max_len = model_.max_model_len(), vocab = model_.config().vocab_size;
  for (int32_t p : st.positions)
    if (p >= max_len)
      return OutOfRange("forward: position " + std::to_string(p) + " past max_model_len " + std::to_string(max_len));
  for (int32_t id : st.token_ids)
    if (id < 0 || id >= vocab) return InvalidArgument("forward: token id " + std::to_string(id) + " outside the vocabulary");
  if (!kv_[0]->has_scales())
    return FailedPrecondition("forward: the fp8 kv cache has no K/V scales (set them from the checkpoint or a calibration)");
  return OkStatus();
}

Status LlamaExecutor::run_step(std::span<const SeqStepInput> batch, StepMetadata* st, bool allow_graphs,
                               const DecodeGraphs::BeforeForward& before) {
  ASSIGN_OR_RETURN(*st, build_step(blocks_.block_size, blocks_.num_blocks, batch, model_.lora_config().num_slots));
  if (st->num_tokens == 0) return OkStatus();
  RETURN_IF_ERROR(check_step(*st));
  if (allow_graphs && graphs_ && !model_.observing() && graphs_->eligible(*st)) {
    RETURN_IF_ERROR(graphs_->run(*st, kv_ptrs_, before));
  } else {
    RETURN_IF_ERROR(model_.ensure_workspace(st->num_tokens, st->num_logits_rows));
    std::vector<StepView> views;
    for (int r = 0; r < model_.num_ranks(); ++r) {
      RETURN_IF_ERROR(model_.backend(r).make_current());
      ASSIGN_OR_RETURN(StepView v, uploaders_[r]->upload(*st, model_.layout(r)));
      if (before) RETURN_IF_ERROR(before(r, v));
      views.push_back(v);
    }
    RETURN_IF_ERROR(model_.backend(0).make_current());
    RETURN_IF_ERROR(model_.enqueue(views, kv_ptrs_));
  }
  return model_.gather_logits(st->num_logits_rows);
}

Status LlamaExecutor::execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) {
  return execute_sampled(batch, {}, nullptr, logits);
}

Status LlamaExecutor::execute_sampled(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> device,
                                      std::vector<int32_t>* tokens, std::vector<float>* host_logits) {
  return run_rows(batch, device, tokens, host_logits, /*allow_graphs=*/true);
}

Status LlamaExecutor::execute_hidden(std::span<const SeqStepInput> batch, std::vector<float>* logits,
                                     std::vector<float>* hidden) {
  hidden->clear();
  RETURN_IF_ERROR(run_rows(batch, {}, nullptr, logits, /*allow_graphs=*/false));
  const int64_t H = model_.config().hidden_size;
  Backend& be = model_.backend(0);
  int64_t row = 0;
  for (const SeqStepInput& s : batch) {
    const int64_t rows = s.logits_rows();
    if (s.want_hidden && rows > 0) {
      const size_t at = hidden->size();
      hidden->resize(at + static_cast<size_t>(rows * H));
      RETURN_IF_ERROR(be.copy_to_host(hidden->data() + at, model_.final_hidden_device() + row * H,
                                      static_cast<size_t>(rows * H) * sizeof(float)));
    }
    row += rows;
  }
  return be.synchronize();
}

Status LlamaExecutor::run_rows(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> device,
                               std::vector<int32_t>* tokens, std::vector<float>* host_logits, bool allow_graphs) {
  host_logits->clear();
  if (tokens) tokens->assign(device.size(), -1);
  Backend& be = model_.backend(0);
  if (!device.empty() && !be.supports_device_sampling())
    return FailedPrecondition(std::string("forward_sampled: the ") + be.name() + " backend has no device sampling");
  int64_t R = 0;
  for (const SeqStepInput& s : batch) R += s.logits_rows();
  const int64_t V = model_.config().vocab_size;
  std::vector<uint8_t> on_device;
  RETURN_IF_ERROR(check_rows(device, R, &on_device));
  StepMetadata st;
  RETURN_IF_ERROR(run_step(batch, &st, allow_graphs));
  if (st.num_tokens == 0) return OkStatus();
  const float* d_logits = model_.logits_device();
  if (!device.empty()) RETURN_IF_ERROR(be.sample_rows(d_logits, R, V, device, tokens->data()));
  // The other rows, one copy per run of consecutive rows.
  host_logits->resize(static_cast<size_t>((R - static_cast<int64_t>(device.size())) * V));
  int64_t out = 0;
  for (int64_t r = 0; r < R;) {
    if (on_device[r]) {
      ++r;
      continue;
    }
    int64_t e = r;
    while (e < R && !on_device[e]) ++e;
    RETURN_IF_ERROR(be.copy_to_host(host_logits->data() + out * V, d_logits + r * V,
                                    static_cast<size_t>((e - r) * V) * sizeof(float)));
    out += e - r;
    r = e;
  }
  RETURN_IF_ERROR(be.synchronize());
  if (!op_timing_) return OkStatus();
  OpTimes step;
  RETURN_IF_ERROR(be.take_op_times(&step));
  const std::lock_guard<std::mutex> lock(profile_mu_);
  (st.num_tokens == st.num_seqs ? profile_.decode : profile_.prompt).add(step);
  return OkStatus();
}

Status LlamaExecutor::check_rows(std::span<const DeviceSampleRow> rows, int64_t R, std::vector<uint8_t>* on_device) {
  on_device->assign(static_cast<size_t>(R), 0);
  for (const DeviceSampleRow& d : rows) {
    if (d.row < 0 || d.row >= R || (*on_device)[d.row])
      return InvalidArgument("forward_sampled: device row " + std::to_string(d.row) +
                             " is outside the step's logits rows or named twice");
    (*on_device)[d.row] = 1;
  }
  return OkStatus();
}

Status LlamaExecutor::launch_step(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> rows,
                                  std::span<const TokenFeed> feeds) {
  if (!device_async()) return ModelExecutor::launch_step(batch, rows, feeds);
  Backend& be = model_.backend(0);
  if (!ring_) ring_ = std::make_unique<DeviceTokenRing>(be);
  int64_t R = 0, num_tokens = 0;
  for (const SeqStepInput& s : batch) {
    R += s.logits_rows();
    num_tokens += static_cast<int64_t>(s.tokens.size());
  }
  const bool has_prompt = num_tokens != static_cast<int64_t>(batch.size());  // as the step profile splits
  std::vector<uint8_t> on_device;
  RETURN_IF_ERROR(check_rows(rows, R, &on_device));
  // The step's place on the device timeline: from before its first upload to after its draw.
  const bool follows_in_flight = ring_->num_launched() > 0;
  ASSIGN_OR_RETURN(std::unique_ptr<Backend::DeviceMark> begin, be.mark_device());
  RETURN_IF_ERROR(ring_->prepare_feeds(feeds, num_tokens));
  // The fed ids are written into the uploaded metadata (or the graph's arena) behind its copy
  // and before the forward; the host's placeholders never reach the embedding.
  auto feed = [&](int rank, const StepView& v) -> Status {
    (void)rank;
    return ring_->apply_feeds(const_cast<int32_t*>(v.token_ids));
  };
  StepMetadata st;
  RETURN_IF_ERROR(run_step(batch, &st, /*allow_graphs=*/true, feed));
  RETURN_IF_ERROR(ring_->sample(model_.logits_device(), R, model_.config().vocab_size, rows));
  ASSIGN_OR_RETURN(std::unique_ptr<Backend::DeviceMark> end, be.mark_device());
  std::lock_guard<std::mutex> lock(timeline_mu_);
  timeline_.add_step(std::move(begin), std::move(end), follows_in_flight, has_prompt);
  return OkStatus();
}

Status LlamaExecutor::collect_step(std::vector<int32_t>* tokens) {
  if (!device_async()) return ModelExecutor::collect_step(tokens);
  if (!ring_) return FailedPrecondition("async step: nothing launched to collect");
  RETURN_IF_ERROR(ring_->collect(tokens));
  // Nothing else is queued once the last launched step is collected: waiting costs nothing
  // then, and reports what the kernels found wrong in these steps (the backend's error word).
  if (ring_->num_launched() == 0) RETURN_IF_ERROR(model_.backend(0).synchronize());
  std::lock_guard<std::mutex> lock(timeline_mu_);
  return timeline_.harvest();
}

DeviceTimelineStats LlamaExecutor::take_device_timeline() {
  std::lock_guard<std::mutex> lock(timeline_mu_);
  (void)timeline_.harvest();  // what has run by now; a failed query leaves the steps pending
  return timeline_.take();
}

}  // namespace lancet
