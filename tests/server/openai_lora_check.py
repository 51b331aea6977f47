"""LoRA adapters served by `lancet serve --lora-modules` through the official `openai` Python
client: /v1/models lists each adapter with the base model as its parent; a completion with
model=<adapter> gives peft's greedy tokens (read back as "token_id:N" logprob tokens: the
fixture ships no tokenizer) and names the adapter; an unknown model is a 404; adapters load and
unload at run time through vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter. Prints
one line per check and exits non-zero on the first failure. Used by
tests/server/server_lora_test.cc.

  python openai_lora_check.py --base-url http://127.0.0.1:PORT --expect EXPECT.json
EXPECT.json: {"base": NAME, "adapters": {NAME: {"path": P, "prompt": [ids], "greedy": [ids]}}}
"""
import argparse
import json
import sys
import urllib.error
import urllib.request

import openai


def check(cond, what):
    if not cond:
        print("FAIL:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def post(base_url, path, body):
    req = urllib.request.Request(base_url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def greedy(c, model, prompt, n):
    r = c.completions.create(model=model, prompt=prompt, max_tokens=n, temperature=0, logprobs=0,
                             extra_body={"ignore_eos": True})
    toks = [int(t.split(":", 1)[1]) for t in r.choices[0].logprobs.tokens]
    return r, toks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--expect", required=True)
    a = ap.parse_args()
    exp = json.load(open(a.expect))
    base, adapters = exp["base"], exp["adapters"]
    c = openai.OpenAI(base_url=a.base_url + "/v1", api_key="none", max_retries=0, timeout=120)

    cards = {m.id: m for m in c.models.list().data}
    check(base in cards and cards[base].parent is None, "the base model is listed without a parent")
    for name, e in adapters.items():
        check(name in cards, "adapter %s is listed" % name)
        m = cards[name].model_dump()
        check(m.get("parent") == base and m.get("root") == e["path"], "adapter %s: parent and root" % name)

    outputs = {}
    for name, e in adapters.items():
        n = len(e["greedy"])
        r, toks = greedy(c, name, e["prompt"], n)
        check(toks == e["greedy"], "model=%s gives peft's greedy tokens %s (got %s)" % (name, e["greedy"], toks))
        check(r.model == name, "the response names the adapter (%s)" % r.model)
        outputs[name] = toks
        _, base_toks = greedy(c, base, e["prompt"], n)
        check(base_toks != toks, "the base model's tokens differ from adapter %s's" % name)
        stream = c.completions.create(model=name, prompt=e["prompt"], max_tokens=n, temperature=0, logprobs=0,
                                      stream=True, extra_body={"ignore_eos": True})
        streamed = [int(t.split(":", 1)[1]) for ch in stream if ch.choices for t in (ch.choices[0].logprobs.tokens or [])]
        check(streamed == e["greedy"], "model=%s streamed gives the same tokens" % name)

    try:
        c.completions.create(model="no-such-adapter", prompt=[1, 2, 3], max_tokens=1)
        check(False, "an unknown model is refused")
    except openai.NotFoundError as err:
        check(err.status_code == 404, "an unknown model is a 404")

    first = next(iter(adapters))
    status, text = post(a.base_url, "/v1/load_lora_adapter", {"lora_name": "copy", "lora_path": adapters[first]["path"]})
    check(status == 200 and "added successfully" in text, "load_lora_adapter: %d %s" % (status, text))
    check("copy" in {m.id for m in c.models.list().data}, "the loaded adapter is listed")
    _, toks = greedy(c, "copy", adapters[first]["prompt"], len(adapters[first]["greedy"]))
    check(toks == outputs[first], "the loaded copy gives %s's tokens" % first)
    status, text = post(a.base_url, "/v1/load_lora_adapter", {"lora_name": "copy", "lora_path": adapters[first]["path"]})
    check(status == 400, "loading a name in use is a 400 (%d %s)" % (status, text))
    status, text = post(a.base_url, "/v1/load_lora_adapter", {"lora_name": "bad", "lora_path": "/no/such/adapter"})
    check(status == 400 and "error" in json.loads(text), "a bad path is a 400 envelope (%d)" % status)
    status, text = post(a.base_url, "/v1/load_lora_adapter", {"lora_path": adapters[first]["path"]})
    check(status == 400, "lora_name is required (%d)" % status)
    status, text = post(a.base_url, "/v1/unload_lora_adapter", {"lora_name": "copy"})
    check(status == 200 and "removed successfully" in text, "unload_lora_adapter: %d %s" % (status, text))
    check("copy" not in {m.id for m in c.models.list().data}, "the unloaded adapter is no longer listed")
    try:
        c.completions.create(model="copy", prompt=[1, 2, 3], max_tokens=1)
        check(False, "the unloaded adapter is refused")
    except openai.NotFoundError:
        check(True, "the unloaded adapter is a 404")
    status, _ = post(a.base_url, "/v1/unload_lora_adapter", {"lora_name": "copy"})
    check(status == 404, "unloading it again is a 404 (%d)" % status)
    print("openai_lora_check: all checks passed", flush=True)


if __name__ == "__main__":
    main()
