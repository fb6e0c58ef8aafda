#!/usr/bin/python3
"""The GGUF writer every synthetic test model comes from (scripts/model/ilpd_gguf.py).

Usage: /usr/bin/python3 tests/t_gguf_writer.py   (a tests/run.sh suite: one
"ok - NAME" or "not ok - NAME: why" line per check; exit 1 when one fails)

1. quantize -> dequantize relative RMS error per type is below a bound;
2. the vectorised dequantizers agree with plain scalar loops written after
   ggml's dequantize_row_* (an independent reading of the block layouts);
3. known hand-built blocks decode to the expected values;
4. Writer -> Reader preserves metadata of every kind and tensor data;
5. quantized types reject rows that do not fill whole blocks;
6. the dequantizers reproduce gguf-py's on tests/data/quant/*.bin bit for bit
   (the vectors of scripts/model/quant_vectors.py, also read by the C test).
"""

import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "model"))
import ilpd_gguf as g  # noqa: E402

# bound on RMS(error) / RMS(x) for N(0,1) data
MAX_REL_RMS = {g.F32: 0.0, g.F16: 5e-4, g.BF16: 4e-3, g.Q8_0: 1e-2,
               g.Q6_K: 3e-2, g.Q4_0: 0.12, g.Q4_K: 0.11,
               g.Q4_1: 0.12, g.Q5_0: 0.06, g.Q5_1: 0.06, g.Q2_K: 0.45, g.Q3_K: 0.22,
               g.Q5_K: 0.06, g.IQ4_NL: 0.12, g.IQ4_XS: 0.12}
VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "quant")


def _half(b, off):
    """Return the fp16 at byte offset off of b as a float."""
    return float(np.frombuffer(b, dtype="<f2", count=1, offset=off)[0])


def scalar_dequant(raw, t, n):
    """Return float list decoded with per-element loops mirroring ggml's C code."""
    out = []
    if t == g.Q8_0:
        for o in range(0, len(raw), 34):
            d = _half(raw, o)
            out += [d * struct.unpack_from("b", raw, o + 2 + j)[0] for j in range(32)]
    elif t == g.Q4_0:
        for o in range(0, len(raw), 18):
            d = _half(raw, o)
            qs = raw[o + 2:o + 18]
            y = [0.0] * 32
            for j in range(16):
                y[j] = d * ((qs[j] & 15) - 8)
                y[j + 16] = d * ((qs[j] >> 4) - 8)
            out += y
    elif t == g.Q4_K:
        for o in range(0, len(raw), 144):
            d, dmin = _half(raw, o), _half(raw, o + 2)
            s = raw[o + 4:o + 16]
            qs = raw[o + 16:o + 144]

            def scale_min(j):
                if j < 4:
                    return s[j] & 63, s[j + 4] & 63
                return ((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4),
                        (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
            q, is_ = 0, 0
            for _ in range(0, 256, 64):
                sc1, m1 = scale_min(is_)
                sc2, m2 = scale_min(is_ + 1)
                out += [d * sc1 * (qs[q + l] & 15) - dmin * m1 for l in range(32)]
                out += [d * sc2 * (qs[q + l] >> 4) - dmin * m2 for l in range(32)]
                q += 32
                is_ += 2
    elif t == g.Q6_K:
        for o in range(0, len(raw), 210):
            ql = raw[o:o + 128]
            qh = raw[o + 128:o + 192]
            sc = struct.unpack_from("16b", raw, o + 192)
            d = _half(raw, o + 208)
            y = [0.0] * 256
            for half in range(2):
                L, H, S, Y = 64 * half, 32 * half, 8 * half, 128 * half
                for l in range(32):
                    is_ = l // 16
                    q1 = ((ql[L + l] & 15) | (((qh[H + l] >> 0) & 3) << 4)) - 32
                    q2 = ((ql[L + l + 32] & 15) | (((qh[H + l] >> 2) & 3) << 4)) - 32
                    q3 = ((ql[L + l] >> 4) | (((qh[H + l] >> 4) & 3) << 4)) - 32
                    q4 = ((ql[L + l + 32] >> 4) | (((qh[H + l] >> 6) & 3) << 4)) - 32
                    y[Y + l] = d * sc[S + is_] * q1
                    y[Y + l + 32] = d * sc[S + is_ + 2] * q2
                    y[Y + l + 64] = d * sc[S + is_ + 4] * q3
                    y[Y + l + 96] = d * sc[S + is_ + 6] * q4
            out += y
    return out[:n]


def check_accuracy(fail):
    """Append failures of the per-type error bounds and scalar cross-checks to fail."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((48, 1024)).astype(np.float32)
    x[3] *= 50.0                         # rows with very different ranges
    x[5] = 0.0                           # an all-zero row
    x[7, :256] = np.abs(x[7, :256])      # a sub-range with no negative values
    errs = {}
    for t, bound in MAX_REL_RMS.items():
        raw = g.quantize(x, t)
        if len(raw) != g.tensor_nbytes(t, x.size):
            fail.append("%s: %d bytes, expected %d" % (g.TYPE_NAMES[t], len(raw), g.tensor_nbytes(t, x.size)))
            continue
        y = g.dequantize(raw, t, x.size).reshape(x.shape)
        rel = np.sqrt(((x - y) ** 2).sum(axis=1) / np.maximum((x ** 2).sum(axis=1), 1e-30))
        errs[g.TYPE_NAMES[t]] = float(rel.max())
        if rel.max() > bound or not np.all(y[5] == 0):
            fail.append("%s: worst row rel RMS error %.3g > %.3g" % (g.TYPE_NAMES[t], rel.max(), bound))
        if t in (g.Q8_0, g.Q4_0, g.Q4_K, g.Q6_K):
            nb = 2048                    # first two rows through the scalar loops
            ref = np.asarray(scalar_dequant(raw[:g.tensor_nbytes(t, nb)], t, nb), dtype=np.float32)
            if np.abs(ref - y.reshape(-1)[:nb]).max() > 1e-6 * max(1.0, np.abs(ref).max()):
                fail.append("%s: vectorised dequantize disagrees with scalar loops" % g.TYPE_NAMES[t])
    return errs


def check_known_blocks(fail):
    """Append failures of hand-built blocks with known values to fail."""
    d = np.float16(0.5).tobytes()
    q8 = d + bytes((np.arange(32) - 16).astype(np.int8).view(np.uint8))
    if not np.array_equal(g.dequantize(q8, g.Q8_0, 32), 0.5 * (np.arange(32) - 16)):
        fail.append("Q8_0 known block")
    q4 = d + bytes([0x1F] * 16)           # low nibble 15 -> +7, high nibble 1 -> -7
    want = np.array([3.5] * 16 + [-3.5] * 16, dtype=np.float32)
    if not np.array_equal(g.dequantize(q4, g.Q4_0, 32), want):
        fail.append("Q4_0 known block")
    bf = g.quantize(np.array([1.0, 1.00390625, 1.01171875, -2.5], dtype=np.float32), g.BF16)
    if np.frombuffer(bf, "<u2").tolist() != [0x3F80, 0x3F80, 0x3F82, 0xC020]:
        fail.append("BF16 round-to-nearest-even")
    # Q4_K: d=1, dmin=1, sub-block j scale j+1 / min j (j>=4 exercise the split 6-bit packing)
    sc = np.array([[1, 2, 3, 4, 37, 46, 55, 63]])
    mn = np.array([[0, 1, 2, 3, 60, 33, 17, 4]])
    qs = np.zeros((4, 32), dtype=np.uint8) | np.uint8(3) | np.uint8(5 << 4)
    blk = (np.float16(1).tobytes() + np.float16(1).tobytes()
           + g._pack_scale_min_k4(sc, mn).tobytes() + qs.tobytes())
    y = g.dequantize(blk, g.Q4_K, 256).reshape(8, 32)
    want = np.array([(sc[0, j] * (3 if j % 2 == 0 else 5) - mn[0, j]) for j in range(8)], dtype=np.float32)
    if not np.array_equal(y, np.repeat(want[:, None], 32, axis=1)):
        fail.append("Q4_K known block")


def check_gguf_py_vectors(fail):
    """Append to fail each vector file whose blocks do not dequantize to gguf-py's floats, bit for bit."""
    names = sorted(f for f in os.listdir(VECTORS) if f.endswith(".bin"))
    for f in names:
        with open(os.path.join(VECTORS, f), "rb") as fh:
            b = fh.read()
        t, n, nb = struct.unpack("<III", b[8:20])
        want = np.frombuffer(b[20 + nb:], dtype="<f4")
        got = g.dequantize(b[20:20 + nb], t, n)
        if b[:8] != b"ILPDQV1\0" or len(want) != n or not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
            fail.append(f)
    return [f[:-4] for f in names]


def check_file_roundtrip(fail):
    """Append failures of a Writer -> Reader round trip to fail."""
    rng = np.random.default_rng(2)
    tensors = {"a.f32": (rng.standard_normal((3, 5)).astype(np.float32), g.F32),
               "b.vec": (rng.standard_normal(7).astype(np.float32), g.F32),
               "c.f16": (rng.standard_normal((4, 6)).astype(np.float32), g.F16),
               "d.bf16": (rng.standard_normal((2, 8)).astype(np.float32), g.BF16),
               "e.q8": (rng.standard_normal((3, 64)).astype(np.float32), g.Q8_0),
               "f.q4": (rng.standard_normal((2, 32)).astype(np.float32), g.Q4_0),
               "g.q4k": (rng.standard_normal((3, 512)).astype(np.float32), g.Q4_K),
               "h.q6k": (rng.standard_normal((2, 256)).astype(np.float32), g.Q6_K)}
    kv = {"s": "héllo ▁wörld", "u32": 4000000000, "i32": -7, "u64": 1 << 40, "f32": 0.25,
          "t": True, "f": False}
    arrays = {"as": (["<s>", "▁the", "", "Ġa b"], "str"), "au": ([1, 2, 3], "u32"),
              "ai": ([-1, 0, 1], "i32"), "af": ([0.5, -1.5], "f32"), "a8": ([0, 255], "u8")}
    for alignment in (32, 64):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.gguf")
            w = g.Writer(path, alignment=alignment)
            w.add_string("s", kv["s"])
            w.add_u32("u32", kv["u32"])
            w.add_i32("i32", kv["i32"])
            w.add_u64("u64", kv["u64"])
            w.add_f32("f32", kv["f32"])
            w.add_bool("t", True)
            w.add_bool("f", False)
            for k, (vals, elem) in arrays.items():
                w.add_array(k, vals, elem)
            for name, (a, t) in tensors.items():
                w.add_tensor(name, a, t)
            w.write()
            r = g.Reader(path)
            for k, v in kv.items():
                if r.kv.get(k) != v:
                    fail.append("kv %s: %r != %r" % (k, r.kv.get(k), v))
            for k, (vals, _) in arrays.items():
                if r.kv.get(k) != vals:
                    fail.append("array %s: %r != %r" % (k, r.kv.get(k), vals))
            if alignment != 32 and r.kv.get("general.alignment") != alignment:
                fail.append("general.alignment not written")
            for name, (a, t) in tensors.items():
                gt, ne, off = r.tensors[name]
                if gt != t or ne != list(reversed(a.shape)) or off % alignment:
                    fail.append("tensor %s info %r" % (name, r.tensors[name]))
                    continue
                want = g.dequantize(g.quantize(a, t), t, a.size).reshape(a.shape)
                if not np.array_equal(r.tensor(name), want):
                    fail.append("tensor %s data" % name)
                if (r.data_offset + off) % alignment:
                    fail.append("tensor %s absolute offset not aligned" % name)


def check_errors(fail):
    """Append failures of the invalid-shape checks to fail."""
    for t, cols in ((g.Q8_0, 48), (g.Q4_0, 16), (g.Q4_K, 128), (g.Q6_K, 300)):
        try:
            g.quantize(np.zeros((2, cols), dtype=np.float32), t)
            fail.append("%s accepted %d columns" % (g.TYPE_NAMES[t], cols))
        except ValueError:
            pass


def main():
    """Run all checks, one line each; returns the exit code."""
    failed = 0

    def report(fail, name):
        nonlocal failed
        if fail:
            failed += 1
            print("not ok - %s: %s" % (name, "; ".join(fail)))
        else:
            print("ok - " + name)

    acc = []
    errs = check_accuracy(acc)
    summary = " ".join("%s=%.2g" % kv for kv in errs.items())
    report([f for f in acc if "vectorised" not in f],
           "ilpd_gguf: quantize -> dequantize within each type's error bound (worst-row rel RMS: %s)" % summary)
    report([f for f in acc if "vectorised" in f],
           "ilpd_gguf: vectorised dequantizers equal scalar loops after ggml's dequantize_row_* (Q8_0, Q4_0, Q4_K, Q6_K)")
    fail = []
    check_known_blocks(fail)
    report(fail, "ilpd_gguf: hand-built Q8_0, Q4_0, Q4_K blocks decode to their values; BF16 rounds to nearest even")
    fail = []
    names = check_gguf_py_vectors(fail)
    if len(names) < 14:
        fail.append("only %d vector files in %s" % (len(names), VECTORS))
    report(fail, "ilpd_gguf: dequantizers equal gguf-py's bit for bit on tests/data/quant (%s)" % ", ".join(names))
    fail = []
    check_file_roundtrip(fail)
    report(fail, "ilpd_gguf: Writer -> Reader keeps metadata of every kind, tensor shapes, data and alignment (32, 64)")
    fail = []
    check_errors(fail)
    report(fail, "ilpd_gguf: quantized types refuse rows that do not fill whole blocks")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
