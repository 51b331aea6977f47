"""Three `lancet serve` replicas behind a real HAProxy (deploy/haproxy.cfg) and scraped by a real
Prometheus (deploy/prometheus/), driven by the official openai client. Run by
tests/deploy/replica_set_test.cc:

  python replica_set_check.py --lancet build/lancet --model MODEL.gguf --source-dir . --work-dir TMP

1. Routing: a prompt over the size threshold lands on the long pool (replica r3), a short one
   on the short pool (r1, r2); the X-Lancet-Prompt-Tokens header overrides the size; the
   replicas' own request counters agree with the gateway's X-Lancet-Server header.
2. Rate limit: a client past its request rate gets 429 in the OpenAI envelope; another client
   is not affected.
3. Load: 300 mixed requests (chat and completions, streamed and not, 1 in 13 long) at
   concurrency 32 while r1 is drained (SIGTERM) and restarted and r3 is killed (SIGKILL, aimed
   at a moment when a stream runs on it). No
   client sees an error except streams already running on r3 when it was killed (retried
   here); every answer is complete (finish reason, usage) and equal to every other answer to
   the same greedy request; every answer came from the pool its length belongs to.
4. Prometheus scraped all three replicas and the gateway; every recording rule returns a
   finite value (the shared-KV-tier hit ratio only once replicas export its counters), the
   cost rules agree with the formula and the configured $/GPU-hour.
Prints one line per check; exits non-zero on the first failure.
"""
import argparse
import concurrent.futures
import json
import math
import os
import signal
import threading
import time
import urllib.error
import urllib.request

import openai
import yaml

from deploy_processes import Gateway, Prometheus, Replica, http_get, log_tail, wait_for

MODEL_NAME = "smol"
LONG_PROMPT_BYTES = 1024       # the gateway's body-size threshold in this test
LONG_PROMPT_TOKENS = 1000      # the header threshold
RATE_LIMIT = 400               # requests per 10 s per client: above the whole load's count
NUM_REQUESTS = 300
CONCURRENCY = 32
GPU_HOUR_COST = 4.00           # deploy/prometheus/lancet.rules.yml's constant
GPUS_PER_REPLICA = 1

SYSTEM = "You are a concise assistant. Answer in one short sentence."
QUESTIONS = [
    "What is the capital of France?", "Name a primary color.", "What is two plus two?",
    "What do bees make?", "Which planet is known as the red planet?", "What is the boiling point of water?",
    "Name a fruit that is yellow.", "What language is spoken in Spain?", "How many legs does a spider have?",
    "What is the opposite of hot?", "Which animal barks?", "What color is the sky on a clear day?",
]
# About 1,300 bytes (roughly 300 tokens): over the test's size threshold. The shared document
# is what long-context requests look like (a document, then a question), and it makes the
# long pool's prefix cache hit.
LONG_DOC = " ".join(
    f"Section {i}: the harbour town of Velmar keeps a ledger of ships, and on day {i} the ledger records "
    f"{3 * i + 7} crates of salt, {i % 5 + 2} barrels of oil and one lantern repaired by the night keeper."
    for i in range(1, 9))
LONG_QUESTIONS = ["How many crates of salt are recorded in section 3?", "Who repairs the lantern?",
                  "What does the ledger of Velmar record?"]

ARGS = None
client = None


def check(cond, what):
    if not cond:
        print("FAIL:", what, flush=True)
        raise SystemExit(1)
    print("ok:", what, flush=True)


def post(url, body, headers=None, timeout=120):
    """Raw POST through the gateway: (status, headers with lower-case names, parsed body)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, json.loads(e.read() or b"null")


class Spec:
    """One request of the mix: route, streaming, prompt length class."""

    def __init__(self, i):
        self.index = i
        self.route = "chat" if i % 4 < 2 else "completion"
        self.stream = i % 2 == 0
        # 1 in 13 long (13 and 4 coprime: long ones come in all four kinds); each question comes
        # in all four kinds (i % 4), so streamed and non-streamed answers are compared.
        self.long = i % 13 == 3
        q = LONG_QUESTIONS[(i // 13) % len(LONG_QUESTIONS)] if self.long else QUESTIONS[(i // 4) % len(QUESTIONS)]
        self.prompt = (LONG_DOC + "\n\n" + q) if self.long else q
        self.max_tokens = 4 if self.long else 6
        self.extra_body = None

    def key(self):
        return (self.route, self.prompt, self.max_tokens)

    def kwargs(self):
        kw = {"model": MODEL_NAME, "max_tokens": self.max_tokens, "temperature": 0}
        if self.route == "chat":
            kw["messages"] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": self.prompt}]
        else:
            kw["prompt"] = f"{SYSTEM}\nQuestion: {self.prompt}\nAnswer:"
        if self.stream:
            kw["stream"] = True
            kw["stream_options"] = {"include_usage": True}
        if self.extra_body:
            kw["extra_body"] = self.extra_body
        return kw


def send(spec, load=None):
    """One attempt: {server, pool, text, finish, tokens, error, during_stream}. Streams running on
    the replica the test will kill are counted in load.live_streams while they last."""
    api = client.chat.completions if spec.route == "chat" else client.completions
    out = {"server": None, "pool": None, "text": "", "finish": None, "tokens": None, "error": None,
           "during_stream": False}
    try:
        raw = api.with_raw_response.create(**spec.kwargs())
    except Exception as e:  # no response at all: the gateway should have retried it
        out["error"] = f"{type(e).__name__}: {e}"
        return out
    out["server"] = raw.headers.get("x-lancet-server")
    out["pool"] = raw.headers.get("x-lancet-pool")
    if not spec.stream:
        try:
            parsed = raw.parse()
            choice = parsed.choices[0]
            out["text"] = choice.message.content if spec.route == "chat" else choice.text
            out["finish"] = choice.finish_reason
            out["tokens"] = parsed.usage.completion_tokens
        except Exception as e:
            out["error"] = f"{type(e).__name__}: {e}"
        return out
    parsed = raw.parse()
    out["during_stream"] = True
    parts = []
    watched = load is not None and out["server"] == load.killed_name
    if watched:
        with load.lock:
            load.live_streams += 1
    try:
        for chunk in parsed:
            if chunk.usage is not None:
                out["tokens"] = chunk.usage.completion_tokens
            for choice in chunk.choices:
                piece = choice.delta.content if spec.route == "chat" else choice.text
                parts.append(piece or "")
                if choice.finish_reason:
                    out["finish"] = choice.finish_reason
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        if watched:
            with load.lock:
                load.live_streams -= 1
    out["text"] = "".join(parts)
    if out["error"] is None and (out["finish"] is None or out["tokens"] is None):
        out["error"] = "stream ended without a finish reason or usage"
    return out


class Load:
    def __init__(self, killed_name):
        self.done = 0
        self.lock = threading.Lock()
        self.killed_name = killed_name
        self.killed = threading.Event()
        self.failures = []
        self.cut_streams = []
        self.results = {}
        self.live_streams = 0

    def run_one(self, spec):
        for attempt in range(3):
            r = send(spec, self)
            if r["error"] and r["during_stream"] and r["server"] == self.killed_name and self.killed.is_set():
                with self.lock:
                    self.cut_streams.append((spec.index, r["error"]))
                continue  # a stream the kill cut: the client's to retry
            break
        with self.lock:
            self.done += 1
            if r["error"]:
                self.failures.append(f"request {spec.index} ({spec.route}, stream={spec.stream}, long={spec.long}, "
                                     f"server {r['server']}): {r['error']}")
            self.results[spec.index] = r


def wait_in_flight(replica, load, timeout_s):
    """Waits until the replica is serving a completion (so the signal hits live requests)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = replica.metrics() or {}
        if m.get("lancet:http_requests_in_flight", 0) >= 1:
            return True
        time.sleep(0.05)
    return False


def chaos_drain(r1, gateway, load, report):
    """At request 60: SIGTERM r1 with requests in flight, check its clean exit, restart it on the
    same port, wait for HAProxy to take it back."""
    wait_for("60 requests done", lambda: load.done >= 60, 300, 0.05)
    report["drain_in_flight"] = wait_in_flight(r1, load, 60)
    report["drain_at"] = load.done
    r1.signal(signal.SIGTERM)
    report["drain_rc"] = r1.wait_exit(60)
    r1.start()
    r1.wait_healthy(120)
    wait_for("HAProxy marks r1 up again", lambda: gateway.server_states().get(("lancet_short", "r1")) == "UP", 60)
    report["rejoined_at"] = load.done


def chaos_kill(r3, load, report):
    """At request 150: SIGKILL r3 (the long pool's replica) while it serves requests. The load's
    own requests to r3 are a few tokens long and may all be over by then on a fast machine, so a
    stream of our own (a long prompt, 512 tokens) is started on r3 first and the kill lands while
    it runs: it must be cut, as the client sees a replica die mid-stream."""
    wait_for("150 requests done", lambda: load.done >= 150, 300, 0.05)
    probe = Spec(3)  # a long prompt: the long pool, r3
    probe.index, probe.stream, probe.max_tokens = -1, True, 512
    probe.extra_body = {"ignore_eos": True}
    probe_result = {}
    runner = threading.Thread(target=lambda: probe_result.update(send(probe, load)))
    runner.start()
    deadline = time.monotonic() + 60
    while load.live_streams == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    report["stream_at_kill"] = load.live_streams > 0
    report["kill_in_flight"] = wait_in_flight(r3, load, 60)
    report["kill_at"] = load.done
    load.killed.set()
    r3.signal(signal.SIGKILL)
    r3.wait_exit(10)
    runner.join(60)
    report["probe"] = probe_result


def check_routing(gateway, replicas):
    r1, r2, r3 = replicas
    before = {r.name: r.metrics()["vllm:request_success_total"] for r in replicas}
    url = gateway.url + "/v1/chat/completions"
    auth = {"Authorization": "Bearer routing-client"}

    def chat(content, headers=None):
        body = {"model": MODEL_NAME, "max_tokens": 4, "temperature": 0,
                "messages": [{"role": "user", "content": content}]}
        return post(url, body, {**auth, **(headers or {})}), len(json.dumps(body))

    (status, h, body), size = chat(LONG_DOC + "\n\nWho repairs the lantern?")
    check(status == 200 and size > LONG_PROMPT_BYTES and h.get("x-lancet-pool") == "long"
          and h.get("x-lancet-server") == "r3",
          f"a {size}-byte request goes to the long pool's replica (pool {h.get('x-lancet-pool')}, "
          f"server {h.get('x-lancet-server')})")
    (status, h, body), size = chat("What is the capital of France?")
    check(status == 200 and size < LONG_PROMPT_BYTES and h.get("x-lancet-pool") == "short"
          and h.get("x-lancet-server") in ("r1", "r2"),
          f"a {size}-byte request goes to the short pool (server {h.get('x-lancet-server')})")
    (status, h, _), _ = chat("Summarize the attached file.", {"X-Lancet-Prompt-Tokens": str(LONG_PROMPT_TOKENS + 1)})
    check(status == 200 and h.get("x-lancet-server") == "r3",
          "X-Lancet-Prompt-Tokens over the threshold sends a small body to the long pool")
    (status, h, _), _ = chat(LONG_DOC + "\n\nWho repairs the lantern?", {"X-Lancet-Prompt-Tokens": "100"})
    check(status == 200 and h.get("x-lancet-server") in ("r1", "r2"),
          "X-Lancet-Prompt-Tokens under the threshold keeps a large body in the short pool")
    # A replica counts a request when its session ends, just after the answer went out.
    delta = {}

    def counted():
        after = {r.name: r.metrics()["vllm:request_success_total"] for r in replicas}
        delta.update({n: after[n] - before[n] for n in after})
        return sum(delta.values()) >= 4
    wait_for("the replicas to count the 4 requests", counted, 10, 0.05)
    check(delta["r3"] == 2 and delta["r1"] + delta["r2"] == 2,
          f"the replicas' request counters agree with the gateway (finished per replica {delta})")


def check_rate_limit(gateway):
    burst = openai.OpenAI(base_url=gateway.url + "/v1", api_key="burst-client", max_retries=0)
    other = openai.OpenAI(base_url=gateway.url + "/v1", api_key="other-client", max_retries=0)
    statuses = []
    limited = None
    for _ in range(RATE_LIMIT + 100):
        try:
            burst.models.list()
            statuses.append(200)
        except openai.RateLimitError as e:
            statuses.append(429)
            limited = e
            break
    # The key is new, so HAProxy's sliding estimate (this period plus a share of the last) never
    # exceeds the real count: the first RATE_LIMIT requests all pass; the limit bites within
    # the next 100.
    check(statuses[:RATE_LIMIT] == [200] * RATE_LIMIT and statuses[-1] == 429,
          f"a client past {RATE_LIMIT} requests / 10 s gets 429 (after {len(statuses) - 1} requests)")
    err = limited.body if isinstance(limited.body, dict) else {}
    check(err.get("code") == "rate_limit_exceeded" and err.get("type") == "rate_limit_error",
          f"the 429 carries the OpenAI error envelope ({err})")
    check(len(other.models.list().data) == 1, "another client is not limited meanwhile")


def prometheus_sees_all_up(prom, replicas):
    try:
        up = prom.query('up{job="lancet"}')["result"]
    except Exception:  # not answering yet
        return False
    return {s["metric"]["instance"]: float(s["value"][1]) for s in up} == {r.address: 1.0 for r in replicas}


def check_prometheus(prom, replicas, gateway, rules_path, exports_offload):
    time.sleep(3)  # one more scrape (1 s) and rule evaluation (1 s) after the last request
    up = prom.query('max_over_time(up{job="lancet"}[10m])')["result"]
    seen = {s["metric"]["instance"]: float(s["value"][1]) for s in up}
    check(seen == {r.address: 1.0 for r in replicas}, f"Prometheus scraped all three replicas ({seen})")
    gw = prom.query('up{job="haproxy"}')["result"]
    check(len(gw) == 1 and float(gw[0]["value"][1]) == 1.0, "Prometheus scrapes the gateway's exporter")

    with open(rules_path) as f:
        records = [r["record"] for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
    loaded = prom.api("/api/v1/rules")["groups"]
    rules = {r["name"]: r for g in loaded for r in g["rules"]}
    check(sorted(rules) == sorted(records), f"Prometheus loaded all {len(records)} recording rules")
    bad = {n: r.get("lastError") for n, r in rules.items() if r["health"] != "ok"}
    check(not bad, f"every rule evaluates without error {bad}")

    values = {}
    for name in records:
        result = prom.query(name)["result"]
        if name == "job:lancet_kv_offload_hit_ratio:rate5m" and not exports_offload:
            check(result == [], f"{name}: no data (the replicas do not export lancet:kv_offload_* yet)")
            continue
        check(len(result) == 1, f"{name} returns a value" + ("" if len(result) == 1 else f" ({result})"))
        v = float(result[0]["value"][1])
        # 0/0 is NaN when the shared KV tier is configured off but its counters are exported.
        if not (name == "job:lancet_kv_offload_hit_ratio:rate5m" and math.isnan(v)):
            check(math.isfinite(v) and v >= 0, f"{name} = {v:.6g}")
        values[name] = v

    check(values["job:lancet_gpus:count"] == 3 * GPUS_PER_REPLICA, "GPUs counted from the three scrape targets")
    check(abs(values["job:lancet_cost_dollars_per_hour"] - 3 * GPUS_PER_REPLICA * GPU_HOUR_COST) < 1e-9,
          f"cost per hour = 3 replicas x ${GPU_HOUR_COST}/GPU-hour")
    check(values["job:lancet_requests_ok:rate1m"] > 0 and
          values["job:lancet_requests:rate1m"] >= values["job:lancet_requests_ok:rate1m"], "request rates")
    for q in ("ttft", "itl"):
        p = [values[f"job:lancet_{q}_seconds:p{n}_1m"] for n in (50, 90, 99)]
        check(0 < p[0] <= p[1] <= p[2], f"{q} percentiles ordered {p}")
    check(0 <= values["job:lancet_kv_cache_usage:avg"] <= values["job:lancet_kv_cache_usage:max"] <= 1, "KV usage")
    check(0 < values["job:lancet_prefix_cache_hit_ratio:rate5m"] <= 1,
          "the shared system prompt and document hit the prefix cache")
    check_dashboard(prom, exports_offload)
    # The recorded cost per 1000 requests against the formula evaluated on the raw counters at
    # the rule's own evaluation time. A scrape that lands after the rule ran (or the staleness
    # marker of the killed replica's series) can still change the raw rate at that time, so
    # the newest sample is compared up to five times, one rule interval apart: a wrong formula
    # misses every time.
    for attempt in range(5):
        sample = prom.query("job:lancet_cost_dollars_per_1k_requests:rate5m[5s]")["result"][0]["values"][-1]
        at, recorded = float(sample[0]), float(sample[1])
        rate = float(prom.query('sum(rate(vllm:request_success_total{finished_reason=~"stop|length"}[5m]))',
                                at=at)["result"][0]["value"][1])
        expected = 3 * GPUS_PER_REPLICA * GPU_HOUR_COST / 3600 * 1000 / rate
        if abs(recorded - expected) <= 0.02 * expected or attempt == 4:
            break
        print(f"note: cost per 1000 requests ${recorded:.4f} vs ${expected:.4f} at {at}: asking again", flush=True)
        time.sleep(1.5)
    check(abs(recorded - expected) <= 0.02 * expected,
          f"cost per 1000 requests ${recorded:.4f} = GPUs x $/h / 3600 x 1000 / {rate:.3f} req/s (${expected:.4f})")


def check_dashboard(prom, exports_offload):
    """Every query of deploy/grafana/lancet.json runs and finds data (the shared KV tier's only
    once replicas export its counters)."""
    with open(os.path.join(ARGS.source_dir, "deploy", "grafana", "lancet.json")) as f:
        dashboard = json.load(f)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    empty = []
    for expr in exprs:
        result = prom.query(expr.replace("$job", "lancet"))["result"]
        if not result and not ("kv_offload" in expr and not exports_offload):
            empty.append(expr)
    check(exprs and not empty, f"all {len(exprs)} dashboard queries return data {empty}")


def run_load(gateway, replicas, report):
    r1, _, r3 = replicas
    load = Load(killed_name="r3")
    chaos_errors = []

    def guarded(step, *args):
        try:
            step(*args)
        except Exception as e:
            chaos_errors.append(f"{step.__name__}: {e}")
    runners = [threading.Thread(target=guarded, args=(chaos_drain, r1, gateway, load, report)),
               threading.Thread(target=guarded, args=(chaos_kill, r3, load, report))]
    for t in runners:
        t.start()
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
        list(pool.map(load.run_one, [Spec(i) for i in range(NUM_REQUESTS)]))
    report["load_s"] = time.monotonic() - t0
    for t in runners:
        t.join(timeout=180)
    check(not chaos_errors, f"drain, restart and kill went as planned {chaos_errors}")
    return load


def check_load(load, report):
    print(f"load: {NUM_REQUESTS} requests in {report['load_s']:.1f} s; r1 drained at request {report['drain_at']} "
          f"(exit {report['drain_rc']}), back at {report['rejoined_at']}; r3 killed at {report['kill_at']}; "
          f"{len(load.cut_streams)} stream(s) cut by the kill and retried "
          f"({'a' if report['stream_at_kill'] else 'no'} stream was running on r3 at the kill)", flush=True)
    check(not load.failures, f"no client error besides streams cut by the kill {load.failures[:5]}")
    check(len(load.results) == NUM_REQUESTS, "every request answered")
    check(report["drain_in_flight"] and report["drain_rc"] == 0,
          "r1 had requests in flight at SIGTERM, finished them and exited 0")
    check(report["kill_in_flight"], "r3 had requests in flight at SIGKILL")
    probe = report.get("probe", {})
    check(report["stream_at_kill"] and probe.get("server") == "r3" and probe.get("error"),
          f"a stream running on r3 at the kill was cut, not finished ({probe.get('error')})")
    check(report["kill_at"] < NUM_REQUESTS and report["rejoined_at"] < NUM_REQUESTS,
          "the restart and the kill happened under load")
    answers = {}
    for i, r in load.results.items():
        spec = Spec(i)
        # A greedy completion may end at once (EOS first: empty text, 1 token); the answer
        # equality below catches a truncated one.
        check_quiet(r["finish"] in ("stop", "length") and r["tokens"], f"request {i} complete ({r})")
        check_quiet(r["finish"] != "length" or r["tokens"] == spec.max_tokens, f"request {i} usage ({r})")
        want_pool = "long" if spec.long else "short"
        check_quiet(r["pool"] == want_pool, f"request {i} routed to the {want_pool} pool ({r})")
        check_quiet(spec.long or r["server"] in ("r1", "r2"), f"short request {i} stayed off r3 ({r})")
        answers.setdefault(spec.key(), set()).add(r["text"])
    check(True, "every answer complete (finish reason, usage) and routed to its length's pool")
    check(sum(bool(r["text"]) for r in load.results.values()) > NUM_REQUESTS // 2, "most answers have text")
    differing = {k[1][:40]: v for k, v in answers.items() if len(v) != 1}
    check(not differing, f"equal greedy requests got equal answers, streamed or not, on any replica {differing}")
    servers = {}
    for r in load.results.values():
        servers[r["server"]] = servers.get(r["server"], 0) + 1
    print("answers per replica:", dict(sorted(servers.items())), flush=True)


def check_quiet(cond, what):
    if not cond:
        check(False, what)


def main():
    global ARGS, client
    p = argparse.ArgumentParser()
    p.add_argument("--lancet", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("--work-dir", required=True)
    ARGS = p.parse_args()
    deploy = os.path.join(ARGS.source_dir, "deploy")
    serve_args = ["--served-model-name", MODEL_NAME, "--threads", "1", "--max-model-len", "2048",
                  "--kv-cache-memory", "268435456", "--drain-timeout", "60"]
    replicas = [Replica(f"r{i}", ARGS.lancet, ARGS.model, ARGS.work_dir, serve_args) for i in (1, 2, 3)]
    gateway = Gateway(os.path.join(deploy, "haproxy.cfg"), replicas, ARGS.work_dir,
                      {"LANCET_LONG_PROMPT_BYTES": str(LONG_PROMPT_BYTES),
                       "LANCET_LONG_PROMPT_TOKENS": str(LONG_PROMPT_TOKENS),
                       "LANCET_RATE_LIMIT_REQUESTS": str(RATE_LIMIT)})
    prom = Prometheus(os.path.join(deploy, "prometheus"), ARGS.work_dir, replicas, gateway)
    procs = replicas + [gateway, prom]
    ok = False
    try:
        rc, out = gateway.check_config()
        check(rc == 0, f"haproxy -c accepts deploy/haproxy.cfg {out.strip()[-300:] if rc else ''}")
        rc, out = prom.check()
        check(rc == 0, f"promtool check config accepts deploy/prometheus/ {out.strip()[-300:] if rc else ''}")
        for r in replicas:
            r.start()
        for r in replicas:
            r.wait_healthy(120)
        prom.start()
        gateway.start()
        wait_for("HAProxy sees every replica up",
                 lambda: all(s == "UP" for s in gateway.server_states().values()), 30)
        # Prometheus must have scraped each replica before r3 is killed (the kill comes early in
        # the load, which a fast machine runs in seconds).
        wait_for("Prometheus has scraped every replica up", lambda: prometheus_sees_all_up(prom, replicas), 60)
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="load-client", max_retries=0, timeout=600)
        check_routing(gateway, replicas)
        check_rate_limit(gateway)
        report = {}
        load = run_load(gateway, replicas, report)
        check_load(load, report)
        states = gateway.server_states()
        check(states[("lancet_short", "r1")] == "UP" and states[("lancet_short", "r2")] == "UP"
              and states[("lancet_long", "r3")].startswith("DOWN"),
              f"HAProxy: r1 back up after its restart, r3 down after the kill ({states})")
        exports_offload = "lancet:kv_offload_queries_total" in (replicas[1].metrics() or {})
        check_prometheus(prom, replicas, gateway, os.path.join(deploy, "prometheus", "lancet.rules.yml"),
                         exports_offload)
        status, text = http_get(gateway.stats_url("/metrics"))
        retries = [l for l in text.splitlines() if l.startswith(("haproxy_backend_retry_warnings_total",
                                                                 "haproxy_backend_redispatch_warnings_total"))]
        print("gateway:", "; ".join(retries), flush=True)
        ok = True
        print("PASS replica_set", flush=True)
    finally:
        for proc in reversed(procs):
            try:
                proc.stop()
            except Exception as e:
                print(f"stopping {type(proc).__name__}: {e}", flush=True)
        if not ok:
            for path in sorted(os.listdir(ARGS.work_dir)):
                if path.endswith(".log"):
                    print(f"--- {path}\n{log_tail(os.path.join(ARGS.work_dir, path))}", flush=True)


if __name__ == "__main__":
    main()
