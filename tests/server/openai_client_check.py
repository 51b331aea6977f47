"""Drives a running `lancet serve` with the official `openai` Python client (and raw HTTP where
the client hides the wire format). Each scenario prints one line per check and exits non-zero
on the first failure. Used by tests/server/server_e2e_test.cc.

  python openai_client_check.py SCENARIO --base-url http://127.0.0.1:PORT --api-key KEY \
      --model-path MODEL.gguf --lancet build/lancet [--pid PID]

Scenarios: api (chat/completions, stream and not, n, logprobs, stop, seed, usage, greedy ==
`lancet generate`), load (64 concurrent streaming clients with random cancellations), stream64
(64 concurrent greedy streams, each chunk exactly once against the non-streamed runs), errors
(every bad input gets its status and envelope while a good request streams), lifecycle
(429 at the concurrency limit, SIGTERM drains a streaming request).
"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import gguf
import jinja2
import openai

ARGS = None


def check(cond, what):
    if not cond:
        print("FAIL:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def http(method, path, body=None, headers=None, raw=None, timeout=60):
    """Returns (status, parsed JSON or text)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    h = {"Content-Type": "application/json"}
    if ARGS.api_key:
        h["Authorization"] = "Bearer " + ARGS.api_key
    h.update(headers or {})
    h = {k: v for k, v in h.items() if v is not None}
    req = urllib.request.Request(ARGS.base_url + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def sse_events(path, body, timeout=120):
    """Raw SSE: returns (status, list of data payload strings)."""
    h = {"Content-Type": "application/json", "Authorization": "Bearer " + ARGS.api_key}
    req = urllib.request.Request(ARGS.base_url + path, data=json.dumps(body).encode(), method="POST", headers=h)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        text = r.read().decode()
        status = r.status
    events = [e for e in text.split("\n\n") if e.strip()]
    datas = []
    for e in events:
        for line in e.split("\n"):
            if line.startswith("data: "):
                datas.append(line[6:])
    return status, datas


def client():
    return openai.OpenAI(base_url=ARGS.base_url + "/v1", api_key=ARGS.api_key, max_retries=0, timeout=120)


def generate(prompt, max_tokens, chat):
    cmd = [ARGS.lancet, "generate", "--model", ARGS.model_path, "--prompt", prompt, "--max-tokens",
           str(max_tokens), "--temperature", "0", "--json", "--quiet", "--threads", "1"]
    if chat:
        cmd.append("--chat")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        print(out.stderr)
    check(out.returncode == 0, "lancet generate ran")
    return json.loads(out.stdout)


def model_id(c):
    models = c.models.list().data
    check(len(models) == 1, "/v1/models lists one model")
    return models[0].id


# ---------------------------------------------------------------------------------------------
def scenario_api():
    c = client()
    model = model_id(c)
    question = "What is the capital of France?"

    # Greedy chat equals `lancet generate --chat`, non-streaming and streaming.
    ref = generate(question, 12, chat=True)
    r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": question}], max_tokens=12,
                                  temperature=0)
    check(r.object == "chat.completion" and r.id.startswith("chatcmpl-"), "chat response shape")
    check(r.choices[0].message.role == "assistant", "chat message role")
    check(r.choices[0].message.content == ref["text"],
          "greedy chat == lancet generate: %r vs %r" % (r.choices[0].message.content, ref["text"]))
    check(r.choices[0].finish_reason == ref["finish_reason"], "chat finish_reason matches generate")
    check(r.usage.completion_tokens == len(ref["ids"]) and r.usage.prompt_tokens == len(ref["prompt_ids"]),
          "chat usage counts prompt and completion tokens")
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, "total_tokens")

    stream = c.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                       max_tokens=12, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    check(chunks[0].choices[0].delta.role == "assistant", "first chunk carries the role")
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    check(text == ref["text"], "greedy streamed chat == lancet generate")
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    check(finals == [ref["finish_reason"]], "one chunk with finish_reason")
    check(chunks[-1].choices == [] and chunks[-1].usage is not None, "include_usage: last chunk has usage, no choices")
    check(chunks[-1].usage.completion_tokens == len(ref["ids"]), "stream usage completion_tokens")
    check(all(ch.usage is None for ch in chunks[:-1]), "other chunks have usage null")
    check(chunks[-1].usage.prompt_tokens_details.cached_tokens >= 16, "repeat prompt hits the prefix cache")

    # Raw wire format: data lines, [DONE] last.
    status, datas = sse_events("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content":
                                                         question}], "max_tokens": 4, "stream": True})
    check(status == 200 and datas[-1] == "[DONE]", "stream ends with data: [DONE]")
    check(all(json.loads(d)["object"] == "chat.completion.chunk" for d in datas[:-1]), "every chunk is JSON")

    # Greedy completions (text and token ids) equal `lancet generate`.
    prompt = "The capital of France is"
    ref = generate(prompt, 10, chat=False)
    r = c.completions.create(model=model, prompt=prompt, max_tokens=10, temperature=0)
    check(r.object == "text_completion" and r.id.startswith("cmpl-"), "completion response shape")
    check(r.choices[0].text == ref["text"], "greedy completion == lancet generate: %r vs %r" %
          (r.choices[0].text, ref["text"]))
    r = c.completions.create(model=model, prompt=ref["prompt_ids"], max_tokens=10, temperature=0)
    check(r.choices[0].text == ref["text"], "token-id prompt gives the same completion")
    r = c.completions.create(model=model, prompt=[ref["prompt_ids"], ref["prompt_ids"]], max_tokens=10, temperature=0)
    check([ch.index for ch in r.choices] == [0, 1] and all(ch.text == ref["text"] for ch in r.choices),
          "list of token-id prompts")
    r = c.completions.create(model=model, prompt=[prompt, "Hello"], max_tokens=3, temperature=0)
    check(len(r.choices) == 2 and r.choices[0].text == generate(prompt, 3, False)["text"], "list of text prompts")
    stream = c.completions.create(model=model, prompt=prompt, max_tokens=10, temperature=0, stream=True,
                                  stream_options={"include_usage": True})
    chunks = list(stream)
    check("".join(ch.choices[0].text for ch in chunks if ch.choices) == ref["text"], "streamed completion == generate")
    check(chunks[-1].usage.completion_tokens == 10, "streamed completion usage")

    # n = 2, streaming and not. The first request warms the prefix cache: a seeded choice
    # other than the first can differ between a cold and a warm cache (reported to the engine).
    c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Tell me a story"}],
                              max_tokens=1, temperature=0)
    r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Tell me a story"}],
                                  max_tokens=6, temperature=1.0, n=2, seed=7)
    check([ch.index for ch in r.choices] == [0, 1] and r.usage.completion_tokens == 12, "n=2 chat")
    stream = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Tell me a story"}],
                                       max_tokens=6, temperature=1.0, n=2, seed=7, stream=True)
    texts, finished = {0: "", 1: ""}, set()
    for ch in stream:
        for choice in ch.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finished.add(choice.index)
    check(finished == {0, 1}, "n=2 stream finishes both choices")
    check(texts == {0: r.choices[0].message.content, 1: r.choices[1].message.content},
          "seeded n=2 stream == seeded n=2 non-stream")

    # Seeds reproduce.
    outs = [c.completions.create(model=model, prompt="Once upon a time", max_tokens=12, temperature=1.0,
                                 seed=s).choices[0].text for s in (1234, 1234, 99, 5)]
    check(outs[0] == outs[1], "same seed, same text")
    check(len(set(outs[1:])) > 1, "different seeds, different texts")

    # Logprobs.
    r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": question}], max_tokens=5,
                                  temperature=0, logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    check(len(lp) == r.usage.completion_tokens, "chat logprobs: one entry per token")
    check(all(len(e.top_logprobs) == 3 and e.logprob <= 0 for e in lp), "chat top_logprobs has 3 alternatives")
    check(all(abs(e.logprob - e.top_logprobs[0].logprob) < 1e-4 for e in lp), "greedy token is the top alternative")
    check(all(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob for e in lp),
          "alternatives sorted")
    check("".join(e.token for e in lp) == r.choices[0].message.content, "logprob tokens spell the text")
    check(all(bytes(e.bytes) == e.token.encode() for e in lp), "bytes field")
    r = c.completions.create(model=model, prompt=prompt, max_tokens=4, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    check(len(lp.tokens) == 4 and len(lp.token_logprobs) == 4 and all(len(t) <= 2 for t in lp.top_logprobs),
          "completion logprobs layout")
    check(lp.text_offset[0] == 0 and lp.text_offset[1] == len(lp.tokens[0]), "text_offset")
    stream = c.chat.completions.create(model=model, messages=[{"role": "user", "content": question}], max_tokens=3,
                                       temperature=0, logprobs=True, top_logprobs=1, stream=True)
    n_lp = sum(len(ch.choices[0].logprobs.content) for ch in stream if ch.choices and ch.choices[0].logprobs)
    check(n_lp == 3, "streamed chat logprobs")

    # Stop strings: cut before the stop string, finish_reason stop.
    full = generate(prompt, 12, chat=False)["text"]
    words = full.split()
    stop = words[1]
    r = c.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0, stop=[stop, "zzzz"])
    check(r.choices[0].text == full[:full.index(stop)] and r.choices[0].finish_reason == "stop",
          "stop string %r ends the text: %r" % (stop, r.choices[0].text))
    r = c.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0, stop=stop, stream=True)
    check("".join(ch.choices[0].text for ch in r if ch.choices) == full[:full.index(stop)], "streamed stop")
    # vLLM's include_stop_str_in_output keeps the stop string; unsupported extensions are refused.
    r = c.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0, stop=[stop, "zzzz"],
                             extra_body={"include_stop_str_in_output": True})
    check(r.choices[0].text == full[:full.index(stop) + len(stop)] and r.choices[0].finish_reason == "stop",
          "include_stop_str_in_output keeps %r: %r" % (stop, r.choices[0].text))
    # vLLM's guided_grammar (GBNF), sent as the client sends extensions; a grammar that cannot be
    # compiled is a 400 naming the field.
    yes_no = 'root ::= ("yes" | "no") ("," " " ("yes" | "no")){0,2}'
    for stream in (False, True):
        r = c.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=0.8, seed=4, stream=stream,
                                 extra_body={"guided_grammar": yes_no})
        text = "".join(ch.choices[0].text for ch in r if ch.choices) if stream else r.choices[0].text
        check(re.fullmatch(r"(yes|no)(, (yes|no)){0,2}", text) is not None,
              "guided_grammar output matches (stream=%s): %r" % (stream, text))
    try:
        c.completions.create(model=model, prompt=prompt, max_tokens=4, extra_body={"guided_grammar": "root ::= x"})
        check(False, "a grammar with an undefined rule must be refused")
    except openai.BadRequestError as e:
        check("guided_grammar" in str(e) and "'x' is used but not defined" in str(e),
              "an undefined rule is a 400 naming guided_grammar: %s" % e)

    # vLLM's continue_final_message: the final assistant message is left open and continued. The
    # reference text is the GGUF's own chat template rendered by jinja2 as transformers renders it,
    # cut right after the final message's text (transformers' rule); the server's prompt ids must
    # decode to exactly that text and be the closed rendering's ids without what follows the text.
    field = gguf.GGUFReader(ARGS.model_path).fields["tokenizer.chat_template"]
    template = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(
        bytes(field.parts[field.data[0]]).decode())
    partial = "One, two, three,"
    convo = [{"role": "user", "content": "Count from one to ten in words."},
             {"role": "assistant", "content": partial}]
    rendered = template.render(messages=convo, add_generation_prompt=False, bos_token="", eos_token="")
    at = rendered.rindex(partial.strip())
    want_text = rendered[:at + len(partial)]
    check(not rendered.endswith(partial) and want_text.endswith(partial), "the template closes the final message")
    status, got = http("POST", "/tokenize", {"messages": convo, "add_generation_prompt": False,
                                             "continue_final_message": True})
    status2, closed = http("POST", "/tokenize", {"messages": convo, "add_generation_prompt": False})
    check(status == 200 and status2 == 200, "/tokenize with continue_final_message")
    ids = got["tokens"]
    status, text = http("POST", "/detokenize", {"tokens": ids})
    check(status == 200 and text["prompt"] == want_text,
          "continue_final_message renders the final message open: %r vs %r" % (text, want_text))
    status, rest = http("POST", "/detokenize", {"tokens": closed["tokens"][len(ids):]})
    check(closed["tokens"][:len(ids)] == ids and rest["prompt"] == rendered[len(want_text):],
          "the closed rendering is the open one plus the template's ending %r" % rest)
    r = c.chat.completions.create(model=model, messages=convo, max_tokens=8, temperature=0,
                                  extra_body={"add_generation_prompt": False, "continue_final_message": True})
    cont = c.completions.create(model=model, prompt=ids, max_tokens=8, temperature=0)
    check(r.choices[0].message.content == cont.choices[0].text and r.usage.prompt_tokens == len(ids),
          "continue_final_message continues the open message: %r vs %r" % (r.choices[0].message.content,
                                                                            cont.choices[0].text))
    try:
        c.chat.completions.create(model=model, messages=convo, max_tokens=4,
                                  extra_body={"continue_final_message": True})  # add_generation_prompt: true
        check(False, "continue_final_message with add_generation_prompt must be refused")
    except openai.BadRequestError as e:
        check("continue_final_message" in str(e), "continue_final_message and add_generation_prompt: 400 %s" % e)

    # Other endpoints.
    status, tok = http("POST", "/tokenize", {"prompt": prompt})
    check(status == 200 and tok["tokens"] == ref["prompt_ids"] and tok["count"] == len(tok["tokens"]), "/tokenize")
    status, detok = http("POST", "/detokenize", {"tokens": ref["ids"]})
    check(status == 200 and detok["prompt"] == ref["text"], "/detokenize")
    status, ver = http("GET", "/version")
    check(status == 200 and "version" in ver, "/version")
    status, _ = http("GET", "/health", headers={"Authorization": None})
    check(status == 200, "/health needs no key")


# ---------------------------------------------------------------------------------------------
def metric(name):
    """The value of a metric: `name` alone (its one sample), or `name{labels` up to the closing
    brace to pick one sample of a labelled family."""
    status, text = http("GET", "/metrics")
    prefix = name + ("}" if "{" in name else "{")
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return None


def finished_by_reason(model):
    return {r: metric('vllm:request_success_total{model_name="%s",finished_reason="%s"' % (model, r)) or 0
            for r in ("stop", "length", "abort", "error")}


def scenario_load():
    c = client()
    model = model_id(c)
    rng = random.Random(1)
    failures, stats = [], {"done": 0, "cancelled": 0}
    lock = threading.Lock()

    def worker(w):
        local = random.Random(w)
        for k in range(3):
            cancel_after = local.choice([None, None, 1, 3])
            try:
                if local.random() < 0.5:
                    s = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Count to %d" % w}],
                                                  max_tokens=8, temperature=0.8, seed=w * 10 + k, stream=True)
                    get = lambda ch: ch.choices[0].delta.content if ch.choices else None
                else:
                    s = c.completions.create(model=model, prompt="Item %d of %d:" % (k, w), max_tokens=8,
                                             temperature=0.8, stream=True)
                    get = lambda ch: ch.choices[0].text if ch.choices else None
                n, finish = 0, None
                for ch in s:
                    n += 1
                    if ch.choices and ch.choices[0].finish_reason:
                        finish = ch.choices[0].finish_reason
                    if cancel_after is not None and n >= cancel_after:
                        s.close()  # drops the connection mid-stream
                        break
                with lock:
                    if cancel_after is not None and n >= cancel_after:
                        stats["cancelled"] += 1
                    elif finish in ("stop", "length"):
                        stats["done"] += 1
                    else:
                        failures.append("worker %d: stream ended without finish_reason" % w)
            except Exception as e:  # any 5xx or malformed stream lands here
                with lock:
                    failures.append("worker %d: %r" % (w, e))

    before = finished_by_reason(model)
    t0 = time.time()
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("load: %d finished, %d cancelled in %.1fs" % (stats["done"], stats["cancelled"], time.time() - t0))
    check(not failures, "no errors under load: %s" % failures[:3])
    check(stats["done"] + stats["cancelled"] == 192, "every request accounted for")
    deadline = time.time() + 10
    while time.time() < deadline and (metric("vllm:num_requests_running") or metric("lancet:http_requests_in_flight")):
        time.sleep(0.1)
    check(metric("vllm:num_requests_running") == 0 and metric("vllm:num_requests_waiting") == 0,
          "no request left running")
    check(metric("vllm:kv_cache_usage_perc") == 0, "KV usage back to 0 (no leaked blocks)")
    check(metric("lancet:http_requests_in_flight") == 0, "no HTTP request in flight")
    after = finished_by_reason(model)
    by_reason = {r: after[r] - before[r] for r in after}  # this scenario's requests (the server is shared)
    check(sum(by_reason.values()) == 192 and by_reason["error"] == 0,
          "every request counted by finish reason, none as an error: %s" % by_reason)
    check(by_reason["abort"] <= stats["cancelled"], "aborts only for cancelled streams: %s" % by_reason)
    step_s, model_s = metric("lancet:engine_step_seconds_total"), metric("lancet:engine_model_seconds_total")
    check(step_s is not None and model_s is not None and 0 < model_s <= step_s,
          "engine step and model seconds exported (%s, %s)" % (step_s, model_s))
    status, text = http("GET", "/metrics")
    for name in ("vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count",
                 "vllm:inter_token_latency_seconds_count", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total", "vllm:num_preemptions_total",
                 "vllm:gpu_cache_usage_perc"):
        check(name in text, "metric %s exported" % name)
    e2e = metric("vllm:e2e_request_latency_seconds_count")
    check(e2e is not None and e2e >= 192, "every request observed in the e2e histogram (%s)" % e2e)
    # The server still serves afterwards.
    r = c.completions.create(model=model, prompt="Hello", max_tokens=2, temperature=0)
    check(r.choices[0].finish_reason in ("stop", "length"), "server healthy after the load")


# ---------------------------------------------------------------------------------------------
def scenario_stream64():
    """64 greedy streams at once: every chunk arrives exactly once. Each stream's text equals
    the same request's non-streamed text, and so do its tokens (logprobs put one token in each
    chunk: a lost or repeated chunk changes the list), whose count equals usage."""
    c = client()
    model = model_id(c)
    prompts = ["List item %d of %d:" % (i, 64 + i % 5) for i in range(64)]
    results, failures = {}, []
    lock = threading.Lock()

    def run(i, stream):
        try:
            args = dict(model=model, prompt=prompts[i], max_tokens=8, temperature=0, logprobs=0)
            if stream:
                text, tokens, finals, usage = "", [], [], None
                for ch in c.completions.create(stream=True, stream_options={"include_usage": True}, **args):
                    if ch.usage is not None:
                        usage = ch.usage.completion_tokens
                    for choice in ch.choices:
                        text += choice.text
                        if choice.logprobs is not None:
                            tokens += choice.logprobs.tokens
                        if choice.finish_reason:
                            finals.append(choice.finish_reason)
                out = (text, tokens, finals, usage)
            else:
                r = c.completions.create(**args)
                out = (r.choices[0].text, r.choices[0].logprobs.tokens, [r.choices[0].finish_reason],
                       r.usage.completion_tokens)
            with lock:
                results[(i, stream)] = out
        except Exception as e:
            with lock:
                failures.append("prompt %d (stream=%s): %r" % (i, stream, e))

    for stream in (True, False):
        t0 = time.time()
        threads = [threading.Thread(target=run, args=(i, stream)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("stream64: 64 %s requests in %.1fs" % ("streaming" if stream else "plain", time.time() - t0))
    check(not failures, "all 128 requests answered: %s" % failures[:3])
    for i in range(64):
        text, tokens, finals, usage = results[(i, True)]
        p_text, p_tokens, p_finals, p_usage = results[(i, False)]
        ok = (text == p_text and tokens == p_tokens and len(tokens) == usage == p_usage and
              len(finals) == 1 and finals == p_finals)
        if not ok:
            check(False, "prompt %d: streamed %r %r %s usage %s; plain %r %r %s usage %s" %
                  (i, text, tokens, finals, usage, p_text, p_tokens, p_finals, p_usage))
    check(True, "64 streams: text and tokens equal the plain runs, one final chunk each, counts equal usage")
    deadline = time.time() + 10
    while time.time() < deadline and metric("vllm:num_requests_running"):
        time.sleep(0.1)
    check(metric("vllm:kv_cache_usage_perc") == 0, "KV usage back to 0")


# ---------------------------------------------------------------------------------------------
def scenario_errors():
    c = client()
    model = model_id(c)
    good_result = {}

    def good():
        s = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Write a long poem"}],
                                      max_tokens=40, temperature=0, stream=True,
                                      extra_body={"ignore_eos": True})
        good_result["text"] = "".join(ch.choices[0].delta.content or "" for ch in s if ch.choices)
        good_result["ok"] = True

    t = threading.Thread(target=good)
    t.start()
    chat = "/v1/chat/completions"
    msgs = [{"role": "user", "content": "hi"}]
    cases = [
        ("malformed JSON", "POST", chat, None, b'{"messages": [', 400, None),
        ("not an object", "POST", chat, [1, 2], None, 400, None),
        ("invalid UTF-8", "POST", chat, None, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, None),
        ("missing messages", "POST", chat, {"model": model}, None, 400, "messages"),
        ("empty messages", "POST", chat, {"messages": []}, None, 400, "messages"),
        ("bad role", "POST", chat, {"messages": [{"role": "wizard", "content": "x"}]}, None, 400, "messages"),
        ("image part", "POST", chat, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, None, 400,
         "messages"),
        ("temperature type", "POST", chat, {"messages": msgs, "temperature": "hot"}, None, 400, "temperature"),
        ("temperature range", "POST", chat, {"messages": msgs, "temperature": -1}, None, 400, "temperature"),
        ("top_p range", "POST", chat, {"messages": msgs, "top_p": 0}, None, 400, "top_p"),
        ("n zero", "POST", chat, {"messages": msgs, "n": 0}, None, 400, "n"),
        ("n huge", "POST", chat, {"messages": msgs, "n": 100000}, None, 400, "n"),
        ("max_tokens negative", "POST", chat, {"messages": msgs, "max_tokens": -5}, None, 400, "max_tokens"),
        ("max_tokens huge int", "POST", chat, {"messages": msgs, "max_tokens": 10**30}, None, 400, "max_tokens"),
        ("max_tokens float", "POST", chat, {"messages": msgs, "max_tokens": 1.5}, None, 400, "max_tokens"),
        ("top_logprobs over limit", "POST", chat, {"messages": msgs, "logprobs": True, "top_logprobs": 50}, None, 400,
         "top_logprobs"),
        ("top_logprobs without logprobs", "POST", chat, {"messages": msgs, "top_logprobs": 2}, None, 400,
         "top_logprobs"),
        ("logit_bias key", "POST", chat, {"messages": msgs, "logit_bias": {"abc": 1}}, None, 400, "logit_bias"),
        ("logit_bias value", "POST", chat, {"messages": msgs, "logit_bias": {"5": 1000}}, None, 400, "logit_bias"),
        ("logit_bias size", "POST", chat, {"messages": msgs, "logit_bias": {str(i): 1 for i in range(5000)}}, None,
         400, "logit_bias"),
        ("logit_bias outside vocab", "POST", chat, {"messages": msgs, "logit_bias": {"99999999": 1}}, None, 400, None),
        ("too many stops", "POST", chat, {"messages": msgs, "stop": ["a%d" % i for i in range(100)]}, None, 400,
         "stop"),
        ("stop too long", "POST", chat, {"messages": msgs, "stop": "x" * 10000}, None, 400, "stop"),
        ("stream_options without stream", "POST", chat, {"messages": msgs, "stream_options": {"include_usage": True}},
         None, 400, "stream_options"),
        ("response_format json_schema", "POST", chat, {"messages": msgs, "response_format": {"type": "json_schema"}},
         None, 400, "response_format"),
        ("prompt too long", "POST", chat, {"messages": msgs, "max_tokens": 100000}, None, 400, "messages"),
        ("deep nesting", "POST", chat, None, b'{"messages": ' + b"[" * 100000 + b"]" * 100000 + b"}", 400, None),
        ("unknown model", "POST", chat, {"model": "gpt-9", "messages": msgs}, None, 404, "model"),
        ("unknown route", "GET", "/v1/nothing", None, None, 404, None),
        ("body too large", "POST", chat, None, b'{"messages": "' + b"x" * (2 << 20) + b'"}', 413, None),
        ("headers too large", "POST", chat, {"messages": msgs}, None, 431, None),
        ("missing key", "POST", chat, {"messages": msgs}, None, 401, None),
        ("wrong key", "POST", chat, {"messages": msgs}, None, 401, None),
        ("completion prompt type", "POST", "/v1/completions", {"prompt": {"a": 1}}, None, 400, "prompt"),
        ("completion token outside vocab", "POST", "/v1/completions", {"prompt": [1, 2, 999999999]}, None, 400,
         "prompt"),
        ("completion negative token", "POST", "/v1/completions", {"prompt": [1, -2]}, None, 400, "prompt"),
        ("completion too long", "POST", "/v1/completions", {"prompt": [5] * 600, "max_tokens": 4}, None, 400,
         "prompt"),
        ("completion logprobs over limit", "POST", "/v1/completions", {"prompt": "hi", "logprobs": 21}, None, 400,
         "logprobs"),
        ("detokenize bad ids", "POST", "/detokenize", {"tokens": ["a"]}, None, 400, "tokens"),
    ]
    for name, method, path, body, raw, want, param in cases:
        headers = {}
        if name == "headers too large":
            headers = {"X-Filler-%d" % i: "y" * 4000 for i in range(8)}
        if name == "missing key":
            headers = {"Authorization": None}
        if name == "wrong key":
            headers = {"Authorization": "Bearer " + ARGS.api_key + "x"}
        status, out = http(method, path, body, headers=headers, raw=raw)
        ok = status == want and isinstance(out, dict) and set(out.get("error", {}).keys()) >= {"message", "type",
                                                                                               "param", "code"}
        if ok and param is not None:
            ok = out["error"]["param"] == param
        check(ok, "%s -> %d with envelope (got %d %s)" % (name, want, status, str(out)[:200]))
    status, out = http("POST", chat, {"messages": msgs, "max_tokens": 100000})
    check("maximum context length is 512 tokens" in out["error"]["message"], "context-length message")
    t.join()
    check(good_result.get("ok") and len(good_result["text"]) > 0, "concurrent good request streamed an answer")
    r = c.chat.completions.create(model=model, messages=msgs, max_tokens=2)
    check(r.choices[0].finish_reason in ("stop", "length"), "server still serves")


# ---------------------------------------------------------------------------------------------
def scenario_lifecycle():
    c = client()
    model = model_id(c)
    first_chunk = threading.Event()
    result = {}

    def long_stream():
        try:
            # Long enough to still be streaming while the drain checks below run (a fast decode
            # finishes 48 tokens inside the 0.3 s wait and the server is gone); 400 fits the
            # server's --max-model-len 512.
            s = c.completions.create(model=model, prompt="Once upon a time", max_tokens=400, temperature=0,
                                     stream=True, extra_body={"ignore_eos": True})
            text, finish = "", None
            for ch in s:
                first_chunk.set()
                if ch.choices:
                    text += ch.choices[0].text
                    finish = ch.choices[0].finish_reason or finish
            result["text"], result["finish"] = text, finish
        except Exception as e:
            result["error"] = repr(e)
            first_chunk.set()

    t = threading.Thread(target=long_stream)
    t.start()
    check(first_chunk.wait(60), "the long stream started")
    status, out = http("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    check(status == 429 and out["error"]["type"] == "rate_limit_error", "over the concurrency limit -> 429")
    os.kill(ARGS.pid, signal.SIGTERM)
    time.sleep(0.3)
    status, _ = http("GET", "/health")
    check(status == 503, "/health turns 503 while draining")
    status, out = http("POST", "/v1/completions", {"prompt": "hi", "max_tokens": 2})
    check(status == 503 and "error" in out, "new requests get 503 while draining")
    t.join()
    check("error" not in result, "the in-flight stream was not cut: %s" % result.get("error"))
    check(result.get("finish") == "length", "the in-flight stream finished (%s)" % result.get("finish"))


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["api", "load", "stream64", "errors", "lifecycle"])
    p.add_argument("--base-url", required=True)
    p.add_argument("--api-key", default="")
    p.add_argument("--model-path", default="")
    p.add_argument("--lancet", default="")
    p.add_argument("--pid", type=int, default=0)
    ARGS = p.parse_args()
    globals()["scenario_" + ARGS.scenario]()
    print("PASS", ARGS.scenario)


if __name__ == "__main__":
    main()
