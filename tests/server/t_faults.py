#!/usr/bin/python3
"""Faults the server must survive: bad model and probe files at start,
clients that vanish (mid-stream, while queued, mid-body), oversized headers,
a client that trickles one byte a second, a simulated KV allocation failure,
SIGTERM during a stream, 1,000 disconnects in a row without leaking
connections, and the optional per-key rate limit. Also the idle warm-up
passes (keep_warm): they run while nothing else does, change no answer and
count as no request."""
import json
import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ilpd_server import ILPD, STORIES, Checks, Server, sse  # noqa: E402
import subprocess  # noqa: E402

check = Checks()
TMP = os.environ.get("TESTS_TMP", "/tmp")
BODY = {"model": "m", "max_tokens": 20, "temperature": 0, "messages": [{"role": "user", "content": "Once upon a time"}]}


def raw_post(port, body, send_all=True, extra=b""):
    s = socket.create_connection(("127.0.0.1", port))
    data = json.dumps(body).encode()
    head = b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra + \
        b"Content-Length: %d\r\n\r\n" % len(data)
    s.sendall(head + (data if send_all else data[:10]))
    return s


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def start_failures():
    p = subprocess.run([ILPD, "serve", "-m", os.path.join(TMP, "missing.gguf"), "--port", "0"], capture_output=True, text=True,
                       timeout=30)
    check(p.returncode == 1 and "missing.gguf" in p.stderr and "cannot open" in p.stderr,
          "a missing model file at start: exit 1 with a clear message", (p.returncode, p.stderr[-200:]))
    bad = os.path.join(TMP, "corrupt.gguf")
    with open(STORIES, "rb") as f:
        open(bad, "wb").write(f.read()[:5000])
    p = subprocess.run([ILPD, "serve", "-m", bad, "--port", "0"], capture_output=True, text=True, timeout=30)
    check(p.returncode == 1 and "corrupt.gguf" in p.stderr, "a corrupt model file at start: exit 1 naming it", p.stderr[-200:])
    probe = os.path.join(TMP, "corrupt-probe.json")
    open(probe, "w").write('{"model_sha256": 12, "k": ')
    s = Server("--probe", probe)
    try:
        st, h, o = s.json("POST", "/v1/messages", BODY)
        check(st == 200 and h.get("x-layer-status") == "off", "a corrupt probe file: skipping off, the server serves", (st, h))
    finally:
        rc, log = s.stop()
    check("corrupt-probe.json" in log and "invalid probe file" in log, "the corrupt probe is named in the log")


def vanishing_clients():
    s = Server("--queue", "4", "--test-kv-fail-request", "6")
    fail = []
    try:
        fds0 = open_fds(s.proc.pid)
        long = raw_post(s.port, dict(BODY, max_tokens=450, stream=True))
        queued = raw_post(s.port, dict(BODY, max_tokens=450))
        time.sleep(0.05)
        queued.close()                      # gone while queued
        long.recv(100)
        long.close()                        # gone mid-stream
        half = raw_post(s.port, BODY, send_all=False)
        half.close()                        # gone mid-body
        big = socket.create_connection(("127.0.0.1", s.port))
        big.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
        try:
            reply = big.recv(100)
        except OSError:
            reply = b""
        big.close()
        check(not reply.startswith(b"HTTP/1.1 200"), "oversized headers are refused", reply[:40])
        t0 = time.time()
        st, h, o = s.json("POST", "/v1/messages", BODY)
        check(st == 200 and time.time() - t0 < 5, "after clients vanish mid-stream, while queued and mid-body the next request is served",
              (st, time.time() - t0))
        # Requests so far that reached the engine: 1 (long) + maybe the queued one + 1. Make sure #6 is a KV failure.
        codes = []
        for _ in range(6):
            st, h, o = s.json("POST", "/v1/messages", BODY)
            codes.append((st, h.get("x-should-retry"), o.get("error", {}).get("type") if isinstance(o, dict) else None,
                          h.get("request-id")))
        fail = [c for c in codes if c[0] == 500]
        check(len(fail) == 1 and fail[0][1] == "false" and fail[0][2] == "api_error" and codes[-1][0] == 200,
              "a simulated KV allocation failure: 500 api_error with x-should-retry false, then the next request is served", codes)
        for _ in range(1000):
            c = raw_post(s.port, dict(BODY, max_tokens=100, stream=True))
            c.recv(1)
            c.close()
        time.sleep(1.0)
        st, h, o = s.json("POST", "/v1/messages", BODY)
        for _ in range(50):  # the worker books the job as finished just after the answer leaves
            st2, h2, m = s.request("GET", "/metrics")
            running = [l for l in m.decode().splitlines() if l.startswith("ilpd_requests_running ")]
            if running == ["ilpd_requests_running 0"]:
                break
            time.sleep(0.02)
        for _ in range(100):  # libmicrohttpd closes finished connections on its next loop turn
            fds1 = open_fds(s.proc.pid)
            if fds1 <= fds0 + 2:
                break
            time.sleep(0.05)
        check(st == 200 and running == ["ilpd_requests_running 0"] and fds1 <= fds0 + 2,
              "1000 disconnects mid-stream in a row: no stuck job, no leaked connection (fds %d -> %d)" % (fds0, fds1), (st, running))
    finally:
        rc, log = s.stop()
    check(rc == 0, "the server exits 0 after the faults", rc)
    failed_id = fail[0][3] if len(fail) == 1 else None
    errors = [json.loads(l) for l in log.splitlines() if '"level":"error"' in l and '"event":"engine_error"' in l]
    check(failed_id and [(e.get("request_id"), e.get("msg")) for e in errors] ==
          [(failed_id, "out of memory for the KV cache (simulated for testing)")],
          "the KV allocation failure is logged once at error level with the request's id and the engine's message",
          (failed_id, errors))


def slow_client():
    s = Server("--request-timeout", "2")
    try:
        fds0 = open_fds(s.proc.pid)
        c = socket.create_connection(("127.0.0.1", s.port))
        c.settimeout(1.0)
        request = b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        t0, closed, sent = time.time(), None, 0
        while time.time() - t0 < 10 and closed is None:
            try:
                c.send(request[sent % len(request):sent % len(request) + 1])  # one byte a second
                sent += 1
                if c.recv(1024) == b"":
                    closed = time.time() - t0
            except socket.timeout:
                pass
            except OSError:
                closed = time.time() - t0
        st_health = s.request("GET", "/health")[0]
        c.close()
        check(closed is not None and 1.5 < closed < 5 and st_health == 200,
              "a client sending one byte a second is disconnected by the 2 s request deadline (after %s s, %d bytes)" % (
                  closed and round(closed, 1), sent), (closed, st_health))
        for _ in range(100):
            fds1 = open_fds(s.proc.pid)
            if fds1 <= fds0 + 1:
                break
            time.sleep(0.05)
        st, h, o = s.json("POST", "/v1/messages", BODY)
        check(st == 200 and fds1 <= fds0 + 1, "after the slow client: its connection is freed (fds %d -> %d), the next request is served" % (
            fds0, fds1), st)
        # A keep-alive client that is simply idle between two quick requests is not cut by the deadline's bookkeeping.
        import http.client
        k = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
        k.request("GET", "/health")
        r1 = k.getresponse().read()
        time.sleep(1.0)
        k.request("GET", "/health")
        r2 = k.getresponse()
        check(r2.status == 200 and r1, "a keep-alive connection serves a second request within the deadline", r2.status)
        k.close()
    finally:
        rc, log = s.stop()
    check("request_timeout" in log, "the deadline is logged", log[-300:])
    bad = []
    for line in log.splitlines():
        try:
            json.loads(line)
        except ValueError:
            bad.append(line)
    check(not bad, "stderr stays one JSON object per line when a client is cut off (libmicrohttpd's messages included)", bad[:3])


def rate_limit():
    s = Server("--rate-limit-rpm", "60", "--rate-limit-burst", "2", "--api-key", "key-a", "--api-key", "key-b")
    try:
        count = {"model": "m", "messages": BODY["messages"]}
        a = [s.json("POST", "/v1/messages/count_tokens", count, {"x-api-key": "key-a"}) for _ in range(3)]
        b = s.json("POST", "/v1/messages/count_tokens", count, {"x-api-key": "key-b"})
        st, h, o = a[2]
        check([x[0] for x in a] == [200, 200, 429] and isinstance(o, dict) and o.get("error", {}).get("type") == "rate_limit_error"
              and o.get("type") == "error" and h.get("retry-after") == "1" and h.get("x-should-retry") == "true",
              "rate limit: a key's 3rd request within its burst of 2 gets 429 rate_limit_error with retry-after", (a, h))
        check(b[0] == 200, "rate limit: buckets are per key (the other key is served)", b[0])
        check(s.request("GET", "/health")[0] == 200 and s.json("GET", "/v1/models", None, {"x-api-key": "key-a"})[0] == 200,
              "rate limit: health and models are not limited")
        time.sleep(1.1)
        check(s.json("POST", "/v1/messages/count_tokens", count, {"x-api-key": "key-a"})[0] == 200,
              "rate limit: after retry-after the key is served again")
    finally:
        s.stop()


def keep_warm():
    s = Server("--keep-warm", "1", "--log-level", "debug")
    try:
        first = s.json("POST", "/v1/messages", BODY)
        time.sleep(2.7)
        second = s.json("POST", "/v1/messages", BODY)
        st, h, metrics = s.request("GET", "/metrics")
        served = [l for l in metrics.decode().splitlines() if l.startswith("ilpd_prompt_tokens_total")]
        check(first[0] == 200 and second[0] == 200 and first[2]["content"] == second[2]["content"],
              "keep_warm: the answer after idle warm-up passes equals the one before", (first, second))
        check(served and float(served[0].split()[-1]) == 2 * first[2]["usage"]["input_tokens"],
              "keep_warm: the warm-up passes count no prompt tokens in the metrics", served)
    finally:
        rc, log = s.stop()
    passes = [l for l in log.splitlines() if '"event":"keep_warm"' in l and "warm-up pass" in l]
    check(len(passes) >= 2, "keep_warm: an idle server ran a warm-up pass every second (%d in 2.7 s)" % len(passes), log[-400:])


def sigterm_mid_stream():
    s = Server("--shutdown-grace", "10")
    c = raw_post(s.port, dict(BODY, max_tokens=450, stream=True))
    first = c.recv(200)
    t0 = time.time()
    s.proc.send_signal(signal.SIGTERM)
    data = first
    c.settimeout(15)
    try:
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    c.close()
    rc = s.proc.wait(20)
    text = data.decode("utf-8", "replace")
    ended = "event: message_stop" in text or "event: error" in text
    check(rc == 0 and ended and time.time() - t0 < 15,
          "SIGTERM during a stream: the stream completes (or ends with event: error) and the process exits 0", (rc, text[-200:]))
    s.stop()


def main():
    if not os.path.exists(STORIES):
        print("skip - faults: %s absent" % STORIES)
        return 0
    start_failures()
    vanishing_clients()
    slow_client()
    rate_limit()
    keep_warm()
    sigterm_mid_stream()
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
