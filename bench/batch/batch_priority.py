"""Interactive TTFT with and without a Batch API job running on the same `lancet serve`.

Phase 1 (baseline): one interactive client sends --num-interactive streaming chat requests,
one after another with a short pause, and records each time to first token (TTFT). Phase 2:
a batch of --num-batch chat requests goes in through the official openai client
(files.create, batches.create); while it is in progress the same interactive client sends
requests again (different prompts, so the prefix cache does not favour either phase). The
batch must then complete with every custom_id present and answered 200.

Prints one JSON object: TTFT p50/p99 of both phases, their ratio, how many interactive requests
ran while the batch was in progress, the batch's wall time and request counts. Exit status 1
when a result is missing or failed, when fewer than --min-overlap interactive requests ran
during the batch, or when the p99 ratio is above --max-ratio (if given).

  python bench/batch/batch_priority.py --base-url http://127.0.0.1:8000 [--api-key KEY] \
      --num-batch 200 --num-interactive 40
Used by tests/server/server_batch_test.cc (fewer requests) and bench/batch/run_batch_priority.sh.
"""
import argparse
import io
import json
import random
import sys
import time

import openai

TOPICS = ["rivers", "volcanoes", "bread", "chess", "owls", "tides", "glass", "jazz", "maps", "bees", "clouds",
          "copper", "kites", "moss", "salt", "trains", "ink", "wolves", "coral", "lamps"]


def percentile(xs, q):
    s = sorted(xs)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, int(round(q / 100.0 * (len(s) - 1)))))
    return s[k]


def interactive_ttft(c, model, prompt, max_tokens):
    t0 = time.perf_counter()
    ttft = None
    stream = c.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                       max_tokens=max_tokens, temperature=0, stream=True)
    for ch in stream:
        if ttft is None and ch.choices and (ch.choices[0].delta.content or ch.choices[0].finish_reason):
            ttft = time.perf_counter() - t0
    return ttft


def batch_input(n, max_tokens, seed):
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        topic = rng.choice(TOPICS)
        lines.append(json.dumps({
            "custom_id": "req-%d" % i, "method": "POST", "url": "/v1/chat/completions",
            "body": {"messages": [{"role": "user", "content": "Write one sentence about %s, number %d." % (topic, i)}],
                     "max_tokens": max_tokens, "temperature": 0}}))
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--api-key", default="none")
    p.add_argument("--num-batch", type=int, default=200)
    p.add_argument("--num-interactive", type=int, default=40)
    p.add_argument("--batch-max-tokens", type=int, default=32)
    p.add_argument("--interactive-max-tokens", type=int, default=8)
    p.add_argument("--pause", type=float, default=0.05, help="seconds between interactive requests")
    p.add_argument("--min-overlap", type=int, default=10,
                   help="interactive requests that must run while the batch is in progress")
    p.add_argument("--max-ratio", type=float, default=0, help="fail when p99 with / without the batch exceeds it")
    p.add_argument("--timeout", type=float, default=900, help="seconds the batch may take")
    a = p.parse_args()
    c = openai.OpenAI(base_url=a.base_url + "/v1", api_key=a.api_key, max_retries=0, timeout=300)
    model = c.models.list().data[0].id
    rng = random.Random(7)

    def prompt(phase, i):
        return "In phase %s, question %d: what do you know about %s?" % (phase, i, rng.choice(TOPICS))

    interactive_ttft(c, model, "Warm up.", 2)
    base = []
    for i in range(a.num_interactive):
        base.append(interactive_ttft(c, model, prompt("one", i), a.interactive_max_tokens))
        time.sleep(a.pause)

    data = batch_input(a.num_batch, a.batch_max_tokens, seed=11)
    f = c.files.create(file=("batch.jsonl", io.BytesIO(data.encode())), purpose="batch")
    t0 = time.perf_counter()
    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    while b.status in ("validating",):
        time.sleep(0.05)
        b = c.batches.retrieve(b.id)
    during = []
    progress_at_send = []
    i = 0
    while i < a.num_interactive and b.status == "in_progress":
        progress_at_send.append(b.request_counts.completed + b.request_counts.failed)
        during.append(interactive_ttft(c, model, prompt("two", i), a.interactive_max_tokens))
        i += 1
        time.sleep(a.pause)
        b = c.batches.retrieve(b.id)
    overlap = len(during)
    while b.status not in ("completed", "failed", "cancelled", "expired"):
        if time.perf_counter() - t0 > a.timeout:
            break
        time.sleep(0.2)
        b = c.batches.retrieve(b.id)
    batch_s = time.perf_counter() - t0

    results = {}
    if b.output_file_id:
        for line in c.files.content(b.output_file_id).text.splitlines():
            if line.strip():
                r = json.loads(line)
                results[r["custom_id"]] = r
    missing = [k for k in ("req-%d" % j for j in range(a.num_batch))
               if k not in results or results[k]["response"]["status_code"] != 200
               or not results[k]["response"]["body"]["choices"][0]["message"]["content"]]
    out = {
        "num_batch": a.num_batch, "num_interactive": a.num_interactive,
        "batch_status": b.status, "batch_seconds": round(batch_s, 2),
        "request_counts": {"total": b.request_counts.total, "completed": b.request_counts.completed,
                           "failed": b.request_counts.failed},
        "results_present": a.num_batch - len(missing),
        "interactive_during_batch": overlap,
        "ttft_p50_ms_without": round(1000 * percentile(base, 50), 1),
        "ttft_p99_ms_without": round(1000 * percentile(base, 99), 1),
        "ttft_p50_ms_with": round(1000 * percentile(during, 50), 1),
        "ttft_p99_ms_with": round(1000 * percentile(during, 99), 1),
    }
    out["p99_ratio"] = round(out["ttft_p99_ms_with"] / out["ttft_p99_ms_without"], 3) if during else None
    print(json.dumps(out), flush=True)
    ok = True
    if b.status != "completed" or missing:
        print("FAIL: batch %s, %d results missing or failed: %s" % (b.status, len(missing), missing[:5]))
        ok = False
    if overlap < a.min_overlap:
        print("FAIL: only %d interactive requests ran during the batch" % overlap)
        ok = False
    if a.max_ratio > 0 and during and out["p99_ratio"] > a.max_ratio:
        print("FAIL: TTFT p99 ratio %.2f > %.2f" % (out["p99_ratio"], a.max_ratio))
        ok = False
    print("PASS batch_priority" if ok else "FAILED batch_priority", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
