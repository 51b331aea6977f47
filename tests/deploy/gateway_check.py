"""The gateway's failure handling, each case made on purpose: the real HAProxy on the shipped
deploy/haproxy.cfg in front of three small stand-in replicas (threads of this script) whose
answers the test switches - 503 (draining), a connection closed without an answer (a crash
before the response), a stream cut after its headers, 500s, /health turning 503. Run by
tests/deploy/gateway_test.cc:

  python gateway_check.py --source-dir . --work-dir TMP

Checks: a 503 and an unanswered request are retried on another replica and the client sees 200;
a response whose headers went out is never retried (the cut reaches the client, the replica saw
the request once); 5 consecutive 500s open the circuit (the replica is marked down after exactly
5, the client saw those 5 and nothing more from it) and passing health checks close it again; a
replica whose /health says 503 leaves its pool while the others answer; a pool whose replica is
down sends its requests to the other pool's replicas (backups). Prints one line per check;
exits non-zero on the first failure.
"""
import argparse
import http.client
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from deploy_processes import Gateway, free_port, log_tail, wait_for


def check(cond, what):
    if not cond:
        print("FAIL:", what, flush=True)
        raise SystemExit(1)
    print("ok:", what, flush=True)


class QuietServer(ThreadingHTTPServer):
    # HAProxy ends each health check with a reset; that is not an error worth a traceback.
    def handle_error(self, request, client_address):
        pass


class StubReplica:
    """A stand-in for `lancet serve` with a switchable way to answer POSTs and /health."""

    def __init__(self, name):
        self.name = name
        self.port = free_port()
        self.mode = "ok"        # ok | 503 | 500 | drop | cut
        self.health = 200
        self.posts = 0
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def answer(self, status, body, ctype="application/json"):
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self.answer(stub.health, "ok\n" if stub.health == 200 else "draining\n", "text/plain")

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with stub.lock:
                    stub.posts += 1
                mode = stub.mode
                if mode == "ok":
                    self.answer(200, json.dumps({"server": stub.name}))
                elif mode in ("503", "500"):
                    self.answer(int(mode), json.dumps({"error": {"message": mode}}))
                elif mode == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                elif mode == "cut":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    chunk = b"data: {\"partial\": true}\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                    time.sleep(0.2)
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)

        self.server = QuietServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"


def request(gateway, body_bytes=20, headers=None):
    """POST /v1/completions through the gateway: (status, server header, body or the error)."""
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
    body = json.dumps({"prompt": "x" * body_bytes})
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        try:
            data = r.read().decode()
        except (http.client.IncompleteRead, ConnectionError) as e:
            data = e
        return r.status, r.getheader("X-Lancet-Server"), r.getheader("X-Lancet-Pool"), data
    finally:
        conn.close()


def state(gateway, backend, server):
    return gateway.server_states().get((backend, server), "")


def wait_state(gateway, backend, server, want, timeout_s=15):
    wait_for(f"{backend}/{server} {want}", lambda: state(gateway, backend, server).startswith(want), timeout_s, 0.1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source-dir", required=True)
    p.add_argument("--work-dir", required=True)
    args = p.parse_args()
    r1, r2, r3 = stubs = [StubReplica(n) for n in ("r1", "r2", "r3")]
    gateway = Gateway(os.path.join(args.source_dir, "deploy", "haproxy.cfg"), stubs, args.work_dir,
                      {"LANCET_LONG_PROMPT_BYTES": "1000"})
    ok = False
    try:
        gateway.start()
        for name, backend in (("r1", "lancet_short"), ("r2", "lancet_short"), ("r3", "lancet_long")):
            wait_state(gateway, backend, name, "UP")

        # Draining replica: 503 before any work -> retried on the other replica.
        r1.mode = "503"
        answers = [request(gateway) for _ in range(10)]
        check(all(a[0] == 200 and a[1] == "r2" for a in answers) and r1.posts >= 1,
              f"503s from a draining replica are retried on another one ({r1.posts} refused, clients saw 10 x 200)")
        r1.mode, r1.posts = "drop", 0
        answers = [request(gateway) for _ in range(10)]
        check(all(a[0] == 200 and a[1] == "r2" for a in answers) and r1.posts >= 1,
              f"requests a replica closed without answering are retried ({r1.posts} dropped, clients saw 10 x 200)")
        r1.mode = "ok"
        wait_state(gateway, "lancet_short", "r1", "UP")

        # A response that has started is never replayed.
        r1.mode = r2.mode = "cut"
        r1.posts = r2.posts = 0
        status, _, _, data = request(gateway)
        check(status == 200 and isinstance(data, Exception) and r1.posts + r2.posts == 1,
              f"a stream cut after its headers reaches the client and is not retried ({type(data).__name__}, "
              f"{r1.posts + r2.posts} attempt)")
        r1.mode = r2.mode = "ok"
        wait_state(gateway, "lancet_short", "r1", "UP")
        wait_state(gateway, "lancet_short", "r2", "UP")

        # Circuit breaker: 5 consecutive 500s mark r1 down at once.
        r1.mode, r1.posts = "500", 0
        seen_500 = 0
        for _ in range(30):
            status, server, _, _ = request(gateway)
            seen_500 += status == 500
            if state(gateway, "lancet_short", "r1").startswith("DOWN"):
                break
        check(state(gateway, "lancet_short", "r1").startswith("DOWN") and seen_500 == 5 and r1.posts == 5,
              f"5 consecutive 500s open the circuit (clients saw {seen_500} x 500, replica got {r1.posts})")
        answers = [request(gateway) for _ in range(6)]
        check(all(a[0] == 200 and a[1] == "r2" for a in answers), "with the circuit open, r2 takes every request")
        r1.mode = "ok"
        wait_state(gateway, "lancet_short", "r1", "UP")
        check(True, "passing health checks close the circuit again")

        # /health 503 (a replica starting to drain) takes it out of its pool.
        r2.health = 503
        wait_state(gateway, "lancet_short", "r2", "DOWN")
        answers = [request(gateway) for _ in range(6)]
        check(all(a[0] == 200 and a[1] == "r1" for a in answers), "a replica whose /health says 503 gets no requests")
        r2.health = 200

        # The long pool's only replica down: long prompts go to the short pool's replicas.
        r3.health = 503
        wait_state(gateway, "lancet_long", "r3", "DOWN")
        status, server, pool, _ = request(gateway, body_bytes=2000)
        check(status == 200 and pool == "long" and server in ("r1", "r2"),
              f"with r3 down, a long prompt is served by a backup of the long pool ({server})")
        ok = True
        print("PASS gateway", flush=True)
    finally:
        gateway.stop()
        if not ok:
            print("--- haproxy.log\n" + log_tail(gateway.log_path, 60), flush=True)


if __name__ == "__main__":
    main()
