/* tokenizer.c - SentencePiece-style and byte-level BPE tokenizers over a
 * GGUF vocabulary (see tokenizer.h for the rules). */
#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_MAX_VOCAB (1 << 24)

/* Open-addressing hash table from byte strings (or id pairs) to ints. */
typedef struct {
    uint64_t *keys; /* hash of the key, 0 = empty */
    int32_t *vals;
    uint32_t cap;   /* power of two */
} tok_map;

/* A BPE merge: the ids of its left and right parts (indexed by rank). */
typedef struct {
    int32_t a, b;
} id_pair;

struct tok_vocab {
    tok_kind kind;
    int n;
    char *arena;         /* every token's text, NUL-separated */
    uint32_t *off, *len; /* of each token in the arena */
    float *score;
    uint8_t *type;
    tok_map by_text;     /* text -> id */
    tok_map merges;      /* (left id, right id) -> rank, BPE */
    id_pair *merge_pairs; /* the pair of each rank, to verify lookups */
    int32_t bos, eos, eot, unk;
    int add_bos, add_space_prefix, ignore_merges;
    int32_t byte_tok[256]; /* SPM: id of <0xNN>, or -1 */
    int32_t *special;    /* ids of control/user-defined/unknown tokens, longest text first */
    int n_special;
    uint8_t *eog;        /* per id: ends generation */
    pcre2_code *re;      /* BPE pre-tokenizer */
    uint32_t byte_to_cp[256]; /* GPT-2 byte -> code point */
    int16_t cp_to_byte[512];  /* inverse (code points < 512) */
};

/* 64-bit FNV-1a; never 0 (0 marks an empty slot). */
static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ? h : 1;
}

static uint64_t hash_pair(int32_t a, int32_t b) {
    uint64_t h = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    return h ? h : 1;
}

static int map_init(tok_map *m, uint32_t n) {
    m->cap = 16;
    while (m->cap < n * 2) m->cap <<= 1;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->vals = malloc(m->cap * sizeof *m->vals);
    return m->keys && m->vals ? 0 : -1;
}

static void map_free(tok_map *m) {
    free(m->keys);
    free(m->vals);
}

/* Text lookups compare the stored token text, so hash collisions are harmless. */
static int32_t text_find(const tok_vocab *v, const char *s, size_t n) {
    if (!v->by_text.cap) return -1;
    uint64_t h = hash_bytes(s, n);
    for (uint32_t i = (uint32_t)h & (v->by_text.cap - 1);; i = (i + 1) & (v->by_text.cap - 1)) {
        if (!v->by_text.keys[i]) return -1;
        if (v->by_text.keys[i] == h) {
            int32_t id = v->by_text.vals[i];
            if (v->len[id] == n && !memcmp(v->arena + v->off[id], s, n)) return id;
        }
    }
}

/* Inserts id under its text unless the text is already present (first id wins). */
static void text_insert(tok_vocab *v, int32_t id) {
    const char *s = v->arena + v->off[id];
    size_t n = v->len[id];
    if (text_find(v, s, n) >= 0) return;
    uint64_t h = hash_bytes(s, n);
    uint32_t i = (uint32_t)h & (v->by_text.cap - 1);
    while (v->by_text.keys[i]) i = (i + 1) & (v->by_text.cap - 1);
    v->by_text.keys[i] = h;
    v->by_text.vals[i] = id;
}

/* Merge ranks are keyed by the id pair; PAIRS (per rank) verifies a hit. */
static int32_t merge_rank(const tok_vocab *v, const id_pair *pairs, int32_t a, int32_t b) {
    if (!v->merges.cap) return -1;
    uint64_t h = hash_pair(a, b);
    for (uint32_t i = (uint32_t)h & (v->merges.cap - 1);; i = (i + 1) & (v->merges.cap - 1)) {
        if (!v->merges.keys[i]) return -1;
        int32_t r = v->merges.vals[i];
        if (v->merges.keys[i] == h && pairs[r].a == a && pairs[r].b == b) return r;
    }
}

__attribute__((format(printf, 4, 5))) static tok_vocab *load_fail(tok_vocab *v, char *err, size_t errlen,
                                                                  const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "%s", msg);
    tok_vocab_free(v);
    return NULL;
}

static void gpt2_byte_map(tok_vocab *v) {
    uint32_t next = 256;
    for (int i = 0; i < 512; i++) v->cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        v->byte_to_cp[b] = printable ? (uint32_t)b : next++;
        v->cp_to_byte[v->byte_to_cp[b]] = (int16_t)b;
    }
}

static const char *pre_regex(const char *pre) {
    static const char *llama3 =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char *qwen2 =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
        "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char *gpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    if (!pre || !strcmp(pre, "default") || !strcmp(pre, "gpt2") || !strcmp(pre, "gpt-2")) return gpt2;
    if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3") || !strcmp(pre, "smaug-bpe"))
        return llama3;
    if (!strcmp(pre, "qwen2")) return qwen2;
    return NULL;
}

static int by_len_desc(const void *a, const void *b, void *ctx) {
    const tok_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (v->len[x] != v->len[y]) return v->len[x] < v->len[y] ? 1 : -1;
    return x - y;
}

static int32_t id_key(const gguf_file *f, const char *key, int n, int32_t def) {
    int64_t id;
    if (gguf_kv_get_i64(f, key, &id) != 1 || id < 0 || id >= n) return def;
    return (int32_t)id;
}

tok_vocab *tok_vocab_load(const gguf_file *f, char *err, size_t errlen) {
    tok_vocab *v = calloc(1, sizeof *v);
    if (!v) return load_fail(NULL, err, errlen, "%s: out of memory", f->path);
    char *model = gguf_kv_get_str(f, "tokenizer.ggml.model");
    if (!model) return load_fail(v, err, errlen, "%s: missing 'tokenizer.ggml.model'", f->path);
    if (!strcmp(model, "llama")) v->kind = TOK_KIND_SPM;
    else if (!strcmp(model, "gpt2")) v->kind = TOK_KIND_BPE;
    else {
        snprintf(err, errlen, "%s: unsupported tokenizer '%s' (llama and gpt2 are supported)", f->path, model);
        free(model);
        tok_vocab_free(v);
        return NULL;
    }
    free(model);
    const gguf_kv *toks = gguf_kv_find(f, "tokenizer.ggml.tokens");
    if (!toks || toks->type != GGUF_TYPE_ARRAY || toks->arr_type != GGUF_TYPE_STRING)
        return load_fail(v, err, errlen, "%s: missing string array 'tokenizer.ggml.tokens'", f->path);
    if (toks->arr_len < 1 || toks->arr_len > TOK_MAX_VOCAB)
        return load_fail(v, err, errlen, "%s: %llu tokens is out of range", f->path, (unsigned long long)toks->arr_len);
    v->n = (int)toks->arr_len;
    size_t total = 0;
    for (int i = 0; i < v->n; i++) {
        if (toks->strs[i].len > 4096) return load_fail(v, err, errlen, "%s: token %d is longer than 4096 bytes", f->path, i);
        total += toks->strs[i].len + 1;
    }
    v->arena = malloc(total);
    v->off = malloc((size_t)v->n * sizeof *v->off);
    v->len = malloc((size_t)v->n * sizeof *v->len);
    v->score = calloc((size_t)v->n, sizeof *v->score);
    v->type = malloc((size_t)v->n);
    v->eog = calloc((size_t)v->n, 1);
    v->special = malloc((size_t)v->n * sizeof *v->special);
    if (!v->arena || !v->off || !v->len || !v->score || !v->type || !v->eog || !v->special ||
        map_init(&v->by_text, (uint32_t)v->n))
        return load_fail(v, err, errlen, "%s: out of memory loading %d tokens", f->path, v->n);
    size_t at = 0;
    for (int i = 0; i < v->n; i++) {
        v->off[i] = (uint32_t)at;
        v->len[i] = (uint32_t)toks->strs[i].len;
        memcpy(v->arena + at, toks->strs[i].ptr, toks->strs[i].len);
        at += toks->strs[i].len;
        v->arena[at++] = 0;
        v->type[i] = TOK_TYPE_NORMAL;
    }
    const gguf_kv *sc = gguf_kv_find(f, "tokenizer.ggml.scores");
    if (sc) {
        if (sc->type != GGUF_TYPE_ARRAY || sc->arr_type == GGUF_TYPE_STRING || sc->arr_len != (uint64_t)v->n)
            return load_fail(v, err, errlen, "%s: 'tokenizer.ggml.scores' must hold one number per token", f->path);
        for (int i = 0; i < v->n; i++) v->score[i] = (float)gguf_arr_num(sc, (uint64_t)i);
    }
    const gguf_kv *tt = gguf_kv_find(f, "tokenizer.ggml.token_type");
    if (tt) {
        if (tt->type != GGUF_TYPE_ARRAY || tt->arr_type == GGUF_TYPE_STRING || tt->arr_len != (uint64_t)v->n)
            return load_fail(v, err, errlen, "%s: 'tokenizer.ggml.token_type' must hold one number per token", f->path);
        for (int i = 0; i < v->n; i++) {
            double t = gguf_arr_num(tt, (uint64_t)i);
            v->type[i] = t >= 1 && t <= 6 ? (uint8_t)t : TOK_TYPE_NORMAL;
        }
    }
    for (int i = 0; i < v->n; i++) text_insert(v, i);

    v->unk = id_key(f, "tokenizer.ggml.unknown_token_id", v->n, -1);
    v->bos = id_key(f, "tokenizer.ggml.bos_token_id", v->n, -1);
    v->eos = id_key(f, "tokenizer.ggml.eos_token_id", v->n, -1);
    v->eot = id_key(f, "tokenizer.ggml.eot_token_id", v->n, -1);
    int flag;
    v->add_bos = v->kind == TOK_KIND_SPM;
    if (gguf_kv_get_bool(f, "tokenizer.ggml.add_bos_token", &flag) == 1) v->add_bos = flag;
    if (v->bos < 0) v->add_bos = 0;
    v->add_space_prefix = v->kind == TOK_KIND_SPM;
    if (gguf_kv_get_bool(f, "tokenizer.ggml.add_space_prefix", &flag) == 1) v->add_space_prefix = flag;

    static const char *eog_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", "<|end_of_text|>",
                                      "</s>", "<|eom_id|>", "<end_of_turn>"};
    for (size_t i = 0; i < sizeof eog_texts / sizeof *eog_texts; i++) {
        int32_t id = text_find(v, eog_texts[i], strlen(eog_texts[i]));
        if (id >= 0 && (v->type[id] == TOK_TYPE_CONTROL || v->type[id] == TOK_TYPE_USER_DEFINED)) v->eog[id] = 1;
    }
    if (v->eos >= 0) v->eog[v->eos] = 1;
    if (v->eot >= 0) v->eog[v->eot] = 1;

    for (int i = 0; i < v->n; i++) {
        int t = v->type[i];
        if ((t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN) && v->len[i] > 0)
            v->special[v->n_special++] = i;
    }
    qsort_r(v->special, (size_t)v->n_special, sizeof *v->special, by_len_desc, v);

    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        v->byte_tok[b] = text_find(v, name, 6);
    }

    if (v->kind == TOK_KIND_BPE) {
        gpt2_byte_map(v);
        char *pre = gguf_kv_get_str(f, "tokenizer.ggml.pre");
        const char *re = pre_regex(pre);
        v->ignore_merges = pre && (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3"));
        if (!re) {
            snprintf(err, errlen, "%s: unsupported pre-tokenizer '%s' (llama-bpe, qwen2, gpt2)", f->path, pre);
            free(pre);
            tok_vocab_free(v);
            return NULL;
        }
        free(pre);
        int ec;
        PCRE2_SIZE eo;
        v->re = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (!v->re) return load_fail(v, err, errlen, "%s: cannot compile the pre-tokenizer regex", f->path);
        pcre2_jit_compile(v->re, PCRE2_JIT_COMPLETE); /* optional speed-up */
        const gguf_kv *mg = gguf_kv_find(f, "tokenizer.ggml.merges");
        if (!mg || mg->type != GGUF_TYPE_ARRAY || mg->arr_type != GGUF_TYPE_STRING)
            return load_fail(v, err, errlen, "%s: missing string array 'tokenizer.ggml.merges'", f->path);
        if (mg->arr_len > TOK_MAX_VOCAB) return load_fail(v, err, errlen, "%s: too many merges", f->path);
        id_pair *pairs = malloc((mg->arr_len ? mg->arr_len : 1) * sizeof *pairs);
        if (!pairs || map_init(&v->merges, (uint32_t)mg->arr_len)) {
            free(pairs);
            return load_fail(v, err, errlen, "%s: out of memory loading merges", f->path);
        }
        for (uint64_t r = 0; r < mg->arr_len; r++) {
            gguf_str s = mg->strs[r];
            const char *sp = memchr(s.ptr + (s.len > 0), ' ', s.len > 0 ? s.len - 1 : 0);
            pairs[r].a = pairs[r].b = -1;
            if (!sp) continue;
            int32_t a = text_find(v, s.ptr, (size_t)(sp - s.ptr));
            int32_t b = text_find(v, sp + 1, s.len - (size_t)(sp - s.ptr) - 1);
            if (a < 0 || b < 0 || merge_rank(v, pairs, a, b) >= 0) continue;
            pairs[r].a = a;
            pairs[r].b = b;
            uint64_t h = hash_pair(a, b);
            uint32_t i = (uint32_t)h & (v->merges.cap - 1);
            while (v->merges.keys[i]) i = (i + 1) & (v->merges.cap - 1);
            v->merges.keys[i] = h;
            v->merges.vals[i] = (int32_t)r;
        }
        v->merge_pairs = pairs;
    }
    return v;
}

void tok_vocab_free(tok_vocab *v) {
    if (!v) return;
    free(v->arena);
    free(v->off);
    free(v->len);
    free(v->score);
    free(v->type);
    free(v->eog);
    free(v->special);
    free(v->merge_pairs);
    map_free(&v->by_text);
    map_free(&v->merges);
    if (v->re) pcre2_code_free(v->re);
    free(v);
}

/* A growing list of ids. */
typedef struct {
    int32_t *ids;
    int n, cap, failed;
} id_vec;

static void vec_push(id_vec *o, int32_t id) {
    if (o->failed || id < 0) return;
    if (o->n == o->cap) {
        int cap = o->cap ? o->cap * 2 : 64;
        int32_t *p = realloc(o->ids, (size_t)cap * sizeof *p);
        if (!p) {
            o->failed = 1;
            return;
        }
        o->ids = p;
        o->cap = cap;
    }
    o->ids[o->n++] = id;
}

/* Length of the UTF-8 sequence that starts with C (1 for invalid bytes),
 * clamped to the N bytes left. */
static size_t utf8_len(unsigned char c, size_t n) {
    size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    return l < n ? l : n;
}

/* Emits the bytes of S one by one as byte tokens (or unk). */
static void spm_bytes(const tok_vocab *v, const char *s, size_t n, id_vec *out) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = v->byte_tok[(unsigned char)s[i]];
        vec_push(out, id >= 0 ? id : v->unk);
    }
}

typedef struct {
    int prev, next;
    uint32_t start, len;
} spm_sym;

typedef struct {
    int left, right;
    float score;
    uint32_t size;
} spm_bigram;

/* Max-heap on score, then on the leftmost position. */
static int bigram_before(const spm_bigram *a, const spm_bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct {
    spm_bigram *h;
    int n, cap, failed;
} bigram_heap;

static void heap_push(bigram_heap *q, spm_bigram b) {
    if (q->n == q->cap) {
        int cap = q->cap ? q->cap * 2 : 64;
        spm_bigram *p = realloc(q->h, (size_t)cap * sizeof *p);
        if (!p) {
            q->failed = 1;
            return;
        }
        q->h = p;
        q->cap = cap;
    }
    int i = q->n++;
    q->h[i] = b;
    while (i > 0 && bigram_before(&q->h[i], &q->h[(i - 1) / 2])) {
        spm_bigram t = q->h[i];
        q->h[i] = q->h[(i - 1) / 2];
        q->h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static spm_bigram heap_pop(bigram_heap *q) {
    spm_bigram top = q->h[0];
    q->h[0] = q->h[--q->n];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < q->n && bigram_before(&q->h[l], &q->h[m])) m = l;
        if (r < q->n && bigram_before(&q->h[r], &q->h[m])) m = r;
        if (m == i) break;
        spm_bigram t = q->h[i];
        q->h[i] = q->h[m];
        q->h[m] = t;
        i = m;
    }
    return top;
}

static void spm_try_bigram(const tok_vocab *v, const char *text, const spm_sym *sym, int l, int r, bigram_heap *q) {
    if (l < 0 || r < 0) return;
    uint32_t size = sym[l].len + sym[r].len;
    int32_t id = text_find(v, text + sym[l].start, size);
    if (id < 0) return;
    heap_push(q, (spm_bigram){l, r, v->score[id], size});
}

/* SentencePiece-style: merge the best-scoring adjacent pair until none is a
 * token; characters without a token fall back to byte tokens. TEXT already
 * has spaces escaped as U+2581. */
static void spm_encode(const tok_vocab *v, const char *text, size_t n, id_vec *out) {
    if (!n) return;
    spm_sym *sym = malloc(n * sizeof *sym);
    bigram_heap q = {0};
    if (!sym) {
        out->failed = 1;
        return;
    }
    int ns = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_len((unsigned char)text[i], n - i);
        sym[ns] = (spm_sym){ns - 1, ns + 1, (uint32_t)i, (uint32_t)l};
        ns++;
        i += l;
    }
    sym[ns - 1].next = -1;
    for (int i = 1; i < ns; i++) spm_try_bigram(v, text, sym, i - 1, i, &q);
    while (q.n) {
        spm_bigram b = heap_pop(&q);
        spm_sym *L = &sym[b.left], *R = &sym[b.right];
        if (!L->len || !R->len || L->len + R->len != b.size) continue; /* stale */
        L->len += R->len;
        R->len = 0;
        L->next = R->next;
        if (R->next >= 0) sym[R->next].prev = b.left;
        spm_try_bigram(v, text, sym, L->prev, b.left, &q);
        spm_try_bigram(v, text, sym, b.left, L->next, &q);
    }
    if (q.failed) out->failed = 1;
    for (int i = 0; i >= 0 && i < ns; i = sym[i].next) {
        int32_t id = text_find(v, text + sym[i].start, sym[i].len);
        if (id >= 0) vec_push(out, id);
        else spm_bytes(v, text + sym[i].start, sym[i].len, out);
    }
    free(q.h);
    free(sym);
}

/* A raw-text fragment for SPM: optional dummy space, spaces -> U+2581. */
static void spm_fragment(const tok_vocab *v, const char *s, size_t n, int prefix, id_vec *out) {
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++) spaces += s[i] == ' ';
    char *buf = malloc(n + 2 * spaces + 4);
    if (!buf) {
        out->failed = 1;
        return;
    }
    size_t k = 0;
    if (prefix) {
        memcpy(buf, "\xE2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(buf + k, "\xE2\x96\x81", 3);
            k += 3;
        } else {
            buf[k++] = s[i];
        }
    }
    spm_encode(v, buf, k, out);
    free(buf);
}

/* Appends the UTF-8 encoding of code point CP to BUF; returns the length. */
static int put_utf8(char *buf, uint32_t cp) {
    if (cp < 0x80) {
        buf[0] = (char)cp;
        return 1;
    }
    buf[0] = (char)(0xC0 | (cp >> 6));
    buf[1] = (char)(0x80 | (cp & 0x3F));
    return 2; /* the GPT-2 alphabet stays below U+0800 */
}

/* One pre-token of byte-level BPE: map the bytes to the GPT-2 alphabet, take
 * the whole word when the vocabulary has it (llama3), else merge pairs by
 * rank until none applies. */
static void bpe_word(const tok_vocab *v, const unsigned char *w, size_t n, id_vec *out) {
    char *mapped = calloc(2 * n + 1, 1);
    uint32_t *st = malloc((n + 1) * sizeof *st); /* start of symbol i in mapped; st[ns] = end */
    int32_t *id = malloc(n * sizeof *id);
    if (!mapped || !st || !id) {
        out->failed = 1;
        goto done;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        st[i] = (uint32_t)m;
        m += (size_t)put_utf8(mapped + m, v->byte_to_cp[w[i]]);
    }
    st[n] = (uint32_t)m;
    if (v->ignore_merges) {
        int32_t whole = text_find(v, mapped, m);
        if (whole >= 0) {
            vec_push(out, whole);
            goto done;
        }
    }
    int ns = (int)n;
    for (int i = 0; i < ns; i++) id[i] = text_find(v, mapped + st[i], st[i + 1] - st[i]);
    for (;;) {
        int best = -1;
        int32_t best_rank = INT32_MAX;
        for (int i = 0; i + 1 < ns; i++) {
            if (id[i] < 0 || id[i + 1] < 0) continue;
            int32_t r = merge_rank(v, v->merge_pairs, id[i], id[i + 1]);
            if (r >= 0 && r < best_rank) {
                best_rank = r;
                best = i;
            }
        }
        if (best < 0) break;
        int32_t merged = text_find(v, mapped + st[best], st[best + 2] - st[best]);
        if (merged < 0) break;
        id[best] = merged;
        memmove(id + best + 1, id + best + 2, (size_t)(ns - best - 2) * sizeof *id);
        memmove(st + best + 1, st + best + 2, (size_t)(ns - best - 1) * sizeof *st);
        ns--;
    }
    for (int i = 0; i < ns; i++) vec_push(out, id[i] >= 0 ? id[i] : v->unk);
done:
    free(mapped);
    free(st);
    free(id);
}

/* Valid UTF-8 prefix length of S (at most N). */
static size_t utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t l = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!l || i + l > n) break;
        for (size_t k = 1; k < l; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0) || (c == 0xF0 && s[i + 1] < 0x90) ||
            (c == 0xF4 && s[i + 1] >= 0x90))
            break;
        i += l;
    }
    return i;
}

/* A raw-text fragment for BPE: pre-split with the regex over valid UTF-8
 * runs; an invalid byte is a word of its own. */
static void bpe_fragment(const tok_vocab *v, const char *s, size_t n, id_vec *out) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(v->re, NULL);
    if (!md) {
        out->failed = 1;
        return;
    }
    const unsigned char *u = (const unsigned char *)s;
    size_t at = 0;
    while (at < n) {
        size_t run = utf8_valid(u + at, n - at);
        if (!run) {
            bpe_word(v, u + at, 1, out);
            at++;
            continue;
        }
        PCRE2_SIZE pos = 0;
        while (pos < run) {
            int rc = pcre2_match(v->re, u + at, run, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc < 0) { /* no further match: the rest is one word */
                bpe_word(v, u + at + pos, run - pos, out);
                break;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (ov[0] > pos) bpe_word(v, u + at + pos, ov[0] - pos, out); /* unmatched gap */
            if (ov[1] == ov[0]) { /* empty match: take one character */
                size_t l = utf8_len(u[at + ov[0]], run - ov[0]);
                bpe_word(v, u + at + ov[0], l, out);
                pos = ov[0] + l;
            } else {
                bpe_word(v, u + at + ov[0], ov[1] - ov[0], out);
                pos = ov[1];
            }
        }
        at += run;
    }
    pcre2_match_data_free(md);
}

/* The special token whose text starts at S (N bytes left), longest first;
 * control and unknown tokens only with PARSE_SPECIAL. Returns -1 if none. */
static int32_t special_at(const tok_vocab *v, const char *s, size_t n, int parse_special) {
    for (int i = 0; i < v->n_special; i++) {
        int32_t id = v->special[i];
        if (v->len[id] > n || memcmp(s, v->arena + v->off[id], v->len[id])) continue;
        if (!parse_special && v->type[id] != TOK_TYPE_USER_DEFINED) continue;
        return id;
    }
    return -1;
}

int tok_encode(const tok_vocab *v, const char *text, size_t len, int add_bos, int parse_special, int32_t *out,
               int cap) {
    id_vec o = {0};
    if (add_bos && v->add_bos) vec_push(&o, v->bos);
    int prev_special = 1; /* SPM: the first fragment gets the dummy space */
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        int32_t sp = i < len && v->n_special ? special_at(v, text + i, len - i, parse_special) : -1;
        if (sp < 0 && i < len) continue;
        if (i > start) {
            if (v->kind == TOK_KIND_SPM) spm_fragment(v, text + start, i - start, v->add_space_prefix && prev_special, &o);
            else bpe_fragment(v, text + start, i - start, &o);
            prev_special = 0;
        }
        if (sp >= 0) {
            vec_push(&o, sp);
            prev_special = 1;
            i += v->len[sp] - 1;
            start = i + 1;
        }
    }
    int n = o.failed ? -1 : o.n;
    if (n > 0) memcpy(out, o.ids, (size_t)(n < cap ? n : cap) * sizeof *out);
    free(o.ids);
    return n;
}

int tok_piece(const tok_vocab *v, int32_t id, char *buf, int cap) {
    if (id < 0 || id >= v->n) return -1;
    const char *t = v->arena + v->off[id];
    size_t n = v->len[id];
    int k = 0;
#define PUT(c)                             \
    do {                                   \
        if (k < cap) buf[k] = (char)(c);   \
        k++;                               \
    } while (0)
    switch (v->type[id]) {
    case TOK_TYPE_CONTROL: return 0;
    case TOK_TYPE_BYTE:
        if (v->kind == TOK_KIND_SPM && n == 6) {
            PUT(strtol(t + 3, NULL, 16));
            return k;
        }
        break;
    case TOK_TYPE_USER_DEFINED:
        for (size_t i = 0; i < n; i++) PUT(t[i]);
        return k;
    default: break;
    }
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)t[i];
        if (v->kind == TOK_KIND_SPM) {
            if (i + 3 <= n && !memcmp(t + i, "\xE2\x96\x81", 3)) {
                PUT(' ');
                i += 3;
            } else {
                PUT(c);
                i++;
            }
            continue;
        }
        size_t l = utf8_len(c, n - i);
        uint32_t cp = l == 1 ? c : l == 2 ? ((uint32_t)(c & 0x1F) << 6) | (t[i + 1] & 0x3F) : 0x10000;
        if (cp < 512 && v->cp_to_byte[cp] >= 0) {
            PUT(v->cp_to_byte[cp]);
        } else {
            for (size_t j = 0; j < l; j++) PUT(t[i + j]);
        }
        i += l;
    }
#undef PUT
    return k;
}

const char *tok_text(const tok_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n) return NULL;
    *len = v->len[id];
    return v->arena + v->off[id];
}

int32_t tok_find(const tok_vocab *v, const char *text) { return text_find(v, text, strlen(text)); }
tok_kind tok_get_kind(const tok_vocab *v) { return v->kind; }
int tok_n_vocab(const tok_vocab *v) { return v->n; }
int32_t tok_bos(const tok_vocab *v) { return v->bos; }
int32_t tok_eos(const tok_vocab *v) { return v->eos; }
int tok_adds_bos(const tok_vocab *v) { return v->add_bos; }
int tok_is_eog(const tok_vocab *v, int32_t id) { return id >= 0 && id < v->n && v->eog[id]; }
tok_type tok_get_type(const tok_vocab *v, int32_t id) { return id >= 0 && id < v->n ? (tok_type)v->type[id] : TOK_TYPE_UNUSED; }
