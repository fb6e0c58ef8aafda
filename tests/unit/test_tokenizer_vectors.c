/* test_tokenizer_vectors.c - llama.cpp's tokenizer test vectors.
 *
 * A .inp file holds the texts, each followed by the line
 * "__ggml_vocab_test__"; the .out file holds one line of ids per text
 * (without BOS). Both are split completely, as Python's str.split does:
 * the .inp on "\n__ggml_vocab_test__\n", the .out on "\n", so each ends with
 * an empty remainder, paired with the other's (46 texts + 1 = 47 cases).
 * The counts must agree and every case must match.
 *
 * Two modes, so that no check runs twice:
 *  - plain run (tests/t_unit.sh): the Llama 2 SentencePiece vocabulary in
 *    $SHARED/models/tokenizers/llama2-spm.
 *  - LLAMA3_VOCAB=FILE (tests/t_tokenizer_vectors.sh sets it after turning
 *    the Llama 3 tokenizer.json into FILE with scripts/model/tokenizer_to_gguf.py):
 *    that vocabulary against the llama3-bpe vectors, plus Llama 3's special
 *    tokens, round trips, load time and encoding speed.
 *  - VOCAB=FILE VECTORS=PREFIX (tests/t_tokenizer_synthetic.py): FILE's vocabulary
 *    against PREFIX.inp / PREFIX.out, texts encoded without special tokens.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"

#define MAX_IDS 8192

/* Returns the contents of PATH (NUL-terminated, *len bytes, caller frees), or NULL. */
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *s = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) goto done;
    s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) {
        s[n] = 0;
        *len = (size_t)n;
    }
done:
    fclose(f);
    return s;
}

/* Splits the LEN bytes at S on SEP completely; returns the piece count and
 * fills at most MAX (start, length) pairs. */
static int split(const char *s, size_t len, const char *sep, const char **start, size_t *plen, int max) {
    size_t ls = strlen(sep), at = 0;
    int n = 0;
    for (;;) {
        const char *hit = memmem(s + at, len - at, sep, ls);
        size_t end = hit ? (size_t)(hit - s) : len;
        if (n < max) {
            start[n] = s + at;
            plen[n] = end - at;
        }
        n++;
        if (!hit) return n;
        at = end + ls;
    }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int sanitized(void) { return getenv("SANITIZE") && !strcmp(getenv("SANITIZE"), "1"); }

/* Checks every case of INP/OUT against V under the name NAME. */
static void vectors(const tok_vocab *v, const char *name, const char *inp_path, const char *out_path) {
    enum { MAXC = 256 };
    size_t li = 0, lo = 0;
    char *inp = slurp(inp_path, &li), *out = slurp(out_path, &lo);
    static const char *ts[MAXC], *os[MAXC];
    static size_t tl[MAXC], ol[MAXC];
    static int32_t got[MAX_IDS];
    if (!inp || !out) {
        CHECK(0, "%s test vectors: cannot read %s or %s", name, inp_path, out_path);
        goto done;
    }
    int nt = split(inp, li, "\n__ggml_vocab_test__\n", ts, tl, MAXC);
    int no = split(out, lo, "\n", os, ol, MAXC);
    CHECK(nt == no && nt > 1 && nt <= MAXC, "%s test vectors: %d texts and %d id lines pair up", name, nt, no);
    if (nt != no || nt > MAXC) goto done;
    int bad = 0;
    for (int i = 0; i < nt; i++) {
        int32_t want[MAX_IDS];
        int nw = 0;
        char line[65536];
        snprintf(line, sizeof line, "%.*s", (int)ol[i], os[i]);
        for (char *p = line, *e; nw < MAX_IDS; p = e) {
            long x = strtol(p, &e, 10);
            if (e == p) break;
            want[nw++] = (int32_t)x;
        }
        int n = tok_encode(v, ts[i], tl[i], 0, 0, got, MAX_IDS);
        int ok = n == nw;
        for (int k = 0; ok && k < n; k++) ok = got[k] == want[k];
        if (!ok && bad++ < 5) {
            printf("# %s case %d \"%.*s\": got", name, i + 1, (int)(tl[i] > 60 ? 60 : tl[i]), ts[i]);
            for (int k = 0; k < n && k < 40; k++) printf(" %d", got[k]);
            printf(" (%d ids), want %.*s\n", n, (int)(ol[i] > 300 ? 300 : ol[i]), os[i]);
        }
    }
    CHECK(bad == 0, "%s test vectors: %d of %d cases match (llama.cpp's %d texts and the empty remainder)", name,
          nt - bad, nt, nt - 1);
done:
    free(inp);
    free(out);
}

/* Returns 1 when decode(encode(S)) == S (an SPM dummy prefix removed). */
static int roundtrip(const tok_vocab *v, const char *s) {
    static int32_t ids[MAX_IDS];
    static char buf[65536];
    int n = tok_encode(v, s, strlen(s), 0, 0, ids, MAX_IDS), k = 0;
    for (int i = 0; i < n && i < MAX_IDS; i++) {
        int m = tok_piece(v, ids[i], buf + k, (int)sizeof buf - 1 - k);
        if (m < 0 || m > (int)sizeof buf - 1 - k) return 0;
        k += m;
    }
    buf[k] = 0;
    int ok = n > 0 && !strcmp(buf, s);
    if (!ok) printf("# round trip of \"%s\" gave \"%s\"\n", s, buf);
    return ok;
}

/* Encodes LEN bytes of S; returns the seconds taken (-1 on failure). */
static double time_encode(const tok_vocab *v, const char *s, size_t len) {
    int32_t *ids = malloc((len + 8) * sizeof *ids);
    if (!ids) return -1;
    double t = now();
    int n = tok_encode(v, s, len, 1, 1, ids, (int)len + 8);
    t = now() - t;
    free(ids);
    return n < 0 ? -1 : t;
}

static void llama3(const char *shared, const char *vocab) {
    char err[512], inp[1024], out[1024];
    double t = now();
    gguf_file *g = gguf_open(vocab, err, sizeof err);
    tok_vocab *v = g ? tok_vocab_load(g, err, sizeof err) : NULL;
    t = now() - t;
    CHECK(v && tok_get_kind(v) == TOK_KIND_BPE && tok_n_vocab(v) == 128256 && tok_bos(v) == 128000 && tok_adds_bos(v),
          "Llama 3 BPE vocabulary loads (128256 tokens, BOS 128000)");
    if (!v) {
        printf("# %s\n", err);
        gguf_close(g);
        return;
    }
    printf("# Llama 3 vocabulary: open + load %.3f s\n", t);
    CHECK(t < 1.0 || sanitized(), "Llama 3 vocabulary opens and loads in %.3f s (under 1 s)", t);
    snprintf(inp, sizeof inp, "%s/models/tokenizers/llama3-bpe/ggml-vocab-llama-bpe.gguf.inp", shared);
    snprintf(out, sizeof out, "%s/models/tokenizers/llama3-bpe/ggml-vocab-llama-bpe.gguf.out", shared);
    vectors(v, "Llama 3 BPE", inp, out);

    static const char *const samples[] = {
        "Hello world", "数学是一门科学 和 日本語のテキスト", "emoji: 😀🎉🦙 and ß, ñ, ü",
        "tabs\tand\nnewlines\n\n  spaces   ", "1234567 + 89 = 1234656", "  leading", "don't WE'LL <|eot_id|>"};
    int rt = 1;
    for (size_t i = 0; i < sizeof samples / sizeof *samples; i++) rt &= roundtrip(v, samples[i]);
    CHECK(rt, "Llama 3 BPE: decode(encode(text)) == text for ASCII, CJK, emoji, whitespace, special text");

    int32_t ids[64];
    const char *h = "<|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|>";
    static const int32_t want[] = {128000, 128006, 882, 128007, 271, 15339, 128009};
    int n = tok_encode(v, h, strlen(h), 1, 1, ids, 64);
    int ok = n == 7;
    for (int i = 0; ok && i < n; i++) ok = ids[i] == want[i];
    CHECK(ok, "Llama 3: a chat header encodes to 128000 128006 882 128007 271 15339 128009 with parse_special");
    n = tok_encode(v, h, strlen(h), 0, 0, ids, 64);
    ok = n > 7;
    for (int i = 0; ok && i < n && i < 64; i++) ok = ids[i] < 128000;
    CHECK(ok, "Llama 3: without parse_special the header is ordinary text (%d ids)", n);
    CHECK(tok_is_eog(v, 128009) && tok_is_eog(v, 128001) && !tok_is_eog(v, 128000) && !tok_is_eog(v, 15339),
          "Llama 3: <|eot_id|> and <|end_of_text|> end generation, <|begin_of_text|> does not");
    char buf[32];
    CHECK(tok_piece(v, 128009, buf, 32) == 0 && tok_piece(v, 271, buf, 32) == 2 && !memcmp(buf, "\n\n", 2),
          "Llama 3 pieces: control tokens are empty, byte symbols decode to bytes");
    static const char bad_utf8[] = "a\xff\xfe b\xc3";
    n = tok_encode(v, bad_utf8, strlen(bad_utf8), 0, 0, ids, 64);
    CHECK(n >= 5, "Llama 3: invalid UTF-8 is encoded byte by byte, not refused (%d ids)", n);

    /* Speed: 1 MB of mixed text, and 256 KB runs that are one long pre-token. */
    static const char *const frag[] = {"The quick brown fox jumps over the lazy dog. ",
                                       "Once upon a time, there was a little girl named Lily. ",
                                       "数学是一门科学 和 日本語のテキスト ", "emoji 😀🎉 ß ñ ü\n",
                                       "  1234567 + 89 = 1234656\n\t", "don't you're I'll <|eot_id|>\n"};
    size_t cap = 1 << 20, len = 0;
    char *s = malloc(cap + 128);
    if (!s) {
        CHECK(0, "Llama 3: out of memory for the speed test");
    } else {
        for (int k = 0; len < cap; k++) {
            size_t l = strlen(frag[k % 6]);
            memcpy(s + len, frag[k % 6], l);
            len += l;
        }
        double sec = time_encode(v, s, len), mbs = sec > 0 ? (double)len / 1e6 / sec : 0;
        printf("# Llama 3 BPE encodes %.2f MB/s (1 MB of mixed text)\n", mbs);
        CHECK(sec >= 0 && (mbs > 1.0 || sanitized()), "Llama 3 BPE: 1 MB of text encodes at %.2f MB/s", mbs);
        static const char fill[] = {'a', ' ', '!', '\n'};
        for (size_t k = 0; k < sizeof fill; k++) {
            memset(s, fill[k], 256 * 1024);
            sec = time_encode(v, s, 256 * 1024);
            CHECK(sec >= 0 && (sec < 2.0 || sanitized()), "Llama 3 BPE: 256 KB of 0x%02x (one long pre-token) in %.3f s",
                  fill[k], sec);
        }
        free(s);
    }
    tok_vocab_free(v);
    gguf_close(g);
}

static void llama2(const char *shared) {
    char path[1024], inp[1100], out[1100], err[512];
    snprintf(path, sizeof path, "%s/models/tokenizers/llama2-spm/ggml-vocab-llama-spm.gguf", shared);
    if (access(path, R_OK)) {
        SKIP("Llama 2 SPM test vectors: ../shared absent");
        return;
    }
    gguf_file *g = gguf_open(path, err, sizeof err);
    tok_vocab *v = g ? tok_vocab_load(g, err, sizeof err) : NULL;
    CHECK(v != NULL, "Llama 2 SPM vocabulary loads");
    if (v) {
        snprintf(inp, sizeof inp, "%s.inp", path);
        snprintf(out, sizeof out, "%s.out", path);
        vectors(v, "Llama 2 SPM", inp, out);
    } else {
        printf("# %s\n", err);
    }
    tok_vocab_free(v);
    gguf_close(g);
}

/* The vectors PREFIX.inp / PREFIX.out against the vocabulary of the GGUF file PATH. */
static void vocab_vectors(const char *path, const char *prefix) {
    char inp[1100], out[1100], err[512];
    gguf_file *g = gguf_open(path, err, sizeof err);
    tok_vocab *v = g ? tok_vocab_load(g, err, sizeof err) : NULL;
    CHECK(v != NULL, "%s: the vocabulary loads%s%s", path, v ? "" : ": ", v ? "" : err);
    if (v) {
        snprintf(inp, sizeof inp, "%s.inp", prefix);
        snprintf(out, sizeof out, "%s.out", prefix);
        vectors(v, prefix, inp, out);
    }
    tok_vocab_free(v);
    gguf_close(g);
}

int main(void) {
    const char *shared = check_shared_dir();
    const char *l3 = getenv("LLAMA3_VOCAB"), *vocab = getenv("VOCAB"), *vecs = getenv("VECTORS");
    if (vocab && *vocab && vecs && *vecs) vocab_vectors(vocab, vecs);
    else if (l3 && *l3) llama3(shared, l3);
    else llama2(shared);
    CHECK_DONE();
}
