/* test_tokenizer.c - the tokenizers on small vocabularies built here in
 * memory (merge order, ties, byte fallback, special tokens, hostile files)
 * and on the real Llama 2 and stories260K vocabularies from $SHARED: round
 * trips, special-token parsing, BOS, and encoding speed. llama.cpp's test
 * vectors are checked by test_tokenizer_vectors.c. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"

/* ---- a GGUF writer for synthetic vocabularies ---- */

typedef struct {
    unsigned char *p;
    size_t n, cap;
    uint64_t n_kv;
} gbuf;

static void put(gbuf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void put_u32(gbuf *b, uint32_t x) { put(b, &x, 4); }
static void put_u64(gbuf *b, uint64_t x) { put(b, &x, 8); }
static void put_str(gbuf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void gb_begin(gbuf *b) {
    memset(b, 0, sizeof *b);
    put(b, "GGUF", 4);
    put_u32(b, 3);
    put_u64(b, 0); /* tensors */
    put_u64(b, 0); /* kvs, patched by gb_end */
}
static void gb_end(gbuf *b) { memcpy(b->p + 16, &b->n_kv, 8); }
static void kv_str(gbuf *b, const char *k, const char *v) {
    put_str(b, k);
    put_u32(b, GGUF_TYPE_STRING);
    put_str(b, v);
    b->n_kv++;
}
static void kv_u32(gbuf *b, const char *k, uint32_t v) {
    put_str(b, k);
    put_u32(b, GGUF_TYPE_UINT32);
    put_u32(b, v);
    b->n_kv++;
}
static void kv_bool(gbuf *b, const char *k, int v) {
    unsigned char c = (unsigned char)v;
    put_str(b, k);
    put_u32(b, GGUF_TYPE_BOOL);
    put(b, &c, 1);
    b->n_kv++;
}
static void kv_strs(gbuf *b, const char *k, const char *const *v, int n) {
    put_str(b, k);
    put_u32(b, GGUF_TYPE_ARRAY);
    put_u32(b, GGUF_TYPE_STRING);
    put_u64(b, (uint64_t)n);
    for (int i = 0; i < n; i++) put_str(b, v[i]);
    b->n_kv++;
}
static void kv_f32s(gbuf *b, const char *k, const float *v, int n) {
    put_str(b, k);
    put_u32(b, GGUF_TYPE_ARRAY);
    put_u32(b, GGUF_TYPE_FLOAT32);
    put_u64(b, (uint64_t)n);
    put(b, v, 4 * (size_t)n);
    b->n_kv++;
}
static void kv_i32s(gbuf *b, const char *k, const int32_t *v, int n) {
    put_str(b, k);
    put_u32(b, GGUF_TYPE_ARRAY);
    put_u32(b, GGUF_TYPE_INT32);
    put_u64(b, (uint64_t)n);
    put(b, v, 4 * (size_t)n);
    b->n_kv++;
}

/* Loads the vocabulary of B (a finished GGUF); *g and the result are the
 * caller's. On failure the error text is left in ERR. */
static tok_vocab *load_buf(gbuf *b, gguf_file **g, char *err, size_t errlen) {
    gb_end(b);
    *g = gguf_open_buffer(b->p, b->n, "synthetic.gguf", err, errlen);
    return *g ? tok_vocab_load(*g, err, errlen) : NULL;
}

/* Encodes S and compares with the N ids of WANT; prints both on a mismatch. */
static int enc_is(const tok_vocab *v, const char *s, int bos, int special, const int32_t *want, int n) {
    int32_t got[256];
    int k = tok_encode(v, s, strlen(s), bos, special, got, 256);
    int ok = k == n;
    for (int i = 0; ok && i < n; i++) ok = got[i] == want[i];
    if (!ok) {
        printf("# encode \"%s\": got", s);
        for (int i = 0; i < k && i < 256; i++) printf(" %d", got[i]);
        printf(" (%d), want", k);
        for (int i = 0; i < n; i++) printf(" %d", want[i]);
        printf("\n");
    }
    return ok;
}
#define ENC_IS(v, s, bos, special, ...) \
    enc_is(v, s, bos, special, (const int32_t[]){__VA_ARGS__}, (int)(sizeof((int32_t[]){__VA_ARGS__}) / 4))

/* Decodes ID into a NUL-terminated string (static buffer). */
static const char *piece(const tok_vocab *v, int32_t id) {
    static char buf[256];
    int n = tok_piece(v, id, buf, (int)sizeof buf - 1);
    buf[n < 0 ? 0 : n] = 0;
    return buf;
}

/* ---- SentencePiece-style ---- */

static tok_vocab *spm_vocab(gguf_file **g, float score_ab, float score_bc, int prefix, gbuf *b) {
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "c", "ab", "bc",
                                       "\xE2\x96\x81" "a", "<0x7A>", "<|u|>", "<0x0A>", "", "<|im_end|>"};
    float sc[15] = {0, 0, 0, -1, -2, -2, -2, score_ab, score_bc, -3, 0, 0, 0, 0, 0};
    int32_t ty[15] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 4, 6, 1, 3};
    char err[512];
    gb_begin(b);
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_strs(b, "tokenizer.ggml.tokens", toks, 15);
    kv_f32s(b, "tokenizer.ggml.scores", sc, 15);
    kv_i32s(b, "tokenizer.ggml.token_type", ty, 15);
    kv_u32(b, "tokenizer.ggml.bos_token_id", 1);
    kv_u32(b, "tokenizer.ggml.eos_token_id", 2);
    kv_u32(b, "tokenizer.ggml.unknown_token_id", 0);
    kv_bool(b, "tokenizer.ggml.add_space_prefix", prefix);
    tok_vocab *v = load_buf(b, g, err, sizeof err);
    if (!v) printf("# %s\n", err);
    return v;
}

static void test_spm_synthetic(void) {
    gguf_file *g;
    gbuf b;
    tok_vocab *v = spm_vocab(&g, -1.5f, -1.0f, 0, &b);
    CHECK(v && tok_get_kind(v) == TOK_KIND_SPM && tok_n_vocab(v) == 15, "SPM synthetic vocabulary loads");
    if (v) {
        CHECK(ENC_IS(v, "abc", 0, 0, 4, 8), "SPM: the best-scoring pair merges first (bc over ab)");
        CHECK(ENC_IS(v, "abc", 1, 0, 1, 4, 8), "SPM: BOS is prepended when asked");
        CHECK(ENC_IS(v, "z", 0, 0, 10), "SPM: a character without a piece falls back to its byte token");
        CHECK(ENC_IS(v, "\xC3\xA9", 0, 0, 0, 0), "SPM: bytes without byte tokens become the unknown token");
        CHECK(ENC_IS(v, "a b", 0, 0, 4, 3, 5), "SPM: a space is U+2581; no dummy prefix when add_space_prefix is false");
        CHECK(ENC_IS(v, "a<|u|>b", 0, 1, 4, 11, 5), "SPM: user-defined token text is one token with parse_special");
        CHECK(ENC_IS(v, "a<|u|>b", 0, 0, 4, 11, 5),
              "SPM: and without parse_special too (llama.cpp parses user-defined tokens always: Qwen's <think>)");
        CHECK(ENC_IS(v, "a<|im_end|>b", 0, 1, 4, 14, 5), "SPM: control token text is one token with parse_special");
        CHECK(ENC_IS(v, "<|im_end|>", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
              "SPM: without parse_special control token text is ordinary text (unknown bytes here)");
        int n;
        CHECK(!strcmp(piece(v, 3), " ") && !strcmp(piece(v, 9), " a") && !strcmp(piece(v, 12), "\n") &&
                  !strcmp(piece(v, 1), "") && !strcmp(piece(v, 11), "<|u|>") && !strcmp(piece(v, 13), ""),
              "SPM pieces: U+2581 is a space, <0x0A> a newline, control nothing, user-defined its text");
        CHECK(tok_is_eog(v, 2) && tok_is_eog(v, 14) && !tok_is_eog(v, 1) && !tok_is_eog(v, 4),
              "SPM: </s> and <|im_end|> end generation, <s> and text do not");
        CHECK(tok_find(v, "ab") == 7 && tok_find(v, "nope") == -1 && tok_find(v, "") == -1,
              "tok_find looks texts up, never the empty one");
        int32_t few[2] = {-7, -7};
        n = tok_encode(v, "zzzz", 4, 0, 0, few, 1);
        CHECK(n == 4 && few[0] == 10 && few[1] == -7, "tok_encode returns the full count but writes at most cap ids");
        CHECK(tok_encode(v, "", 0, 0, 0, few, 2) == 0 && tok_encode(v, "", 0, 1, 0, few, 2) == 1 && few[0] == 1,
              "empty text: no ids, or BOS alone");
        tok_vocab_free(v);
    }
    gguf_close(g);
    free(b.p);

    v = spm_vocab(&g, -1.0f, -1.0f, 1, &b);
    if (v) {
        CHECK(ENC_IS(v, "abc", 0, 0, 3, 7, 6), "SPM: equal scores merge the leftmost pair first; dummy prefix added");
        CHECK(ENC_IS(v, "a", 0, 0, 9), "SPM: the dummy prefix merges with the first character");
        CHECK(ENC_IS(v, "a<|u|>a", 0, 1, 9, 11, 9),
              "SPM: the dummy prefix is added again after a special token (llama.cpp)");
        tok_vocab_free(v);
    }
    gguf_close(g);
    free(b.p);
}

/* ---- byte-level BPE ---- */

/* Fills SYM[b] with the GPT-2 alphabet symbol of byte b (UTF-8). */
static void gpt2_symbols(char sym[256][3]) {
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int cp = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255) ? b : next++;
        if (cp < 0x80) {
            sym[b][0] = (char)cp;
            sym[b][1] = 0;
        } else {
            sym[b][0] = (char)(0xC0 | (cp >> 6));
            sym[b][1] = (char)(0x80 | (cp & 0x3F));
            sym[b][2] = 0;
        }
    }
}

/* Token ids: byte b's symbol is id b; then the extra tokens below. */
enum { B_AB = 256, B_BC, B_ABC, B_AA, B_IMEND, B_S, B_SX, B_USER, B_123, B_N };

static tok_vocab *bpe_vocab(gguf_file **g, const char *pre, const char *const *merges, int n_merges, gbuf *b,
                            char *err, size_t errlen) {
    static char sym[256][3];
    const char *toks[B_N];
    int32_t ty[B_N];
    gpt2_symbols(sym);
    for (int i = 0; i < 256; i++) {
        toks[i] = sym[i];
        ty[i] = 1;
    }
    const char *extra[] = {"ab", "bc", "abc", "aa", "<|im_end|>", "<|s|>", "<|s|>x", "<|u|>", "123"};
    const int32_t extra_ty[] = {1, 1, 1, 1, 3, 3, 3, 4, 1};
    for (int i = 256; i < B_N; i++) {
        toks[i] = extra[i - 256];
        ty[i] = extra_ty[i - 256];
    }
    gb_begin(b);
    kv_str(b, "tokenizer.ggml.model", "gpt2");
    if (pre) kv_str(b, "tokenizer.ggml.pre", pre);
    kv_strs(b, "tokenizer.ggml.tokens", toks, B_N);
    kv_i32s(b, "tokenizer.ggml.token_type", ty, B_N);
    kv_strs(b, "tokenizer.ggml.merges", merges, n_merges);
    kv_u32(b, "tokenizer.ggml.eos_token_id", B_IMEND);
    return load_buf(b, g, err, errlen);
}

static void test_bpe_synthetic(void) {
    static const char *const ab_first[] = {"a b", "b c", "a a", "nonsense", "x y", "c q"};
    static const char *const bc_first[] = {"b c", "a b", "a a"};
    char err[512];
    gguf_file *g;
    gbuf b;
    tok_vocab *v = bpe_vocab(&g, "gpt2", ab_first, 6, &b, err, sizeof err);
    CHECK(v && tok_get_kind(v) == TOK_KIND_BPE, "BPE synthetic vocabulary loads (malformed and unusable merges skipped)");
    if (v) {
        CHECK(ENC_IS(v, "abc", 0, 0, B_AB, 'c'), "BPE: merges apply by rank (a b before b c)");
        CHECK(ENC_IS(v, "aaa", 0, 0, B_AA, 'a'), "BPE: a repeated pair merges leftmost first");
        CHECK(ENC_IS(v, "ab ab", 0, 0, B_AB, ' ', B_AB), "BPE: the gpt2 regex keeps a leading space with the word");
        CHECK(ENC_IS(v, "ab", 1, 0, B_AB), "BPE: no BOS when the model has none");
        CHECK(ENC_IS(v, "<|s|>xy<|u|>", 0, 1, B_SX, 'y', B_USER),
              "BPE: special tokens match longest first, user-defined too, with parse_special");
        int32_t ids[32];
        int n = tok_encode(v, "<|s|>xy", 7, 0, 0, ids, 32);
        CHECK(n > 3 && ids[0] == '<', "BPE: without parse_special special text is ordinary text (%d ids)", n);
        CHECK(!strcmp(piece(v, ' '), " ") && !strcmp(piece(v, '\n'), "\n") && !strcmp(piece(v, 0xE9), "\xE9") &&
                  !strcmp(piece(v, B_AB), "ab") && !strcmp(piece(v, B_IMEND), "") && !strcmp(piece(v, B_USER), "<|u|>"),
              "BPE pieces undo the byte alphabet; control tokens are empty, user-defined their text");
        CHECK(tok_piece(v, -1, NULL, 0) == -1 && tok_piece(v, B_N, NULL, 0) == -1 && tok_piece(v, B_AB, NULL, 0) == 2,
              "tok_piece: -1 for an invalid id, the full length when the buffer is short");
        CHECK(tok_is_eog(v, B_IMEND) && tok_eos(v) == B_IMEND && tok_bos(v) == -1, "BPE: EOS ends generation");
        CHECK(ENC_IS(v, "a\xFF" "b", 0, 0, 'a', 0xFF, 'b'), "BPE: an invalid UTF-8 byte is a piece of its own");
        tok_vocab_free(v);
    }
    gguf_close(g);
    free(b.p);

    v = bpe_vocab(&g, "gpt2", bc_first, 3, &b, err, sizeof err);
    CHECK(v && ENC_IS(v, "abc", 0, 0, 'a', B_BC), "BPE: the other rank order merges b c first");
    tok_vocab_free(v);
    gguf_close(g);
    free(b.p);

    v = bpe_vocab(&g, "llama-bpe", ab_first, 6, &b, err, sizeof err);
    CHECK(v && ENC_IS(v, "abc", 0, 0, B_ABC) && ENC_IS(v, "abcc", 0, 0, B_AB, 'c', 'c'),
          "BPE llama-bpe: a whole pre-token in the vocabulary is one token (ignore_merges)");
    CHECK(v && ENC_IS(v, "12345", 0, 0, B_123, '4', '5'), "BPE llama-bpe: digits in groups of at most 3");
    tok_vocab_free(v);
    gguf_close(g);
    free(b.p);

    v = bpe_vocab(&g, "qwen2", ab_first, 6, &b, err, sizeof err);
    CHECK(v && ENC_IS(v, "abc", 0, 0, B_AB, 'c') && ENC_IS(v, "123", 0, 0, '1', '2', '3'),
          "BPE qwen2: merges, no whole-word lookup, digits one by one");
    tok_vocab_free(v);
    gguf_close(g);
    free(b.p);

    v = bpe_vocab(&g, "tekken", ab_first, 6, &b, err, sizeof err);
    CHECK(!v && strstr(err, "synthetic.gguf") && strstr(err, "tekken"), "BPE: an unknown pre-tokenizer is refused: %s", err);
    gguf_close(g);
    free(b.p);
}

/* ---- hostile vocabularies ---- */

/* Loads a vocabulary built by BUILD(kind) and expects an error naming the
 * file and containing WHAT. */
static void hostile(const char *name, void (*build)(gbuf *), const char *what) {
    gbuf b;
    gguf_file *g;
    char err[512] = "";
    gb_begin(&b);
    build(&b);
    tok_vocab *v = load_buf(&b, &g, err, sizeof err);
    CHECK(!v && g && strstr(err, "synthetic.gguf:") && strstr(err, what), "hostile vocabulary refused: %s (%s)", name,
          err);
    tok_vocab_free(v);
    gguf_close(g);
    free(b.p);
}

static const char *const three[] = {"a", "b", "c"};
static void h_no_model(gbuf *b) { kv_strs(b, "tokenizer.ggml.tokens", three, 3); }
static void h_bad_model(gbuf *b) {
    kv_str(b, "tokenizer.ggml.model", "bert");
    kv_strs(b, "tokenizer.ggml.tokens", three, 3);
}
static void h_no_tokens(gbuf *b) { kv_str(b, "tokenizer.ggml.model", "llama"); }
static void h_empty_tokens(gbuf *b) {
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_strs(b, "tokenizer.ggml.tokens", three, 0);
}
static void h_tokens_not_strings(gbuf *b) {
    const int32_t x[3] = {1, 2, 3};
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_i32s(b, "tokenizer.ggml.tokens", x, 3);
}
static void h_short_scores(gbuf *b) {
    const float s[2] = {0, 0};
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_strs(b, "tokenizer.ggml.tokens", three, 3);
    kv_f32s(b, "tokenizer.ggml.scores", s, 2);
}
static void h_string_types(gbuf *b) {
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_strs(b, "tokenizer.ggml.tokens", three, 3);
    kv_strs(b, "tokenizer.ggml.token_type", three, 3);
}
static void h_long_types(gbuf *b) {
    const int32_t t[4] = {1, 1, 1, 1};
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_strs(b, "tokenizer.ggml.tokens", three, 3);
    kv_i32s(b, "tokenizer.ggml.token_type", t, 4);
}
static void h_bos_range(gbuf *b) {
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_strs(b, "tokenizer.ggml.tokens", three, 3);
    kv_u32(b, "tokenizer.ggml.bos_token_id", 3);
}
static void h_eos_type(gbuf *b) {
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_strs(b, "tokenizer.ggml.tokens", three, 3);
    kv_str(b, "tokenizer.ggml.eos_token_id", "2");
}
static void h_no_merges(gbuf *b) {
    kv_str(b, "tokenizer.ggml.model", "gpt2");
    kv_strs(b, "tokenizer.ggml.tokens", three, 3);
}
static void h_long_token(gbuf *b) {
    static char big[70000];
    memset(big, 'x', sizeof big - 1);
    const char *t[2] = {"a", big};
    kv_str(b, "tokenizer.ggml.model", "llama");
    kv_strs(b, "tokenizer.ggml.tokens", t, 2);
}

static void test_hostile(void) {
    hostile("no tokenizer.ggml.model", h_no_model, "tokenizer.ggml.model");
    hostile("unknown model", h_bad_model, "bert");
    hostile("no token array", h_no_tokens, "tokenizer.ggml.tokens");
    hostile("zero tokens", h_empty_tokens, "0 tokens");
    hostile("tokens not strings", h_tokens_not_strings, "tokenizer.ggml.tokens");
    hostile("scores of the wrong length", h_short_scores, "tokenizer.ggml.scores");
    hostile("token types as strings", h_string_types, "tokenizer.ggml.token_type");
    hostile("token types of the wrong length", h_long_types, "tokenizer.ggml.token_type");
    hostile("BOS id out of range", h_bos_range, "bos_token_id");
    hostile("EOS id not an integer", h_eos_type, "eos_token_id");
    hostile("BPE without merges", h_no_merges, "tokenizer.ggml.merges");
    hostile("a 70000-byte token", h_long_token, "token 1");

    /* Empty and duplicate token texts load and encode without harm. */
    static const char *const odd[] = {"", "a", "", "a", "\xE2\x96\x81"};
    gbuf b;
    gguf_file *g;
    char err[512];
    gb_begin(&b);
    kv_str(&b, "tokenizer.ggml.model", "llama");
    kv_strs(&b, "tokenizer.ggml.tokens", odd, 5);
    tok_vocab *v = load_buf(&b, &g, err, sizeof err);
    CHECK(v && ENC_IS(v, "a", 0, 0, 4, 3) && ENC_IS(v, "b", 0, 0, 4, 0),
          "empty and duplicate token texts: the last duplicate wins, unknown falls back to id 0");
    CHECK(v && tok_bos(v) == 1 && tok_eos(v) == 2 && !strcmp(piece(v, 0), ""), "SPM default BOS/EOS ids apply");
    tok_vocab_free(v);
    gguf_close(g);
    free(b.p);
}

/* ---- real vocabularies ---- */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Returns 1 when decode(encode(S)) == S (an SPM dummy prefix removed). */
static int roundtrip(const tok_vocab *v, const char *s) {
    int32_t ids[1024];
    char out[4096];
    int n = tok_encode(v, s, strlen(s), 0, 0, ids, 1024), k = 0;
    for (int i = 0; i < n && i < 1024; i++) {
        int m = tok_piece(v, ids[i], out + k, (int)sizeof out - 1 - k);
        if (m < 0 || m > (int)sizeof out - 1 - k) return 0;
        k += m;
    }
    out[k] = 0;
    const char *o = out;
    if (tok_get_kind(v) == TOK_KIND_SPM && *o == ' ') o++;
    int ok = n > 0 && !strcmp(o, s);
    if (!ok) printf("# round trip of \"%s\" gave \"%s\"\n", s, o);
    return ok;
}

static const char *const samples[] = {
    "Hello world", "Once upon a time, there was a dog.", "数学是一门科学 和 日本語のテキスト",
    "emoji: 😀🎉🦙 and ß, ñ, ü", "tabs\tand\nnewlines\n\n  spaces   ", "1234567 + 89 = 1234656", "  leading"};

/* Measures encoding of about 1 MB of mixed text; returns MB/s. */
static double encode_speed(const tok_vocab *v) {
    static const char *const frag[] = {"The quick brown fox jumps over the lazy dog. ",
                                       "Once upon a time, there was a little girl named Lily. ",
                                       "数学是一门科学 和 日本語のテキスト ", "emoji 😀🎉 ß ñ ü\n",
                                       "  1234567 + 89 = 1234656\n\t", "don't you're I'll <|eot_id|>\n"};
    size_t cap = 1 << 20, n = 0;
    char *s = malloc(cap + 128);
    int32_t *ids = malloc((cap + 8) * sizeof *ids);
    double mbs = 0;
    if (s && ids) {
        for (int k = 0; n < cap; k++) {
            size_t l = strlen(frag[k % 6]);
            memcpy(s + n, frag[k % 6], l);
            n += l;
        }
        double t = now();
        int got = tok_encode(v, s, n, 1, 1, ids, (int)cap + 8);
        t = now() - t;
        mbs = got > 0 ? (double)n / 1e6 / t : 0;
    }
    free(s);
    free(ids);
    return mbs;
}

static void test_llama2(const char *shared) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tokenizers/llama2-spm/ggml-vocab-llama-spm.gguf", shared);
    if (access(path, R_OK)) {
        SKIP("Llama 2 SPM vocabulary: ../shared absent");
        return;
    }
    char err[512];
    gguf_file *g = gguf_open(path, err, sizeof err);
    tok_vocab *v = g ? tok_vocab_load(g, err, sizeof err) : NULL;
    CHECK(v && tok_n_vocab(v) == 32000 && tok_adds_bos(v) && tok_bos(v) == 1, "Llama 2 SPM vocabulary loads");
    if (!v) {
        printf("# %s\n", err);
        gguf_close(g);
        return;
    }
    int rt = 1;
    for (size_t i = 0; i < sizeof samples / sizeof *samples; i++) rt &= roundtrip(v, samples[i]);
    CHECK(rt, "Llama 2 SPM: decode(encode(text)) == text for ASCII, CJK, emoji, whitespace");
    int32_t hi = tok_find(v, "\xE2\x96\x81hi");
    CHECK(ENC_IS(v, "<s>hi</s>", 1, 1, 1, 1, hi, 2), "Llama 2 SPM: <s> and </s> parsed as tokens with parse_special");
    int32_t ids[64];
    int n = tok_encode(v, "<s>", 3, 0, 0, ids, 64);
    CHECK(n > 1, "Llama 2 SPM: <s> is plain text without parse_special (%d tokens)", n);
    CHECK(tok_is_eog(v, 2) && !tok_is_eog(v, 1) && tok_get_type(v, 1) == TOK_TYPE_CONTROL,
          "Llama 2 SPM: EOS ends generation, BOS does not");
    CHECK(!strcmp(piece(v, 13), "\n") && !strcmp(piece(v, 1), ""), "Llama 2 SPM: <0x0A> decodes to a newline, <s> to nothing");
    double mbs = encode_speed(v);
    printf("# Llama 2 SPM encodes %.2f MB/s\n", mbs);
    CHECK(mbs > 0.5 || (getenv("SANITIZE") && !strcmp(getenv("SANITIZE"), "1")),
          "Llama 2 SPM: 1 MB of text encodes at %.2f MB/s", mbs);
    tok_vocab_free(v);
    gguf_close(g);
}

static void test_stories(const char *shared) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", shared);
    if (access(path, R_OK)) {
        SKIP("stories260K vocabulary: ../shared absent");
        return;
    }
    gguf_file *g = gguf_open(path, err, sizeof err);
    tok_vocab *v = g ? tok_vocab_load(g, err, sizeof err) : NULL;
    if (!v) printf("# %s\n", err);
    CHECK(v && ENC_IS(v, "Once upon a time", 1, 0, 1, 403, 407, 261, 378),
          "stories260K: \"Once upon a time\" -> 1 403 407 261 378");
    tok_vocab_free(v);
    gguf_close(g);
}

int main(void) {
    test_spm_synthetic();
    test_bpe_synthetic();
    test_hostile();
    const char *shared = check_shared_dir();
    test_llama2(shared);
    test_stories(shared);
    CHECK_DONE();
}
