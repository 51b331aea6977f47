"""Prompt-side features of `lancet serve` through the official `openai` Python client (and raw
HTTP where the client hides fields): echo, prompt_logprobs, truncate_prompt_tokens. Each
scenario prints one line per check and exits non-zero on the first failure. Used by
tests/server/server_e2e_test.cc; the helpers are openai_client_check.py's.

  python openai_prompt_check.py SCENARIO --base-url http://127.0.0.1:PORT --api-key KEY
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai_client_check as base  # noqa: E402
from openai_client_check import check, http, sse_events  # noqa: E402

PROMPT = "The capital of France is"


def tokenize(text):
    status, out = http("POST", "/tokenize", {"prompt": text})
    check(status == 200, "/tokenize")
    return out["tokens"]


def detokenize(ids):
    status, out = http("POST", "/detokenize", {"tokens": ids})
    check(status == 200, "/detokenize")
    return out["prompt"]


def ids_of(logprobs_tokens):
    return [int(t.split(":")[1]) for t in logprobs_tokens]


def scenario_echo():
    c = base.client()
    model = base.model_id(c)
    ref = c.completions.create(model=model, prompt=PROMPT, max_tokens=6, temperature=0)
    r = c.completions.create(model=model, prompt=PROMPT, max_tokens=6, temperature=0, echo=True)
    check(r.choices[0].text == PROMPT + ref.choices[0].text,
          "echo: the prompt text comes first: %r" % r.choices[0].text)
    check(r.usage.completion_tokens == ref.usage.completion_tokens, "echo: usage counts generated tokens only")
    ids = tokenize(PROMPT)
    r = c.completions.create(model=model, prompt=ids, max_tokens=6, temperature=0, echo=True)
    check(r.choices[0].text == detokenize(ids) + ref.choices[0].text, "echo of a token-id prompt: its decoded text")
    r = c.completions.create(model=model, prompt=["One two", "Red green"], n=2, max_tokens=3, temperature=0,
                             echo=True)
    check(len(r.choices) == 4, "echo with two prompts x n=2: four choices")
    check(all(ch.text.startswith(["One two", "Red green"][ch.index // 2]) for ch in r.choices),
          "each choice starts with its own prompt")

    # echo + logprobs: the prompt tokens' logprobs come first, the first one null.
    plain = c.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=2)
    r = c.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=2, echo=True)
    lp = r.choices[0].logprobs
    n_prompt = r.usage.prompt_tokens
    check(len(lp.tokens) == n_prompt + 4, "echo logprobs: prompt tokens + generated tokens")
    check(lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, "the first prompt token has a null logprob")
    check(all(x <= 0 for x in lp.token_logprobs[1:n_prompt]), "prompt tokens' logprobs are <= 0")
    check(all(len(t) == 2 for t in lp.top_logprobs[1:]), "two alternatives per scored token")
    gen = lp.token_logprobs[n_prompt:]
    check(all(abs(a - b) < 1e-5 for a, b in zip(gen, plain.choices[0].logprobs.token_logprobs)),
          "the generated tokens' logprobs are those without echo")
    check(lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset), "text offsets increase from 0")

    # Streaming: the echoed prompt arrives in the first chunk.
    chunks = list(c.completions.create(model=model, prompt=PROMPT, max_tokens=6, temperature=0, echo=True,
                                       stream=True))
    check(chunks[0].choices[0].text.startswith(PROMPT), "stream: the first chunk starts with the prompt")
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    check(text == PROMPT + ref.choices[0].text, "stream: echo + the same completion")
    chunks = list(c.completions.create(model=model, prompt=PROMPT, max_tokens=3, temperature=0, echo=True,
                                       logprobs=1, stream=True))
    first = chunks[0].choices[0].logprobs
    check(first.token_logprobs[0] is None and len(first.tokens) == n_prompt + 1,
          "stream: the first chunk carries the prompt's logprobs and the first token's")
    status, out = http("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                        "echo": True})
    check(status == 400 and out["error"]["param"] == "echo", "chat echo -> 400 naming echo")


def scenario_prompt_logprobs():
    c = base.client()
    model = base.model_id(c)
    # Greedy generation with logprobs, then the same tokens as a prompt: equal within 1e-4.
    g = c.completions.create(model=model, prompt=PROMPT, max_tokens=10, temperature=0, logprobs=0,
                             extra_body={"return_tokens_as_token_ids": True, "ignore_eos": True})
    gen_ids = ids_of(g.choices[0].logprobs.tokens)
    gen_lp = g.choices[0].logprobs.token_logprobs
    ids = tokenize(PROMPT)
    status, out = http("POST", "/v1/completions", {"prompt": ids + gen_ids, "max_tokens": 1, "temperature": 0,
                                                   "prompt_logprobs": 2})
    check(status == 200, "prompt_logprobs request answered")
    plp = out["choices"][0]["prompt_logprobs"]
    check(len(plp) == len(ids) + len(gen_ids) and plp[0] is None, "one entry per prompt token, the first null")
    all_ids = ids + gen_ids
    for i in range(1, len(plp)):
        d = plp[i]
        tok = str(all_ids[i])
        check(tok in d and list(d.keys())[0] == tok, "entry %d: the actual token first" % i)
        check(len(d) in (2, 3) and all(set(v) == {"logprob", "rank", "decoded_token"} for v in d.values()),
              "entry %d: logprob, rank, decoded_token; top 2 alternatives" % i)
    worst = max(abs(plp[len(ids) + j][str(t)]["logprob"] - gen_lp[j]) for j, t in enumerate(gen_ids))
    check(worst < 1e-4, "prompt logprobs == the logprobs of generating those tokens (max diff %.2g)" % worst)
    check(all(plp[len(ids) + j][str(t)]["rank"] == 1 for j, t in enumerate(gen_ids)), "greedy tokens have rank 1")

    # The same prompt again (its blocks now cached) gives the same numbers: it is recomputed.
    status, again = http("POST", "/v1/completions", {"prompt": ids + gen_ids, "max_tokens": 1, "temperature": 0,
                                                     "prompt_logprobs": 2})
    check(again["choices"][0]["prompt_logprobs"] == plp, "a repeated prompt scores the same")
    check(again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "prompt_logprobs skip prefix-cache hits")

    # Through the openai client: the field rides along on the choice.
    r = c.completions.create(model=model, prompt=PROMPT, max_tokens=2, temperature=0,
                             extra_body={"prompt_logprobs": 0})
    field = r.choices[0].model_extra.get("prompt_logprobs")
    check(field is not None and len(field) == r.usage.prompt_tokens, "openai client sees choices[].prompt_logprobs")
    check(all(len(d) == 1 for d in field[1:]), "prompt_logprobs 0: the actual token only")
    # echo + logprobs report the same prompt numbers.
    r = c.completions.create(model=model, prompt=PROMPT, max_tokens=1, temperature=0, logprobs=1, echo=True,
                             extra_body={"prompt_logprobs": 1})
    field = r.choices[0].model_extra["prompt_logprobs"]
    echo_lp = r.choices[0].logprobs.token_logprobs[:len(ids)]
    check(all(abs(echo_lp[i] - field[i][str(ids[i])]["logprob"]) < 1e-6 for i in range(1, len(ids))),
          "echo logprobs == prompt_logprobs")
    # Chat: at the top of the response.
    status, out = http("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                        "max_tokens": 2, "prompt_logprobs": 1})
    check(status == 200 and len(out["prompt_logprobs"]) == out["usage"]["prompt_tokens"],
          "chat: prompt_logprobs at the top of the response")
    for body, what in [({"prompt": "x", "prompt_logprobs": 1, "stream": True}, "with stream"),
                       ({"prompt": "x", "prompt_logprobs": 99}, "over --max-logprobs"),
                       ({"prompt": "x", "prompt_logprobs": "2"}, "not an integer")]:
        status, out = http("POST", "/v1/completions", body)
        check(status == 400 and out["error"]["param"] == "prompt_logprobs", "prompt_logprobs %s -> 400" % what)


def scenario_truncate():
    c = base.client()
    model = base.model_id(c)
    text = "One, two, three, four, five, six, seven, eight"
    ids = tokenize(text)
    check(len(ids) > 6, "the prompt has more than 6 tokens")
    r = c.completions.create(model=model, prompt=text, max_tokens=5, temperature=0,
                             extra_body={"truncate_prompt_tokens": 4})
    ref = c.completions.create(model=model, prompt=ids[-4:], max_tokens=5, temperature=0)
    check(r.choices[0].text == ref.choices[0].text, "truncated to the last 4 tokens == those tokens as the prompt")
    check(r.usage.prompt_tokens == 4, "usage.prompt_tokens counts the kept tokens")
    check(r.usage.model_extra.get("truncated_prompt_tokens") == len(ids) - 4,
          "usage.truncated_prompt_tokens counts the dropped ones")
    r = c.completions.create(model=model, prompt=text, max_tokens=2, temperature=0, echo=True,
                             extra_body={"truncate_prompt_tokens": 4})
    check(r.choices[0].text.startswith(detokenize(ids[-4:])), "echo shows the truncated prompt")
    r = c.completions.create(model=model, prompt=[ids, ids[:3]], max_tokens=1, temperature=0,
                             extra_body={"truncate_prompt_tokens": len(ids) - 1})
    check(r.usage.prompt_tokens == len(ids) - 1 + 3 and r.usage.model_extra["truncated_prompt_tokens"] == 1,
          "several prompts: each truncated on its own, shorter ones kept whole")
    r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": text}], max_tokens=2,
                                  extra_body={"truncate_prompt_tokens": 5})
    check(r.usage.prompt_tokens == 5, "chat prompts are truncated too")
    plain = c.completions.create(model=model, prompt=text, max_tokens=1)
    check("truncated_prompt_tokens" not in (plain.usage.model_extra or {}), "no field unless asked")
    for bad in [0, -1, 1.5, "3", True]:
        status, out = http("POST", "/v1/completions", {"prompt": text, "truncate_prompt_tokens": bad})
        check(status == 400 and out["error"]["param"] == "truncate_prompt_tokens",
              "truncate_prompt_tokens %r -> 400 naming the field" % (bad,))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["echo", "prompt_logprobs", "truncate"])
    p.add_argument("--base-url", required=True)
    p.add_argument("--api-key", default="")
    p.add_argument("--model-path", default="")
    p.add_argument("--lancet", default="")
    p.add_argument("--pid", type=int, default=0)
    base.ARGS = p.parse_args()
    globals()["scenario_" + base.ARGS.scenario]()
    print("PASS", base.ARGS.scenario)


if __name__ == "__main__":
    main()
