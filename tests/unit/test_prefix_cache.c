/* test_prefix_cache.c - the prompt cache (engine/prefix_cache.h) and its
 * use by the engine.
 *  - the cache: the longest kept prompt that is a proper prefix, never
 *    another tenant's; eviction within the budget (expired first, then the
 *    least recently used, hinted entries last); an entry larger than the
 *    budget refused; the counts;
 *  - the engine, on the demo model with its probe: a three-turn chat gives
 *    the tokens, the mask and the probe's confidence of an engine without
 *    the cache, in lossless, approximate and off mode, while turns 2 and 3
 *    read the earlier prompt from the cache; another tenant reads nothing;
 *    a kept prompt that lacks a layer the request computes (approximate
 *    mode with a forced mask) is not used, nor one computed with a layer the
 *    request skips (a layer's KV depends on every layer below it), and the
 *    answer is still the same; a prompt only a few tokens longer than a kept one prefills whole.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/prefix_cache.h"
#include "tests/unit/check.h"

#define MODEL "models/ilpd-demo-F16.gguf"
#define PROBE "config/probes/ilpd-demo-F16.json"

static pcache_entry *entry(uint64_t key, const int32_t *tok, int n, int hinted, double expires) {
    uint8_t has[2] = {1, 0};
    pcache_entry *e = pcache_entry_new(key, tok, n, 2, has, 100, 8);
    if (e) {
        e->hinted = hinted;
        e->expires = expires;
    }
    return e;
}

static void test_cache(void) {
    int32_t t[64];
    for (int i = 0; i < 64; i++) t[i] = i + 1;
    pcache_entry *probe_size = entry(1, t, 10, 0, 1e9); /* bytes of a 10-token entry */
    size_t e10 = probe_size->bytes;
    pcache_entry_free(probe_size);
    pcache *c = pcache_new(20 * e10);
    CHECK(c != NULL, "a cache");
    CHECK(!pcache_put(c, entry(1, t, 10, 0, 1e9), 0) && !pcache_put(c, entry(1, t, 20, 0, 1e9), 0) &&
              !pcache_put(c, entry(2, t, 30, 0, 1e9), 0),
          "three entries kept");
    const pcache_entry *h = pcache_find(c, 1, t, 40, 0, NULL, NULL);
    CHECK(h && h->n == 20, "the longest kept prompt of the tenant that starts the request (%d)", h ? h->n : -1);
    h = pcache_find(c, 1, t, 20, 0, NULL, NULL);
    CHECK(h && h->n == 10, "a proper prefix only: the whole prompt kept again is not read from the cache");
    int32_t other[40];
    memcpy(other, t, sizeof other);
    other[5] = 999;
    CHECK(!pcache_find(c, 1, other, 40, 0, NULL, NULL), "a different token before the end: no entry");
    CHECK(!pcache_find(c, 3, t, 40, 0, NULL, NULL), "another tenant's prompts are never read");
    h = pcache_find(c, 2, t, 40, 0, NULL, NULL);
    CHECK(h && h->n == 30, "each tenant its own");
    pcache_stats s;
    pcache_get_stats(c, &s);
    CHECK(s.hits == 3 && s.misses == 2 && s.tokens_reused == 20 + 10 + 30 && s.entries == 3,
          "counts: hits %llu, misses %llu, tokens %llu", (unsigned long long)s.hits, (unsigned long long)s.misses,
          (unsigned long long)s.tokens_reused);
    pcache_free(c);

    /* eviction: a budget for two and a half 30-token entries */
    pcache_entry *big = entry(1, t, 30, 0, 1e9);
    size_t eb = big->bytes;
    pcache_entry_free(big);
    c = pcache_new(2 * eb + eb / 2);
    pcache_put(c, entry(1, t, 30, 1, 1e9), 0); /* hinted, oldest */
    pcache_put(c, entry(2, t, 30, 0, 1e9), 0); /* unhinted */
    pcache_find(c, 1, t, 40, 0, NULL, NULL);  /* the hinted one used last */
    pcache_put(c, entry(3, t, 30, 0, 1e9), 0);
    pcache_get_stats(c, &s);
    CHECK(s.entries == 2 && s.evictions == 1 && s.bytes <= pcache_budget(c) && !pcache_find(c, 2, t, 40, 0, NULL, NULL) &&
              pcache_find(c, 1, t, 40, 0, NULL, NULL),
          "over the budget: the least recently used unhinted entry goes (bytes %zu of %zu)", s.bytes, pcache_budget(c));
    pcache_free(c);
    c = pcache_new(2 * eb + eb / 2);
    pcache_put(c, entry(4, t, 30, 0, 5), 0); /* expires at t = 5 */
    pcache_put(c, entry(5, t, 30, 0, 1e9), 0);
    CHECK(pcache_find(c, 4, t, 40, 1, NULL, NULL), "an entry before it expires is read");
    CHECK(!pcache_find(c, 4, t, 40, 10, NULL, NULL), "an expired entry is not read");
    pcache_put(c, entry(6, t, 30, 0, 1e9), 10);
    CHECK(pcache_find(c, 5, t, 40, 10, NULL, NULL) && pcache_find(c, 6, t, 40, 10, NULL, NULL),
          "an expired entry is evicted before a live one that was used less recently");
    for (int i = 0; i < 200; i++) pcache_put(c, entry(100 + (uint64_t)i, t, 30, i % 3 == 0, 1e9), 10);
    pcache_get_stats(c, &s);
    CHECK(s.bytes <= pcache_budget(c) && s.entries <= 2, "200 more prompts: the budget holds (%zu of %zu bytes)", s.bytes,
          pcache_budget(c));
    pcache_free(c);
    c = pcache_new(eb / 2);
    CHECK(pcache_put(c, entry(7, t, 30, 0, 1e9), 0) == -1, "an entry larger than the whole budget is refused");
    pcache_free(c);
}

typedef struct {
    int32_t toks[128];
    int n;
} run_out;

static int on_token(void *ud, int32_t id) {
    run_out *r = ud;
    if (r->n < 128) r->toks[r->n++] = id;
    return 0;
}

static void run(engine *e, const int32_t *prompt, int n, engine_gen_params gp, run_out *out, engine_result *res) {
    memset(out, 0, sizeof *out);
    engine_callbacks cb = {.on_token = on_token, .ud = out};
    engine_generate(e, prompt, n, &gp, &cb, res);
}

static int same(const run_out *a, const engine_result *ra, const run_out *b, const engine_result *rb, int n_layers) {
    return a->n == b->n && !memcmp(a->toks, b->toks, sizeof(int32_t) * (size_t)a->n) && ra->reason == rb->reason &&
           !memcmp(ra->mask, rb->mask, (size_t)n_layers) && ra->probe_confidence == rb->probe_confidence;
}

static const char *SYS = "You are a helpful assistant.";
static const char *USERS[3] = {
    "Classify this customer message as shipping, returns, product or payment.\nMessage: Where is my order A-48213? "
    "It was supposed to arrive last week.",
    "Is a lemon a fruit?",
    "Tell me a story about a little girl named Lily."};

/* The prompt of turn T (0..2) of the chat, with the answers ANS given so
 * far. Returns its length (*out owned by the caller). */
static int turn_prompt(engine *e, int t, char ans[3][2048], int32_t **out) {
    engine_message m[5];
    int n = 0;
    for (int i = 0; i <= t; i++) {
        m[n++] = (engine_message){.role = ENGINE_ROLE_USER, .text = USERS[i]};
        if (i < t) m[n++] = (engine_message){.role = ENGINE_ROLE_ASSISTANT, .text = ans[i]};
    }
    char err[256];
    return engine_prompt_build(e, SYS, NULL, m, n, 0, out, err, sizeof err);
}

static int on_text(void *ud, const char *t, size_t n) {
    char *s = ud;
    size_t len = strlen(s);
    if (len + n < 2048) {
        memcpy(s + len, t, n);
        s[len + n] = 0;
    }
    return 0;
}

/* The three answers of the chat, greedy, on E (no cache use). */
static void chat_answers(engine *e, char ans[3][2048]) {
    for (int t = 0; t < 3; t++) {
        int32_t *p = NULL;
        int n = turn_prompt(e, t, ans, &p);
        engine_gen_params gp = {.max_tokens = 40, .top_p = 1, .skip_mode = ENGINE_SKIP_OFF, .cache_off = 1};
        engine_callbacks cb = {.on_text = on_text, .ud = ans[t]};
        engine_result r;
        ans[t][0] = 0;
        if (n > 0) engine_generate(e, p, n, &gp, &cb, &r);
        free(p);
    }
}

static void test_engine(int kv_f16) {
    char err[512];
    engine_params p = {.model_path = MODEL, .n_threads = 2, .device = ENGINE_DEVICE_CPU, .layer_skip = 1, .probe_path = PROBE,
                       .kv_f16 = kv_f16};
    const char *kv = kv_f16 ? "F16 KV" : "F32 KV";
    engine *plain = engine_open(&p, err, sizeof err);
    p.prompt_cache_bytes = 64 << 20;
    engine *cached = engine_open(&p, err, sizeof err);
    CHECK(plain && cached && engine_get_info(plain)->probe_loaded, "the demo model with its probe, with and without the cache");
    if (!plain || !cached) goto out;
    int L = engine_get_info(plain)->n_layers;
    static char ans[3][2048];
    chat_answers(plain, ans);
    static const engine_skip_mode modes[] = {ENGINE_SKIP_LOSSLESS, ENGINE_SKIP_APPROXIMATE, ENGINE_SKIP_OFF};
    static const char *names[] = {"lossless", "approximate", "off"};
    for (int mi = 0; mi < 3; mi++) {
        int bad = 0, reads_ok = 1, prev = 0;
        for (int t = 0; t < 3; t++) {
            int32_t *pr = NULL;
            int n = turn_prompt(plain, t, ans, &pr);
            run_out a, b;
            engine_result ra, rb;
            /* max_tokens differs by turn: so does each request's KV layout (its context) */
            engine_gen_params gp = {.max_tokens = 17 + 9 * t, .top_p = 1, .skip_mode = modes[mi], .cache_key = 7};
            run(plain, pr, n, gp, &a, &ra);
            run(cached, pr, n, gp, &b, &rb);
            bad += !same(&a, &ra, &b, &rb, L) || rb.reason == ENGINE_STOP_ERROR;
            int want = t == 0 ? 0 : prev; /* each turn reads the previous prompt */
            reads_ok &= rb.n_cache_read == want && rb.n_cache_created == n - want && ra.n_cache_read == 0;
            if (!reads_ok && t > 0)
                fprintf(stderr, "# %s turn %d: read %d (want %d), created %d of %d\n", names[mi], t, rb.n_cache_read, want,
                        rb.n_cache_created, n);
            prev = n;
            free(pr);
        }
        CHECK(!bad, "%s, %s: three turns give the uncached engine's tokens, mask and probe confidence", kv, names[mi]);
        CHECK(reads_ok, "%s, %s: turns 2 and 3 read the previous turn's prompt from the cache, the rest is created", kv,
              names[mi]);
    }
    /* another tenant */
    int32_t *pr = NULL;
    int n = turn_prompt(plain, 2, ans, &pr);
    run_out a, b;
    engine_result ra, rb;
    engine_gen_params gp = {.max_tokens = 8, .top_p = 1, .skip_mode = ENGINE_SKIP_OFF, .cache_key = 8};
    run(cached, pr, n, gp, &b, &rb);
    CHECK(rb.n_cache_read == 0 && rb.cache.misses > 0, "another tenant's request reads nothing of the first's prompts");
    /* a kept prompt without a layer the request computes */
    int32_t *p1 = NULL;
    int n1 = turn_prompt(plain, 1, ans, &p1);
    uint8_t mask[MASK_MAX_LAYERS];
    memset(mask, 1, sizeof mask);
    mask[L / 2] = 0;
    gp = (engine_gen_params){.max_tokens = 8, .top_p = 1, .skip_mode = ENGINE_SKIP_APPROXIMATE, .layer_mask = mask,
                             .cache_key = 9};
    run(cached, p1, n1, gp, &b, &rb);
    gp = (engine_gen_params){.max_tokens = 24, .top_p = 1, .skip_mode = ENGINE_SKIP_OFF, .cache_key = 9};
    run(plain, pr, n, gp, &a, &ra);
    run(cached, pr, n, gp, &b, &rb);
    CHECK(same(&a, &ra, &b, &rb, L) && rb.n_cache_read == 0,
          "a kept prompt that lacks a layer the request computes is not used; the answer is the uncached one (read %d)",
          rb.n_cache_read);
    /* a kept prompt computed with a layer the request skips: its KV above
     * that layer saw another input, so it is not used either */
    gp = (engine_gen_params){.max_tokens = 8, .top_p = 1, .skip_mode = ENGINE_SKIP_OFF, .cache_key = 11};
    run(cached, p1, n1, gp, &b, &rb);
    gp = (engine_gen_params){.max_tokens = 24, .top_p = 1, .skip_mode = ENGINE_SKIP_APPROXIMATE, .layer_mask = mask,
                             .cache_key = 11};
    run(plain, pr, n, gp, &a, &ra);
    run(cached, pr, n, gp, &b, &rb);
    CHECK(same(&a, &ra, &b, &rb, L) && rb.n_cache_read == 0,
          "a kept prompt computed with a layer the request skips is not used; the answer is the uncached one (read %d)",
          rb.n_cache_read);
    /* a few tokens more than a kept prompt: prefilled whole */
    gp = (engine_gen_params){.max_tokens = 4, .top_p = 1, .skip_mode = ENGINE_SKIP_OFF, .cache_key = 10};
    run(cached, pr, n - 6, gp, &b, &rb);
    run(cached, pr, n, gp, &b, &rb);
    CHECK(rb.n_cache_read == 0, "a prompt only %d tokens longer than a kept one is prefilled whole (its rows would take "
                                "the small-batch kernels)", 6);
    free(p1);
    free(pr);
out:
    engine_close(plain);
    engine_close(cached);
}

int main(void) {
    test_cache();
    test_engine(0);
    test_engine(1);
    CHECK_DONE();
}
