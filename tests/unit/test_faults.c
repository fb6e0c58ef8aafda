/* test_faults.c - run-time backend failures reach the caller, and the next
 * request runs as if nothing happened.
 *
 * On the built-in demo model (models/, no shared files needed), the engine's
 * testing faults (engine_params) make the backend fail where a real one
 * could: its scratch allocation (reserve) and one of its kernels, during
 * prefill or after some tokens of decode. Each failed generation must end
 * with ENGINE_STOP_ERROR and the backend's message, never with text past the
 * failure; the generation after it must give exactly the greedy answer of
 * an engine that never failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "tests/unit/check.h"

#define MODEL "models/ilpd-demo-F16.gguf"
#define N_GEN 12

typedef struct {
    char text[4096];
    size_t len;
    engine_result res;
} run_out;

static int on_text(void *ud, const char *text, size_t len) {
    run_out *o = ud;
    if (o->len + len < sizeof o->text) {
        memcpy(o->text + o->len, text, len);
        o->len += len;
        o->text[o->len] = 0;
    }
    return 0;
}

static void generate(engine *e, const int32_t *prompt, int n, run_out *o) {
    memset(o, 0, sizeof *o);
    engine_gen_params gp = {.max_tokens = N_GEN, .temperature = 0, .top_p = 1, .ignore_eos = 1};
    engine_callbacks cb = {.on_text = on_text, .ud = o};
    engine_generate(e, prompt, n, &gp, &cb, &o->res);
}

static engine *open_with(engine_params p) {
    char err[512];
    p.model_path = MODEL;
    p.n_threads = 2;
    p.device = ENGINE_DEVICE_CPU;
    engine *e = engine_open(&p, err, sizeof err);
    if (!e) printf("# %s\n", err);
    return e;
}

/* Runs three generations on an engine opened with P (whose fault hits the
 * second, or the first for SCRATCH) and checks the failure and the recovery
 * against WANT, the answer without faults. */
static void check_fault(const char *what, engine_params p, const int32_t *prompt, int n, const run_out *want,
                        int fails_at, int tokens_before) {
    engine *e = open_with(p);
    CHECK(e != NULL, "%s: open the model", what);
    if (!e) return;
    run_out o;
    for (int i = 1; i <= 3; i++) {
        generate(e, prompt, n, &o);
        if (i < fails_at) continue;
        if (i == fails_at) {
            CHECK(o.res.reason == ENGINE_STOP_ERROR && o.res.error[0], "%s: the generation ends with an error (\"%s\")",
                  what, o.res.error);
            CHECK(o.res.n_generated == tokens_before, "%s: it stops where the backend failed (%d tokens, want %d)",
                  what, o.res.n_generated, tokens_before);
            continue;
        }
        CHECK(o.res.reason == ENGINE_STOP_MAX_TOKENS && !strcmp(o.text, want->text),
              "%s: generation %d after it is the fault-free answer (%zu bytes, want %zu)", what, i - fails_at, o.len,
              want->len);
    }
    engine_close(e);
}

int main(void) {
    if (access(MODEL, R_OK)) {
        CHECK(0, "the built-in model %s is readable (run from the repository root)", MODEL);
        CHECK_DONE();
    }
    engine *e = open_with((engine_params){0});
    CHECK(e != NULL, "open the built-in model");
    if (!e) CHECK_DONE();
    int32_t *prompt = NULL;
    int n = engine_tokenize(e, "Once upon a time, a little fox", 0, &prompt);
    run_out want;
    generate(e, prompt, n, &want);
    CHECK(want.res.reason == ENGINE_STOP_MAX_TOKENS && want.len > 0, "a fault-free greedy answer (%zu bytes)", want.len);
    engine_close(e);

    check_fault("scratch allocation", (engine_params){.scratch_fail_request = 1}, prompt, n, &want, 1, 0);
    check_fault("a kernel in prefill", (engine_params){.kernel_fail_request = 2, .kernel_fail_token = 0}, prompt, n,
                &want, 2, 0);
    check_fault("a kernel after 5 tokens", (engine_params){.kernel_fail_request = 2, .kernel_fail_token = 5}, prompt,
                n, &want, 2, 5);

    /* The message names the backend and the operation. */
    e = open_with((engine_params){.kernel_fail_request = 1, .kernel_fail_token = 3});
    if (e) {
        run_out o;
        generate(e, prompt, n, &o);
        CHECK(strstr(o.res.error, "cpu backend failed: matmul: injected fault") && o.res.retryable,
              "a kernel failure is reported as the backend's, retryable (\"%s\")", o.res.error);
        float *logits = malloc((size_t)engine_get_info(e)->n_vocab * n * sizeof *logits);
        CHECK(logits && engine_forward_logits(e, prompt, n, NULL, logits) == 0,
              "a forward pass after the failure runs (the error state was cleared)");
        free(logits);
        engine_close(e);
    }
    free(prompt);
    CHECK_DONE();
}
