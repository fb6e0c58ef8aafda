/* tokenizer.h - text <-> token ids for GGUF vocabularies.
 *
 * Two families, chosen by `tokenizer.ggml.model`:
 *  - "llama": SentencePiece-style. Spaces become U+2581, an optional dummy
 *    space prefix (`tokenizer.ggml.add_space_prefix`, default true), pieces
 *    merged greedily by score, bytes without a piece fall back to <0xNN>.
 *  - "gpt2": byte-level BPE. The text is pre-split by the regex named in
 *    `tokenizer.ggml.pre` (llama3 / qwen2 / default gpt2) with PCRE2, bytes
 *    are mapped to GPT-2's printable unicode alphabet, and merges are applied
 *    by rank from `tokenizer.ggml.merges`.
 * A loaded vocabulary is immutable: every function here is thread-safe.
 */
#ifndef ILPD_TOKENIZER_H
#define ILPD_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf.h"

typedef enum { TOK_KIND_SPM, TOK_KIND_BPE } tok_kind;

/* Token types as stored in tokenizer.ggml.token_type. */
typedef enum {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
} tok_type;

typedef struct tok_vocab tok_vocab;

/* Loads the vocabulary of F. Returns a new tok_vocab (free with
 * tok_vocab_free) or NULL with "FILE: problem" in err. */
tok_vocab *tok_vocab_load(const gguf_file *f, char *err, size_t errlen);
void tok_vocab_free(tok_vocab *v);

/* Encodes LEN bytes of TEXT. With add_bos, BOS is prepended when the model
 * adds one (tokenizer.ggml.add_bos_token, default true for SPM). The texts
 * of user-defined tokens (e.g. Qwen's "<think>") are always recognised as
 * those single tokens, as llama.cpp does; with parse_special, those of
 * control tokens (e.g. "<|im_start|>") too, otherwise they are ordinary
 * text. Writes at most CAP ids to OUT and returns the full count
 * (call again with a larger buffer when it exceeds CAP), or -1 on error. */
int tok_encode(const tok_vocab *v, const char *text, size_t len, int add_bos, int parse_special, int32_t *out,
               int cap);

/* Encodes LEN bytes of TEXT as the continuation of a text already begun:
 * no BOS, no SPM dummy space, special token texts recognised. Same returns
 * as tok_encode. */
int tok_encode_piece(const tok_vocab *v, const char *text, size_t len, int32_t *out, int cap);

/* Writes the bytes that token ID contributes to decoded text (byte tokens
 * become their byte, U+2581 a space, GPT-2 byte symbols their bytes; control
 * tokens contribute nothing) into BUF. Returns the byte count (which may
 * exceed CAP: then only CAP bytes were written), or -1 for an invalid id. */
int tok_piece(const tok_vocab *v, int32_t id, char *buf, int cap);

/* The stored text of token ID (not NUL-terminated, *len set), or NULL. */
const char *tok_text(const tok_vocab *v, int32_t id, size_t *len);
/* The id whose stored text is exactly TEXT, or -1. */
int32_t tok_find(const tok_vocab *v, const char *text);

tok_kind tok_get_kind(const tok_vocab *v);
int tok_n_vocab(const tok_vocab *v);
int32_t tok_bos(const tok_vocab *v); /* -1 when the model has none */
int32_t tok_eos(const tok_vocab *v);
int tok_adds_bos(const tok_vocab *v);
/* 1 when ID ends generation: EOS, EOT, or another end-of-generation control
 * token the vocabulary declares (e.g. <|eot_id|>, <|im_end|>, <|end|>). */
int tok_is_eog(const tok_vocab *v, int32_t id);
tok_type tok_get_type(const tok_vocab *v, int32_t id);

#endif
