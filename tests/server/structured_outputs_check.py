"""Drives a running `lancet serve` with structured-output requests and checks every output with
the `jsonschema` package (an independent validator; guided_regex outputs with Python's `re`). Used by
tests/server/structured_outputs_e2e_test.cc.

  python structured_outputs_check.py --base-url http://127.0.0.1:PORT --api-key KEY [--requests-per-schema N]

20 schemas (nested objects, enums, arrays with item counts, numbers with bounds, required
fields, anyOf/oneOf, $ref) x N requests (default 10) at temperature 0.9 with distinct seeds,
half through chat response_format json_schema and half through completions guided_json, run
concurrently; each output must parse, validate and end with finish_reason "stop". Then
json_object, guided_choice, guided_regex, guided_grammar (GBNF: a regular grammar checked with
`re`, a recursive one with `json`), structured_outputs, and the 400s for what is not supported.
"""
import argparse
import concurrent.futures
import json
import re
import sys
import time
import urllib.error
import urllib.request

import jsonschema

ARGS = None

S = {"type": "string", "maxLength": 8}
SCHEMAS = [
    {"type": "object", "properties": {"name": S, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"]},
    {"type": "array", "items": {"type": "integer", "minimum": -10, "maximum": 10}, "minItems": 1, "maxItems": 4},
    {"type": "object", "properties": {
        "user": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 1000},
                                                  "active": {"type": "boolean"}}, "required": ["id", "active"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 3}},
     "required": ["user", "tags"]},
    {"type": "object", "properties": {"price": {"type": "number", "exclusiveMinimum": 0, "maximum": 100}},
     "required": ["price"], "additionalProperties": False},
    {"type": "object", "properties": {"value": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9},
                                                          {"type": "null"}]}}, "required": ["value"]},
    {"type": "object", "properties": {"version": {"const": 2}, "kind": {"const": "point"},
                                      "x": {"type": "number", "minimum": -1, "maximum": 1},
                                      "y": {"type": "number", "minimum": -1, "maximum": 1}},
     "required": ["version", "kind", "x", "y"]},
    {"type": "object", "properties": {"note": {"type": ["string", "null"], "maxLength": 8}}, "required": ["note"]},
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 5},
                                      "b": {"type": "string", "maxLength": 5}, "c": {"type": "boolean"}},
     "required": ["c"]},
    {"type": "object", "properties": {"v": {"enum": [1, "one", True, None]}}, "required": ["v"]},
    {"type": "object", "properties": {"points": {"type": "array", "minItems": 2, "maxItems": 3, "items": {
        "type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9},
                                         "y": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["x", "y"]}}}, "required": ["points"]},
    {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object", "properties": {
        "c": {"type": "object", "properties": {"d": {"type": "integer", "minimum": 0, "maximum": 3}},
              "required": ["d"]}}, "required": ["c"]}}, "required": ["b"]}}, "required": ["a"]},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "done": {"type": "boolean"}},
     "required": ["ok", "done"]},
    {"type": "object", "properties": {"code": {"type": "string", "minLength": 2, "maxLength": 4}},
     "required": ["code"]},
    {"type": "object", "properties": {"n": {"type": "integer", "exclusiveMinimum": 10, "exclusiveMaximum": 15}},
     "required": ["n"]},
    {"type": "object", "properties": {"t": {"type": "number", "minimum": -50.5, "maximum": -10}},
     "required": ["t"]},
    {"type": "object", "properties": {"shape": {"oneOf": [
        {"type": "object", "properties": {"circle": {"type": "integer", "minimum": 1, "maximum": 9}},
         "required": ["circle"], "additionalProperties": False},
        {"type": "object", "properties": {"square": {"type": "integer", "minimum": 1, "maximum": 9}},
         "required": ["square"], "additionalProperties": False}]}}, "required": ["shape"]},
    {"$defs": {"item": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                                         "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
                        "required": ["name", "qty"]}},
     "type": "object", "properties": {"item": {"$ref": "#/$defs/item"}}, "required": ["item"]},
    {"type": "object", "properties": {"days": {"type": "array", "items": {"enum": ["mon", "tue", "wed"]},
                                               "minItems": 1, "maxItems": 3}}, "required": ["days"]},
    {"enum": ["alpha", "beta", "gamma"]},
]
MAX_TOKENS = 160


def check(cond, what):
    if not cond:
        print("FAIL:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def post(path, body, timeout=120):
    req = urllib.request.Request(ARGS.base_url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + ARGS.api_key})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def one(schema_index, k):
    schema = SCHEMAS[schema_index]
    seed = 1000 * schema_index + k
    if k % 2 == 0:
        status, out = post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Give an example as JSON."}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "s%d" % schema_index,
                                                                      "schema": schema, "strict": True}},
            "temperature": 0.9, "seed": seed, "max_tokens": MAX_TOKENS})
        text = out["choices"][0]["message"]["content"] if status == 200 else None
    else:
        status, out = post("/v1/completions", {
            "prompt": "JSON:", "guided_json": schema if k % 4 == 1 else json.dumps(schema),
            "temperature": 0.9, "seed": seed, "max_tokens": MAX_TOKENS})
        text = out["choices"][0]["text"] if status == 200 else None
    if status != 200:
        return "schema %d request %d: HTTP %d %s" % (schema_index, k, status, out)
    finish = out["choices"][0]["finish_reason"]
    if finish != "stop":
        return "schema %d request %d: finish_reason %s, text %r" % (schema_index, k, finish, text)
    try:
        doc = json.loads(text)
    except ValueError as e:
        return "schema %d request %d: not JSON (%s): %r" % (schema_index, k, e, text)
    try:
        jsonschema.validate(doc, schema)
    except jsonschema.ValidationError as e:
        return "schema %d request %d: invalid (%s): %r" % (schema_index, k, e.message, text)
    return None


def schemas_scenario():
    for s in SCHEMAS:
        jsonschema.Draft202012Validator.check_schema(s)
    jobs = [(i, k) for i in range(len(SCHEMAS)) for k in range(ARGS.requests_per_schema)]
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=ARGS.concurrency) as pool:
        results = list(pool.map(lambda j: one(*j), jobs))
    failures = [r for r in results if r]
    for f in failures[:10]:
        print("  ", f)
    check(not failures, "%d requests over %d schemas: all parse, validate and stop (%.1f s)" %
          (len(jobs), len(SCHEMAS), time.time() - t0))


def others_scenario():
    status, out = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "A JSON object:"}],
                                                "response_format": {"type": "json_object"}, "max_tokens": 96,
                                                "temperature": 0.7, "seed": 3})
    check(status == 200, "json_object answered: %s" % status)
    text = out["choices"][0]["message"]["content"]
    if out["choices"][0]["finish_reason"] == "stop":
        check(isinstance(json.loads(text), dict), "json_object output is an object: %r" % text)
    else:  # an unbounded object may run out of tokens; its prefix must still be one
        check(text.startswith("{"), "json_object output starts an object: %r" % text)
    choices = ["positive", "negative", "neutral"]
    for seed in range(5):
        status, out = post("/v1/completions", {"prompt": "Sentiment of 'great movie':", "guided_choice": choices,
                                               "max_tokens": 16, "temperature": 1.0, "seed": seed})
        check(status == 200 and out["choices"][0]["text"] in choices and out["choices"][0]["finish_reason"] == "stop",
              "guided_choice output is one of the choices: %r" % (out["choices"][0]["text"] if status == 200 else out))
    status, out = post("/v1/completions", {"prompt": "x", "guided_choice": ["a", "b"], "n": 3, "max_tokens": 4,
                                           "temperature": 1.0, "seed": 9})
    check(status == 200 and all(c["text"] in ("a", "b") for c in out["choices"]), "guided_choice with n = 3")
    for pattern in [r"[0-9]{3}-[a-z]{2,4}", r"(yes|no|maybe)", r"\d{1,4}\.\d{2} (USD|EUR)", r"[A-Z][a-z]{1,6}( [A-Z][a-z]{1,6})?"]:
        for seed in range(3):
            status, out = post("/v1/completions", {"prompt": "Answer:", "guided_regex": pattern, "max_tokens": 40,
                                                   "temperature": 0.9, "seed": seed})
            text = out["choices"][0]["text"] if status == 200 else out
            check(status == 200 and re.fullmatch(pattern, text) is not None and
                  out["choices"][0]["finish_reason"] == "stop", "guided_regex %s: %r" % (pattern, text))
    # guided_grammar: GBNF. A regular grammar, checked with re; a recursive one (nested lists of
    # digits), checked with json; the same through structured_outputs.
    grammar = 'root ::= item (", " item){0,3}\nitem ::= "yes" | "no" | [1-9] [0-9]{0,2}'
    for seed in range(4):
        status, out = post("/v1/completions", {"prompt": "Answer:", "guided_grammar": grammar, "max_tokens": 40,
                                               "temperature": 0.9, "seed": seed})
        text = out["choices"][0]["text"] if status == 200 else out
        check(status == 200 and re.fullmatch(r"(yes|no|[1-9][0-9]{0,2})(, (yes|no|[1-9][0-9]{0,2})){0,3}", text)
              is not None, "guided_grammar (regular): %r" % (text,))
    nested = 'root ::= list\nlist ::= "[" (item ("," item){0,3})? "]"\nitem ::= [0-9] | list'

    def depth_ok(v):
        return isinstance(v, int) and 0 <= v <= 9 or isinstance(v, list) and len(v) <= 4 and all(map(depth_ok, v))
    stopped = 0
    for seed in range(6):
        body = {"prompt": "Nested lists:", "max_tokens": 64, "temperature": 0.9, "seed": seed}
        body.update({"guided_grammar": nested} if seed % 2 else {"structured_outputs": {"grammar": nested}})
        status, out = post("/v1/completions", body)
        text = out["choices"][0]["text"] if status == 200 else out
        if status == 200 and out["choices"][0]["finish_reason"] == "stop":
            stopped += 1
            check(depth_ok(json.loads(text)), "guided_grammar (recursive) output is nested lists: %r" % text)
        else:  # ran out of tokens: still a prefix of such lists
            check(status == 200 and text.startswith("[") and re.fullmatch(r"[\[\],0-9]*", text) is not None,
                  "guided_grammar (recursive) prefix: %r" % (text,))
    check(stopped >= 3, "most recursive-grammar outputs end on their own (%d of 6)" % stopped)
    # Streaming: the concatenated deltas are the document.
    req = urllib.request.Request(ARGS.base_url + "/v1/completions", method="POST", data=json.dumps({
        "prompt": "JSON:", "guided_json": SCHEMAS[0], "max_tokens": MAX_TOKENS, "stream": True, "seed": 5,
        "temperature": 0.9}).encode(), headers={"Content-Type": "application/json",
                                                "Authorization": "Bearer " + ARGS.api_key})
    text = ""
    with urllib.request.urlopen(req, timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                text += json.loads(line[6:])["choices"][0]["text"]
    jsonschema.validate(json.loads(text), SCHEMAS[0])
    check(True, "streamed guided_json output validates: %r" % text)
    bad = [
        ({"guided_json": {"type": "string", "pattern": "a+"}}, "guided_json", "pattern"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "object", "properties": {"d": {"type": "string", "format": "date"}}}}}}, "response_format", "format"),
        ({"guided_regex": "(a)\\1"}, "guided_regex", "\\1"),
        ({"guided_regex": "(?=a)a"}, "guided_regex", "(?"),
        ({"guided_grammar": "root ::= root \"a\" | \"b\""}, "guided_grammar", "left-recursive"),
        ({"guided_grammar": "root ::= [0-9"}, "guided_grammar", "line 1"),
        ({"structured_outputs": {"structural_tag": "x"}}, "structured_outputs", "structural_tag"),
        ({"response_format": {"type": "grammar"}}, "response_format", None),
        ({"guided_json": {"type": "object"}, "guided_choice": ["a"]}, "guided_choice", None),
        ({"guided_choice": []}, "guided_choice", None),
        ({"guided_json": "{not json"}, "guided_json", None),
        ({"response_format": {"type": "json_schema"}}, "response_format", None),
    ]
    for extra, param, word in bad:
        body = {"prompt": "x", "max_tokens": 4}
        body.update(extra)
        status, out = post("/v1/completions", body)
        msg = (out or {}).get("error", {}).get("message", "")
        check(status == 400 and out["error"].get("param") == param and (word is None or word in msg),
              "400 naming %s for %s: %s" % (param, list(extra), msg))


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["schemas", "others"])
    p.add_argument("--base-url", required=True)
    p.add_argument("--api-key", required=True)
    p.add_argument("--requests-per-schema", type=int, default=10)
    p.add_argument("--concurrency", type=int, default=128)
    ARGS = p.parse_args()
    {"schemas": schemas_scenario, "others": others_scenario}[ARGS.scenario]()
    print("PASS", ARGS.scenario, flush=True)


if __name__ == "__main__":
    main()
