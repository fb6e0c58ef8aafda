/* test_layer_skip.c - what a skipped layer costs: nothing.
 * On a 5-layer model: a skipped layer gets no KV cache, launches no kernel
 * and reads none of its weights (they are made unreadable while the request
 * runs); the probe is bound to the model's hash; the probe's decision and the
 * client's hint reach the result. The model is $UNIT_MODEL (the synthetic
 * 5-layer model tests/t_unit.sh writes), else stories260K from $SHARED. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "engine/engine.h"
#include "probe/probe.h"

static const int32_t PROMPT[] = {1, 403, 407, 261, 378};

typedef struct {
    engine_result res;
    uint64_t launches;
    char text[512];
    size_t len;
} run_out;

static int on_text(void *ud, const char *t, size_t n) {
    run_out *r = ud;
    if (r->len + n < sizeof r->text) {
        memcpy(r->text + r->len, t, n);
        r->len += n;
        r->text[r->len] = 0;
    }
    return 0;
}

static void run(engine *e, const uint8_t *mask, const uint8_t *hint, run_out *out) {
    memset(out, 0, sizeof *out);
    engine_gen_params gp = {.max_tokens = 8, .temperature = 0, .top_p = 1, .layer_mask = mask, .hint = hint};
    engine_callbacks cb = {.on_text = on_text, .ud = out};
    uint64_t before = engine_debug_launches(e);
    engine_generate(e, PROMPT, 5, &gp, &cb, &out->res);
    out->launches = engine_debug_launches(e) - before;
}

static engine *open_model(const char *path, const char *probe_path) {
    char err[512];
    engine_params p = {.model_path = path, .n_threads = 1, .device = ENGINE_DEVICE_CPU, .layer_skip = probe_path != NULL,
                       .probe_path = probe_path};
    engine *e = engine_open(&p, err, sizeof err);
    if (!e) printf("# %s\n", err);
    return e;
}

/* Writes a probe for E's model: skips candidate 2 (then 3) whatever the
 * features, unless FLOOR is above its confidence. */
static int write_probe(engine *e, const char *path, const char *sha, int n_layers, float floor) {
    probe p;
    char err[256];
    memset(&p, 0, sizeof p);
    snprintf(p.model_sha256, sizeof p.model_sha256, "%s", sha);
    p.n_layers = n_layers;
    p.k = engine_get_info(e)->probe_k;
    p.n_cand = 2;
    p.cand[0] = 2;
    p.cand[1] = 3;
    p.b[0] = 5;    /* P(skippable) = 0.993 */
    p.b[1] = -5;   /* layer 3 needed */
    for (int f = 0; f < PROBE_N_FEATURES; f++) {
        p.std[f] = 1000; /* any feature is in range */
        p.precision[f][f] = 1;
    }
    p.threshold = 0.5f;
    p.floor = floor;
    p.z_max = 4;
    p.d_max = 10;
    return probe_save(&p, path, err, sizeof err);
}

int main(void) {
    char path[1024];
    const char *unit = getenv("UNIT_MODEL");
    if (unit && *unit) snprintf(path, sizeof path, "%s", unit);
    else snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", check_shared_dir());
    if (access(path, R_OK)) {
        SKIP("layer skipping: %s absent (tests/t_unit.sh writes $UNIT_MODEL)", path);
        return 0;
    }
    printf("# layer skipping on %s\n", path);
    engine *e = open_model(path, NULL);
    CHECK(e != NULL, "the 5-layer model loads");
    if (!e) CHECK_DONE();
    const engine_info *in = engine_get_info(e);
    CHECK(in->n_layers == 5, "the model has 5 layers (%d)", in->n_layers);
    if (in->n_layers != 5) {
        engine_close(e);
        CHECK_DONE();
    }
    uint8_t full[5] = {1, 1, 1, 1, 1}, skip1[5] = {1, 1, 0, 1, 1}, skip2[5] = {1, 1, 0, 0, 1};
    run_out a, b, c;
    run(e, full, NULL, &a);
    run(e, skip1, NULL, &b);
    engine_debug_protect_layer(e, 2, 1);
    engine_debug_protect_layer(e, 3, 1);
    run(e, skip2, NULL, &c); /* reading a skipped layer's weights would crash here */
    engine_debug_protect_layer(e, 2, 0);
    engine_debug_protect_layer(e, 3, 0);
    CHECK(c.res.reason != ENGINE_STOP_ERROR && c.res.n_generated == 8,
          "a request skipping layers 2 and 3 runs with their weights unreadable");
    CHECK(a.res.kv_bytes > 0 && b.res.kv_bytes * 5 == a.res.kv_bytes * 4 && c.res.kv_bytes * 5 == a.res.kv_bytes * 3,
          "KV bytes fall exactly in proportion (%zu, %zu, %zu)", a.res.kv_bytes, b.res.kv_bytes, c.res.kv_bytes);
    uint64_t per_layer = a.launches - b.launches;
    CHECK(per_layer > 0 && a.launches - c.launches == 2 * per_layer,
          "each skipped layer saves the same kernel launches (%llu per layer over the request)", (unsigned long long)per_layer);
    CHECK(a.res.layer_status == ENGINE_LAYERS_OFF && !in->probe_loaded, "without a probe the layer status is off");

    /* A hint asking to skip one layer (20%% of 5 > 15%%: overridden) and an all-ones hint (applied). */
    uint8_t hint_skip[5] = {1, 1, 0, 1, 1}, hint_full[5] = {1, 1, 1, 1, 1};
    run(e, NULL, hint_skip, &b);
    CHECK(b.res.hint_status == HINT_OVERRIDDEN && b.res.n_skipped == 0, "a hint beyond 15%% of the layers is overridden");
    run(e, NULL, hint_full, &b);
    CHECK(b.res.hint_status == HINT_APPLIED && b.res.n_skipped == 0 && !strcmp(a.text, b.text),
          "an all-ones hint is applied and gives the full-depth text");

    /* Probes: bound to the model's hash. */
    const char *sha = engine_model_sha256(e);
    CHECK(sha && strlen(sha) == 64, "the model's SHA-256 is computed");
    char probe_path[] = "/tmp/ilpd-layer-skip-probe-XXXXXX";
    int fd = mkstemp(probe_path);
    close(fd);
    write_probe(e, probe_path, "0000000000000000000000000000000000000000000000000000000000000000", 5, 0);
    engine *m = open_model(path, probe_path);
    CHECK(m && !engine_get_info(m)->probe_loaded, "a probe for another model (hash mismatch) is refused: skipping off");
    if (m) {
        run(m, NULL, NULL, &b);
        CHECK(b.res.layer_status == ENGINE_LAYERS_OFF && b.res.n_skipped == 0, "with a refused probe every layer runs");
        engine_close(m);
    }
    write_probe(e, probe_path, sha, 5, 0);
    m = open_model(path, probe_path);
    CHECK(m && engine_get_info(m)->probe_loaded, "a probe with the model's hash is loaded");
    if (m) {
        run(m, NULL, NULL, &b);
        CHECK(b.res.layer_status == ENGINE_LAYERS_ACTIVE && b.res.n_skipped == 1 && !b.res.mask[2] && b.res.mask[3] &&
                  b.res.kv_bytes * 5 == a.res.kv_bytes * 4,
              "the probe's decision is the mask used (layer 2 skipped, its KV never allocated)");
        run(m, NULL, hint_full, &c);
        CHECK(c.res.hint_status == HINT_APPLIED && c.res.n_skipped == 0 && c.res.layer_status == ENGINE_LAYERS_FULL,
              "a full-depth hint over an active probe is applied: status full");
        engine_close(m);
    }
    write_probe(e, probe_path, sha, 5, 0.999f);
    m = open_model(path, probe_path);
    if (m) {
        run(m, NULL, NULL, &b);
        CHECK(b.res.layer_status == ENGINE_LAYERS_FULL && b.res.n_skipped == 0 && !strcmp(a.text, b.text),
              "below the confidence floor the request runs at full depth (confidence %.3f)", b.res.probe_confidence);
        engine_close(m);
    }
    unlink(probe_path);
    engine_close(e);
    CHECK_DONE();
}
