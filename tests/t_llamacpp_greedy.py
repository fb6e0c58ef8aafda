#!/usr/bin/python3
"""Greedy continuations of ilpd against llama.cpp's on the synthetic file of each family.

Runs only when LLAMA_COMPLETION names a llama.cpp `llama-completion` binary (built beside the
project, never part of it; README, "Supported models"); skips otherwise. For each synthetic file
(scripts/model/make_synthetic.py: llama, llama with Llama 3.1 rope_freqs, qwen2, qwen3 with a head
size other than dim/heads, a tied qwen3 head, a 40-layer llama, YaRN on qwen2 and qwen3; float and
quantized types) both
programs continue the same raw prompt greedily for N tokens at full depth, and their texts must be
equal. llama.cpp prints the bytes of the pieces as they are; ilpd turns bytes that are not UTF-8
into U+FFFD (engine/textout.h), so llama.cpp's bytes go through that same rule before comparing
(random weights emit byte tokens often), and NUL bytes, which llama.cpp's printf drops, are dropped
from ilpd's, and so are the <think> and </think> tags, which ilpd takes as the bounds of a
thought (engine/answer.h; here the thought, opened by the prompt or not, is the text). Both keep the KV cache in F32 (llama.cpp's default is F16: its rounding alone flips
the near-ties of random weights).

Near-ties: greedy decoding is only defined where the best token wins clearly. The numpy reference
(tests/reference/reference.py, float64) follows the greedy path first, up to its first step whose
best token leads the second by less than MARGIN of the largest logit (float types: the float32
noise of two implementations; quantized types: one int8 step of an activation that lies near a
rounding tie, which llama.cpp and ilpd may round differently, moves logits by ~1%): the
text of the steps before it must begin both programs' outputs, and they must agree with each
other on all N tokens when there is no near-tie (llama.cpp is asked for EXTRA more tokens, because
the end of what it prints is sometimes lost, and ilpd's text must begin its text). A case whose path has a near-tie before step
MIN_STEPS is a skip. Environment: ILPD, LLAMA_COMPLETION, TESTS_TMP.
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "model"))
sys.path.insert(0, os.path.join(HERE, "reference"))
import make_synthetic  # noqa: E402
import numpy as np  # noqa: E402
from reference import QUANTIZED, Model  # noqa: E402

ILPD = os.environ.get("ILPD", os.path.join(HERE, "..", "ilpd"))
LLAMA = os.environ.get("LLAMA_COMPLETION", "")
TMP = os.environ.get("TESTS_TMP", "/tmp")
N = 32
PROMPT = "the cat saw a big dog and"
SMALL = dict(dim=64, heads=4, kv_heads=2, ffn=128, vocab=320, ctx=256)
MARGIN = {"float": 1e-3, "quantized": 1e-2}
MIN_STEPS = 8
EXTRA = 8  # llama.cpp generates that many more: its log thread may lose the end of what it prints

CASES = [
    ("llama F32", dict(SMALL, type="F32", layers=4)),
    ("llama Q8_0", dict(SMALL, type="Q8_0", layers=4)),
    ("llama Q4_K", dict(SMALL, dim=256, ffn=512, type="Q4_K", layers=3)),
    ("llama F16, Llama 3.1 rope_freqs", dict(SMALL, type="F16", layers=3, llama3_rope_scaling=True,
                                             rope_orig_ctx=32, rope_base=500000.0)),
    ("llama F16, 40 layers", dict(SMALL, type="F16", layers=40)),
    ("llama Q8_0, 40 layers", dict(SMALL, type="Q8_0", layers=40)),
    ("qwen2 F32 (q/k/v biases)", dict(SMALL, type="F32", layers=3, arch="qwen2")),
    ("qwen3 F32 (Q/K norms, head size 32)", dict(SMALL, type="F32", layers=3, arch="qwen3", head_dim=32)),
    ("qwen3 Q8_0 (head size 32)", dict(SMALL, type="Q8_0", layers=4, arch="qwen3", head_dim=32)),
    ("qwen3 F16, tied head", dict(SMALL, type="F16", layers=2, arch="qwen3", tied=True)),
    ("qwen2 F32, YaRN x4 from 32 positions", dict(SMALL, type="F32", layers=3, arch="qwen2", rope_scaling="yarn",
                                                  rope_orig_ctx=32)),
    ("qwen3 F16, YaRN x4 from 64 positions", dict(SMALL, type="F16", layers=3, arch="qwen3", head_dim=32,
                                                  rope_scaling="yarn", rope_orig_ctx=64)),
    ("gemma3 F32, tied head", dict(SMALL, type="F32", layers=3, arch="gemma3", tied=True)),
    ("gemma3 F32, sliding window 6 (every 2nd layer global)", dict(SMALL, type="F32", layers=4, arch="gemma3",
                                                                   window=6, swa_pattern=2)),
    ("gemma3 Q8_0, window 8, the default pattern, linear rope scaling",
     dict(SMALL, type="Q8_0", layers=8, arch="gemma3", window=8, rope_scaling="linear")),
    ("gemma3 F16, head size 32, window 5", dict(SMALL, type="F16", layers=3, arch="gemma3", head_dim=32,
                                                window=5, swa_pattern=3)),
    ("phi3 F32 (fused attn_qkv and gate-up ffn_up)", dict(SMALL, type="F32", layers=3, arch="phi3")),
    ("phi3 Q8_0", dict(SMALL, type="Q8_0", layers=3, arch="phi3")),
    ("phi3 F16, LongRoPE within the original 1024 positions (short factors)",
     dict(SMALL, type="F16", layers=3, arch="phi3", longrope=True, rope_orig_ctx=1024)),
    ("phi3 F32, LongRoPE beyond the original 32 positions (long factors)",
     dict(SMALL, type="F32", layers=3, arch="phi3", longrope=True, rope_orig_ctx=32)),
    ("phi3 F32, partial rotary (12 of 16 dimensions, Phi-4-mini's 3/4)",
     dict(SMALL, type="F32", layers=3, arch="phi3", rot=12, longrope=True, rope_orig_ctx=32)),
    ("phi3 F32 as Phi-4-mini (gpt-4o BPE vocabulary, partial rotary, LongRoPE)",
     dict(SMALL, type="F32", layers=3, arch="phi3", phi4=True, rot=12, longrope=True, rope_orig_ctx=32)),
]


def _valid_prefix(b):
    """True when b could still grow into one valid UTF-8 character (engine/utf8.c's may_grow)."""
    if any(c & 0xC0 != 0x80 for c in b[1:]):
        return False
    if len(b) < 2:
        return True
    b0, b1 = b[0], b[1]
    return not ((b0 == 0xE0 and b1 < 0xA0) or (b0 == 0xED and b1 >= 0xA0) or (b0 == 0xF0 and b1 < 0x90)
                or (b0 == 0xF4 and b1 >= 0x90))


def as_ilpd_text(b):
    """Decode bytes as engine/textout.c does: whole valid characters kept, a byte that starts no
    valid character becomes U+FFFD (the next bytes are looked at again), an unfinished character
    at the end one U+FFFD."""
    out, i = [], 0
    while i < len(b):
        c = b[i]
        n = 1 if c < 0x80 else 2 if 0xC2 <= c <= 0xDF else 3 if 0xE0 <= c <= 0xEF else 4 if 0xF0 <= c <= 0xF4 else 0
        if n and i + n <= len(b):
            try:
                out.append(b[i:i + n].decode("utf-8"))
                i += n
                continue
            except UnicodeDecodeError:
                pass
        elif n and _valid_prefix(b[i:]):
            out.append("\ufffd")
            break
        out.append("\ufffd")
        i += 1
    return "".join(out)


def llama_text(path):
    p = subprocess.run([LLAMA, "-m", path, "-p", PROMPT, "-n", str(N + EXTRA), "--temp", "0", "-t", "2", "-no-cnv",
                        "-c", "512", "--no-display-prompt", "--no-warmup", "-ctk", "f32", "-ctv", "f32"],
                       capture_output=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError("llama-completion failed: " + p.stderr.decode(errors="replace")[-300:])
    out = p.stdout
    if out.endswith(b"\n\n"):  # printed after every generation
        out = out[:-2]
    if out.endswith(b" [end of text]\n"):  # printed when the model ends its text
        out = out[:-len(b" [end of text]\n")]
    return without_think_tags(as_ilpd_text(out))


def without_think_tags(text):
    """ilpd never prints <think> and </think>: they open and close thoughts (engine/answer.h)."""
    return text.replace("<think>", "").replace("</think>", "")


def ilpd_text(path):
    p = subprocess.run([ILPD, "generate", "-m", path, "-p", PROMPT, "-n", str(N), "--temp", "0", "-t", "2",
                        "--skip-mode", "off"], capture_output=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError("ilpd generate failed: " + p.stderr.decode(errors="replace")[-300:])
    return p.stdout.decode("utf-8").replace("\0", "")  # llama.cpp prints pieces with %s: a NUL byte is lost


def piece_bytes(model, tid):
    """The bytes token TID adds to the text (SentencePiece pieces, byte tokens, GPT-2 byte symbols)."""
    text = model.gguf.kv["tokenizer.ggml.tokens"][tid]
    kind = model.gguf.kv["tokenizer.ggml.token_type"][tid]
    if kind in (2, 3):  # unknown, control: no text
        return b""
    if model.gguf.kv["tokenizer.ggml.model"] == "llama":
        if kind == 6:
            return bytes([int(text[3:5], 16)])
        return text.replace("\u2581", " ").encode()
    if kind == 4:  # user-defined: as written
        return text.encode()
    decode = {c: b for b, c in zip(range(256), _gpt2_order())}
    return bytes(decode[c] for c in text)


def _gpt2_order():
    symbols = make_synthetic._gpt2_byte_symbols()  # symbol of the i-th byte token, in GPT-2's id order
    bs = [ord(c) if ord(c) < 256 else None for c in symbols]
    rest = iter(b for b in range(256) if b not in bs)
    order = [b if b is not None else next(rest) for b in bs]
    return [symbols[order.index(b)] for b in range(256)]


def reference_path(path):
    """(bytes of the reference's greedy text before its first near-tie, steps before it, N when none)."""
    p = subprocess.run([ILPD, "tokenize", "-m", path, PROMPT], capture_output=True, text=True, check=True)
    seq = [int(t) for t in p.stdout.split()]
    model = Model(path)
    quantized = any(t[0] in QUANTIZED for t in model.gguf.tensors.values())
    bound = MARGIN["quantized" if quantized else "float"]
    out = b""
    for step in range(N):
        logits = model.forward(seq)[-1]
        top = np.argsort(logits)[::-1]
        if logits[top[0]] - logits[top[1]] < bound * np.max(np.abs(logits)):
            return out, step
        seq.append(int(top[0]))
        out += piece_bytes(model, int(top[0]))
    return out, N


def main():
    if not LLAMA or not os.access(LLAMA, os.X_OK):
        print("skip - greedy agreement with llama.cpp: set LLAMA_COMPLETION to a llama-completion binary")
        return 0
    failed = 0
    for i, (name, shape) in enumerate(CASES):
        path = os.path.join(TMP, "greedy-%d.gguf" % i)
        make_synthetic.make_model(path, seed=300 + i, **shape)
        ref, steps = reference_path(path)
        if steps < MIN_STEPS:
            print("skip - greedy agreement with llama.cpp: %s: the reference's step %d is a near-tie" % (name, steps))
            os.remove(path)
            continue
        # the reference's text in ilpd's form, without a character its last step may have left unfinished
        ref_text = without_think_tags(as_ilpd_text(ref).rstrip("\ufffd").replace("\0", ""))
        try:
            want, got = llama_text(path), ilpd_text(path)
            ok = want.startswith(ref_text) and got.startswith(ref_text) and (steps < N or want.startswith(got.rstrip("\ufffd")))
            why = "" if ok else "reference %r, llama.cpp %r, ilpd %r" % (ref_text, want, got)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            ok, why = False, str(e)
        os.remove(path)
        failed += not ok
        what = "all %d tokens equal" % N if steps == N else "the %d tokens before the reference's first near-tie" % steps
        print("%s - greedy agreement with llama.cpp: %s: %s%s" % ("ok" if ok else "not ok", name, what,
                                                                 "" if ok else ": " + why[:400]))
        if ok and steps < N:
            print("# %s: past the near-tie llama.cpp and ilpd %s" % (
                name, "still agree on all %d tokens" % N if want.startswith(got.rstrip("\ufffd")) else "part"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
