// DecodeGraphs: bucketing, the metadata arenas, capture and replay on every rank.
#include "runner/decode_graphs.h"

#include <algorithm>
#include <cstring>

namespace lancet {
namespace {

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

}  // namespace

DecodeGraphs::DecodeGraphs(LlamaModel& model, int32_t block_size, int64_t max_batch)
    : model_(model),
      block_size_(block_size),
      max_batch_(batch_bucket(std::max<int64_t>(1, max_batch))),
      max_width_(width_bucket((model.max_model_len() + block_size - 1) / block_size)),
      arenas_(static_cast<size_t>(model.num_ranks())) {}

bool DecodeGraphs::eligible(const StepMetadata& st) const {
  if (st.num_seqs <= 0 || st.num_seqs > max_batch_ || st.num_tokens != st.num_seqs ||
      st.num_logits_rows != st.num_seqs)
    return false;
  for (int64_t i = 0; i < st.num_seqs; ++i)
    if (st.query_start[i + 1] - st.query_start[i] != 1 || st.logits_rows[i] != i) return false;
  return true;
}

int64_t DecodeGraphs::batch_bucket(int64_t n) {
  // Few graphs, and padding rows only where they cost little: 1, 2, 4, 8, then steps of 8 to
  // 128 (small batches read the weights either way), of 16 to 256, of 32 to 512, of 64 to
  // 1024, ...: above 64 sequences a step pads by less than an eighth of its bucket.
  int64_t pow2 = 1;
  while (pow2 < n) pow2 *= 2;
  if (n <= 8) return pow2;
  const int64_t step = std::max<int64_t>(8, pow2 / 16);
  return (n + step - 1) / step * step;
}

int64_t DecodeGraphs::batch_bucket_floor(int64_t bucket) {
  // Buckets grow with n, so the bucket's smallest batch lies just above the bucket below it
  // (at most one step away).
  int64_t n = bucket;
  while (n > 1 && batch_bucket(n - 1) == bucket) --n;
  return n;
}

int64_t DecodeGraphs::width_bucket(int64_t max_blocks) {
  int64_t w = 16;
  while (w < max_blocks) w *= 2;
  return w;
}

StepArenaLayout DecodeGraphs::layout(int64_t width) const {
  const size_t B = static_cast<size_t>(max_batch_);
  StepArenaLayout l;
  size_t o = 0;
  for (size_t* field : {&l.token_ids, &l.positions}) {
    *field = o;
    o += B * 4;
  }
  l.query_start = o;
  o += (B + 1) * 4;
  for (size_t* field : {&l.context_lens, &l.logits_rows}) {
    *field = o;
    o += B * 4;
  }
  l.attn_plan = o;
  o += 2 * 4;
  // LoRA: the adapted rows (at most one per sequence) and the slots' offsets into them.
  l.lora_rows = o;
  o += B * 4;
  l.lora_slot_start = o;
  o += static_cast<size_t>(model_.lora_config().num_slots + 1) * 4;
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
  graphs_.clear();  // they point into the old arenas
  const StepArenaLayout l = layout(width);
  for (int r = 0; r < model_.num_ranks(); ++r) {
    Backend& be = model_.backend(r);
    RETURN_IF_ERROR(be.make_current());
    for (Buffer& h : arenas_[r].host) {
      ASSIGN_OR_RETURN(h, be.alloc_host(l.bytes));
    }
    ASSIGN_OR_RETURN(arenas_[r].dev, be.alloc(l.bytes));
  }
  arena_width_ = width;
  return OkStatus();
}

Status DecodeGraphs::fill(int r, const StepMetadata& st, int64_t B, int64_t W, const AttentionStepPlan& plan) {
  const int64_t n = st.num_seqs;
  const StepArenaLayout l = layout(arena_width_);
  const TpRankLayout& rank = model_.layout(r);
  Arena& arena = arenas_[r];
  char* h = arena.host[arena.next].as<char>();
  arena.next ^= 1;
  auto* tok = reinterpret_cast<int32_t*>(h + l.token_ids);
  auto* pos = reinterpret_cast<int32_t*>(h + l.positions);
  auto* qs = reinterpret_cast<int32_t*>(h + l.query_start);
  auto* ctx = reinterpret_cast<int32_t*>(h + l.context_lens);
  auto* rows = reinterpret_cast<int32_t*>(h + l.logits_rows);
  auto* slots = reinterpret_cast<int64_t*>(h + l.slot_mapping);
  auto* tables = reinterpret_cast<int32_t*>(h + l.block_tables);
  for (int64_t i = 0; i < B; ++i) {
    const bool real = i < n;
    tok[i] = real ? rank_token_id(st.token_ids[i], rank) : 0;
    pos[i] = real ? st.positions[i] : 0;
    qs[i] = static_cast<int32_t>(i);
    ctx[i] = real ? st.context_lens[i] : 1;
    rows[i] = static_cast<int32_t>(i);
    slots[i] = real ? st.slot_mapping[i] : -1;
    int32_t* row = tables + i * W;
    const int64_t have = real ? st.max_blocks_per_seq : 0;
    if (real) std::copy_n(st.block_tables.data() + i * st.max_blocks_per_seq, have, row);
    std::fill(row + have, row + W, 0);
  }
  qs[B] = static_cast<int32_t>(B);
  auto* ap = reinterpret_cast<int32_t*>(h + l.attn_plan);
  ap[0] = plan.num_splits;
  ap[1] = plan.split_len;
  if (!st.lora_slot_start.empty()) {
    std::copy(st.lora_rows.begin(), st.lora_rows.end(), reinterpret_cast<int32_t*>(h + l.lora_rows));
    std::copy(st.lora_slot_start.begin(), st.lora_slot_start.end(), reinterpret_cast<int32_t*>(h + l.lora_slot_start));
  }
  // One copy: everything before the tables plus the B rows of width W the graph reads.
  Backend& be = model_.backend(r);
  RETURN_IF_ERROR(be.make_current());
  return be.copy_to_device(arena.dev.data(), h, l.block_tables + static_cast<size_t>(B * W) * 4);
}

Status DecodeGraphs::capture(std::span<const StepView> views, std::span<KvBuffers* const> kv,
                             std::vector<std::unique_ptr<BackendGraph>>* graphs) {
  // The first step of a bucket runs eagerly (which also sizes every scratch buffer and plans
  // every GEMM), then the same work is captured for the next ones.
  const int n = model_.num_ranks();
  RETURN_IF_ERROR(model_.enqueue(views, kv));
  for (int r = 0; r < n; ++r) {
    RETURN_IF_ERROR(model_.backend(r).make_current());
    RETURN_IF_ERROR(model_.backend(r).synchronize());
    RETURN_IF_ERROR(model_.backend(r).begin_capture());
  }
  const Status enq = model_.enqueue(views, kv);
  Status ended = OkStatus();  // every rank's capture is ended, whatever failed
  for (int r = 0; r < n; ++r) {
    Status cur = model_.backend(r).make_current();
    StatusOr<std::unique_ptr<BackendGraph>> g = model_.backend(r).end_capture();
    if (!cur.ok() || !g.ok()) {
      if (ended.ok()) ended = cur.ok() ? g.status() : cur;
      continue;
    }
    graphs->push_back(std::move(*g));
  }
  RETURN_IF_ERROR(enq);
  return ended;
}

Status DecodeGraphs::run(const StepMetadata& st, std::span<KvBuffers* const> kv, const BeforeForward& before) {
  const int64_t B = batch_bucket(st.num_seqs);
  const int64_t W = width_bucket(st.max_blocks_per_seq);
  RETURN_IF_ERROR(ensure_arena(std::max(W, max_width_)));
  RETURN_IF_ERROR(model_.ensure_workspace(B, B));
  if (model_.workspace_generation() != generation_) {
    graphs_.clear();  // they point at the old activations
    generation_ = model_.workspace_generation();
  }
  // LoRA graphs hold the ops of the projections the loaded adapters change.
  const bool lora = !st.lora_rows.empty();
  if (model_.lora_generation() != lora_generation_) {
    std::erase_if(graphs_, [](const auto& g) { return std::get<2>(g.first); });
    lora_generation_ = model_.lora_generation();
  }
  const int n = model_.num_ranks();
  const StepArenaLayout l = layout(arena_width_);
  std::vector<StepView> views;
  for (int r = 0; r < n; ++r) {
    // The step's own attention plan (what an eager step of it would use), read by the graph
    // at run time; the graph's launches hold the most splits any step of its bucket plans.
    AttentionStepPlan plan = model_.plan_attention(r, *kv[r], st.num_tokens, st.num_seqs, st.max_context_len);
    if (plan.num_splits < 1) return FailedPrecondition("decode graphs: the step has no attention plan");
    const int64_t floor = batch_bucket_floor(B);
    plan.max_splits = model_.plan_attention(r, *kv[r], floor, floor, W * block_size_).max_splits;
    RETURN_IF_ERROR(fill(r, st, B, W, plan));
    StepView v = l.view(arenas_[r].dev.data(), B, B, W, B);
    v.max_context_len = st.max_context_len;
    if (lora) {
      // Captured for up to B adapted rows; the arena's offsets say how many there are.
      const char* d = arenas_[r].dev.as<const char>();
      v.lora = LoraStepRows{st.lora_num_slots, B, reinterpret_cast<const int32_t*>(d + l.lora_rows),
                            reinterpret_cast<const int32_t*>(d + l.lora_slot_start)};
    }
    v.attn_plan = plan;
    if (before) RETURN_IF_ERROR(before(r, v));
    views.push_back(v);
  }
  const auto key = std::make_tuple(B, W, lora);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    std::vector<std::unique_ptr<BackendGraph>> graphs;
    RETURN_IF_ERROR(capture(views, kv, &graphs));
    graphs_.emplace(key, std::move(graphs));
    return model_.backend(0).make_current();
  }
  for (int r = 0; r < n; ++r) {
    RETURN_IF_ERROR(model_.backend(r).make_current());
    RETURN_IF_ERROR(model_.backend(r).launch_graph(*it->second[r]));
  }
  return model_.backend(0).make_current();
}

}  // namespace lancet
