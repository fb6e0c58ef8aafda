#!/usr/bin/python3
"""Soak test: the real server under locust for minutes, checking for leaks.

  /usr/bin/python3 scripts/load/soak.py [-m models/ilpd-demo-F16.gguf] [-u 50] [-t 120] [--warmup 20]

Starts `./ilpd serve` on a free port, runs scripts/load/locustfile.py headless with
U users for a warm-up, reads the server's RSS, runs U users for T seconds,
reads the RSS again, and prints requests, failures (a 529 with retry-after is
back-pressure, not a failure; the server's own counters say how many),
p50/p99 latency, throughput and the RSS change. Exits 1 when anything failed
or the RSS grew more than 5% after warm-up.
"""
import argparse
import csv
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def locust(port, users, seconds, csv_prefix):
    cmd = ["locust", "-f", os.path.join(ROOT, "scripts/load/locustfile.py"), "--headless", "-u", str(users), "-r", str(users),
           "-t", "%ds" % seconds, "--host", "http://127.0.0.1:%d" % port, "--csv", csv_prefix, "--only-summary"]
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    with open(csv_prefix + "_stats.csv") as f:
        return [r for r in csv.DictReader(f) if r["Name"] == "Aggregated"][0]


def status_counts(port):
    text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    out = {}
    for m in re.finditer(r'^ilpd_requests_total\{[^}]*status="(\d+)"[^}]*\} (\d+)', text, re.M):
        out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(2))
    return out


def served_latency_ms(log_path):
    """Return the server-side durations (ms) of the 200 answers to /v1/messages in its log."""
    out = []
    with open(log_path) as f:
        for line in f:
            if '"event":"request"' in line and '"route":"messages"' in line and '"status":200' in line:
                m = re.search(r'"duration_ms":([0-9.]+)', line)
                if m:
                    out.append(float(m.group(1)))
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models/ilpd-demo-F16.gguf"))
    ap.add_argument("-u", "--users", type=int, default=50)
    ap.add_argument("-t", "--seconds", type=int, default=120)
    ap.add_argument("--warmup", type=int, default=20)
    a = ap.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    tmp = tempfile.mkdtemp(prefix="ilpd-soak-")
    log = open(os.path.join(tmp, "server.log"), "w")
    srv = subprocess.Popen([os.path.join(ROOT, "ilpd"), "serve", "-m", a.model, "--port", str(port)], stderr=log)
    try:
        for _ in range(300):
            try:
                if urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        rss0 = rss_kib(srv.pid)
        locust(port, a.users, a.warmup, os.path.join(tmp, "warmup"))
        rss_warm = rss_kib(srv.pid)
        t0 = time.time()
        agg = locust(port, a.users, a.seconds, os.path.join(tmp, "soak"))
        wall = time.time() - t0
        time.sleep(1)
        rss_end = rss_kib(srv.pid)
        codes = status_counts(port)
    finally:
        srv.terminate()
        rc = srv.wait(60)
    n, fails = int(agg["Request Count"]), int(agg["Failure Count"])
    served = served_latency_ms(os.path.join(tmp, "server.log"))
    growth = (rss_end - rss_warm) / rss_warm
    print("model          %s" % a.model)
    print("load           %d users for %d s (after %d s of warm-up), locust wall %.0f s" % (a.users, a.seconds, a.warmup, wall))
    print("requests       %d, failures %d, %.1f req/s" % (n, fails, float(agg["Requests/s"])))
    print("latency        (locust, every answer incl. 529s) p50 %s ms, p99 %s ms, max %.0f ms" % (agg["50%"], agg["99%"], float(agg["Max Response Time"])))
    if served:
        print("served (200)   %d answers, server-side p50 %.0f ms, p99 %.0f ms" % (
            len(served), served[len(served) // 2], served[min(len(served) - 1, int(len(served) * 0.99))]))
    print("server status  %s (all requests, warm-up included; 529 = queue full, answered with retry-after;\n"
          "               0 = the client left first, e.g. when locust stops)" %
          ", ".join("%s: %d" % kv for kv in sorted(codes.items())))
    print("RSS            start %.1f MiB, after warm-up %.1f MiB, end %.1f MiB (%+.2f%%)" %
          (rss0 / 1024, rss_warm / 1024, rss_end / 1024, 100 * growth))
    print("server exit    %d" % rc)
    bad = fails > 0 or growth > 0.05 or rc != 0 or any(c not in ("0", "200", "529") for c in codes)
    print("RESULT         %s" % ("FAIL" if bad else "PASS"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
