#!/usr/bin/python3
"""Rebuild a PyTorch checkpoint from an exported demo GGUF (the inverse of export.py).

  /usr/bin/python3 scripts/model/train/ckpt_from_gguf.py [--gguf models/ilpd-demo-F16.gguf]
      [--out PATH | --out-dir /work/ilpd-train/from-gguf] [--check]

The training checkpoint of the published demo model was lost; only the GGUF
exports remain.  This reads the GGUF with scripts/model/ilpd_gguf.py, maps every
tensor back to its model.Llama state_dict name (inverse of export.tensor_map),
takes model.Config from the llama.* metadata and the step/token counts from
ilpd.train.*, and writes {"config", "model", "state", "source"} in the format
model.load_checkpoint() reads, so eval.py, redundancy.py, gen.py, golden.py
and export.py work on it (pass --ckpt PATH).  There is no optimizer state:
train.py cannot resume from it, so keep it out of a training --ckpt-dir.

The weights are exactly the GGUF's values: from the F16 file, the 2-D weights
are F16-rounded (norms are F32 there, so exact).  Default output:
<out-dir>/ckpt_<steps>.pt.

--check: (1) export.py's export() on the rebuilt model into a temporary
directory must reproduce the source GGUF byte for byte (metadata and tensors);
(2) the PyTorch greedy ids (fp32, KV cache, as golden.py) must equal
models/demo.golden.json's greedy_ids for every prompt.
"""
import argparse
import filecmp
import json
import os
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "scripts", "model"))
import ilpd_gguf as g  # noqa: E402
from model import Config, Llama  # noqa: E402

# GGUF tensor name suffix -> model.Llama state_dict suffix (export.tensor_map reversed)
BLOCK_MAP = {"attn_norm.weight": "attn_norm.weight", "attn_q.weight": "wq.weight",
             "attn_k.weight": "wk.weight", "attn_v.weight": "wv.weight",
             "attn_output.weight": "wo.weight", "ffn_norm.weight": "ffn_norm.weight",
             "ffn_gate.weight": "w1.weight", "ffn_up.weight": "w3.weight",
             "ffn_down.weight": "w2.weight"}
TOP_MAP = {"token_embd.weight": "tok_emb.weight", "output_norm.weight": "norm.weight",
           "output.weight": "output.weight"}


def config_from_kv(kv):
    if kv.get("general.architecture") != "llama":
        raise SystemExit("not a llama GGUF: %r" % kv.get("general.architecture"))
    c = Config(vocab_size=int(kv["llama.vocab_size"]),
               dim=int(kv["llama.embedding_length"]),
               n_layers=int(kv["llama.block_count"]),
               n_heads=int(kv["llama.attention.head_count"]),
               n_kv_heads=int(kv["llama.attention.head_count_kv"]),
               ffn_dim=int(kv["llama.feed_forward_length"]),
               max_seq_len=int(kv["llama.context_length"]),
               # stored as f32 (1e-5 reads back as 9.9999997e-06); export.py writes the
               # Python float as f32 again, so the shortest decimal round-trips exactly
               rope_theta=float("%.7g" % kv["llama.rope.freq_base"]),
               norm_eps=float("%.7g" % kv["llama.attention.layer_norm_rms_epsilon"]))
    assert np.float32(c.norm_eps) == np.float32(kv["llama.attention.layer_norm_rms_epsilon"])
    assert np.float32(c.rope_theta) == np.float32(kv["llama.rope.freq_base"])
    assert kv.get("llama.rope.dimension_count", c.dim // c.n_heads) == c.dim // c.n_heads
    assert len(kv["tokenizer.ggml.tokens"]) == c.vocab_size
    return c


def state_dict_from_gguf(r, c):
    sd = {}
    for name, (gtype, ne, _) in r.tensors.items():
        if name in TOP_MAP:
            key = TOP_MAP[name]
        else:
            parts = name.split(".", 2)
            if parts[0] != "blk" or parts[2] not in BLOCK_MAP:
                raise SystemExit("unexpected tensor %s" % name)
            key = "layers.%s.%s" % (parts[1], BLOCK_MAP[parts[2]])
        if gtype not in (g.F32, g.F16):
            print("warning: %s is %s; the checkpoint gets its dequantized values"
                  % (name, g.TYPE_NAMES[gtype]), file=sys.stderr)
        sd[key] = torch.from_numpy(np.ascontiguousarray(r.tensor(name), dtype=np.float32))
    ref = Llama(c).state_dict()
    missing, extra = set(ref) - set(sd), set(sd) - set(ref)
    if missing or extra:
        raise SystemExit("tensor set differs from model.Llama: missing %s, extra %s"
                         % (sorted(missing)[:5], sorted(extra)[:5]))
    for k, v in ref.items():
        if tuple(v.shape) != tuple(sd[k].shape):
            raise SystemExit("%s: shape %s in GGUF, %s in model" % (k, tuple(sd[k].shape), tuple(v.shape)))
    return {k: sd[k] for k in ref}   # model order


def check(ckpt_path, gguf_path, golden_path):
    import export
    from chat import Tokenizer
    from gen import greedy_cached, load_model
    torch.set_num_threads(2)
    model, ck, _ = load_model(ckpt_path)
    src = g.Reader(gguf_path)
    tname = {1: "F16", 7: "Q8_0", 0: "F32"}[src.kv["general.file_type"]]
    ok = True
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "re-export-%s.gguf" % tname)
        export.export(model, ck, os.path.join(REPO, "models", "tokenizer.model"), out, tname)
        r = g.Reader(out)
        same_kv = r.kv == src.kv
        bad = [n for n in src.tensors
               if n not in r.tensors or r.raw(n)[:2] != src.raw(n)[:2]
               or bytes(r.raw(n)[2]) != bytes(src.raw(n)[2])]
        same_file = filecmp.cmp(out, gguf_path, shallow=False)
        print("round trip %s: metadata %s, %d/%d tensors byte-identical, whole file %s"
              % (tname, "identical" if same_kv else "DIFFERS", len(src.tensors) - len(bad),
                 len(src.tensors), "identical" if same_file else "DIFFERS"))
        ok &= same_kv and not bad and len(r.tensors) == len(src.tensors)
    if golden_path and os.path.exists(golden_path):
        tok = Tokenizer(os.path.join(REPO, "models", "tokenizer.model"))
        golden = json.load(open(golden_path))
        for n, gr in enumerate(golden):
            out, margins = greedy_cached(model, gr["prompt_ids"], len(gr["greedy_ids"]))
            diff = [i for i, (a, b) in enumerate(zip(out, gr["greedy_ids"])) if a != b]
            same = out == gr["greedy_ids"]
            ok &= same
            print("golden %d (%s): %d greedy ids %s%s" % (
                n, gr["task"], len(out), "equal" if same else "DIFFER at %s" % diff[:5],
                "" if same else " (golden margins there %s)" % [gr["margins"][i] for i in diff[:5]]))
            if n == 0:
                print("  text: %r" % tok.decode(out[:gr["eot_index"]] if gr["eot_index"] >= 0 else out)[:100])
    print("check", "OK" if ok else "FAILED")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=os.path.join(REPO, "models", "ilpd-demo-F16.gguf"))
    ap.add_argument("--out", default=None, help="checkpoint path (default OUT_DIR/ckpt_<steps>.pt)")
    ap.add_argument("--out-dir", default="/work/ilpd-train/from-gguf")
    ap.add_argument("--golden", default=os.path.join(REPO, "models", "demo.golden.json"))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    r = g.Reader(a.gguf)
    c = config_from_kv(r.kv)
    sd = state_dict_from_gguf(r, c)
    m = Llama(c)
    m.load_state_dict(sd)   # strict: same names and shapes
    steps = int(r.kv.get("ilpd.train.steps", 0))
    tokens = int(r.kv.get("ilpd.train.tokens", "0"))
    out = a.out or os.path.join(a.out_dir, "ckpt_%07d.pt" % steps)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    ck = {"config": c.to_dict(), "model": m.state_dict(),
          "state": {"step": steps, "tokens": tokens},
          "source": {"gguf": os.path.abspath(a.gguf),
                     "types": sorted({g.TYPE_NAMES[t] for t, _, _ in r.tensors.values()}),
                     "note": "rebuilt from a GGUF export by ckpt_from_gguf.py; no optimizer state"}}
    tmp = out + ".tmp"
    torch.save(ck, tmp)
    os.replace(tmp, out)
    print("wrote %s: %s, step %d, %d tokens, %d tensors, %.2f M parameters"
          % (out, c.to_dict(), steps, tokens, len(sd), sum(v.numel() for v in sd.values()) / 1e6))
    if a.check and not check(out, a.gguf, a.golden):
        sys.exit(1)


if __name__ == "__main__":
    main()
