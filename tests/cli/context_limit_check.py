#!/usr/bin/env python3
"""Starts `lancet serve` on a model with a small --max-model-len, sends completions whose prompt
+ max_tokens land just under, at and over the limit, and prints one JSON object with the status
codes and error bodies (checked by long_context_test.cc). Standard library only.

usage: context_limit_check.py LANCET MODEL_DIR MAX_MODEL_LEN
"""
import json
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def main():
    lancet, model, max_len = sys.argv[1], sys.argv[2], int(sys.argv[3])
    log = tempfile.NamedTemporaryFile(mode="w+", suffix=".log", delete=False)
    proc = subprocess.Popen([lancet, "serve", "--port", "0", model, "--threads", "2", "--max-model-len", str(max_len),
                             "--kv-cache-memory", str(16 << 20)], stdout=subprocess.DEVNULL, stderr=log)
    port = None
    try:
        for _ in range(600):
            with open(log.name) as f:
                m = re.search(r"listening on http://[0-9.]+:([0-9]+)", f.read())
            if m:
                port = int(m.group(1))
                break
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        if port is None:
            with open(log.name) as f:
                print(json.dumps({"error": "server did not start", "log": f.read()[-2000:]}))
            return 1
        # Listening comes before the model is loaded: wait for /health to say ready.
        for _ in range(1200):
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        out = {}
        n = max_len - 10
        cases = {
            "fits": {"prompt": [5] * n, "max_tokens": 10, "temperature": 0, "ignore_eos": True},
            "one_over": {"prompt": [5] * n, "max_tokens": 11, "temperature": 0},
            "prompt_too_long": {"prompt": [5] * (max_len + 5), "temperature": 0},
            "default_max_tokens": {"prompt": [5] * (max_len - 3), "temperature": 0, "ignore_eos": True},
        }
        for name, body in cases.items():
            code, j = post(port, "/v1/completions", body)
            out[name] = {"status": code, "body": j}
        print(json.dumps(out))
        return 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main())
