/* test_prefix_cache.c - the prefix cache changes no answer.
 * An engine with a prefix cache and one without answer a conversation's
 * turns with the same greedy tokens, in every layer mode (with the demo
 * model's probe deciding the mask: the probe sees the whole prompt either
 * way), while the cached engine reads the earlier turn's positions from its
 * cache. An entry serves only requests whose layers it holds, only its own
 * owner, and a tiny budget evicts the least recently used entry. Models: the
 * synthetic model ($UNIT_MODEL, tests/t_unit.sh), models/ilpd-demo-Q8_0.gguf
 * and models/ilpd-demo-F16.gguf with its probe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "engine/engine.h"

#define PROBE "config/probes/ilpd-demo-F16.json"
#define MAX_OUT 24

typedef struct {
    int32_t ids[MAX_OUT + 1];
    int n;
} run_out;

static int on_token(void *ud, int32_t id) {
    run_out *r = ud;
    if (r->n < MAX_OUT + 1) r->ids[r->n++] = id;
    return 0;
}

static engine *open_model(const char *path, const char *probe, size_t cache_bytes) {
    char err[512];
    engine_params p = {.model_path = path, .n_threads = 2, .device = ENGINE_DEVICE_CPU, .layer_skip = probe != NULL,
                       .probe_path = probe, .prompt_cache_bytes = cache_bytes, .spec_always = 1};
    engine *e = engine_open(&p, err, sizeof err);
    if (!e) printf("# %s: %s\n", path, err);
    return e;
}

/* Greedy generation of MAX_OUT tokens. */
static void run(engine *e, const int32_t *prompt, int n, engine_skip_mode mode, const uint8_t *mask, uint64_t owner,
                run_out *out, engine_result *res) {
    memset(out, 0, sizeof *out);
    engine_gen_params gp = {.max_tokens = MAX_OUT, .top_p = 1, .skip_mode = mode, .layer_mask = mask,
                            .cache_owner = owner, .ignore_eos = 1};
    engine_callbacks cb = {.on_token = on_token, .ud = out};
    engine_generate(e, prompt, n, &gp, &cb, res);
}

/* A prompt of N tokens from SEED (ids 3..n_vocab-1). */
static void make_prompt(int32_t *p, int n, int n_vocab, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = 3 + (int32_t)((seed >> 8) % (unsigned)(n_vocab - 3));
    }
}

/* Three turns: each prompt is the last one, its answer and new tokens. The
 * cached engine C reads the earlier turns from its cache and answers as the
 * uncached engine R does. */
static void test_turns(engine *c, engine *r, const char *what, engine_skip_mode mode, const uint8_t *mask,
                       unsigned seed) {
    int V = engine_get_info(c)->n_vocab, n = 70;
    int32_t prompt[400];
    make_prompt(prompt, n, V, seed);
    int same = 1, read_ok = 1, created = 0;
    for (int turn = 0; turn < 3; turn++) {
        run_out oc, orf;
        engine_result rc, rr;
        run(c, prompt, n, mode, mask, 7, &oc, &rc);
        run(r, prompt, n, mode, mask, 7, &orf, &rr);
        same &= rc.reason != ENGINE_STOP_ERROR && oc.n == orf.n && !memcmp(oc.ids, orf.ids, sizeof oc.ids[0] * oc.n) &&
                !memcmp(rc.mask, rr.mask, sizeof rc.mask);
        if (turn > 0) read_ok &= rc.n_cache_read >= n - 41 - MAX_OUT && rc.n_cache_read < n;
        else read_ok &= rc.n_cache_read == 0;
        created += rc.n_cache_created;
        /* the next prompt: this one, the answer but its last token, 40 new tokens */
        memcpy(prompt + n, oc.ids, sizeof oc.ids[0] * (oc.n - 1));
        n += oc.n - 1;
        make_prompt(prompt + n, 40, V, seed + (unsigned)turn + 1);
        n += 40;
    }
    CHECK(same, "%s: three turns, the same tokens and mask with the cache as without", what);
    CHECK(read_ok && created > 0, "%s: turns 2 and 3 read the earlier turns from the cache (%d tokens stored)", what,
          created);
}

/* An entry serves only requests computing exactly its layers: a layer's KV
 * depends on every layer below it. */
static void test_masks(engine *c, engine *r) {
    const engine_info *in = engine_get_info(c);
    int32_t prompt[120];
    make_prompt(prompt, 110, in->n_vocab, 99);
    uint8_t skip2[MASK_MAX_LAYERS], skip23[MASK_MAX_LAYERS];
    memset(skip2, 1, sizeof skip2);
    skip2[2] = 0;
    memcpy(skip23, skip2, sizeof skip23);
    skip23[3] = 0;
    run_out o, oref;
    engine_result res, rref;
    run(c, prompt, 60, ENGINE_SKIP_APPROXIMATE, skip2, 3, &o, &res);
    run(c, prompt, 100, ENGINE_SKIP_APPROXIMATE, skip23, 3, &o, &res);
    run(r, prompt, 100, ENGINE_SKIP_APPROXIMATE, skip23, 3, &oref, &rref);
    CHECK(res.n_cache_read == 0 && o.n == oref.n && !memcmp(o.ids, oref.ids, sizeof o.ids[0] * o.n),
          "an entry skipping layer 2 does not serve a request skipping layers 2 and 3 (read %d)", res.n_cache_read);
    run(c, prompt, 100, ENGINE_SKIP_APPROXIMATE, skip2, 3, &o, &res);
    run(r, prompt, 100, ENGINE_SKIP_APPROXIMATE, skip2, 3, &oref, &rref);
    CHECK(res.n_cache_read == 60 && o.n == oref.n && !memcmp(o.ids, oref.ids, sizeof o.ids[0] * o.n),
          "it serves a request skipping layer 2, with the same tokens (read %d)", res.n_cache_read);
    run(c, prompt, 110, ENGINE_SKIP_OFF, NULL, 3, &o, &res);
    run(r, prompt, 110, ENGINE_SKIP_OFF, NULL, 3, &oref, &rref);
    CHECK(res.n_cache_read == 0 && o.n == oref.n && !memcmp(o.ids, oref.ids, sizeof o.ids[0] * o.n),
          "neither serves a full-depth request (read %d)", res.n_cache_read);
    run(c, prompt, 100, ENGINE_SKIP_APPROXIMATE, skip2, 3, &o, &res);
    CHECK(res.n_cache_read == 99, "nor does the full-depth entry serve a masked request: its own entry does (read %d)",
          res.n_cache_read);
}

/* Owners never see each other's entries. */
static void test_owners(engine *c) {
    int32_t prompt[64];
    make_prompt(prompt, 64, engine_get_info(c)->n_vocab, 5);
    run_out o;
    engine_result a, b, a2;
    run(c, prompt, 50, ENGINE_SKIP_OFF, NULL, 11, &o, &a);
    run(c, prompt, 64, ENGINE_SKIP_OFF, NULL, 12, &o, &b);
    run(c, prompt, 64, ENGINE_SKIP_OFF, NULL, 11, &o, &a2);
    CHECK(b.n_cache_read == 0 && a2.n_cache_read == 50,
          "another owner's entry is not seen (read %d), the owner's is (read %d)", b.n_cache_read, a2.n_cache_read);
}

/* A budget of about one entry: the least recently used goes. */
static void test_lru(const char *path) {
    engine *probe_e = open_model(path, NULL, 1 << 20);
    if (!probe_e) return;
    int32_t a[64], b[64];
    int V = engine_get_info(probe_e)->n_vocab;
    make_prompt(a, 64, V, 1);
    make_prompt(b, 64, V, 2);
    run_out o;
    engine_result r;
    run(probe_e, a, 40, ENGINE_SKIP_OFF, NULL, 0, &o, &r);
    prefix_cache_stats s;
    engine_cache_stats(probe_e, &s);
    size_t one = s.bytes;
    engine_close(probe_e);
    engine *c = open_model(path, NULL, one + one / 2);
    if (!c) return;
    run(c, a, 40, ENGINE_SKIP_OFF, NULL, 0, &o, &r);
    run(c, b, 40, ENGINE_SKIP_OFF, NULL, 0, &o, &r);
    engine_cache_stats(c, &s);
    CHECK(s.entries == 1 && s.evictions == 1 && s.bytes <= s.budget,
          "a budget of 1.5 entries (%zu bytes) holds one: %d entries, %llu evicted, %zu bytes", s.budget, s.entries,
          (unsigned long long)s.evictions, s.bytes);
    run(c, a, 50, ENGINE_SKIP_OFF, NULL, 0, &o, &r);
    CHECK(r.n_cache_read == 0, "the evicted prompt is prefilled again");
    run(c, a, 60, ENGINE_SKIP_OFF, NULL, 0, &o, &r);
    engine_cache_stats(c, &s);
    CHECK(r.n_cache_read == 50 && s.hits >= 1 && s.tokens_reused >= 50 && s.misses >= 3,
          "the latest one is read (%d tokens; %llu hits, %llu misses, %llu tokens reused)", r.n_cache_read,
          (unsigned long long)s.hits, (unsigned long long)s.misses, (unsigned long long)s.tokens_reused);
    engine_close(c);
}

static void test_model(const char *path, const char *probe, int modes) {
    if (access(path, R_OK)) {
        SKIP("%s is missing", path);
        return;
    }
    engine *c = open_model(path, probe, 64 << 20), *r = open_model(path, probe, 0);
    CHECK(c && r, "%s opens with and without a prefix cache", path);
    if (c && r) {
        char what[300];
        snprintf(what, sizeof what, "%s, off", path);
        test_turns(c, r, what, ENGINE_SKIP_OFF, NULL, 17);
        if (modes) {
            snprintf(what, sizeof what, "%s, lossless", path);
            test_turns(c, r, what, ENGINE_SKIP_LOSSLESS, NULL, 23);
            snprintf(what, sizeof what, "%s, approximate", path);
            test_turns(c, r, what, ENGINE_SKIP_APPROXIMATE, NULL, 29);
            test_masks(c, r);
            test_owners(c);
        }
    }
    engine_close(c);
    engine_close(r);
}

int main(void) {
    const char *synth = getenv("UNIT_MODEL");
    if (synth) test_model(synth, NULL, 0);
    else SKIP("UNIT_MODEL is not set (tests/t_unit.sh writes it)");
    test_model("models/ilpd-demo-Q8_0.gguf", NULL, 0);
    test_model("models/ilpd-demo-F16.gguf", PROBE, 1);
    test_lru("models/ilpd-demo-Q8_0.gguf");
    CHECK_DONE();
}
