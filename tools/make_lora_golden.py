#!/usr/bin/env python3
"""Reference LoRA adapters and logits from Hugging Face peft, for the LoRA serving tests.

Run it where torch, transformers and peft are installed (the GPU host; the computation is on
the CPU, in float32):
    python3 tools/make_lora_golden.py ../shared/fixtures/tiny-llama3 tests/data/lora-tiny-llama3
For each adapter below it makes a peft LoRA model on the base checkpoint with random, seeded
adapter weights, saves it with peft's save_pretrained (OUT/NAME/adapter_config.json and
adapter_model.safetensors), and writes OUT/NAME/golden.safetensors in the layout of the
fixtures' golden files (../shared/fixtures/README.md):
    case{i}.input_ids int32 [L], case{i}.positions int32 [P], case{i}.logits float32 [P, V],
    case{i}.greedy int32 [S]
computed by the peft model (base loaded in bf16 and upcast, adapter weights as saved, float32),
with OUT/NAME/golden.json listing the cases (what `lancet eval-logits --golden` reads).
The "chat" adapter is stored in bf16 and uses rsLoRA (scale alpha / sqrt(r)), "sql" in float32
with alpha / r. --extra-path adds a folder of unpacked wheels to the end of sys.path.
"""
import argparse
import json
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("base")
ap.add_argument("out")
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--extra-path", default="")
a = ap.parse_args()
if a.extra_path:
    sys.path.append(a.extra_path)

import torch  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

import peft  # noqa: E402
import transformers  # noqa: E402

ADAPTERS = [
    {"name": "sql", "r": 8, "alpha": 16, "rslora": False, "dtype": "float32", "seed": 11,
     "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]},
    {"name": "chat", "r": 4, "alpha": 16, "rslora": True, "dtype": "bfloat16", "seed": 12,
     "targets": ["q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"]},
]

torch.set_num_threads(os.cpu_count() or 1)
os.makedirs(a.out, exist_ok=True)
summary = {"base": os.path.basename(os.path.normpath(a.base)), "peft": peft.__version__,
           "transformers": transformers.__version__, "torch": torch.__version__, "adapters": []}
for spec in ADAPTERS:
    base = AutoModelForCausalLM.from_pretrained(a.base, dtype=torch.float32).eval()
    # The fixtures' goldens (and lancet, src/model/rope.h) use rotary frequencies rounded to the
    # checkpoint's bf16, as transformers has them when it materializes the model in that dtype;
    # loaded directly in float32 they stay float32 and the logits differ by ~3e-2 at 64 tokens.
    rot = base.model.rotary_emb
    with torch.no_grad():
        rot.inv_freq.copy_(rot.inv_freq.to(torch.bfloat16).to(torch.float32))
    if hasattr(rot, "original_inv_freq"):
        rot.original_inv_freq = rot.inv_freq.clone()
    summary["rotary_inv_freq"] = "float32 values rounded to bfloat16"
    V = base.config.vocab_size
    cfg = LoraConfig(r=spec["r"], lora_alpha=spec["alpha"], target_modules=spec["targets"], lora_dropout=0.0,
                     bias="none", use_rslora=spec["rslora"], init_lora_weights=False, task_type="CAUSAL_LM")
    model = get_peft_model(base, cfg).eval()
    g = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_A" in name:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            elif "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
            if "lora_" in name and spec["dtype"] == "bfloat16":
                p.copy_(p.to(torch.bfloat16).to(torch.float32))  # the values the bf16 file holds
    d = os.path.join(a.out, spec["name"])
    model.save_pretrained(d)
    cfg_path = os.path.join(d, "adapter_config.json")
    c = json.load(open(cfg_path))
    c["base_model_name_or_path"] = summary["base"]
    json.dump(c, open(cfg_path, "w"), indent=2, sort_keys=True)
    if spec["dtype"] == "bfloat16":
        w = os.path.join(d, "adapter_model.safetensors")
        save_file({k: v.to(torch.bfloat16).contiguous() for k, v in load_file(w).items()}, w)
    tensors, cases = {}, []
    for i, L in enumerate([7, 64]):
        ids = torch.randint(3, V, (L,), generator=g)
        x = ids[None]
        with torch.no_grad():
            logits = model(input_ids=x).logits[0].float()
            out = model.generate(input_ids=x, max_new_tokens=a.steps, min_new_tokens=a.steps, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
        pos = sorted(set([0, L - 1] + list(range(0, L, max(1, L // 16)))))
        tensors[f"case{i}.input_ids"] = ids.to(torch.int32)
        tensors[f"case{i}.positions"] = torch.tensor(pos, dtype=torch.int32)
        tensors[f"case{i}.logits"] = logits[pos].contiguous()
        tensors[f"case{i}.greedy"] = out[0, L:].to(torch.int32).contiguous()
        cases.append({"name": f"case{i}", "prompt_len": L, "greedy_steps": a.steps})
    save_file(tensors, os.path.join(d, "golden.safetensors"), metadata={"about": "peft float32 reference"})
    json.dump({"model": summary["base"] + "+" + spec["name"], "cases": cases}, open(os.path.join(d, "golden.json"), "w"),
              indent=1)
    summary["adapters"].append({**{k: spec[k] for k in ("name", "r", "alpha", "rslora", "dtype", "targets")},
                                "cases": cases})
    print("wrote", d, flush=True)
json.dump(summary, open(os.path.join(a.out, "golden.json"), "w"), indent=1)
