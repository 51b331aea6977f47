#!/usr/bin/env python3
"""Encode throughput: lancet's tokenizer vs tiktoken and HF tokenizers, single thread and batch.

Generates a deterministic mixed English / Chinese / code corpus (a few MB), then times
  * lancet:     bench/tokenizer/encode_bench (C++ driver; build it first, see README.md)
  * tiktoken:   an Encoding built from tokenizer.json's ranks + the Llama 3 regex (no download)
  * tokenizers: Tokenizer.from_file(tokenizer.json)
and checks that all three produce the same ids. Prints a table and a JSON line.

usage: bench_tokenizer.py --driver build-tok/encode_bench [--tokenizer PATH] [--mb 4]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

ENGLISH = ("the of and to in is that for it as was with be by on not he this are or his from at "
           "which but have an they you were her she there been one all we their has would when if "
           "model token cache attention memory throughput latency kernel batch request server "
           "quantization precision context window scheduler prefill decode inference engine GPU "
           "Hello World Llama tokenizer benchmark performance evaluation don't it's we'll I'm").split()
CODE = [
    "def {f}(x, y):\n    return x * {n} + y  # {w}\n",
    "for (int i = 0; i < {n}; ++i) {{ sum += a[i] * b[i]; }}\n",
    "if ({w} != nullptr && {w}->size() > {n}) {{\n    throw std::runtime_error(\"{w}\");\n}}\n",
    "const {f} = async ({w}) => {{ await fetch(`/api/{w}?n={n}`); }};\n",
    "{{\"{w}\": [{n}, {n}.5, true, null], \"id\": \"{f}_{n}\"}}\n",
    "    self.{w} = nn.Linear({n}, {n})\n",
]


def make_corpus(mb, seed=1234):
    rng = random.Random(seed)
    out, size = [], 0
    target = int(mb * 1e6)
    while size < target:
        kind = rng.random()
        if kind < 0.45:  # English sentence
            words = [rng.choice(ENGLISH) for _ in range(rng.randint(5, 25))]
            words[0] = words[0].capitalize()
            s = " ".join(words) + rng.choice([".", ",", "!", "?", ";"]) + rng.choice([" ", "\n", "  "])
        elif kind < 0.75:  # Chinese: common CJK characters, punctuation, some numbers
            chars = [chr(rng.randint(0x4E00, 0x62FF)) for _ in range(rng.randint(5, 40))]
            if rng.random() < 0.3:
                chars.insert(rng.randrange(len(chars)), str(rng.randint(1, 99999)))
            s = "".join(chars) + rng.choice(["。", "，", "！", "\n"])
        else:  # code
            s = rng.choice(CODE).format(f=rng.choice(ENGLISH) + "_fn", w=rng.choice(ENGLISH),
                                         n=rng.randint(0, 4096))
        out.append(s)
        size += len(s.encode("utf-8"))
    return "".join(out)


def tiktoken_encoding(tok_json):
    import tiktoken
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_of = {chr(c): b for b, c in zip(bs, cs)}
    d = json.load(open(tok_json))
    ranks = {bytes(byte_of[ch] for ch in s): i for s, i in d["model"]["vocab"].items()}
    specials = {t["content"]: t["id"] for t in d["added_tokens"]}
    return tiktoken.Encoding(name="llama3-local", pat_str=LLAMA3_PATTERN,
                             mergeable_ranks=ranks, special_tokens=specials)


def best_of(fn, repeat):
    best, result = 1e30, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True, help="path to the encode_bench binary")
    ap.add_argument("--tokenizer", default=os.path.join(
        here, "..", "..", "..", "shared", "models", "llama3-tokenizer", "tokenizer.json"))
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--hf-batch-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    text = make_corpus(args.mb)
    nbytes = len(text.encode("utf-8"))
    lines = [l + "\n" for l in text.split("\n")]
    if text.endswith("\n"):
        lines = lines[:-1]
    if args.hf_batch_worker:
        from tokenizers import Tokenizer
        hf = Tokenizer.from_file(args.tokenizer)
        s, _ = best_of(lambda: hf.encode_batch(lines, add_special_tokens=False), args.repeat)
        print(nbytes / s / 1e6)
        return 0
    threads = [int(t) for t in args.threads.split(",")]
    results = {}

    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        ids_path = os.path.join(tmp, "ids.txt")
        out = subprocess.run([args.driver, args.tokenizer, corpus, "--repeat", str(args.repeat),
                              "--threads", args.threads, "--dump-ids", ids_path],
                             check=True, capture_output=True, text=True).stdout
        lancet = json.loads(out.strip().splitlines()[-1])
        lancet_ids = [int(x) for x in open(ids_path).read().split()]
    results["lancet"] = {"single": lancet["single_mb_s"],
                         **{f"batch{t}": lancet["batch_mb_s"][str(t)] for t in threads}}

    enc = tiktoken_encoding(args.tokenizer)
    s, tk_ids = best_of(lambda: enc.encode_ordinary(text), args.repeat)
    results["tiktoken"] = {"single": nbytes / s / 1e6}
    for t in threads:
        s, _ = best_of(lambda: enc.encode_ordinary_batch(lines, num_threads=t), args.repeat)
        results["tiktoken"][f"batch{t}"] = nbytes / s / 1e6

    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(args.tokenizer)
    s, hf_enc = best_of(lambda: hf.encode(text, add_special_tokens=False), args.repeat)
    hf_ids = hf_enc.ids
    results["tokenizers"] = {"single": nbytes / s / 1e6}
    for t in threads:
        # rayon sizes its pool once per process, so each thread count runs in a fresh one.
        env = dict(os.environ, RAYON_NUM_THREADS=str(t), TOKENIZERS_PARALLELISM="true")
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--hf-batch-worker",
                              "--tokenizer", args.tokenizer, "--mb", str(args.mb),
                              "--repeat", str(args.repeat), "--driver", "-"],
                             env=env, check=True, capture_output=True, text=True).stdout
        results["tokenizers"][f"batch{t}"] = float(out.strip().splitlines()[-1])

    same_hf = lancet_ids == hf_ids
    same_tk = lancet_ids == tk_ids
    print(f"corpus: {nbytes/1e6:.2f} MB, {len(lancet_ids)} tokens, {len(lines)} lines; "
          f"ids equal HF tokenizers: {same_hf}, equal tiktoken: {same_tk}")
    cols = ["single"] + [f"batch{t}" for t in threads]
    print(f"{'MB/s':<12}" + "".join(f"{c:>10}" for c in cols))
    for name, r in results.items():
        print(f"{name:<12}" + "".join(f"{r[c]:>10.2f}" for c in cols))
    print(json.dumps({"bytes": nbytes, "tokens": len(lancet_ids), "ids_equal_hf": same_hf,
                      "ids_equal_tiktoken": same_tk, "mb_s": results}))
    return 0 if same_hf else 1


if __name__ == "__main__":
    sys.exit(main())
