#!/usr/bin/python3
"""The demo model v2's training text is the text the server renders: for tool
requests made by scripts/model/train/tasks_v2.py (tools on offer, tool_choice
notes, a call and its result in the history) and multi-turn conversations, the
Messages request that the example stands for is sent to /v1/messages/count_tokens
of a real server, and its count must equal the engine's tokenization
(`ilpd tokenize`) of the training renderer's prompt. A differing byte anywhere
(a separator, a newline, the order of the tool's keys) changes the count."""
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "server"))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "model", "train"))
from ilpd_server import Checks, Server  # noqa: E402

try:
    import tasks_v2  # noqa: E402
    from chat import render_history  # noqa: E402
except ImportError as e:  # make_data needs numpy
    print(f"skip - the training scripts do not import here: {e}")
    sys.exit(0)

DEMO = os.path.join(HERE, "..", "models", "ilpd-demo-Q8_0.gguf")
ILPD = os.environ.get("ILPD", "./ilpd")
check = Checks()


def engine_count(text):
    out = subprocess.run([ILPD, "tokenize", "-m", DEMO, text], capture_output=True, text=True, timeout=60)
    return len(out.stdout.split()) if out.returncode == 0 else -1


def main():
    rng = random.Random(7)
    pool = [tasks_v2.gen_tools(rng, "train") for _ in range(400)]
    exs = []
    for note in sorted({e["request"]["note"] for e in pool}):  # two of every note, without and with a call
        exs += [e for e in pool if e["request"]["note"] == note and "call" not in e["request"]][:2]
        exs += [e for e in pool if e["request"]["note"] == note and "call" in e["request"]][:1]
    exs += [tasks_v2.multi_turn(rng, "train", 3) for _ in range(3)]
    notes = {e["request"]["note"] for e in exs if "request" in e}
    check(len(notes) >= 4 and any("call" in e.get("request", {}) for e in exs),
          "the sample covers several tool_choice notes and a call with its result", sorted(notes))
    s = Server("-c", "4096", model=DEMO)
    try:
        for i, ex in enumerate(exs):
            st, _, o = s.json("POST", "/v1/messages/count_tokens", tasks_v2.messages_request(ex))
            got = o.get("input_tokens") if st == 200 else (st, o)
            want = engine_count(render_history(ex["system"], ex.get("history", ()), ex["user"]))
            kind = "tools" if "request" in ex else "multi-turn"
            check(got == want, f"{kind} example {i}: the server renders the training text ({want} tokens)",
                  f"server {got}, training text {want}")
    finally:
        s.stop()
    sys.exit(1 if check.failed else 0)


if __name__ == "__main__":
    main()
