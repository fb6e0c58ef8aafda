#!/usr/bin/python3
"""Convert a Hugging Face byte-level BPE tokenizer.json into a vocab-only GGUF.

The output has 0 tensors and the tokenizer metadata llama.cpp writes for
gpt2-style BPE models:
  general.architecture=llama, tokenizer.ggml.model=gpt2, tokenizer.ggml.pre,
  tokenizer.ggml.tokens (byte-level unicode strings, ordered by id, added
  tokens at their ids, gaps filled with "[PAD<id>]"), tokenizer.ggml.token_type
  (1 normal, 3 control = special added token, 4 user-defined = non-special
  added token or gap filler), tokenizer.ggml.merges ("a b"),
  bos/eos(/padding) token ids, add_bos_token, tokenizer.chat_template.

Usage:
  /usr/bin/python3 scripts/model/tokenizer_to_gguf.py tokenizer.json \
      [--config tokenizer_config.json] [--pre llama-bpe] \
      [--add-bos true|false] [--name NAME] -o vocab.gguf
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ilpd_gguf as gguf  # noqa: E402

TOKEN_NORMAL = 1
TOKEN_CONTROL = 3
TOKEN_USER_DEFINED = 4

# pre-tokenizer split regexes -> llama.cpp tokenizer.ggml.pre names
KNOWN_PRE = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": "llama-bpe",
}


def split_regexes(pre_tokenizer):
    """Return the Split regex patterns found in a tokenizer.json pre_tokenizer (possibly nested)."""
    if not pre_tokenizer:
        return []
    if pre_tokenizer.get("type") == "Sequence":
        return [r for p in pre_tokenizer.get("pretokenizers", []) for r in split_regexes(p)]
    if pre_tokenizer.get("type") == "Split":
        pattern = pre_tokenizer.get("pattern", {})
        return [pattern["Regex"]] if "Regex" in pattern else []
    return []


def detect_pre(tok):
    """Return the llama.cpp pre-tokenizer name for tok's regex, or None if unknown."""
    names = {KNOWN_PRE.get(r) for r in split_regexes(tok.get("pre_tokenizer"))}
    names.discard(None)
    return names.pop() if len(names) == 1 else None


def build_vocab(tok):
    """Return (tokens, token_types) ordered by id from tokenizer.json's model vocab and added tokens."""
    by_id = {i: (t, TOKEN_NORMAL) for t, i in tok["model"]["vocab"].items()}
    for added in tok.get("added_tokens", []):
        kind = TOKEN_CONTROL if added.get("special") else TOKEN_USER_DEFINED
        by_id[added["id"]] = (added["content"], kind)
    n = max(by_id) + 1
    tokens, types = [], []
    for i in range(n):
        t, kind = by_id.get(i, ("[PAD%d]" % i, TOKEN_USER_DEFINED))
        tokens.append(t)
        types.append(kind)
    return tokens, types


def merge_strings(merges):
    """Return merges as "a b" strings; tokenizer.json stores them as strings or 2-element lists."""
    return [m if isinstance(m, str) else " ".join(m) for m in merges]


def token_content(value):
    """Return the text of a tokenizer_config token entry (a string or {"content": ...}), or None."""
    return value["content"] if isinstance(value, dict) else value


def token_id(content, tokens):
    """Return the id of token text content in tokens, or None when content is None."""
    if content is None:
        return None
    try:
        return tokens.index(content)
    except ValueError:
        raise ValueError("token %r from tokenizer_config.json is not in the vocabulary" % content)


def bos_in_post_processor(tok, bos):
    """Return True when tokenizer.json's post-processor template prepends bos."""
    pp = tok.get("post_processor") or {}
    procs = pp.get("processors", [pp]) if pp.get("type") == "Sequence" else [pp]
    for p in procs:
        if p.get("type") == "TemplateProcessing" and p.get("single"):
            first = p["single"][0]
            return "SpecialToken" in first and first["SpecialToken"]["id"] == bos
    return False


def convert(tokenizer_json, config_json, out, pre=None, add_bos=None, name=None):
    """Write the vocab-only GGUF; returns (n_tokens, n_merges, pre)."""
    tok = json.load(open(tokenizer_json, encoding="utf-8"))
    cfg = json.load(open(config_json, encoding="utf-8")) if config_json else {}
    model = tok.get("model", {})
    if model.get("type") != "BPE":
        raise ValueError("not a BPE tokenizer (model.type=%r)" % model.get("type"))
    pre = pre or detect_pre(tok)
    if pre is None:
        raise ValueError("unknown pre-tokenizer regex; name it with --pre")
    tokens, types = build_vocab(tok)
    merges = merge_strings(model.get("merges", []))
    bos = token_content(cfg.get("bos_token"))
    bos_id = token_id(bos, tokens)
    eos_id = token_id(token_content(cfg.get("eos_token")), tokens)
    pad_id = token_id(token_content(cfg.get("pad_token")), tokens)
    if add_bos is None:
        if "add_bos_token" in cfg:
            add_bos = bool(cfg["add_bos_token"])
        else:
            add_bos = bos_in_post_processor(tok, bos) or pre == "llama-bpe"

    w = gguf.Writer(out)
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", name or os.path.basename(os.path.dirname(os.path.abspath(tokenizer_json))))
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", pre)
    w.add_array("tokenizer.ggml.tokens", tokens, "str")
    w.add_array("tokenizer.ggml.token_type", types, "i32")
    w.add_array("tokenizer.ggml.merges", merges, "str")
    if bos_id is not None:
        w.add_u32("tokenizer.ggml.bos_token_id", bos_id)
    if eos_id is not None:
        w.add_u32("tokenizer.ggml.eos_token_id", eos_id)
    if pad_id is not None:
        w.add_u32("tokenizer.ggml.padding_token_id", pad_id)
    w.add_bool("tokenizer.ggml.add_bos_token", add_bos)
    if "add_eos_token" in cfg:
        w.add_bool("tokenizer.ggml.add_eos_token", bool(cfg["add_eos_token"]))
    if isinstance(cfg.get("chat_template"), str):
        w.add_string("tokenizer.chat_template", cfg["chat_template"])
    w.write()
    return len(tokens), len(merges), pre


def main(argv=None):
    """CLI entry point; returns the process exit code."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tokenizer_json")
    ap.add_argument("--config", help="tokenizer_config.json (bos/eos, chat template)")
    ap.add_argument("--pre", help="tokenizer.ggml.pre (default: detected from the regex)")
    ap.add_argument("--add-bos", choices=["true", "false"],
                    help="override tokenizer.ggml.add_bos_token")
    ap.add_argument("--name", help="general.name (default: the tokenizer's folder name)")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    add_bos = None if a.add_bos is None else a.add_bos == "true"
    try:
        n_tok, n_merges, pre = convert(a.tokenizer_json, a.config, a.output, a.pre, add_bos, a.name)
    except (ValueError, KeyError) as e:
        print("tokenizer_to_gguf: %s" % e, file=sys.stderr)
        return 1
    print("tokenizer_to_gguf: wrote %s: %d tokens, %d merges, pre=%s"
          % (a.output, n_tok, n_merges, pre), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
