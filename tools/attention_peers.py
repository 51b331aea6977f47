# Prompt-attention peers at the shapes bench_ops times (Llama-3-8B heads: 32 query / 8 KV heads,
# head_dim 128, BF16, causal with the mask aligned to the last query as in a chunked prompt):
# torch SDPA on its cuDNN and FlashAttention-2 backends. One JSON line per case:
#   {"op": "attn_prefill", "backend": "cudnn", "q": 2048, "ctx": 32768, "ms": ..., "tflops": ...}
# FLOPs count 4 * head_dim * heads * (query, key) pairs the causal mask keeps, as bench_ops does.
# Run on the GPU machine: python3 tools/attention_peers.py > peers_attention.jsonl
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

SHAPES = [(4096, 4096), (2048, 32768), (32768, 32768), (256, 131072), (65536, 65536)]
H, KH, D = 32, 8, 128


def timeit(fn, iters, warm=2):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / iters * 1e-3


def pairs(q, ctx):  # (query, key) pairs of a causal chunk of q queries ending at position ctx
    return q * (ctx - q) + q * (q + 1) / 2


def main():
    for q_len, ctx in SHAPES:
        q = torch.randn(1, H, q_len, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, KH, ctx, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        mask = causal_lower_right(q_len, ctx)
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(be):
                    if name == "cudnn":  # no GQA in this backend: the KV heads repeated
                        kk, vv, gqa = k.repeat_interleave(H // KH, 1), v.repeat_interleave(H // KH, 1), False
                    else:
                        kk, vv, gqa = k, v, True
                    if q_len == ctx:
                        fn = lambda: F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=gqa)
                    else:
                        fn = lambda: F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, enable_gqa=gqa)
                    t = timeit(fn, iters=3 if q_len * ctx > 1 << 30 else 10)
                flops = 4.0 * D * H * pairs(q_len, ctx)
                print(json.dumps({"op": "attn_prefill", "backend": name, "q": q_len, "ctx": ctx, "ms": t * 1e3,
                                  "tflops": flops / t / 1e12}), flush=True)
            except Exception as ex:  # a backend without a kernel for this case
                print(json.dumps({"op": "attn_prefill", "backend": name, "q": q_len, "ctx": ctx,
                                  "error": str(ex)[:160]}), flush=True)
        del q, k, v
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
