"""/v1/embeddings of `lancet serve` through the official `openai` Python client: shapes, float
and base64 encodings, determinism, batch == one by one, token-id inputs, and the 400 envelopes
of bad inputs. Prints one line per check and exits non-zero on the first failure. Used by
tests/server/server_e2e_test.cc; the helpers are openai_client_check.py's.

  python openai_embeddings_check.py embeddings --base-url http://127.0.0.1:PORT --api-key KEY --hidden-size H
"""
import argparse
import base64
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai_client_check as base  # noqa: E402
from openai_client_check import check, http  # noqa: E402


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def scenario_embeddings():
    c = base.client()
    model = base.model_id(c)
    texts = ["The cat sat on the mat.", "Paris is the capital of France.", "def add(a, b): return a + b"]
    one = c.embeddings.create(model=model, input=texts[0], encoding_format="float")
    check(one.object == "list" and len(one.data) == 1 and one.data[0].object == "embedding", "response shape")
    e0 = one.data[0].embedding
    check(len(e0) == base.ARGS.hidden_size, "dimension == hidden size (%d)" % len(e0))
    check(abs(math.sqrt(sum(x * x for x in e0)) - 1) < 1e-5, "L2-normalized")
    check(one.usage.prompt_tokens > 0 and one.usage.total_tokens == one.usage.prompt_tokens, "usage")
    check(one.model == model, "model name")
    again = c.embeddings.create(model=model, input=texts[0], encoding_format="float").data[0].embedding
    check(abs(cosine(e0, again) - 1) < 1e-6, "cosine(embed(a), embed(a)) == 1")
    batch = c.embeddings.create(model=model, input=texts, encoding_format="float")
    check([d.index for d in batch.data] == [0, 1, 2], "indexes in input order")
    singles = [c.embeddings.create(model=model, input=t, encoding_format="float").data[0].embedding for t in texts]
    worst = max(abs(x - y) for d, s in zip(batch.data, singles) for x, y in zip(d.embedding, s))
    check(worst < 1e-5, "a batch equals embedding one by one (max diff %.2g)" % worst)
    check(cosine(singles[0], singles[2]) < 0.9999, "different texts give different embeddings")
    # The client's default encoding is base64, decoded by the client.
    dflt = c.embeddings.create(model=model, input=texts[1]).data[0].embedding
    check(max(abs(x - y) for x, y in zip(dflt, singles[1])) < 1e-6, "base64 (client default) == float")
    status, raw = http("POST", "/v1/embeddings", {"input": texts[1], "encoding_format": "base64"})
    vec = struct.unpack("<%df" % base.ARGS.hidden_size, base64.b64decode(raw["data"][0]["embedding"]))
    check(status == 200 and max(abs(x - y) for x, y in zip(vec, singles[1])) < 1e-6, "raw base64: little-endian float32")
    status, tok = http("POST", "/tokenize", {"prompt": texts[2]})
    by_ids = c.embeddings.create(model=model, input=tok["tokens"], encoding_format="float").data[0].embedding
    check(max(abs(x - y) for x, y in zip(by_ids, singles[2])) < 1e-5, "token-id input == its text")
    lists = c.embeddings.create(model=model, input=[tok["tokens"], tok["tokens"][:3]], encoding_format="float")
    check(len(lists.data) == 2, "a list of token-id lists")
    for body, param, what in [
            ({"input": "x", "dimensions": 8}, "dimensions", "dimensions"),
            ({"input": ""}, "input", "an empty string"),
            ({"input": []}, "input", "an empty list"),
            ({"input": [1, "a"]}, "input", "mixed ids"),
            ({"input": ["a", [1]]}, "input", "mixed kinds"),
            ({"input": [-1]}, "input", "a negative id"),
            ({"input": [10 ** 9]}, "input", "an id outside the vocabulary"),
            ({"input": 5}, "input", "a number"),
            ({}, "input", "no input"),
            ({"input": "x", "encoding_format": "int8"}, "encoding_format", "encoding_format int8"),
            ({"input": list(range(1, 600))}, "input", "too long")]:
        status, out = http("POST", "/v1/embeddings", body)
        check(status == 400 and out["error"]["param"] == param and out["error"]["type"] == "invalid_request_error",
              "%s -> 400 naming %s" % (what, param))
    status, out = http("POST", "/v1/embeddings", {"input": "x", "model": "nope"})
    check(status == 404, "unknown model -> 404")
    status, out = http("POST", "/v1/embeddings", {"input": "x"}, headers={"Authorization": "Bearer wrong"})
    check(status == 401, "wrong key -> 401")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["embeddings"])
    p.add_argument("--base-url", required=True)
    p.add_argument("--api-key", default="")
    p.add_argument("--hidden-size", type=int, required=True)
    p.add_argument("--model-path", default="")
    p.add_argument("--lancet", default="")
    p.add_argument("--pid", type=int, default=0)
    base.ARGS = p.parse_args()
    globals()["scenario_" + base.ARGS.scenario]()
    print("PASS", base.ARGS.scenario)


if __name__ == "__main__":
    main()
