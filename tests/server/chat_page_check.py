"""Loads the built-in chat page in headless Chromium (Debian's `chromium`), lets it send a
question (the page's ?q= parameter), watches the DOM through the DevTools protocol over
--remote-debugging-pipe while the answer streams in, saves a screenshot, and checks the final
answer equals `lancet generate --chat` for the same greedy request. With --api-key the page
must ignore a `key` URL parameter and ask for the key; the script then types it in.

  python chat_page_check.py --base-url URL --api-key KEY --model-path M --lancet BIN --screenshot OUT.png
"""
import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse


class DevTools:
    """Chrome DevTools protocol over the NUL-delimited JSON pipe (fds 3 and 4 of the browser)."""

    def __init__(self, chromium, user_dir):
        cmd_r, self.cmd_w = os.pipe()
        self.resp_r, resp_w = os.pipe()

        def child_fds():
            # The pipe ends may themselves be fds 3/4: move them out of the way first.
            a, b = os.dup(cmd_r), os.dup(resp_w)
            os.dup2(a, 3)
            os.dup2(b, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--user-data-dir=" + user_dir, "--window-size=900,700", "about:blank"],
            close_fds=False, preexec_fn=child_fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(resp_w)
        self.buf = b""
        self.next_id = 0

    def call(self, method, params=None, session=None, timeout=30):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    if "error" in reply:
                        raise RuntimeError("%s: %s" % (method, reply["error"]))
                    return reply["result"]
            chunk = os.read(self.resp_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self.buf += chunk
        raise RuntimeError("timeout waiting for " + method)

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--api-key", default="")
    p.add_argument("--model-path", required=True)
    p.add_argument("--lancet", required=True)
    p.add_argument("--screenshot", required=True)
    args = p.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("SKIP: chromium is not installed")
        return 77

    question = "What is the capital of France?"
    max_tokens = 32
    ref = subprocess.run([args.lancet, "generate", "--model", args.model_path, "--prompt", question, "--chat",
                          "--max-tokens", str(max_tokens), "--temperature", "0", "--json", "--quiet", "--threads", "1"],
                         capture_output=True, text=True, timeout=120)
    if ref.returncode != 0:
        print("FAIL: lancet generate:", ref.stderr)
        return 1
    expected = json.loads(ref.stdout)["text"]

    # The key is never part of the URL: a `key` parameter is ignored, and the page asks for it.
    url = args.base_url + "/?" + urllib.parse.urlencode(
        {"q": question, "key": args.api_key, "max_tokens": max_tokens, "temperature": 0})
    enter_key = ("(() => { const k = document.getElementById('api_key'); k.value = %s; "
                 "k.dispatchEvent(new Event('change')); return true; })()" % json.dumps(args.api_key))
    with tempfile.TemporaryDirectory() as user_dir:
        dt = DevTools(chromium, user_dir)
        try:
            target = dt.call("Target.createTarget", {"url": url})["targetId"]
            session = dt.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            probe = ("JSON.stringify({state: (document.body && document.body.dataset.state) || 'loading', "
                     "answer: (document.getElementById('answer-1') || {}).textContent || '', "
                     "model: (document.getElementById('model') || {}).textContent || ''})")
            partials, state, deadline, asked_for_key = set(), None, time.time() + 90, False
            while time.time() < deadline:
                r = dt.call("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session)
                dom = json.loads(r["result"]["value"])
                state = dom["state"]
                if state == "need-key" and not asked_for_key:
                    asked_for_key = True
                    dt.call("Runtime.evaluate", {"expression": enter_key, "returnByValue": True}, session)
                    continue
                if state == "streaming" and dom["answer"]:
                    partials.add(dom["answer"])
                if state in ("done", "error"):
                    break
                time.sleep(0.01)
            shot = dt.call("Page.captureScreenshot", {"format": "png"}, session)
            with open(args.screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        finally:
            dt.close()
    print("state:", state, "| model:", dom["model"], "| partial answers seen:", len(partials))
    print("answer:", repr(dom["answer"]))
    print("expected:", repr(expected))
    ok = True
    for cond, what in [(asked_for_key == bool(args.api_key), "the page asked for the key (not taken from the URL)"),
                       (dom["model"] not in ("", "connecting...") and "unavailable" not in dom["model"],
                        "the page shows the model name"),
                       (state == "done", "the page finished streaming"),
                       (dom["answer"] == expected, "the answer equals lancet generate --chat"),
                       (any(len(p) < len(expected) for p in partials), "partial answers were visible while streaming"),
                       (os.path.getsize(args.screenshot) > 1000, "screenshot written")]:
        print("ok:" if cond else "FAIL:", what)
        ok = ok and cond
    if ok:
        print("PASS chat page")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
