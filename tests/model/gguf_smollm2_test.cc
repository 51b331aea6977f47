// The real default model (SmolLM2-135M-Instruct, Q4_1 GGUF with a Q8_0 tied embedding,
// interleaved rope, 9 q / 3 kv heads) against an independent float64 numpy forward pass over
// weights dequantized by the PyPI `gguf` package, with q/k rows un-permuted back to HF order
// and HF's rotate-half rope. With exact matmuls (dequantized f32 weight tiles) every logit row,
// prompt and decode, must agree to 1e-4 with the same top-1; with the default llama.cpp-style
// int8 activations (Q8_1 / Q8_0 per 32-block; ~0.5 logit of rounding noise on logits up to
// ~25) to 1e-1, and our top-1 must be a token the reference puts within 1 logit of its best.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "backend/backend.h"
#include "io/model_source.h"
#include "model/llama_model.h"
#include "runner/llama_executor.h"
#include "runner/sequence_runner.h"
#include "test_paths.h"

namespace lancet {
namespace {

const char* kScript = R"PY(
import sys, numpy as np, gguf
path, ids = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
r = gguf.GGUFReader(path)
def field(k):
    f = r.fields[k]; return f.parts[f.data[0]][0]
H = int(field("llama.embedding_length")); nh = int(field("llama.attention.head_count"))
nkv = int(field("llama.attention.head_count_kv")); L = int(field("llama.block_count"))
eps = float(field("llama.attention.layer_norm_rms_epsilon")); base = float(field("llama.rope.freq_base"))
hd = H // nh
W = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64) for t in r.tensors}
def unpermute(w, n):  # inverse of the HF -> GGUF q/k row permutation
    return w.reshape(n, hd // 2, 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)
T = len(ids)
inv = 1.0 / (base ** (np.arange(0, hd, 2) / hd))
ang = np.arange(T)[:, None] * inv[None, :]
cos = np.concatenate([np.cos(ang)] * 2, 1); sin = np.concatenate([np.sin(ang)] * 2, 1)
def rms(x, w): return w * x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps)
def rot(x): h = x.shape[-1] // 2; return np.concatenate([-x[..., h:], x[..., :h]], -1)
x = W["token_embd.weight"][ids]
for l in range(L):
    p = "blk.%d." % l
    h = rms(x, W[p + "attn_norm.weight"])
    q = (h @ unpermute(W[p + "attn_q.weight"], nh).T).reshape(T, nh, hd)
    k = (h @ unpermute(W[p + "attn_k.weight"], nkv).T).reshape(T, nkv, hd)
    v = (h @ W[p + "attn_v.weight"].T).reshape(T, nkv, hd)
    q = q * cos[:, None] + rot(q) * sin[:, None]; k = k * cos[:, None] + rot(k) * sin[:, None]
    o = np.zeros((T, nh, hd)); g = nh // nkv
    for i in range(nh):
        s = q[:, i] @ k[:, i // g].T / np.sqrt(hd) + np.triu(np.full((T, T), -np.inf), 1)
        s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True)
        o[:, i] = s @ v[:, i // g]
    x = x + o.reshape(T, -1) @ W[p + "attn_output.weight"].T
    h = rms(x, W[p + "ffn_norm.weight"])
    a = h @ W[p + "ffn_gate.weight"].T; u = h @ W[p + "ffn_up.weight"].T
    x = x + (a / (1 + np.exp(-a)) * u) @ W[p + "ffn_down.weight"].T
lm = W.get("output.weight", W["token_embd.weight"])
logits = rms(x, W["output_norm.weight"]) @ lm.T
for row in logits: print(" ".join("%.6e" % v for v in row))
)PY";

TEST(GgufSmolLM2, MatchesNumpyForwardOverGgufPyDequantizedWeights) {
  const std::string path = testing::default_model();
  if (path.empty()) FAIL() << "default model not downloaded (tools/fetch_model.sh)";
  const std::vector<int32_t> ids = {1, 9690, 198, 2683, 314, 253, 5356, 30, 2};
  std::string id_list;
  for (int32_t t : ids) id_list += (id_list.empty() ? "" : ",") + std::to_string(t);
  const std::string dir = testing::make_temp_dir();
  std::ofstream(dir + "/ref.py") << kScript;
  std::string out;
  ASSERT_EQ(testing::run_command(testing::python() + " " + dir + "/ref.py " + path + " " + id_list + " 2>&1", &out), 0)
      << out;
  std::istringstream in(out);
  std::vector<double> ref;
  for (double v; in >> v;) ref.push_back(v);
  auto src = open_model_source(path);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  const int64_t V = (*src)->config().vocab_size;
  const int64_t T = static_cast<int64_t>(ids.size());
  ASSERT_EQ(static_cast<int64_t>(ref.size()), T * V);
  EXPECT_TRUE((*src)->config().rope_interleaved);
  using QA = CpuBackendOptions::QuantActivations;
  for (QA mode : {QA::kOff, QA::kAuto}) {
    SCOPED_TRACE(mode == QA::kOff ? "exact f32 tiles" : "int8 activations");
    const double tol = mode == QA::kOff ? 1e-4 : 1e-1;
    const double top1_slack = mode == QA::kOff ? 0.0 : 1.0;
    CpuBackendOptions bo;
    bo.quant_activations = mode;
    auto be = make_cpu_backend(bo);
    ASSERT_TRUE(be.ok());
    LlamaModelOptions mo;
    mo.max_model_len = 64;
    auto model = LlamaModel::create(**src, **be, mo);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    auto exec = LlamaExecutor::create(**model, KvBlockConfig{4, 16}).value();
    SequenceRunner seq(*exec);

    auto compare = [&](const float* got, int64_t row) {
      double err = 0, mx = 0;
      int64_t a = 0, b = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double r = ref[row * V + v];
        err = std::max(err, std::fabs(got[v] - r));
        mx = std::max(mx, std::fabs(r));
        if (got[v] > got[a]) a = v;
        if (r > ref[row * V + b]) b = v;
      }
      EXPECT_LT(err / mx, tol) << "row " << row;
      if (top1_slack == 0.0) EXPECT_EQ(a, b) << "row " << row;
      EXPECT_GE(ref[row * V + a], ref[row * V + b] - top1_slack) << "row " << row << " picks " << a;
    };
    // Prompt minus its last token in one step (all rows), then the last token as a decode step.
    std::vector<int32_t> all(static_cast<size_t>(T - 1));
    for (int64_t r = 0; r < T - 1; ++r) all[r] = static_cast<int32_t>(r);
    std::vector<float> logits;
    ASSERT_TRUE(seq.step(std::span<const int32_t>(ids.data(), T - 1), all, &logits).ok());
    for (int64_t r = 0; r < T - 1; ++r) compare(logits.data() + r * V, r);
    ASSERT_TRUE(seq.step_last(std::span<const int32_t>(ids.data() + T - 1, 1), &logits).ok());
    compare(logits.data(), T - 1);
  }
}

}  // namespace
}  // namespace lancet
