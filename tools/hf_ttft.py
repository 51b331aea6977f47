#!/usr/bin/env python3
"""Time-to-first-token of Hugging Face transformers on one GPU, the baseline that
docs/BENCHMARKS.md sets lancet's TTFT against: a Llama model built from a config.json with
random BF16 weights (the same shape `lancet --load-format dummy` benchmarks), SDPA attention,
one forward pass over N random prompt ids that keeps only the last position's logits (what
generation needs for its first token), synchronized and timed after warm-up runs.

    python3 tools/hf_ttft.py --config bench/configs/llama3-8b.json --input-len 32768 --json

Needs torch and transformers (not in the project's test tools: this runs on the GPU host).
"""
import argparse
import json
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="HF config.json of the model shape")
    ap.add_argument("--input-len", type=int, default=32768)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--attn", default="sdpa", help="attn_implementation (sdpa, eager, flash_attention_2)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig.from_json_file(a.config)
    cfg.max_position_embeddings = max(cfg.max_position_embeddings, a.input_len)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = LlamaForCausalLM._from_config(cfg, torch_dtype=torch.bfloat16, attn_implementation=a.attn)
    model.eval()
    load_s = time.perf_counter() - t0
    ids = torch.randint(3, cfg.vocab_size, (1, a.input_len), device="cuda")

    def once():
        with torch.inference_mode():
            try:
                out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            except TypeError:  # transformers before logits_to_keep
                out = model(input_ids=ids, use_cache=True, num_logits_to_keep=1)
            tok = out.logits[0, -1].argmax()
        torch.cuda.synchronize()
        return int(tok)

    for _ in range(a.warmup):
        once()
    times = []
    for _ in range(a.iters):
        torch.cuda.synchronize()
        s = time.perf_counter()
        once()
        times.append(time.perf_counter() - s)
    times.sort()
    r = {
        "engine": "transformers " + transformers.__version__ + ", torch " + torch.__version__,
        "attn_implementation": a.attn,
        "gpu": torch.cuda.get_device_name(0),
        "input_len": a.input_len,
        "ttft_s_median": times[len(times) // 2],
        "ttft_s_all": times,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
        "model_build_s": load_s,
    }
    if a.json:
        print(json.dumps(r))
    else:
        for k, v in r.items():
            print(f"{k:24s} {v}")


if __name__ == "__main__":
    main()
