#!/usr/bin/python3
"""Tool calls and structured outputs through the real server on the built-in demo model: tool_choice
any / tool make the answer tool_use blocks whose input validates against the tool's input_schema
(constrained decoding), streamed as content_block_start (tool_use) and input_json_delta events in the
API's order; output_config.format makes the text JSON valid for its schema; schemas the grammar cannot
honour get 400. The demo model was never trained on tools, so only the grammar can make these pass."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ilpd_server import Checks, Server, sse  # noqa: E402

DEMO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "ilpd-demo-F16.gguf")
check = Checks()

WEATHER = {"name": "get_weather", "description": "Get the current weather in a city.",
           "input_schema": {"type": "object", "properties": {
               "city": {"type": "string", "maxLength": 40},
               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"], "additionalProperties": False}}
ORDER = {"name": "lookup_order", "description": "Find an order.",
         "input_schema": {"type": "object", "properties": {
             "order_id": {"type": "integer"},
             "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "maxItems": 3},
             "express": {"type": "boolean"},
             "note": {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}]}},
             "required": ["order_id", "items"],
             "$defs": {"item": {"type": "object", "properties": {"sku": {"type": "string", "maxLength": 12},
                                                                 "qty": {"type": "integer"}},
                                "required": ["sku", "qty"], "additionalProperties": False}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris? Also where is my order 1234?"}]


def resolve(schema, root):
    while isinstance(schema, dict) and "$ref" in schema:
        ref = schema["$ref"]
        node = root
        for part in ref.lstrip("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def valid(value, schema, root=None):
    """A small JSON Schema check for the subset the grammar supports."""
    root = root if root is not None else schema
    schema = resolve(schema, root)
    if schema is True or schema == {}:
        return True
    if "anyOf" in schema:
        return any(valid(value, s, root) for s in schema["anyOf"])
    if "const" in schema and value != schema["const"]:
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    t = schema.get("type")
    types = t if isinstance(t, list) else [t] if t else []
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    if types:
        def is_type(ty):
            if ty == "integer":
                return isinstance(value, int) and not isinstance(value, bool)
            if ty == "number":
                return isinstance(value, (int, float)) and not isinstance(value, bool)
            return isinstance(value, kinds[ty])
        if not any(is_type(ty) for ty in types):
            return False
    if isinstance(value, dict):
        props = schema.get("properties", {})
        if any(k not in value for k in schema.get("required", [])):
            return False
        if schema.get("additionalProperties") is False and any(k not in props for k in value):
            return False
        return all(valid(v, props[k], root) for k, v in value.items() if k in props)
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return False
        return all(valid(v, schema.get("items", {}), root) for v in value)
    if isinstance(value, str) and "maxLength" in schema and len(value) > schema["maxLength"]:
        return False
    return True


def ask(s, **kw):
    b = {"model": "ilpd-demo", "max_tokens": 200, "temperature": 0, "messages": ASK, "tools": [WEATHER, ORDER]}
    b.update(kw)
    return s.json("POST", "/v1/messages", b)


def calls_valid(o, names):
    """Only tool_use blocks, of NAMES, inputs valid; a model that keeps calling until max_tokens may leave
    its last call cut off, which is then not checked."""
    blocks = o.get("content", []) if isinstance(o, dict) else []
    uses = [b for b in blocks if b.get("type") == "tool_use"]
    if o.get("stop_reason") == "max_tokens" and len(uses) > 1:
        uses = uses[:-1]
    schemas = {"get_weather": WEATHER["input_schema"], "lookup_order": ORDER["input_schema"]}
    return uses and all(b["type"] == "tool_use" for b in blocks) and all(
        b["id"].startswith("toolu_") and b["name"] in names and valid(b["input"], schemas[b["name"]])
        for b in uses), uses


def forced_calls(s):
    st, h, o = ask(s, tool_choice={"type": "any"})
    ok, uses = calls_valid(o, {"get_weather", "lookup_order"})
    check(st == 200 and o.get("stop_reason") == "tool_use" and ok,
          "tool_choice any: only tool_use blocks, each input valid for its tool's schema, stop_reason tool_use", (st, o))
    check(len({b["id"] for b in uses}) == len(uses), "each call has its own id", uses)
    for name in ("get_weather", "lookup_order"):
        st, h, o = ask(s, tool_choice={"type": "tool", "name": name})
        ok, uses = calls_valid(o, {name})
        check(st == 200 and ok and o.get("stop_reason") in ("tool_use", "max_tokens"),
              "tool_choice tool %s: calls of that tool only, inputs valid" % name, (st, o))
    st, h, o = ask(s, tool_choice={"type": "any", "disable_parallel_tool_use": True})
    ok, uses = calls_valid(o, {"get_weather", "lookup_order"})
    check(st == 200 and ok and len(uses) == 1, "disable_parallel_tool_use: exactly one call", (st, o))
    st, h, o = ask(s, tool_choice={"type": "any"}, temperature=1.0, top_p=0.95)
    ok, uses = calls_valid(o, {"get_weather", "lookup_order"})
    check(st == 200 and ok, "tool_choice any with sampling at temperature 1: inputs still valid", (st, o))
    st, h, o = ask(s, tool_choice={"type": "tool", "name": "lookup_order"}, max_tokens=30)
    blocks = o.get("content", []) if isinstance(o, dict) else []
    check(st == 200 and o.get("stop_reason") == "max_tokens" and blocks and blocks[-1]["type"] == "tool_use"
          and isinstance(blocks[-1]["input"], dict),
          "a call cut off by max_tokens: stop_reason max_tokens, the tool_use block with an object input", (st, o))
    return ask(s, tool_choice={"type": "any"})[2]


def streamed_calls(s, plain):
    body = {"model": "ilpd-demo", "max_tokens": 200, "temperature": 0, "messages": ASK, "tools": [WEATHER, ORDER],
            "tool_choice": {"type": "any"}, "stream": True}
    st, h, raw = s.request("POST", "/v1/messages", json.dumps(body))
    events = sse(raw) if st == 200 else []
    names = [e for e, _ in events if e != "ping"]
    starts = [d for e, d in events if e == "content_block_start"]
    check(st == 200 and names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"] and starts
          and all(d["content_block"]["type"] == "tool_use" and d["content_block"]["input"] == {} for d in starts),
          "streamed: message_start, tool_use block starts with an empty input, message_delta, message_stop", names)
    inputs, order_ok, open_index = {}, True, None
    for e, d in events:
        if e == "content_block_start":
            order_ok &= open_index is None
            open_index = d["index"]
            inputs[open_index] = ""
        elif e == "content_block_delta":
            order_ok &= d["index"] == open_index and d["delta"]["type"] == "input_json_delta"
            inputs[open_index] += d["delta"]["partial_json"]
        elif e == "content_block_stop":
            order_ok &= d["index"] == open_index
            open_index = None
    check(order_ok and sorted(inputs) == list(range(len(inputs))),
          "streamed: each block's deltas between its start and its stop, indexes 0, 1, ...", names)
    delta = [d for e, d in events if e == "message_delta"]
    check(delta and delta[0]["delta"]["stop_reason"] == "tool_use", "streamed: stop_reason tool_use", delta)
    want = [(b["name"], b["input"]) for b in plain.get("content", [])]
    got = [(d["content_block"]["name"], json.loads(inputs[d["index"]])) for d in starts]
    check(got == want, "streamed: the concatenated input_json_delta of each call is the non-streamed input", (got, want))


FORMAT = {"type": "object", "properties": {
    "category": {"type": "string", "enum": ["billing", "shipping", "account", "other"]},
    "confidence": {"type": "number"},
    "order_ids": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 2},
    "urgent": {"type": "boolean"}},
    "required": ["category", "confidence", "order_ids", "urgent"], "additionalProperties": False}


def structured(s):
    body = {"model": "ilpd-demo", "max_tokens": 200, "temperature": 0,
            "messages": [{"role": "user", "content": "Tell me a story about a dragon."}],
            "output_config": {"format": {"type": "json_schema", "schema": FORMAT}}}
    st, h, o = s.json("POST", "/v1/messages", body)
    text = o["content"][0].get("text", "") if st == 200 else ""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    check(st == 200 and o.get("stop_reason") == "end_turn" and value is not None and valid(value, FORMAT),
          "output_config.format on an off-task prompt: the text is JSON valid for the schema", (st, o))
    body["output_config"] = {"format": {"type": "json_schema", "schema": {"type": "string", "enum": ["yes", "no"]}}}
    st, h, o = s.json("POST", "/v1/messages", body)
    check(st == 200 and o["content"][0].get("text") in ('"yes"', '"no"'), "a string enum schema: \"yes\" or \"no\"", o)
    body["output_config"] = {"format": {"type": "json_schema", "schema": {"$ref": "#/$defs/missing"}}}
    st, h, o = s.json("POST", "/v1/messages", body)
    check(st == 400 and o.get("error", {}).get("type") == "invalid_request_error",
          "a schema whose $ref does not resolve: 400 invalid_request_error", (st, o))
    big = {"name": "write_file", "input_schema": {"type": "object", "properties": {
        "content": {"type": "string", "maxLength": 1000000}, "lines": {"type": "array", "maxItems": 100000,
                                                                      "items": {"type": "string"}}},
        "required": ["content"]}}
    st, h, o = ask(s, tools=[big], tool_choice={"type": "any", "disable_parallel_tool_use": True}, max_tokens=40)
    uses = [b for b in o.get("content", []) if b.get("type") == "tool_use"] if isinstance(o, dict) else []
    check(st == 200 and uses and uses[0]["name"] == "write_file",
          "a tool with the huge bounds agents send (maxLength 1000000, as Claude Code's): 200, a call", (st, o))
    body["output_config"] = {"format": {"type": "json", "schema": FORMAT}}
    st, h, o = s.json("POST", "/v1/messages", body)
    check(st == 400 and "output_config.format.type" in o.get("error", {}).get("message", ""),
          "output_config.format.type other than json_schema: 400 naming it", (st, o))


def main():
    s = Server("-c", "2048", model=DEMO)  # two tools and their schemas outgrow the demo model's 512
    try:
        plain = forced_calls(s)
        streamed_calls(s, plain)
        structured(s)
        st, h, o = ask(s, tool_choice={"type": "none"}, max_tokens=8)
        check(st == 200 and all(b["type"] == "text" for b in o["content"]),
              "tool_choice none: text only", (st, o))
    finally:
        rc, log = s.stop()
    check(rc == 0, "the server exits cleanly", rc)
    sys.exit(1 if check.failed else 0)


if __name__ == "__main__":
    main()
