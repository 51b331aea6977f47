#!/usr/bin/env python3
"""Prints the long-context table from `lancet bench latency --json` results (one file per
context length, as bench/long_context/run.sh writes them):

  context | weights | KV / seq | weights + KV | TTFT | decode tok/s | max concurrent seqs

`--model` (a config.json, an HF directory or anything else) is only used to mark lengths past
the model's trained context (max_position_embeddings), read from a config.json when there is
one. `--markdown` prints a Markdown table (for docs/BENCHMARKS.md).
"""
import argparse
import json
import os
import sys

GIB = float(1 << 30)


def trained_length(model):
    path = model
    if path and os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if not path or not path.endswith(".json") or not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            return int(json.load(f).get("max_position_embeddings") or 0) or None
    except (OSError, ValueError):
        return None


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            text = f.read().strip()
        if not text:
            rows.append({"input_len": 0, "error": "empty result file " + p})
            continue
        # The JSON object is the last line (warnings may precede it).
        rows.append(json.loads(text.splitlines()[-1]))
    rows.sort(key=lambda r: r.get("input_len", 0))
    return rows


def fmt_row(r, trained):
    ctx = r.get("input_len", 0)
    label = str(ctx)
    if trained and ctx + r.get("output_len", 0) > trained:
        label += "*"
    if "error" in r:
        return [label, "error: " + r["error"]]
    kv = r.get("kv_cache", {})
    w = r.get("weight_bytes", 0) / GIB
    kv_seq = kv.get("bytes_per_seq", 0) / GIB
    return [
        label,
        "%.2f" % w,
        "%.2f" % kv_seq,
        "%.2f" % (w + kv_seq),
        "%.3f" % r.get("ttft_s_median", 0.0),
        "%.1f" % r.get("decode_tok_per_s", 0.0),
        str(r.get("max_concurrent_seqs", 0)),
        "%s, %.1f GiB" % (kv.get("dtype", "?"), kv.get("bytes", 0) / GIB),
    ]


HEADER = ["context", "weights GiB", "KV/seq GiB", "total GiB", "TTFT s", "decode tok/s", "max seqs", "KV cache"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="bench latency JSON files")
    ap.add_argument("--model", default="", help="model path, to mark lengths past the trained context")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rows = load(args.results)
    trained = trained_length(args.model)
    table = [fmt_row(r, trained) for r in rows]
    first = next((r for r in rows if "error" not in r), None)
    if first:
        print("model %s, backend %s" % (args.model or "?", first.get("backend", "?")))
    if args.markdown:
        print("| " + " | ".join(HEADER) + " |")
        print("|" + "---|" * len(HEADER))
        for t in table:
            cells = t if len(t) == len(HEADER) else t + [""] * (len(HEADER) - len(t))
            print("| " + " | ".join(cells) + " |")
    else:
        widths = [max(len(h), 8) for h in HEADER]
        print("  ".join(h.rjust(w) for h, w in zip(HEADER, widths)))
        for t in table:
            if len(t) == 2:
                print(t[0].rjust(widths[0]) + "  " + t[1])
            else:
                print("  ".join(c.rjust(w) for c, w in zip(t, widths)))
    if trained and any(r.get("input_len", 0) + r.get("output_len", 0) > trained for r in rows):
        print("* past the model's trained context (%d tokens)" % trained)
    print("KV/seq: one sequence of context + output tokens; max seqs: such sequences the KV cache holds at once")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
