/* test_tokenizer.c - the tokenizers against llama.cpp's test vectors (Llama 2
 * SentencePiece, Llama 3 byte-level BPE after our own converter), round
 * trips, special tokens, and stories260K's prompt. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gguf.h"
#include "tokenizer.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    if (s) s[n] = 0;
    *len = s ? (size_t)n : 0;
    return s;
}

static tok_vocab *load(const char *path, gguf_file **g) {
    char err[512];
    *g = gguf_open(path, err, sizeof err);
    tok_vocab *v = *g ? tok_vocab_load(*g, err, sizeof err) : NULL;
    if (!v) printf("# %s\n", err);
    return v;
}

/* Checks every .inp/.out pair; returns the number of mismatches. */
static int vectors(const tok_vocab *v, const char *inp_path, const char *out_path, int *total) {
    size_t li, lo;
    char *inp = slurp(inp_path, &li), *out = slurp(out_path, &lo);
    int bad = 0, n = 0;
    if (!inp || !out) {
        free(inp);
        free(out);
        *total = 0;
        return 1;
    }
    const char *sep = "\n__ggml_vocab_test__\n";
    char *text = inp, *line = out;
    int32_t ids[4096];
    while (*text || *line) {
        char *end = strstr(text, sep);
        if (!end) break;
        char *eol = strchr(line, '\n');
        if (eol) *eol = 0;
        int got = tok_encode(v, text, (size_t)(end - text), 0, 0, ids, 4096);
        char buf[16384];
        size_t k = 0;
        for (int i = 0; i < got && k + 16 < sizeof buf; i++) k += (size_t)snprintf(buf + k, sizeof buf - k, " %d", ids[i]);
        buf[k] = 0;
        /* .out lines hold the ids separated by spaces, with a leading space. */
        const char *want = line;
        while (*want == ' ') want++;
        const char *mine = buf;
        while (*mine == ' ') mine++;
        if (strcmp(want, mine)) {
            if (bad < 3) printf("# mismatch on %.*s: want [%s] got [%s]\n", (int)(end - text > 40 ? 40 : end - text), text, want, mine);
            bad++;
        }
        n++;
        text = end + strlen(sep);
        line = eol ? eol + 1 : line + strlen(line);
    }
    free(inp);
    free(out);
    *total = n;
    return bad;
}

static int roundtrip(const tok_vocab *v, const char *s) {
    int32_t ids[1024];
    char out[4096];
    int n = tok_encode(v, s, strlen(s), 0, 0, ids, 1024), k = 0;
    for (int i = 0; i < n; i++) k += tok_piece(v, ids[i], out + k, (int)sizeof out - k);
    out[k] = 0;
    const char *o = out;
    if (tok_get_kind(v) == TOK_KIND_SPM && *o == ' ') o++; /* the dummy prefix */
    return n > 0 && !strcmp(o, s);
}

static const char *samples[] = {"Hello world", "Once upon a time, there was a dog.", "数学是一门科学 和 日本語のテキスト",
                                "emoji: 😀🎉 and ß, ñ, ü", "tabs\tand\nnewlines\n\n  spaces", "1234567 + 89 = 1234656"};

int main(void) {
    const char *shared = check_shared_dir();
    char path[1024], inp[1100], outp[1100];
    gguf_file *g;

    snprintf(path, sizeof path, "%s/models/tokenizers/llama2-spm/ggml-vocab-llama-spm.gguf", shared);
    if (access(path, R_OK)) {
        SKIP("tokenizer vectors: %s absent", path);
    } else {
        tok_vocab *v = load(path, &g);
        CHECK(v != NULL, "Llama 2 SPM vocabulary loads");
        if (v) {
            int total;
            snprintf(inp, sizeof inp, "%s.inp", path);
            snprintf(outp, sizeof outp, "%s.out", path);
            int bad = vectors(v, inp, outp, &total);
            CHECK(bad == 0 && total > 40, "Llama 2 SPM test vectors: %d of %d match", total - bad, total);
            int rt = 1;
            for (size_t i = 0; i < sizeof samples / sizeof *samples; i++) rt &= roundtrip(v, samples[i]);
            CHECK(rt, "Llama 2 SPM: decode(encode(text)) == text for ASCII, CJK, emoji, whitespace");
            int32_t ids[64];
            int n = tok_encode(v, "<s>hi</s>", 9, 1, 1, ids, 64);
            CHECK(n >= 3 && ids[0] == 1 && ids[1] == 1 && ids[n - 1] == 2, "special tokens are parsed when asked");
            n = tok_encode(v, "<s>", 3, 0, 0, ids, 64);
            CHECK(n > 1, "special token text is plain text otherwise (%d tokens)", n);
            CHECK(tok_is_eog(v, 2) && !tok_is_eog(v, 1), "EOS ends generation, BOS does not");
            tok_vocab_free(v);
        }
        gguf_close(g);
    }

    /* Llama 3: the converter turns tokenizer.json into GGUF metadata first. */
    const char *tmp = getenv("TESTS_TMP") ? getenv("TESTS_TMP") : "/tmp";
    char json[1024], cfg[1024], vocab[1024], cmd[4096];
    snprintf(json, sizeof json, "%s/models/tokenizers/llama3-bpe/tokenizer.json", shared);
    snprintf(cfg, sizeof cfg, "%s/models/tokenizers/llama3-bpe/tokenizer_config.json", shared);
    snprintf(vocab, sizeof vocab, "%s/llama3-vocab.gguf", tmp);
    if (access(json, R_OK)) {
        SKIP("Llama 3 vectors: %s absent", json);
    } else {
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 scripts/tokenizer_to_gguf.py '%s' --config '%s' -o '%s' >/dev/null", json, cfg, vocab);
        CHECK(system(cmd) == 0, "scripts/tokenizer_to_gguf.py converts the Llama 3 tokenizer.json");
        tok_vocab *v = load(vocab, &g);
        CHECK(v != NULL && tok_get_kind(v) == TOK_KIND_BPE && tok_n_vocab(v) == 128256, "Llama 3 BPE vocabulary loads");
        if (v) {
            int total;
            snprintf(inp, sizeof inp, "%s/models/tokenizers/llama3-bpe/ggml-vocab-llama-bpe.gguf.inp", shared);
            snprintf(outp, sizeof outp, "%s/models/tokenizers/llama3-bpe/ggml-vocab-llama-bpe.gguf.out", shared);
            int bad = vectors(v, inp, outp, &total);
            CHECK(bad == 0 && total > 40, "Llama 3 BPE test vectors: %d of %d match", total - bad, total);
            int rt = 1;
            for (size_t i = 0; i < sizeof samples / sizeof *samples; i++) rt &= roundtrip(v, samples[i]);
            CHECK(rt, "Llama 3 BPE: decode(encode(text)) == text");
            int32_t ids[64];
            const char *t = "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>";
            int n = tok_encode(v, t, strlen(t), 1, 1, ids, 64);
            CHECK(n == 7 && ids[0] == 128000 && ids[1] == 128006 && ids[3] == 128007 && ids[6] == 128009,
                  "Llama 3 header tokens are single ids (%d tokens)", n);
            CHECK(tok_is_eog(v, 128009) && tok_is_eog(v, 128001), "<|eot_id|> and <|end_of_text|> end generation");
            char bad_utf8[] = "a\xff\xfe b\xc3";
            n = tok_encode(v, bad_utf8, strlen(bad_utf8), 0, 0, ids, 64);
            CHECK(n > 0, "invalid UTF-8 is tokenized byte by byte, not refused");
            tok_vocab_free(v);
        }
        if (g) gguf_close(g);
        unlink(vocab);
    }

    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", shared);
    if (!access(path, R_OK)) {
        tok_vocab *v = load(path, &g);
        int32_t ids[16];
        int n = v ? tok_encode(v, "Once upon a time", 16, 1, 0, ids, 16) : -1;
        CHECK(n == 5 && ids[0] == 1 && ids[1] == 403 && ids[2] == 407 && ids[3] == 261 && ids[4] == 378,
              "stories260K: \"Once upon a time\" -> 1 403 407 261 378");
        tok_vocab_free(v);
        gguf_close(g);
    }
    CHECK_DONE();
}
