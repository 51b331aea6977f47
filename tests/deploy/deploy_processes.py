"""The processes of a replica set on one machine, for tests/deploy/replica_set_check.py: `lancet
serve` replicas, HAProxy with the shipped deploy/haproxy.cfg, and Prometheus with the shipped
deploy/prometheus/ configuration, each on free loopback ports with its log in a work folder.
Nothing here knows what the test asserts.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml


_ports_handed_out = set()


def free_port():
    """A free loopback port not handed out before in this process: the kernel may offer a port
    again once its probe socket is closed, before the process it was meant for has bound it."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _ports_handed_out:
            _ports_handed_out.add(port)
            return port


def http_get(url, timeout=5):
    """Returns (status, body text); status 0 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, OSError):
        return 0, ""


def wait_for(what, cond, timeout_s, poll_s=0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(poll_s)
    raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")


def log_tail(path, lines=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


class Replica:
    """One `lancet serve` process on a fixed port, restartable on the same port."""

    def __init__(self, name, lancet, model, work_dir, extra_args):
        self.name = name
        self.port = free_port()
        self.cmd = [lancet, "serve", model, "--host", "127.0.0.1", "--port", str(self.port)] + extra_args
        self.log_path = os.path.join(work_dir, f"{name}.log")
        self.proc = None

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def healthy(self):
        return http_get(f"http://{self.address}/health", timeout=2)[0] == 200

    def wait_healthy(self, timeout_s=120):
        def ok():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{log_tail(self.log_path)}")
            return self.healthy()
        wait_for(f"{self.name} /health 200", ok, timeout_s)

    def metrics(self):
        """Samples of /metrics as {series name: summed value} (labels summed away)."""
        status, text = http_get(f"http://{self.address}/metrics")
        if status != 200:
            return None
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name_labels, _, value = line.rpartition(" ")
            name = name_labels.split("{", 1)[0]
            out[name] = out.get(name, 0.0) + float(value)
        return out

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout_s):
        return self.proc.wait(timeout=timeout_s)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Gateway:
    """HAProxy running the shipped config unchanged; the replicas and limits come in through
    the environment variables the config reads."""

    def __init__(self, config, replicas, work_dir, env):
        self.port = free_port()
        self.stats_port = free_port()
        self.config = config
        self.env = dict(os.environ)
        self.env.update({f"LANCET_REPLICA_{i + 1}": r.address for i, r in enumerate(replicas)})
        self.env.update({"LANCET_GATEWAY_ADDR": "127.0.0.1", "LANCET_GATEWAY_PORT": str(self.port),
                         "LANCET_GATEWAY_STATS_PORT": str(self.stats_port)})
        self.env.update(env)
        self.log_path = os.path.join(work_dir, "haproxy.log")
        self.proc = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def check_config(self):
        r = subprocess.run(["haproxy", "-c", "-f", self.config], env=self.env, capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr

    def start(self):
        log = open(self.log_path, "a")
        # -db: stay in the foreground, logs (log stdout) to our file.
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", self.config], env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT)
        log.close()
        wait_for("haproxy stats page", lambda: http_get(self.stats_url("/stats;csv"))[0] == 200, 20)

    def stats_url(self, path):
        return f"http://127.0.0.1:{self.stats_port}{path}"

    def server_states(self):
        """{(backend, server): status} from the stats CSV, e.g. ("lancet_short", "r1"): "UP"."""
        status, text = http_get(self.stats_url("/stats;csv"))
        if status != 200:
            return {}
        lines = text.splitlines()
        header = lines[0].lstrip("# ").split(",")
        out = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(",")))
            if row.get("svname") not in ("FRONTEND", "BACKEND", None):
                out[(row["pxname"], row["svname"])] = row["status"]
        return out

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


class Prometheus:
    """Prometheus on the shipped prometheus.yml and rules, copied into the work folder with two
    changes a minute-long test needs: 1 s scrape and rule intervals, and the target files (file
    service discovery) listing this run's replicas and gateway."""

    def __init__(self, config_dir, work_dir, replicas, gateway):
        self.port = free_port()
        self.dir = os.path.join(work_dir, "prometheus")
        os.makedirs(os.path.join(self.dir, "targets"))
        with open(os.path.join(config_dir, "prometheus.yml")) as f:
            config = yaml.safe_load(f)
        config["global"].update({"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"})
        with open(os.path.join(self.dir, "prometheus.yml"), "w") as f:
            yaml.safe_dump(config, f)
        for rules in config["rule_files"]:
            shutil.copy(os.path.join(config_dir, rules), os.path.join(self.dir, rules))
        with open(os.path.join(self.dir, "targets", "lancet.json"), "w") as f:
            json.dump([{"targets": [r.address for r in replicas]}], f)
        with open(os.path.join(self.dir, "targets", "haproxy.json"), "w") as f:
            json.dump([{"targets": [f"127.0.0.1:{gateway.stats_port}"]}], f)
        self.log_path = os.path.join(work_dir, "prometheus.log")
        self.proc = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def check(self):
        """promtool's own validation of the config (and through it the rules)."""
        r = subprocess.run(["promtool", "check", "config", os.path.join(self.dir, "prometheus.yml")],
                           capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr

    def start(self):
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={os.path.join(self.dir, 'prometheus.yml')}",
             f"--storage.tsdb.path={os.path.join(self.dir, 'data')}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_for("prometheus ready", lambda: http_get(self.url + "/-/ready")[0] == 200, 60)

    def api(self, path, **params):
        status, text = http_get(self.url + path + "?" + urllib.parse.urlencode(params), timeout=10)
        if status != 200:
            raise RuntimeError(f"prometheus {path} {params}: HTTP {status} {text[:300]}")
        body = json.loads(text)
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus {path} {params}: {body}")
        return body["data"]

    def query(self, expr, at=None):
        params = {"query": expr}
        if at is not None:
            params["time"] = at
        return self.api("/api/v1/query", **params)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
