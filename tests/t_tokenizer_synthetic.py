#!/usr/bin/python3
"""The tokenizers of the families without a real vocabulary here, against llama.cpp's ids.

No real Qwen or Gemma vocabulary is available offline, so each vocabulary is the synthetic one
that scripts/model/make_synthetic.py writes into that family's files (deterministic):
- qwen3: byte-level BPE with the qwen2 pre-tokenizer (2048 tokens: GPT-2's byte symbols, merges
  for common words and letter pairs, Qwen's added tokens). tests/data/tokenizer/qwen3-synthetic.inp
  holds texts that exercise the pre-tokenizer (contractions in any case, digits one by one,
  punctuation runs, newlines and spaces, non-ASCII letters, CJK, emoji, special-token texts as
  plain text).
- gemma3: SentencePiece without the space prefix (tokenizer.ggml.add_space_prefix false), byte
  fallback, Gemma's special ids and turn tokens. gemma3-synthetic.inp: leading, repeated and
  trailing spaces, newlines and tabs, byte-fallback characters, the turn tokens' texts as plain
  text, a literal U+2581.
- phi4 (phi3 files with Phi-4-mini's vocabulary): byte-level BPE with the gpt-4o pre-tokenizer, in
  the form llama.cpp runs it; phi4-synthetic.inp holds qwen3's texts and a few of mixed case.
- phi3: Llama 2's SentencePiece (space prefix, byte fallback; the real Llama 2 vocabulary has its
  own vectors) with Phi-3's added turn tokens, whose texts stay plain text here.
Each NAME-synthetic.out holds the ids llama.cpp's llama-tokenize gave for each text (--no-bos
--no-parse-special). The unit program test_tokenizer_vectors checks ilpd's tokenizer against them.
With LLAMA_TOKENIZE set to a llama-tokenize binary, the .out files are also checked to be what that
binary gives now. Environment: UNIT_DIR, LLAMA_TOKENIZE, TESTS_TMP.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "model"))
import make_synthetic  # noqa: E402

SEP = "\n__ggml_vocab_test__\n"
# (vectors' name, arch, vocabulary size, name in messages, make_synthetic keywords)
FAMILIES = [("qwen3", "qwen3", 2048, "Qwen", {}), ("gemma3", "gemma3", 1024, "Gemma", {}),
            ("phi3", "phi3", 1024, "Phi-3", {}), ("phi4", "phi3", 2048, "Phi-4-mini (gpt-4o)", {"phi4": True})]


def llama_ids(tokenize, vocab, text):
    p = subprocess.run([tokenize, "-m", vocab, "--stdin", "--ids", "--no-bos", "--no-parse-special", "--log-disable"],
                       input=text.encode(), capture_output=True, timeout=60, check=True)
    return " ".join(t.strip() for t in p.stdout.decode().strip().strip("[]").split(",") if t.strip())


def check_family(prog, tag, arch, n_vocab, name, extra):
    """Checks one family's vectors; returns the number of failures."""
    prefix = os.path.join(HERE, "data", "tokenizer", tag + "-synthetic")
    vocab = os.path.join(os.environ.get("TESTS_TMP", "/tmp"), tag + "-vocab.gguf")
    make_synthetic.make_model(vocab, arch=arch, type="F16", layers=1, dim=32, heads=2, kv_heads=1, ffn=32,
                              vocab=n_vocab, **extra)
    failed = 0
    tokenize = os.environ.get("LLAMA_TOKENIZE", "")
    if tokenize and os.access(tokenize, os.X_OK):
        texts = open(prefix + ".inp", encoding="utf-8", newline="").read().split(SEP)
        live = "\n".join(llama_ids(tokenize, vocab, t) for t in texts[:-1]) + "\n"
        ok = live == open(prefix + ".out", encoding="utf-8").read()
        failed += not ok
        print("%s - %s tokenizer vectors: tests/data/tokenizer/%s-synthetic.out is what llama-tokenize gives "
              "(%d texts)" % ("ok" if ok else "not ok", name, tag, len(texts) - 1))
    else:
        print("skip - %s tokenizer vectors against a live llama-tokenize: set LLAMA_TOKENIZE" % name)
    p = subprocess.run([prog], env=dict(os.environ, VOCAB=vocab, VECTORS=prefix), capture_output=True, text=True)
    sys.stdout.write(p.stdout)
    os.remove(vocab)
    return failed + (p.returncode != 0)


def main():
    prog = os.path.join(os.environ.get("UNIT_DIR", os.path.join(HERE, "..", "build", "rel", "tests")),
                        "test_tokenizer_vectors")
    if not os.access(prog, os.X_OK):
        print("not ok - tokenizer vectors: %s is not built" % prog)
        return 1
    return 1 if sum(check_family(prog, *f) for f in FAMILIES) else 0


if __name__ == "__main__":
    sys.exit(main())
