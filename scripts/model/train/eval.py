#!/usr/bin/python3
"""Held-out metrics for the demo model (PyTorch, fp32, greedy decoding).

  /usr/bin/python3 scripts/model/train/eval.py [--ckpt PATH] [--n 100] [--json out.json]

classify: valid-JSON rate (answer parses as a JSON object with keys
  "category" in the 4 labels and numeric "confidence" in [0,1]), category
  accuracy, exact match of the whole answer.
extract: valid-JSON rate, exact match (parsed object == reference), per-field
  accuracy.
yesno: accuracy (answer == "Yes." / "No.").
story: mean held-out NLL per answer token (teacher-forced) and the rate of
  answers that end with <|im_end|> within 400 new tokens is not measured (slow).
tools (v2): a call parses as <tool_call>\n{"name", "arguments"}\n</tool_call>;
  tool choice accuracy (the right tool, or a plain reply where none fits) and
  argument accuracy (the call's arguments equal the reference's).
schema (v2): valid JSON object, exact match of the object.
Generation stops at <|im_end|> (max 64 new tokens for the task prompts).
--heldout and --tokenizer point at a v2 data run (train_v2.sh prepare or cpu)
before its files are committed under models/.

--gguf MODEL asks a real `ilpd serve` of MODEL instead of PyTorch (far
faster on a CPU): each example is sent as the Messages request it stands for
(tasks_v2.messages_request; a tool_use block is read back as its <tool_call>
text) at temperature 0 with x-layer-mode --mode, and the layer status and
draft counts the server reports are summed. Story NLL needs PyTorch and is
left out then (`ilpd eval --ppl-text` measures perplexity).
"""
import argparse
import collections
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
from chat import Tokenizer, render  # noqa: E402
from gen import greedy_cached as greedy, load_model  # noqa: E402
from tasks_v2 import messages_request, tool_call_text  # noqa: E402

CATS = {"shipping", "returns", "product", "payment"}


HELDOUT = os.path.join(REPO, "models", "heldout")


def load(task, n):
    path = os.path.join(HELDOUT, f"{task}.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f][:n]


class Served:
    """Answers from `ilpd serve` of a GGUF file (greedy, the server's own
    chat template and tool parsing); .stats sums what its headers report."""

    def __init__(self, gguf, mode, probe):
        sys.path.insert(0, os.path.join(REPO, "tests", "server"))
        from ilpd_server import Server
        self.mode = mode
        self.stats = collections.Counter()
        self.s = Server("-c", "2048", "-t", "2", *(["--probe", probe] if probe else []), model=gguf)

    def answer(self, ex, max_new):
        body = dict(messages_request(ex), max_tokens=max_new, temperature=0)
        st, h, o = self.s.json("POST", "/v1/messages", body, {"x-layer-mode": self.mode})
        if st != 200:
            return f"<HTTP {st}: {o}>"
        self.stats["status:" + h.get("x-layer-status", "?")] += 1
        acc, _, drafted = h.get("x-layer-draft", "0/0").partition("/")
        self.stats["accepted"] += int(acc or 0)
        self.stats["drafted"] += int(drafted or 0)
        self.stats["output_tokens"] += o["usage"]["output_tokens"]
        return "".join(b["text"] if b["type"] == "text" else tool_call_text(b["name"], b["input"])
                       for b in o["content"] if b["type"] in ("text", "tool_use"))


def gen_answer(model, tok, ex, max_new=64):
    if isinstance(model, Served):
        return model.answer(ex, max_new)
    out, _ = greedy(model, tok.prompt_ids(ex["system"], ex["user"], ex.get("history", ())), max_new,
                    stop_id=tok.im_end)
    if out and out[-1] == tok.im_end:
        out = out[:-1]
    return tok.decode(out)


def parse(s):
    try:
        v = json.loads(s)
        return v if isinstance(v, dict) else None
    except ValueError:
        return None


@torch.no_grad()
def story_nll(model, tok, exs):
    tot, cnt = 0.0, 0
    for ex in exs:
        p = tok.prompt_ids(ex["system"], ex["user"])
        full = [tok.bos] + tok.encode_chat_text(render(ex))
        full = full[:model.c.max_seq_len + 1]
        x = torch.tensor([full[:-1]])
        y = torch.tensor(full[1:])
        lg = model(x)[0]
        nll = F.cross_entropy(lg[len(p) - 1:], y[len(p) - 1:], reduction="sum")
        tot += nll.item()
        cnt += len(y) - (len(p) - 1)
    return tot / cnt


def parse_call(s):
    """Returns (name, arguments) of a single tool call S, or None."""
    if not (s.startswith("<tool_call>\n") and s.endswith("\n</tool_call>")):
        return None
    v = parse(s[len("<tool_call>\n"):-len("\n</tool_call>")])
    if v is None or set(v) != {"name", "arguments"} or not isinstance(v["arguments"], dict):
        return None
    return v["name"], v["arguments"]


def eval_tools(model, tok, exs, show):
    valid = choice = args = calls = 0
    for i, ex in enumerate(exs):
        ans = gen_answer(model, tok, ex, max_new=96)
        want = ex["meta"]["tool"]
        c = parse_call(ans)
        if want is None:
            choice += c is None and "<tool_call>" not in ans
        else:
            calls += 1
            valid += c is not None
            choice += c is not None and c[0] == want
            args += c is not None and c[0] == want and c[1] == ex["meta"]["arguments"]
        if i < show:
            print(f"tools: {ex['user'][:70]!r} -> {ans!r}")
    return {"n": len(exs), "calls": calls, "valid_call": valid / max(1, calls),
            "tool_choice_acc": choice / len(exs), "argument_acc": args / max(1, calls)}


def eval_schema(model, tok, exs, show):
    valid = exact = 0
    for i, ex in enumerate(exs):
        ans = gen_answer(model, tok, ex)
        v = parse(ans)
        valid += v is not None
        exact += v == ex["meta"]
        if i < show:
            print(f"schema: {ex['user'][:70]!r} -> {ans!r}")
    return {"n": len(exs), "valid_json": valid / len(exs), "exact": exact / len(exs)}


def main():
    global HELDOUT
    ap = argparse.ArgumentParser()
    ap.add_argument("--heldout", default=HELDOUT, help="held-out jsonl folder")
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "models", "tokenizer.model"))
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--ckpt-dir", default="/work/ilpd-train")
    ap.add_argument("--n", type=int, default=100, help="held-out examples per task")
    ap.add_argument("--json", default=None)
    ap.add_argument("--show", type=int, default=3)
    ap.add_argument("--gguf", default=None, help="ask `ilpd serve` of this file instead of PyTorch")
    ap.add_argument("--mode", default="off", help="with --gguf: x-layer-mode (off, approximate, lossless)")
    ap.add_argument("--probe", default=None, help="with --gguf: the probe file")
    a = ap.parse_args()
    torch.set_num_threads(2)
    HELDOUT = a.heldout
    tok = Tokenizer(a.tokenizer)
    t0 = time.time()
    if a.gguf:
        model = Served(a.gguf, a.mode, a.probe)
        res = {"gguf": a.gguf, "mode": a.mode}
    else:
        model, ck, path = load_model(a.ckpt, a.ckpt_dir)
        res = {"checkpoint": path, "step": ck["state"]["step"], "tokens": ck["state"]["tokens"]}
    try:
        evaluate(model, tok, a, res)
    finally:
        if a.gguf:
            model.s.stop()
    res["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


def evaluate(model, tok, a, res):
    """Fills RES with every task's metrics."""

    exs = load("classify", a.n)
    valid = acc = exact = 0
    for i, ex in enumerate(exs):
        ans = gen_answer(model, tok, ex)
        v = parse(ans)
        ok = (v is not None and v.get("category") in CATS
              and isinstance(v.get("confidence"), (int, float)) and 0 <= v["confidence"] <= 1)
        ref = json.loads(ex["answer"])
        valid += ok
        acc += ok and v["category"] == ref["category"]
        exact += ans == ex["answer"]
        if i < a.show:
            print(f"classify: {ex['user'].split('Message: ')[-1][:80]!r} -> {ans!r}")
    res["classify"] = {"n": len(exs), "valid_json": valid / len(exs),
                       "category_acc": acc / len(exs), "exact": exact / len(exs)}

    exs = load("extract", a.n)
    valid = exact = 0
    fields = {"order_number": 0, "date": 0, "amount": 0}
    for i, ex in enumerate(exs):
        ans = gen_answer(model, tok, ex)
        v = parse(ans)
        ref = json.loads(ex["answer"])
        valid += v is not None and set(v) == set(ref)
        exact += v == ref
        for k in fields:
            fields[k] += v is not None and v.get(k) == ref[k]
        if i < a.show:
            print(f"extract: {ex['user'].split('Message: ')[-1][:80]!r} -> {ans!r}")
    res["extract"] = {"n": len(exs), "valid_json": valid / len(exs), "exact": exact / len(exs),
                      **{f"{k}_acc": c / len(exs) for k, c in fields.items()}}

    exs = load("yesno", a.n)
    acc = fmt = 0
    for i, ex in enumerate(exs):
        ans = gen_answer(model, tok, ex, max_new=8)
        fmt += ans in ("Yes.", "No.")
        acc += ans == ex["answer"]
        if i < a.show:
            print(f"yesno: {ex['user']!r} -> {ans!r} (ref {ex['answer']})")
    res["yesno"] = {"n": len(exs), "acc": acc / len(exs), "format_ok": fmt / len(exs)}

    for task, fn in (("tools", eval_tools), ("schema", eval_schema)):
        exs = load(task, a.n)
        if exs:
            res[task] = fn(model, tok, exs, a.show)

    exs = load("story", min(a.n, 40))
    ex = exs[0]
    res["story"] = {"n": len(exs), "sample_prompt": ex["user"]}
    if isinstance(model, Served):
        res["story"]["sample"] = model.answer(ex, 200)
        res["served"] = dict(model.stats)
        return
    res["story"]["answer_nll"] = story_nll(model, tok, exs)
    out, _ = greedy(model, tok.prompt_ids(ex["system"], ex["user"]), 200, stop_id=tok.im_end)
    res["story"]["sample"] = tok.decode([i for i in out if i != tok.im_end])
    res["story"]["sample_ended_with_im_end"] = bool(out and out[-1] == tok.im_end)


if __name__ == "__main__":
    main()
