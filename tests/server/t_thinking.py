#!/usr/bin/python3
"""Thinking through the real server, on a scripted Qwen3 model (scripts/model/make_synthetic.py:
its greedy answer to any chat prompt is "<think>she saw it</think>he was happy<|im_end|>", the
thought and the text each through every layer of the engine).

Checks: with thinking enabled (or adaptive) the answer is a thinking block, then a text block,
streamed as thinking_delta events closed by a signature_delta (empty: nothing is signed), then
text_delta events; without thinking (absent or disabled) the thought is dropped and the prompt
opens the answer with Qwen3's empty thought (6 more prompt tokens); the thinking field is
validated as the Messages API does (400 naming the field)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "model"))
import make_synthetic  # noqa: E402
from ilpd_server import Checks, Server, sse  # noqa: E402

check = Checks()
NL, SP = "\u010a", "\u0120"  # GPT-2's newline and space symbols
SCRIPT = [(NL, "<think>"), ("<think>", "she"), ("she", SP + "saw"), (SP + "saw", SP + "it"), (SP + "it", "</think>"),
          ("</think>", "he"), ("he", SP + "was"), (SP + "was", SP + "happy"), (SP + "happy", "<|im_end|>")]
THOUGHT, TEXT = "she saw it", "he was happy"


def body(**kw):
    b = {"model": "qwen3-scripted", "max_tokens": 32, "temperature": 0,
         "messages": [{"role": "user", "content": "Tell me a story."}]}
    b.update(kw)
    return b


def kinds(content):
    return [(c["type"], c.get("thinking", c.get("text"))) for c in content]


def non_streaming(s):
    for th in ({"type": "enabled", "budget_tokens": 1024}, {"type": "adaptive"}):
        st, _, o = s.json("POST", "/v1/messages", body(thinking=th, max_tokens=2048))
        ok = st == 200 and kinds(o["content"]) == [("thinking", THOUGHT), ("text", TEXT)]
        check(ok and o["content"][0]["signature"] == "" and o["stop_reason"] == "end_turn",
              "thinking %s: a thinking block (empty signature), then the text" % th["type"], (st, o))
    for name, extra in (("absent", {}), ("disabled", {"thinking": {"type": "disabled"}})):
        st, _, o = s.json("POST", "/v1/messages", body(**extra))
        check(st == 200 and kinds(o["content"]) == [("text", TEXT)],
              "thinking %s: the thought is dropped, the text is the same" % name, (st, o))


def streaming(s):
    st, _, raw = s.request("POST", "/v1/messages", body(thinking={"type": "adaptive"}, stream=True))
    ev = sse(raw) if st == 200 else []
    starts = [d["content_block"] for e, d in ev if e == "content_block_start"]
    deltas = [(d["index"], d["delta"]["type"]) for e, d in ev if e == "content_block_delta"]
    thought = "".join(d["delta"].get("thinking", "") for e, d in ev if e == "content_block_delta")
    text = "".join(d["delta"].get("text", "") for e, d in ev if e == "content_block_delta")
    check(starts == [{"type": "thinking", "thinking": "", "signature": ""}, {"type": "text", "text": ""}],
          "stream: a thinking block starts first, then a text block", starts)
    check(thought == THOUGHT and text == TEXT, "stream: thinking_delta events hold the thought, text_delta the text",
          (thought, text))
    sig = deltas.index((0, "signature_delta")) if (0, "signature_delta") in deltas else -1
    stop0 = [i for i, (e, d) in enumerate(ev) if e == "content_block_stop" and d["index"] == 0]
    sig_ev = [i for i, (e, d) in enumerate(ev) if e == "content_block_delta" and d["delta"]["type"] == "signature_delta"]
    check(sig >= 0 and all(k == "thinking_delta" for i, k in deltas[:sig]) and len(sig_ev) == 1 and stop0
          and sig_ev[0] == stop0[0] - 1 and [d for e, d in ev if e == "content_block_delta"][sig]["delta"]["signature"] == "",
          "stream: one empty signature_delta right before the thinking block stops", deltas)
    check(ev and ev[-1][0] == "message_stop", "stream: complete", ev[-3:])
    st, _, raw = s.request("POST", "/v1/messages", body(stream=True))
    ev = sse(raw) if st == 200 else []
    check([d["content_block"]["type"] for e, d in ev if e == "content_block_start"] == ["text"]
          and "".join(d["delta"].get("text", "") for e, d in ev if e == "content_block_delta") == TEXT,
          "stream without thinking: one text block, no thought", ev)


def prompts(s):
    def count(**kw):
        b = body(**kw)
        b.pop("max_tokens")
        st, _, o = s.json("POST", "/v1/messages/count_tokens", b)
        return o.get("input_tokens") if st == 200 else (st, o)
    on, off = count(thinking={"type": "adaptive"}), count()
    check(isinstance(on, int) and off == on + 6,
          "without thinking the prompt ends in an empty thought (<think>, 2 newlines, </think>, 2 newlines)", (on, off))


def errors(s):
    for name, th, field in (("budget under 1024", {"type": "enabled", "budget_tokens": 100}, "thinking.budget_tokens"),
                            ("budget not under max_tokens", {"type": "enabled", "budget_tokens": 4096},
                             "max_tokens"),
                            ("no budget", {"type": "enabled"}, "thinking.budget_tokens"),
                            ("unknown type", {"type": "sometimes"}, "thinking.type"),
                            ("not an object", "yes", "thinking.type")):
        st, _, o = s.json("POST", "/v1/messages", body(thinking=th, max_tokens=2048))
        msg = o.get("error", {}).get("message", "") if isinstance(o, dict) else ""
        check(st == 400 and o["error"]["type"] == "invalid_request_error" and field in msg,
              "thinking %s: 400 naming %s" % (name, field), (st, o))


def main():
    path = os.path.join(os.environ.get("TESTS_TMP", "/tmp"), "qwen3-scripted.gguf")
    make_synthetic.make_model(path, arch="qwen3", type="F16", layers=2, vocab=400, script=SCRIPT)
    s = Server(model=path)
    try:
        non_streaming(s)
        streaming(s)
        prompts(s)
        errors(s)
    finally:
        rc, log = s.stop()
    check(rc == 0, "the server exits cleanly", log[-300:])
    os.remove(path)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
