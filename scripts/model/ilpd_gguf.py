"""GGUF v3 reader and writer with ggml block quantizers (numpy only).

Shared by the ilpd tooling: the synthetic-model generator, the exporters, the
numpy reference forward pass and the tokenizer converter all go through this
module, so it is the single Python definition of the on-disk format.

Block layouts follow ggml (ggml-common.h / ggml-quants.c):
  F16   IEEE binary16                      BF16  top 16 bits of binary32
  Q8_0  32 values: fp16 d, int8 qs[32]                     x = d*q
  Q4_0  32 values: fp16 d, u8 qs[16]       x[j] = d*((qs[j]&15)-8),
                                           x[j+16] = d*((qs[j]>>4)-8)
  Q4_K  256 values: fp16 d, fp16 dmin, u8 scales[12], u8 qs[128]
        8 sub-blocks of 32, 6-bit scale/min each (get_scale_min_k4 packing),
        chunk c of 64 uses qs[32c:32c+32]: low nibbles -> sub-block 2c,
        high nibbles -> sub-block 2c+1;   x = d*sc*q - dmin*m
  Q6_K  256 values: u8 ql[128], u8 qh[64], int8 scales[16], fp16 d
        16 sub-blocks of 16;   x = d*scales[s]*(q-32)
  Q4_1  32 values: fp16 d, fp16 m, u8 qs[16] (Q4_0's nibbles)  x = d*q + m
  Q5_0  32 values: fp16 d, u8 qh[4], u8 qs[16]; bit j of qh (u32) is the
        fifth bit of value j                                   x = d*(q-16)
  Q5_1  32 values: fp16 d, fp16 m, u8 qh[4], u8 qs[16]        x = d*q + m
  Q2_K  256 values: u8 scales[16], u8 qs[64], fp16 d, fp16 dmin
        16 sub-blocks of 16, scales[s] = 4-bit scale | 4-bit min << 4;
        value e is 2 bits of qs[32*(e//128) + e%32] at 2*((e//32)%4);
        x = d*sc*q - dmin*m
  Q3_K  256 values: u8 hmask[32], u8 qs[64] (Q2_K's 2-bit layout),
        u8 scales[12], fp16 d; 16 signed 6-bit scales (low nibbles in
        bytes 0-7, top 2 bits in bytes 8-11); bit e//32 of hmask[e%32]
        clear subtracts 4;   x = d*(sc-32)*q
  Q5_K  256 values: fp16 d, fp16 dmin, u8 scales[12] (as Q4_K), u8 qh[32],
        u8 qs[128] (as Q4_K); bit e//32 of qh[e%32] is the fifth bit
  IQ4_NL 32 values: fp16 d, u8 qs[16] (Q4_0's nibbles)   x = d*KVALUES[q]
  IQ4_XS 256 values: fp16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]:
        8 sub-blocks of 32 (each 16 bytes as IQ4_NL), signed 6-bit scales
        (low nibble from scales_l, 2 bits of scales_h);  x = d*(sc-32)*KVALUES[q]
"""

import mmap
import os
import shutil
import struct
import tempfile

import numpy as np

# ---------------------------------------------------------------- ggml types
F32 = 0
F16 = 1
Q4_0 = 2
Q4_1 = 3
Q5_0 = 6
Q5_1 = 7
Q8_0 = 8
Q8_1 = 9
Q2_K = 10
Q3_K = 11
Q4_K = 12
Q5_K = 13
Q6_K = 14
Q8_K = 15
IQ4_NL = 20
IQ4_XS = 23
I8 = 24
I16 = 25
I32 = 26
I64 = 27
F64 = 28
BF16 = 30

TYPE_NAMES = {
    F32: "F32", F16: "F16", Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0",
    Q5_1: "Q5_1", Q8_0: "Q8_0", Q8_1: "Q8_1", Q2_K: "Q2_K", Q3_K: "Q3_K",
    Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K", Q8_K: "Q8_K", I8: "I8",
    I16: "I16", I32: "I32", I64: "I64", F64: "F64", BF16: "BF16",
    IQ4_NL: "IQ4_NL", IQ4_XS: "IQ4_XS",
}
TYPE_IDS = {v: k for k, v in TYPE_NAMES.items()}

# type id -> (values per block, bytes per block); lets the Reader size and
# validate every tensor of a real file, including types it cannot dequantize.
BLOCK_LAYOUT = {
    F32: (1, 4), F16: (1, 2), BF16: (1, 2), F64: (1, 8),
    I8: (1, 1), I16: (1, 2), I32: (1, 4), I64: (1, 8),
    Q4_0: (32, 18), Q4_1: (32, 20), Q5_0: (32, 22), Q5_1: (32, 24),
    Q8_0: (32, 34), Q8_1: (32, 36),
    Q2_K: (256, 84), Q3_K: (256, 110), Q4_K: (256, 144), Q5_K: (256, 176),
    Q6_K: (256, 210), Q8_K: (256, 292), IQ4_NL: (32, 18), IQ4_XS: (256, 136),
}

# The 16 values of IQ4_NL / IQ4_XS's 4-bit indices (a constant of the format).
KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                   dtype=np.float32)

# llama.cpp general.file_type values (enum llama_ftype) for the types we write
FILE_TYPE = {F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q8_0: 7, Q5_0: 8, Q5_1: 9, Q2_K: 10,
             Q3_K: 12, Q4_K: 15, Q5_K: 17, Q6_K: 18, IQ4_NL: 25, IQ4_XS: 30, BF16: 32}

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
DEFAULT_ALIGNMENT = 32

# GGUF metadata value types
_U8, _I8, _U16, _I16, _U32, _I32, _F32, _BOOL, _STR, _ARR, _U64, _I64, _F64 = range(13)
_SCALAR_FMT = {_U8: "<B", _I8: "<b", _U16: "<H", _I16: "<h", _U32: "<I",
               _I32: "<i", _F32: "<f", _BOOL: "<?", _U64: "<Q", _I64: "<q",
               _F64: "<d"}
_SCALAR_NP = {_U8: "<u1", _I8: "<i1", _U16: "<u2", _I16: "<i2", _U32: "<u4",
              _I32: "<i4", _F32: "<f4", _BOOL: "<u1", _U64: "<u8", _I64: "<i8",
              _F64: "<f8"}
_ELEM_CODES = {"str": _STR, "u8": _U8, "u32": _U32, "i32": _I32, "f32": _F32}


def tensor_nbytes(ggml_type, n):
    """Return the byte size of n values stored as ggml_type (n must fill whole blocks)."""
    if ggml_type not in BLOCK_LAYOUT:
        raise ValueError("unknown ggml type %d" % ggml_type)
    blk, size = BLOCK_LAYOUT[ggml_type]
    if n % blk:
        raise ValueError("%s needs a multiple of %d values, got %d"
                         % (TYPE_NAMES[ggml_type], blk, n))
    return n // blk * size


# ---------------------------------------------------------------- helpers
def _f16_bits(x):
    """Return x rounded to IEEE half as a uint16 array (round to nearest even)."""
    return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)


def _f16_round(x):
    """Return x rounded through IEEE half, back as float32."""
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def _blocks(a, blk):
    """Return a as a float32 array of shape [n_blocks, blk]; each row must fill whole blocks."""
    a = np.asarray(a, dtype=np.float32)
    cols = a.shape[-1] if a.ndim else 1
    if cols % blk:
        raise ValueError("row length %d is not a multiple of the block size %d"
                         % (cols, blk))
    return a.reshape(-1, blk)


def _safe_inv(d):
    """Return 1/d elementwise, with 0 where d == 0."""
    out = np.zeros_like(d)
    np.divide(1.0, d, out=out, where=d != 0)
    return out


# ---------------------------------------------------------------- quantizers
def _quant_q8_0(x):
    """Return Q8_0 blocks (structured array) for x of shape [nb, 32]."""
    amax = np.abs(x).max(axis=1)
    d = _f16_round(amax / 127.0)
    q = np.clip(np.rint(x * _safe_inv(d)[:, None]), -127, 127).astype(np.int8)
    out = np.empty(len(x), dtype=[("d", "<u2"), ("qs", "i1", 32)])
    out["d"] = _f16_bits(d)
    out["qs"] = q
    return out


def _quant_q4_0(x):
    """Return Q4_0 blocks for x of shape [nb, 32] (ggml's signed-max scale: d = max/-8)."""
    idx = np.abs(x).argmax(axis=1)
    vmax = x[np.arange(len(x)), idx]
    d = _f16_round(vmax / -8.0)
    q = np.clip(np.rint(x * _safe_inv(d)[:, None]) + 8, 0, 15).astype(np.uint8)
    out = np.empty(len(x), dtype=[("d", "<u2"), ("qs", "u1", 16)])
    out["d"] = _f16_bits(d)
    out["qs"] = q[:, :16] | (q[:, 16:] << 4)
    return out


def _pack_scale_min_k4(sc, m):
    """Return the 12-byte get_scale_min_k4 packing of 6-bit sc[nb,8] and m[nb,8]."""
    sc = sc.astype(np.uint8)
    m = m.astype(np.uint8)
    out = np.empty((len(sc), 12), dtype=np.uint8)
    out[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
    return out


def _unpack_scale_min_k4(s):
    """Return (sc, m) as float32 [nb, 8] from packed scales s [nb, 12] (ggml get_scale_min_k4)."""
    sc = np.empty((len(s), 8), dtype=np.uint8)
    m = np.empty((len(s), 8), dtype=np.uint8)
    sc[:, 0:4] = s[:, 0:4] & 63
    m[:, 0:4] = s[:, 4:8] & 63
    sc[:, 4:8] = (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)
    m[:, 4:8] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc.astype(np.float32), m.astype(np.float32)


def _quant_q4_k(x):
    """Return Q4_K super-blocks for x of shape [nb, 256].

    Each 32-value sub-block gets an affine map from its min (clamped to <= 0)
    and max; the 8 scales and 8 mins are then quantized to 6 bits relative to
    the super-block d = max(scale)/63 and dmin = max(min)/63.
    """
    sub = x.reshape(-1, 8, 32)
    lo = np.minimum(sub.min(axis=2), 0.0)
    hi = sub.max(axis=2)
    scale = (hi - lo) / 15.0                      # [nb, 8]
    mins = -lo                                    # >= 0
    d = _f16_round(scale.max(axis=1) / 63.0)
    dmin = _f16_round(mins.max(axis=1) / 63.0)
    sc = np.clip(np.rint(scale * _safe_inv(d)[:, None]), 0, 63)
    m = np.clip(np.rint(mins * _safe_inv(dmin)[:, None]), 0, 63)
    eff_scale = (d[:, None] * sc)[:, :, None]     # [nb, 8, 1]
    eff_min = (dmin[:, None] * m)[:, :, None]
    q = np.clip(np.rint((sub + eff_min) * _safe_inv(eff_scale)), 0, 15).astype(np.uint8)
    q = q.reshape(-1, 4, 2, 32)                   # chunk c, (low, high) sub-block
    out = np.empty(len(x), dtype=[("d", "<u2"), ("dmin", "<u2"),
                                  ("scales", "u1", 12), ("qs", "u1", 128)])
    out["d"] = _f16_bits(d)
    out["dmin"] = _f16_bits(dmin)
    out["scales"] = _pack_scale_min_k4(sc, m)
    out["qs"] = (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(-1, 128)
    return out


def _quant_q6_k(x):
    """Return Q6_K super-blocks for x of shape [nb, 256].

    Each 16-value sub-block gets scale = signed max / -32 (so q spans
    [-32, 31]); the 16 scales are quantized to int8 relative to d = max|scale|/127.
    """
    sub = x.reshape(-1, 16, 16)
    idx = np.abs(sub).argmax(axis=2)
    vmax = np.take_along_axis(sub, idx[:, :, None], axis=2)[:, :, 0]
    scale = vmax / -32.0                          # [nb, 16]
    d = _f16_round(np.abs(scale).max(axis=1) / 127.0)
    sc = np.clip(np.rint(scale * _safe_inv(d)[:, None]), -128, 127)
    eff = (d[:, None] * sc)[:, :, None]
    q = (np.clip(np.rint(sub * _safe_inv(eff)), -32, 31) + 32).astype(np.uint8)
    # per 128-half h and l in 0..31: q1=y[l], q2=y[l+32], q3=y[l+64], q4=y[l+96]
    q = q.reshape(-1, 2, 4, 32)
    q1, q2, q3, q4 = q[:, :, 0], q[:, :, 1], q[:, :, 2], q[:, :, 3]
    ql = np.concatenate([(q1 & 15) | ((q3 & 15) << 4),
                         (q2 & 15) | ((q4 & 15) << 4)], axis=2)     # [nb, 2, 64]
    qh = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)  # [nb, 2, 32]
    out = np.empty(len(x), dtype=[("ql", "u1", 128), ("qh", "u1", 64),
                                  ("scales", "i1", 16), ("d", "<u2")])
    out["ql"] = ql.reshape(-1, 128)
    out["qh"] = qh.reshape(-1, 64)
    out["scales"] = sc.astype(np.int8)
    out["d"] = _f16_bits(d)
    return out


def _nibbles32(q):
    """Return the 16 bytes of 32 4-bit values [nb, 32]: value j low nibble, j + 16 high."""
    q = q.astype(np.uint8)
    return (q[:, :16] & 15) | ((q[:, 16:] & 15) << 4)


def _bits32(q):
    """Return bit 4 of each of 32 values [nb, 32] packed as 4 little-endian bytes per block."""
    bits = ((q.astype(np.uint32) >> 4) & 1) << np.arange(32, dtype=np.uint32)
    return bits.sum(axis=1, dtype=np.uint32).astype("<u4").view(np.uint8).reshape(-1, 4)


def _crumbs(q):
    """Return the 64 bytes of 256 2-bit values [nb, 256] in the Q2_K/Q3_K layout."""
    q = (q.astype(np.uint8) & 3).reshape(-1, 2, 4, 32)
    return (q[:, :, 0] | (q[:, :, 1] << 2) | (q[:, :, 2] << 4) | (q[:, :, 3] << 6)).reshape(-1, 64)


def _affine32(x, levels):
    """Return (d, m, q) of the min/max map x ~ d*q + m, q in [0, levels], d and m f16-rounded."""
    lo, hi = x.min(axis=1), x.max(axis=1)
    d = _f16_round((hi - lo) / levels)
    m = _f16_round(lo)
    q = np.clip(np.rint((x - m[:, None]) * _safe_inv(d)[:, None]), 0, levels).astype(np.uint8)
    return d, m, q


def _quant_q4_1(x):
    """Return Q4_1 blocks for x of shape [nb, 32]."""
    d, m, q = _affine32(x, 15)
    out = np.empty(len(x), dtype=[("d", "<u2"), ("m", "<u2"), ("qs", "u1", 16)])
    out["d"], out["m"], out["qs"] = _f16_bits(d), _f16_bits(m), _nibbles32(q)
    return out


def _quant_q5_0(x):
    """Return Q5_0 blocks for x of shape [nb, 32] (signed-max scale d = max/-16)."""
    vmax = x[np.arange(len(x)), np.abs(x).argmax(axis=1)]
    d = _f16_round(vmax / -16.0)
    q = np.clip(np.rint(x * _safe_inv(d)[:, None]) + 16, 0, 31).astype(np.uint8)
    out = np.empty(len(x), dtype=[("d", "<u2"), ("qh", "u1", 4), ("qs", "u1", 16)])
    out["d"], out["qh"], out["qs"] = _f16_bits(d), _bits32(q), _nibbles32(q)
    return out


def _quant_q5_1(x):
    """Return Q5_1 blocks for x of shape [nb, 32]."""
    d, m, q = _affine32(x, 31)
    out = np.empty(len(x), dtype=[("d", "<u2"), ("m", "<u2"), ("qh", "u1", 4), ("qs", "u1", 16)])
    out["d"], out["m"], out["qh"], out["qs"] = _f16_bits(d), _f16_bits(m), _bits32(q), _nibbles32(q)
    return out


def _nearest_kvalue(y):
    """Return the index of the KVALUES entry nearest each element of y."""
    return np.abs(y[..., None] - KVALUES).argmin(axis=-1).astype(np.uint8)


def _quant_iq4_nl(x):
    """Return IQ4_NL blocks for x of shape [nb, 32] (the largest |x| maps to -127)."""
    vmax = x[np.arange(len(x)), np.abs(x).argmax(axis=1)]
    d = _f16_round(vmax / -127.0)
    q = _nearest_kvalue(x * _safe_inv(d)[:, None])
    out = np.empty(len(x), dtype=[("d", "<u2"), ("qs", "u1", 16)])
    out["d"], out["qs"] = _f16_bits(d), _nibbles32(q)
    return out


def _sub_affine(x, n_sub, levels, scale_bits):
    """K-quant min/max map of x [nb, 256] in n_sub sub-blocks: returns d, dmin [nb],
    the integer scales and mins [nb, n_sub] (scale_bits wide) and q [nb, 256] in [0, levels]."""
    sub = x.reshape(len(x), n_sub, -1)
    lo = np.minimum(sub.min(axis=2), 0.0)
    scale, mins = (sub.max(axis=2) - lo) / levels, -lo
    top = (1 << scale_bits) - 1
    d = _f16_round(scale.max(axis=1) / top)
    dmin = _f16_round(mins.max(axis=1) / top)
    sc = np.clip(np.rint(scale * _safe_inv(d)[:, None]), 0, top)
    m = np.clip(np.rint(mins * _safe_inv(dmin)[:, None]), 0, top)
    eff_scale = (d[:, None] * sc)[:, :, None]
    eff_min = (dmin[:, None] * m)[:, :, None]
    q = np.clip(np.rint((sub + eff_min) * _safe_inv(eff_scale)), 0, levels).astype(np.uint8)
    return d, dmin, sc, m, q.reshape(len(x), 256)


def _quant_q2_k(x):
    """Return Q2_K super-blocks for x of shape [nb, 256]."""
    d, dmin, sc, m, q = _sub_affine(x, 16, 3, 4)
    out = np.empty(len(x), dtype=[("scales", "u1", 16), ("qs", "u1", 64), ("d", "<u2"), ("dmin", "<u2")])
    out["scales"] = sc.astype(np.uint8) | (m.astype(np.uint8) << 4)
    out["qs"] = _crumbs(q)
    out["d"], out["dmin"] = _f16_bits(d), _f16_bits(dmin)
    return out


def _quant_q5_k(x):
    """Return Q5_K super-blocks for x of shape [nb, 256]."""
    d, dmin, sc, m, q = _sub_affine(x, 8, 31, 6)
    q4 = (q & 15).reshape(-1, 4, 2, 32)
    qh = (((q.reshape(-1, 8, 32) >> 4) & 1) << np.arange(8, dtype=np.uint8)[None, :, None]).sum(axis=1)
    out = np.empty(len(x), dtype=[("d", "<u2"), ("dmin", "<u2"), ("scales", "u1", 12),
                                  ("qh", "u1", 32), ("qs", "u1", 128)])
    out["d"], out["dmin"] = _f16_bits(d), _f16_bits(dmin)
    out["scales"] = _pack_scale_min_k4(sc, m)
    out["qh"] = qh.astype(np.uint8)
    out["qs"] = (q4[:, :, 0, :] | (q4[:, :, 1, :] << 4)).reshape(-1, 128)
    return out


def _signed_sub_scales(x, n_sub, denom):
    """Signed-max scales of x [nb, 256] in n_sub sub-blocks (vmax / denom), quantized to
    6 bits around d = max|scale| / 31: returns d [nb], sc [nb, n_sub] in [-32, 31], sub."""
    sub = x.reshape(len(x), n_sub, -1)
    idx = np.abs(sub).argmax(axis=2)
    scale = np.take_along_axis(sub, idx[:, :, None], axis=2)[:, :, 0] / denom
    d = _f16_round(np.abs(scale).max(axis=1) / 31.0)
    sc = np.clip(np.rint(scale * _safe_inv(d)[:, None]), -32, 31)
    return d, sc, sub


def _quant_q3_k(x):
    """Return Q3_K super-blocks for x of shape [nb, 256] (q in [-4, 3])."""
    d, sc, sub = _signed_sub_scales(x, 16, -4.0)
    eff = (d[:, None] * sc)[:, :, None]
    u = (np.clip(np.rint(sub * _safe_inv(eff)), -4, 3) + 4).astype(np.uint8).reshape(-1, 256)
    s6 = (sc + 32).astype(np.uint8)                           # [nb, 16]
    scales = np.zeros((len(x), 12), dtype=np.uint8)
    scales[:, 0:8] = (s6[:, 0:8] & 15) | ((s6[:, 8:16] & 15) << 4)
    hi = (s6 >> 4).reshape(-1, 4, 4)                          # [nb, g // 4, g % 4]
    scales[:, 8:12] = hi[:, 0] | (hi[:, 1] << 2) | (hi[:, 2] << 4) | (hi[:, 3] << 6)
    hmask = (((u.reshape(-1, 8, 32) >> 2) & 1) << np.arange(8, dtype=np.uint8)[None, :, None]).sum(axis=1)
    out = np.empty(len(x), dtype=[("hmask", "u1", 32), ("qs", "u1", 64), ("scales", "u1", 12), ("d", "<u2")])
    out["hmask"] = hmask.astype(np.uint8)
    out["qs"] = _crumbs(u)
    out["scales"] = scales
    out["d"] = _f16_bits(d)
    return out


def _quant_iq4_xs(x):
    """Return IQ4_XS super-blocks for x of shape [nb, 256]."""
    d, sc, sub = _signed_sub_scales(x, 8, -127.0)
    eff = (d[:, None] * sc)[:, :, None]
    q = _nearest_kvalue(sub * _safe_inv(eff))                # [nb, 8, 32]
    s6 = (sc + 32).astype(np.uint16)
    out = np.empty(len(x), dtype=[("d", "<u2"), ("scales_h", "<u2"), ("scales_l", "u1", 4), ("qs", "u1", 128)])
    out["d"] = _f16_bits(d)
    out["scales_h"] = ((s6 >> 4) << (2 * np.arange(8, dtype=np.uint16))).sum(axis=1, dtype=np.uint16)
    lo = (s6 & 15).astype(np.uint8)
    out["scales_l"] = lo[:, 0::2] | (lo[:, 1::2] << 4)
    out["qs"] = _nibbles32(q.reshape(-1, 32)).reshape(-1, 128)
    return out


def _bf16_bits(x):
    """Return x as bfloat16 bit patterns (uint16), round to nearest even, NaN kept quiet."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits.astype(np.uint64) + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


_QUANTIZERS = {Q8_0: (32, _quant_q8_0), Q4_0: (32, _quant_q4_0),
               Q4_K: (256, _quant_q4_k), Q6_K: (256, _quant_q6_k),
               Q4_1: (32, _quant_q4_1), Q5_0: (32, _quant_q5_0), Q5_1: (32, _quant_q5_1),
               Q2_K: (256, _quant_q2_k), Q3_K: (256, _quant_q3_k), Q5_K: (256, _quant_q5_k),
               IQ4_NL: (32, _quant_iq4_nl), IQ4_XS: (256, _quant_iq4_xs)}
_CHUNK_BLOCKS = 1 << 15   # blocks per vectorised step, bounds temporary memory


def quantize(a, ggml_type):
    """Return the raw ggml bytes of float array a (row-major, each row in whole blocks)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if ggml_type == F32:
        return a.astype("<f4").tobytes()
    if ggml_type == F16:
        return _f16_bits(a).astype("<u2").tobytes()
    if ggml_type == BF16:
        return _bf16_bits(a).astype("<u2").tobytes()
    if ggml_type not in _QUANTIZERS:
        raise ValueError("cannot quantize to ggml type %s"
                         % TYPE_NAMES.get(ggml_type, ggml_type))
    blk, fn = _QUANTIZERS[ggml_type]
    try:
        x = _blocks(a, blk)
    except ValueError as e:
        raise ValueError("%s: %s" % (TYPE_NAMES[ggml_type], e)) from None
    parts = [fn(x[i:i + _CHUNK_BLOCKS]).tobytes() for i in range(0, len(x), _CHUNK_BLOCKS)]
    return b"".join(parts)


# ---------------------------------------------------------------- dequantizers
def _deq_q8_0(raw):
    """Return float32 [nb, 32] from Q8_0 blocks."""
    b = np.frombuffer(raw, dtype=[("d", "<f2"), ("qs", "i1", 32)])
    return b["d"].astype(np.float32)[:, None] * b["qs"].astype(np.float32)


def _deq_q4_0(raw):
    """Return float32 [nb, 32] from Q4_0 blocks."""
    b = np.frombuffer(raw, dtype=[("d", "<f2"), ("qs", "u1", 16)])
    qs = b["qs"]
    q = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float32) - 8.0
    return b["d"].astype(np.float32)[:, None] * q


def _deq_q4_k(raw):
    """Return float32 [nb, 256] from Q4_K super-blocks."""
    b = np.frombuffer(raw, dtype=[("d", "<f2"), ("dmin", "<f2"),
                                  ("scales", "u1", 12), ("qs", "u1", 128)])
    sc, m = _unpack_scale_min_k4(b["scales"])
    d = b["d"].astype(np.float32)[:, None] * sc          # [nb, 8]
    mn = b["dmin"].astype(np.float32)[:, None] * m
    qs = b["qs"].reshape(-1, 4, 1, 32)
    q = np.concatenate([qs & 15, qs >> 4], axis=2).reshape(-1, 8, 32).astype(np.float32)
    return (d[:, :, None] * q - mn[:, :, None]).reshape(-1, 256)


def _deq_q6_k(raw):
    """Return float32 [nb, 256] from Q6_K super-blocks."""
    b = np.frombuffer(raw, dtype=[("ql", "u1", 128), ("qh", "u1", 64),
                                  ("scales", "i1", 16), ("d", "<f2")])
    ql = b["ql"].reshape(-1, 2, 64)
    qh = b["qh"].reshape(-1, 2, 32)
    lo, hi = ql[:, :, :32], ql[:, :, 32:]
    q = np.stack([(lo & 15) | ((qh & 3) << 4),
                  (hi & 15) | (((qh >> 2) & 3) << 4),
                  (lo >> 4) | (((qh >> 4) & 3) << 4),
                  (hi >> 4) | (((qh >> 6) & 3) << 4)], axis=2)   # [nb, 2, 4, 32]
    q = q.reshape(-1, 16, 16).astype(np.float32) - 32.0
    s = b["d"].astype(np.float32)[:, None] * b["scales"].astype(np.float32)
    return (s[:, :, None] * q).reshape(-1, 256)


def _unnibble32(qs):
    """Return the 32 4-bit values [nb, 32] of 16-byte groups qs [nb, 16]."""
    return np.concatenate([qs & 15, qs >> 4], axis=1)


def _fifth_bits(qh):
    """Return bit 4 of each of 32 values from qh [nb, 4] (a little-endian u32 per block)."""
    bits = np.ascontiguousarray(qh).view("<u4")[:, 0]
    return (((bits[:, None] >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.uint8)


def _uncrumb(qs):
    """Return the 256 2-bit values [nb, 256] of the Q2_K/Q3_K layout qs [nb, 64]."""
    q = qs.reshape(-1, 2, 1, 32) >> (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]
    return (q & 3).reshape(-1, 256)


def _deq_q4_1(raw):
    """Return float32 [nb, 32] from Q4_1 blocks."""
    b = np.frombuffer(raw, dtype=[("d", "<f2"), ("m", "<f2"), ("qs", "u1", 16)])
    q = _unnibble32(b["qs"]).astype(np.float32)
    return b["d"].astype(np.float32)[:, None] * q + b["m"].astype(np.float32)[:, None]


def _deq_q5_0(raw):
    """Return float32 [nb, 32] from Q5_0 blocks."""
    b = np.frombuffer(raw, dtype=[("d", "<f2"), ("qh", "u1", 4), ("qs", "u1", 16)])
    q = (_unnibble32(b["qs"]) | _fifth_bits(b["qh"])).astype(np.float32) - 16.0
    return b["d"].astype(np.float32)[:, None] * q


def _deq_q5_1(raw):
    """Return float32 [nb, 32] from Q5_1 blocks."""
    b = np.frombuffer(raw, dtype=[("d", "<f2"), ("m", "<f2"), ("qh", "u1", 4), ("qs", "u1", 16)])
    q = (_unnibble32(b["qs"]) | _fifth_bits(b["qh"])).astype(np.float32)
    return b["d"].astype(np.float32)[:, None] * q + b["m"].astype(np.float32)[:, None]


def _deq_q2_k(raw):
    """Return float32 [nb, 256] from Q2_K super-blocks."""
    b = np.frombuffer(raw, dtype=[("scales", "u1", 16), ("qs", "u1", 64), ("d", "<f2"), ("dmin", "<f2")])
    sc, m = (b["scales"] & 15).astype(np.float32), (b["scales"] >> 4).astype(np.float32)
    dl = b["d"].astype(np.float32)[:, None] * sc                 # [nb, 16]
    ml = b["dmin"].astype(np.float32)[:, None] * m
    q = _uncrumb(b["qs"]).reshape(-1, 16, 16).astype(np.float32)
    return (dl[:, :, None] * q - ml[:, :, None]).reshape(-1, 256)


def _deq_q3_k(raw):
    """Return float32 [nb, 256] from Q3_K super-blocks."""
    b = np.frombuffer(raw, dtype=[("hmask", "u1", 32), ("qs", "u1", 64), ("scales", "u1", 12), ("d", "<f2")])
    s = b["scales"]
    lo = np.concatenate([s[:, 0:8] & 15, s[:, 0:8] >> 4], axis=1)                          # group g
    hi = ((s[:, None, 8:12] >> (2 * np.arange(4, dtype=np.uint8))[None, :, None]) & 3).reshape(-1, 16)
    sc = (lo | (hi << 4)).astype(np.float32) - 32.0
    dl = b["d"].astype(np.float32)[:, None] * sc                 # [nb, 16]
    high = (b["hmask"][:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1    # [nb, 8, 32]
    q = _uncrumb(b["qs"]).astype(np.int16) - 4 * (1 - high.reshape(-1, 256).astype(np.int16))
    return (dl[:, :, None] * q.reshape(-1, 16, 16).astype(np.float32)).reshape(-1, 256)


def _deq_q5_k(raw):
    """Return float32 [nb, 256] from Q5_K super-blocks."""
    b = np.frombuffer(raw, dtype=[("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12),
                                  ("qh", "u1", 32), ("qs", "u1", 128)])
    sc, m = _unpack_scale_min_k4(b["scales"])
    d = b["d"].astype(np.float32)[:, None] * sc
    mn = b["dmin"].astype(np.float32)[:, None] * m
    qs = b["qs"].reshape(-1, 4, 1, 32)
    q = np.concatenate([qs & 15, qs >> 4], axis=2).reshape(-1, 8, 32)
    q = q | (((b["qh"][:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1) << 4)
    return (d[:, :, None] * q.astype(np.float32) - mn[:, :, None]).reshape(-1, 256)


def _deq_iq4_nl(raw):
    """Return float32 [nb, 32] from IQ4_NL blocks."""
    b = np.frombuffer(raw, dtype=[("d", "<f2"), ("qs", "u1", 16)])
    return b["d"].astype(np.float32)[:, None] * KVALUES[_unnibble32(b["qs"])]


def _deq_iq4_xs(raw):
    """Return float32 [nb, 256] from IQ4_XS super-blocks."""
    b = np.frombuffer(raw, dtype=[("d", "<f2"), ("scales_h", "<u2"), ("scales_l", "u1", 4), ("qs", "u1", 128)])
    lo = np.stack([b["scales_l"] & 15, b["scales_l"] >> 4], axis=2).reshape(-1, 8)
    hi = (b["scales_h"][:, None] >> (2 * np.arange(8, dtype=np.uint16))) & 3
    sc = (lo.astype(np.int16) | (hi.astype(np.int16) << 4)).astype(np.float32) - 32.0
    dl = b["d"].astype(np.float32)[:, None] * sc                 # [nb, 8]
    q = KVALUES[_unnibble32(b["qs"].reshape(-1, 16))].reshape(-1, 8, 32)
    return (dl[:, :, None] * q).reshape(-1, 256)


_DEQUANTIZERS = {Q8_0: _deq_q8_0, Q4_0: _deq_q4_0, Q4_K: _deq_q4_k, Q6_K: _deq_q6_k,
                 Q4_1: _deq_q4_1, Q5_0: _deq_q5_0, Q5_1: _deq_q5_1, Q2_K: _deq_q2_k,
                 Q3_K: _deq_q3_k, Q5_K: _deq_q5_k, IQ4_NL: _deq_iq4_nl, IQ4_XS: _deq_iq4_xs}


def dequantize(raw, ggml_type, n):
    """Return the first n values of ggml-encoded raw bytes as a 1-D float32 array."""
    nbytes = tensor_nbytes(ggml_type, n)
    raw = memoryview(raw).cast("B")[:nbytes]
    if len(raw) < nbytes:
        raise ValueError("need %d bytes for %d %s values, got %d"
                         % (nbytes, n, TYPE_NAMES[ggml_type], len(raw)))
    if ggml_type == F32:
        return np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if ggml_type == F16:
        return np.frombuffer(raw, dtype="<f2").astype(np.float32)
    if ggml_type == BF16:
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32)
    if ggml_type not in _DEQUANTIZERS:
        raise ValueError("cannot dequantize ggml type %s" % TYPE_NAMES[ggml_type])
    blk, size = BLOCK_LAYOUT[ggml_type]
    step = _CHUNK_BLOCKS * size
    parts = [_DEQUANTIZERS[ggml_type](raw[i:i + step]).reshape(-1)
             for i in range(0, nbytes, step)]
    return np.concatenate(parts) if len(parts) != 1 else parts[0]


# ---------------------------------------------------------------- writer
def _pack_str(s):
    """Return a GGUF string: u64 length + UTF-8 bytes."""
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _align(n, alignment):
    """Return n rounded up to a multiple of alignment."""
    return (n + alignment - 1) // alignment * alignment


class Writer:
    """Builds a GGUF v3 file: add metadata and tensors, then write().

    Tensor data is quantized as soon as it is added and spooled to a
    temporary file beside the output, so memory stays bounded by one tensor.
    """

    def __init__(self, path, alignment=DEFAULT_ALIGNMENT):
        if alignment <= 0 or alignment % 8:
            raise ValueError("alignment must be a positive multiple of 8")
        self.path = path
        self.alignment = alignment
        self._kv = []          # encoded key/value records, in insertion order
        self._keys = set()
        self._infos = []       # (name, ne, ggml_type, offset)
        self._spool = tempfile.TemporaryFile(dir=os.path.dirname(os.path.abspath(path)))
        self._data_size = 0
        if alignment != DEFAULT_ALIGNMENT:
            self.add_u32("general.alignment", alignment)

    def _add(self, key, vtype, payload):
        """Record one encoded key/value pair."""
        if key in self._keys:
            raise ValueError("duplicate key %r" % key)
        self._keys.add(key)
        self._kv.append(_pack_str(key) + struct.pack("<I", vtype) + payload)

    def add_string(self, key, s):
        self._add(key, _STR, _pack_str(s))

    def add_u32(self, key, v):
        self._add(key, _U32, struct.pack("<I", v))

    def add_i32(self, key, v):
        self._add(key, _I32, struct.pack("<i", v))

    def add_u64(self, key, v):
        self._add(key, _U64, struct.pack("<Q", v))

    def add_f32(self, key, v):
        self._add(key, _F32, struct.pack("<f", v))

    def add_bool(self, key, b):
        self._add(key, _BOOL, struct.pack("<?", bool(b)))

    def add_array(self, key, values, elem):
        """Add an array of elem in 'str', 'u32', 'i32', 'f32', 'u8'."""
        if elem not in _ELEM_CODES:
            raise ValueError("unsupported array element type %r" % elem)
        code = _ELEM_CODES[elem]
        if code == _STR:
            body = b"".join(_pack_str(s) for s in values)
        else:
            body = np.asarray(values).astype(_SCALAR_NP[code]).tobytes()
        self._add(key, _ARR, struct.pack("<IQ", code, len(values)) + body)

    def add_tensor(self, name, a, ggml_type):
        """Quantize a (numpy [rows, cols] or [n]) and queue it with ne = reversed shape."""
        if any(info[0] == name for info in self._infos):
            raise ValueError("duplicate tensor %r" % name)
        a = np.asarray(a, dtype=np.float32)
        if a.ndim == 0:
            a = a.reshape(1)
        data = quantize(a, ggml_type)
        pad = _align(self._data_size, self.alignment) - self._data_size
        self._spool.write(b"\0" * pad)
        self._data_size += pad
        self._infos.append((name, list(reversed(a.shape)), ggml_type, self._data_size))
        self._spool.write(data)
        self._data_size += len(data)

    def write(self):
        """Write header, metadata, tensor infos and the aligned data to self.path."""
        head = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(self._infos), len(self._kv))]
        head += self._kv
        for name, ne, ggml_type, offset in self._infos:
            head.append(_pack_str(name) + struct.pack("<I", len(ne))
                        + struct.pack("<%dQ" % len(ne), *ne)
                        + struct.pack("<IQ", ggml_type, offset))
        head = b"".join(head)
        with open(self.path, "wb") as f:
            f.write(head)
            f.write(b"\0" * (_align(len(head), self.alignment) - len(head)))
            self._spool.seek(0)
            shutil.copyfileobj(self._spool, f, 1 << 24)
        self._spool.close()


# ---------------------------------------------------------------- reader
class Reader:
    """Parses a GGUF v2/v3 file.

    .kv       dict key -> python value (arrays become lists)
    .kv_types dict key -> GGUF value type code (arrays: (9, element code))
    .tensors  dict name -> (ggml_type, ne list, offset relative to the data section)
    .data_offset  absolute file offset of the data section
    """

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size < 24:
                raise ValueError("%s: too short for a GGUF header" % path)
            self._buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        buf = self._buf
        if buf[:4] != GGUF_MAGIC:
            raise ValueError("%s: not a GGUF file" % path)
        self.version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if self.version not in (2, 3):
            raise ValueError("%s: unsupported GGUF version %d" % (path, self.version))
        self._pos = 24
        self.kv = {}
        self.kv_types = {}
        for _ in range(n_kv):
            key = self._str()
            vtype = self._u32()
            if key in self.kv:
                raise ValueError("%s: duplicate key %r" % (path, key))
            self.kv[key], self.kv_types[key] = self._value(vtype)
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._str()
            n_dims = self._u32()
            ne = list(struct.unpack_from("<%dQ" % n_dims, buf, self._pos))
            self._pos += 8 * n_dims
            ggml_type = self._u32()
            offset = struct.unpack_from("<Q", buf, self._pos)[0]
            self._pos += 8
            if name in self.tensors:
                raise ValueError("%s: duplicate tensor %r" % (path, name))
            self.tensors[name] = (ggml_type, ne, offset)
        self.alignment = self.kv.get("general.alignment", DEFAULT_ALIGNMENT)
        self.data_offset = _align(self._pos, self.alignment)
        for name, (ggml_type, ne, offset) in self.tensors.items():
            n = int(np.prod(ne, dtype=np.int64))
            try:
                size = tensor_nbytes(ggml_type, n)
            except ValueError as e:
                raise ValueError("%s: tensor %s: %s" % (path, name, e)) from None
            if offset % self.alignment:
                raise ValueError("%s: tensor %s offset %d not aligned" % (path, name, offset))
            if self.data_offset + offset + size > len(buf):
                raise ValueError("%s: tensor %s runs past the end of the file" % (path, name))

    def _u32(self):
        v = struct.unpack_from("<I", self._buf, self._pos)[0]
        self._pos += 4
        return v

    def _str(self):
        n = struct.unpack_from("<Q", self._buf, self._pos)[0]
        s = self._buf[self._pos + 8:self._pos + 8 + n].decode("utf-8", errors="surrogateescape")
        self._pos += 8 + n
        return s

    def _value(self, vtype):
        """Return (python value, type code) of one metadata value at the cursor."""
        if vtype == _STR:
            return self._str(), vtype
        if vtype in _SCALAR_FMT:
            fmt = _SCALAR_FMT[vtype]
            v = struct.unpack_from(fmt, self._buf, self._pos)[0]
            self._pos += struct.calcsize(fmt)
            return v, vtype
        if vtype == _ARR:
            etype = self._u32()
            count = struct.unpack_from("<Q", self._buf, self._pos)[0]
            self._pos += 8
            if etype == _STR:
                return [self._str() for _ in range(count)], (_ARR, etype)
            if etype in _SCALAR_NP:
                dt = np.dtype(_SCALAR_NP[etype])
                arr = np.frombuffer(self._buf, dtype=dt, count=count, offset=self._pos)
                self._pos += count * dt.itemsize
                vals = arr.astype(bool).tolist() if etype == _BOOL else arr.tolist()
                return vals, (_ARR, etype)
            return [self._value(etype)[0] for _ in range(count)], (_ARR, etype)
        raise ValueError("%s: unknown metadata value type %d" % (self.path, vtype))

    def raw(self, name):
        """Return (ggml_type, ne, memoryview of the tensor's bytes)."""
        ggml_type, ne, offset = self.tensors[name]
        n = int(np.prod(ne, dtype=np.int64))
        start = self.data_offset + offset
        return ggml_type, ne, memoryview(self._buf)[start:start + tensor_nbytes(ggml_type, n)]

    def tensor(self, name):
        """Return the tensor dequantized to float32 with numpy shape = reversed ne."""
        ggml_type, ne, raw = self.raw(name)
        n = int(np.prod(ne, dtype=np.int64))
        return dequantize(raw, ggml_type, n).reshape(list(reversed(ne)))
