/* fuzz.c (tokenizer) - libFuzzer harness for the tokenizers on arbitrary
 * bytes, with real vocabularies loaded once: SentencePiece from
 * stories260K (512 tokens) and from Llama 2 (32000), and byte-level BPE
 * from Llama 3 (converted by scripts/model/tokenizer_to_gguf.py; scripts/make/fuzz.sh
 * does that). A vocabulary that is absent is replaced by the first one.
 * Byte 0 picks the vocabulary (bits 0-1), special-token parsing (bit 2) and
 * BOS (bit 3); the rest is the text, not NUL-terminated. Checks: the count
 * does not depend on the buffer, ids are in range, BOS comes first when
 * asked for, and without special tokens the ids decode back to the input
 * (SPM: with its dummy space, and U+2581 read as a space). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/tokenizer.h"

#define N_VOCABS 3

static tok_vocab *vocabs[N_VOCABS];
static gguf_file *files[N_VOCABS];
static int space_prefix[N_VOCABS]; /* 1 when encoding adds SPM's dummy leading space */

static tok_vocab *load(const char *path, int i) {
    char err[512];
    if (!path) return NULL;
    files[i] = gguf_open(path, err, sizeof err);
    if (!files[i]) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        return NULL;
    }
    tok_vocab *v = tok_vocab_load(files[i], err, sizeof err);
    if (!v) fprintf(stderr, "fuzz_tokenizer: %s\n", err);
    return v;
}

/* Decodes N ids into a malloc'd buffer (*LEN bytes); NULL when out of memory. */
static char *decode(const tok_vocab *v, const int32_t *ids, int n, size_t *len) {
    size_t cap = 64, k = 0;
    char *out = malloc(cap);
    for (int i = 0; out && i < n; i++) {
        int m = tok_piece(v, ids[i], NULL, 0);
        if (m < 0) __builtin_trap(); /* every id tok_encode gives is valid */
        if (k + (size_t)m > cap) {
            cap = (k + (size_t)m) * 2;
            char *p = realloc(out, cap);
            if (!p) {
                free(out);
                return NULL;
            }
            out = p;
        }
        if (tok_piece(v, ids[i], out + k, m) != m) __builtin_trap();
        k += (size_t)m;
    }
    *len = k;
    return out;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *spm = getenv("FUZZ_SPM_GGUF");
    vocabs[0] = load(spm ? spm : "../shared/models/stories260K/stories260K.gguf", 0);
    vocabs[1] = load(getenv("FUZZ_SPM2_GGUF"), 1);
    vocabs[2] = load(getenv("FUZZ_BPE_GGUF"), 2);
    if (!vocabs[0]) {
        fprintf(stderr, "fuzz_tokenizer: cannot load the SPM vocabulary (set FUZZ_SPM_GGUF)\n");
        abort();
    }
    for (int i = 0; i < N_VOCABS; i++) {
        fprintf(stderr, "fuzz_tokenizer: vocabulary %d: %s\n", i,
                !vocabs[i] ? "absent (vocabulary 0 instead)" : tok_get_kind(vocabs[i]) == TOK_KIND_SPM ? "SPM" : "BPE");
        if (!vocabs[i]) continue;
        /* Does "a" come back as " a"? */
        int32_t ids[8];
        size_t len;
        int n = tok_encode(vocabs[i], "a", 1, 0, 0, ids, 8);
        char *d = n > 0 && n <= 8 ? decode(vocabs[i], ids, n, &len) : NULL;
        space_prefix[i] = d && len == 2 && !memcmp(d, " a", 2);
        free(d);
    }
    return 0;
}

/* Whether the decoded text D (DLEN bytes) is TEXT (LEN bytes) as SPM or BPE
 * gives it back. */
static int round_trips(int vi, const char *text, size_t len, const char *d, size_t dlen) {
    if (tok_get_kind(vocabs[vi]) == TOK_KIND_BPE) return dlen == len && !memcmp(d, text, len);
    size_t k = 0;
    if (space_prefix[vi] && len) {
        if (!dlen || d[0] != ' ') return 0;
        k = 1;
    }
    for (size_t i = 0; i < len; k++) {
        if (k >= dlen) return 0;
        int sp = len - i >= 3 && !memcmp(text + i, "\xE2\x96\x81", 3);
        if (d[k] != (sp ? ' ' : text[i])) return 0;
        i += sp ? 3 : 1;
    }
    return k == dlen;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int vi = (data[0] & 3) % N_VOCABS;
    if (!vocabs[vi]) vi = 0;
    const tok_vocab *v = vocabs[vi];
    int special = (data[0] >> 2) & 1, bos = (data[0] >> 3) & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t small[16];
    int n = tok_encode(v, text, len, bos, special, small, 16);
    if (n < 0) __builtin_trap(); /* only allocation failures or regex errors may fail */
    int32_t *ids = small;
    if (n > 16) { /* encode again into room for all, one spare */
        ids = malloc(((size_t)n + 1) * sizeof *ids);
        if (!ids) return 0;
        int m = tok_encode(v, text, len, bos, special, ids, n + 1);
        if (m != n) __builtin_trap(); /* the count does not depend on the buffer */
        if (memcmp(ids, small, sizeof small)) __builtin_trap();
    }
    int with_bos = bos && tok_adds_bos(v) && tok_bos(v) >= 0;
    if (with_bos && (n < 1 || ids[0] != tok_bos(v))) __builtin_trap();
    int plain = 1; /* no unknown or control token past BOS: those decode to nothing */
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(v)) __builtin_trap();
        tok_type t = tok_get_type(v, ids[i]);
        if (i >= with_bos) plain &= t == TOK_TYPE_NORMAL || t == TOK_TYPE_BYTE;
    }
    if (!special && plain) { /* ordinary text decodes back to itself */
        size_t dlen = 0;
        char *d = decode(v, ids + with_bos, n - with_bos, &dlen);
        if (d && !round_trips(vi, text, len, d, dlen)) __builtin_trap();
        free(d);
    }
    if (ids != small) free(ids);
    return 0;
}
