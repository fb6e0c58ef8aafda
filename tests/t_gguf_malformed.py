#!/usr/bin/python3
"""Malformed GGUF files are refused with a clear message and exit code 1.

Every case runs `ilpd inspect -m FILE` and expects: exit status 1, the file
name and the expected problem in stderr, and no sanitizer report. So are
well-formed files of a family that lack what the family needs (Qwen3's Q/K
norms, Qwen2's biases) or ask for what the engine does not do (LongRoPE,
DeepSeek's YaRN attention factor, key and value heads of different sizes).
"""

import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "model"))
import make_synthetic  # noqa: E402

ILPD = os.environ.get("ILPD", "./ilpd")
TMP = os.environ.get("TESTS_TMP", "/tmp")
failed = 0


def report(ok, name, why=""):
    global failed
    if ok:
        print("ok - " + name)
    else:
        failed += 1
        print("not ok - %s: %s" % (name, why))


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv_u32(key, v):
    return gstr(key) + struct.pack("<II", 4, v)


def tensor_info(name, dims, ttype, offset):
    return gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", ttype, offset)


def handmade(magic=b"GGUF", version=3, n_tensors=1, n_kv=1, kvs=None, infos=None, data=b"\0" * 64, pad=True):
    """A tiny GGUF with one kv and one F32 tensor [4, 2] unless overridden."""
    kvs = kvs if kvs is not None else kv_u32("general.alignment", 32)
    infos = infos if infos is not None else tensor_info("t", [4, 2], 0, 0)
    head = magic + struct.pack("<IQQ", version, n_tensors, n_kv) + kvs + infos
    if pad:
        head += b"\0" * ((32 - len(head) % 32) % 32)
    return head + data


def expect_refused(name, content, needle):
    path = os.path.join(TMP, "bad-%s.gguf" % name.replace(" ", "_").replace("/", "_"))
    with open(path, "wb") as f:
        f.write(content)
    p = subprocess.run([ILPD, "inspect", "-m", path], capture_output=True, text=True, timeout=60)
    err = p.stderr
    sanitizer = "Sanitizer" in err or "runtime error" in err
    ok = p.returncode == 1 and path in err and needle.lower() in err.lower() and not sanitizer
    report(ok, "malformed GGUF refused: " + name,
           "exit %d, stderr %r (wanted %r)" % (p.returncode, err.strip()[-300:], needle))
    os.remove(path)


def expect_model_refused(name, needle, **shape):
    """A synthetic model (make_synthetic.make_model keywords) is refused naming NEEDLE."""
    path = os.path.join(TMP, "family.gguf")
    make_synthetic.make_model(path, type="F32", layers=2, dim=64, heads=4, kv_heads=2, ffn=128, vocab=300, ctx=64,
                              **shape)
    expect_refused(name, open(path, "rb").read(), needle)
    os.remove(path)


def families():
    expect_model_refused("qwen3 without a layer's attn_q_norm", "missing tensor 'blk.1.attn_q_norm.weight'",
                         arch="qwen3", drop=("blk.1.attn_q_norm.weight",))
    expect_model_refused("qwen3 with attn_q_norm but no attn_k_norm", "missing tensor 'blk.0.attn_k_norm.weight'",
                         arch="qwen3", drop=("blk.0.attn_k_norm.weight",))
    expect_model_refused("qwen2 without its q bias", "missing tensor 'blk.0.attn_q.bias'", arch="qwen2",
                         drop=("blk.0.attn_q.bias",))
    expect_model_refused("qwen2 with a q bias but no v bias", "missing tensor 'blk.1.attn_v.bias'", arch="qwen2",
                         drop=("blk.1.attn_v.bias",))
    expect_model_refused("LongRoPE scaling", "unsupported rope scaling 'longrope'",
                         extra_kv={"llama.rope.scaling.type": "longrope"})
    expect_model_refused("YaRN with DeepSeek's yarn_log_multiplier", "yarn_log_multiplier", arch="qwen3",
                         rope_scaling="yarn", extra_kv={"qwen3.rope.scaling.yarn_log_multiplier": 0.1})
    expect_model_refused("gemma3 without a layer's post_ffw_norm", "missing tensor 'blk.1.post_ffw_norm.weight'",
                         arch="gemma3", drop=("blk.1.post_ffw_norm.weight",))
    expect_model_refused("gemma3 without its Q/K norms", "missing tensor 'blk.0.attn_q_norm.weight'",
                         arch="gemma3", drop=("blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight"))
    expect_model_refused("gemma3 with a window pattern longer than the model", "sliding_window_pattern",
                         arch="gemma3", window=4, swa_pattern=9)
    expect_model_refused("gemma3 with a window that is not an integer", "gemma3.attention.sliding_window",
                         arch="gemma3", extra_kv={"gemma3.attention.sliding_window": "wide"})
    expect_model_refused("phi3 without a layer's attn_qkv", "missing tensor 'blk.0.attn_qkv.weight'",
                         arch="phi3", drop=("blk.0.attn_qkv.weight",))
    expect_model_refused("phi3 without its ffn_up", "missing tensor 'blk.1.ffn_up.weight'",
                         arch="phi3", drop=("blk.1.ffn_up.weight",))
    expect_model_refused("phi3 LongRoPE with one factor table", "rope_factors_short and rope_factors_long",
                         arch="phi3", longrope=True, drop=("rope_factors_long.weight",))
    expect_model_refused("key and value heads of different sizes", "different sizes",
                         extra_kv={"llama.attention.value_length": 8})


def main():
    families()
    # Sanity: the handmade base file parses as GGUF (it then fails as a model, not as a file).
    expect_refused("handmade valid file but not a model", handmade(), "general.architecture")
    expect_refused("wrong magic", handmade(magic=b"GGUX"), "bad magic")
    expect_refused("empty file", b"", "truncated")
    expect_refused("version 99", handmade(version=99), "version")
    expect_refused("absurd tensor count", handmade(n_tensors=1 << 60), "tensor count")
    expect_refused("absurd metadata count", handmade(n_kv=1 << 60), "metadata count")
    expect_refused("absurd key length", handmade(kvs=struct.pack("<Q", 1 << 62) + b"x" * 8), "truncated")
    expect_refused("unknown metadata type", handmade(kvs=gstr("a.b") + struct.pack("<I", 77)), "unknown type")
    expect_refused("absurd array length",
                   handmade(kvs=gstr("a.b") + struct.pack("<IIQ", 9, 4, 1 << 61)), "past the end")
    expect_refused("absurd string array",
                   handmade(kvs=gstr("a.b") + struct.pack("<IIQ", 9, 8, 1 << 40)), "past the end")
    expect_refused("string past the end",
                   handmade(kvs=gstr("a.b") + struct.pack("<IQ", 8, 1 << 20)), "truncated")
    expect_refused("too many dimensions", handmade(infos=tensor_info("t", [1, 1, 1, 1, 1], 0, 0)), "dimensions")
    expect_refused("zero dimension", handmade(infos=tensor_info("t", [4, 0], 0, 0)), "absurd shape")
    expect_refused("absurd dimensions", handmade(infos=tensor_info("t", [1 << 40, 1 << 40], 0, 0)), "absurd shape")
    expect_refused("unknown tensor type", handmade(infos=tensor_info("t", [4, 2], 99, 0)), "unsupported type")
    expect_refused("unsupported tensor type IQ2_XXS", handmade(infos=tensor_info("t", [256, 2], 16, 0)), "unsupported type")
    expect_refused("offset past the end", handmade(infos=tensor_info("t", [4, 2], 0, 1 << 20)), "past the end")
    expect_refused("misaligned offset", handmade(infos=tensor_info("t", [4, 2], 0, 4)), "aligned")
    expect_refused("data past the end", handmade(infos=tensor_info("t", [64, 64], 0, 0)), "past the end")
    expect_refused("Q8_0 row not a block multiple", handmade(infos=tensor_info("t", [33, 2], 8, 0)), "multiple")
    expect_refused("bad alignment value", handmade(kvs=kv_u32("general.alignment", 3)), "alignment")
    expect_refused("duplicate tensor",
                   handmade(n_tensors=2, infos=tensor_info("t", [4, 2], 0, 0) + tensor_info("t", [4, 2], 0, 32)),
                   "duplicate")
    # A million tensors (the limit) with one duplicate at the end: refused
    # at once (names are sorted; comparing every pair would take hours).
    many = 1000000
    infos = b"".join(tensor_info("t%d" % i, [1], 0, 0) for i in range(many - 1)) + tensor_info("t0", [1], 0, 0)
    expect_refused("duplicate among a million tensors", handmade(n_tensors=many, infos=infos), "duplicate tensor 't0'")

    # A real model truncated at many offsets: the header, the tables, the data.
    model = os.path.join(TMP, "trunc-base.gguf")
    make_synthetic.make_model(model, type="F16", layers=2, dim=64, heads=4, kv_heads=2, ffn=128, vocab=300, ctx=64)
    full = open(model, "rb").read()
    cuts = sorted(set([0, 1, 4, 7, 8, 12, 16, 20, 23, 24, 25, 40, 100, 1000, 3000, 5000] +
                      [len(full) * k // 37 for k in range(1, 37)] + [len(full) - 1]))
    bad = 0
    for cut in cuts:
        path = os.path.join(TMP, "trunc.gguf")
        with open(path, "wb") as f:
            f.write(full[:cut])
        p = subprocess.run([ILPD, "inspect", "-m", path], capture_output=True, text=True, timeout=60)
        sanitizer = "Sanitizer" in p.stderr or "runtime error" in p.stderr
        if p.returncode != 1 or path not in p.stderr or sanitizer:
            bad += 1
            if bad == 1:
                first = "cut at %d: exit %d, %r" % (cut, p.returncode, p.stderr.strip()[-200:])
    report(bad == 0, "truncated model refused at %d offsets" % len(cuts), first if bad else "")
    p = subprocess.run([ILPD, "inspect", "-m", model], capture_output=True, text=True)
    report(p.returncode == 0, "untruncated model accepted", p.stderr.strip()[-200:])
    p = subprocess.run([ILPD, "inspect", "-m", os.path.join(TMP, "does-not-exist.gguf")], capture_output=True, text=True)
    report(p.returncode == 1 and "does-not-exist.gguf" in p.stderr and "cannot open" in p.stderr,
           "missing model file refused", p.stderr.strip())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
