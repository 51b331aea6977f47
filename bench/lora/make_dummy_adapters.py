#!/usr/bin/env python3
"""Random PEFT LoRA adapters for a model config (for `lancet bench throughput --lora-requests`).

    python3 bench/lora/make_dummy_adapters.py bench/configs/llama3-8b.json OUT --num 8 --rank 64
writes OUT/lora0 ... OUT/lora{num-1}, each adapter_config.json + adapter_model.safetensors in
peft's layout (bf16 factors of every decoder layer's --targets, alpha = 2 * rank), with A and B
both random (peft starts B at zero; a benchmark wants the work real). Needs torch and
safetensors (the GPU host has both).
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file

ap = argparse.ArgumentParser()
ap.add_argument("config")
ap.add_argument("out")
ap.add_argument("--num", type=int, default=8)
ap.add_argument("--rank", type=int, default=64)
ap.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj")
ap.add_argument("--seed", type=int, default=0)
a = ap.parse_args()

cfg = json.load(open(a.config))
H = cfg["hidden_size"]
heads = cfg["num_attention_heads"]
kv = cfg.get("num_key_value_heads", heads)
D = cfg.get("head_dim", H // heads)
I = cfg["intermediate_size"]
shapes = {  # [out, in]
    "q_proj": ("self_attn", heads * D, H), "k_proj": ("self_attn", kv * D, H), "v_proj": ("self_attn", kv * D, H),
    "o_proj": ("self_attn", H, heads * D), "gate_proj": ("mlp", I, H), "up_proj": ("mlp", I, H),
    "down_proj": ("mlp", H, I),
}
targets = a.targets.split(",")
g = torch.Generator().manual_seed(a.seed)
for n in range(a.num):
    d = os.path.join(a.out, f"lora{n}")
    os.makedirs(d, exist_ok=True)
    tensors = {}
    for layer in range(cfg["num_hidden_layers"]):
        for t in targets:
            block, out, inp = shapes[t]
            key = f"base_model.model.model.layers.{layer}.{block}.{t}"
            tensors[f"{key}.lora_A.weight"] = ((torch.rand(a.rank, inp, generator=g) - 0.5) * 0.02).to(torch.bfloat16)
            tensors[f"{key}.lora_B.weight"] = ((torch.rand(out, a.rank, generator=g) - 0.5) * 0.02).to(torch.bfloat16)
    save_file(tensors, os.path.join(d, "adapter_model.safetensors"))
    json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": a.rank, "lora_alpha": 2 * a.rank,
               "target_modules": targets, "lora_dropout": 0.0, "bias": "none", "use_rslora": False,
               "use_dora": False, "fan_in_fan_out": False, "base_model_name_or_path": a.config},
              open(os.path.join(d, "adapter_config.json"), "w"), indent=1)
    print(f"make_dummy_adapters: {d} ({len(tensors)} tensors, rank {a.rank})")
