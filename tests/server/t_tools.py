#!/usr/bin/python3
"""Agent-shaped requests through the real server on the built-in demo model (chatml, no ../shared needed):
tools, tool_choice, assistant tool_use and thinking blocks, user tool_result blocks. Checks that such
requests are accepted (200), that count_tokens counts the tools exactly as /v1/messages builds the prompt,
and that malformed blocks and tools get 400 invalid_request_error naming the field."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ilpd_server import Checks, Server  # noqa: E402

DEMO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "ilpd-demo-F16.gguf")
check = Checks()

WEATHER = {"name": "get_weather", "description": "Get the current weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
HISTORY = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "The user wants the weather; call the tool.", "signature": "c2ln"},
        {"type": "redacted_thinking", "data": "ZGF0YQ=="},
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "18C, sunny"}]},
        {"type": "text", "text": "Thanks. And tomorrow?"}]},
]


def req(**kw):
    b = {"model": "ilpd-demo", "max_tokens": 8, "temperature": 0, "messages": HISTORY}
    b.update(kw)
    return b


def count(s, body):
    b = dict(body)
    b.pop("max_tokens", None)
    st, _, o = s.json("POST", "/v1/messages/count_tokens", b)
    return o.get("input_tokens") if st == 200 and isinstance(o, dict) else (st, o)


def bad(s, name, body, field):
    st, h, o = s.json("POST", "/v1/messages", body)
    msg = o.get("error", {}).get("message", "") if isinstance(o, dict) else ""
    check(st == 400 and o.get("error", {}).get("type") == "invalid_request_error" and field in msg,
          "%s: 400 naming %s" % (name, field), (st, o))


def accepted(s):
    st, h, o = s.json("POST", "/v1/messages", req(tools=[WEATHER]))
    check(st == 200 and o.get("type") == "message" and o["content"][0]["type"] == "text"
          and o["usage"]["input_tokens"] > 0,
          "tools + a history with thinking, tool_use and tool_result: 200", (st, o))
    n_msg = o["usage"]["input_tokens"] if st == 200 else None
    check(count(s, req(tools=[WEATHER])) == n_msg, "count_tokens counts exactly what /v1/messages used",
          (count(s, req(tools=[WEATHER])), n_msg))
    st, h, raw = s.request("POST", "/v1/messages", json.dumps(req(tools=[WEATHER], stream=True)))
    check(st == 200 and b"event: message_stop" in raw, "the same request streamed: 200 and a complete stream", (st, raw[:300]))
    st, _, o = s.json("POST", "/v1/messages", req())
    check(st == 200, "the tool history without tools: 200", (st, o))
    # is_error, a string content, no content, a custom type, a tool_choice with a name, the SDKs' null fields
    hist = [HISTORY[0], HISTORY[1], {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "timeout", "is_error": True}]}]
    tool = dict(WEATHER, type="custom", cache_control={"type": "ephemeral"})
    st, _, o = s.json("POST", "/v1/messages", req(messages=hist, tools=[tool],
                                                   tool_choice={"type": "tool", "name": "get_weather",
                                                                "disable_parallel_tool_use": True}))
    check(st == 200, "is_error, tool type custom, tool_choice tool with disable_parallel_tool_use: 200", (st, o))
    hist2 = [HISTORY[0], HISTORY[1], {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01"}]}]
    st, _, o = s.json("POST", "/v1/messages", req(messages=hist2, tools=[WEATHER], tool_choice={"type": "any"}))
    check(st == 200, "a tool_result without content, tool_choice any: 200", (st, o))
    # An assistant turn split over two messages (merged): its tool_use still answers the result after it.
    hist3 = [HISTORY[0], {"role": "assistant", "content": "Let me check."},
             {"role": "assistant", "content": [HISTORY[1]["content"][3]]}, HISTORY[2]]
    st, _, o = s.json("POST", "/v1/messages", req(messages=hist3, tools=[WEATHER]))
    check(st == 200, "a tool_use in the second of two merged assistant messages: 200", (st, o))


def counting(s):
    base = {"model": "ilpd-demo", "messages": HISTORY}
    n_none = count(s, base)
    n_auto = count(s, dict(base, tools=[WEATHER]))
    n_auto2 = count(s, dict(base, tools=[WEATHER], tool_choice={"type": "auto"}))
    n_choice_none = count(s, dict(base, tools=[WEATHER], tool_choice={"type": "none"}))
    n_two = count(s, dict(base, tools=[WEATHER, dict(WEATHER, name="get_time", description="Get the time.")]))
    n_any = count(s, dict(base, tools=[WEATHER], tool_choice={"type": "any"}))
    ok = all(isinstance(n, int) for n in (n_none, n_auto, n_auto2, n_choice_none, n_two, n_any))
    check(ok and n_auto > n_none, "count_tokens with tools > without", (n_none, n_auto))
    check(ok and n_auto2 == n_auto, "tool_choice auto is the default", (n_auto, n_auto2))
    check(ok and n_choice_none == n_none and n_choice_none < n_auto,
          "tool_choice none renders no tools (its count is the count without tools)", (n_none, n_choice_none, n_auto))
    check(ok and n_two > n_auto, "a second tool adds tokens", (n_auto, n_two))
    check(ok and n_any > n_auto, "tool_choice any adds its instruction", (n_auto, n_any))
    plain = [{"role": "user", "content": "What is the weather in Paris?"},
             {"role": "assistant", "content": "Let me check."},
             {"role": "user", "content": "Thanks. And tomorrow?"}]
    n_plain = count(s, {"model": "ilpd-demo", "messages": plain})
    check(isinstance(n_plain, int) and n_none > n_plain, "the tool call and its result are rendered into the prompt",
          (n_plain, n_none))
    thinking_only = [plain[0], {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "x " * 200, "signature": "s"}, {"type": "text", "text": "Let me check."}]}, plain[2]]
    check(count(s, {"model": "ilpd-demo", "messages": thinking_only}) == n_plain,
          "thinking blocks of earlier turns are dropped from the prompt", n_plain)


def malformed(s):
    u, a = HISTORY[0], HISTORY[1]

    def with_asst(*blocks):
        return req(messages=[u, {"role": "assistant", "content": list(blocks)}, {"role": "user", "content": "ok"}])

    def with_result(*blocks):
        return req(messages=[u, a, {"role": "user", "content": list(blocks)}])

    call = {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {}}
    bad(s, "a tool_use without id", with_asst({k: v for k, v in call.items() if k != "id"}), "messages.1.content.0.id")
    bad(s, "a tool_use without name", with_asst({k: v for k, v in call.items() if k != "name"}), "messages.1.content.0.name")
    bad(s, "a tool_use whose input is a string", with_asst(dict(call, input="{}")), "messages.1.content.0.input")
    bad(s, "a tool_use without input", with_asst({k: v for k, v in call.items() if k != "input"}), "messages.1.content.0.input")
    bad(s, "a tool_use in a user message", req(messages=[{"role": "user", "content": [call]}]), "messages.0.content.0")
    bad(s, "a thinking block without signature", with_asst({"type": "thinking", "thinking": "x"}),
        "messages.1.content.0.signature")
    bad(s, "a redacted_thinking block without data", with_asst({"type": "redacted_thinking"}), "messages.1.content.0.data")
    bad(s, "a tool_result without tool_use_id", with_result({"type": "tool_result", "content": "x"}),
        "messages.2.content.0.tool_use_id")
    bad(s, "a tool_result answering no tool_use of the previous assistant turn",
        with_result({"type": "tool_result", "tool_use_id": "toolu_nope", "content": "x"}), "messages.2.content.0.tool_use_id")
    bad(s, "a tool_use the next message does not answer with a tool_result", with_asst(call),
        "messages.2: tool_use ids were found without tool_result blocks immediately after: toolu_9")
    bad(s, "a tool_result whose content is a number",
        with_result({"type": "tool_result", "tool_use_id": "toolu_01", "content": 5}), "messages.2.content.0.content")
    bad(s, "a tool_result holding an image", with_result({"type": "tool_result", "tool_use_id": "toolu_01", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}),
        "messages.2.content.0.content.0")
    bad(s, "is_error not a boolean", with_result({"type": "tool_result", "tool_use_id": "toolu_01", "is_error": "yes"}),
        "messages.2.content.0.is_error")
    bad(s, "a tool_result in an assistant message",
        req(messages=[u, {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]),
        "messages.1.content.0")
    bad(s, "tools not an array", req(tools=WEATHER), "tools")
    bad(s, "a tool without input_schema", req(tools=[{"name": "f"}]), "tools.0.input_schema")
    bad(s, "a tool whose input_schema is not of type object",
        req(tools=[dict(WEATHER, input_schema={"type": "string"})]), "tools.0.input_schema")
    bad(s, "a tool with a bad name", req(tools=[dict(WEATHER, name="get weather")]), "tools.0.name")
    bad(s, "two tools of one name", req(tools=[WEATHER, WEATHER]), "tools.1.name")
    bad(s, "a server tool", req(tools=[{"type": "web_search_20250305", "name": "web_search"}]), "tools.0.type")
    bad(s, "a description that is not a string", req(tools=[dict(WEATHER, description=5)]), "tools.0.description")
    bad(s, "tool_choice of an unknown type", req(tools=[WEATHER], tool_choice={"type": "some"}), "tool_choice.type")
    bad(s, "tool_choice tool without name", req(tools=[WEATHER], tool_choice={"type": "tool"}), "tool_choice.name")
    bad(s, "tool_choice naming no tool", req(tools=[WEATHER], tool_choice={"type": "tool", "name": "nope"}),
        "tool_choice.name")
    bad(s, "disable_parallel_tool_use not a boolean",
        req(tools=[WEATHER], tool_choice={"type": "auto", "disable_parallel_tool_use": 1}),
        "tool_choice.disable_parallel_tool_use")
    st, _, o = s.json("POST", "/v1/messages/count_tokens", {"model": "m", "messages": HISTORY, "tools": [{"name": "f"}]})
    check(st == 400 and "tools.0.input_schema" in o.get("error", {}).get("message", ""),
          "count_tokens validates the tools too", (st, o))


def main():
    s = Server("-t", "1", model=DEMO)
    try:
        accepted(s)
        counting(s)
        malformed(s)
    finally:
        rc, log = s.stop()
    check(rc == 0, "the server exits 0 on SIGTERM", (rc, log[-500:]))
    sys.exit(1 if check.failed else 0)


main()
