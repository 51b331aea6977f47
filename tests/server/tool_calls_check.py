"""Drives a running `lancet serve` with tool-calling requests through the official `openai`
client and checks the answers with `jsonschema` (an independent validator). Used by
tests/server/tool_calls_e2e_test.cc.

  python tool_calls_check.py --base-url http://127.0.0.1:PORT --api-key KEY

Checks: a named tool_choice gives exactly one call to that function whose arguments validate
against its schema (finish_reason "tool_calls"); the same request streamed and reassembled the
way client code does gives the same call; the call and a tool result sent back with
tool_choice "none" give a text answer; "required" over two tools calls one of them; "auto"
answers with valid calls or text, streamed the same; /tokenize counts the tools; bad tool requests are 400s (openai.BadRequestError) naming
the field.
"""
import argparse
import json
import sys

import jsonschema
import openai

WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "enum": ["Paris", "London", "Tokyo"]},
                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 8}}, "required": ["tz"],
        "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Current time in a time zone",
                                      "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
QUESTION = [{"role": "user", "content": "What is the weather in Paris right now?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def check(cond, what):
    if not cond:
        print("FAIL:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def valid_call(name, arguments):
    args = json.loads(arguments)
    jsonschema.validate(args, SCHEMAS[name])
    return args


def named_call(client):
    r = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice=NAMED,
                                       max_tokens=64, temperature=0, seed=1)
    c = r.choices[0]
    check(c.finish_reason == "tool_calls", f"named: finish_reason tool_calls ({c.finish_reason})")
    check(c.message.content is None, "named: content is null")
    calls = c.message.tool_calls or []
    check(len(calls) == 1, f"named: exactly one call ({len(calls)})")
    call = calls[0]
    check(call.type == "function" and call.id.startswith("chatcmpl-tool-"), f"named: call id {call.id}")
    check(call.function.name == "get_weather", f"named: name {call.function.name}")
    args = valid_call(call.function.name, call.function.arguments)
    check(True, f"named: arguments {args} validate")
    check(r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0, f"named: usage {r.usage}")
    return call


def streamed_call(client, expected):
    stream = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice=NAMED,
                                            max_tokens=64, temperature=0, seed=1, stream=True,
                                            stream_options={"include_usage": True})
    calls, finish, roles, usage, fragments = {}, None, 0, None, 0
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        roles += d.role == "assistant"
        for tc in d.tool_calls or []:
            e = calls.setdefault(tc.index, {"id": None, "type": None, "name": "", "arguments": ""})
            if tc.id:
                e["id"] = tc.id
            if tc.type:
                e["type"] = tc.type
            if tc.function and tc.function.name:
                e["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                e["arguments"] += tc.function.arguments
                fragments += 1
        finish = chunk.choices[0].finish_reason or finish
    check(roles == 1, "stream: one role delta")
    check(finish == "tool_calls", f"stream: finish_reason tool_calls ({finish})")
    check(list(calls) == [0], f"stream: one call at index 0 ({list(calls)})")
    e = calls[0]
    check(e["id"] and e["id"].startswith("chatcmpl-tool-") and e["type"] == "function", f"stream: id/type {e}")
    check(e["name"] == expected.function.name, f"stream: name {e['name']}")
    check(json.loads(e["arguments"]) == json.loads(expected.function.arguments),
          f"stream: arguments {e['arguments']} == non-streamed {expected.function.arguments}")
    check(usage is not None and usage.completion_tokens > 0, f"stream: usage {usage}")
    check(fragments > 1, f"stream: arguments arrive as they are sampled ({fragments} fragments)")


def round_trip(client, call):
    messages = QUESTION + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call.id, "type": "function",
                         "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "sky": "clear"})},
    ]
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, tool_choice="none",
                                       max_tokens=32, temperature=0)
    c = r.choices[0]
    check(c.finish_reason in ("stop", "length"), f"round trip: finish_reason {c.finish_reason}")
    check(isinstance(c.message.content, str) and c.message.content != "", f"round trip: text {c.message.content!r}")
    check(not c.message.tool_calls, "round trip: no tool calls with tool_choice none")


def required_call(client):
    r = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, tool_choice="required",
                                       max_tokens=64, temperature=0.7, seed=3)
    c = r.choices[0]
    calls = c.message.tool_calls or []
    check(c.finish_reason == "tool_calls" and len(calls) == 1, f"required: one call ({c.finish_reason})")
    check(calls[0].function.name in SCHEMAS, f"required: name {calls[0].function.name}")
    valid_call(calls[0].function.name, calls[0].function.arguments)
    check(True, f"required: arguments {calls[0].function.arguments} validate")


def auto_answer(client):
    r = client.chat.completions.create(model=MODEL, messages=QUESTION, tools=TOOLS, max_tokens=48, temperature=0)
    c = r.choices[0]
    if c.message.tool_calls:
        check(c.finish_reason == "tool_calls", "auto: calls end with tool_calls")
        for t in c.message.tool_calls:
            valid_call(t.function.name, t.function.arguments) if t.function.name in SCHEMAS else check(False, "auto")
        check(True, "auto: parsed calls are valid")
    else:
        check(isinstance(c.message.content, str), f"auto: plain content {c.message.content!r}")


def auto_streamed(client):
    """auto, streamed: the reassembled content or calls equal the non-streamed answer."""
    kw = dict(model=MODEL, messages=QUESTION, tools=TOOLS, max_tokens=48, temperature=0)
    ref = client.chat.completions.create(**kw).choices[0]
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            e = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            e["name"] += (tc.function.name or "") if tc.function else ""
            e["arguments"] += (tc.function.arguments or "") if tc.function else ""
        finish = chunk.choices[0].finish_reason or finish
    check(finish == ref.finish_reason, f"auto stream: finish_reason {finish} == {ref.finish_reason}")
    if ref.message.tool_calls:
        want = [{"name": t.function.name, "arguments": t.function.arguments} for t in ref.message.tool_calls]
        check([calls[i] for i in sorted(calls)] == want, "auto stream: same calls")
    else:
        check(content == ref.message.content and not calls, f"auto stream: same content {content!r}")


def tokenize_with_tools(base_url, api_key):
    """/tokenize renders tools like a chat request: the prompt grows by the tool block."""
    import urllib.request

    def count(body):
        req = urllib.request.Request(base_url + "/tokenize", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + api_key})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())["count"]
    plain, with_tools = count({"messages": QUESTION}), count({"messages": QUESTION, "tools": TOOLS})
    check(with_tools > plain + 20, f"tokenize: tools add tokens ({plain} -> {with_tools})")


def refusals(client):
    bad = [
        ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools"),
        ({"tools": [TOOLS[0], TOOLS[0]]}, "tools"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "send_mail"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]}, "tools"),
    ]
    for extra, param in bad:
        try:
            client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4, **extra)
            check(False, f"400 for {extra}")
        except openai.BadRequestError as e:
            check(e.status_code == 400 and e.param == param, f"400 naming {param}: {e.message[:90]}")


def main():
    global MODEL
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--api-key", default="none")
    args = p.parse_args()
    client = openai.OpenAI(base_url=args.base_url + "/v1", api_key=args.api_key, timeout=60, max_retries=0)
    MODEL = client.models.list().data[0].id
    call = named_call(client)
    streamed_call(client, call)
    round_trip(client, call)
    required_call(client)
    auto_answer(client)
    auto_streamed(client)
    tokenize_with_tools(args.base_url, args.api_key)
    refusals(client)
    print("PASS tools", flush=True)


MODEL = None
if __name__ == "__main__":
    main()
