/* test_probe.c - the hint policy, the probe's decision rules and probe files. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/check.h"
#include "probe/hint.h"
#include "probe/probe.h"

static void set(uint8_t *m, const char *bits) {
    for (size_t i = 0; i < strlen(bits); i++) m[i] = bits[i] == '1';
}

static int same(const uint8_t *m, const char *bits) {
    for (size_t i = 0; i < strlen(bits); i++)
        if (m[i] != (bits[i] == '1')) return 0;
    return 1;
}

static void hint_rules(void) {
    uint8_t server[20], hint[20], final[20];
    /* 20 layers, k=3: the server skips layers 10 and 11. 15% of 20 = 3 layers. */
    set(server, "11111111110011111111");
    CHECK(hint_reconcile(server, NULL, 0, 20, 3, 0.15f, final) == HINT_ABSENT && same(final, "11111111110011111111"),
          "no hint: absent, the server's mask");
    CHECK(hint_reconcile(server, NULL, 1, 20, 3, 0.15f, final) == HINT_INVALID && same(final, "11111111110011111111"),
          "an invalid hint is ignored");
    set(hint, "00000000000000000000");
    CHECK(hint_reconcile(server, hint, 0, 20, 3, 0.15f, final) == HINT_APPLIED && same(final, "11111111110011111111"),
          "an all-zero hint means no preference");
    set(hint, "11111111111111111111");
    CHECK(hint_reconcile(server, hint, 0, 20, 3, 0.15f, final) == HINT_APPLIED && same(final, "11111111111111111111"),
          "an all-ones hint (a superset) is applied: full depth");
    set(hint, "11111111110111111111");
    CHECK(hint_reconcile(server, hint, 0, 20, 3, 0.15f, final) == HINT_APPLIED && same(final, "11111111110111111111"),
          "a superset of the server's mask is applied");
    set(hint, "11111110110011111111");
    CHECK(hint_reconcile(server, hint, 0, 20, 3, 0.15f, final) == HINT_APPLIED && same(final, "11111110110011111111"),
          "a hint one layer off is applied");
    set(hint, "11111000000011111111");
    CHECK(hint_reconcile(server, hint, 0, 20, 3, 0.15f, final) == HINT_OVERRIDDEN && same(final, "11111111110011111111"),
          "a hint five layers off (25%%) is overridden");
    set(hint, "11111101100011111111");
    CHECK(hint_reconcile(server, hint, 0, 20, 3, 0.15f, final) == HINT_APPLIED && same(final, "11111101100011111111"),
          "a hint exactly 15%% off (3 of 20 layers) is applied");
    set(hint, "01111111110011111110");
    CHECK(hint_reconcile(server, hint, 0, 20, 3, 0.15f, final) == HINT_APPLIED && same(final, "11111111110011111111"),
          "layers 0..k-1 and the last always run, whatever the hint");
    set(hint, "11111000000011111111");
    CHECK(hint_reconcile(server, hint, 0, 20, 3, 0.5f, final) == HINT_APPLIED, "the deviation bound is configurable");
}

/* A probe over 8 layers (k=2, candidates 2..6) whose regressions depend on feature 0. */
static void make_probe(probe *p, float floor) {
    memset(p, 0, sizeof *p);
    snprintf(p->model_sha256, sizeof p->model_sha256, "%064d", 0);
    p->n_layers = 8;
    p->k = 2;
    p->n_cand = 3;
    p->cand[0] = 5;
    p->cand[1] = 3;
    p->cand[2] = 4;
    for (int f = 0; f < PROBE_N_FEATURES; f++) {
        p->mean[f] = 0;
        p->std[f] = 1;
        p->precision[f][f] = 1;
    }
    p->d_max = 100;
    p->w[0][0] = 4;
    p->b[0] = 0;
    p->w[1][0] = 4;
    p->b[1] = -2;
    p->w[2][0] = -4; /* layer 4 is needed exactly when the others are not */
    p->b[2] = 1;
    p->threshold = 0.5f;
    p->floor = floor;
    p->z_max = 4;
}

static void decisions(void) {
    probe p;
    uint8_t mask[8];
    probe_decision d;
    float f[PROBE_N_FEATURES] = {0};
    make_probe(&p, 0.0f);
    f[0] = 2; /* s = sigmoid(8), sigmoid(6), sigmoid(-7): layers 5 and 3 go, 4 stays */
    probe_decide(&p, f, mask, &d);
    CHECK(d.outcome == PROBE_DECIDED_SKIP && d.n_skipped == 2 && same(mask, "11101011"),
          "each layer is skipped on its own regression (not a prefix of a ranking)");
    CHECK(fabsf(d.needed[2] - (float)(1 - 1 / (1 + exp(7.0)))) < 1e-6f, "needed is 1 - s per candidate");
    f[0] = 0.25f; /* sigmoid(1) skip; sigmoid(-1) keep; sigmoid(0) = 0.5 keep */
    probe_decide(&p, f, mask, &d);
    CHECK(d.n_skipped == 1 && same(mask, "11111011"), "a layer whose need reaches the threshold is computed");
    f[0] = -0.5f; /* sigmoid(-2), sigmoid(-4) keep; sigmoid(3) skip */
    probe_decide(&p, f, mask, &d);
    CHECK(d.n_skipped == 1 && same(mask, "11110111"), "a later regression skips although an earlier one keeps its layer");
    p.b[2] = -8;
    f[0] = -2;
    probe_decide(&p, f, mask, &d);
    CHECK(d.outcome == PROBE_DECIDED_FULL && same(mask, "11111111"), "features saying 'needed' give full depth");
    p.b[2] = 1;
    f[0] = 9;
    probe_decide(&p, f, mask, &d);
    CHECK(!d.in_range && d.outcome == PROBE_DECIDED_FULL && same(mask, "11111111"),
          "features far outside the calibration range give full depth");
    f[0] = NAN;
    probe_decide(&p, f, mask, &d);
    CHECK(!d.in_range && same(mask, "11111111"), "NaN features give full depth");
    /* Features 0 and 1 moved together at calibration (correlation 0.99):
     * each within 1 standard deviation, but in opposite directions, is a
     * combination calibration never saw. */
    p.precision[0][0] = p.precision[1][1] = 50.251256f;
    p.precision[0][1] = p.precision[1][0] = -49.748744f;
    p.d_max = 5;
    f[0] = 1;
    f[1] = 1;
    probe_decide(&p, f, mask, &d);
    CHECK(d.in_range && fabsf(d.distance - 1) < 0.01f && d.outcome == PROBE_DECIDED_SKIP,
          "features that move as at calibration are in range (distance %.3f)", d.distance);
    f[1] = -1;
    probe_decide(&p, f, mask, &d);
    CHECK(!d.in_range && d.distance > 14 && d.outcome == PROBE_DECIDED_FULL && same(mask, "11111111"),
          "a combination far from the calibration data (Mahalanobis distance %.1f) gives full depth", d.distance);
    f[1] = 0;
    make_probe(&p, 0.99f);
    f[0] = 0.25f;
    probe_decide(&p, f, mask, &d);
    CHECK(d.outcome == PROBE_DECIDED_FULL && d.confidence < 0.99f && same(mask, "11111111"),
          "below the confidence floor the request runs at full depth (confidence %.2f)", d.confidence);
    CHECK(PROBE_MAX_CANDIDATES * (PROBE_N_FEATURES + 1) <= 256, "at most 256 parameters");
}

static void files(void) {
    probe p, q;
    char err[512], path[] = "/tmp/ilpd-probe-test-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    make_probe(&p, 0.4f);
    p.metrics_json = strdup("{\"agreement_held_out\":0.995}");
    CHECK(probe_save(&p, path, err, sizeof err) == 0, "probe_save writes a file");
    int ok = probe_load(&q, path, err, sizeof err) == 0;
    CHECK(ok && q.n_cand == 3 && q.cand[1] == 3 && fabsf(q.w[1][0] - 4) < 1e-6f && fabsf(q.b[2] - 1) < 1e-6f &&
              q.precision[2][2] == 1 && q.precision[2][3] == 0 && fabsf(q.d_max - 100) < 1e-6f &&
              q.k == 2 && fabsf(q.floor - 0.4f) < 1e-6f && q.metrics_json && strstr(q.metrics_json, "0.995"),
          "probe_load reads back what probe_save wrote");
    if (ok) probe_free(&q);
    probe_free(&p);
    FILE *f = fopen(path, "r+");
    char text[8192] = {0};
    size_t len = fread(text, 1, sizeof text - 1, f);
    char *format = strstr(text, PROBE_FORMAT);
    if (format) format[strlen(PROBE_FORMAT) - 1] = '1';
    rewind(f);
    fwrite(text, 1, len, f);
    fclose(f);
    CHECK(format && probe_load(&q, path, err, sizeof err) == -1 && strstr(err, "calibrate it again"),
          "a probe of an older format (nested ranks) is refused: %s", err);
    f = fopen(path, "w");
    fputs("{\"model_sha256\": \"abc\", \"n_layers\": 8}", f);
    fclose(f);
    CHECK(probe_load(&q, path, err, sizeof err) == -1 && strstr(err, path) && strstr(err, "model_sha256"),
          "a corrupt probe file is refused with its name and the problem: %s", err);
    f = fopen(path, "w");
    fputs("{not json", f);
    fclose(f);
    CHECK(probe_load(&q, path, err, sizeof err) == -1 && strstr(err, "not valid JSON"), "a non-JSON probe file is refused");
    unlink(path);
}

int main(void) {
    hint_rules();
    decisions();
    files();
    CHECK_DONE();
}
