#!/usr/bin/python3
"""Layer skipping on a model deeper than 32 layers, through the real server: a synthetic 40-layer
llama (scripts/model/make_synthetic.py) and a probe written here for it (bound to its SHA-256) that
skips layers 10, 11, 15, 20 and 21 whatever the prompt.

On the wire a mask byte then covers a group of g = ceil(40/32) = 2 layers (README, design 3):
byte i is layers 2i and 2i+1, computed when either is; bytes 20..31 cover nothing, are 0 in what
the server sends and ignored in what it receives. Checks: x-layer-mask groups the probe's mask so
(layers 14 and 15 share byte 7, which stays 1); the hint rules at group granularity (a superset
applied, a close hint applied and honoured, a far one overridden, bytes past the last group
ignored, a byte 2 invalid); lossless mode answers exactly what full depth answers, with the probe's
mask as its draft (drafting whenever it can: test_draft_always); approximate mode answers what the
engine's reference-checked masked forward gives (ilpd generate with the same per-layer mask)."""
import base64
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "model"))
import make_synthetic  # noqa: E402
from ilpd_server import ILPD, Checks, Server, write_fixed_probe  # noqa: E402

check = Checks()
N_LAYERS, K = 40, 3
SKIP = (10, 11, 15, 20, 21)
PROMPT = "the cat saw a big dog"


def wire(layers_on):
    """The 32 wire bytes of a per-layer mask (groups of 2)."""
    return bytes([int(any(layers_on[2 * i:2 * i + 2])) if 2 * i < N_LAYERS else 0 for i in range(32)])


def per_layer(skip):
    return [0 if l in skip else 1 for l in range(N_LAYERS)]


def b64(bs):
    return base64.b64encode(bytes(bs)).decode()


def ask(s, mode, hint=None, n=12):
    h = {"x-layer-mode": mode}
    if hint is not None:
        h["x-layer-hint"] = hint
    b = {"model": "deep", "max_tokens": n, "temperature": 0, "messages": [{"role": "user", "content": PROMPT}]}
    st, hdrs, o = s.json("POST", "/v1/messages", b, h)
    text = o["content"][0]["text"] if st == 200 else None
    return st, hdrs, text


def mask_of(hdrs):
    return base64.b64decode(hdrs.get("x-layer-mask", ""))


def main():
    tmp = os.environ.get("TESTS_TMP", "/tmp")
    model, probe = os.path.join(tmp, "deep40.gguf"), os.path.join(tmp, "deep40-probe.json")
    make_synthetic.make_model(model, type="Q8_0", layers=N_LAYERS, seed=40)
    write_fixed_probe(model, probe, N_LAYERS, K, SKIP)
    probe_wire = wire(per_layer(SKIP))
    s = Server("--probe", probe, "--test-draft-always", "1", "--skip-gate", "0", model=model)  # the mask, ungated
    try:
        st, h, approx = ask(s, "approximate")
        check(st == 200 and h.get("x-layer-status") == "active" and mask_of(h) == probe_wire,
              "approximate: x-layer-mask is the probe's mask in groups of 2 layers (byte 5 and 10 off, byte 7 on: "
              "layer 14 runs), bytes 20..31 zero", (st, h.get("x-layer-status"), list(mask_of(h))))
        run = subprocess.run([ILPD, "generate", "-m", model, "--chat", "-p", PROMPT, "-n", "12", "--temp", "0",
                              "--skip-mode", "approximate", "--skip-gate", "0", "--mask", ",".join(map(str, per_layer(SKIP)))],
                             capture_output=True, text=True)
        check(run.returncode == 0 and run.stdout == approx,
              "approximate: the answer of the masked forward (ilpd generate with the probe's per-layer mask)",
              (approx, run.stdout, run.stderr[-200:]))

        st, h, full = ask(s, "off")
        st2, h2, lossless = ask(s, "lossless")
        drafted = int(h2.get("x-layer-draft", "0/0").split("/")[1])
        check(approx is not None and approx != full, "the skipped layers change this model's answer (the mask is used)",
              (approx, full))
        check(st == 200 and st2 == 200 and lossless == full and h2.get("x-layer-mode") == "lossless"
              and drafted > 0 and mask_of(h2) == probe_wire,
              "lossless: exactly the full-depth answer, the probe's mask as the draft (x-layer-draft %s)"
              % h2.get("x-layer-draft"), (full, lossless, dict(h2)))

        ones = wire([1] * N_LAYERS)
        st, h, _ = ask(s, "approximate", b64(ones))
        check(st == 200 and h.get("x-layer-hint-status") == "applied" and mask_of(h) == ones
              and h.get("x-layer-status") == "full",
              "hint of full depth (a superset): applied, every group computed", dict(h))
        close = per_layer(SKIP + (24, 25))  # one more group: 2 of 40 layers, within 15%
        st, h, _ = ask(s, "approximate", b64(wire(close)))
        check(st == 200 and h.get("x-layer-hint-status") == "applied" and mask_of(h) == wire(close),
              "a hint one group (2 layers) off the probe's: applied, byte 12 (layers 24, 25) skipped too",
              (dict(h), list(mask_of(h))))
        far = per_layer(SKIP + tuple(range(24, 36)))  # 12 more layers: 30%
        st, h, _ = ask(s, "approximate", b64(wire(far)))
        check(st == 200 and h.get("x-layer-hint-status") == "overridden" and mask_of(h) == probe_wire,
              "a hint 6 groups (12 layers) off: overridden, the probe's mask stands", dict(h))
        past = bytearray(probe_wire)
        past[25] = 1
        st, h, _ = ask(s, "approximate", b64(past))
        check(st == 200 and h.get("x-layer-hint-status") == "applied" and mask_of(h) == probe_wire,
              "a byte past the last group (25) is ignored, not invalid", dict(h))
        bad = bytearray(probe_wire)
        bad[3] = 2
        st, h, _ = ask(s, "approximate", b64(bad))
        check(st == 200 and h.get("x-layer-hint-status") == "invalid" and mask_of(h) == probe_wire,
              "a group byte of 2: invalid, ignored, the request runs", dict(h))
    finally:
        rc, log = s.stop()
    check(rc == 0, "the server exits cleanly", log[-300:])
    for p in (model, probe):
        os.remove(p)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
