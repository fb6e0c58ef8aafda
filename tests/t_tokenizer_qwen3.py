#!/usr/bin/python3
"""Qwen's tokenizer (byte-level BPE, the qwen2 pre-tokenizer) against llama.cpp's ids.

No real Qwen vocabulary is available offline, so the vocabulary is the synthetic one that
scripts/model/make_synthetic.py writes into qwen3 files (2048 tokens: GPT-2's byte symbols, merges
for common words and letter pairs, Qwen's added tokens; deterministic). tests/data/tokenizer/
qwen3-synthetic.inp holds texts that exercise the pre-tokenizer (contractions in any case, digits
one by one, punctuation runs, newlines and spaces, non-ASCII letters, CJK, emoji, special-token
texts as plain text); qwen3-synthetic.out holds the ids llama.cpp's llama-tokenize gave for each
(--no-bos --no-parse-special). The unit program test_tokenizer_vectors checks ilpd's tokenizer
against them. With LLAMA_TOKENIZE set to a llama-tokenize binary, the .out file is also checked
to be what that binary gives now. Environment: UNIT_DIR, LLAMA_TOKENIZE, TESTS_TMP.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "model"))
import make_synthetic  # noqa: E402

PREFIX = os.path.join(HERE, "data", "tokenizer", "qwen3-synthetic")
SEP = "\n__ggml_vocab_test__\n"


def llama_ids(tokenize, vocab, text):
    p = subprocess.run([tokenize, "-m", vocab, "--stdin", "--ids", "--no-bos", "--no-parse-special", "--log-disable"],
                       input=text.encode(), capture_output=True, timeout=60, check=True)
    return " ".join(t.strip() for t in p.stdout.decode().strip().strip("[]").split(",") if t.strip())


def main():
    prog = os.path.join(os.environ.get("UNIT_DIR", os.path.join(HERE, "..", "build", "rel", "tests")),
                        "test_tokenizer_vectors")
    if not os.access(prog, os.X_OK):
        print("not ok - Qwen tokenizer vectors: %s is not built" % prog)
        return 1
    vocab = os.path.join(os.environ.get("TESTS_TMP", "/tmp"), "qwen3-vocab.gguf")
    make_synthetic.make_model(vocab, arch="qwen3", type="F16", layers=1, dim=32, heads=2, kv_heads=1, ffn=32,
                              vocab=2048)
    failed = 0
    tokenize = os.environ.get("LLAMA_TOKENIZE", "")
    if tokenize and os.access(tokenize, os.X_OK):
        texts = open(PREFIX + ".inp", encoding="utf-8", newline="").read().split(SEP)
        live = "\n".join(llama_ids(tokenize, vocab, t) for t in texts[:-1]) + "\n"
        ok = live == open(PREFIX + ".out", encoding="utf-8").read()
        failed += not ok
        print("%s - Qwen tokenizer vectors: tests/data/tokenizer/qwen3-synthetic.out is what llama-tokenize gives "
              "(%d texts)" % ("ok" if ok else "not ok", len(texts) - 1))
    else:
        print("skip - Qwen tokenizer vectors against a live llama-tokenize: set LLAMA_TOKENIZE")
    p = subprocess.run([prog], env=dict(os.environ, VOCAB=vocab, VECTORS=PREFIX), capture_output=True, text=True)
    sys.stdout.write(p.stdout)
    os.remove(vocab)
    return 1 if failed or p.returncode else 0


if __name__ == "__main__":
    sys.exit(main())
