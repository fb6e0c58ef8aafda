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
    Q6_K: (256, 210), Q8_K: (256, 292),
}

# llama.cpp general.file_type values (enum llama_ftype) for the types we write
FILE_TYPE = {F32: 0, F16: 1, Q4_0: 2, Q8_0: 7, Q4_K: 15, Q6_K: 18, BF16: 32}

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


def _bf16_bits(x):
    """Return x as bfloat16 bit patterns (uint16), round to nearest even, NaN kept quiet."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits.astype(np.uint64) + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


_QUANTIZERS = {Q8_0: (32, _quant_q8_0), Q4_0: (32, _quant_q4_0),
               Q4_K: (256, _quant_q4_k), Q6_K: (256, _quant_q6_k)}
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


_DEQUANTIZERS = {Q8_0: _deq_q8_0, Q4_0: _deq_q4_0, Q4_K: _deq_q4_k, Q6_K: _deq_q6_k}


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
