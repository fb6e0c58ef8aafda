#!/usr/bin/python3
"""Numpy reference forward pass for llama, qwen2, qwen3, gemma3 and phi3 GGUF models (the test oracle).

Weights are dequantized with scripts/model/ilpd_gguf.py exactly as the file defines
them, then all arithmetic runs in float64, so the only approximation against
an ideal implementation is the weight format itself, with one rule of the
integer matmuls: a matmul with a quantized weight (Q8_0, Q4_0, Q4_1,
Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) multiplies the weight by its input quantized to int8 blocks of 32
(float32 d = u * m with u = the largest |x| of the block's 8 (a super-block) / (127 * 64) and
m = ceil(max|x| of the block / (127 u)) in 1..64, q = round-half-even(x * (1/d)), input = q * d:
ilpd's format; llama.cpp takes d = max|x| / 127 per block, or per 256 for the K-quants), and a matmul with
a BF16 weight multiplies it by its input rounded to BF16 (to nearest, ties to even).

Model semantics (as llama.cpp defines them for these architectures):
  x = token_embd[token]
  per layer (skipped entirely where mask[i] == 0):
    h = rmsnorm(x) * attn_norm
    q, k, v = h @ Wq.T (+bq), h @ Wk.T (+bk), h @ Wv.T (+bv)   (biases: qwen2)
    qwen3: q, k = rmsnorm(q_head) * attn_q_norm, rmsnorm(k_head) * attn_k_norm,
      per head of head_dim values (head_dim = attention.key_length, which may
      differ from dim / heads)
    rope(q), rope(k): llama "normal" mode rotates pairs (2i, 2i+1), qwen2/3
      "neox" mode rotates pairs (i, i + n_rot/2); theta_i = base^(-2i/n_rot),
      divided by rope_freqs.weight[i] when that tensor exists, else scaled by
      rope.scaling.type: linear (theta / factor) or llama3 (the Llama 3.1
      rule on rope.scaling.factor, low/high_freq_factor and
      original_context_length, which is what rope_freqs.weight holds) or yarn
      (ggml's rope_yarn with ext_factor 1: theta_i = theta_i / factor * (1 - r_i)
      + theta_i * r_i, r_i = 1 - clamp((i - low) / max(high - low, 0.001), 0, 1)
      with low = floor(corr(beta_fast)), high = ceil(corr(beta_slow)),
      corr(b) = n_rot ln(orig / (2 pi b)) / (2 ln base), clamped to [0, n_rot - 1];
      cos and sin multiplied by mscale = 1 + 0.1 ln(factor))
    causal GQA attention, softmax(q.k / sqrt(head_dim)); x += attn @ Wo.T
    h = rmsnorm(x) * ffn_norm; x += (silu(h @ Wg.T) * (h @ Wu.T)) @ Wd.T
  logits = (rmsnorm(x) * output_norm) @ output.T   (token_embd if output absent)

phi3 (llama.cpp's src/models/phi3.cpp): the llama block with neox rope, Q, K and V
  the row ranges of blk.N.attn_qkv, gate and up the two halves of blk.N.ffn_up;
  LongRoPE: theta_i divided by rope_factors_long[i] when the context served
  (n_ctx, default context_length) exceeds original_context_length, else by
  rope_factors_short[i], and cos and sin multiplied by rope.scaling.attn_factor.

gemma3 (llama.cpp's src/models/gemma3.cpp): x = token_embd[token] * sqrt(dim);
  neox rope and qwen3's Q/K norms; scores scaled by 1/sqrt(head_dim) (by
  1/sqrt(dim / heads) for 62 layers); the attention output and the FFN output
  each go through their own rmsnorm (post_attention_norm, post_ffw_norm)
  before the residual add; FFN gelu_tanh(h @ Wg.T) * (h @ Wu.T); with
  attention.sliding_window W, layer i with i % P < P - 1 (P =
  attention.sliding_window_pattern, default 6) lets position p see positions
  p - W < j <= p only and rotates with base rope.freq_base_swa (10000) and no
  rope scaling; final_logit_softcapping c: logits = c tanh(logits / c).

CLI:
  /usr/bin/python3 tests/reference/reference.py -m MODEL.gguf --tokens 1,2,3 \
      [--mask 1,1,0,1] -o OUT.f32
writes the logits of every position as little-endian float32, row-major
[n_tokens, vocab].
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "model"))
import ilpd_gguf  # noqa: E402

ROPE_MODE = {"llama": "norm", "qwen2": "neox", "qwen3": "neox", "gemma3": "neox", "phi3": "neox"}
QUANTIZED = (ilpd_gguf.Q8_0, ilpd_gguf.Q4_0, ilpd_gguf.Q4_1, ilpd_gguf.Q5_0, ilpd_gguf.Q5_1, ilpd_gguf.IQ4_NL,
             ilpd_gguf.Q2_K, ilpd_gguf.Q3_K, ilpd_gguf.Q4_K, ilpd_gguf.Q5_K, ilpd_gguf.Q6_K, ilpd_gguf.IQ4_XS)


def quantize_activation(h):
    """Return (h [n, cols] (cols % 32 == 0) rounded as the integer matmuls see it, float64;
    per row, the smallest distance of a scaled value from a rounding tie (x.5))."""
    x = h.astype(np.float32).reshape(len(h), -1, 32)
    amax = np.max(np.abs(x), axis=-1)  # [n, nb]
    nb = amax.shape[1]
    top = np.zeros_like(amax)
    for s0 in range(0, nb, 8):  # the unit of each 8 blocks: their largest / (127 * 64)
        top[:, s0:s0 + 8] = np.max(amax[:, s0:s0 + 8], axis=1, keepdims=True)
    u = top / np.float32(127 * 64)
    step = np.float32(127) * u
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(step > 0, np.ceil(amax / step), np.float32(1))
    d = (u * np.clip(r, 1, 64).astype(np.float32)).astype(np.float32)[..., None]
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    scaled = x * inv
    q = np.rint(scaled)
    tie = np.abs(np.abs(scaled - np.floor(scaled)) - 0.5).reshape(len(h), -1).min(axis=1)
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(h.shape), tie


def round_bf16(h):
    """Return (h [n, cols] as float32 rounded to BF16 (to nearest, ties to even), float64; per row, the
    smallest distance of a value from a rounding tie, in units of its BF16 step)."""
    u = h.astype(np.float32).view(np.uint32).astype(np.uint64)
    tie = np.abs((u & 0xFFFF) / 65536.0 - 0.5).reshape(len(h), -1).min(axis=1)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return u.view(np.float32).astype(np.float64), tie


class Model:
    """A GGUF llama/qwen2/qwen3/gemma3/phi3 model held as dequantized float32 weights (n_ctx: the
    context served, which picks LongRoPE's factors)."""

    def __init__(self, path, n_ctx=None):
        self.gguf = ilpd_gguf.Reader(path)
        kv = self.gguf.kv
        self.arch = kv["general.architecture"]
        if self.arch not in ROPE_MODE:
            raise ValueError("unsupported architecture %r" % self.arch)
        a = self.arch + "."
        self.n_layer = kv[a + "block_count"]
        self.dim = kv[a + "embedding_length"]
        self.n_head = kv[a + "attention.head_count"]
        self.n_kv_head = kv.get(a + "attention.head_count_kv", self.n_head)
        self.head_dim = kv.get(a + "attention.key_length", self.dim // self.n_head)
        self.n_rot = kv.get(a + "rope.dimension_count", self.head_dim)
        self.eps = kv[a + "attention.layer_norm_rms_epsilon"]
        self.rope_base = kv.get(a + "rope.freq_base", 10000.0)
        self._cache = {}
        self.vocab = self.gguf.tensors["token_embd.weight"][1][1]
        self.rope_factors = self.weight("rope_freqs.weight")
        self.attn_factor = kv.get(a + "rope.scaling.attn_factor", 1.0)
        if self.weight("rope_factors_long.weight") is not None:  # LongRoPE: by the context served
            n_ctx = n_ctx or kv.get(a + "context_length", 2048)
            orig = kv.get(a + "rope.scaling.original_context_length", kv.get(a + "context_length", 2048))
            self.rope_factors = self.weight("rope_factors_long.weight" if n_ctx > orig else "rope_factors_short.weight")
        self.rope_scaling = dict(
            type=kv.get(a + "rope.scaling.type", "none"), factor=kv.get(a + "rope.scaling.factor", 1.0),
            low=kv.get(a + "rope.scaling.low_freq_factor", 1.0), high=kv.get(a + "rope.scaling.high_freq_factor", 4.0),
            orig=kv.get(a + "rope.scaling.original_context_length", kv.get(a + "context_length", 2048)),
            beta_fast=kv.get(a + "rope.scaling.yarn_beta_fast", 32.0), beta_slow=kv.get(a + "rope.scaling.yarn_beta_slow", 1.0))
        self.gemma = self.arch == "gemma3"
        self.window = kv.get(a + "attention.sliding_window", 0) if self.gemma else 0
        period = kv.get(a + "attention.sliding_window_pattern", 6)
        self.swa = [bool(self.window) and (period == 0 or i % period < period - 1) for i in range(self.n_layer)]
        self.rope_base_swa = kv.get(a + "rope.freq_base_swa", 10000.0)
        self.softcap = kv.get(a + "final_logit_softcapping", 0.0)
        self.kq_scale = 1 / np.sqrt(self.dim // self.n_head if self.gemma and self.n_layer == 62 else self.head_dim)

    def weight(self, name):
        """Return tensor name as float32 (numpy shape = reversed ne), or None if absent."""
        if name not in self.gguf.tensors:
            return None
        if name not in self._cache:
            self._cache[name] = self.gguf.tensor(name)
        return self._cache[name]

    def _rmsnorm(self, x, w):
        """Return rmsnorm(x) * w over the last axis (float64)."""
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def _rope(self, x, pos, swa=False):
        """Return x [n, heads, head_dim] with rotary embedding applied at positions pos (swa: a
        sliding-window layer's, its own base and no scaling)."""
        half = self.n_rot // 2
        theta = (self.rope_base_swa if swa else self.rope_base) ** (-2.0 * np.arange(half) / self.n_rot)
        sc = dict(self.rope_scaling, type="none") if swa else self.rope_scaling
        if self.rope_factors is not None:
            theta = theta / self.rope_factors.astype(np.float64)
        elif sc["type"] == "linear":
            theta = theta / sc["factor"]
        elif sc["type"] == "llama3":
            wavelen = 2 * np.pi / theta
            smooth = (sc["orig"] / wavelen - sc["low"]) / (sc["high"] - sc["low"])
            theta = np.where(wavelen > sc["orig"] / sc["low"], theta / sc["factor"],
                             np.where(wavelen >= sc["orig"] / sc["high"],
                                      (1 - smooth) * theta / sc["factor"] + smooth * theta, theta))
        mscale = 1.0 if swa else self.attn_factor
        if sc["type"] == "yarn" and self.rope_factors is None:
            def corr(beta):
                return self.n_rot * np.log(sc["orig"] / (2 * np.pi * beta)) / (2 * np.log(self.rope_base))
            low, high = max(0.0, np.floor(corr(sc["beta_fast"]))), min(self.n_rot - 1.0, np.ceil(corr(sc["beta_slow"])))
            keep = 1 - np.clip((np.arange(half) - low) / max(high - low, 0.001), 0, 1)
            theta = theta / sc["factor"] * (1 - keep) + theta * keep
            mscale = 1 + 0.1 * np.log(sc["factor"]) if sc["factor"] > 1 else 1.0
        ang = pos[:, None].astype(np.float64) * theta[None, :]
        cos, sin = mscale * np.cos(ang)[:, None, :], mscale * np.sin(ang)[:, None, :]
        out = x.copy()
        if ROPE_MODE[self.arch] == "norm":
            x0, x1 = x[..., 0:self.n_rot:2], x[..., 1:self.n_rot:2]
            out[..., 0:self.n_rot:2] = x0 * cos - x1 * sin
            out[..., 1:self.n_rot:2] = x0 * sin + x1 * cos
        else:
            x0, x1 = x[..., :half], x[..., half:self.n_rot]
            out[..., :half] = x0 * cos - x1 * sin
            out[..., half:self.n_rot] = x0 * sin + x1 * cos
        return out

    def _linear(self, h, name, rows=None):
        """Return h @ W.T (+ bias when the file has one), float64; h quantized first for a quantized W,
        rounded to BF16 for a BF16 W; rows=(r0, r1): only those rows of W (a fused tensor's part)."""
        if self.gguf.tensors[name + ".weight"][0] == ilpd_gguf.BF16:
            h, tie = round_bf16(h)
            self.tie = np.minimum(self.tie, tie)
        elif self.gguf.tensors[name + ".weight"][0] in QUANTIZED:
            h, tie = quantize_activation(h)
            self.tie = np.minimum(self.tie, tie)
        w = self.weight(name + ".weight")
        y = h @ (w if rows is None else w[rows[0]:rows[1]]).T.astype(np.float64)
        b = self.weight(name + ".bias")
        return y if b is None else y + b

    def _attention(self, h, p, pos, swa=False):
        """Return the attention block output for normed input h [n, dim] of layer prefix p (swa: a
        sliding-window layer)."""
        n = len(h)
        qd, kd = self.n_head * self.head_dim, self.n_kv_head * self.head_dim
        if p + "attn_qkv.weight" in self.gguf.tensors:  # phi3: Q, K, V rows of one tensor
            q, k, v = (self._linear(h, p + "attn_qkv", r) for r in ((0, qd), (qd, qd + kd), (qd + kd, qd + 2 * kd)))
        else:
            q, k, v = self._linear(h, p + "attn_q"), self._linear(h, p + "attn_k"), self._linear(h, p + "attn_v")
        q = q.reshape(n, self.n_head, self.head_dim)
        k = k.reshape(n, self.n_kv_head, self.head_dim)
        v = v.reshape(n, self.n_kv_head, self.head_dim)
        qn, kn = self.weight(p + "attn_q_norm.weight"), self.weight(p + "attn_k_norm.weight")
        if qn is not None:                                   # qwen3: per-head RMSNorm before rope
            q, k = self._rmsnorm(q, qn), self._rmsnorm(k, kn)
        q, k = self._rope(q, pos, swa), self._rope(k, pos, swa)
        group = self.n_head // self.n_kv_head
        k = np.repeat(k, group, axis=1)                      # head h uses kv head h // group
        v = np.repeat(v, group, axis=1)
        scores = np.einsum("ihd,jhd->hij", q, k) * self.kq_scale
        seen = np.tril(np.ones((n, n), dtype=bool))
        if swa:
            seen &= (pos[:, None] - pos[None, :]) < self.window
        scores = np.where(seen[None], scores, -np.inf)
        scores -= scores.max(axis=-1, keepdims=True)
        prob = np.exp(scores)
        prob /= prob.sum(axis=-1, keepdims=True)
        out = np.einsum("hij,jhd->ihd", prob, v).reshape(n, self.n_head * self.head_dim)
        return self._linear(out, p + "attn_output")

    def _ffn(self, h, p):
        """Return the SwiGLU (gemma3: GeGLU, tanh GELU) FFN output for normed input h of layer prefix p."""
        if p + "ffn_gate.weight" in self.gguf.tensors:
            g, u = self._linear(h, p + "ffn_gate"), self._linear(h, p + "ffn_up")
        else:  # phi3: gate rows, then up rows, in ffn_up
            f = self.weight(p + "ffn_up.weight").shape[0] // 2
            g, u = self._linear(h, p + "ffn_up", (0, f)), self._linear(h, p + "ffn_up", (f, 2 * f))
        if self.gemma:
            act = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
        else:
            act = g / (1.0 + np.exp(-g))
        return self._linear(act * u, p + "ffn_down")

    def _post(self, y, name):
        """Return y through the post-norm NAME when the file has it (gemma3), else y."""
        w = self.weight(name)
        return y if w is None else self._rmsnorm(y, w)

    def forward(self, tokens, mask=None):
        """Return float64 logits [len(tokens), vocab] for one sequence starting at position 0.

        mask: optional per-layer list of 0/1; a 0 layer is skipped entirely.
        """
        if mask is None:
            mask = [1] * self.n_layer
        if len(mask) != self.n_layer:
            raise ValueError("mask has %d entries, model has %d layers" % (len(mask), self.n_layer))
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.min() < 0 or tokens.max() >= self.vocab:
            raise ValueError("token id out of range [0, %d)" % self.vocab)
        pos = np.arange(len(tokens))
        # Per position, how close any quantized activation came to a rounding
        # tie: there a float32 engine may legitimately round the other way.
        self.tie = np.full(len(tokens), np.inf)
        x = self.weight("token_embd.weight")[tokens].astype(np.float64)
        if self.gemma:
            x = x * np.sqrt(np.float32(self.dim))
        for i in range(self.n_layer):
            if not mask[i]:
                continue
            p = "blk.%d." % i
            a = self._attention(self._rmsnorm(x, self.weight(p + "attn_norm.weight")), p, pos, self.swa[i])
            x = x + self._post(a, p + "post_attention_norm.weight")
            f = self._ffn(self._rmsnorm(x, self.weight(p + "ffn_norm.weight")), p)
            x = x + self._post(f, p + "post_ffw_norm.weight")
        x = self._rmsnorm(x, self.weight("output_norm.weight"))
        head = "output" if "output.weight" in self.gguf.tensors else "token_embd"
        logits = self._linear(x, head)
        return self.softcap * np.tanh(logits / self.softcap) if self.softcap else logits

    def greedy(self, tokens, n_steps, mask=None):
        """Return (generated ids, chosen logits): n_steps of argmax decoding after tokens."""
        seq = list(tokens)
        ids, chosen = [], []
        for _ in range(n_steps):
            last = self.forward(seq, mask)[-1]
            t = int(np.argmax(last))
            ids.append(t)
            chosen.append(float(last[t]))
            seq.append(t)
        return ids, chosen


def _int_list(s):
    """Return the comma-separated integers in s as a list."""
    return [int(v) for v in s.split(",") if v.strip()]


def main(argv=None):
    """CLI entry point; returns the process exit code."""
    ap = argparse.ArgumentParser(description="numpy reference forward pass")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--tokens", required=True, help="comma-separated token ids")
    ap.add_argument("--mask", default=None, help="comma-separated 0/1 per layer")
    ap.add_argument("-o", "--output", required=True, help="float32 logits [n_tokens, vocab]")
    a = ap.parse_args(argv)
    model = Model(a.model)
    mask = _int_list(a.mask) if a.mask else None
    logits = model.forward(_int_list(a.tokens), mask)
    logits.astype("<f4").tofile(a.output)
    print("reference: %d x %d logits -> %s (argmax of last row %d)"
          % (logits.shape[0], logits.shape[1], a.output, int(np.argmax(logits[-1]))),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
