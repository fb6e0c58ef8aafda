#!/usr/bin/python3
"""Write synthetic GGUF models with random weights: llama, qwen2, qwen3, gemma3, phi3.

llama and qwen2 files carry a SentencePiece-style vocabulary; qwen3 files a
byte-level BPE one (tokenizer.ggml.model gpt2, pre-tokenizer qwen2) with
Qwen's special tokens and a ChatML template with thinking, as llama.cpp's
converter writes a Qwen3 model. qwen3 has per-head Q/K norms
(blk.N.attn_q_norm / attn_k_norm) and a head size of its own (--head-dim,
written as qwen3.attention.key_length / value_length).

gemma3 files are written as llama.cpp's converter writes Gemma 3 (text): Q/K
norms, post_attention_norm and post_ffw_norm, norm weights that already hold
Gemma's 1 + w, a tied head with --tied (Gemma's own files always tie it),
rope base 1e6 for the global layers, and with --window W a sliding window of
W positions on every layer but each --swa-pattern-th (the key is written only
when given; llama.cpp's default is 6); its vocabulary is SentencePiece-style
with Gemma's ids (<pad> 0, <eos> 1, <bos> 2), <unk>, <start_of_turn> and
<end_of_turn> as its last three, no space prefix, and a Gemma chat template.

phi3 files are written as llama.cpp's converter writes Phi-3/3.5 mini: the fused
blk.N.attn_qkv (Q, K, V rows) and blk.N.ffn_up (gate rows, then up rows; no
ffn_gate), a SentencePiece vocabulary with <|endoftext|> as EOS and the
<|system|>, <|user|>, <|assistant|>, <|end|> turn tokens as its last five
(no BOS added), Phi-3's chat template, and with --longrope the LongRoPE
tables rope_factors_short/long.weight with phi3.rope.scaling.attn_factor and
original_context_length (--rope-orig-ctx); with --phi4, Phi-4-mini's byte-level BPE vocabulary
(pre-tokenizer gpt-4o), its turn tokens and template (give --rot for its partial rotary).

A scripted model (script=[(TEXT, NEXT_TEXT), ...], Python only) answers by
rote: its layers add nothing (attn_output and ffn_down are zero) and its
output head makes NEXT_TEXT's token the clear argmax after TEXT's token, so
that greedy decoding follows the script whatever the weight type keeps of
it. The server tests use one to get a known answer through every layer
of the real engine.

Tests of refusals (Python only): extra_kv={KEY: VALUE} adds metadata (float: f32,
int: u32, str: string), drop=(NAME, ...) leaves those tensors out.

The weights are scaled so that activations stay O(1) through many layers and
the logits are spread (std about 2), so greedy decoding is not degenerate.
The same --seed gives the same float weights for every --type, so a quantized
file can be compared against its F32 twin.

CLI:
  /usr/bin/python3 scripts/model/make_synthetic.py -o OUT.gguf --type Q4_K \
      [--arch llama|qwen2|qwen3] [--layers N] [--dim D] [--heads H] [--kv-heads KV] [--head-dim HD]
      [--ffn F] [--vocab V] [--ctx C] [--seed S] [--tied] [--rope-base B]
      [--llama3-rope-scaling] [--rope-scaling linear|llama3|yarn] [--rope-orig-ctx N]
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
                llama3_rope_scaling=False, rope_scaling=None, rope_orig_ctx=None, name=None,
                head_dim=None, script=None, extra_kv=None, drop=(), window=0, swa_pattern=None, longrope=False, rot=None, phi4=False)
ARCHS = ("llama", "qwen2", "qwen3", "gemma3", "phi3")
PHI4_TEMPLATE = ("{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message and "
                 "message['tools'] is not none %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + "
                 "message['tools'] + '<|/tool|>' + '<|end|>' }}{% else %}{{ '<|' + message['role'] + '|>' + "
                 "message['content'] + '<|end|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}"
                 "{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}")
PHI4_SPECIALS = ("<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "<|tool|>", "<|/tool|>")
PHI3_TEMPLATE = ("{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
                 "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}"
                 "{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}"
                 "{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")
GEMMA_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == "
                  "'assistant' else message['role'] %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim "
                  "+ '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}"
                  "{% endif %}")

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


def llama3_rope_factors(head_dim, base, orig_ctx=LLAMA3_ORIGINAL_CTX):
    """Return the [head_dim/2] float32 divisors llama.cpp stores as rope_freqs.weight."""
    freqs = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2.0 * math.pi / freqs
    low_wavelen = orig_ctx / LLAMA3_LOW_FREQ_FACTOR
    high_wavelen = orig_ctx / LLAMA3_HIGH_FREQ_FACTOR
    smooth = ((orig_ctx / wavelen - LLAMA3_LOW_FREQ_FACTOR)
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


def _gpt2_byte_symbols():
    """Return the 256 byte symbols of GPT-2's byte-level alphabet, in GPT-2's id order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = list(bs), 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


# Qwen's added tokens: (text, token type 3 control / 4 user-defined), as its tokenizer.json marks them
QWEN_SPECIALS = (("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<think>", 4),
                 ("</think>", 4), ("<tool_call>", 4), ("</tool_call>", 4))
# The parts of Qwen3's chat template that tell its family (the real one is longer)
QWEN3_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
    "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}")


def bpe_vocab(vocab):
    """Return (tokens, token_types, merges) of a byte-level BPE vocabulary of size vocab.

    Ids: the 256 byte symbols, then merged pieces ("\u0120" is GPT-2's
    space): common words with and without a leading space, built left to
    right so that every merge's parts exist, then letter pairs, until full;
    Qwen's added tokens take the last ids.
    """
    n_special = len(QWEN_SPECIALS)
    if vocab < N_BYTES + n_special + 1:
        raise ValueError("vocab must be at least %d" % (N_BYTES + n_special + 1))
    tokens = _gpt2_byte_symbols()
    seen, merges = set(tokens), []

    def words():
        for w in COMMON_WORDS:
            yield "\u0120" + w
            yield w
        for a, b in itertools.product(string.ascii_lowercase, repeat=2):
            yield "\u0120" + a + b
            yield a + b

    for w in words():
        piece = w[0]
        for c in w[1:]:
            if len(tokens) >= vocab - n_special:
                break
            if piece + c not in seen:
                merges.append(piece + " " + c)
                seen.add(piece + c)
                tokens.append(piece + c)
            piece += c
        if len(tokens) >= vocab - n_special:
            break
    while len(tokens) < vocab - n_special:
        tokens.append("[PAD%d]" % len(tokens))
    types = [1] * len(tokens)
    for text, kind in QWEN_SPECIALS:
        tokens.append(text)
        types.append(kind)
    return tokens, types, merges


def _write_spm_metadata(w, tokens, scores, types, bos, eos, unk, add_bos, template=None, pad=None,
                        space_prefix=None):
    """Add SentencePiece-style tokenizer metadata for the vocabulary given; returns the token texts."""
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", tokens, "str")
    w.add_array("tokenizer.ggml.scores", scores, "f32")
    w.add_array("tokenizer.ggml.token_type", types, "i32")
    w.add_u32("tokenizer.ggml.bos_token_id", bos)
    w.add_u32("tokenizer.ggml.eos_token_id", eos)
    w.add_u32("tokenizer.ggml.unknown_token_id", unk)
    if pad is not None:
        w.add_u32("tokenizer.ggml.padding_token_id", pad)
    w.add_bool("tokenizer.ggml.add_bos_token", add_bos)
    w.add_bool("tokenizer.ggml.add_eos_token", False)
    if space_prefix is not None:
        w.add_bool("tokenizer.ggml.add_space_prefix", space_prefix)
    if template:
        w.add_string("tokenizer.chat_template", template)
    return tokens


def _write_spm_tokenizer(w, vocab):
    """Add the SentencePiece-style tokenizer metadata (llama, qwen2 files); returns the token texts."""
    tokens, scores, types = spm_vocab(vocab)
    return _write_spm_metadata(w, tokens, scores, types, bos=1, eos=2, unk=0, add_bos=True)


def _write_gemma_tokenizer(w, vocab):
    """Add Gemma's SentencePiece metadata (gemma3 files): the llama-style vocabulary with Gemma's special
    ids and turn tokens, BOS added, no space prefix; returns the token texts."""
    tokens, scores, types = spm_vocab(vocab)
    tokens[:3], types[:3] = ["<pad>", "<eos>", "<bos>"], [3, 3, 3]
    tokens[-3:], types[-3:], scores[-3:] = ["<unk>", "<start_of_turn>", "<end_of_turn>"], [2, 3, 3], [0.0] * 3
    return _write_spm_metadata(w, tokens, scores, types, bos=2, eos=1, unk=len(tokens) - 3, add_bos=True,
                               template=GEMMA_TEMPLATE, pad=0, space_prefix=False)


def _write_phi3_tokenizer(w, vocab):
    """Add Phi-3's SentencePiece metadata (phi3 files): the llama-style vocabulary with <|endoftext|> as
    EOS and the turn tokens as its last five, BOS not added; returns the token texts."""
    tokens, scores, types = spm_vocab(vocab)
    extra = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
    tokens[-5:], types[-5:], scores[-5:] = extra, [3] * 5, [0.0] * 5
    return _write_spm_metadata(w, tokens, scores, types, bos=1, eos=tokens.index("<|endoftext|>"), unk=0,
                               add_bos=False, template=PHI3_TEMPLATE)


def _write_phi4_tokenizer(w, vocab):
    """Add Phi-4-mini's tokenizer metadata (phi3 files with phi4=True): byte-level BPE with the gpt-4o
    pre-tokenizer, <|endoftext|> as BOS and EOS (not added), its turn tokens as the last seven, its
    template; returns the token texts."""
    tokens, types, merges = bpe_vocab(vocab)
    tokens[-len(PHI4_SPECIALS):], types[-len(PHI4_SPECIALS):] = list(PHI4_SPECIALS), [3] * len(PHI4_SPECIALS)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "gpt-4o")
    w.add_array("tokenizer.ggml.tokens", tokens, "str")
    w.add_array("tokenizer.ggml.token_type", types, "i32")
    w.add_array("tokenizer.ggml.merges", merges, "str")
    w.add_u32("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"))
    w.add_u32("tokenizer.ggml.eos_token_id", tokens.index("<|endoftext|>"))
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_string("tokenizer.chat_template", PHI4_TEMPLATE)
    return tokens


def _write_qwen_tokenizer(w, vocab):
    """Add Qwen's byte-level BPE tokenizer metadata as llama.cpp's converter writes it (qwen3 files):
    BOS = padding = <|endoftext|> (not added), EOS = <|im_end|>, the ChatML template with thinking;
    returns the token texts."""
    tokens, types, merges = bpe_vocab(vocab)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2")
    w.add_array("tokenizer.ggml.tokens", tokens, "str")
    w.add_array("tokenizer.ggml.token_type", types, "i32")
    w.add_array("tokenizer.ggml.merges", merges, "str")
    w.add_u32("tokenizer.ggml.eos_token_id", tokens.index("<|im_end|>"))
    w.add_u32("tokenizer.ggml.padding_token_id", tokens.index("<|endoftext|>"))
    w.add_u32("tokenizer.ggml.bos_token_id", tokens.index("<|endoftext|>"))
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_string("tokenizer.chat_template", QWEN3_TEMPLATE)
    return tokens


def _check_shape(s):
    """Raise ValueError if the shape parameters in dict s are inconsistent."""
    if s["arch"] not in ARCHS:
        raise ValueError("arch must be one of %s" % ", ".join(ARCHS))
    if s["head_dim"] is None and s["dim"] % s["heads"]:
        raise ValueError("dim must be a multiple of heads (or give head_dim)")
    if s["head_dim"] is not None and s["arch"] not in ("qwen3", "gemma3"):
        raise ValueError("head_dim other than dim / heads is for qwen3 and gemma3 only")
    if (s["window"] or s["swa_pattern"] is not None) and s["arch"] != "gemma3":
        raise ValueError("a sliding window is for gemma3 only")
    if (s["longrope"] or s["phi4"]) and s["arch"] != "phi3":
        raise ValueError("LongRoPE and phi4 are for phi3 only")
    if s["heads"] % s["kv_heads"]:
        raise ValueError("heads must be a multiple of kv-heads")
    if (s["head_dim"] or s["dim"] // s["heads"]) % 2:
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
        s["rope_base"] = 1000000.0 if arch in ("qwen2", "qwen3", "gemma3") else 10000.0
    dim, n_layer, ffn, vocab = s["dim"], s["layers"], s["ffn"], s["vocab"]
    head_dim = s["head_dim"] or dim // s["heads"]
    q_dim = head_dim * s["heads"]
    kv_dim = head_dim * s["kv_heads"]
    eps = 1e-6 if arch in ("qwen2", "qwen3", "gemma3") else 1e-5
    orig_ctx = s["rope_orig_ctx"] or LLAMA3_ORIGINAL_CTX  # llama3 scaling's original context

    w = gguf.Writer(path)
    w.add_string("general.architecture", arch)
    # llama.cpp treats files named phi-3/phi3 as Phi-3 (rstrip on its special tokens); Phi-4-mini's are not
    w.add_string("general.name", s["name"] or "synthetic-%s-%s" % ("phi4-mini" if s["phi4"] else arch,
                                                                   gguf.TYPE_NAMES[wtype]))
    w.add_u32(arch + ".block_count", n_layer)
    w.add_u32(arch + ".context_length", s["ctx"])
    w.add_u32(arch + ".embedding_length", dim)
    w.add_u32(arch + ".feed_forward_length", ffn)
    w.add_u32(arch + ".attention.head_count", s["heads"])
    w.add_u32(arch + ".attention.head_count_kv", s["kv_heads"])
    w.add_f32(arch + ".rope.freq_base", s["rope_base"])
    w.add_f32(arch + ".attention.layer_norm_rms_epsilon", eps)
    rot = s["rot"] or head_dim  # rotated dimensions of a head: fewer is partial rotary (Phi-4-mini: 3/4)
    if rot % 2 or rot > head_dim:
        raise ValueError("rot must be even and at most the head size")
    w.add_u32(arch + ".rope.dimension_count", rot)
    if s["rope_scaling"] in ("linear", "llama3", "yarn"):
        # the keys alone (llama.cpp's converter writes rope_freqs.weight for llama3 instead)
        w.add_string(arch + ".rope.scaling.type", s["rope_scaling"])
        w.add_f32(arch + ".rope.scaling.factor", LLAMA3_FACTOR if s["rope_scaling"] == "llama3" else 4.0)
        if s["rope_scaling"] == "yarn":  # as llama.cpp's converter writes a Qwen rope_scaling of type yarn
            w.add_u32(arch + ".rope.scaling.original_context_length", orig_ctx)
        if s["rope_scaling"] == "llama3":
            w.add_f32(arch + ".rope.scaling.low_freq_factor", LLAMA3_LOW_FREQ_FACTOR)
            w.add_f32(arch + ".rope.scaling.high_freq_factor", LLAMA3_HIGH_FREQ_FACTOR)
            w.add_u32(arch + ".rope.scaling.original_context_length", orig_ctx)
    elif s["rope_scaling"] is not None:
        raise ValueError("rope_scaling must be linear, llama3 or yarn")
    if arch in ("qwen3", "gemma3"):
        w.add_u32(arch + ".attention.key_length", head_dim)
        w.add_u32(arch + ".attention.value_length", head_dim)
    if s["window"]:
        w.add_u32(arch + ".attention.sliding_window", s["window"])
    if s["swa_pattern"] is not None:
        w.add_u32(arch + ".attention.sliding_window_pattern", s["swa_pattern"])
    w.add_u32("general.file_type", gguf.FILE_TYPE[wtype])
    for key, value in (s["extra_kv"] or {}).items():
        {float: w.add_f32, int: w.add_u32, str: w.add_string}[type(value)](key, value)
    if s["longrope"]:  # as the converter writes Phi-3 mini 128k: the attention factor of its scale
        scale = s["ctx"] / orig_ctx
        w.add_f32(arch + ".rope.scaling.attn_factor", math.sqrt(1 + math.log(scale) / math.log(orig_ctx)))
        w.add_u32(arch + ".rope.scaling.original_context_length", orig_ctx)
    tokens = {"qwen3": _write_qwen_tokenizer, "gemma3": _write_gemma_tokenizer,
              "phi3": _write_phi4_tokenizer if s["phi4"] else _write_phi3_tokenizer}.get(arch, _write_spm_tokenizer)(w, vocab)
    script = [(tokens.index(a), tokens.index(b)) for a, b in s["script"] or ()]
    if script and s["tied"]:
        raise ValueError("a scripted model needs its own output head (not tied)")

    rng = np.random.default_rng(s["seed"])

    def put(name, a, t):
        """Add a tensor unless the caller drops it."""
        if name not in s["drop"]:
            w.add_tensor(name, a, t)

    fallbacks = []       # weights written as F16 because rows do not fill whole blocks
    branch_scale = 1.0 / math.sqrt(2.0 * n_layer)

    def matrix(name, rows, cols, scale, edit=None, parts=None):
        """Add a random [rows, cols] weight in the requested type (F16 fallback), changed by edit(a)
        first when given; returns the float weights. parts=[(rows, scale), ...]: a fused weight, the
        parts' rows one after the other (rows and scale unused)."""
        if parts:
            a = np.concatenate([rng.standard_normal((r, cols), dtype=np.float32) * np.float32(sc) for r, sc in parts])
        else:
            a = rng.standard_normal((rows, cols), dtype=np.float32)
            a *= np.float32(scale)
        if edit:
            edit(a)
        t = wtype
        block = gguf.BLOCK_LAYOUT[t][0]
        if cols % block:
            fallbacks.append("%s (row %d)" % (name, cols))
            t = gguf.F16
        put(name, a, t)
        return a

    def scripted_head(out):
        """Make the script's next token the clear argmax after each of its tokens: the layers add
        nothing, so the final hidden state is rmsnorm(embedding) (norm sqrt(dim))."""
        for a, b in script:
            out[b] += np.float32(4.0) * embd[a] / np.linalg.norm(embd[a])

    def silent(a):
        """Zero a scripted model's branch outputs."""
        if script:
            a[:] = 0

    def norm(name, n):
        """Add an F32 norm weight close to 1."""
        put(name, 1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32), gguf.F32)

    def bias(name, n):
        """Add a small F32 bias."""
        put(name, 0.2 * rng.standard_normal(n, dtype=np.float32), gguf.F32)

    # logits = rmsnorm(x) . W_out with W_out ~ N(0, (2/sqrt(dim))^2): std about 2
    out_scale = 2.0 / math.sqrt(dim)
    # gemma3 multiplies the embedding by sqrt(dim): an untied file's is scaled down by as much, so that the
    # residual stream starts at std 1 as in the other families
    embd = matrix("token_embd.weight", vocab, dim,
                  out_scale if s["tied"] else 1.0 / math.sqrt(dim) if arch == "gemma3" else 1.0)
    norm("output_norm.weight", dim)
    if not s["tied"]:
        matrix("output.weight", vocab, dim, out_scale, scripted_head if script else None)
    if s["llama3_rope_scaling"]:
        put("rope_freqs.weight", llama3_rope_factors(rot, s["rope_base"], orig_ctx), gguf.F32)
    if s["longrope"]:  # Phi-3's tables: short factors near 1, long ones growing to ~ctx/orig for slow pairs
        ramp = np.linspace(0.0, 1.0, rot // 2, dtype=np.float32)
        put("rope_factors_short.weight", (1.0 + 0.05 * ramp).astype(np.float32), gguf.F32)
        put("rope_factors_long.weight", (1.0 + (s["ctx"] / orig_ctx - 1.0) * ramp ** 2).astype(np.float32), gguf.F32)
    for i in range(n_layer):
        p = "blk.%d." % i
        norm(p + "attn_norm.weight", dim)
        if arch == "phi3":
            matrix(p + "attn_qkv.weight", 0, dim, 0,
                   parts=[(q_dim, 1.0 / math.sqrt(dim)), (kv_dim, 1.0 / math.sqrt(dim)), (kv_dim, 1.0 / math.sqrt(dim))])
        else:
            matrix(p + "attn_q.weight", q_dim, dim, 1.0 / math.sqrt(dim))
            matrix(p + "attn_k.weight", kv_dim, dim, 1.0 / math.sqrt(dim))
            matrix(p + "attn_v.weight", kv_dim, dim, 1.0 / math.sqrt(dim))
        if arch == "qwen2":
            bias(p + "attn_q.bias", q_dim)
            bias(p + "attn_k.bias", kv_dim)
            bias(p + "attn_v.bias", kv_dim)
        if arch in ("qwen3", "gemma3"):
            norm(p + "attn_q_norm.weight", head_dim)
            norm(p + "attn_k_norm.weight", head_dim)
        matrix(p + "attn_output.weight", dim, q_dim, branch_scale / math.sqrt(q_dim), silent)
        if arch == "gemma3":  # the post-norm brings the branch back to O(1); scaled like the others
            put(p + "post_attention_norm.weight", branch_scale * (1.0 + 0.1 * rng.standard_normal(dim, dtype=np.float32)), gguf.F32)
        norm(p + "ffn_norm.weight", dim)
        if arch == "phi3":
            matrix(p + "ffn_up.weight", 0, dim, 0, parts=[(ffn, 1.0 / math.sqrt(dim)), (ffn, 1.0 / math.sqrt(dim))])
        else:
            matrix(p + "ffn_gate.weight", ffn, dim, 1.0 / math.sqrt(dim))
            matrix(p + "ffn_up.weight", ffn, dim, 1.0 / math.sqrt(dim))
        matrix(p + "ffn_down.weight", dim, ffn, 2.0 * branch_scale / math.sqrt(ffn), silent)
        if arch == "gemma3":
            put(p + "post_ffw_norm.weight", branch_scale * (1.0 + 0.1 * rng.standard_normal(dim, dtype=np.float32)), gguf.F32)
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
    ap.add_argument("--arch", default="llama", choices=list(ARCHS))
    ap.add_argument("--layers", type=int, default=DEFAULTS["layers"])
    ap.add_argument("--dim", type=int, default=DEFAULTS["dim"])
    ap.add_argument("--heads", type=int, default=DEFAULTS["heads"])
    ap.add_argument("--kv-heads", type=int, default=DEFAULTS["kv_heads"])
    ap.add_argument("--ffn", type=int, default=DEFAULTS["ffn"])
    ap.add_argument("--head-dim", type=int, default=None, help="qwen3, gemma3: head size (default dim / heads)")
    ap.add_argument("--phi4", action="store_true", help="phi3: Phi-4-mini's vocabulary and template")
    ap.add_argument("--rot", type=int, default=None, help="rotated dimensions per head (default: the head size)")
    ap.add_argument("--longrope", action="store_true", help="phi3: LongRoPE factor tables (see --rope-orig-ctx)")
    ap.add_argument("--window", type=int, default=0, help="gemma3: sliding window of the local layers (0: none)")
    ap.add_argument("--swa-pattern", type=int, default=None, help="gemma3: every this-many-th layer is global")
    ap.add_argument("--vocab", type=int, default=DEFAULTS["vocab"])
    ap.add_argument("--ctx", type=int, default=DEFAULTS["ctx"])
    ap.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    ap.add_argument("--tied", action="store_true", help="no output.weight; the head reuses token_embd")
    ap.add_argument("--rope-base", type=float, default=None,
                    help="default 10000 (llama) or 1e6 (qwen2)")
    ap.add_argument("--llama3-rope-scaling", action="store_true",
                    help="add rope_freqs.weight (Llama 3.1 factors: 8, 1, 4, 8192)")
    ap.add_argument("--rope-scaling", choices=["linear", "llama3", "yarn"], default=None,
                    help="write rope.scaling.* keys (linear: factor 4; llama3: 8, 1, 4, 8192; yarn: 4, 8192)")
    ap.add_argument("--rope-orig-ctx", type=int, default=None,
                    help="llama3/yarn scaling's original context (default 8192)")
    ap.add_argument("--name", default=None, help="general.name")
    a = ap.parse_args(argv)
    t0 = time.time()
    try:
        s = make_model(a.output, type=a.type, arch=a.arch, layers=a.layers, dim=a.dim,
                       heads=a.heads, kv_heads=a.kv_heads, ffn=a.ffn, vocab=a.vocab,
                       ctx=a.ctx, seed=a.seed, tied=a.tied, rope_base=a.rope_base,
                       llama3_rope_scaling=a.llama3_rope_scaling, name=a.name, head_dim=a.head_dim,
                       rope_scaling=a.rope_scaling, rope_orig_ctx=a.rope_orig_ctx, window=a.window,
                       swa_pattern=a.swa_pattern, longrope=a.longrope, rot=a.rot, phi4=a.phi4)
    except ValueError as e:
        print("make_synthetic: %s" % e, file=sys.stderr)
        return 1
    print("make_synthetic: wrote %s (%s %s, %d layers, dim %d, %.1f MB) in %.1fs"
          % (a.output, s["arch"], a.type, s["layers"], s["dim"],
             os.path.getsize(a.output) / 1e6, time.time() - t0), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
