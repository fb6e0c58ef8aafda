#!/usr/bin/python3
"""Export a training checkpoint to GGUF (arch "llama") for the ilpd engine.

  /usr/bin/python3 scripts/model/train/export.py [--ckpt /work/ilpd-train/ckpt_XXXXXXX.pt]
      [--out-dir models] [--types F16,Q8_0] [--check]

Default checkpoint: the latest in /work/ilpd-train.  Writes
models/ilpd-demo-F16.gguf and models/ilpd-demo-Q8_0.gguf.  2-D weights are
F16 / Q8_0, norm weights F32.  PyTorch Linear weights [out, in] are written as
numpy [rows=out, cols=in] (GGUF ne = [in, out]), exactly as llama.cpp stores
them; RoPE is trained in llama.cpp "normal" (adjacent pair) mode, so Q/K need
no permutation.  Tokenizer: SentencePiece BPE (tokenizer.ggml.model "llama"),
add_space_prefix=false (see chat.py for the exact contract).

--check reads each file back and runs a numpy forward pass on the GGUF tensors
(llama.cpp semantics) against the PyTorch model on a held-out prompt.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "scripts", "model"))
import ilpd_gguf as g  # noqa: E402
from chat import IM_START, IM_END, Tokenizer  # noqa: E402
from model import latest_checkpoint, load_checkpoint  # noqa: E402

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
TYPES = {"F16": g.F16, "Q8_0": g.Q8_0, "F32": g.F32}
FILE_TYPE = {"F16": 1, "Q8_0": 7, "F32": 0}


def tensor_map(model):
    """(gguf name, numpy float32 array) in llama.cpp order."""
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = [("token_embd.weight", sd["tok_emb.weight"])]
    for i in range(model.c.n_layers):
        p = f"layers.{i}."
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", sd[p + "attn_norm.weight"]),
                (b + "attn_q.weight", sd[p + "wq.weight"]),
                (b + "attn_k.weight", sd[p + "wk.weight"]),
                (b + "attn_v.weight", sd[p + "wv.weight"]),
                (b + "attn_output.weight", sd[p + "wo.weight"]),
                (b + "ffn_norm.weight", sd[p + "ffn_norm.weight"]),
                (b + "ffn_gate.weight", sd[p + "w1.weight"]),
                (b + "ffn_up.weight", sd[p + "w3.weight"]),
                (b + "ffn_down.weight", sd[p + "w2.weight"])]
    out += [("output_norm.weight", sd["norm.weight"]), ("output.weight", sd["output.weight"])]
    return out


def add_tokenizer(w, tok_path):
    tok = Tokenizer(tok_path)
    sp = tok.sp
    n = sp.get_piece_size()
    pieces, scores, types = [], [], []
    control = {sp.bos_id(), sp.eos_id(), tok.im_start, tok.im_end}
    for i in range(n):
        pieces.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if i == sp.unk_id():
            types.append(2)
        elif i in control:
            types.append(3)
        elif sp.is_byte(i):
            types.append(6)
        else:
            types.append(1)
    assert pieces[tok.im_start] == IM_START and pieces[tok.im_end] == IM_END
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", pieces, "str")
    w.add_array("tokenizer.ggml.scores", scores, "f32")
    w.add_array("tokenizer.ggml.token_type", types, "i32")
    w.add_u32("tokenizer.ggml.bos_token_id", sp.bos_id())
    w.add_u32("tokenizer.ggml.eos_token_id", tok.im_end)
    w.add_u32("tokenizer.ggml.eot_token_id", tok.im_end)
    w.add_u32("tokenizer.ggml.unknown_token_id", sp.unk_id())
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_eos_token", False)
    w.add_bool("tokenizer.ggml.add_space_prefix", False)
    w.add_string("tokenizer.chat_template", CHATML)
    return n


def export(model, ck, tok_path, path, tname):
    c = model.c
    w = g.Writer(path)
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", "ilpd-demo")
    w.add_string("general.license", "CDLA-Sharing-1.0")
    w.add_u32("general.file_type", FILE_TYPE[tname])
    w.add_u32("llama.vocab_size", c.vocab_size)
    w.add_u32("llama.context_length", c.max_seq_len)
    w.add_u32("llama.embedding_length", c.dim)
    w.add_u32("llama.block_count", c.n_layers)
    w.add_u32("llama.feed_forward_length", c.ffn_dim)
    w.add_u32("llama.attention.head_count", c.n_heads)
    w.add_u32("llama.attention.head_count_kv", c.n_kv_heads)
    w.add_u32("llama.rope.dimension_count", c.dim // c.n_heads)
    w.add_f32("llama.rope.freq_base", c.rope_theta)
    w.add_f32("llama.attention.layer_norm_rms_epsilon", c.norm_eps)
    st = ck.get("state", {})
    w.add_u32("ilpd.train.steps", int(st.get("step", 0)))
    w.add_string("ilpd.train.tokens", str(int(st.get("tokens", 0))))
    nv = add_tokenizer(w, tok_path)
    assert nv == c.vocab_size, (nv, c.vocab_size)
    for name, a in tensor_map(model):
        if a.ndim == 1:
            w.add_tensor(name, a, g.F32)
        else:
            assert a.shape[1] % 32 == 0, (name, a.shape)
            w.add_tensor(name, a, TYPES[tname])
    w.write()


# ------------------------------------------------------------------ check
def np_forward(r, ids):
    """Reference forward pass from GGUF tensors (llama.cpp semantics)."""
    kv = r.kv
    L = kv["llama.block_count"]
    nh = kv["llama.attention.head_count"]
    nkv = kv["llama.attention.head_count_kv"]
    eps = kv["llama.attention.layer_norm_rms_epsilon"]
    theta = kv["llama.rope.freq_base"]
    T = r.tensor
    x = T("token_embd.weight")[ids].astype(np.float64)
    d = x.shape[1]
    hd = d // nh
    n = len(ids)
    inv = theta ** (-np.arange(0, hd, 2) / hd)
    ang = np.arange(n)[:, None] * inv[None]
    cos, sin = np.cos(ang), np.sin(ang)

    def rms(v, wt):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * wt

    def rope(v):  # v [n, H, hd], adjacent pairs
        v0, v1 = v[..., 0::2], v[..., 1::2]
        c, s = cos[:, None], sin[:, None]
        o = np.empty_like(v)
        o[..., 0::2] = v0 * c - v1 * s
        o[..., 1::2] = v0 * s + v1 * c
        return o

    mask = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(L):
        b = f"blk.{i}."
        h = rms(x, T(b + "attn_norm.weight"))
        q = rope((h @ T(b + "attn_q.weight").T).reshape(n, nh, hd))
        k = rope((h @ T(b + "attn_k.weight").T).reshape(n, nkv, hd))
        v = (h @ T(b + "attn_v.weight").T).reshape(n, nkv, hd)
        o = np.empty((n, nh, hd))
        for hh in range(nh):
            kh = hh // (nh // nkv)
            s = q[:, hh] @ k[:, kh].T / np.sqrt(hd) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            o[:, hh] = s @ v[:, kh]
        x = x + o.reshape(n, d) @ T(b + "attn_output.weight").T
        h = rms(x, T(b + "ffn_norm.weight"))
        gt = h @ T(b + "ffn_gate.weight").T
        up = h @ T(b + "ffn_up.weight").T
        x = x + (gt / (1 + np.exp(-gt)) * up) @ T(b + "ffn_down.weight").T
    x = rms(x, T("output_norm.weight"))
    return x @ T("output.weight").T


def check(path, model, tok_path):
    r = g.Reader(path)
    tok = Tokenizer(tok_path)
    ex = json.loads(open(os.path.join(REPO, "models", "heldout", "classify.jsonl")).readline())
    ids = tok.prompt_ids(ex["system"], ex["user"])
    ref = np_forward(r, ids)
    with torch.no_grad():
        pt = model(torch.tensor([ids]))[0].double().numpy()
    err = np.abs(ref - pt).max()
    agree = (ref.argmax(-1) == pt.argmax(-1)).mean()
    assert r.kv["tokenizer.ggml.tokens"][tok.im_end] == IM_END
    print(f"check {os.path.basename(path)}: {len(ids)} tokens, max |logit diff| {err:.4f}, "
          f"top-1 agreement {agree:.3f}, tensors {len(r.tensors)}, "
          f"size {os.path.getsize(path)/1e6:.2f} MB")
    return err, agree


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--ckpt-dir", default="/work/ilpd-train")
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "models", "tokenizer.model"))
    ap.add_argument("--out-dir", default=os.path.join(REPO, "models"))
    ap.add_argument("--prefix", default="ilpd-demo")
    ap.add_argument("--types", default="F16,Q8_0")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(2)
    ck_path = a.ckpt or latest_checkpoint(a.ckpt_dir)
    model, ck = load_checkpoint(ck_path)
    model.eval()
    print(f"checkpoint {ck_path}: step {ck['state']['step']} tokens {ck['state']['tokens']}")
    for tname in a.types.split(","):
        path = os.path.join(a.out_dir, f"{a.prefix}-{tname}.gguf")
        export(model, ck, a.tokenizer, path, tname)
        print(f"wrote {path} ({os.path.getsize(path)/1e6:.2f} MB)")
        if a.check:
            check(path, model, a.tokenizer)


if __name__ == "__main__":
    main()
