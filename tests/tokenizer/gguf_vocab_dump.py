#!/usr/bin/env python3
"""Dumps a GGUF file's tokenizer.ggml.* fields to JSON with the PyPI `gguf` reader, so tests can
build a GgufVocab independently of lancet's own GGUF reader.

usage: gguf_vocab_dump.py MODEL.gguf OUT.json
"""
import json
import sys

import gguf


def main():
    reader = gguf.GGUFReader(sys.argv[1])
    out = {}
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.ggml."):
            continue
        out[key[len("tokenizer.ggml."):]] = field.contents()
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
