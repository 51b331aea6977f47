// Device sampling through the engine, over a fake model whose "device" samples each row it is
// handed with the CPU reference (draw_token) and records which rows came as device rows and
// which as host logits. Plain requests must be sampled on the device with sample_token's seed
// and counter (so outputs equal the host path's token for token); requests that need logits
// (logprobs, logit_bias, penalties, min_tokens masking) and speculative verification rows must
// get host logits, packed in row order among device rows of the same step.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "engine/engine_run_util.h"
#include "engine/fake_paged_model.h"
#include "runner/llama_executor.h"
#include "io/model_source.h"
#include "test_paths.h"

namespace lancet {
namespace {

constexpr int64_t kVocab = 8;
constexpr int32_t kEos = 7;

float logit(const std::vector<int32_t>& ctx, int32_t v) { return testing::looping_logit(ctx, v, 0, 4.0f); }

class FakeModel : public ModelExecutor {
 public:
  FakeModel(int64_t blocks, int32_t bs, bool device) : blocks_(blocks), bs_(bs), device_(device), cache_(blocks, bs) {}
  int64_t vocab_size() const override { return kVocab; }
  int32_t block_size() const override { return bs_; }
  int64_t num_blocks() const override { return blocks_; }
  bool supports_device_sampling() const override { return device_; }

  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    RETURN_IF_ERROR(compute(batch, logits));
    host_rows += static_cast<int64_t>(logits->size()) / kVocab;
    return OkStatus();
  }

  Status execute_sampled(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> device,
                         std::vector<int32_t>* tokens, std::vector<float>* host_logits) override {
    if (!device_) return Unimplemented("no device sampling");
    std::vector<float> all;
    RETURN_IF_ERROR(compute(batch, &all));
    const int64_t rows = static_cast<int64_t>(all.size()) / kVocab;
    // Which input each row belongs to, to catch a multi-row (verification) row sent here.
    std::vector<int32_t> rows_of_input;
    for (const SeqStepInput& in : batch)
      for (int32_t r = 0; r < in.logits_rows(); ++r) rows_of_input.push_back(in.logits_rows());
    std::vector<uint8_t> on(rows, 0);
    tokens->clear();
    for (const DeviceSampleRow& d : device) {
      if (d.row < 0 || d.row >= rows || on[d.row]) return InvalidArgument("bad device row");
      on[d.row] = 1;
      if (rows_of_input[d.row] > 1) ++multi_row_on_device;
      SamplingParams p;
      p.temperature = d.temperature;
      p.top_k = d.top_k;
      p.top_p = d.top_p;
      p.min_p = d.min_p;
      tokens->push_back(draw_token(std::span<const float>(all.data() + d.row * kVocab, kVocab), p, d.seed, d.counter));
      device_log.push_back(d);
    }
    host_logits->clear();
    for (int64_t r = 0; r < rows; ++r) {
      if (on[r]) continue;
      host_logits->insert(host_logits->end(), all.begin() + r * kVocab, all.begin() + (r + 1) * kVocab);
      ++host_rows;
      if (rows_of_input[r] > 1) ++multi_row_on_host;
    }
    if (!device.empty() && host_logits->size() != 0) ++mixed_steps;
    return OkStatus();
  }

  std::vector<DeviceSampleRow> device_log;
  int64_t host_rows = 0;
  int64_t mixed_steps = 0;
  int64_t multi_row_on_device = 0;
  int64_t multi_row_on_host = 0;

 private:
  Status compute(std::span<const SeqStepInput> batch, std::vector<float>* logits) {
    logits->clear();
    for (const SeqStepInput& in : batch) {
      RETURN_IF_ERROR(cache_.write(in));
      const int64_t end = in.start_pos + static_cast<int64_t>(in.tokens.size());
      for (int64_t r = in.logits_rows(); r > 0; --r) {
        const std::vector<int32_t> ctx = cache_.context(in, end - r + 1);
        for (int32_t v = 0; v < kVocab; ++v) logits->push_back(logit(ctx, v));
      }
    }
    return OkStatus();
  }

  int64_t blocks_;
  int32_t bs_;
  bool device_;
  testing::PagedTokenCache cache_;
};

struct RunResult {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;
  EngineStats stats;
};

RunResult run(FakeModel& model, const std::vector<GenerationRequest>& reqs, const SpeculativeConfig& spec = {}) {
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 256, .max_num_seqs = 32, .max_model_len = 512};
  cfg.eos_token_ids = {kEos};
  cfg.speculative = spec;
  Engine engine(cfg, &model);
  RunResult r;
  std::map<int64_t, size_t> index;
  for (const auto& q : reqs) {
    auto id = engine.add_request(q);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    if (id.ok()) index[*id] = index.size();
  }
  r.tokens.resize(reqs.size());
  r.logprobs.resize(reqs.size());
  int guard = 0;
  while (engine.has_work() && guard++ < 100000) {
    auto ev = engine.step();
    EXPECT_TRUE(ev.ok());
    EXPECT_TRUE(engine.last_error().ok()) << engine.last_error().to_string();
    if (!ev.ok()) break;
    for (const auto& e : *ev) {
      const size_t i = index.at(e.request_id);
      if (e.token >= 0) {
        r.tokens[i].push_back(e.token);
        r.logprobs[i].push_back(e.logprob);
      }
      EXPECT_NE(e.finish_reason, FinishReason::kError);
    }
  }
  r.stats = engine.stats();
  return r;
}

GenerationRequest request(std::mt19937& rng, uint64_t seed) {
  GenerationRequest q;
  const int len = 3 + rng() % 20;
  for (int j = 0; j < len; ++j) q.prompt.push_back(rng() % (kVocab - 1));
  q.params.seed = seed;
  q.params.max_tokens = 8 + rng() % 24;
  return q;
}

// Plain requests over the sampler's settings: greedy, temperature, top-k, top-p, min-p.
std::vector<GenerationRequest> plain_requests(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < count; ++i) {
    GenerationRequest q = request(rng, 1000 + i);
    SamplingParams& p = q.params;
    switch (i % 5) {
      case 0: p.temperature = 0.0f; break;
      case 1: p.temperature = 0.8f; break;
      case 2: p.temperature = 1.2f; p.top_k = 3; break;
      case 3: p.temperature = 1.0f; p.top_p = 0.7f; break;
      case 4: p.temperature = 0.9f; p.min_p = 0.3f; p.top_k = 5; p.top_p = 0.9f; break;
    }
    reqs.push_back(q);
  }
  return reqs;
}

size_t total_tokens(const RunResult& r) {
  size_t n = 0;
  for (const auto& t : r.tokens) n += t.size();
  return n;
}

TEST(DeviceSampling, PlainRequestsAreSampledOnTheDeviceWithTheHostPathsTokens) {
  const auto reqs = plain_requests(20, 3);
  FakeModel host(4096, 4, false), dev(4096, 4, true);
  const RunResult a = run(host, reqs);
  const RunResult b = run(dev, reqs);
  EXPECT_EQ(a.tokens, b.tokens);
  // Sampling really varies with the seed (else equal outputs would prove little).
  std::set<std::vector<int32_t>> distinct(a.tokens.begin(), a.tokens.end());
  EXPECT_GT(distinct.size(), 10u);
  // Every token of the device run came from a device row, none from host logits.
  EXPECT_EQ(dev.host_rows, 0);
  EXPECT_EQ(dev.device_log.size(), total_tokens(b));
  EXPECT_EQ(host.device_log.size(), 0u);
  EXPECT_EQ(host.host_rows, static_cast<int64_t>(total_tokens(a)));
  // Each request's rows carry its seed, its settings and the output position as the counter.
  std::map<uint64_t, std::vector<uint64_t>> counters;
  for (const DeviceSampleRow& d : dev.device_log) {
    counters[d.seed].push_back(d.counter);
    const SamplingParams& p = reqs.at(d.seed - 1000).params;
    EXPECT_EQ(d.temperature, p.temperature);
    EXPECT_EQ(d.top_k, p.top_k);
    EXPECT_EQ(d.top_p, p.top_p);
    EXPECT_EQ(d.min_p, p.min_p);
  }
  ASSERT_EQ(counters.size(), reqs.size());
  for (const auto& [seed, c] : counters) {
    ASSERT_EQ(c.size(), b.tokens.at(seed - 1000).size()) << seed;
    for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i], i) << "seed " << seed;
  }
}

TEST(DeviceSampling, RowsThatNeedLogitsGetHostLogits) {
  std::mt19937 rng(7);
  std::vector<GenerationRequest> reqs;
  // Requests 0..5 need host logits (request 5 only while its min_tokens are not out).
  for (int i = 0; i < 12; ++i) {
    GenerationRequest q = request(rng, 2000 + i);
    q.params.temperature = 0.9f;
    switch (i) {
      case 0: q.params.logprobs = 2; break;
      case 1: q.params.logit_bias[3] = 2.5f; break;
      case 2: q.params.repetition_penalty = 1.4f; break;
      case 3: q.params.presence_penalty = 0.7f; break;
      case 4: q.params.frequency_penalty = 0.6f; break;
      case 5: q.params.min_tokens = 4; q.params.max_tokens = 20; q.params.ignore_eos = true; break;
      default: break;
    }
    reqs.push_back(q);
  }
  FakeModel host(4096, 4, false), dev(4096, 4, true);
  const RunResult a = run(host, reqs);
  const RunResult b = run(dev, reqs);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.logprobs, b.logprobs);
  ASSERT_EQ(b.tokens[5].size(), 20u);
  std::map<uint64_t, std::vector<uint64_t>> counters;
  for (const DeviceSampleRow& d : dev.device_log) counters[d.seed].push_back(d.counter);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(counters.count(2000 + i), 0u) << "request " << i << " went to the device";
  // min_tokens: the first four draws mask eos on the host, the rest are plain.
  const auto& c5 = counters[2005];
  ASSERT_EQ(c5.size(), 16u);
  EXPECT_EQ(c5.front(), 4u);
  int64_t host_tokens = 4;
  for (int i = 0; i < 5; ++i) host_tokens += static_cast<int64_t>(b.tokens[i].size());
  EXPECT_EQ(dev.host_rows, host_tokens);
  EXPECT_EQ(dev.device_log.size() + static_cast<size_t>(host_tokens), total_tokens(b));
  // Host and device rows shared steps (the packed host rows were mapped back right, or the
  // outputs above would differ).
  EXPECT_GT(dev.mixed_steps, 0);
}

TEST(DeviceSampling, SpeculativeVerificationRowsGetHostLogits) {
  SpeculativeConfig spec;
  spec.method = SpecMethod::kNgram;
  spec.num_speculative_tokens = 3;
  spec.prompt_lookup_min = 1;
  spec.prompt_lookup_max = 3;
  spec.adaptive = false;
  const auto reqs = plain_requests(10, 11);
  FakeModel host(4096, 4, false), dev(4096, 4, true);
  const RunResult a = run(host, reqs, spec);
  const RunResult b = run(dev, reqs, spec);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_GT(b.stats.spec_draft_tokens, 0);
  EXPECT_EQ(dev.multi_row_on_device, 0);
  EXPECT_GT(dev.multi_row_on_host, 0);
  EXPECT_GT(dev.device_log.size(), 0u);  // steps without drafts still sample on the device
  // And speculation changes nothing: the same tokens as plain decoding.
  FakeModel plain(4096, 4, true);
  EXPECT_EQ(run(plain, reqs).tokens, b.tokens);
}

// The CPU backend with "device" sampling: sample_rows runs the CPU reference on the rows
// where they are (CPU backend memory is host memory), so
// LlamaExecutor::execute_sampled run for real: device rows sampled in place, only the other
// rows copied out, packed.
class SamplingCpuBackend : public Backend {
 public:
  explicit SamplingCpuBackend(std::unique_ptr<Backend> cpu) : cpu_(std::move(cpu)) {}
  const char* name() const override { return "cpu-sampling"; }
  StatusOr<Buffer> alloc(size_t n) override { return cpu_->alloc(n); }
  Status copy_to_device(void* d, const void* s, size_t n) override { return cpu_->copy_to_device(d, s, n); }
  Status copy_to_host(void* d, const void* s, size_t n) override {
    copied_bytes += n;
    return cpu_->copy_to_host(d, s, n);
  }
  Status zero(void* d, size_t n) override { return cpu_->zero(d, n); }
  Status synchronize() override { return cpu_->synchronize(); }
  StatusOr<WeightMatrix> upload_weight(const WeightSpec& spec) override { return cpu_->upload_weight(spec); }
  StatusOr<Buffer> upload_vector_f32(const TensorView& t, const std::string& n) override {
    return cpu_->upload_vector_f32(t, n);
  }
  Status embedding(const WeightMatrix& t, const int32_t* ids, int64_t n, float* out) override {
    return cpu_->embedding(t, ids, n, out);
  }
  Status rms_norm(const RmsNormArgs& a) override { return cpu_->rms_norm(a); }
  Status rope(const RopeArgs& a) override { return cpu_->rope(a); }
  Status matmul(const float* x, int64_t n, const WeightMatrix& w, float* y) override { return cpu_->matmul(x, n, w, y); }
  Status silu_mul(const float* g, const float* u, int64_t n, int64_t d, float* out) override {
    return cpu_->silu_mul(g, u, n, d, out);
  }
  Status kv_write(const KvWriteArgs& a, const KvCacheLayer& c) override { return cpu_->kv_write(a, c); }
  Status kv_block_read(std::span<const KvCacheLayer> l, int64_t b, void* h) override {
    return cpu_->kv_block_read(l, b, h);
  }
  Status kv_block_write(std::span<const KvCacheLayer> l, int64_t b, const void* h) override {
    return cpu_->kv_block_write(l, b, h);
  }
  Status paged_attention(const PagedAttentionArgs& a, const KvCacheLayer& c) override {
    return cpu_->paged_attention(a, c);
  }
  Status gather_rows(const float* x, int64_t n, int64_t d, const int32_t* rows, int64_t r, float* out) override {
    return cpu_->gather_rows(x, n, d, rows, r, out);
  }
  Status matmul_multi(const float* x, int64_t n, std::span<const WeightMatrix* const> ws,
                      std::span<float* const> ys) override {
    return cpu_->matmul_multi(x, n, ws, ys);
  }
  Status matmul_gate_up_silu(const float* x, int64_t n, const WeightMatrix& g, const WeightMatrix& u, float* go,
                             float* uo, float* act) override {
    return cpu_->matmul_gate_up_silu(x, n, g, u, go, uo, act);
  }
  bool supports_device_sampling() const override { return true; }
  Status sample_rows(const float* logits, int64_t rows, int64_t vocab, std::span<const DeviceSampleRow> params,
                     int32_t* tokens) override {
    for (size_t i = 0; i < params.size(); ++i) {
      const DeviceSampleRow& d = params[i];
      if (d.row < 0 || d.row >= rows) return InvalidArgument("sample_rows: bad row");
      SamplingParams p;
      p.temperature = d.temperature;
      p.top_k = d.top_k;
      p.top_p = d.top_p;
      p.min_p = d.min_p;
      tokens[i] = draw_token(std::span<const float>(logits + d.row * vocab, vocab), p, d.seed, d.counter);
    }
    sampled_rows += static_cast<int64_t>(params.size());
    return OkStatus();
  }
  // Backend memory is host memory: the asynchronous draw is the same draw, left in place.
  Status sample_rows_async(const float* logits, int64_t rows, int64_t vocab, std::span<const DeviceSampleRow> params,
                           int32_t* tokens) override {
    return sample_rows(logits, rows, vocab, params, tokens);
  }
  Status scatter_tokens(int32_t* ids, const int32_t* samples, const int32_t* pairs, int64_t n) override {
    return cpu_->scatter_tokens(ids, samples, pairs, n);
  }

  int64_t sampled_rows = 0;
  size_t copied_bytes = 0;

 private:
  std::unique_ptr<Backend> cpu_;
};

std::vector<std::vector<int32_t>> run_executor(ModelExecutor& exec, const std::vector<GenerationRequest>& reqs) {
  return testing::run_engine_to_end(exec, reqs, {.max_num_batched_tokens = 64, .max_num_seqs = 16, .max_model_len = 512});
}

TEST(DeviceSampling, LlamaModelSamplesInPlaceAndCopiesOnlyHostRows) {
  auto cpu = make_backend("cpu");
  ASSERT_TRUE(cpu.ok());
  SamplingCpuBackend be(std::move(*cpu));
  auto src = open_model_source(testing::fixture_dir("tiny-llama32"));
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto model = LlamaModel::create(**src, be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto executor = LlamaExecutor::create(**model, KvBlockConfig{256, 16});
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  LlamaExecutor& exec = **executor;
  ASSERT_TRUE(exec.supports_device_sampling());
  std::mt19937 r(23);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest q;
    const int len = 3 + r() % 30;
    for (int j = 0; j < len; ++j) q.prompt.push_back(static_cast<int32_t>(r() % exec.vocab_size()));
    q.params.max_tokens = 12;
    q.params.seed = 300 + i;
    q.params.temperature = i % 3 == 0 ? 0.0f : 1.0f;
    if (i % 3 == 2) q.params.top_p = 0.9f;
    if (i % 4 == 1) q.params.logprobs = 0;  // host rows between device rows
    reqs.push_back(q);
  }
  testing::HostOnlyExecutor host(exec);
  const auto want = run_executor(host, reqs);
  const size_t host_bytes = be.copied_bytes;
  EXPECT_EQ(be.sampled_rows, 0);
  const auto got = run_executor(exec, reqs);
  EXPECT_EQ(got, want);
  // 2 of the 8 requests (24 of the 96 rows) need host logits: the other 72 rows were sampled
  // in place, and only a quarter of the logits bytes crossed.
  EXPECT_EQ(be.sampled_rows, 6 * 12);
  const size_t device_bytes = be.copied_bytes - host_bytes;
  EXPECT_EQ(device_bytes * 4, host_bytes);
  EXPECT_GT(host_bytes, 0u);
  // The CPU backend itself has no device sampling (the engine keeps host sampling there).
  auto plain_cpu = make_backend("cpu");
  ASSERT_TRUE(plain_cpu.ok());
  EXPECT_FALSE((*plain_cpu)->supports_device_sampling());
}

// Asynchronous scheduling through LlamaExecutor's device path (runner/device_token_ring.h) on
// the "device" of SamplingCpuBackend: tokens drawn into backend memory, fed into the next
// step's token ids by scatter_tokens, and only the token ids copied back. The tokens equal
// those of synchronous host sampling; requests that need host logits switch the engine to
// synchronous steps and still give the same tokens.
TEST(DeviceSampling, AsyncStepsFeedTokensOnTheDeviceWithTheHostPathsTokens) {
  auto cpu = make_backend("cpu");
  ASSERT_TRUE(cpu.ok());
  SamplingCpuBackend be(std::move(*cpu));
  auto src = open_model_source(testing::fixture_dir("tiny-llama32"));
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto model = LlamaModel::create(**src, be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto executor = LlamaExecutor::create(**model, KvBlockConfig{256, 16});
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  LlamaExecutor& exec = **executor;
  std::mt19937 r(29);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 12; ++i) {
    GenerationRequest q;
    const int len = 2 + r() % 40;
    for (int j = 0; j < len; ++j) q.prompt.push_back(static_cast<int32_t>(r() % exec.vocab_size()));
    q.params.max_tokens = 3 + static_cast<int32_t>(r() % 12);
    q.params.seed = 500 + i;
    q.params.temperature = i % 3 == 0 ? 0.0f : 0.9f;
    if (i % 3 == 2) q.params.top_k = 20;
    reqs.push_back(q);
  }
  testing::HostOnlyExecutor host(exec);
  const SchedulerConfig sc{.max_num_batched_tokens = 48, .max_num_seqs = 16, .max_model_len = 512};
  const auto want = testing::run_engine_to_end(host, reqs, sc);
  const size_t host_bytes = be.copied_bytes;
  EngineStats st;
  const auto got = testing::run_engine_to_end(exec, reqs, sc, /*async_scheduling=*/true, &st);
  EXPECT_EQ(got, want);
  EXPECT_EQ(st.async_steps, st.steps);
  EXPECT_EQ(st.num_free_blocks, st.num_blocks);
  // Only token ids crossed: 4 bytes per drawn token, the dropped ones included (a sequence
  // whose last token is in flight is not scheduled again, so none are dropped here).
  size_t tokens = 0;
  for (const auto& t : got) tokens += t.size();
  EXPECT_EQ(be.copied_bytes - host_bytes, tokens * sizeof(int32_t));
  EXPECT_EQ(be.sampled_rows, static_cast<int64_t>(tokens));

  // One request with logprobs: its steps run synchronously, the tokens are the same.
  reqs[4].params.logprobs = 1;
  const auto want_mixed = testing::run_engine_to_end(host, reqs, sc);
  EXPECT_EQ(want_mixed, want);
  const auto got_mixed = testing::run_engine_to_end(exec, reqs, sc, /*async_scheduling=*/true, &st);
  EXPECT_EQ(got_mixed, want);
  EXPECT_GT(st.async_steps, 0);
  EXPECT_LT(st.async_steps, st.steps);
  EXPECT_EQ(st.num_free_blocks, st.num_blocks);
}

// The device sampler's reference renormalises top-p over all top-k candidates, also when the
// first candidates the CPU sorts already hold top_p of the whole mass (exact dyadic masses).
TEST(DeviceSampling, TopPIsRenormalisedOverTheWholeTopK) {
  const std::vector<float> flat(1024, 0.0f);
  SamplingParams p;
  p.top_p = 0.25f;  // a quarter of 1024 equal tokens
  EXPECT_EQ(sampling_distribution(flat, p).tokens.size(), 256u);
  p.top_k = 512;  // a quarter of the top 512
  const TokenDistribution d = sampling_distribution(flat, p);
  ASSERT_EQ(d.tokens.size(), 128u);
  for (int32_t i = 0; i < 128; ++i) EXPECT_EQ(d.tokens[i], i);  // ties: lowest indices first
  std::vector<int> hits(1024, 0);
  for (uint64_t c = 0; c < 4000; ++c) hits[draw_token(flat, p, 5, c)]++;
  int beyond = 0, distinct = 0;
  for (int i = 0; i < 1024; ++i) {
    beyond += i >= 128 ? hits[i] : 0;
    distinct += hits[i] > 0;
  }
  EXPECT_EQ(beyond, 0);
  EXPECT_GT(distinct, 120);
}

}  // namespace
}  // namespace lancet
