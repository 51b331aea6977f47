// Tensor parallelism simulated on the CPU: the same LlamaModel over 2 or 4 ranks with sharded
// weights and per-rank KV buffers must reproduce its single-rank logits (itself checked
// against the HF golden logits in golden_logits_test) for a 40-token prefill and 8 greedy
// decode steps, on the HF fixtures: tied and untied heads, GQA 4:1 and 8:1 with a single KV
// head (replicated over ranks) and 2 KV heads (split at TP=2, replicated at TP=4); FP8 weights
// and the FP8 KV cache on both sides.
// LANCET_TP_BACKEND=cuda runs the same comparisons on GPUs (rank r on GPU r, NCCL all-reduce)
// against the single-GPU LlamaModel, both in exact activation precision: the GPU machine's check.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "backend/backend.h"
#include "io/model_source.h"
#include "model/llama_model.h"
#include "model/tp_shard.h"
#include "runner/kv_calibration.h"
#include "runner/llama_executor.h"
#include "runner/rank_backends.h"
#include "runner/sequence_runner.h"
#include "test_paths.h"

namespace lancet {
namespace {

int64_t argmax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

// An all-reduce that leaves the last rank's share out of the sum: the comparison must catch it.
class DroppingCommunicator : public InProcessCommunicator {
 public:
  using InProcessCommunicator::InProcessCommunicator;
  Status all_reduce_sum(std::span<Backend* const> ranks, std::span<float* const> per_rank, int64_t n) override {
    RETURN_IF_ERROR(check(ranks, per_rank));
    std::vector<float> sum(per_rank[0], per_rank[0] + n);
    for (size_t r = 1; r + 1 < per_rank.size(); ++r)
      for (int64_t i = 0; i < n; ++i) sum[i] += per_rank[r][i];
    for (float* p : per_rank) std::copy(sum.begin(), sum.end(), p);
    return OkStatus();
  }
};

std::string tp_backend() {
  const char* env = std::getenv("LANCET_TP_BACKEND");
  return env && *env ? env : "cpu";
}

struct Agreement {
  float worst_rel_diff = 0;  // max over steps of max|ref - tp| / max|ref|
  int top1_agree = 0;
  int steps = 0;
};

// What both sides run with: FP8 weights (online quantization, per-channel scales sharded with
// their rows) and / or an FP8 KV cache (the same per-layer scales on every rank).
struct Variant {
  bool fp8_weights = false;
  bool fp8_kv = false;
  std::string name() const {
    return std::string(fp8_weights ? "fp8 weights" : "bf16/f32 weights") + (fp8_kv ? ", fp8 kv" : "");
  }
};

// One side of the comparison: its ranks' backends, the model over them, the executor with
// each rank's KV buffers, and one sequence.
struct Side {
  std::vector<std::unique_ptr<Backend>> backends;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<LlamaExecutor> exec;
  std::unique_ptr<SequenceRunner> seq;
};

Status make_side(const ModelSource& src, int ranks, const Variant& var, std::unique_ptr<TpCommunicator> comm,
                 Side* side) {
  RankBackendOptions ro;
  ro.kind = tp_backend();
  ro.size = ranks;
  ro.isa = "avx2";
  ro.precision = ActivationPrecision::kExact;
  ASSIGN_OR_RETURN(side->backends, make_rank_backends(ro));
  LlamaModelOptions mo;
  mo.max_model_len = 256;
  mo.weights.quantize_fp8 = var.fp8_weights;
  ASSIGN_OR_RETURN(side->model, LlamaModel::create(src, rank_pointers(side->backends), mo, std::move(comm)));
  LlamaExecutorOptions eo;
  eo.decode_graphs = false;
  ASSIGN_OR_RETURN(side->exec, LlamaExecutor::create(*side->model, KvBlockConfig{16, 16},
                                                     var.fp8_kv ? DType::kF8E4M3 : DType::kF32, eo));
  side->seq = std::make_unique<SequenceRunner>(*side->exec);
  return OkStatus();
}

// A fixed pseudo-random prompt spanning the whole vocabulary (so every rank's slice of the
// embedding is hit), past a block boundary.
std::vector<int32_t> spread_prompt(int64_t V, int64_t n, uint32_t x) {
  std::vector<int32_t> prompt(n);
  for (int32_t& id : prompt) {
    x = x * 1664525u + 1013904223u;
    id = static_cast<int32_t>(3 + (x >> 8) % (V - 3));
  }
  return prompt;
}

// Prefill of 40 ids, then 8 greedy decode steps (the single-rank argmax fed to both).
Agreement run_tp_vs_single_rank(const std::string& fixture, int tp, std::unique_ptr<TpCommunicator> comm = nullptr,
                                const Variant& var = {}) {
  Agreement a;
  auto src = open_model_source(testing::fixture_dir(fixture));
  EXPECT_TRUE(src.ok()) << src.status().to_string();
  if (!src.ok()) return a;
  const ModelConfig& cfg = (*src)->config();
  const int64_t V = cfg.vocab_size;
  Side one, group;
  Status s = make_side(**src, 1, var, nullptr, &one);
  EXPECT_TRUE(s.ok()) << s.to_string();
  s = s.ok() ? make_side(**src, tp, var, std::move(comm), &group) : s;
  EXPECT_TRUE(s.ok()) << s.to_string();
  if (!s.ok()) return a;
  for (int r = 0; r < tp; ++r) {
    EXPECT_EQ(group.exec->kv(r).config().num_kv_heads, std::max<int64_t>(1, cfg.num_kv_heads / tp));
    EXPECT_EQ(group.model->layout(r).vocab, V / tp);
  }
  if (var.fp8_kv) {
    // Calibrated over every rank's heads, the group's scales are the single rank's.
    const std::vector<std::vector<int32_t>> cal = {spread_prompt(V, 120, 777)};
    auto ref_scales = calibrate_kv_scales(*one.model, cal);
    auto tp_scales = calibrate_kv_scales(*group.model, cal);
    EXPECT_TRUE(ref_scales.ok() && tp_scales.ok());
    if (!ref_scales.ok() || !tp_scales.ok()) return a;
    for (size_t l = 0; l < ref_scales->k.size(); ++l) {
      EXPECT_NEAR(tp_scales->k[l], ref_scales->k[l], 1e-4f * ref_scales->k[l]) << "layer " << l;
      EXPECT_NEAR(tp_scales->v[l], ref_scales->v[l], 1e-4f * ref_scales->v[l]) << "layer " << l;
    }
    EXPECT_TRUE(one.exec->set_kv_scales(ref_scales->k, ref_scales->v).ok());
    EXPECT_TRUE(group.exec->set_kv_scales(ref_scales->k, ref_scales->v).ok());
    for (int r = 0; r < tp; ++r) EXPECT_EQ(group.exec->kv(r).layer(0).k_scale, ref_scales->k[0]);
  }
  std::vector<int32_t> tokens = spread_prompt(V, 40, 12345);
  for (int step = 0; step < 9; ++step) {
    std::vector<float> ref, got;
    s = one.seq->step_last(tokens, &ref);
    EXPECT_TRUE(s.ok()) << s.to_string();
    s = group.seq->step_last(tokens, &got);
    EXPECT_TRUE(s.ok()) << s.to_string();
    if (ref.size() != static_cast<size_t>(V) || got.size() != ref.size()) {
      ADD_FAILURE() << "logits sizes " << ref.size() << " / " << got.size() << ", expected " << V;
      return a;
    }
    float max_ref = 0, max_diff = 0;
    for (int64_t i = 0; i < V; ++i) {
      max_ref = std::max(max_ref, std::fabs(ref[i]));
      max_diff = std::max(max_diff, std::fabs(ref[i] - got[i]));
    }
    EXPECT_GT(max_ref, 0.0f);
    a.worst_rel_diff = std::max(a.worst_rel_diff, max_diff / max_ref);
    const int64_t top = argmax(ref.data(), V);
    a.top1_agree += argmax(got.data(), V) == top;
    ++a.steps;
    tokens = {static_cast<int32_t>(top)};
  }
  return a;
}

void check_tp_matches_single_rank(const std::string& fixture, int tp, const Variant& var = {}) {
  SCOPED_TRACE(fixture + " tp=" + std::to_string(tp) + " " + var.name());
  const std::string kind = tp_backend();
  if (kind != "cpu" && !make_backend_on_device(kind, tp - 1).ok())
    GTEST_SKIP() << "this machine has fewer than " << tp << " " << kind << " devices";
  const Agreement a = run_tp_vs_single_rank(fixture, tp, nullptr, var);
  std::printf("  %s %s tp=%d %s: max |diff| / max |logit| = %.3e, top-1 %d/%d\n", kind.c_str(), fixture.c_str(), tp,
              var.name().c_str(), a.worst_rel_diff, a.top1_agree, a.steps);
  EXPECT_EQ(a.steps, 9);
  // CPU ranks multiply f32 tiles: only the summation order differs. GPU ranks hold BF16
  // weights and split activations into BF16 halves (exact precision), on both sides; their
  // f32 accumulation order differs with the split. FP8 weights and caches are the same bytes on
  // both sides; a summation-order difference can still move one E4M3 rounding, so they get
  // the BF16 tolerance (2^-8).
  const bool fp8 = var.fp8_weights || var.fp8_kv;
  EXPECT_LE(a.worst_rel_diff, fp8 ? 4e-3f : kind == "cpu" ? 1e-4f : 2e-3f);
  EXPECT_EQ(a.top1_agree, a.steps);
}

TEST(TpForward, TinyLlama3Tp2) { check_tp_matches_single_rank("tiny-llama3", 2); }
TEST(TpForward, TinyLlama3Tp4) { check_tp_matches_single_rank("tiny-llama3", 4); }
TEST(TpForward, TinyGqa8Tp2) { check_tp_matches_single_rank("tiny-gqa8", 2); }
TEST(TpForward, TinyGqa8Tp4) { check_tp_matches_single_rank("tiny-gqa8", 4); }
TEST(TpForward, TinyLlama32TiedTp2) { check_tp_matches_single_rank("tiny-llama32", 2); }
TEST(TpForward, TinyLlama32TiedTp4) { check_tp_matches_single_rank("tiny-llama32", 4); }
TEST(TpForward, TinyRopeLinearKv2Tp2) { check_tp_matches_single_rank("tiny-rope-linear", 2); }
TEST(TpForward, TinyRopeLinearKv2Tp4) { check_tp_matches_single_rank("tiny-rope-linear", 4); }

// FP8 weights: each rank quantizes nothing of its own; it holds its rows (and their scales) or
// its columns (and every row's scale) of the single rank's FP8 weights.
TEST(TpForward, Fp8WeightsTp2) { check_tp_matches_single_rank("tiny-llama3", 2, {true, false}); }
TEST(TpForward, Fp8WeightsTp4) { check_tp_matches_single_rank("tiny-gqa8", 4, {true, false}); }
TEST(TpForward, Fp8KvCacheTp2) { check_tp_matches_single_rank("tiny-rope-linear", 2, {false, true}); }
TEST(TpForward, Fp8KvCacheTp4) { check_tp_matches_single_rank("tiny-llama32", 4, {false, true}); }
TEST(TpForward, Fp8WeightsAndKvTp4) { check_tp_matches_single_rank("tiny-llama3", 4, {true, true}); }

// FP8 weights change the logits (the comparison above is not of two BF16 runs).
TEST(TpForward, Fp8WeightsDifferFromUnquantized) {
  auto src = open_model_source(testing::fixture_dir("tiny-llama3"));
  ASSERT_TRUE(src.ok());
  Side plain, fp8;
  ASSERT_TRUE(make_side(**src, 2, {}, nullptr, &plain).ok());
  ASSERT_TRUE(make_side(**src, 2, {true, false}, nullptr, &fp8).ok());
  const std::vector<int32_t> p = spread_prompt((*src)->config().vocab_size, 40, 99);
  std::vector<float> a, b;
  ASSERT_TRUE(plain.seq->step_last(p, &a).ok());
  ASSERT_TRUE(fp8.seq->step_last(p, &b).ok());
  ASSERT_EQ(a.size(), b.size());
  float diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(a[i] - b[i]));
  EXPECT_GT(diff, 1e-5f);
}

// The comparison is sensitive: an all-reduce that loses one rank's partial sums is caught.
TEST(TpForward, LossyAllReduceIsDetected) {
  if (tp_backend() != "cpu") GTEST_SKIP() << "a host-memory communicator: CPU ranks only";
  const Agreement a = run_tp_vs_single_rank("tiny-llama3", 2, std::make_unique<DroppingCommunicator>(2));
  EXPECT_EQ(a.steps, 9);
  EXPECT_GT(a.worst_rel_diff, 1e-2f);
}

ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 1024;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_layers = 1;
  c.num_heads = 12;
  c.num_kv_heads = 6;
  c.head_dim = 64;
  c.max_position_embeddings = 4096;
  return c;
}

TEST(TpShard, RejectsKvHeadsNotDividing) {
  ModelConfig c = small_config();
  ASSERT_TRUE(validate_tp_config(c, 2).ok());
  ASSERT_FALSE(validate_tp_config(c, 6).ok());  // heads and KV heads split by 6; 512 columns do not
  EXPECT_NE(validate_tp_config(c, 6).to_string().find("intermediate_size (512)"), std::string::npos);
  Status s = validate_tp_config(c, 4);  // 12 heads split, 6 KV heads neither split nor replicate
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("num_kv_heads (6)"), std::string::npos) << s.to_string();
  EXPECT_NE(s.to_string().find("size 4"), std::string::npos) << s.to_string();
}

TEST(TpShard, RejectsOtherDimensionsByName) {
  ModelConfig c = small_config();
  Status s = validate_tp_config(c, 8);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("num_heads (12)"), std::string::npos) << s.to_string();
  c.num_heads = 8, c.num_kv_heads = 8, c.intermediate_size = 500;
  s = validate_tp_config(c, 8);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("intermediate_size (500)"), std::string::npos) << s.to_string();
  c.intermediate_size = 512, c.vocab_size = 1000;
  s = validate_tp_config(c, 16);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("num_heads"), std::string::npos) << s.to_string();
  s = validate_tp_config(c, 8);
  EXPECT_TRUE(s.ok()) << s.to_string();  // 1000 = 8 * 125
  c.vocab_size = 1001;
  s = validate_tp_config(c, 8);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("vocab_size (1001)"), std::string::npos) << s.to_string();
}

// Layouts cover every head, KV head, column and vocab row exactly once (KV heads replicated
// when there are fewer than ranks), and each rank's query heads read a local KV head.
TEST(TpShard, LayoutsPartitionTheModel) {
  ModelConfig c = small_config();
  c.num_heads = 8, c.num_kv_heads = 2;
  for (int n : {1, 2, 4, 8}) {
    int64_t heads = 0, cols = 0, vocab = 0;
    for (int r = 0; r < n; ++r) {
      auto l = tp_rank_layout(c, TpShardSpec{r, n});
      ASSERT_TRUE(l.ok()) << l.status().to_string();
      EXPECT_EQ(l->head_begin, heads);
      EXPECT_EQ(l->intermediate_begin, cols);
      EXPECT_EQ(l->vocab_begin, vocab);
      heads += l->num_heads, cols += l->intermediate, vocab += l->vocab;
      EXPECT_EQ(l->num_kv_heads, std::max(1, 2 / n));
      EXPECT_EQ(l->kv_head_begin, l->head_begin / 4);  // 4 query heads per KV head
    }
    EXPECT_EQ(heads, 8);
    EXPECT_EQ(cols, 512);
    EXPECT_EQ(vocab, 1024);
  }
  EXPECT_FALSE(tp_rank_layout(c, TpShardSpec{2, 2}).ok());
}

// Slices of a BF16 matrix keep the exact bytes of the rows / columns they cover.
TEST(TpShard, SlicesCopyExactElements) {
  std::vector<uint16_t> data(6 * 4);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint16_t>(0x3f80 + i);
  TensorView t{DType::kBF16, {6, 4}, data.data(), data.size() * 2};
  auto rows = tp_slice_rows(t, 2, 3, "w");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->shape, (std::vector<int64_t>{3, 4}));
  const uint16_t* rp = reinterpret_cast<const uint16_t*>(rows->bytes.data());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(rp[i], data[8 + i]);
  auto cols = tp_slice_cols(t, 1, 2, "w");
  ASSERT_TRUE(cols.ok());
  ASSERT_EQ(cols->shape, (std::vector<int64_t>{6, 2}));
  const uint16_t* cp = reinterpret_cast<const uint16_t*>(cols->bytes.data());
  for (int r = 0; r < 6; ++r)
    for (int j = 0; j < 2; ++j) EXPECT_EQ(cp[r * 2 + j], data[r * 4 + 1 + j]);
  EXPECT_FALSE(tp_slice_cols(t, 3, 2, "w").ok());
  TensorView q{DType::kQ4_0, {6, 32}, data.data(), data.size() * 2};
  Status s = tp_slice_rows(q, 0, 1, "blk.0.attn_q.weight").status();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("blk.0.attn_q.weight"), std::string::npos);
}

TEST(TpShard, GroupRejectsBadSizeOnFixture) {
  auto src = open_model_source(testing::fixture_dir("tiny-rope-linear"));
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  Side side;
  Status s = make_side(**src, 3, {}, nullptr, &side);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("num_heads (4)"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace lancet
