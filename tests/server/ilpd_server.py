"""Starting and talking to a real `ilpd serve` in tests (no mocks).

Server(args) picks a free port, starts the binary in $ILPD, waits for
/health and stops it with SIGTERM. request() returns (status, headers, body);
sse() parses an event stream into (event, data) pairs.
"""
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import time

ILPD = os.environ.get("ILPD", "./ilpd")
SHARED = os.environ.get("SHARED", "../shared")
STORIES = os.path.join(SHARED, "models", "stories260K", "stories260K.gguf")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, *args, model=STORIES, wait=True):
        self.port = free_port()
        self.log = open(os.path.join(os.environ.get("TESTS_TMP", "/tmp"), "server-%d.log" % self.port), "w+")
        self.proc = subprocess.Popen([ILPD, "serve", "-m", model, "--port", str(self.port), *args],
                                     stdout=self.log, stderr=self.log)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=60):
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited with %s" % self.proc.returncode)
            try:
                if self.request("GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server not ready")

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"content-type": "application/json"}
        h.update(headers or {})
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, out

    def json(self, method, path, body=None, headers=None):
        status, hdrs, out = self.request(method, path, body, headers)
        try:
            return status, hdrs, json.loads(out)
        except ValueError:
            return status, hdrs, out

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.seek(0)
        text = self.log.read()
        self.log.close()
        return self.proc.returncode, text


def sse(body):
    """Parses SSE text into a list of (event, data-dict); lines starting with ':' are comments."""
    events = []
    for block in body.decode("utf-8").split("\n\n"):
        ev, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if ev or data:
            events.append((ev, data))
    return events


PROBE_FEATURES = ["norm_growth", "norm_step", "cos_mean", "cos_std", "maxprob", "entropy", "log_len"]


def write_fixed_probe(model, path, n_layers, k, skip):
    """Write a probe bound to MODEL's SHA-256 that skips every layer in SKIP whatever the prompt: w = 0,
    b = 10 (P(can do without) ~ 1), and features standardised by a huge std so any prompt is in range."""
    sha = hashlib.sha256(open(model, "rb").read()).hexdigest()
    eye = [[1.0 if i == j else 0.0 for j in range(7)] for i in range(7)]
    probe = {"format": "ilpd-probe-2", "model_sha256": sha, "n_layers": n_layers, "k": k, "features": PROBE_FEATURES,
             "feature_mean": [0.0] * 7, "feature_std": [1e6] * 7, "threshold": 0.5, "confidence_floor": 0.4,
             "z_max": 4, "distance_max": 5, "feature_precision": eye, "parameters": 8 * len(skip),
             "candidates": [{"layer": l, "w": [0.0] * 7, "b": 10.0} for l in skip]}
    with open(path, "w") as f:
        json.dump(probe, f)


class Checks:
    def __init__(self):
        self.failed = 0

    def __call__(self, ok, name, why=""):
        if ok:
            print("ok - " + name, flush=True)
        else:
            self.failed += 1
            print("not ok - %s: %s" % (name, str(why)[:400]), flush=True)
        return ok
