#!/usr/bin/python3
"""Write a large synthetic Llama GGUF quickly, for GPU speed checks (scripts/make/gpu-check.sh).

Default shape: Llama-3-8B (32 layers, dim 4096, 32 heads, 8 KV heads, FFN
14336, vocab 128256), weights F16 or Q8_0 (norms F32). Only shapes and types
matter for speed, so the random values come from a small pool per weight
scale (2^24 values, quantised once) that is written over and over from a
random block offset per tensor: a 16 GB file costs the disk's write time,
not numpy's. Scales follow scripts/model/make_synthetic.py, so activations stay
O(1) through the layers and the logits are spread. The tokenizer is
make_synthetic's SentencePiece-style vocabulary of the same size.

  /usr/bin/python3 scripts/model/make_gpu_model.py -o OUT.gguf --type F16|Q8_0 [--layers 32] [--dim 4096]
      [--heads 32] [--kv-heads 8] [--ffn 14336] [--vocab 128256] [--ctx 8192] [--seed 1]
"""

import argparse
import math
import os
import struct
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ilpd_gguf as gguf  # noqa: E402
from make_synthetic import spm_vocab  # noqa: E402

POOL = 1 << 24      # values per pool (a multiple of every block size)
ALIGN = 32          # GGUF data alignment
_STR, _ARR, _U32, _F32, _BOOL, _I32 = 8, 9, 4, 6, 7, 5


def pack_str(s):
    """Return a GGUF string: u64 length + UTF-8 bytes."""
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class Model:
    """Collects metadata and tensor descriptions, then streams the file."""

    def __init__(self, wtype, seed):
        self.kv = []
        self.tensors = []           # (name, ne list, ggml type, nbytes, source)
        self.wtype = wtype
        self.rng = np.random.default_rng(seed)
        self.pools = {}             # scale -> bytes of POOL values in wtype

    def add(self, key, vtype, payload):
        self.kv.append(pack_str(key) + struct.pack("<I", vtype) + payload)

    def add_str(self, key, s):
        self.add(key, _STR, pack_str(s))

    def add_u32(self, key, v):
        self.add(key, _U32, struct.pack("<I", v))

    def add_f32(self, key, v):
        self.add(key, _F32, struct.pack("<f", v))

    def add_bool(self, key, v):
        self.add(key, _BOOL, struct.pack("<?", v))

    def add_arr(self, key, code, body, n):
        self.add(key, _ARR, struct.pack("<IQ", code, n) + body)

    def pool(self, scale):
        """Return POOL random N(0, scale^2) values as bytes of the weight type (cached per scale)."""
        if scale not in self.pools:
            a = self.rng.standard_normal(POOL, dtype=np.float32) * np.float32(scale)
            self.pools[scale] = gguf.quantize(a.reshape(-1, 4096), self.wtype)
        return self.pools[scale]

    def matrix(self, name, rows, cols, scale):
        nbytes = gguf.tensor_nbytes(self.wtype, rows * cols)
        self.tensors.append((name, [cols, rows], self.wtype, nbytes, ("pool", scale)))

    def norm(self, name, n):
        a = (1.0 + 0.1 * self.rng.standard_normal(n, dtype=np.float32)).astype("<f4").tobytes()
        self.tensors.append((name, [n], gguf.F32, len(a), ("bytes", a)))

    def write(self, path):
        """Write header, tensor infos and data to PATH (via PATH.tmp, renamed at the end)."""
        infos, offset = [], 0
        for name, ne, t, nbytes, _ in self.tensors:
            offset = (offset + ALIGN - 1) // ALIGN * ALIGN
            infos.append(pack_str(name) + struct.pack("<I", len(ne)) + struct.pack("<%dQ" % len(ne), *ne)
                         + struct.pack("<IQ", t, offset))
            offset += nbytes
        head = b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)) + b"".join(self.kv) + b"".join(infos)
        blk_bytes = gguf.BLOCK_LAYOUT[self.wtype][1]
        tmp = path + ".tmp"
        with open(tmp, "wb", buffering=0) as f:
            f.write(head + b"\0" * ((-len(head)) % ALIGN))
            pos = 0
            for name, ne, t, nbytes, src in self.tensors:
                pad = (-pos) % ALIGN
                if pad:
                    f.write(b"\0" * pad)
                    pos += pad
                if src[0] == "bytes":
                    f.write(src[1])
                else:
                    pool = memoryview(self.pool(src[1]))
                    nblk = len(pool) // blk_bytes
                    start = int(self.rng.integers(0, nblk)) * blk_bytes
                    left = nbytes
                    while left:
                        n = min(left, len(pool) - start)
                        f.write(pool[start:start + n])
                        left -= n
                        start = 0
                pos += nbytes
        os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--type", default="F16", choices=["F16", "Q8_0", "Q4_0", "Q4_K", "Q6_K", "BF16", "F32"])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=14336)
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    t0 = time.time()
    wtype = gguf.TYPE_IDS[a.type]
    blk = gguf.BLOCK_LAYOUT[wtype][0]
    if a.dim % blk or a.ffn % blk or POOL % blk or a.dim % a.heads or a.heads % a.kv_heads:
        ap.error("inconsistent shape for %s" % a.type)
    m = Model(wtype, a.seed)
    arch, dim, ffn, L = "llama", a.dim, a.ffn, a.layers
    hd = dim // a.heads
    kv_dim = hd * a.kv_heads
    m.add_str("general.architecture", arch)
    m.add_str("general.name", "gpu-check-llama3-8b-shape-%s" % a.type)
    m.add_u32("general.file_type", gguf.FILE_TYPE[wtype])
    m.add_u32(arch + ".block_count", L)
    m.add_u32(arch + ".context_length", a.ctx)
    m.add_u32(arch + ".embedding_length", dim)
    m.add_u32(arch + ".feed_forward_length", ffn)
    m.add_u32(arch + ".attention.head_count", a.heads)
    m.add_u32(arch + ".attention.head_count_kv", a.kv_heads)
    m.add_f32(arch + ".rope.freq_base", 500000.0)
    m.add_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5)
    m.add_u32(arch + ".rope.dimension_count", hd)
    tokens, scores, types = spm_vocab(a.vocab)
    m.add_str("tokenizer.ggml.model", "llama")
    m.add_arr("tokenizer.ggml.tokens", _STR, b"".join(pack_str(t) for t in tokens), len(tokens))
    m.add_arr("tokenizer.ggml.scores", _F32, np.asarray(scores, "<f4").tobytes(), len(scores))
    m.add_arr("tokenizer.ggml.token_type", _I32, np.asarray(types, "<i4").tobytes(), len(types))
    m.add_u32("tokenizer.ggml.bos_token_id", 1)
    m.add_u32("tokenizer.ggml.eos_token_id", 2)
    m.add_u32("tokenizer.ggml.unknown_token_id", 0)
    m.add_bool("tokenizer.ggml.add_bos_token", True)
    m.add_bool("tokenizer.ggml.add_eos_token", False)
    branch = 1.0 / math.sqrt(2.0 * L)
    m.matrix("token_embd.weight", a.vocab, dim, 1.0)
    m.norm("output_norm.weight", dim)
    m.matrix("output.weight", a.vocab, dim, 2.0 / math.sqrt(dim))
    for i in range(L):
        p = "blk.%d." % i
        m.norm(p + "attn_norm.weight", dim)
        m.matrix(p + "attn_q.weight", dim, dim, 1.0 / math.sqrt(dim))
        m.matrix(p + "attn_k.weight", kv_dim, dim, 1.0 / math.sqrt(dim))
        m.matrix(p + "attn_v.weight", kv_dim, dim, 1.0 / math.sqrt(dim))
        m.matrix(p + "attn_output.weight", dim, dim, branch / math.sqrt(dim))
        m.norm(p + "ffn_norm.weight", dim)
        m.matrix(p + "ffn_gate.weight", ffn, dim, 1.0 / math.sqrt(dim))
        m.matrix(p + "ffn_up.weight", ffn, dim, 1.0 / math.sqrt(dim))
        m.matrix(p + "ffn_down.weight", dim, ffn, 2.0 * branch / math.sqrt(ffn))
    m.write(a.output)
    size = os.path.getsize(a.output)
    print("make_gpu_model: wrote %s (%.2f GB, %s) in %.1f s" % (a.output, size / 1e9, a.type, time.time() - t0),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
