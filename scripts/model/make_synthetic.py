#!/usr/bin/python3
"""Write synthetic Llama-architecture GGUF models with random weights.

The weights are scaled so that activations stay O(1) through many layers and
the logits are spread (std about 2), so greedy decoding is not degenerate.
The same --seed gives the same float weights for every --type, so a quantized
file can be compared against its F32 twin.

CLI:
  /usr/bin/python3 scripts/model/make_synthetic.py -o OUT.gguf --type Q4_K \
      [--arch llama|qwen2] [--layers N] [--dim D] [--heads H] [--kv-heads KV]
      [--ffn F] [--vocab V] [--ctx C] [--seed S] [--tied] [--rope-base B]
      [--llama3-rope-scaling]
Python:
  from make_synthetic import make_model
  make_model("out.gguf", type="Q8_0", layers=2, dim=128)
"""

import argparse
import itertools
import math
import os
import string
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ilpd_gguf as gguf  # noqa: E402

DEFAULTS = dict(type="F32", arch="llama", layers=4, dim=64, heads=4, kv_heads=2,
                ffn=128, vocab=320, ctx=256, seed=0, tied=False, rope_base=None,
                llama3_rope_scaling=False, name=None)

N_SPECIAL = 3            # <unk>, <s>, </s>
N_BYTES = 256
SPACE = "\u2581"
COMMON_WORDS = ("the a and to of in was he she it is that his her with for on "
                "you they had said one day little big once upon time there "
                "saw played happy friend mom dad cat dog ball tree sun").split()

# Llama 3.1 rope scaling constants (HF config "rope_scaling": {"rope_type": "llama3"})
LLAMA3_FACTOR = 8.0
LLAMA3_LOW_FREQ_FACTOR = 1.0
LLAMA3_HIGH_FREQ_FACTOR = 4.0
LLAMA3_ORIGINAL_CTX = 8192


def llama3_rope_factors(head_dim, base):
    """Return the [head_dim/2] float32 divisors llama.cpp stores as rope_freqs.weight."""
    freqs = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2.0 * math.pi / freqs
    low_wavelen = LLAMA3_ORIGINAL_CTX / LLAMA3_LOW_FREQ_FACTOR
    high_wavelen = LLAMA3_ORIGINAL_CTX / LLAMA3_HIGH_FREQ_FACTOR
    smooth = ((LLAMA3_ORIGINAL_CTX / wavelen - LLAMA3_LOW_FREQ_FACTOR)
              / (LLAMA3_HIGH_FREQ_FACTOR - LLAMA3_LOW_FREQ_FACTOR))
    mid = 1.0 / ((1.0 - smooth) / LLAMA3_FACTOR + smooth)
    factors = np.where(wavelen < high_wavelen, 1.0,
                       np.where(wavelen > low_wavelen, LLAMA3_FACTOR, mid))
    return factors.astype(np.float32)


def spm_vocab(vocab):
    """Return (tokens, scores, token_types) of a SentencePiece-style vocabulary of size vocab.

    Ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then pieces (U+2581
    marks a leading space): common words, single characters, then letter
    bigrams and trigrams with and without the space marker, until full.
    """
    if vocab < N_SPECIAL + N_BYTES + 1:
        raise ValueError("vocab must be at least %d" % (N_SPECIAL + N_BYTES + 1))
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(N_BYTES)]
    types = [2, 3, 3] + [6] * N_BYTES

    def pieces():
        yield SPACE
        for w in COMMON_WORDS:
            yield SPACE + w
        chars = string.ascii_lowercase + string.ascii_uppercase + string.digits + ".,!?'\"-"
        for c in chars:
            yield c
            yield SPACE + c
        for n in itertools.count(2):
            for combo in itertools.product(string.ascii_lowercase, repeat=n):
                yield "".join(combo)
                yield SPACE + "".join(combo)

    seen = set(tokens)
    gen = pieces()
    while len(tokens) < vocab:
        p = next(gen)
        if p not in seen:
            seen.add(p)
            tokens.append(p)
            types.append(1)
    scores = [0.0] * (N_SPECIAL + N_BYTES) + [-float(i) for i in range(vocab - N_SPECIAL - N_BYTES)]
    return tokens, scores, types


def _check_shape(s):
    """Raise ValueError if the shape parameters in dict s are inconsistent."""
    if s["arch"] not in ("llama", "qwen2"):
        raise ValueError("arch must be llama or qwen2")
    if s["dim"] % s["heads"]:
        raise ValueError("dim must be a multiple of heads")
    if s["heads"] % s["kv_heads"]:
        raise ValueError("heads must be a multiple of kv-heads")
    if (s["dim"] // s["heads"]) % 2:
        raise ValueError("head_dim must be even")
    if min(s["layers"], s["ffn"], s["ctx"]) < 1:
        raise ValueError("layers, ffn and ctx must be positive")


def make_model(path, **shape):
    """Write a random-weight model to path; keyword args as in DEFAULTS. Returns the shape dict used.

    type is a ggml type name (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
    IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS: ilpd_gguf.quantize) applied
    to every 2-D weight; a weight whose row length is not a multiple of the
    type's block falls back to F16 (reported on stderr).
    """
    unknown = set(shape) - set(DEFAULTS)
    if unknown:
        raise TypeError("unknown parameters: %s" % ", ".join(sorted(unknown)))
    s = dict(DEFAULTS, **shape)
    _check_shape(s)
    arch = s["arch"]
    wtype = gguf.TYPE_IDS[s["type"]] if isinstance(s["type"], str) else s["type"]
    if wtype not in gguf.FILE_TYPE:
        raise ValueError("unsupported weight type %r" % s["type"])
    if s["rope_base"] is None:
        s["rope_base"] = 1000000.0 if arch == "qwen2" else 10000.0
    dim, n_layer, ffn, vocab = s["dim"], s["layers"], s["ffn"], s["vocab"]
    head_dim = dim // s["heads"]
    kv_dim = head_dim * s["kv_heads"]
    eps = 1e-6 if arch == "qwen2" else 1e-5

    w = gguf.Writer(path)
    w.add_string("general.architecture", arch)
    w.add_string("general.name", s["name"] or "synthetic-%s-%s" % (arch, gguf.TYPE_NAMES[wtype]))
    w.add_u32(arch + ".block_count", n_layer)
    w.add_u32(arch + ".context_length", s["ctx"])
    w.add_u32(arch + ".embedding_length", dim)
    w.add_u32(arch + ".feed_forward_length", ffn)
    w.add_u32(arch + ".attention.head_count", s["heads"])
    w.add_u32(arch + ".attention.head_count_kv", s["kv_heads"])
    w.add_f32(arch + ".rope.freq_base", s["rope_base"])
    w.add_f32(arch + ".attention.layer_norm_rms_epsilon", eps)
    w.add_u32(arch + ".rope.dimension_count", head_dim)
    w.add_u32("general.file_type", gguf.FILE_TYPE[wtype])
    tokens, scores, types = spm_vocab(vocab)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", tokens, "str")
    w.add_array("tokenizer.ggml.scores", scores, "f32")
    w.add_array("tokenizer.ggml.token_type", types, "i32")
    w.add_u32("tokenizer.ggml.bos_token_id", 1)
    w.add_u32("tokenizer.ggml.eos_token_id", 2)
    w.add_u32("tokenizer.ggml.unknown_token_id", 0)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_eos_token", False)

    rng = np.random.default_rng(s["seed"])
    fallbacks = []       # weights written as F16 because rows do not fill whole blocks
    branch_scale = 1.0 / math.sqrt(2.0 * n_layer)

    def matrix(name, rows, cols, scale):
        """Add a random [rows, cols] weight in the requested type (F16 fallback)."""
        a = rng.standard_normal((rows, cols), dtype=np.float32)
        a *= np.float32(scale)
        t = wtype
        block = gguf.BLOCK_LAYOUT[t][0]
        if cols % block:
            fallbacks.append("%s (row %d)" % (name, cols))
            t = gguf.F16
        w.add_tensor(name, a, t)

    def norm(name, n):
        """Add an F32 norm weight close to 1."""
        w.add_tensor(name, 1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32), gguf.F32)

    def bias(name, n):
        """Add a small F32 bias."""
        w.add_tensor(name, 0.2 * rng.standard_normal(n, dtype=np.float32), gguf.F32)

    # logits = rmsnorm(x) . W_out with W_out ~ N(0, (2/sqrt(dim))^2): std about 2
    out_scale = 2.0 / math.sqrt(dim)
    matrix("token_embd.weight", vocab, dim, out_scale if s["tied"] else 1.0)
    norm("output_norm.weight", dim)
    if not s["tied"]:
        matrix("output.weight", vocab, dim, out_scale)
    if s["llama3_rope_scaling"]:
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(head_dim, s["rope_base"]), gguf.F32)
    for i in range(n_layer):
        p = "blk.%d." % i
        norm(p + "attn_norm.weight", dim)
        matrix(p + "attn_q.weight", dim, dim, 1.0 / math.sqrt(dim))
        matrix(p + "attn_k.weight", kv_dim, dim, 1.0 / math.sqrt(dim))
        matrix(p + "attn_v.weight", kv_dim, dim, 1.0 / math.sqrt(dim))
        if arch == "qwen2":
            bias(p + "attn_q.bias", dim)
            bias(p + "attn_k.bias", kv_dim)
            bias(p + "attn_v.bias", kv_dim)
        matrix(p + "attn_output.weight", dim, dim, branch_scale / math.sqrt(dim))
        norm(p + "ffn_norm.weight", dim)
        matrix(p + "ffn_gate.weight", ffn, dim, 1.0 / math.sqrt(dim))
        matrix(p + "ffn_up.weight", ffn, dim, 1.0 / math.sqrt(dim))
        matrix(p + "ffn_down.weight", dim, ffn, 2.0 * branch_scale / math.sqrt(ffn))
    w.write()
    if fallbacks:
        print("make_synthetic: %d weights written as F16, rows not a multiple of %d for %s: %s"
              % (len(fallbacks), gguf.BLOCK_LAYOUT[wtype][0], gguf.TYPE_NAMES[wtype],
                 ", ".join(fallbacks[:4]) + (", ..." if len(fallbacks) > 4 else "")),
              file=sys.stderr)
    return s


def main(argv=None):
    """CLI entry point; returns the process exit code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--type", default="F32",
                    choices=["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL",
                             "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"])
    ap.add_argument("--arch", default="llama", choices=["llama", "qwen2"])
    ap.add_argument("--layers", type=int, default=DEFAULTS["layers"])
    ap.add_argument("--dim", type=int, default=DEFAULTS["dim"])
    ap.add_argument("--heads", type=int, default=DEFAULTS["heads"])
    ap.add_argument("--kv-heads", type=int, default=DEFAULTS["kv_heads"])
    ap.add_argument("--ffn", type=int, default=DEFAULTS["ffn"])
    ap.add_argument("--vocab", type=int, default=DEFAULTS["vocab"])
    ap.add_argument("--ctx", type=int, default=DEFAULTS["ctx"])
    ap.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    ap.add_argument("--tied", action="store_true", help="no output.weight; the head reuses token_embd")
    ap.add_argument("--rope-base", type=float, default=None,
                    help="default 10000 (llama) or 1e6 (qwen2)")
    ap.add_argument("--llama3-rope-scaling", action="store_true",
                    help="add rope_freqs.weight (Llama 3.1 factors: 8, 1, 4, 8192)")
    ap.add_argument("--name", default=None, help="general.name")
    a = ap.parse_args(argv)
    t0 = time.time()
    try:
        s = make_model(a.output, type=a.type, arch=a.arch, layers=a.layers, dim=a.dim,
                       heads=a.heads, kv_heads=a.kv_heads, ffn=a.ffn, vocab=a.vocab,
                       ctx=a.ctx, seed=a.seed, tied=a.tied, rope_base=a.rope_base,
                       llama3_rope_scaling=a.llama3_rope_scaling, name=a.name)
    except ValueError as e:
        print("make_synthetic: %s" % e, file=sys.stderr)
        return 1
    print("make_synthetic: wrote %s (%s %s, %d layers, dim %d, %.1f MB) in %.1fs"
          % (a.output, s["arch"], a.type, s["layers"], s["dim"],
             os.path.getsize(a.output) / 1e6, time.time() - t0), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
