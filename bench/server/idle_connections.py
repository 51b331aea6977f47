"""Thousands of idle and slow connections against one `lancet serve` (the connection layer's
event loop): they must cost memory, not threads.

Starts `lancet serve` on the given model, waits until it answers, warms it up with a round of
streams and takes the server's RSS as its idle level. Then it opens --idle keep-alive
connections (each sends one GET /version, reads the answer and stays open) and --slow clients
that send a request header one byte at a time (one byte per client per --slow-interval
seconds, never finishing while the load runs). With all of them open it measures /health
latency on fresh connections (--health-samples, one after another, from a thread of its own),
runs --streams concurrent streamed completions (and /health again while they run), then checks
that every idle connection still answers on its socket. The peak RSS above the idle level is
read from /proc/PID/status (VmHWM, reset before the load through /proc/PID/clear_refs).

Prints one JSON object; exit status 1 when a connection could not be opened, /health p99 is
not below --max-health-ms, a stream did not complete, an idle connection was dropped, or the
RSS growth is not below --max-rss-mb.

  python bench/server/idle_connections.py --lancet build/lancet \
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --idle 5000 --slow 1000 --streams 64
"""
import argparse
import asyncio
import http.client
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def threads_of(pid):
    return rss_kib(pid, "Threads")


def health_latencies_ms(port, samples):
    """GET /health on a fresh connection each time; latency from connect to the full answer."""
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/health")
        r = conn.getresponse()
        r.read()
        conn.close()
        if r.status != 200:
            raise RuntimeError(f"/health answered {r.status}")
        out.append((time.perf_counter() - t0) * 1000)
        time.sleep(0.02)
    return out


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    return int(head[9:12])


async def open_idle(port, n, opened):
    req = b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    sem = asyncio.Semaphore(256)

    async def one():
        async with sem:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(req)
            status = await read_response(reader)
            if status != 200:
                raise RuntimeError(f"idle connection: /version answered {status}")
            opened.append((reader, writer))

    await asyncio.gather(*(one() for _ in range(n)))


async def open_slow(port, n):
    sem = asyncio.Semaphore(256)
    conns = []

    async def one():
        async with sem:
            conns.append(await asyncio.open_connection("127.0.0.1", port))

    await asyncio.gather(*(one() for _ in range(n)))
    return conns


async def trickle(conns, header, interval, stop):
    """One more header byte to every slow client each interval; never the last 4."""
    pos = 0
    while not stop.is_set():
        if pos + 4 < len(header):
            for _, w in conns:
                w.write(header[pos:pos + 1])
            pos += 1
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except asyncio.TimeoutError:
            pass
    return pos


async def stream(port, i, max_tokens):
    body = json.dumps({"prompt": f"Write a list of {i % 7 + 3} fruits:", "max_tokens": max_tokens,
                       "temperature": 0, "stream": True}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    data = await reader.read(-1)
    writer.close()
    return data.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in data


async def warm_up(port, args):
    done = await asyncio.gather(*(stream(port, i, args.max_tokens) for i in range(args.streams)))
    if not all(done):
        raise RuntimeError("a warm-up stream did not complete")


async def load(args, port, pid, result):
    idle = []
    t0 = time.perf_counter()
    await open_idle(port, args.idle, idle)
    result["idle_open_s"] = round(time.perf_counter() - t0, 2)
    slow = await open_slow(port, args.slow)
    header = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow-client\r\n" \
             b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
    stop = asyncio.Event()
    trickler = asyncio.create_task(trickle(slow, header, args.slow_interval, stop))
    await asyncio.sleep(2 * args.slow_interval)  # every slow client has started its header
    result["server_threads_under_load"] = threads_of(pid)

    loop = asyncio.get_running_loop()
    lat = await loop.run_in_executor(None, health_latencies_ms, port, args.health_samples)
    result["health_ms_idle_load"] = {"p50": round(pct(lat, 0.5), 2), "p99": round(pct(lat, 0.99), 2),
                                     "max": round(max(lat), 2)}

    t0 = time.perf_counter()
    during = loop.run_in_executor(None, health_latencies_ms, port, args.health_samples)
    streams = await asyncio.gather(*(stream(port, i, args.max_tokens) for i in range(args.streams)))
    lat2 = await during
    result["streams_completed"] = sum(streams)
    result["streams_s"] = round(time.perf_counter() - t0, 2)
    result["health_ms_during_streams"] = {"p50": round(pct(lat2, 0.5), 2), "p99": round(pct(lat2, 0.99), 2),
                                          "max": round(max(lat2), 2)}
    result["rss_peak_mib"] = round(rss_kib(pid, "VmHWM") / 1024, 1)
    result["rss_under_load_mib"] = round(rss_kib(pid) / 1024, 1)

    # Every idle connection still answers on its socket.
    alive = 0
    for reader, writer in idle:
        try:
            writer.write(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            alive += await asyncio.wait_for(read_response(reader), 30) == 200
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            pass
    result["idle_still_answering"] = alive
    stop.set()
    result["slow_header_bytes_sent"] = await trickler
    for _, w in idle + slow:
        w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lancet", default="build/lancet")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--idle", type=int, default=5000)
    ap.add_argument("--slow", type=int, default=1000)
    ap.add_argument("--slow-interval", type=float, default=1.0)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--health-samples", type=int, default=50)
    ap.add_argument("--max-health-ms", type=float, default=100)
    ap.add_argument("--max-rss-mb", type=float, default=1024)
    args = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.idle + args.slow + args.streams + 256
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))

    port = free_port()
    # The deadlines are raised so that every connection stays open for the whole run (the
    # default header deadline of 10 s would close the slow clients with 408 midway).
    cmd = [args.lancet, "serve", "--model", args.model, "--port", str(port), "--max-num-seqs", str(args.streams),
           "--max-concurrent-requests", str(args.streams), "--max-model-len", "512",
           "--header-timeout", "600", "--keep-alive-timeout", "600"]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    result = {"idle": args.idle, "slow": args.slow, "streams": args.streams}
    try:
        deadline = time.time() + 120
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None or time.time() > deadline:
                raise RuntimeError("the server did not start: " + (server.stderr.read() if server.poll() else ""))
            time.sleep(0.2)
        # Warm up (engine buffers of a full batch), then take the idle level and reset the peak.
        asyncio.run(warm_up(port, args))
        result["server_threads_idle"] = threads_of(server.pid)
        rss_idle = rss_kib(server.pid)
        with open(f"/proc/{server.pid}/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        result["rss_idle_mib"] = round(rss_idle / 1024, 1)
        asyncio.run(load(args, port, server.pid, result))
        result["rss_growth_mib"] = round(result["rss_peak_mib"] - result["rss_idle_mib"], 1)
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    ok = (result.get("health_ms_idle_load", {}).get("p99", 1e9) < args.max_health_ms and
          result.get("health_ms_during_streams", {}).get("p99", 1e9) < args.max_health_ms and
          result.get("streams_completed") == args.streams and result.get("idle_still_answering") == args.idle and
          result.get("rss_growth_mib", 1e9) < args.max_rss_mb)
    result["ok"] = ok
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
