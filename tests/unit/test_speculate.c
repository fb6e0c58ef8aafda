/* test_speculate.c - lossless mode (engine/speculate.h).
 *  - prompt lookup finds the latest earlier occurrence of the text's tail;
 *  - the cost model drafts when verification is cheap, never when it costs
 *    as much as decoding, stops a source whose drafts are rejected and
 *    tries it again later;
 *  - speculative sampling of one token draws exactly from p, whatever the
 *    draft's q (chi-square against p over 200000 draws, q random, q far
 *    from p, and the one-hot q of an n-gram draft);
 *  - on the demo model (models/), greedy answers of held-out prompts of
 *    every class are byte for byte those of mode off, token by token and in
 *    their streamed pieces, with the probe's draft mask, with a draft mask
 *    that skips nearly everything (most drafts rejected), with stop strings
 *    and max_tokens cutting inside a verified batch; the result counts the
 *    drafts;
 *  - with temperature 1.5 (top-k 4), the sixth token's distribution over
 *    1000 seeds in lossless mode matches mode off (two-sample chi-square),
 *    while approximate mode with the same mask differs (the test can fail);
 *  - approximate mode's gate (engine_gen_params.gate_margin): no gate, or a
 *    mask that skips nothing, never gates; a gate every token falls below
 *    gates at the first token and answers exactly as mode off, with every
 *    layer's KV; a gate set between the masked model's margins, at a token
 *    before which the masked answer still agrees with off, gates at that
 *    very token and the answer is then off's, byte for byte.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/speculate.h"
#include "tests/unit/check.h"

#define MODEL "models/ilpd-demo-F16.gguf"
#define PROBE "config/probes/ilpd-demo-F16.json"

static void test_ngram(void) {
    int32_t h[] = {5, 6, 7, 8, 9, 1, 2, 5, 6, 7, 3, 4, 5, 6, 7}, out[8];
    int g = 0, n = spec_ngram(h, 15, out, 8, &g);
    /* tail 5 6 7 (and 4 5 6 7 has no earlier match): latest earlier 5 6 7 is at 7, followed by 3 4 5 6 7 */
    CHECK(n == 5 && out[0] == 3 && out[1] == 4 && out[4] == 7, "prompt lookup: the latest earlier match of the tail (%d tokens, first %d)", n, out[0]);
    CHECK(g == 3, "prompt lookup: the matched tail's length (%d)", g);
    n = spec_ngram(h, 15, out, 2, NULL);
    CHECK(n == 2 && out[0] == 3 && out[1] == 4, "prompt lookup: at most MAX_OUT tokens");
    int32_t none[] = {1, 2, 3, 4, 5, 6};
    CHECK(spec_ngram(none, 6, out, 8, NULL) == 0, "prompt lookup: no repeated n-gram, no draft");
    int32_t two[] = {9, 4, 2, 8, 1, 4, 2};
    n = spec_ngram(two, 7, out, 8, NULL);
    CHECK(n == 4 && out[0] == 8 && out[3] == 2, "prompt lookup: a 2-token tail");
}

/* The lookup cache: earlier answers draft the same tenant's next ones, the
 * longest matching gram wins, old tokens make room, and grams never span
 * two answers. */
static void test_lookup(void) {
    spec_lookup c;
    int32_t out[8], g = 0, sure = 0;
    CHECK(spec_lookup_init(&c, 64) == 0, "lookup cache: init");
    int32_t a1[] = {10, 11, 12, 13, 14, 2}, a2[] = {10, 11, 20, 21, 2};
    spec_lookup_add(&c, 7, NULL, 0, a1, 6);
    int32_t q1[] = {1, 1, 10, 11};
    int n = spec_lookup_find(&c, 7, q1, 4, out, 8, &g, &sure);
    CHECK(n == 4 && out[0] == 12 && out[3] == 2 && g == 2, "lookup cache: an earlier answer's continuation, to its end (%d, g %d)", n, g);
    CHECK(spec_lookup_find(&c, 8, q1, 4, out, 8, &g, &sure) == 0, "lookup cache: another tenant's answers draft nothing");
    spec_lookup_add(&c, 7, NULL, 0, a2, 5);
    n = spec_lookup_find(&c, 7, q1, 4, out, 8, &g, &sure);
    CHECK(n == 1 && out[0] == 20, "lookup cache: the latest occurrence wins, and its draft ends one token after the "
          "two latest continuations part (%d, first %d)", n, out[0]);
    CHECK(sure == 0, "lookup cache: nothing agreed on when the two latest part at once");
    int32_t a4[] = {10, 11, 20, 21, 9, 2};
    spec_lookup_add(&c, 7, NULL, 0, a4, 6);
    n = spec_lookup_find(&c, 7, q1, 4, out, 8, &g, &sure);
    CHECK(n == 3 && sure == 2 && out[2] == 9, "lookup cache: the two latest agree on 2 tokens, then one guess (%d, sure %d)", n, sure);
    int32_t q2[] = {5, 11, 12, 13};
    n = spec_lookup_find(&c, 7, q2, 4, out, 8, &g, &sure);
    CHECK(n == 2 && out[0] == 14 && g == 3, "lookup cache: the longest matching gram (g %d)", g);
    int32_t q3[] = {14, 2, 10}; /* 2 ends a1 and 10 starts a2: no gram spans them */
    CHECK(spec_lookup_find(&c, 7, q3, 3, out, 8, &g, &sure) == 0, "lookup cache: no gram across two answers");
    int32_t filler[60];
    for (int i = 0; i < 60; i++) filler[i] = 100 + i;
    spec_lookup_add(&c, 7, NULL, 0, filler, 60);
    CHECK(spec_lookup_find(&c, 7, q2, 4, out, 8, &g, &sure) == 0, "lookup cache: overwritten answers draft nothing");
    int32_t ctx[] = {1, 2, 3, 40, 41}, a3[] = {50, 51, 52, 2}, q6[] = {9, 40, 41};
    spec_lookup_add(&c, 7, ctx, 5, a3, 4);
    n = spec_lookup_find(&c, 7, q6, 3, out, 8, &g, &sure);
    CHECK(n == 4 && out[0] == 50 && g == 2, "lookup cache: the end of the prompt finds the answer's first tokens (%d)", n);
    int32_t q7[] = {2, 3};
    CHECK(spec_lookup_find(&c, 7, q7, 2, out, 8, &g, &sure) == 0, "lookup cache: only the last prompt tokens are kept, never drafted");
    int32_t q4[] = {130, 131};
    n = spec_lookup_find(&c, 7, q4, 2, out, 8, &g, &sure);
    CHECK(n == 8 && out[0] == 132, "lookup cache: at most MAX_OUT tokens (%d)", n);
    spec_lookup_free(&c);
    spec_lookup zero = {0};
    CHECK(spec_lookup_find(&zero, 7, q1, 4, out, 8, &g, &sure) == 0, "lookup cache: off (capacity 0) finds nothing");
    spec_lookup_add(&zero, 7, NULL, 0, a1, 6);
}

/* The cost model: a draft is used when it is expected to pay, not otherwise;
 * rejections turn a source off, and it is tried again later. */
static void test_policy(void) {
    spec_costs cheap = {0}, dear = {0};
    for (int r = 0; r <= SPEC_K_MAX + 1; r++) {
        cheap.vcost[r] = 1 + 0.1 * (r - 1); /* a memory-bound model: rows nearly free */
        dear.vcost[r] = r;                  /* every row a decode step: nothing can pay */
    }
    for (int l = 0; l < 8; l++) cheap.layer[l] = dear.layer[l] = 0.1;
    cheap.head = dear.head = 0.2;
    uint8_t mask[8] = {1, 1, 0, 0, 0, 0, 0, 1};
    int order[5] = {2, 3, 4, 5, 6}, k;
    spec_state s;
    spec_memory mem = {0};
    spec_init(&s, 8, mask, order, 5, 5, &dear, &mem);
    CHECK(spec_plan(&s, 5, SPEC_NGRAM, 6, 0, 50, &k) == SPEC_PLAIN && k == 0, "policy: verification as dear as decoding: plain decoding");
    spec_init(&s, 8, mask, order, 5, 5, &cheap, &mem);
    spec_source src = spec_plan(&s, 5, SPEC_NGRAM, 6, 0, 50, &k);
    CHECK(src == SPEC_NGRAM && k >= 2 && k <= 6, "policy: cheap verification and an n-gram at hand: an n-gram draft (k %d)", k);
    src = spec_plan(&s, 5, SPEC_NGRAM, 6, 0, 1, &k);
    CHECK(k == 1, "policy: never more drafts than room for tokens");
    src = spec_plan(&s, 5, SPEC_NGRAM, 0, 0, 50, &k);
    CHECK(src == SPEC_LAYERS && k >= 1, "policy: no n-gram: a layer draft (draft step 0.5 of a decode step, k %d)", k);
    for (int i = 0; i < 8; i++) spec_record(&s, SPEC_NGRAM, 4, 0, 0, 6 + i);
    src = spec_plan(&s, 14, SPEC_NGRAM, 6, 0, 50, &k);
    CHECK(src != SPEC_NGRAM, "policy: n-gram drafts all rejected: no more n-gram drafts (rate %.2f)", s.mem.rate[SPEC_NGRAM]);
    uint8_t full[8] = {1, 1, 1, 1, 1, 1, 1, 1}; /* no layer drafts: only the n-gram source */
    spec_init(&s, 8, full, NULL, 0, 0, &dear, &mem);
    int plain = spec_plan(&s, 5, SPEC_NGRAM, 6, 0, 50, &k) == SPEC_PLAIN;
    src = spec_plan(&s, 5 + SPEC_EXPLORE, SPEC_NGRAM, 6, 0, 50, &k);
    int again = spec_plan(&s, 6 + SPEC_EXPLORE, SPEC_NGRAM, 6, 0, 50, &k) == SPEC_PLAIN;
    CHECK(plain && src != SPEC_PLAIN && again, "policy: a source that does not pay is still tried once every %d tokens", SPEC_EXPLORE);
    /* what a request learnt carries over: after n-gram drafts that were all
     * kept, the next request starts from that rate */
    spec_init(&s, 8, full, NULL, 0, 0, &cheap, &mem);
    for (int i = 0; i < 8; i++) spec_record(&s, SPEC_LOOKUP, 4, 3, 3, 2 * (i + 1)); /* 3 agreed tokens kept, the guess not */
    spec_finish(&s, 20, &mem);
    spec_init(&s, 8, full, NULL, 0, 0, &cheap, &mem);
    CHECK(s.mem.rate[SPEC_LOOKUP] > 0.9 && s.mem.rate_guess < 0.1 && s.mem.clock == 20,
          "policy: the next request starts from the rates learnt (agreed %.2f, guesses %.2f)", s.mem.rate[SPEC_LOOKUP],
          s.mem.rate_guess);
    src = spec_plan(&s, 1, SPEC_LOOKUP, 7, 7, 50, &k);
    CHECK(src == SPEC_LOOKUP && k == 7, "policy: agreed tokens nearly always kept: all of them drafted (k %d)", k);
    src = spec_plan(&s, 1, SPEC_LOOKUP, 7, 3, 50, &k);
    CHECK(src == SPEC_LOOKUP && k == 3, "policy: guesses nearly never kept: the agreed tokens only (k %d)", k);
    double y1 = spec_yield(0.9, 4, 0, cheap.vcost), y2 = spec_yield(0.3, 4, 0, cheap.vcost);
    CHECK(y1 > y2 && y1 > 2.5 && spec_yield(0.9, 4, 0, dear.vcost) < 1, "policy: yield grows with acceptance (%.2f vs %.2f)", y1, y2);
}

/* Chi-square of COUNTS (n bins, total N) against probabilities P. */
static double chi2_vs(const long *counts, const float *p, int n, long total) {
    double x = 0;
    for (int i = 0; i < n; i++) {
        double e = p[i] * (double)total;
        if (e > 0) x += (counts[i] - e) * (counts[i] - e) / e;
        else if (counts[i]) return INFINITY;
    }
    return x;
}

/* The 99.9% quantile of chi-square with DF degrees of freedom (Wilson-Hilferty). */
static double chi2_crit(int df) {
    double a = 2.0 / (9 * df);
    return df * pow(1 - a + 3.09 * sqrt(a), 3);
}

static void test_sample_verify(void) {
    enum { N = 6, DRAWS = 200000 };
    const float p[N] = {0.35f, 0.25f, 0.2f, 0.1f, 0.1f, 0.0f};
    const float q_cases[3][N] = {{0.1f, 0.1f, 0.1f, 0.2f, 0.2f, 0.3f}, /* far from p, mass where p has none */
                                 {0.3f, 0.3f, 0.2f, 0.1f, 0.05f, 0.05f},
                                 {0, 0, 0, 0, 0, 0}}; /* the n-gram case: q NULL, one-hot at the draft */
    sampler s;
    float scratch[N];
    for (int c = 0; c < 3; c++) {
        long counts[N] = {0}, accepted = 0;
        sampler_init(&s, N, 1.0f, 1, 0, 1234 + c);
        for (int i = 0; i < DRAWS; i++) {
            const float *q = c < 2 ? q_cases[c] : NULL;
            int32_t d = c < 2 ? sampler_draw(&s, q, N) : (int32_t)(i % 3), out = -1;
            if (spec_sample_verify(&s, p, q, d, N, scratch, &out)) {
                out = d;
                accepted++;
            }
            counts[out]++;
        }
        sampler_free(&s);
        double x = chi2_vs(counts, p, N, DRAWS);
        CHECK(x < chi2_crit(N - 2), "speculative sampling, draft %s: tokens distributed as p (chi2 %.1f < %.1f, %.0f%% kept)",
              c == 0 ? "far from p" : c == 1 ? "near p" : "one-hot (n-gram)", x, chi2_crit(N - 2), 100.0 * accepted / DRAWS);
    }
}

typedef struct {
    int32_t toks[256];
    int n_toks;
    char text[4096];
    size_t len;
    int pieces;
} run_out;

static int on_token(void *ud, int32_t id) {
    run_out *r = ud;
    if (r->n_toks < 256) r->toks[r->n_toks++] = id;
    return 0;
}

static int on_text(void *ud, const char *t, size_t n) {
    run_out *r = ud;
    if (r->len + n < sizeof r->text) {
        memcpy(r->text + r->len, t, n);
        r->len += n;
        r->text[r->len] = 0;
    }
    r->pieces++;
    return 0;
}

static void run(engine *e, const int32_t *prompt, int n, engine_gen_params gp, run_out *out, engine_result *res) {
    memset(out, 0, sizeof *out);
    engine_callbacks cb = {.on_token = on_token, .on_text = on_text, .ud = out};
    engine_generate(e, prompt, n, &gp, &cb, res);
}

static int same(const run_out *a, const engine_result *ra, const run_out *b, const engine_result *rb) {
    return a->n_toks == b->n_toks && !memcmp(a->toks, b->toks, sizeof(int32_t) * (size_t)a->n_toks) && a->len == b->len &&
           !memcmp(a->text, b->text, a->len) && ra->reason == rb->reason && ra->n_generated == rb->n_generated &&
           ra->stop_index == rb->stop_index;
}

/* Up to MAX prompts of each held-out class, as token arrays. Returns how many. */
static int load_prompts(engine *e, int32_t **prompts, int *lens, int max) {
    const char *classes[] = {"classify", "extract", "yesno", "story"};
    int n = 0;
    for (int c = 0; c < 4; c++) {
        char path[256], line[8192];
        snprintf(path, sizeof path, "models/heldout/%s.jsonl", classes[c]);
        FILE *f = fopen(path, "r");
        for (int i = 0; f && i < max && fgets(line, sizeof line, f); i++) {
            cJSON *j = cJSON_Parse(line);
            const cJSON *sys = cJSON_GetObjectItem(j, "system"), *user = cJSON_GetObjectItem(j, "user");
            engine_message m = {.role = ENGINE_ROLE_USER, .text = cJSON_GetStringValue(user)};
            char err[256];
            lens[n] = engine_prompt_build(e, cJSON_GetStringValue(sys), NULL, &m, 1, 0, &prompts[n], err, sizeof err);
            if (lens[n] > 0) n++;
            cJSON_Delete(j);
        }
        if (f) fclose(f);
    }
    return n;
}

static void test_greedy_identical(engine *e) {
    int32_t *prompts[16] = {0};
    int lens[16], n = load_prompts(e, prompts, lens, 3);
    CHECK(n == 12, "12 held-out prompts (3 of each class)");
    const engine_info *in = engine_get_info(e);
    uint8_t aggressive[MASK_MAX_LAYERS] = {0};
    aggressive[0] = aggressive[in->n_layers - 1] = 1; /* a draft that is nearly always wrong */
    int bad = 0, bad_aggr = 0, bad_stop = 0, bad_max = 0, drafted = 0, accepted = 0, stops = 0;
    for (int i = 0; i < n; i++) {
        run_out a, b;
        engine_result ra, rb;
        engine_gen_params gp = {.max_tokens = 48, .top_p = 1, .skip_mode = ENGINE_SKIP_OFF};
        run(e, prompts[i], lens[i], gp, &a, &ra);
        gp.skip_mode = ENGINE_SKIP_LOSSLESS;
        run(e, prompts[i], lens[i], gp, &b, &rb);
        bad += !same(&a, &ra, &b, &rb);
        drafted += rb.n_drafted;
        accepted += rb.n_accepted;
        gp.layer_mask = aggressive;
        run(e, prompts[i], lens[i], gp, &b, &rb);
        bad_aggr += !same(&a, &ra, &b, &rb);
        gp.layer_mask = NULL;
        /* a stop string from the middle of the answer, and max_tokens inside a batch */
        if (a.len > 12) {
            char stop[8];
            memcpy(stop, a.text + a.len / 2, 4);
            stop[4] = 0;
            const char *stops_arr[] = {stop};
            engine_gen_params gs = gp;
            gs.stop = stops_arr;
            gs.n_stop = 1;
            gs.skip_mode = ENGINE_SKIP_OFF;
            run(e, prompts[i], lens[i], gs, &a, &ra);
            gs.skip_mode = ENGINE_SKIP_LOSSLESS;
            run(e, prompts[i], lens[i], gs, &b, &rb);
            bad_stop += !same(&a, &ra, &b, &rb) || ra.reason != ENGINE_STOP_SEQUENCE;
            stops++;
        }
        for (int m = 3; m <= 11; m += 4) {
            engine_gen_params gm = gp;
            gm.max_tokens = m;
            gm.skip_mode = ENGINE_SKIP_OFF;
            run(e, prompts[i], lens[i], gm, &a, &ra);
            gm.skip_mode = ENGINE_SKIP_LOSSLESS;
            run(e, prompts[i], lens[i], gm, &b, &rb);
            bad_max += !same(&a, &ra, &b, &rb);
        }
    }
    CHECK(bad == 0, "lossless, probe's draft mask: %d of %d greedy answers identical to off (tokens, streamed text, stop reason; %d/%d drafts kept)",
          n - bad, n, accepted, drafted);
    CHECK(drafted > 0 && accepted > 0, "lossless drafted tokens (%d) and kept some (%d)", drafted, accepted);
    CHECK(bad_aggr == 0, "lossless, a draft skipping all but the first and last layer: %d of %d answers identical", n - bad_aggr, n);
    CHECK(bad_stop == 0 && stops > 0, "lossless with a stop string from the answer: %d of %d identical (stop_sequence)", stops - bad_stop, stops);
    CHECK(bad_max == 0, "lossless with max_tokens 3, 7, 11: every answer identical");
    for (int i = 0; i < n; i++) free(prompts[i]);
}

/* The lookup cache on the demo model: answers identical to off whether
 * drafted from earlier answers or not; a prompt asked again by the same
 * tenant drafts its whole answer from its first one, and another tenant's
 * answers draft nothing for a tenant. */
static void test_lookup_identical(engine *e) {
    int32_t *prompts[16] = {0};
    int lens[16], n = load_prompts(e, prompts, lens, 3), bad = 0, acc[3] = {0}, drafted[3] = {0}, verif[3] = {0};
    run_out *ref = calloc((size_t)n, sizeof *ref);
    engine_result *rref = calloc((size_t)n, sizeof *rref);
    for (int i = 0; ref && rref && i < n; i++) {
        engine_gen_params gp = {.max_tokens = 48, .top_p = 1, .skip_mode = ENGINE_SKIP_OFF, .lookup_off = 1};
        run(e, prompts[i], lens[i], gp, &ref[i], &rref[i]);
    }
    /* pass 0: tenant 1, cold; pass 1: tenant 1 again; pass 2: tenant 2 */
    for (int pass = 0; ref && rref && pass < 3; pass++)
        for (int i = 0; i < n; i++) {
            run_out b;
            engine_result rb;
            engine_gen_params gp = {.max_tokens = 48, .top_p = 1, .skip_mode = ENGINE_SKIP_LOSSLESS, .cache_key = pass < 2 ? 1 : 2};
            run(e, prompts[i], lens[i], gp, &b, &rb);
            bad += !same(&ref[i], &rref[i], &b, &rb);
            acc[pass] += rb.n_accepted;
            drafted[pass] += rb.n_drafted;
            verif[pass] += rb.n_verifications;
        }
    CHECK(bad == 0, "lookup cache: %d answers in 3 passes identical to off", 3 * n - bad);
    CHECK(acc[1] > acc[0] && acc[1] > 2 * verif[1], "lookup cache: a repeated prompt drafts its answer (kept %d/%d, %d verifications; "
          "first time %d/%d)", acc[1], drafted[1], verif[1], acc[0], drafted[0]);
    CHECK(acc[2] < acc[1], "lookup cache: another tenant's answers are not drafted (kept %d/%d)", acc[2], drafted[2]);
    free(ref);
    free(rref);
    for (int i = 0; i < n; i++) free(prompts[i]);
}

/* Counts of the token at index AT over SEEDS runs of MODE with MASK;
 * returns the tokens drafted in all. */
static long sixth_token(engine *e, const int32_t *prompt, int n, engine_skip_mode mode, const uint8_t *mask, int at,
                        int seeds, long *counts, int n_vocab) {
    long drafted = 0;
    memset(counts, 0, sizeof *counts * (size_t)n_vocab);
    for (int s = 0; s < seeds; s++) {
        run_out o;
        engine_result r;
        engine_gen_params gp = {.max_tokens = at + 1, .temperature = 1.5f, .top_p = 1, .top_k = 4, .seed = (uint64_t)s * 7919 + 1,
                                .skip_mode = mode, .layer_mask = mask, .ignore_eos = 1};
        run(e, prompt, n, gp, &o, &r);
        if (o.n_toks > at) counts[o.toks[at]]++;
        drafted += r.n_drafted;
    }
    return drafted;
}

/* Two-sample chi-square over the bins where the pooled count reaches 10
 * (the rest pooled in one bin); *DF gets the degrees of freedom. */
static double chi2_two(const long *a, const long *b, int n, int *df) {
    double x = 0, ra = 0, rb = 0;
    long na = 0, nb = 0;
    int bins = 0;
    for (int i = 0; i < n; i++) {
        na += a[i];
        nb += b[i];
    }
    double ka = sqrt((double)nb / na), kb = sqrt((double)na / nb);
    for (int i = 0; i < n; i++) {
        if (a[i] + b[i] < 10) {
            ra += a[i];
            rb += b[i];
            continue;
        }
        double d = ka * a[i] - kb * b[i];
        x += d * d / (a[i] + b[i]);
        bins++;
    }
    if (ra + rb > 0) {
        double d = ka * ra - kb * rb;
        x += d * d / (ra + rb);
        bins++;
    }
    *df = bins - 1;
    return x;
}

static void test_sampling_distribution(engine *e) {
    const engine_info *in = engine_get_info(e);
    int32_t *prompt = NULL;
    int n = engine_tokenize(e, "Once upon a time, there was a little", 1, &prompt);
    enum { SEEDS = 1000, AT = 5 };
    uint8_t mask[MASK_MAX_LAYERS];
    memset(mask, 1, sizeof mask);
    for (int l = 2; l < in->n_layers - 1; l += 2) mask[l] = 0; /* every other layer: drafts often rejected */
    long *off = calloc((size_t)in->n_vocab, sizeof *off), *lossless = calloc((size_t)in->n_vocab, sizeof *off),
         *approx = calloc((size_t)in->n_vocab, sizeof *off);
    sixth_token(e, prompt, n, ENGINE_SKIP_OFF, NULL, AT, SEEDS, off, in->n_vocab);
    long drafted = sixth_token(e, prompt, n, ENGINE_SKIP_LOSSLESS, mask, AT, SEEDS, lossless, in->n_vocab);
    sixth_token(e, prompt, n, ENGINE_SKIP_APPROXIMATE, mask, AT, SEEDS, approx, in->n_vocab);
    int df1, df2;
    double x1 = chi2_two(off, lossless, in->n_vocab, &df1), x2 = chi2_two(off, approx, in->n_vocab, &df2);
    CHECK(df1 > 3 && x1 < chi2_crit(df1) && drafted > SEEDS,
          "temperature 1.5: lossless mode's 6th token distributed as off's (chi2 %.1f < %.1f, %d df, %d seeds, %ld tokens drafted)",
          x1, chi2_crit(df1), df1, SEEDS, drafted);
    CHECK(x2 > chi2_crit(df2), "... while approximate mode with the same mask is told apart (chi2 %.1f > %.1f, %d df)", x2,
          chi2_crit(df2), df2);
    free(off);
    free(lossless);
    free(approx);
    free(prompt);
}

/* The top-1/top-2 margin of each of the N_ANS answer tokens of SEQ (the
 * prompt's N tokens, then the answer) under MASK, teacher-forced, into M. */
static int margins(engine *e, const int32_t *seq, int n, int n_ans, const uint8_t *mask, float *m) {
    const engine_info *in = engine_get_info(e);
    float *lg = malloc((size_t)(n + n_ans) * in->n_vocab * sizeof *lg);
    if (!lg || engine_forward_logits(e, seq, n + n_ans, mask, lg)) {
        free(lg);
        return -1;
    }
    for (int i = 0; i < n_ans; i++) m[i] = sampler_margin(lg + (size_t)(n - 1 + i) * in->n_vocab, in->n_vocab);
    free(lg);
    return 0;
}

/* A gate for answer A (N_A tokens) under its mask that first falls at token
 * j >= 1, where A still agrees with the full-depth answer O (N_O tokens):
 * its margin at least 0.2 below every earlier one (far beyond the last bits
 * by which batched and one-row margins differ). Returns j (*GATE set) or -1. */
static int gate_point(const float *m, const run_out *a, const run_out *o, float *gate) {
    int best = -1;
    float lo = m[0];
    for (int j = 1; j < a->n_toks && j < o->n_toks && a->toks[j - 1] == o->toks[j - 1]; j++) {
        if (m[j] < lo - 0.2f && (best < 0 || m[j] < m[best])) {
            best = j;
            *gate = (m[j] + lo) / 2;
        }
        if (m[j] < lo) lo = m[j];
    }
    return best;
}

static void test_gate(engine *e) {
    const engine_info *in = engine_get_info(e);
    int32_t *prompts[16] = {0};
    int lens[16], n = load_prompts(e, prompts, lens, 3);
    uint8_t mask[MASK_MAX_LAYERS], none[MASK_MAX_LAYERS];
    memset(mask, 1, sizeof mask);
    memset(none, 1, sizeof none);
    for (int l = 9; l < in->n_layers - 1; l += 2) mask[l] = 0; /* answers that mostly agree with off for a while */
    int ungated = 0, bad_first = 0, mid = 0, bad_mid = 0, deep = 0;
    for (int i = 0; i < n; i++) {
        run_out o, a, g;
        engine_result ro, ra, rg;
        engine_gen_params gp = {.max_tokens = 32, .top_p = 1, .skip_mode = ENGINE_SKIP_OFF};
        run(e, prompts[i], lens[i], gp, &o, &ro);
        gp.skip_mode = ENGINE_SKIP_APPROXIMATE;
        gp.layer_mask = mask;
        run(e, prompts[i], lens[i], gp, &a, &ra);
        ungated += ra.gated_at < 0;
        gp.layer_mask = none;
        gp.gate_margin = 1e30f;
        run(e, prompts[i], lens[i], gp, &g, &rg);
        ungated += rg.gated_at < 0;
        gp.layer_mask = mask;
        run(e, prompts[i], lens[i], gp, &g, &rg);
        bad_first += !same(&o, &ro, &g, &rg) || rg.gated_at != 0 || rg.kv_bytes != ro.kv_bytes;
        int32_t *seq = malloc((size_t)(lens[i] + a.n_toks) * sizeof *seq);
        float *m = malloc((size_t)a.n_toks * sizeof *m), gate = 0;
        if (!seq || !m) {
            bad_mid++;
        } else {
            memcpy(seq, prompts[i], (size_t)lens[i] * sizeof *seq);
            memcpy(seq + lens[i], a.toks, (size_t)a.n_toks * sizeof *seq);
            int j = margins(e, seq, lens[i], a.n_toks, mask, m) ? -2 : gate_point(m, &a, &o, &gate);
            if (j == -2) bad_mid++;
            if (j > 0) {
                gp.gate_margin = gate;
                run(e, prompts[i], lens[i], gp, &g, &rg);
                bad_mid += !same(&o, &ro, &g, &rg) || rg.gated_at != j;
                mid++;
                deep += j > KB_EXACT_ROWS;
            }
        }
        free(seq);
        free(m);
    }
    CHECK(n == 12 && ungated == 2 * n, "approximate mode: no gate, or a mask that skips nothing, never gates (%d of %d)",
          ungated, 2 * n);
    CHECK(bad_first == 0, "a gate every token falls below: %d of %d answers gated at their first token, identical to off "
          "with off's KV bytes", n - bad_first, n);
    CHECK(mid >= 4 && deep >= 1 && bad_mid == 0,
          "a gate between the masked margins: %d of %d answers gated at the expected token (%d past %d tokens), then "
          "identical to off", mid - bad_mid, mid, deep, KB_EXACT_ROWS);
    for (int i = 0; i < n; i++) free(prompts[i]);
}

int main(void) {
    test_ngram();
    test_lookup();
    test_policy();
    test_sample_verify();
    char err[512];
    /* spec_always: drafts whenever possible (the cost model declines most on this model) */
    engine_params p = {.model_path = MODEL, .n_threads = 2, .device = ENGINE_DEVICE_CPU, .layer_skip = 1, .probe_path = PROBE,
                       .spec_always = 1};
    engine *e = engine_open(&p, err, sizeof err);
    CHECK(e != NULL && engine_get_info(e)->probe_loaded, "the demo model and its probe load (%s)", e ? "ok" : err);
    if (e) {
        test_greedy_identical(e);
        test_sampling_distribution(e);
        test_gate(e);
        engine_close(e);
    }
    p.layer_skip = 0; /* n-gram drafts only */
    p.probe_path = NULL;
    p.draft_cache_tokens = 8192;
    e = engine_open(&p, err, sizeof err);
    CHECK(e != NULL, "the demo model with a lookup cache (%s)", e ? "ok" : err);
    if (e) {
        test_lookup_identical(e);
        engine_close(e);
    }
    CHECK_DONE();
}
