// DecodeGraphs: bucketing, the metadata arena, capture and replay.
#include "model/decode_graphs.h"

#include <algorithm>
#include <cstring>

#include "model/llama_model.h"

namespace lancet {
namespace {

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

}  // namespace

bool DecodeGraphs::eligible(const StepMetadata& st) {
  if (st.num_seqs <= 0 || st.num_seqs > kMaxBatch || st.num_tokens != st.num_seqs ||
      st.num_logits_rows != st.num_seqs)
    return false;
  for (int64_t i = 0; i < st.num_seqs; ++i)
    if (st.query_start[i + 1] - st.query_start[i] != 1 || st.logits_rows[i] != i) return false;
  return true;
}

int64_t DecodeGraphs::batch_bucket(int64_t n) {
  // Powers of two up to 8, then steps of 8 to 64, then of 32: little padding where batches
  // are common, few graphs overall.
  if (n <= 8) {
    int64_t b = 1;
    while (b < n) b *= 2;
    return b;
  }
  if (n <= 64) return (n + 7) / 8 * 8;
  return (n + 31) / 32 * 32;
}

int64_t DecodeGraphs::width_bucket(int64_t max_blocks) {
  int64_t w = 16;
  while (w < max_blocks) w *= 2;
  return w;
}

StepArenaLayout DecodeGraphs::layout(int64_t width) const {
  const size_t B = static_cast<size_t>(kMaxBatch);
  StepArenaLayout l;
  size_t o = 0;
  l.token_ids = o;
  o += B * 4;
  l.positions = o;
  o += B * 4;
  l.query_start = o;
  o += (B + 1) * 4;
  l.context_lens = o;
  o += B * 4;
  l.logits_rows = o;
  o += B * 4;
  o = align_up(o, 8);
  l.slot_mapping = o;
  o += B * 8;
  o = align_up(o, 16);
  l.block_tables = o;
  o += B * static_cast<size_t>(width) * 4;
  l.bytes = o;
  return l;
}

Status DecodeGraphs::ensure_arena(int64_t width) {
  if (width <= arena_width_) return OkStatus();
  // Graphs point into the old arena.
  graphs_.clear();
  const StepArenaLayout l = layout(width);
  ASSIGN_OR_RETURN(host_, be_.alloc_host(l.bytes));
  ASSIGN_OR_RETURN(dev_, be_.alloc(l.bytes));
  arena_width_ = width;
  return OkStatus();
}

Status DecodeGraphs::run(LlamaModel& model, const StepMetadata& st, PagedKvCache& cache,
                         std::vector<float>* logits) {
  const int64_t n = st.num_seqs;
  const int64_t B = batch_bucket(n);
  const int64_t W = width_bucket(st.max_blocks_per_seq);
  RETURN_IF_ERROR(ensure_arena(std::max(W, width_bucket((max_model_len_ + cache.block_size() - 1) /
                                                        cache.block_size()))));
  RETURN_IF_ERROR(model.ensure_workspace(B, B));
  // ensure_workspace may have dropped the graphs; the arena is unaffected.
  const StepArenaLayout l = layout(arena_width_);
  char* h = host_.as<char>();
  auto* tok = reinterpret_cast<int32_t*>(h + l.token_ids);
  auto* pos = reinterpret_cast<int32_t*>(h + l.positions);
  auto* qs = reinterpret_cast<int32_t*>(h + l.query_start);
  auto* ctx = reinterpret_cast<int32_t*>(h + l.context_lens);
  auto* rows = reinterpret_cast<int32_t*>(h + l.logits_rows);
  auto* slots = reinterpret_cast<int64_t*>(h + l.slot_mapping);
  auto* tables = reinterpret_cast<int32_t*>(h + l.block_tables);
  for (int64_t i = 0; i < B; ++i) {
    const bool real = i < n;
    tok[i] = real ? st.token_ids[i] : 0;
    pos[i] = real ? st.positions[i] : 0;
    qs[i] = static_cast<int32_t>(i);
    ctx[i] = real ? st.context_lens[i] : 1;
    rows[i] = static_cast<int32_t>(i);
    slots[i] = real ? st.slot_mapping[i] : -1;
    int32_t* row = tables + i * W;
    if (real) {
      const int32_t* src = st.block_tables.data() + i * st.max_blocks_per_seq;
      std::copy(src, src + st.max_blocks_per_seq, row);
      std::fill(row + st.max_blocks_per_seq, row + W, 0);
    } else {
      std::fill(row, row + W, 0);
    }
  }
  qs[B] = static_cast<int32_t>(B);
  // One copy: everything before the tables plus the B rows of width W the graph reads.
  RETURN_IF_ERROR(be_.copy_to_device(dev_.data(), h, l.block_tables + static_cast<size_t>(B * W) * 4));

  const StepView v = l.view(dev_.data(), B, B, W, B);

  const auto key = std::make_pair(B, W);
  auto it = graphs_.find(key);
  if (it != graphs_.end()) {
    RETURN_IF_ERROR(be_.launch_graph(*it->second));
  } else {
    // The first step of a bucket runs eagerly (which also sizes every scratch buffer and
    // plans every GEMM), then the same work is captured for the next ones.
    RETURN_IF_ERROR(model.enqueue(v, cache));
    RETURN_IF_ERROR(be_.synchronize());
    RETURN_IF_ERROR(be_.begin_capture());
    const Status st_enq = model.enqueue(v, cache);
    StatusOr<std::unique_ptr<BackendGraph>> g = be_.end_capture();
    RETURN_IF_ERROR(st_enq);
    if (!g.ok()) return g.status();
    graphs_.emplace(key, std::move(*g));
  }
  if (!logits) return OkStatus();
  const int64_t vocab = model.config().vocab_size;
  logits->resize(static_cast<size_t>(n * vocab));
  RETURN_IF_ERROR(be_.copy_to_host(logits->data(), model.logits_device(), logits->size() * sizeof(float)));
  return be_.synchronize();
}

}  // namespace lancet
