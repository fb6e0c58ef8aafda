#!/usr/bin/python3
"""Black-box tests of `ilpd serve` against Anthropic's Messages API (its shapes as the SDKs read them), on the
real engine with stories260K (no mocks)."""
import base64
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ilpd_server import STORIES, Checks, Server, sse  # noqa: E402

check = Checks()
MSG = {"model": "stories", "max_tokens": 40, "temperature": 0,
       "messages": [{"role": "user", "content": "Once upon a time"}]}


def body(**kw):
    b = json.loads(json.dumps(MSG))
    b.update(kw)
    return b


def is_error(status, hdrs, out, code, etype):
    return (status == code and hdrs.get("content-type", "").startswith("application/json") and isinstance(out, dict)
            and out.get("type") == "error" and out.get("error", {}).get("type") == etype
            and isinstance(out["error"].get("message"), str) and out.get("request_id", "").startswith("req_")
            and hdrs.get("request-id", "").startswith("req_"))


def stream_text(events):
    return "".join(d["delta"]["text"] for e, d in events if e == "content_block_delta")


def mask_b64(bits):
    return base64.b64encode(bytes(bits + [0] * (32 - len(bits)))).decode()


def happy(s):
    st, h, out = s.json("POST", "/v1/messages", body())
    ok = (st == 200 and h.get("content-type") == "application/json" and out["type"] == "message"
          and out["id"].startswith("msg_") and out["role"] == "assistant" and out["model"] == "stories"
          and out["content"][0]["type"] == "text" and out["content"][0]["text"]
          and out["stop_reason"] == "max_tokens" and out["stop_sequence"] is None
          and out["usage"]["input_tokens"] > 0 and out["usage"]["output_tokens"] == 40)
    check(ok, "non-streaming message: shape, model echoed, usage, stop_reason", (st, out))
    check(h.get("request-id", "").startswith("req_"), "request-id header on a message")
    # config/probes/stories260K.json is found by the model's hash; it never skips on this 5-layer model.
    check(h.get("x-layer-status") == "full" and h.get("x-layer-hint-status") == "absent" and
          base64.b64decode(h.get("x-layer-mask", "")) == bytes([1] * 5 + [0] * 27),
          "layer headers: status full (the committed probe), full 5-layer mask, hint absent", h)
    text = out["content"][0]["text"]

    st, h, raw = s.request("POST", "/v1/messages", json.dumps(body(stream=True)))
    events = sse(raw)
    names = [e for e, _ in events]
    check(st == 200 and h.get("content-type") == "text/event-stream" and h.get("cache-control") == "no-cache",
          "streaming: 200, text/event-stream, no-cache", (st, h))
    check(all(e for e in names), "every SSE event has an event: line")
    check(names[0] == "message_start" and names.count("message_start") == 1 and names[-1] == "message_stop",
          "streaming: message_start first and once, message_stop last", names)
    first_delta = names.index("content_block_delta") if "content_block_delta" in names else -1
    check(0 < names.index("content_block_start") < first_delta < names.index("content_block_stop") <
          names.index("message_delta"), "streaming: content_block_start before any delta, stop, then message_delta", names)
    ms = events[0][1]["message"]
    st2, _, ct = s.json("POST", "/v1/messages/count_tokens", {"model": "x", "messages": MSG["messages"]})
    check(ms["usage"]["input_tokens"] == out["usage"]["input_tokens"] == ct.get("input_tokens") and ct["input_tokens"] > 0,
          "message_start carries the real input_tokens = usage.input_tokens = count_tokens", (ms["usage"], ct))
    md = [d for e, d in events if e == "message_delta"][0]
    check(md["delta"]["stop_reason"] == "max_tokens" and md["usage"]["output_tokens"] == 40,
          "message_delta: stop_reason and cumulative output_tokens", md)
    check("ping" in names and h.get("x-layer-mask") and h.get("x-layer-status") == "full",
          "streaming: a ping event and the layer headers", names)
    check(stream_text(events) == text, "streamed and non-streamed greedy output are identical", (stream_text(events), text))

    # Stop sequences spanning several tokens (stories260K spells most words in several pieces).
    stop = text[12:17]
    if stop and stop in text:
        st, h, o = s.json("POST", "/v1/messages", body(stop_sequences=["zzzz", stop]))
        got = o["content"][0]["text"] if st == 200 else None
        check(st == 200 and o["stop_reason"] == "stop_sequence" and o["stop_sequence"] == stop and got == text[:text.index(stop)],
              "stop sequence spanning tokens (non-streaming): text ends before it, stop_sequence reported", (stop, o))
        st, h, raw = s.request("POST", "/v1/messages", json.dumps(body(stream=True, stop_sequences=[stop])))
        ev = sse(raw)
        md = [d for e, d in ev if e == "message_delta"]
        check(stream_text(ev) == text[:text.index(stop)] and md and md[0]["delta"]["stop_sequence"] == stop
              and md[0]["delta"]["stop_reason"] == "stop_sequence",
              "stop sequence spanning tokens (streaming): never leaks into a delta", (stream_text(ev), md))

    # Prefill: a last assistant turn is continued and not repeated.
    pre = text[:15]
    st, h, o = s.json("POST", "/v1/messages", body(messages=MSG["messages"] + [{"role": "assistant", "content": pre}]))
    cont = o["content"][0]["text"] if st == 200 else ""
    prompt = lambda u: u["input_tokens"] + u["cache_read_input_tokens"]  # noqa: E731 (the prompt cache may hold part)
    check(st == 200 and cont and not cont.startswith(pre) and prompt(o["usage"]) > prompt(out["usage"]),
          "assistant prefill: the answer holds only the continuation", (pre, cont))

    # Content blocks, system blocks, unknown keys, tool_result folding, query strings.
    st, h, o = s.json("POST", "/v1/messages?beta=true", body(
        system=[{"type": "text", "text": "Be kind.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "Tell"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "story", "input": {}}]},
                  {"role": "user", "content": [{"type": "text", "text": "Once upon", "citations": None},
                                               {"type": "tool_result", "tool_use_id": "t1", "content": "a time"}]}],
        metadata={"user_id": "u1"}, top_k=5, top_p=0.9, something_new=True))
    check(st == 200 and o["type"] == "message", "blocks, system blocks, tool_result, metadata, unknown keys and ?beta=true accepted", (st, o))
    st, h, o = s.json("POST", "/v1/messages", body(messages=[{"role": "user", "content": "Hi"}, {"role": "user", "content": "there"},
                                                           {"role": "system", "content": "Be brief."}]))
    check(st == 200, "consecutive user turns merge and a system role folds in", (st, o))

    # CJK and emoji round trips.
    model = "模型-😀"
    st, h, o = s.json("POST", "/v1/messages", body(model=model, messages=[
        {"role": "user", "content": "数学 😀 ünïcödé"}, {"role": "assistant", "content": "Once 😀 "}]))
    check(st == 200 and o["model"] == model and isinstance(o["content"][0]["text"], str),
          "CJK and emoji in the model name, prompt and prefill round-trip", (st, o))
    st, h, raw = s.request("POST", "/v1/messages", json.dumps(body(stream=True, messages=[{"role": "user", "content": "数学 😀"}])))
    try:
        ev = sse(raw)
        good = st == 200 and ev[-1][0] == "message_stop"
    except ValueError as e:
        good = False
        ev = e
    check(good, "streamed deltas are valid UTF-8 JSON for a CJK prompt", ev)


def models(s):
    st, h, o = s.json("GET", "/v1/models")
    check(st == 200 and o["data"][0]["type"] == "model" and o["data"][0]["id"] == "stories260K" and o["has_more"] is False
          and o["first_id"] == o["last_id"] == "stories260K" and o["data"][0]["created_at"].endswith("Z"),
          "GET /v1/models lists the loaded model", o)
    st, h, o = s.json("GET", "/v1/models/stories260K")
    check(st == 200 and o["id"] == "stories260K" and o["display_name"], "GET /v1/models/{id}", o)
    st, h, o = s.json("GET", "/v1/models/claude-nope")
    check(is_error(st, h, o, 404, "not_found_error"), "GET /v1/models/{unknown}: 404 not_found_error", (st, o))


def errors(s):
    cases = [
        ("bad JSON", b"{nope", 400, "invalid_request_error"),
        ("JSON that is not an object", b"[1,2]", 400, "invalid_request_error"),
        ("missing model", {"max_tokens": 5, "messages": MSG["messages"]}, 400, "invalid_request_error"),
        ("missing max_tokens", {"model": "m", "messages": MSG["messages"]}, 400, "invalid_request_error"),
        ("max_tokens 0", body(max_tokens=0), 400, "invalid_request_error"),
        ("max_tokens 1.5", body(max_tokens=1.5), 400, "invalid_request_error"),
        ("empty messages", body(messages=[]), 400, "invalid_request_error"),
        ("bad role", body(messages=[{"role": "robot", "content": "hi"}]), 400, "invalid_request_error"),
        ("content of the wrong type", body(messages=[{"role": "user", "content": 5}]), 400, "invalid_request_error"),
        ("text block without text", body(messages=[{"role": "user", "content": [{"type": "text"}]}]), 400, "invalid_request_error"),
        ("temperature 2", body(temperature=2), 400, "invalid_request_error"),
        ("top_p 0", body(top_p=0), 400, "invalid_request_error"),
        ("top_k -1", body(top_k=-1), 400, "invalid_request_error"),
        ("empty stop sequence", body(stop_sequences=[""]), 400, "invalid_request_error"),
        ("stream not a boolean", body(stream="yes"), 400, "invalid_request_error"),
        ("metadata.user_id not a string", body(metadata={"user_id": 5}), 400, "invalid_request_error"),
        ("invalid UTF-8", b'{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"\xff\xfe"}]}', 400,
         "invalid_request_error"),
        ("JSON nested 100 deep", ('{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"x":' +
                                  "[" * 100 + "]" * 100 + "}").encode(), 400, "invalid_request_error"),
    ]
    for name, b, code, etype in cases:
        data = b if isinstance(b, bytes) else json.dumps(b)
        st, h, o = s.request("POST", "/v1/messages", data)
        try:
            o = json.loads(o)
        except ValueError:
            pass
        check(is_error(st, h, o, code, etype) and h.get("x-layer-status") in ("off", "full"),
              "%s: %d %s" % (name, code, etype), (st, o))
    st, h, o = s.json("POST", "/v1/messages", body(messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]))
    check(is_error(st, h, o, 400, "invalid_request_error") and "text-only" in o["error"]["message"],
          "an image block: 400 saying the server is text-only", o)
    st, h, o = s.json("GET", "/v1/nothing-here")
    check(is_error(st, h, o, 404, "not_found_error"), "unknown path: 404 not_found_error", (st, o))
    st, h, o = s.json("GET", "/v1/messages")
    check(is_error(st, h, o, 405, "invalid_request_error") and "POST" in h.get("allow", ""), "GET /v1/messages: 405", (st, h))
    big = json.dumps(body(messages=[{"role": "user", "content": "x" * 70000}]))
    st, h, o = s.json("POST", "/v1/messages", big)
    check(is_error(st, h, o, 413, "request_too_large"), "a body over --max-body-bytes: 413 request_too_large", (st, o))
    st, h, o = s.json("POST", "/v1/messages/count_tokens", {"model": "m"})
    check(is_error(st, h, o, 400, "invalid_request_error"), "count_tokens without messages: 400", (st, o))
    st, h, o = s.json("GET", "/health")
    check(st == 200 and o == {"status": "ok"} and h.get("content-type") == "application/json", "GET /health: 200", o)
    st, h, raw = s.request("GET", "/metrics")
    text = raw.decode()
    names = ["ilpd_requests_total", "ilpd_request_duration_seconds_bucket", "ilpd_time_to_first_token_seconds_bucket",
             "ilpd_inter_token_latency_seconds_bucket", "ilpd_prompt_tokens_total", "ilpd_generation_tokens_total",
             "ilpd_requests_running", "ilpd_requests_waiting", "ilpd_layer_status_total", "ilpd_layers_skipped_bucket",
             "ilpd_layer_hints_total", "ilpd_kv_cache_bytes", "ilpd_skip_activation_ratio", "ilpd_skipped_layers_mean",
             "ilpd_layer_mode_total", "ilpd_draft_tokens_total", "ilpd_draft_accepted_tokens_total",
             "ilpd_draft_verifications_total", "ilpd_layer_gated_total"]
    missing = [n for n in names if n not in text]
    check(st == 200 and h.get("content-type", "").startswith("text/plain") and not missing,
          "GET /metrics: Prometheus text with the ilpd_ metrics", missing)


def hints(s):
    cases = [("an all-ones hint", mask_b64([1] * 5), "applied", [1] * 5),
             ("an all-zero hint (no preference)", mask_b64([0] * 5), "applied", [1] * 5),
             ("an unpadded hint", mask_b64([1] * 5).rstrip("="), "applied", [1] * 5),
             ("a hint skipping 1 of 5 layers (20% > 15%)", mask_b64([1, 1, 0, 1, 1]), "overridden", [1] * 5),
             ("garbage", "!!not base64!!", "invalid", [1] * 5),
             ("a hint with a byte 2", base64.b64encode(bytes([2] * 32)).decode(), "invalid", [1] * 5),
             ("a hint of 31 bytes", base64.b64encode(bytes([1] * 31)).decode(), "invalid", [1] * 5)]
    for name, hint, want, mask in cases:
        st, h, o = s.json("POST", "/v1/messages", body(max_tokens=5), {"x-layer-hint": hint})
        got = list(base64.b64decode(h.get("x-layer-mask", ""))[:5]) if h.get("x-layer-mask") else None
        check(st == 200 and h.get("x-layer-hint-status") == want and got == mask,
              "x-layer-hint: %s -> %s" % (name, want), (st, h.get("x-layer-hint-status"), got))


def applied_hint():
    s = Server("--hint-max-deviation", "0.5", "--max-body-bytes", "65536", "--skip-gate", "0")
    try:
        hint = mask_b64([1, 1, 0, 1, 1])
        approx = {"x-layer-hint": hint, "x-layer-mode": "approximate"}
        st, h, o = s.json("POST", "/v1/messages", body(), approx)
        st2, h2, o2 = s.json("POST", "/v1/messages", body())
        st3, h3, raw = s.request("POST", "/v1/messages", json.dumps(body(stream=True)), approx)
        check(st == 200 and h.get("x-layer-hint-status") == "applied" and h.get("x-layer-mask") == hint and
              o["content"][0]["text"] != o2["content"][0]["text"] and h3.get("x-layer-mask") == hint and
              stream_text(sse(raw)) == o["content"][0]["text"] and h.get("x-layer-mode") == "approximate" and
              "x-layer-draft" not in h,
              "approximate mode: a hint within the deviation bound is applied, the mask header is the mask used (streaming too)",
              (h, h3))
        # lossless (the default): the hint's mask only drafts; the answer is full depth's, streamed or not
        st4, h4, o4 = s.json("POST", "/v1/messages", body(), {"x-layer-hint": hint})
        st5, h5, raw5 = s.request("POST", "/v1/messages", json.dumps(body(stream=True)), {"x-layer-hint": hint})
        st6, h6, o6 = s.json("POST", "/v1/messages", body(), {"x-layer-mode": "off"})
        draft = h4.get("x-layer-draft", "")
        acc, _, dra = draft.partition("/")
        check(st4 == 200 and h4.get("x-layer-mode") == "lossless" and h4.get("x-layer-mask") == hint and
              h2.get("x-layer-mode") == "lossless" and acc.isdigit() and dra.isdigit() and int(acc) <= int(dra) and
              o4["content"][0]["text"] == o2["content"][0]["text"] == o6["content"][0]["text"] and
              o4["usage"] == o6["usage"] and o4["stop_reason"] == o6["stop_reason"] and
              h5.get("x-layer-mode") == "lossless" and stream_text(sse(raw5)) == o6["content"][0]["text"] and
              h6.get("x-layer-mode") == "off" and h6.get("x-layer-status") == "off",
              "lossless mode (the default): the hint drafts, the answer, usage and stop reason are full depth's, "
              "streamed too; x-layer-draft ACCEPTED/DRAFTED; x-layer-mode off runs full depth", (h4, h5, h6))
        timing = {}
        for part in h6.get("server-timing", "").split(","):
            name, _, dur = part.strip().partition(";dur=")
            timing[name] = float(dur) if dur else -1
        check(set(timing) == {"ttft", "decode"} and timing["ttft"] > 0 and
              (timing["decode"] > 0) == (o6["usage"]["output_tokens"] > 1) and "server-timing" not in h5,
              "Server-Timing on a whole answer: ttft and decode in ms (none on a stream: its headers leave first)",
              (h6.get("server-timing"), h5.get("server-timing")))
        st7, h7, o7 = s.json("POST", "/v1/messages", body(), {"x-layer-mode": "fastest"})
        check(st7 == 200 and h7.get("x-layer-mode") == "lossless" and o7["content"][0]["text"] == o6["content"][0]["text"],
              "an unknown x-layer-mode is ignored (the default runs, and is echoed)", h7)
        st, h, raw = s.request("GET", "/metrics")
        text = raw.decode()
        m = {l.split(" ")[0]: float(l.split(" ")[1]) for l in text.splitlines() if l.startswith("ilpd_draft_") or
             l.startswith("ilpd_layer_mode_total")}
        check(m.get('ilpd_layer_mode_total{mode="lossless"}', 0) >= 4 and m.get('ilpd_layer_mode_total{mode="off"}', 0) >= 1 and
              m.get('ilpd_layer_mode_total{mode="approximate"}', 0) >= 2 and
              m.get("ilpd_draft_tokens_total", 0) >= m.get("ilpd_draft_accepted_tokens_total", -1) >= 0 and
              m.get("ilpd_draft_verifications_total", 0) > 0,
              "metrics count generations by mode and the drafted, accepted tokens and verifications", m)
    finally:
        s.stop()


def gate():
    """Approximate mode's gate: a margin every token falls below sends the
    answer to full depth at its first token, streamed or not."""
    s = Server("--hint-max-deviation", "0.5", "--skip-gate", "100")
    try:
        approx = {"x-layer-hint": mask_b64([1, 1, 0, 1, 1]), "x-layer-mode": "approximate"}
        st, h, o = s.json("POST", "/v1/messages", body(), approx)
        st2, h2, raw = s.request("POST", "/v1/messages", json.dumps(body(stream=True)), approx)
        st3, h3, o3 = s.json("POST", "/v1/messages", body(), {"x-layer-mode": "off"})
        st4, h4, o4 = s.json("POST", "/v1/messages", body(), {"x-layer-hint": mask_b64([1] * 5), "x-layer-mode": "approximate"})
        check(st == st2 == st3 == 200 and h.get("x-layer-gated") == "0" and h.get("x-layer-mask") == approx["x-layer-hint"] and
              o["content"][0]["text"] == o3["content"][0]["text"] and o["usage"] == o3["usage"] and
              stream_text(sse(raw)) == o3["content"][0]["text"] and "x-layer-gated" not in h2 and
              "x-layer-gated" not in h3 and st4 == 200 and "x-layer-gated" not in h4,
              "approximate mode, --skip-gate 100: the gate runs full depth from the first token (x-layer-gated: 0), "
              "the answer is off's, streamed too; nothing skipped, nothing gated", (h, h2, h4))
        st, h, raw = s.request("GET", "/metrics")
        m = [l for l in raw.decode().splitlines() if l.startswith("ilpd_layer_gated_total ")]
        check(m == ["ilpd_layer_gated_total 2"], "ilpd_layer_gated_total counts the two gated answers", m)
    finally:
        _, log = s.stop()
    gated = [l for l in log.splitlines() if '"event":"request"' in l and '"gated_at":0' in l]
    check(len(gated) == 2 and '"stream":true' in gated[1], "the request log lines give gated_at (the stream's too)", gated)


def auth():
    s = Server("--api-key", "sekrit-key-1", "--api-key", "second-key")
    try:
        st, h, o = s.json("POST", "/v1/messages", body(max_tokens=3))
        check(is_error(st, h, o, 401, "authentication_error"), "no key: 401 authentication_error", (st, o))
        st, h, o = s.json("POST", "/v1/messages", body(max_tokens=3), {"x-api-key": "wrong"})
        check(is_error(st, h, o, 401, "authentication_error"), "a wrong key: 401", (st, o))
        st, h, o = s.json("POST", "/v1/messages", body(max_tokens=3), {"x-api-key": "sekrit-key-1"})
        check(st == 200, "x-api-key accepted", st)
        st, h, o = s.json("POST", "/v1/messages", body(max_tokens=3), {"authorization": "Bearer second-key"})
        check(st == 200, "Authorization: Bearer accepted", st)
        st, h, o = s.json("GET", "/health")
        check(st == 200, "/health needs no key", st)
    finally:
        rc, log = s.stop()
    check("sekrit" not in log and "second-key" not in log, "API keys never appear in the log")


def context_budget():
    """max_tokens is a ceiling, as clients' defaults (4096, 32000) assume:
    generation ends where the context does; only a prompt that fills the
    context alone is refused."""
    s = Server("-c", "40")
    try:
        st, h, ct = s.json("POST", "/v1/messages/count_tokens", body())
        n_in = ct.get("input_tokens", 0) if isinstance(ct, dict) else 0
        st, h, o = s.json("POST", "/v1/messages", body(max_tokens=32000))
        # every position holds a token; the last one sampled needs none
        check(st == 200 and o.get("stop_reason") == "model_context_window_exceeded" and
              o["usage"]["output_tokens"] == 40 - n_in + 1 and o["usage"]["input_tokens"] == n_in,
              "max_tokens 32000 with a context of 40: 200, generation fills the context, "
              "stop_reason model_context_window_exceeded", (st, o))
        st, h, raw = s.request("POST", "/v1/messages", body(max_tokens=4096, stream=True))
        md = [d for e, d in sse(raw) if e == "message_delta"]
        check(st == 200 and md and md[0]["delta"]["stop_reason"] == "model_context_window_exceeded" and
              md[0]["usage"]["output_tokens"] == 40 - n_in + 1, "and so when streaming", md)
        long = body(messages=[{"role": "user", "content": "Once upon a time there was a cat. " * 8}], max_tokens=1)
        st, h, o = s.json("POST", "/v1/messages", long)
        msg = o["error"]["message"] if isinstance(o, dict) and "error" in o else ""
        check(is_error(st, h, o, 400, "invalid_request_error") and msg.startswith("prompt is too long: ") and
              "> 39 maximum" in msg, "a prompt that fills the context alone: 400 prompt is too long", msg)
    finally:
        s.stop()


def disconnects(s):
    req = json.dumps(body(max_tokens=450, stream=True)).encode()
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(req) + req)
    sock.recv(200)
    sock.close()
    t0 = time.time()
    st, h, o = s.json("POST", "/v1/messages", body(max_tokens=5))
    check(st == 200 and time.time() - t0 < 10, "after a client disconnects mid-stream the next request is served", st)


def concurrency():
    s = Server("--queue", "2")
    results = []
    barrier = threading.Barrier(8)

    def client():
        barrier.wait()
        try:
            results.append(s.json("POST", "/v1/messages", body(max_tokens=450)))
        except OSError as e:
            results.append((0, {}, str(e)))

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [r for r in results if r[0] == 200]
    over = [r for r in results if is_error(r[0], r[1], r[2], 529, "overloaded_error") and r[1].get("retry-after")
            and r[1].get("x-should-retry") == "true"]
    check(len(ok) + len(over) == 8 and ok and over,
          "8 concurrent clients, queue of 2: each finishes or gets 529 with retry-after (%d ok, %d 529)" % (len(ok), len(over)),
          [r[0] for r in results])
    rc, log = s.stop()
    check(rc == 0, "SIGTERM: the server exits 0", rc)


def main():
    if not os.path.exists(STORIES):
        print("skip - http tests: %s absent" % STORIES)
        return 0
    s = Server("--max-body-bytes", "65536")
    try:
        happy(s)
        models(s)
        errors(s)
        hints(s)
        disconnects(s)
    finally:
        rc, log = s.stop()
    check(rc == 0 and '"event":"request"' in log, "SIGTERM exits 0; one JSON log line per request", rc)
    applied_hint()
    gate()
    context_budget()
    auth()
    concurrency()
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
