#!/usr/bin/env python3
"""Greedy continuations from llama.cpp (through the PyPI package llama-cpp-python, which builds
llama.cpp from source) for chat prompts on a GGUF model: the reference that
tests/model/llamacpp_parity_test.cc compares lancet against.

usage: llamacpp_reference.py MODEL.gguf PROMPTS.json OUT.json
PROMPTS.json: [{"name": ..., "prompt_ids": [...]}]; the ids come from `lancet chat-template --ids`
so both engines see the same tokens. Writes the prompts with llama.cpp's first 32 greedy tokens.
"""
import json
import sys

from llama_cpp import Llama, __version__


def main():
    model, prompts_path, out_path = sys.argv[1:4]
    # F32 KV cache: the precision lancet keeps on the CPU (llama.cpp defaults to F16).
    llm = Llama(model_path=model, n_ctx=4096, n_threads=2, verbose=False, type_k=0, type_v=0)
    prompts = json.load(open(prompts_path))
    for p in prompts:
        out = []
        for tok in llm.generate(p["prompt_ids"], temp=0.0, top_k=1, reset=True):
            out.append(tok)
            if tok == llm.token_eos() or len(out) == 32:
                break
        p["llamacpp_greedy"] = out
        p["text"] = llm.detokenize(out).decode(errors="replace")
    json.dump({"generator": "llama-cpp-python " + __version__, "model": model.split("/")[-1],
               "cases": prompts}, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
