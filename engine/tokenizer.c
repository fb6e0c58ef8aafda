/* tokenizer.c - SentencePiece-style and byte-level BPE tokenizers over a
 * GGUF vocabulary (see tokenizer.h for the rules).
 *
 * Layout: every token text is copied into one arena; a hash table maps text
 * to id; BPE merges are kept as (left id, right id) -> (rank, merged id) in a
 * second hash table. Encoding allocates only per-call scratch, so a loaded
 * vocabulary is shared read-only by any number of threads.
 *
 * Both families merge with one priority queue of adjacent-pair candidates
 * over a linked list of symbols: O(n log n) in the length of a fragment.
 *
 * Behaviour, following llama.cpp (src/llama-vocab.cpp) where it has one:
 *  - Duplicate token texts: the last id wins the text -> id lookup.
 *  - Empty token texts are kept (their id decodes to nothing) but are never
 *    looked up or matched as special tokens.
 *  - SPM: the dummy space prefix goes before the text, and again before the
 *    text that follows a special token matched with parse_special (llama.cpp
 *    sets is_prev_special after every special token; Meta's own Llama 2 chat
 *    code encodes each turn separately, which gives the same "▁[INST]").
 *  - SPM: a character that no merge covers becomes its bytes' <0xNN> tokens,
 *    or the unknown token per byte when the vocabulary has no byte tokens;
 *    with neither, the character is dropped.
 *  - BPE: "llama-bpe"/"llama3"/"llama-v3" look the whole pre-token up before
 *    merging (Hugging Face's ignore_merges); merges whose parts or result
 *    are not tokens are dropped at load.
 *  - parse_special: control, user-defined and unknown-type token texts are
 *    matched leftmost, longest first. Off, every byte is ordinary text.
 *  - tok_piece: control and unknown-type tokens decode to nothing.
 *  - token_type values outside 1..6 are treated as normal tokens.
 */
#include "engine/tokenizer.h"
#include "engine/utf8.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_MAX_VOCAB (1 << 24) /* most tokens, and most merges, a vocabulary may hold */
#define TOK_MAX_TEXT 65536      /* longest token text accepted, in bytes */
#define TOK_GPT2_CPS 324        /* the GPT-2 byte alphabet uses code points below this */

/* Open-addressing hash table: slot i holds an index + 1 (0 = empty) and the
 * high 32 bits of its key's hash; the key itself lives with the caller. */
typedef struct {
    uint32_t *val;
    uint32_t *tag;
    uint32_t mask; /* capacity - 1, a power of two minus one */
} tok_map;

/* A BPE merge; its rank is its index in tok_vocab.merges. */
typedef struct {
    int32_t left, right, out;
} tok_merge;

struct tok_vocab {
    tok_kind kind;
    int n;
    char *arena;         /* every token text, each followed by a NUL */
    uint32_t *off, *len; /* of each token in the arena */
    uint32_t max_len;    /* the longest token text */
    float *score;
    uint8_t *type;
    uint8_t *eog;        /* per id: 1 when it ends generation */
    uint8_t *rstrip;     /* per id: 1 when whitespace after it in the text is dropped (Phi-3), or NULL */
    tok_map by_text;     /* text -> id */
    tok_merge *merges;   /* BPE, by rank */
    int n_merges;
    tok_map by_pair;     /* (left, right) -> rank */
    int32_t bos, eos, eot, unk;
    int add_bos, add_space_prefix, ignore_merges;
    int32_t byte_id[256];  /* SPM: the <0xNN> token; BPE: the token of the byte's GPT-2 symbol; -1 if none */
    int32_t *special;      /* special token ids by first byte, longest text first within a byte */
    uint32_t special_at[257]; /* special[special_at[b] .. special_at[b + 1]) start with byte b */
    pcre2_code *re;        /* BPE pre-tokenizer */
    uint32_t byte_cp[256]; /* GPT-2 byte -> code point */
    int16_t cp_byte[TOK_GPT2_CPS]; /* code point -> byte, or -1 */
};

/* ---- hashing and tables ---- */

/* Returns the 64-bit FNV-1a state H advanced over N bytes at P. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

/* Returns the hash of the NA bytes at A followed by the NB bytes at B. */
static uint64_t hash_bytes(const char *a, size_t na, const char *b, size_t nb) {
    uint64_t h = fnv(fnv(1469598103934665603ull, a, na), b, nb);
    return h ^ (h >> 31);
}

/* Returns a 64-bit hash of the id pair (A, B). */
static uint64_t hash_pair(int32_t a, int32_t b) {
    uint64_t h = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

/* Allocates M for up to N keys (N <= TOK_MAX_VOCAB). Returns 0, or -1 when
 * out of memory; M owns its arrays either way (free with map_free). */
static int map_init(tok_map *m, uint32_t n) {
    uint32_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    m->val = calloc(cap, sizeof *m->val);
    m->tag = malloc(cap * sizeof *m->tag);
    m->mask = cap - 1;
    return m->val && m->tag ? 0 : -1;
}

/* Frees the arrays of M (safe on a zeroed or half-built map). */
static void map_free(tok_map *m) {
    free(m->val);
    free(m->tag);
}

/* Returns the id whose text is the NA bytes at A followed by the NB bytes
 * at B, or -1. */
static int32_t text_find2(const tok_vocab *v, const char *a, size_t na, const char *b, size_t nb) {
    uint64_t h = hash_bytes(a, na, b, nb);
    uint32_t tag = (uint32_t)(h >> 32), mask = v->by_text.mask;
    for (uint32_t i = (uint32_t)h & mask; v->by_text.val[i]; i = (i + 1) & mask) {
        uint32_t id = v->by_text.val[i] - 1;
        const char *t = v->arena + v->off[id];
        if (v->by_text.tag[i] == tag && v->len[id] == na + nb && !memcmp(t, a, na) && (!nb || !memcmp(t + na, b, nb)))
            return (int32_t)id;
    }
    return -1;
}

/* Returns the id whose text is the N bytes at S, or -1. */
static int32_t text_find(const tok_vocab *v, const char *s, size_t n) { return text_find2(v, s, n, NULL, 0); }

/* Makes ID the answer for its text, replacing an earlier id with the same
 * text (the last duplicate wins, as in llama.cpp). The table never fills:
 * it has twice as many slots as tokens. */
static void text_insert(tok_vocab *v, int32_t id) {
    const char *s = v->arena + v->off[id];
    uint32_t n = v->len[id];
    uint64_t h = hash_bytes(s, n, NULL, 0);
    uint32_t tag = (uint32_t)(h >> 32), mask = v->by_text.mask, i = (uint32_t)h & mask;
    for (; v->by_text.val[i]; i = (i + 1) & mask) {
        uint32_t old = v->by_text.val[i] - 1;
        if (v->by_text.tag[i] == tag && v->len[old] == n && !memcmp(v->arena + v->off[old], s, n)) break;
    }
    v->by_text.val[i] = (uint32_t)id + 1;
    v->by_text.tag[i] = tag;
}

/* Returns the rank of the merge (A, B), or -1. */
static int32_t merge_find(const tok_vocab *v, int32_t a, int32_t b) {
    uint64_t h = hash_pair(a, b);
    uint32_t tag = (uint32_t)(h >> 32), mask = v->by_pair.mask;
    for (uint32_t i = (uint32_t)h & mask; v->by_pair.val[i]; i = (i + 1) & mask) {
        uint32_t r = v->by_pair.val[i] - 1;
        if (v->by_pair.tag[i] == tag && v->merges[r].left == a && v->merges[r].right == b) return (int32_t)r;
    }
    return -1;
}

/* Adds rank R (whose pair is not yet present) to the pair table. */
static void merge_insert(tok_vocab *v, int32_t r) {
    uint64_t h = hash_pair(v->merges[r].left, v->merges[r].right);
    uint32_t mask = v->by_pair.mask, i = (uint32_t)h & mask;
    while (v->by_pair.val[i]) i = (i + 1) & mask;
    v->by_pair.val[i] = (uint32_t)r + 1;
    v->by_pair.tag[i] = (uint32_t)(h >> 32);
}

/* ---- loading ---- */

/* Writes "PATH: message" into ERR. */
__attribute__((format(printf, 4, 5))) static void load_err(const gguf_file *f, char *err, size_t errlen,
                                                           const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "%s: %s", f->path ? f->path : "(gguf)", msg);
}

/* Returns 1 when KV is an array of numbers with one element per token. */
static int per_token_numbers(const gguf_kv *kv, int n) {
    return kv->type == GGUF_TYPE_ARRAY && kv->arr_type != GGUF_TYPE_STRING && kv->arr_type != GGUF_TYPE_ARRAY &&
           kv->arr_len == (uint64_t)n;
}

/* Copies the token texts, scores and types of F into V and indexes the
 * texts. Returns 0, or -1 with the message in ERR. */
static int load_tokens(tok_vocab *v, const gguf_file *f, char *err, size_t errlen) {
    const gguf_kv *toks = gguf_kv_find(f, "tokenizer.ggml.tokens");
    if (!toks || toks->type != GGUF_TYPE_ARRAY || toks->arr_type != GGUF_TYPE_STRING || !toks->strs) {
        load_err(f, err, errlen, "missing string array 'tokenizer.ggml.tokens'");
        return -1;
    }
    if (toks->arr_len < 1 || toks->arr_len > TOK_MAX_VOCAB) {
        load_err(f, err, errlen, "%llu tokens is out of range (1 to %d)", (unsigned long long)toks->arr_len,
                 TOK_MAX_VOCAB);
        return -1;
    }
    v->n = (int)toks->arr_len;
    size_t total = 0;
    for (int i = 0; i < v->n; i++) {
        if (toks->strs[i].len > TOK_MAX_TEXT) {
            load_err(f, err, errlen, "token %d is %llu bytes long (at most %d)", i,
                     (unsigned long long)toks->strs[i].len, TOK_MAX_TEXT);
            return -1;
        }
        total += toks->strs[i].len + 1;
    }
    if (total > UINT32_MAX) {
        load_err(f, err, errlen, "the token texts take %zu bytes (at most 4 GiB)", total);
        return -1;
    }
    size_t n = (size_t)v->n;
    v->arena = malloc(total);
    v->off = malloc(n * sizeof *v->off);
    v->len = malloc(n * sizeof *v->len);
    v->score = calloc(n, sizeof *v->score);
    v->type = malloc(n);
    v->eog = calloc(n, 1);
    if (!v->arena || !v->off || !v->len || !v->score || !v->type || !v->eog || map_init(&v->by_text, (uint32_t)n)) {
        load_err(f, err, errlen, "out of memory loading %d tokens", v->n);
        return -1;
    }
    size_t at = 0;
    for (int i = 0; i < v->n; i++) {
        gguf_str s = toks->strs[i];
        v->off[i] = (uint32_t)at;
        v->len[i] = (uint32_t)s.len;
        if (s.len) memcpy(v->arena + at, s.ptr, s.len);
        at += s.len;
        v->arena[at++] = 0;
        if (v->len[i] > v->max_len) v->max_len = v->len[i];
        v->type[i] = TOK_TYPE_NORMAL;
    }

    const gguf_kv *sc = gguf_kv_find(f, "tokenizer.ggml.scores");
    if (sc && !per_token_numbers(sc, v->n)) {
        load_err(f, err, errlen, "'tokenizer.ggml.scores' must hold one number per token (%d)", v->n);
        return -1;
    }
    for (int i = 0; sc && i < v->n; i++) {
        double d = gguf_arr_num(sc, (uint64_t)i);
        v->score[i] = isnan(d) ? -INFINITY : (float)d;
    }
    const gguf_kv *tt = gguf_kv_find(f, "tokenizer.ggml.token_type");
    if (tt && !per_token_numbers(tt, v->n)) {
        load_err(f, err, errlen, "'tokenizer.ggml.token_type' must hold one number per token (%d)", v->n);
        return -1;
    }
    for (int i = 0; tt && i < v->n; i++) {
        double t = gguf_arr_num(tt, (uint64_t)i);
        v->type[i] = t >= TOK_TYPE_NORMAL && t <= TOK_TYPE_BYTE ? (uint8_t)t : TOK_TYPE_NORMAL;
    }
    for (int i = 0; i < v->n; i++)
        if (v->len[i]) text_insert(v, i);
    return 0;
}

/* Reads the special token id KEY into *ID: -1 when absent or negative, DEF
 * when absent and DEF is a valid id. Returns 0, or -1 with the message in
 * ERR when the value is not an integer or not a token id. */
static int load_id(const tok_vocab *v, const gguf_file *f, const char *key, int32_t def, int32_t *id, char *err,
                   size_t errlen) {
    int64_t x;
    int found = gguf_kv_get_i64(f, key, &x);
    if (found < 0) {
        load_err(f, err, errlen, "'%s' is not an integer", key);
        return -1;
    }
    if (!found) {
        *id = def >= 0 && def < v->n ? def : -1;
        return 0;
    }
    if (x >= v->n) {
        load_err(f, err, errlen, "'%s' = %lld is not a token id (the vocabulary has %d)", key, (long long)x, v->n);
        return -1;
    }
    *id = x < 0 ? -1 : (int32_t)x;
    return 0;
}

/* Orders special tokens by first byte, then longest text first, then id. */
static int special_cmp(const void *pa, const void *pb, void *ctx) {
    const tok_vocab *v = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    unsigned char fa = (unsigned char)v->arena[v->off[a]], fb = (unsigned char)v->arena[v->off[b]];
    if (fa != fb) return fa < fb ? -1 : 1;
    if (v->len[a] != v->len[b]) return v->len[a] > v->len[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Builds the special-token index and the end-of-generation flags. Returns
 * 0, or -1 with the message in ERR. */
static int load_specials(tok_vocab *v, const gguf_file *f, char *err, size_t errlen) {
    uint32_t count = 0;
    for (int i = 0; i < v->n; i++) {
        int t = v->type[i];
        if ((t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN) && v->len[i]) count++;
    }
    v->special = malloc((count ? count : 1) * sizeof *v->special);
    if (!v->special) {
        load_err(f, err, errlen, "out of memory indexing %u special tokens", count);
        return -1;
    }
    uint32_t k = 0;
    for (int i = 0; i < v->n; i++) {
        int t = v->type[i];
        if ((t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN) && v->len[i])
            v->special[k++] = i;
    }
    qsort_r(v->special, count, sizeof *v->special, special_cmp, v);
    k = 0;
    for (int b = 0; b < 256; b++) {
        v->special_at[b] = k;
        while (k < count && (unsigned char)v->arena[v->off[v->special[k]]] == b) k++;
    }
    v->special_at[256] = count;

    static const char *const eog_texts[] = {"<|eot_id|>",      "<|im_end|>", "<|end|>",    "<|endoftext|>",
                                            "<|end_of_text|>", "</s>",       "<|eom_id|>", "<end_of_turn>"};
    for (size_t i = 0; i < sizeof eog_texts / sizeof *eog_texts; i++) {
        int32_t id = text_find(v, eog_texts[i], strlen(eog_texts[i]));
        if (id >= 0 && (v->type[id] == TOK_TYPE_CONTROL || v->type[id] == TOK_TYPE_USER_DEFINED)) v->eog[id] = 1;
    }
    if (v->eos >= 0) v->eog[v->eos] = 1;
    if (v->eot >= 0) v->eog[v->eot] = 1;
    return 0;
}

/* Returns the pre-tokenizer regex for the tokenizer.ggml.pre value PRE
 * (NULL = absent), or NULL when PRE is not supported. Sets *whole_words for
 * the Llama 3 family (ignore_merges). */
static const char *pre_regex(const char *pre, int *whole_words) {
    static const char llama3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
                                 " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char qwen2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
                                " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char gpt2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    /* GPT-4o's (Phi-4-mini), in the form llama.cpp runs it: a letter that is not a-z counts as upper
     * case, one that is not A-Z as lower case (the tokenizer.json form says \p{Lu}, \p{Ll}) */
    static const char gpt4o[] =
        "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|"
        "'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|"
        "'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
        "\\s+(?!\\S)|\\s+";
    *whole_words = 0;
    if (!pre || !strcmp(pre, "default") || !strcmp(pre, "gpt2") || !strcmp(pre, "gpt-2")) return gpt2;
    if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3")) {
        *whole_words = 1;
        return llama3;
    }
    if (!strcmp(pre, "smaug-bpe")) return llama3;
    if (!strcmp(pre, "qwen2")) return qwen2;
    if (!strcmp(pre, "gpt-4o")) return gpt4o;
    return NULL;
}

/* Returns the UTF-8 length (1 or 2) of code point CP < 0x800, written to BUF. */
static size_t put_cp(char *buf, uint32_t cp) {
    if (cp < 0x80) {
        buf[0] = (char)cp;
        return 1;
    }
    buf[0] = (char)(0xC0 | (cp >> 6));
    buf[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Reads the BPE parts of F: the GPT-2 byte alphabet, the pre-tokenizer and
 * the merges. Returns 0, or -1 with the message in ERR. */
static int load_bpe(tok_vocab *v, const gguf_file *f, char *err, size_t errlen) {
    uint32_t next = 256;
    for (int i = 0; i < TOK_GPT2_CPS; i++) v->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        v->byte_cp[b] = printable ? (uint32_t)b : next++;
        v->cp_byte[v->byte_cp[b]] = (int16_t)b;
        char sym[2];
        v->byte_id[b] = text_find(v, sym, put_cp(sym, v->byte_cp[b]));
    }

    char *pre = gguf_kv_get_str(f, "tokenizer.ggml.pre");
    if (!pre && gguf_kv_find(f, "tokenizer.ggml.pre")) {
        load_err(f, err, errlen, "'tokenizer.ggml.pre' is not a string");
        return -1;
    }
    const char *re = pre_regex(pre, &v->ignore_merges);
    if (!re) {
        load_err(f, err, errlen, "unsupported pre-tokenizer '%s' (llama-bpe, llama3, qwen2, gpt2 and default are)",
                 pre);
        free(pre);
        return -1;
    }
    free(pre);
    int code;
    PCRE2_SIZE at;
    v->re = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    if (!v->re) {
        load_err(f, err, errlen, "cannot compile the pre-tokenizer regex (PCRE2 error %d)", code);
        return -1;
    }
    pcre2_jit_compile(v->re, PCRE2_JIT_COMPLETE); /* a speed-up only: the interpreter works without it */

    const gguf_kv *mg = gguf_kv_find(f, "tokenizer.ggml.merges");
    if (!mg || mg->type != GGUF_TYPE_ARRAY || mg->arr_type != GGUF_TYPE_STRING || !mg->strs) {
        load_err(f, err, errlen, "missing string array 'tokenizer.ggml.merges'");
        return -1;
    }
    if (mg->arr_len > TOK_MAX_VOCAB) {
        load_err(f, err, errlen, "%llu merges is too many (at most %d)", (unsigned long long)mg->arr_len,
                 TOK_MAX_VOCAB);
        return -1;
    }
    v->merges = malloc((mg->arr_len ? mg->arr_len : 1) * sizeof *v->merges);
    if (!v->merges || map_init(&v->by_pair, (uint32_t)mg->arr_len)) {
        load_err(f, err, errlen, "out of memory loading %llu merges", (unsigned long long)mg->arr_len);
        return -1;
    }
    for (uint64_t r = 0; r < mg->arr_len; r++) {
        gguf_str s = mg->strs[r];
        /* "left right": the separator is the first space after the first byte. */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp) continue;
        size_t nl = (size_t)(sp - s.ptr), nr = s.len - nl - 1;
        int32_t a = text_find(v, s.ptr, nl), b = text_find(v, sp + 1, nr);
        if (a < 0 || b < 0 || merge_find(v, a, b) >= 0) continue;
        int32_t out = text_find2(v, s.ptr, nl, sp + 1, nr);
        if (out < 0) continue;
        v->merges[v->n_merges] = (tok_merge){a, b, out};
        merge_insert(v, v->n_merges++);
    }
    return 0;
}

static int phi3_rstrip(tok_vocab *v, const gguf_file *f);

/* Returns a new vocabulary for F (the caller frees it with tok_vocab_free;
 * it copies what it needs, so F may be closed first), or NULL with
 * "PATH: problem" in ERR. */
tok_vocab *tok_vocab_load(const gguf_file *f, char *err, size_t errlen) {
    char *model = NULL;
    tok_vocab *v = calloc(1, sizeof *v);
    if (!v) {
        load_err(f, err, errlen, "out of memory");
        return NULL;
    }
    model = gguf_kv_get_str(f, "tokenizer.ggml.model");
    if (!model) {
        load_err(f, err, errlen, "missing string 'tokenizer.ggml.model'");
        goto fail;
    }
    if (!strcmp(model, "llama")) {
        v->kind = TOK_KIND_SPM;
    } else if (!strcmp(model, "gpt2")) {
        v->kind = TOK_KIND_BPE;
    } else {
        load_err(f, err, errlen, "unsupported tokenizer '%s' (llama and gpt2 are supported)", model);
        goto fail;
    }
    if (load_tokens(v, f, err, errlen)) goto fail;

    int spm = v->kind == TOK_KIND_SPM;
    if (load_id(v, f, "tokenizer.ggml.bos_token_id", spm ? 1 : -1, &v->bos, err, errlen) ||
        load_id(v, f, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, &v->eos, err, errlen) ||
        load_id(v, f, "tokenizer.ggml.eot_token_id", -1, &v->eot, err, errlen) ||
        load_id(v, f, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, &v->unk, err, errlen))
        goto fail;
    if (load_specials(v, f, err, errlen)) goto fail;

    int flag;
    v->add_bos = spm;
    v->add_space_prefix = spm;
    if (v->kind == TOK_KIND_BPE) {
        if (load_bpe(v, f, err, errlen)) goto fail;
        v->add_bos = v->ignore_merges; /* llama.cpp: only the Llama 3 family adds BOS by default */
    } else {
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            v->byte_id[b] = text_find(v, name, 6);
        }
    }
    if (gguf_kv_get_bool(f, "tokenizer.ggml.add_bos_token", &flag) == 1) v->add_bos = flag;
    if (gguf_kv_get_bool(f, "tokenizer.ggml.add_space_prefix", &flag) == 1) v->add_space_prefix = flag;
    if (v->bos < 0) v->add_bos = 0;
    if (phi3_rstrip(v, f)) {
        load_err(f, err, errlen, "out of memory loading %d tokens", v->n);
        goto fail;
    }
    free(model);
    return v;
fail:
    free(model);
    tok_vocab_free(v);
    return NULL;
}

/* Phi-3's special tokens take the whitespace after them (its tokenizer's
 * rstrip, which llama.cpp applies to files whose general.name says phi-3
 * or phi3): every special token but <unk>, <s> and <|endoftext|>, and </s>.
 * Returns 0, or -1 when out of memory. */
static int phi3_rstrip(tok_vocab *v, const gguf_file *f) {
    char *name = gguf_kv_get_str(f, "general.name");
    int phi3 = 0;
    for (char *c = name; c && *c; c++) *c = (char)tolower((unsigned char)*c);
    if (name) phi3 = strstr(name, "phi-3") || strstr(name, "phi3");
    free(name);
    if (!phi3) return 0;
    if (!(v->rstrip = calloc((size_t)v->n, 1))) return -1;
    for (uint32_t k = 0; k < v->special_at[256]; k++) v->rstrip[v->special[k]] = 1;
    int32_t id = text_find(v, "</s>", 4);
    if (id >= 0) v->rstrip[id] = 1;
    static const char *const off[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t i = 0; i < sizeof off / sizeof *off; i++)
        if ((id = text_find(v, off[i], strlen(off[i]))) >= 0) v->rstrip[id] = 0;
    return 0;
}

/* Frees V and everything it owns; NULL is allowed. */
void tok_vocab_free(tok_vocab *v) {
    if (!v) return;
    free(v->arena);
    free(v->off);
    free(v->len);
    free(v->score);
    free(v->type);
    free(v->eog);
    free(v->rstrip);
    free(v->special);
    free(v->merges);
    map_free(&v->by_text);
    map_free(&v->by_pair);
    if (v->re) pcre2_code_free(v->re);
    free(v);
}

/* ---- encoding ---- */

/* A symbol of the text being merged: a doubly linked list in an array. */
typedef struct {
    int32_t prev, next;  /* neighbours, -1 at the ends */
    uint32_t start, len; /* its bytes in the text; len 0 once merged into its left neighbour */
    int32_t id;          /* its token, or -1 when not known to be one */
} tok_sym;

/* A candidate merge of two adjacent symbols. */
typedef struct {
    float prio;           /* higher first: SPM the merged token's score, BPE -rank */
    int32_t left, right;  /* the symbols; ties go to the leftmost */
    uint32_t len;         /* bytes of the merged symbol, to recognise stale candidates */
    int32_t id;           /* the merged token */
} tok_cand;

/* The per-call state of tok_encode; it owns the scratch arrays. */
typedef struct {
    const tok_vocab *v;
    int32_t *out;
    int cap, n; /* the caller's buffer; n counts every id, also those past cap */
    int failed; /* out of memory, too long a text, or a regex error */
    tok_sym *sym;
    size_t sym_cap;
    tok_cand *heap;
    size_t heap_n, heap_cap;
    char *buf; /* SPM: the escaped fragment; BPE: a pre-token in the GPT-2 alphabet */
    size_t buf_cap;
    pcre2_match_data *md;
} tok_work;

/* Makes the array P (of *CAP elements of SIZE bytes) hold at least NEED.
 * Returns the array, moved or not (the old P is then stale), or NULL when
 * out of memory: W is marked failed and P is still valid and owned by W. */
static void *grow(tok_work *w, void *p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 64;
    while (c < need) c = c > SIZE_MAX / 2 ? need : c * 2;
    void *q = c > SIZE_MAX / size ? NULL : realloc(p, c * size);
    if (!q) {
        w->failed = 1;
        return NULL;
    }
    *cap = c;
    return q;
}

/* Appends ID to the output (ids < 0, i.e. missing tokens, are dropped). */
static void emit(tok_work *w, int32_t id) {
    if (id < 0) return;
    if (w->n == INT_MAX) {
        w->failed = 1;
        return;
    }
    if (w->n < w->cap) w->out[w->n] = id;
    w->n++;
}

/* Returns 1 when candidate A comes out of the queue before B. */
static int cand_before(const tok_cand *a, const tok_cand *b) {
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

/* Adds C to the queue (dropped, W marked failed, when out of memory). */
static void heap_push(tok_work *w, tok_cand c) {
    tok_cand *h = grow(w, w->heap, &w->heap_cap, w->heap_n + 1, sizeof *w->heap);
    if (!h) return;
    w->heap = h;
    size_t i = w->heap_n++;
    while (i > 0 && cand_before(&c, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = c;
}

/* Removes and returns the best candidate; the queue must not be empty. */
static tok_cand heap_pop(tok_work *w) {
    tok_cand top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = l;
        if (l >= n) break;
        if (r < n && cand_before(&w->heap[r], &w->heap[l])) m = r;
        if (!cand_before(&w->heap[m], &last)) break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (n) w->heap[i] = last;
    return top;
}

/* Queues the merge of symbols L and R (if both exist and may merge): SPM
 * when their text together is a token, BPE when the vocabulary has the pair
 * as a merge. TEXT is what the symbols index. */
static void queue_pair(tok_work *w, const char *text, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const tok_vocab *v = w->v;
    const tok_sym *L = &w->sym[l], *R = &w->sym[r];
    uint32_t len = L->len + R->len;
    if (v->kind == TOK_KIND_SPM) {
        if (len > v->max_len) return;
        int32_t id = text_find(v, text + L->start, len);
        if (id >= 0) heap_push(w, (tok_cand){v->score[id], l, r, len, id});
    } else {
        if (L->id < 0 || R->id < 0) return;
        int32_t rank = merge_find(v, L->id, R->id);
        if (rank >= 0) heap_push(w, (tok_cand){-(float)rank, l, r, len, v->merges[rank].out});
    }
}

/* Merges the NS symbols in w->sym (over TEXT) until no candidate is left:
 * always the best candidate, re-queueing the new symbol's two pairs. */
static void merge_symbols(tok_work *w, const char *text, int32_t ns) {
    w->heap_n = 0;
    for (int32_t i = 1; i < ns; i++) queue_pair(w, text, i - 1, i);
    while (w->heap_n && !w->failed) {
        tok_cand c = heap_pop(w);
        tok_sym *L = &w->sym[c.left], *R = &w->sym[c.right];
        if (!L->len || !R->len || L->len + R->len != c.len) continue; /* one side merged since */
        L->len = c.len;
        L->id = c.id;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0) w->sym[R->next].prev = c.left;
        queue_pair(w, text, L->prev, c.left);
        queue_pair(w, text, c.left, L->next);
    }
}

/* Returns the length of the UTF-8 sequence that starts with byte C (1 for a
 * byte that cannot start one), clamped to the N bytes left. */
static size_t utf8_len(unsigned char c, size_t n) {
    size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    return l < n ? l : n;
}

/* Returns the length of the character at S (N bytes left): its UTF-8 length
 * when all its continuation bytes are there, else 1 (an invalid byte is a
 * character of its own, so it cannot swallow the bytes of the next one). */
static size_t utf8_char(const char *s, size_t n) {
    size_t l = utf8_len((unsigned char)s[0], n);
    for (size_t k = 1; k < l; k++)
        if (((unsigned char)s[k] & 0xC0) != 0x80) return 1;
    return l;
}

/* SentencePiece-style encoding of N bytes of TEXT (spaces already U+2581):
 * start from the characters, merge by score, then emit each symbol's token
 * or, for a character without one, its byte tokens. */
static void spm_encode(tok_work *w, const char *text, size_t n) {
    const tok_vocab *v = w->v;
    if (n > INT32_MAX) {
        w->failed = 1;
        return;
    }
    int32_t ns = 0;
    for (size_t i = 0; i < n; i += utf8_char(text + i, n - i)) ns++;
    tok_sym *sym = grow(w, w->sym, &w->sym_cap, (size_t)ns, sizeof *w->sym);
    if (!sym) return;
    w->sym = sym;
    ns = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_char(text + i, n - i);
        w->sym[ns] = (tok_sym){ns - 1, ns + 1, (uint32_t)i, (uint32_t)l, -1};
        ns++;
        i += l;
    }
    w->sym[ns - 1].next = -1;
    merge_symbols(w, text, ns);
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        const tok_sym *s = &w->sym[i];
        int32_t id = s->id >= 0 ? s->id : text_find(v, text + s->start, s->len);
        if (id >= 0) {
            emit(w, id);
            continue;
        }
        for (uint32_t k = 0; k < s->len; k++) {
            int32_t b = v->byte_id[(unsigned char)text[s->start + k]];
            emit(w, b >= 0 ? b : v->unk);
        }
    }
}

/* SPM: encodes N bytes of raw text S, escaping spaces to U+2581 and, when
 * PREFIX, adding the dummy leading space. */
static void spm_fragment(tok_work *w, const char *s, size_t n, int prefix) {
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    char *buf = n > SIZE_MAX / 4 ? NULL : grow(w, w->buf, &w->buf_cap, n + 2 * spaces + 3, 1);
    if (!buf) {
        w->failed = 1;
        return;
    }
    w->buf = buf;
    size_t k = 0;
    if (prefix) {
        memcpy(w->buf, "\xE2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(w->buf + k, "\xE2\x96\x81", 3);
            k += 3;
        } else {
            w->buf[k++] = s[i];
        }
    }
    spm_encode(w, w->buf, k);
}

/* BPE: encodes one pre-token (N bytes at S): the whole word when the
 * vocabulary has it and the pre-tokenizer says so, else its bytes' symbols
 * merged by rank. A byte without a symbol token becomes the unknown token. */
static void bpe_word(tok_work *w, const unsigned char *s, size_t n) {
    const tok_vocab *v = w->v;
    if (!n) return;
    if (n > INT32_MAX) {
        w->failed = 1;
        return;
    }
    if (v->ignore_merges && n <= v->max_len) {
        char *buf = grow(w, w->buf, &w->buf_cap, 2 * n, 1);
        if (!buf) return;
        w->buf = buf;
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += put_cp(w->buf + m, v->byte_cp[s[i]]);
        int32_t whole = text_find(v, w->buf, m);
        if (whole >= 0) {
            emit(w, whole);
            return;
        }
    }
    tok_sym *sym = grow(w, w->sym, &w->sym_cap, n, sizeof *w->sym);
    if (!sym) return;
    w->sym = sym;
    int32_t ns = (int32_t)n;
    for (int32_t i = 0; i < ns; i++) w->sym[i] = (tok_sym){i - 1, i + 1, (uint32_t)i, 1, v->byte_id[s[i]]};
    w->sym[ns - 1].next = -1;
    merge_symbols(w, (const char *)s, ns);
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) emit(w, w->sym[i].id >= 0 ? w->sym[i].id : v->unk);
}

/* BPE: splits N bytes of raw text S with the pre-tokenizer regex and
 * encodes each piece. The regex runs over valid UTF-8; a byte that is not
 * part of valid UTF-8 is a piece of its own. */
static void bpe_fragment(tok_work *w, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t at = 0;
    while (at < n && !w->failed) {
        size_t run = utf8_valid_prefix((const char *)u + at, n - at);
        if (!run) {
            bpe_word(w, u + at, 1);
            at++;
            continue;
        }
        PCRE2_SIZE pos = 0;
        while (pos < run && !w->failed) {
            int rc = pcre2_match(w->v->re, u + at, run, pos, PCRE2_NO_UTF_CHECK, w->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) { /* cannot happen with our regexes: keep the rest whole */
                bpe_word(w, u + at + pos, run - pos);
                break;
            }
            if (rc < 0) {
                w->failed = 1;
                return;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
            if (ov[0] > pos) bpe_word(w, u + at + pos, ov[0] - pos); /* a gap the regex skipped */
            PCRE2_SIZE end = ov[1] > ov[0] ? ov[1] : ov[0] + utf8_len(u[at + ov[0]], run - ov[0]);
            bpe_word(w, u + at + ov[0], end - ov[0]);
            pos = end;
        }
        at += run;
    }
}

/* Returns the special token whose text starts the N bytes at S (the longest
 * when several do), or -1. Without PARSE_SPECIAL only user-defined tokens
 * count (as llama.cpp has it: Qwen's <think> is one token in any text). */
static int32_t special_at(const tok_vocab *v, const char *s, size_t n, int parse_special) {
    unsigned char b = (unsigned char)s[0];
    for (uint32_t k = v->special_at[b]; k < v->special_at[b + 1]; k++) {
        int32_t id = v->special[k];
        if (!parse_special && v->type[id] != TOK_TYPE_USER_DEFINED) continue;
        if (v->len[id] <= n && !memcmp(s, v->arena + v->off[id], v->len[id])) return id;
    }
    return -1;
}

/* Encodes the N bytes of raw text S (no special tokens in it); PREFIX asks
 * for SPM's dummy space. */
static void encode_fragment(tok_work *w, const char *s, size_t n, int prefix) {
    if (!n) return;
    if (w->v->kind == TOK_KIND_SPM) spm_fragment(w, s, n, prefix);
    else bpe_fragment(w, s, n);
}

/* Returns the number of ids TEXT encodes to (the first CAP of them written
 * to OUT, which stays the caller's), or -1 for bad arguments, an allocation
 * failure, more than INT_MAX ids or a regex engine error. */
/* tok_encode and tok_encode_piece: PREFIX says whether SPM's dummy space may go first. */
static int encode(const tok_vocab *v, const char *text, size_t len, int add_bos, int parse_special, int first_prefix,
                  int32_t *out, int cap) {
    if (!v || (!text && len) || cap < 0 || (cap > 0 && !out)) return -1;
    tok_work w = {.v = v, .out = out, .cap = cap};
    if (v->kind == TOK_KIND_BPE) {
        w.md = pcre2_match_data_create_from_pattern(v->re, NULL);
        if (!w.md) return -1;
    }
    if (add_bos && v->add_bos) emit(&w, v->bos);
    int prefix = first_prefix && v->add_space_prefix; /* SPM: before the first fragment and after each special token */
    size_t start = 0;
    for (size_t i = 0; i < len && !w.failed;) {
        int32_t sp = special_at(v, text + i, len - i, parse_special);
        if (sp < 0) {
            i++;
            continue;
        }
        if (i > start) {
            encode_fragment(&w, text + start, i - start, prefix);
            prefix = 0;
        }
        emit(&w, sp);
        prefix = first_prefix && v->add_space_prefix;
        i += v->len[sp];
        if (v->rstrip && v->rstrip[sp])
            while (i < len && strchr(" \t\n\v\f\r", text[i]) && text[i]) i++;
        start = i;
    }
    if (!w.failed) encode_fragment(&w, text + start, len - start, prefix);
    free(w.sym);
    free(w.heap);
    free(w.buf);
    if (w.md) pcre2_match_data_free(w.md);
    return w.failed ? -1 : w.n;
}

int tok_encode(const tok_vocab *v, const char *text, size_t len, int add_bos, int parse_special, int32_t *out,
               int cap) {
    return encode(v, text, len, add_bos, parse_special, 1, out, cap);
}

int tok_encode_piece(const tok_vocab *v, const char *text, size_t len, int32_t *out, int cap) {
    return encode(v, text, len, 0, 1, 0, out, cap);
}

/* ---- decoding and accessors ---- */

/* Returns the value of hex digit C, or -1. */
static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Returns the byte count of ID's decoded text (at most CAP bytes written to
 * the caller's BUF, no NUL added), or -1 for an invalid id or arguments. */
int tok_piece(const tok_vocab *v, int32_t id, char *buf, int cap) {
    if (!v || id < 0 || id >= v->n || cap < 0 || (cap > 0 && !buf)) return -1;
    const char *t = v->arena + v->off[id];
    size_t n = v->len[id];
    int k = 0;
#define PUT(c)                           \
    do {                                 \
        if (k < cap) buf[k] = (char)(c); \
        k++;                             \
    } while (0)
    switch (v->type[id]) {
    case TOK_TYPE_CONTROL:
    case TOK_TYPE_UNKNOWN: return 0;
    case TOK_TYPE_USER_DEFINED:
        for (size_t i = 0; i < n; i++) PUT(t[i]);
        return k;
    case TOK_TYPE_BYTE:
        if (v->kind == TOK_KIND_SPM && n == 6 && !memcmp(t, "<0x", 3) && t[5] == '>' && hex_digit(t[3]) >= 0 &&
            hex_digit(t[4]) >= 0) {
            PUT(hex_digit(t[3]) * 16 + hex_digit(t[4]));
            return k;
        }
        break;
    default: break;
    }
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)t[i];
        if (v->kind == TOK_KIND_SPM) {
            if (n - i >= 3 && !memcmp(t + i, "\xE2\x96\x81", 3)) {
                PUT(' ');
                i += 3;
            } else {
                PUT(c);
                i++;
            }
            continue;
        }
        /* BPE: undo the GPT-2 byte alphabet (one- and two-byte code points);
         * anything else is copied as it is. */
        size_t l = utf8_len(c, n - i);
        uint32_t cp = l == 1 ? c : l == 2 ? ((uint32_t)(c & 0x1F) << 6) | ((unsigned char)t[i + 1] & 0x3F) : UINT32_MAX;
        if (cp < TOK_GPT2_CPS && v->cp_byte[cp] >= 0) {
            PUT(v->cp_byte[cp]);
        } else {
            for (size_t j = 0; j < l; j++) PUT(t[i + j]);
        }
        i += l;
    }
#undef PUT
    return k;
}

/* Returns ID's stored text (owned by V, NUL-terminated, *LEN bytes), or NULL. */
const char *tok_text(const tok_vocab *v, int32_t id, size_t *len) {
    if (!v || id < 0 || id >= v->n) return NULL;
    if (len) *len = v->len[id];
    return v->arena + v->off[id];
}

/* Accessors: plain values read from V (see tokenizer.h). */
int32_t tok_find(const tok_vocab *v, const char *text) { return v && text ? text_find(v, text, strlen(text)) : -1; }
tok_kind tok_get_kind(const tok_vocab *v) { return v->kind; }
int tok_n_vocab(const tok_vocab *v) { return v->n; }
int32_t tok_bos(const tok_vocab *v) { return v->bos; }
int32_t tok_eos(const tok_vocab *v) { return v->eos; }
int tok_adds_bos(const tok_vocab *v) { return v->add_bos; }
int tok_is_eog(const tok_vocab *v, int32_t id) { return id >= 0 && id < v->n && v->eog[id]; }
tok_type tok_get_type(const tok_vocab *v, int32_t id) {
    return id >= 0 && id < v->n ? (tok_type)v->type[id] : TOK_TYPE_UNUSED;
}
