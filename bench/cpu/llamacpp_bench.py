"""llama.cpp's side of bench/cpu/run_bench.sh, through llama-cpp-python (which builds llama.cpp
from source): pp = one 512-token batch, tg = 128 greedy tokens after a 16-token prompt.
usage: llamacpp_bench.py MODEL [PP=512] [TG=128] [THREADS=2] [REPS=3]; prints one JSON line."""
import json
import random
import sys
import time

from llama_cpp import Llama


def main():
    model = sys.argv[1]
    given = [int(a) for a in sys.argv[2:6]]
    pp, tg, threads, reps = given + [512, 128, 2, 3][len(given):]
    llm = Llama(model_path=model, n_ctx=2048, n_threads=threads, n_batch=512, verbose=False)
    random.seed(0)
    ids = [random.randrange(100, 40000) for _ in range(pp)]
    llm.eval(ids[:8])
    best_pp = best_tg = 1e30
    for _ in range(reps):
        llm.reset()
        t = time.perf_counter()
        llm.eval(ids)
        best_pp = min(best_pp, time.perf_counter() - t)
        llm.reset()
        llm.eval(ids[:16])
        t = time.perf_counter()
        n = 0
        for _tok in llm.generate(ids[:16], temp=0.0, reset=False):
            n += 1
            if n == tg:
                break
        best_tg = min(best_tg, time.perf_counter() - t)
    print(json.dumps({"engine": "llama.cpp", "pp": pp, "pp_tok_s": round(pp / best_pp, 1), "tg": tg,
                      "tg_tok_s": round(tg / best_tg, 1)}))


if __name__ == "__main__":
    main()
