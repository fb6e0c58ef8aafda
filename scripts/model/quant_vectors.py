#!/usr/bin/env python3
"""Writes the tensor-type test vectors of tests/unit/test_quant_vectors.c.

For each ggml type ilpd reads, random blocks (random bytes, with every f16
scale field set to a small finite value so that nothing is NaN or inf) and
their float32 values as dequantized by llama.cpp's gguf-py (the independent
reference: gguf/quants.py). gguf-py is not a dependency of the project: give
the folder that holds its `gguf` package (llama.cpp's gguf-py/):

    /usr/bin/python3 scripts/model/quant_vectors.py --gguf-py PATH/TO/llama.cpp/gguf-py \
        [-o tests/data/quant] [--seed 17]

One file per type, tests/data/quant/TYPE.bin, little-endian:
    char magic[8] = "ILPDQV1\\0"; u32 ggml type; u32 n (values); u32 nbytes;
    u8 blocks[nbytes]; f32 expected[n]
"""
import argparse
import os
import struct
import sys

import numpy as np

# name: (ggml type, values per block, bytes per block, byte offsets of f16 scale fields, blocks)
TYPES = {
    "F16": (1, 1, 2, None, 256),
    "BF16": (30, 1, 2, None, 256),
    "Q4_0": (2, 32, 18, (0,), 16),
    "Q4_1": (3, 32, 20, (0, 2), 16),
    "Q5_0": (6, 32, 22, (0,), 16),
    "Q5_1": (7, 32, 24, (0, 2), 16),
    "Q8_0": (8, 32, 34, (0,), 16),
    "Q2_K": (10, 256, 84, (80, 82), 4),
    "Q3_K": (11, 256, 110, (108,), 4),
    "Q4_K": (12, 256, 144, (0, 2), 4),
    "Q5_K": (13, 256, 176, (0, 2), 4),
    "Q6_K": (14, 256, 210, (208,), 4),
    "IQ4_NL": (20, 32, 18, (0,), 16),
    "IQ4_XS": (23, 256, 136, (0,), 4),
}


def small_f16(rng, n):
    """n finite f16 values as u16: signed, magnitudes from 1e-7 (subnormal) to 1."""
    v = rng.standard_normal(n) * 10.0 ** rng.uniform(-7, 0, n)
    return v.astype(np.float16).view(np.uint16)


def random_blocks(rng, name):
    _, bs, bb, scales, nblk = TYPES[name]
    if name == "F16":  # any finite half: exponent field not all ones
        h = rng.integers(0, 1 << 16, nblk, dtype=np.uint32)
        h = np.where((h & 0x7C00) == 0x7C00, h & 0xBFFF, h)
        return h.astype(np.uint16).view(np.uint8).copy()
    if name == "BF16":  # any finite bfloat16
        h = rng.integers(0, 1 << 16, nblk, dtype=np.uint32)
        h = np.where((h & 0x7F80) == 0x7F80, h & 0xBFFF, h)
        return h.astype(np.uint16).view(np.uint8).copy()
    raw = rng.integers(0, 256, (nblk, bb), dtype=np.uint8)
    for off in scales:
        raw[:, off:off + 2] = small_f16(rng, nblk).view(np.uint8).reshape(nblk, 2)
    return raw.reshape(-1).copy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf-py", required=True, help="folder holding gguf-py's gguf package")
    ap.add_argument("-o", "--out", default="tests/data/quant")
    ap.add_argument("--seed", type=int, default=17)
    a = ap.parse_args()
    sys.path.insert(0, a.gguf_py)
    from gguf import quants  # noqa: E402 (gguf-py, from --gguf-py)
    from gguf.constants import GGMLQuantizationType  # noqa: E402

    rng = np.random.default_rng(a.seed)
    os.makedirs(a.out, exist_ok=True)
    for name, (gt, bs, bb, _, nblk) in TYPES.items():
        blocks = random_blocks(rng, name)
        want = quants.dequantize(blocks, GGMLQuantizationType(gt)).astype(np.float32, copy=False).reshape(-1)
        n = nblk * bs
        assert blocks.size == nblk * bb and want.size == n, name
        assert np.all(np.isfinite(want)), name
        with open(os.path.join(a.out, name + ".bin"), "wb") as f:
            f.write(b"ILPDQV1\0" + struct.pack("<III", gt, n, blocks.size))
            f.write(blocks.tobytes())
            f.write(want.astype("<f4").tobytes())
        print(f"{name}: {nblk} blocks, {n} values")


if __name__ == "__main__":
    main()
