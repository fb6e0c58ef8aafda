#!/usr/bin/python3
"""Gemma 3, Phi-3 and Phi-4-mini through the real server, on synthetic files
(scripts/model/make_synthetic.py): gemma3 with 8 layers and a sliding window of 4 positions on all but
layer 5, phi3 with 8 layers, fused tensors and LongRoPE, and phi3 as Phi-4-mini (its gpt-4o BPE
vocabulary and template, 12 of 16 dimensions rotated); each with its family's vocabulary and template.

Per family: `ilpd inspect` names the family and what sets it apart; the prompt the server builds
for a system prompt and a user message has exactly the tokens of the family's template text
(count_tokens against `ilpd tokenize` of that text); a scripted model (its head makes " once upon"
then the family's end-of-turn token the argmax after the template's last token) answers " once
upon" and stops there with stop_reason end_turn, streamed or not; layer skipping on a random-weight
file with a probe written here (bound to its SHA-256) that skips layers 3 and 6 whatever the prompt:
x-layer-mask is the probe's mask, approximate mode answers what the engine's reference-checked
masked forward gives (ilpd generate with the same mask), lossless mode exactly what full depth
answers, with the probe's mask as its draft."""
import base64
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "model"))
import make_synthetic  # noqa: E402
from ilpd_server import ILPD, Checks, Server, write_fixed_probe  # noqa: E402

check = Checks()
N_LAYERS, K = 8, 2
SKIP = (3, 6)
PROMPT = "the cat saw a big dog"
# per family: the file's shape, the template's text for system "Be brief." and PROMPT, the end of a
# turn, and what inspect must print
FAMILIES = {
    "gemma3": dict(shape=dict(type="Q8_0", arch="gemma3", layers=N_LAYERS, window=4),
                   text="<start_of_turn>user\nBe brief.\n\n%s<end_of_turn>\n<start_of_turn>model\n" % PROMPT,
                   end="<end_of_turn>",
                   inspect=["architecture:  gemma3", "block:         embedding x sqrt(dim), norms after attention and FFN, GeGLU",
                            "window:        4 positions on 7 of 8 layers (rope base 10000", "chat template: gemma"]),
    "phi3": dict(shape=dict(type="Q8_0", arch="phi3", layers=N_LAYERS, longrope=True, rope_orig_ctx=64),
                 text="<|system|>\nBe brief.<|end|>\n<|user|>\n%s<|end|>\n<|assistant|>\n" % PROMPT,
                 end="<|end|>", last="<|assistant|>",  # its newline goes with it (Phi-3's rstrip)
                 inspect=["architecture:  phi3", "q/k/v fused (attn_qkv, split at load)", "gate and up fused in ffn_up",
                          "LongRoPE (short factors up to 64 positions of context, long beyond", "chat template: phi3"]),
    "phi4-mini": dict(shape=dict(type="Q8_0", arch="phi3", layers=N_LAYERS, phi4=True, rot=12, longrope=True,
                                 rope_orig_ctx=64, vocab=2048),
                      text="<|system|>Be brief.<|end|><|user|>%s<|end|><|assistant|>" % PROMPT,
                      end="<|end|>", last="<|assistant|>", space="\u0120",
                      inspect=["architecture:  phi3", "tokenizer:     gpt2 (pre: gpt-4o)", "chat template: phi4"]),
}


def per_layer(skip):
    return [0 if l in skip else 1 for l in range(N_LAYERS)]


def ask(s, mode, **extra):
    b = dict({"model": "gemma", "max_tokens": 12, "temperature": 0,
              "messages": [{"role": "user", "content": PROMPT}]}, **extra)
    st, hdrs, o = s.json("POST", "/v1/messages", b, {"x-layer-mode": mode})
    return st, hdrs, o


def text_of(o):
    return "".join(c.get("text", "") for c in o.get("content", [])) if isinstance(o, dict) else None


def scripted(tmp, arch, fam):
    model = os.path.join(tmp, arch + "-scripted.gguf")
    last, sp = fam.get("last", "<0x0A>"), fam.get("space", "\u2581")  # the template's last token, the space mark
    script = [(last, sp + "once"), (sp + "once", sp + "upon"), (sp + "upon", fam["end"])]
    make_synthetic.make_model(model, seed=3, script=script, **fam["shape"])
    run = subprocess.run([ILPD, "inspect", "-m", model], capture_output=True, text=True)
    check(run.returncode == 0 and all(w in run.stdout for w in fam["inspect"]),
          "%s: inspect names the family, what sets it apart and its template" % arch, run.stdout[:700])
    s = Server(model=model)
    try:
        body = {"model": arch, "system": "Be brief.", "messages": [{"role": "user", "content": PROMPT}]}
        st, _, o = s.json("POST", "/v1/messages/count_tokens", body)
        run = subprocess.run([ILPD, "tokenize", "-m", model, fam["text"]], capture_output=True, text=True)
        want = len(run.stdout.split()) if run.returncode == 0 else -1
        check(st == 200 and o.get("input_tokens") == want and want > 10,
              "%s: count_tokens is the template's text for a system prompt and a message (%d tokens)" % (arch, want),
              (st, o, want, run.stderr[-200:]))
        st, _, o = ask(s, "off", system="Be brief.")
        check(st == 200 and text_of(o) == " once upon" and o.get("stop_reason") == "end_turn"
              and o["usage"]["output_tokens"] == 3,
              "%s: a scripted answer after the template: ' once upon', then %s ends the turn" % (arch, fam["end"]),
              (st, o))
        st, _, raw = s.request("POST", "/v1/messages", json.dumps(dict(body, max_tokens=12, stream=True)))
        raw = raw.decode() if isinstance(raw, bytes) else raw
        check(st == 200 and '"stop_reason":"end_turn"' in raw.replace(" ", "") and "upon" in raw,
              "%s: streamed, the same answer and stop_reason end_turn" % arch, raw[-300:])
    finally:
        rc, log = s.stop()
    check(rc == 0, "%s: the scripted server exits cleanly" % arch, log[-300:])
    os.remove(model)


def skipping(tmp, arch, fam):
    model, probe = os.path.join(tmp, arch + "-8.gguf"), os.path.join(tmp, arch + "-8-probe.json")
    make_synthetic.make_model(model, seed=8, **fam["shape"])
    write_fixed_probe(model, probe, N_LAYERS, K, SKIP)
    wire = bytes(per_layer(SKIP) + [0] * (32 - N_LAYERS))
    s = Server("--probe", probe, "--test-draft-always", "1", "--skip-gate", "0", model=model)  # the mask, ungated
    try:
        st, h, o = ask(s, "approximate")
        approx = text_of(o)
        mask = base64.b64decode(h.get("x-layer-mask", ""))
        check(st == 200 and h.get("x-layer-status") == "active" and mask == wire,
              "%s: approximate: x-layer-mask is the probe's (layers 3 and 6 off)" % arch, (st, dict(h), list(mask)))
        run = subprocess.run([ILPD, "generate", "-m", model, "--chat", "-p", PROMPT, "-n", "12", "--temp", "0",
                              "--skip-mode", "approximate", "--skip-gate", "0", "--mask", ",".join(map(str, per_layer(SKIP)))],
                             capture_output=True, text=True)
        check(run.returncode == 0 and run.stdout == approx,
              "%s: approximate: the answer of the masked forward (ilpd generate with the probe's mask)" % arch,
              (approx, run.stdout, run.stderr[-200:]))
        st, _, o = ask(s, "off")
        full = text_of(o)
        st2, h2, o2 = ask(s, "lossless")
        drafted = int(h2.get("x-layer-draft", "0/0").split("/")[1])
        check(approx is not None and approx != full, "%s: the skipped layers change this model's answer" % arch, (approx, full))
        check(st == 200 and st2 == 200 and text_of(o2) == full and drafted > 0,
              "%s: lossless: exactly the full-depth answer, the probe's mask as the draft (x-layer-draft %s)"
              % (arch, h2.get("x-layer-draft")), (full, text_of(o2), dict(h2)))
    finally:
        rc, log = s.stop()
    check(rc == 0, "%s: the server exits cleanly" % arch, log[-300:])
    for p in (model, probe):
        os.remove(p)


def main():
    tmp = os.environ.get("TESTS_TMP", "/tmp")
    for arch, fam in FAMILIES.items():
        scripted(tmp, arch, fam)
        skipping(tmp, arch, fam)
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
