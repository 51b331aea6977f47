// eval_precision: prompts and a text through two models, logits compared position by position.
#include "eval/precision_eval.h"

#include "runner/llama_executor.h"
#include "runner/sequence_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "core/thread_pool.h"
#include "model/step.h"

namespace lancet {

namespace {

// log(sum(exp(x))) in double.
double log_sum_exp(const float* x, int64_t n) {
  double mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max<double>(mx, x[i]);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - mx);
  return mx + std::log(s);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Running means are kept as sums until the end.
struct AgreementSums {
  LogitAgreement a;
  double cos_sum = 0, kl_sum = 0;
  void finish() {
    a.mean_cosine = a.positions ? cos_sum / a.positions : 0;
    a.mean_kl = a.positions ? kl_sum / a.positions : 0;
  }
};

// One position: cosine, KL(softmax(a) || softmax(b)), argmax match. Float exponentials
// with double sums: the exps dominate the comparison's cost, and float keeps KL to ~1e-6.
struct PositionStats {
  double cos = 0, kl = 0;
  bool same_top1 = false;
};

PositionStats compare_position(const float* a, const float* b, int64_t V, std::vector<float>* ea) {
  double dot = 0, na = 0, nb = 0;
  float mxa = a[0], mxb = b[0];
  int64_t ia = 0, ib = 0;
  for (int64_t i = 0; i < V; ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
    if (a[i] > mxa) { mxa = a[i]; ia = i; }
    if (b[i] > mxb) { mxb = b[i]; ib = i; }
  }
  ea->resize(static_cast<size_t>(V));
  double sa = 0, sb = 0;
  for (int64_t i = 0; i < V; ++i) {
    (*ea)[i] = std::exp(a[i] - mxa);
    sa += (*ea)[i];
    sb += std::exp(b[i] - mxb);
  }
  const double lza = mxa + std::log(sa), lzb = mxb + std::log(sb);
  double kl = 0;
  for (int64_t i = 0; i < V; ++i)
    kl += (*ea)[i] * ((static_cast<double>(a[i]) - lza) - (static_cast<double>(b[i]) - lzb));
  PositionStats st;
  st.cos = dot / std::sqrt(std::max(na * nb, 1e-300));
  st.kl = std::max(kl / sa, 0.0);  // rounding can leave a tiny negative value
  st.same_top1 = ia == ib;  // first maximum, as torch.argmax
  return st;
}

void add_agreement(const float* ref, const float* test, int64_t n, int64_t V, AgreementSums* s) {
  std::vector<PositionStats> st(static_cast<size_t>(n));
  default_thread_pool().parallel_for(n, [&](int64_t p0, int64_t p1, int) {
    std::vector<float> scratch;
    for (int64_t p = p0; p < p1; ++p) st[p] = compare_position(ref + p * V, test + p * V, V, &scratch);
  });
  for (const PositionStats& x : st) {
    s->a.positions++;
    if (x.same_top1) s->a.top1_agree++;
    s->cos_sum += x.cos;
    s->a.min_cosine = std::min(s->a.min_cosine, x.cos);
    s->kl_sum += x.kl;
  }
}

// One sequence in its own paged cache, prefilled chunk by chunk.
struct CachedSequence {
  LlamaModel* model = nullptr;
  Backend* backend = nullptr;
  Fp8AttentionMath math = Fp8AttentionMath::kF16;
  std::unique_ptr<LlamaExecutor> executor;
  std::unique_ptr<SequenceRunner> seq;

  static StatusOr<CachedSequence> create(LlamaModel& model, Backend& backend, int64_t len, DType kv_dtype,
                                         int64_t block_size, const PrecisionEvalConfig* scales,
                                         Fp8AttentionMath math) {
    if (len > model.max_model_len())
      return OutOfRange("sequence of " + std::to_string(len) + " tokens is past the model's length " +
                        std::to_string(model.max_model_len()));
    LlamaExecutorOptions eo;
    eo.decode_graphs = false;
    const KvBlockConfig blocks{(len + block_size - 1) / block_size + 1, static_cast<int32_t>(block_size)};
    CachedSequence cs;
    cs.model = &model;
    cs.backend = &backend;
    cs.math = math;
    ASSIGN_OR_RETURN(cs.executor, LlamaExecutor::create(model, blocks, kv_dtype, eo));
    if (kv_dtype == DType::kF8E4M3 && scales && !scales->kv_k_scales.empty())
      RETURN_IF_ERROR(cs.executor->set_kv_scales(scales->kv_k_scales, scales->kv_v_scales));
    cs.seq = std::make_unique<SequenceRunner>(*cs.executor);
    return cs;
  }

  // Logits of every position in ids[start, start + n) ([n, vocab]); start is where the
  // sequence is (chunks come in order).
  Status run(const std::vector<int32_t>& ids, int64_t start, int64_t n, std::vector<float>* logits) {
    if (start != seq->position()) return Internal("precision eval: chunks out of order");
    backend->set_fp8_attention_math(math);  // the other path may have set the shared backend
    std::vector<int32_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[i] = static_cast<int32_t>(i);
    RETURN_IF_ERROR(seq->step(std::span<const int32_t>(ids.data() + start, n), all, logits));
    if (static_cast<int64_t>(logits->size()) != n * model->config().vocab_size)
      return Internal("forward returned " + std::to_string(logits->size()) + " logits for " + std::to_string(n) +
                      " positions");
    return OkStatus();
  }
};

Status check_ids(const std::vector<int32_t>& ids, int64_t V) {
  if (ids.empty()) return InvalidArgument("empty sequence");
  for (int32_t id : ids)
    if (id < 0 || id >= V) return OutOfRange("token id " + std::to_string(id) + " outside the vocabulary");
  return OkStatus();
}

}  // namespace

StatusOr<std::vector<float>> sequence_logits(LlamaModel& model, Backend& backend, const std::vector<int32_t>& ids,
                                             DType kv_dtype, int64_t block_size, int64_t chunk,
                                             const PrecisionEvalConfig* scales, Fp8AttentionMath math) {
  const int64_t L = static_cast<int64_t>(ids.size()), V = model.config().vocab_size;
  RETURN_IF_ERROR(check_ids(ids, V));
  ASSIGN_OR_RETURN(CachedSequence cs, CachedSequence::create(model, backend, L, kv_dtype, block_size, scales, math));
  if (chunk <= 0) chunk = L;
  std::vector<float> out(static_cast<size_t>(L * V)), lg;
  for (int64_t start = 0; start < L; start += chunk) {
    const int64_t n = std::min(chunk, L - start);
    RETURN_IF_ERROR(cs.run(ids, start, n, &lg));
    std::copy(lg.begin(), lg.end(), out.begin() + start * V);
  }
  return out;
}

void accumulate_agreement(const float* ref, const float* test, int64_t n, int64_t V, LogitAgreement* acc) {
  AgreementSums s;
  s.a = *acc;
  s.cos_sum = acc->mean_cosine * acc->positions;
  s.kl_sum = acc->mean_kl * acc->positions;
  add_agreement(ref, test, n, V, &s);
  s.finish();
  *acc = s.a;
}

double sum_next_token_nll(const float* logits, const std::vector<int32_t>& ids, int64_t V) {
  double nll = 0;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const float* x = logits + i * V;
    nll += log_sum_exp(x, V) - x[ids[i + 1]];
  }
  return nll;
}

StatusOr<PrecisionReport> eval_precision(LlamaModel& ref, LlamaModel& test, Backend& backend,
                                         const std::vector<std::vector<int32_t>>& prompts,
                                         const std::vector<int32_t>& text, const PrecisionEvalConfig& cfg) {
  const int64_t V = ref.config().vocab_size;
  if (test.config().vocab_size != V)
    return InvalidArgument("eval_precision: the models' vocabularies differ (" + std::to_string(V) + " vs " +
                           std::to_string(test.config().vocab_size) + ")");
  if (!text.empty() && text.size() < 2) return InvalidArgument("eval_precision: the text needs at least two tokens");
  PrecisionReport r;
  r.num_prompts = static_cast<int64_t>(prompts.size());
  AgreementSums ps;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto a = sequence_logits(ref, backend, prompts[i], cfg.ref_kv_dtype, cfg.block_size, 0, &cfg,
                             cfg.ref_fp8_attention_math);
    if (!a.ok()) return a.status().with_context("prompt " + std::to_string(i));
    auto t1 = std::chrono::steady_clock::now();
    auto b = sequence_logits(test, backend, prompts[i], cfg.test_kv_dtype, cfg.block_size, 0, &cfg,
                             cfg.test_fp8_attention_math);
    if (!b.ok()) return b.status().with_context("prompt " + std::to_string(i));
    r.ref_seconds += std::chrono::duration<double>(t1 - t0).count();
    r.test_seconds += seconds_since(t1);
    add_agreement(a->data(), b->data(), static_cast<int64_t>(prompts[i].size()), V, &ps);
  }
  ps.finish();
  r.prompts = ps.a;
  if (!text.empty()) {
    // Both models walk the text chunk by chunk, so only one chunk of logits each is held.
    RETURN_IF_ERROR(check_ids(text, V));
    const int64_t L = static_cast<int64_t>(text.size());
    const int64_t chunk = cfg.text_chunk > 0 ? cfg.text_chunk : L;
    ASSIGN_OR_RETURN(CachedSequence ra, CachedSequence::create(ref, backend, L, cfg.ref_kv_dtype, cfg.block_size, &cfg,
                                                               cfg.ref_fp8_attention_math));
    ASSIGN_OR_RETURN(CachedSequence rb, CachedSequence::create(test, backend, L, cfg.test_kv_dtype, cfg.block_size,
                                                               &cfg, cfg.test_fp8_attention_math));
    AgreementSums ts;
    double nll_a = 0, nll_b = 0;
    std::vector<float> a, b;
    for (int64_t start = 0; start < L; start += chunk) {
      const int64_t n = std::min(chunk, L - start);
      auto t0 = std::chrono::steady_clock::now();
      Status st = ra.run(text, start, n, &a);
      if (!st.ok()) return st.with_context("text");
      auto t1 = std::chrono::steady_clock::now();
      st = rb.run(text, start, n, &b);
      if (!st.ok()) return st.with_context("text");
      r.ref_seconds += std::chrono::duration<double>(t1 - t0).count();
      r.test_seconds += seconds_since(t1);
      // The next token of this chunk's positions (the last text position predicts nothing).
      const std::vector<int32_t> next(text.begin() + start, text.begin() + std::min(L, start + n + 1));
      nll_a += sum_next_token_nll(a.data(), next, V);
      nll_b += sum_next_token_nll(b.data(), next, V);
      add_agreement(a.data(), b.data(), n, V, &ts);
    }
    ts.finish();
    r.text = ts.a;
    r.text_tokens = L - 1;
    r.ref_perplexity = std::exp(nll_a / r.text_tokens);
    r.test_perplexity = std::exp(nll_b / r.text_tokens);
  }
  return r;
}

}  // namespace lancet
