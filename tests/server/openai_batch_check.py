"""Drives the Files and Batch APIs of a running `lancet serve` with the official `openai` client.
Prints one line per check and exits non-zero on the first failure. Used by
tests/server/server_batch_test.cc.

  python openai_batch_check.py --base-url http://127.0.0.1:PORT --api-key KEY --work-dir DIR

Checks: files.create from an open file (purpose "batch"), retrieve/list/content/delete;
batches.create with metadata, polled with batches.retrieve until completed; every good line's
custom_id in the output file with a 200 chat completion; the bad lines (bad JSON, another url)
in the error file; batches.list; a cancel of a running batch ends as cancelled with the server
still answering; unknown ids and a wrong purpose raise the client's typed errors.
"""
import argparse
import json
import os
import sys
import time

import openai

ARGS = None


def check(cond, what):
    if not cond:
        print("FAIL:", what, flush=True)
        sys.exit(1)
    print("ok:", what, flush=True)


def chat_line(cid, text, max_tokens):
    return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                       "body": {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
                                "temperature": 0}})


def wait_final(c, bid, timeout):
    t0 = time.time()
    b = c.batches.retrieve(bid)
    seen = {b.status}
    while b.status not in ("completed", "failed", "cancelled", "expired") and time.time() - t0 < timeout:
        time.sleep(0.1)
        b = c.batches.retrieve(bid)
        seen.add(b.status)
    return b, seen


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--api-key", default="none")
    p.add_argument("--work-dir", required=True)
    ARGS = p.parse_args()
    c = openai.OpenAI(base_url=ARGS.base_url + "/v1", api_key=ARGS.api_key, max_retries=0, timeout=120)

    good = ["g%d" % i for i in range(8)]
    lines = [chat_line(cid, "Name a colour, number %d." % i, 8) for i, cid in enumerate(good)]
    lines.insert(3, "{not json")
    lines.insert(5, json.dumps({"custom_id": "wrong-url", "method": "POST", "url": "/v1/completions",
                                "body": {"prompt": "x", "max_tokens": 2}}))
    path = os.path.join(ARGS.work_dir, "input.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")

    f = c.files.create(file=open(path, "rb"), purpose="batch")
    check(f.id.startswith("file-") and f.object == "file" and f.purpose == "batch", "files.create: file object")
    check(f.bytes == os.path.getsize(path) and f.filename == "input.jsonl", "files.create: bytes and filename")
    check(c.files.retrieve(f.id).id == f.id, "files.retrieve")
    check(any(x.id == f.id for x in c.files.list().data), "files.list has the upload")
    check(c.files.content(f.id).read() == open(path, "rb").read(), "files.content returns the upload")

    b = c.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h",
                         metadata={"job": "e2e"})
    check(b.id.startswith("batch_") and b.object == "batch" and b.status == "validating", "batches.create")
    check(b.metadata == {"job": "e2e"}, "metadata kept")
    b, seen = wait_final(c, b.id, 120)
    check(b.status == "completed", "batch completed (%s; seen %s)" % (b.status, sorted(seen)))
    check(b.request_counts.total == 10 and b.request_counts.completed == 8 and b.request_counts.failed == 2,
          "request_counts %s" % b.request_counts)
    check(b.output_file_id and b.error_file_id, "output and error files")
    out = [json.loads(x) for x in c.files.content(b.output_file_id).text.splitlines() if x.strip()]
    ids = [r["custom_id"] for r in out]
    check(sorted(ids) == sorted(good), "every good custom_id is in the output")
    for r in out:
        body = r["response"]["body"]
        check(r["response"]["status_code"] == 200 and r["error"] is None and r["id"].startswith("batch_req_"),
              "%s: status 200" % r["custom_id"])
        check(body["object"] == "chat.completion" and isinstance(body["choices"][0]["message"]["content"], str)
              and body["usage"]["completion_tokens"] >= 1, "%s: a chat completion body" % r["custom_id"])
    errs = [json.loads(x) for x in c.files.content(b.error_file_id).text.splitlines() if x.strip()]
    check(len(errs) == 2, "two error entries")
    check(errs[0]["custom_id"] is None and errs[0]["error"]["code"] == "invalid_json", "bad JSON line entry")
    check(errs[1]["custom_id"] == "wrong-url" and errs[1]["error"]["code"] == "mismatched_endpoint",
          "wrong url line entry")
    check(c.files.retrieve(b.output_file_id).purpose == "batch_output", "output file purpose batch_output")
    listed = c.batches.list(limit=5)
    check(any(x.id == b.id for x in listed.data), "batches.list has the batch")

    # Cancel while running.
    long_lines = [chat_line("long%d" % i, "Tell a long story about a cat, part %d." % i, 200) for i in range(30)]
    path2 = os.path.join(ARGS.work_dir, "long.jsonl")
    with open(path2, "w") as fh:
        fh.write("\n".join(long_lines) + "\n")
    f2 = c.files.create(file=open(path2, "rb"), purpose="batch")
    b2 = c.batches.create(input_file_id=f2.id, endpoint="/v1/chat/completions", completion_window="24h")
    t0 = time.time()
    while c.batches.retrieve(b2.id).status == "validating" and time.time() - t0 < 30:
        time.sleep(0.05)
    time.sleep(0.5)
    cb = c.batches.cancel(b2.id)
    check(cb.status in ("cancelling", "cancelled"), "batches.cancel -> %s" % cb.status)
    t0 = time.time()
    b2, _ = wait_final(c, b2.id, 30)
    check(b2.status == "cancelled" and b2.cancelled_at, "cancelled batch ends as cancelled")
    check(time.time() - t0 < 10, "cancel took effect within 10 s")
    check(b2.request_counts.completed < 30, "cancel stopped the batch early")
    r = c.chat.completions.create(messages=[{"role": "user", "content": "hi"}], model=c.models.list().data[0].id,
                                  max_tokens=2)
    check(r.choices[0].finish_reason in ("length", "stop"), "server answers after the cancel")

    # Typed errors.
    for what, fn, exc in [
        ("unknown batch", lambda: c.batches.retrieve("batch_0123"), openai.NotFoundError),
        ("unknown file", lambda: c.files.retrieve("file-0123"), openai.NotFoundError),
        ("batch of unknown file", lambda: c.batches.create(input_file_id="file-0123", endpoint="/v1/chat/completions",
                                                           completion_window="24h"), openai.NotFoundError),
        ("wrong purpose", lambda: c.files.create(file=open(path, "rb"), purpose="fine-tune"), openai.BadRequestError),
        ("wrong endpoint", lambda: c.batches.create(input_file_id=f.id, endpoint="/v1/embeddings",
                                                    completion_window="24h"), openai.BadRequestError),
        ("cancel completed", lambda: c.batches.cancel(b.id), openai.ConflictError),
    ]:
        try:
            fn()
            check(False, what + " raised")
        except exc as e:
            check(isinstance(e.body, dict) and "message" in e.body, what + ": %s with an envelope" % exc.__name__)
    d = c.files.delete(f.id)
    check(d.deleted and d.id == f.id, "files.delete")
    try:
        c.files.retrieve(f.id)
        check(False, "deleted file is gone")
    except openai.NotFoundError:
        check(True, "deleted file is gone")
    print("PASS batch", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
