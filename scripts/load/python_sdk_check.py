#!/usr/bin/env python3
"""The official Anthropic Python SDK against a running ilpd.

    python3 scripts/load/python_sdk_check.py --sdk-path DIR[:DIR...] --base-url http://127.0.0.1:8080 [--model ID]

--sdk-path is a PYTHONPATH string under which `import anthropic` works (the SDK is neither in Debian
nor in npm, so this is not part of `make test`). Prints one "ok - " / "not ok - " line per check and
exits 1 if any failed. Every call uses temperature 0 and no retries.
"""
import argparse
import json
import sys

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city"],
        "additionalProperties": False,
    },
}
TOOL_QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {
        "category": {"type": "string", "enum": ["shipping", "returns", "product", "payment"]},
        "confidence": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["category", "confidence"],
    "additionalProperties": False,
}
STORY_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "animal": {"type": "string"}, "happy": {"type": "boolean"}},
    "required": ["title", "animal", "happy"],
    "additionalProperties": False,
}
STORY_SYSTEM = "You are a storyteller for young children."
STORY = [{"role": "user", "content": "Tell me a story about a cat."}]

failed = 0


def check(ok, name, detail=None):
    """Prints the check's line; counts a failure."""
    global failed
    if ok:
        print("ok - python sdk: %s" % name)
    else:
        failed += 1
        print("not ok - python sdk: %s: %s" % (name, str(detail)[:400]))


def schema_errors(value, schema, path="$"):
    """Returns the list of places where value breaks schema (the subset used above)."""
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    t = schema.get("type")
    if t in ("number", "integer"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and t == "integer":
            ok = float(value).is_integer()
        if not ok:
            return ["%s: not %s" % (path, t)]
    elif t is not None and not isinstance(value, kinds[t]):
        return ["%s: not %s" % (path, t)]
    if "enum" in schema and value not in schema["enum"]:
        return ["%s: %r not in enum" % (path, value)]
    errs = []
    if t == "object":
        props = schema.get("properties", {})
        errs += ["%s.%s: missing" % (path, k) for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k in props:
                errs += schema_errors(v, props[k], "%s.%s" % (path, k))
            elif schema.get("additionalProperties") is False:
                errs.append("%s.%s: not allowed" % (path, k))
    if t == "array":
        for i, v in enumerate(value):
            errs += schema_errors(v, schema.get("items", {}), "%s[%d]" % (path, i))
    return errs


def tool_use_of(msg):
    """Returns the message's first tool_use block, or None."""
    return next((b for b in msg.content if b.type == "tool_use"), None)


def check_plain(anthropic, client, model):
    """create, stream, count_tokens, models.list, request ids and the error class."""
    msg = client.messages.create(model=model, max_tokens=24, temperature=0, system=STORY_SYSTEM, messages=STORY)
    check(msg.type == "message" and msg.content and msg.content[0].type == "text" and msg.content[0].text
          and msg.usage.input_tokens > 0 and msg.stop_reason in ("max_tokens", "end_turn"), "messages.create", msg)
    check((msg._request_id or "").startswith("req_") and msg.id.startswith("msg_"), "_request_id and msg_ id",
          (msg._request_id, msg.id))

    with client.messages.stream(model=model, max_tokens=24, temperature=0, system=STORY_SYSTEM,
                                messages=STORY) as stream:
        deltas = "".join(stream.text_stream)
        final = stream.get_final_message()
    check(deltas == final.content[0].text == msg.content[0].text and final.usage.output_tokens == msg.usage.output_tokens
          and final.usage.input_tokens == msg.usage.input_tokens,
          "messages.stream text_stream + get_final_message() equal messages.create", (deltas, final))

    count = client.messages.count_tokens(model=model, system=STORY_SYSTEM, messages=STORY)
    check(count.input_tokens == msg.usage.input_tokens, "messages.count_tokens", count)

    models = list(client.models.list())
    check(len(models) == 1 and models[0].id == model and models[0].type == "model", "models.list", models)

    try:
        client.messages.create(model=model, max_tokens=0, messages=STORY)
        check(False, "max_tokens 0 raises BadRequestError", "no error")
    except anthropic.BadRequestError as e:
        check(e.status_code == 400 and e.body.get("error", {}).get("type") == "invalid_request_error",
              "max_tokens 0 raises BadRequestError", e.body)
    except anthropic.APIError as e:
        check(False, "max_tokens 0 raises BadRequestError", "%s %s" % (type(e).__name__, e))


def check_tools(anthropic, client, model):
    """tool_choice any with one call (the demo model, never trained on tools, would otherwise go on calling
    until max_tokens): create, and stream with input_json events; then the agent's second turn."""
    msg = client.messages.create(model=model, max_tokens=200, temperature=0, tools=[WEATHER_TOOL],
                                 tool_choice={"type": "any", "disable_parallel_tool_use": True}, messages=TOOL_QUESTION)
    call = tool_use_of(msg)
    check(call is not None and msg.stop_reason == "tool_use" and call.id.startswith("toolu_")
          and call.name == "get_weather" and isinstance(call.input, dict)
          and not schema_errors(call.input, WEATHER_TOOL["input_schema"]),
          "tools + tool_choice any give a valid tool_use block", msg)
    count = client.messages.count_tokens(model=model, tools=[WEATHER_TOOL],
                                          tool_choice={"type": "any", "disable_parallel_tool_use": True},
                                          messages=TOOL_QUESTION)
    check(count.input_tokens == msg.usage.input_tokens, "count_tokens counts the tools", (count, msg.usage))

    partials, snapshot = [], None
    with client.messages.stream(model=model, max_tokens=200, temperature=0, tools=[WEATHER_TOOL],
                                tool_choice={"type": "any", "disable_parallel_tool_use": True}, messages=TOOL_QUESTION) as stream:
        for event in stream:
            if event.type == "input_json":
                partials.append(event.partial_json)
                snapshot = event.snapshot
        final = stream.get_final_message()
    fcall = tool_use_of(final)
    try:
        streamed = json.loads("".join(partials))
    except ValueError as e:
        streamed = e
    check(fcall is not None and final.stop_reason == "tool_use" and partials and streamed == fcall.input == snapshot
          and not schema_errors(fcall.input, WEATHER_TOOL["input_schema"]),
          "messages.stream with tools: input_json events + get_final_message()", (partials, final))
    if call is None:
        return
    history = TOOL_QUESTION + [
        {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18 degrees, sunny"}]},
    ]
    second = client.messages.create(model=model, max_tokens=30, temperature=0, tools=[WEATHER_TOOL],
                                    messages=history)
    check(second.type == "message" and second.content, "second turn with tool_use + tool_result history", second)


def check_structured(anthropic, client, model):
    """output_config.format json_schema: the text is JSON valid for the schema, on the demo model's own
    classify task and on a story prompt that the model would never answer with JSON by itself."""
    classify = ("You are a customer support assistant. Classify the message. Reply only with JSON.",
                [{"role": "user", "content": "Classify this customer message as shipping, returns, product or "
                  "payment.\nMessage: My card was charged twice for the same order."}])
    for name, (system, messages), schema in (("classify task", classify, ANSWER_SCHEMA),
                                             ("off-task story prompt", (STORY_SYSTEM, STORY), STORY_SCHEMA)):
        msg = client.messages.create(model=model, max_tokens=120, temperature=0, system=system, messages=messages,
                                     output_config={"format": {"type": "json_schema", "schema": schema}})
        text = "".join(b.text for b in msg.content if b.type == "text")
        try:
            errs = schema_errors(json.loads(text), schema)
        except ValueError as e:
            errs = ["not JSON: %s" % e]
        check(not errs, "output_config.format json_schema, %s: JSON valid for the schema" % name, (errs, text))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdk-path", required=True, help="PYTHONPATH string under which `import anthropic` works")
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", help="model id (default: the one /v1/models lists)")
    args = ap.parse_args()
    sys.path[:0] = [p for p in args.sdk_path.split(":") if p]
    import anthropic

    print("# anthropic %s from %s" % (anthropic.__version__, anthropic.__file__))
    client = anthropic.Anthropic(base_url=args.base_url, api_key="test-key", max_retries=0, timeout=120)
    model = args.model or next(iter(client.models.list())).id
    for part in (check_plain, check_tools, check_structured):
        try:
            part(anthropic, client, model)
        except Exception as e:  # an unexpected exception fails the part, the others still run
            check(False, part.__name__, "%s: %s" % (type(e).__name__, e))
    print("# %d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
