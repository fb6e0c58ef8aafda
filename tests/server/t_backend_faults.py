#!/usr/bin/python3
"""Run-time backend failures reach the client, and the server goes on.

A real `ilpd serve` on the built-in demo model (models/, no shared files)
with the testing faults of the engine: the backend's scratch allocation of
the first request fails, or one of its kernels fails during prefill or after
some tokens of decode. Each such request must get a 500 api_error (or, when
the stream already started, an SSE `error` event of type api_error and no
message_stop), the log must have an error line with that request's id, and
the next request must be answered exactly as by a server that never failed."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ilpd_server import Checks, Server, sse  # noqa: E402

check = Checks()
DEMO = "models/ilpd-demo-F16.gguf"
BODY = {"model": "m", "max_tokens": 16, "temperature": 0, "messages": [{"role": "user", "content": "Tell me a story."}]}


def answer(s, stream=False):
    st, h, o = s.request("POST", "/v1/messages", dict(BODY, stream=stream))
    return st, h, o


def text_of(o):
    return json.loads(o)["content"][0]["text"]


def logged_with_id(log, request_id):
    return any('"level":"error"' in line and request_id in line for line in log.splitlines())


def nonstream_fault(what, want, failing, words, *args):
    """Requests 1..FAILING+1 on a server started with ARGS: request FAILING
    must get a 500 api_error with WORDS in its message, logged at error level
    with its request id; the others the fault-free answer WANT."""
    s = Server("--layer-skip", "off", *args, model=DEMO)
    rid = "?"
    try:
        for i in range(1, failing + 2):
            st, h, o = answer(s)
            if i == failing:
                rid = h.get("request-id", "?")
                check(st == 500 and b'"type":"api_error"' in o and all(w in o for w in words),
                      "%s: 500 api_error naming it" % what, (st, o[:300]))
            else:
                check(st == 200 and text_of(o) == want,
                      "%s: request %d is answered as without the fault" % (what, i), (st, o[:200]))
    finally:
        rc, log = s.stop()
    check(logged_with_id(log, rid), "%s: logged at error level with its request id" % what, rid)


def main():
    s = Server("--layer-skip", "off", model=DEMO)
    try:
        st, h, o = answer(s)
        want = text_of(o) if st == 200 else None
        check(st == 200 and want, "a fault-free server answers", (st, o[:200]))
    finally:
        s.stop()

    nonstream_fault("a failed scratch allocation", want, 1, [b"out of memory"], "--test-scratch-fail-request", "1")
    nonstream_fault("a failed kernel in prefill", want, 2, [b"injected fault", b"backend failed"],
                    "--test-kernel-fail-request", "2", "--test-kernel-fail-token", "0")

    # A kernel fails after 4 tokens of a stream: an error event mid-stream.
    s = Server("--layer-skip", "off", "--test-kernel-fail-request", "1", "--test-kernel-fail-token", "4", model=DEMO)
    try:
        st, h, o = answer(s, stream=True)
        ev = sse(o)
        names = [e for e, _ in ev]
        deltas = [d for e, d in ev if e == "content_block_delta"]
        err = [d for e, d in ev if e == "error"]
        check(st == 200 and names[:1] == ["message_start"] and deltas and err and
              err[0]["error"]["type"] == "api_error" and "message_stop" not in names,
              "a failed kernel mid-stream: text, then an SSE error event of type api_error, no message_stop",
              names)
        st, h, o = answer(s)
        check(st == 200 and text_of(o) == want, "the request after it is answered as without the fault", (st, o[:200]))
        st, h, o = answer(s, stream=True)
        names = [e for e, _ in sse(o)]
        check(st == 200 and names[-1:] == ["message_stop"] and "error" not in names, "and so is the next stream", names)
    finally:
        rc, log = s.stop()
    check(rc == 0, "the server exits 0 after the failures", rc)


main()
sys.exit(1 if check.failed else 0)
