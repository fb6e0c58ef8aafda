"""Llama-architecture model for the ilpd demo (PyTorch).

Matches llama.cpp arch "llama" exactly so export needs no permutation:
  RMSNorm (eps 1e-5, weight only), GQA attention, RoPE in llama.cpp "normal"
  mode (rotates ADJACENT pairs (x[2i], x[2i+1]), theta 10000,
  freq_i = theta^(-2i/head_dim)), SwiGLU FFN w2(silu(w1 x) * w3 x),
  untied output head, no biases.
Linear weights are [out, in] as llama.cpp expects ([rows=out, cols=in]).
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab_size: int = 4096
    dim: int = 128
    n_layers: int = 24
    n_heads: int = 4
    n_kv_heads: int = 2
    ffn_dim: int = 384
    max_seq_len: int = 512
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


def rope_tables(head_dim, seq_len, theta):
    inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(seq_len, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()  # [T, hd/2]


def apply_rope(x, cos, sin):
    # x [B, H, T, hd]; adjacent pairs (x[2i], x[2i+1])
    xf = x.float()
    x0 = xf[..., 0::2]
    x1 = xf[..., 1::2]
    o0 = x0 * cos - x1 * sin
    o1 = x0 * sin + x1 * cos
    return torch.stack((o0, o1), dim=-1).flatten(-2).to(x.dtype)


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        hd = c.dim // c.n_heads
        self.hd = hd
        self.attn_norm = RMSNorm(c.dim, c.norm_eps)
        self.wq = nn.Linear(c.dim, c.n_heads * hd, bias=False)
        self.wk = nn.Linear(c.dim, c.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(c.dim, c.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(c.n_heads * hd, c.dim, bias=False)
        self.ffn_norm = RMSNorm(c.dim, c.norm_eps)
        self.w1 = nn.Linear(c.dim, c.ffn_dim, bias=False)  # gate
        self.w3 = nn.Linear(c.dim, c.ffn_dim, bias=False)  # up
        self.w2 = nn.Linear(c.ffn_dim, c.dim, bias=False)  # down

    def forward(self, x, cos, sin, mask, cache=None):
        """cache: optional dict holding "k"/"v" of earlier positions (incremental
        decoding; cos/sin/mask must then cover the new positions only)."""
        B, T, _ = x.shape
        c = self.c
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, c.n_heads, self.hd).transpose(1, 2)
        k = self.wk(h).view(B, T, c.n_kv_heads, self.hd).transpose(1, 2)
        v = self.wv(h).view(B, T, c.n_kv_heads, self.hd).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        rep = c.n_heads // c.n_kv_heads
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if cache is None and x.is_cuda and hasattr(F, "scaled_dot_product_attention"):  # fused, on a GPU
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)).float() * (1.0 / math.sqrt(self.hd))
            att = att + mask
            att = torch.softmax(att, dim=-1).to(v.dtype)
            o = att @ v
        o = o.transpose(1, 2).reshape(B, T, c.n_heads * self.hd)
        x = x + self.wo(o)
        h = self.ffn_norm(x)
        x = x + self.w2(F.silu(self.w1(h)) * self.w3(h))
        return x


class Llama(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        assert c.dim % c.n_heads == 0 and c.n_heads % c.n_kv_heads == 0
        assert c.dim % 32 == 0 and c.ffn_dim % 32 == 0
        self.c = c
        self.tok_emb = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.n_layers)])
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.output = nn.Linear(c.dim, c.vocab_size, bias=False)
        cos, sin = rope_tables(c.dim // c.n_heads, c.max_seq_len, c.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)
        for n, p in self.named_parameters():
            if n.endswith("wo.weight") or n.endswith("w2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c.n_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx, skip=(), return_hidden=False, keep=None):
        """idx [B, T] -> logits [B, T, V].  skip: layer indices to bypass.
        return_hidden: also return the residual stream before each layer and
        after the last (list of n_layers+1 tensors).
        keep: training-time layer dropout, a bool tensor [n_layers, B]; a
        sequence whose keep[i] is False passes layer i unchanged (the
        LayerSkip recipe: the model learns to do without the layer)."""
        B, T = idx.shape
        x = self.tok_emb(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        mask = torch.full((T, T), float("-inf"), device=idx.device).triu(1)
        hs = []
        for i, layer in enumerate(self.layers):
            if return_hidden:
                hs.append(x)
            if i in skip:
                continue
            if keep is None or bool(keep[i].all()):
                x = layer(x, cos, sin, mask)
            elif bool(keep[i].any()):
                x = torch.where(keep[i][:, None, None], layer(x, cos, sin, mask), x)
        if return_hidden:
            hs.append(x)
        logits = self.output(self.norm(x))
        return (logits, hs) if return_hidden else logits

    def exit_logits(self, h):
        """Early exit: the shared final norm and head on a hidden state."""
        return self.output(self.norm(h))


@torch.no_grad()
def forward_cached(model, idx, caches, skip=()):
    """Incremental forward: idx [1, T_new]; caches: list of dicts (one per
    layer, initially empty); skip: layer indices to bypass (their caches stay
    empty).  Returns logits [1, T_new, V]."""
    c = model.c
    past = next((kv["k"].shape[2] for kv in caches if "k" in kv), 0)
    T = idx.shape[1]
    x = model.tok_emb(idx)
    cos, sin = model.cos[past:past + T], model.sin[past:past + T]
    mask = torch.full((T, past + T), float("-inf")).triu(past + 1)
    for i, (layer, cache) in enumerate(zip(model.layers, caches)):
        if i not in skip:
            x = layer(x, cos, sin, mask, cache)
    return model.output(model.norm(x))


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def load_checkpoint(path, map_location="cpu"):
    ck = torch.load(path, map_location=map_location)
    c = Config(**ck["config"])
    m = Llama(c)
    m.load_state_dict(ck["model"])
    return m, ck


def latest_checkpoint(ckpt_dir):
    import glob
    import os
    fs = sorted(glob.glob(os.path.join(ckpt_dir, "ckpt_*.pt")))
    return fs[-1] if fs else None
