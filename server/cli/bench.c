/* bench.c - `ilpd bench`: prompt and generation speed of the engine on
 * one model, against limits measured in the same process:
 *
 * - memory read bandwidth: N threads stream over a 1 GiB buffer (best of
 *   several passes); generation reads every computed layer's weights and the
 *   output head once per token, so bandwidth / those bytes is the
 *   generation roofline (tok/s), and tg / roofline the ratio reached;
 * - arithmetic peak: N threads run independent FMA chains (float), VNNI
 *   int8 dot products and BF16 pair dot products; 2 * parameters per token
 *   over that peak is the prompt roofline (F32/F16 weights against the float
 *   peak, BF16 against the BF16 dot's where the kernels use one, the
 *   quantized types against the int8 peak, since their activations are
 *   quantized to int8). The probes use what the kernels may use under
 *   ILPD_CPU_ISA.
 *
 * The prompt is P random token ids (fixed seed), generation is greedy for
 * exactly N tokens (end-of-generation tokens do not stop it). A warm-up
 * request runs first. */
#include "server/cli/cli.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/log.h"
#include "probe/mask.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BENCH_X86 1
#endif

/* ---- machine limits ---- */

typedef struct {
    const uint8_t *p;
    size_t n;
    uint64_t sum;
    int kind; /* bandwidth: 0; FMA: 1; VNNI: 2; BF16 dot: 3 */
    long iters;
    double ops;
    pthread_barrier_t *bar;
} probe_arg;

#ifdef BENCH_X86
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t o[4];
    _mm256_storeu_si256((__m256i *)o, s);
    return o[0] + o[1] + o[2] + o[3];
}

/* 12 independent chains (named, so that they stay in registers) hide the
 * latency of the instruction measured on every current core (4-5 cycles, 2
 * per cycle). */
#define CHAINS12_INIT(F) a0 = F(0), a1 = F(1), a2 = F(2), a3 = F(3), a4 = F(4), a5 = F(5), a6 = F(6), a7 = F(7), \
                         a8 = F(8), a9 = F(9), a10 = F(10), a11 = F(11)
#define CHAINS12_STEP(F)                                                                                    \
    a0 = F(a0), a1 = F(a1), a2 = F(a2), a3 = F(a3), a4 = F(a4), a5 = F(a5), a6 = F(a6), a7 = F(a7), \
    a8 = F(a8), a9 = F(a9), a10 = F(a10), a11 = F(a11)
#define CHAINS12_SUM(ADD) \
    ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))), ADD(ADD(a8, a9), ADD(a10, a11)))
#define KEEP12(c) \
    __asm__ __volatile__("" : "+v"(c##0), "+v"(c##1), "+v"(c##2), "+v"(c##3), "+v"(c##4), "+v"(c##5), "+v"(c##6), \
                         "+v"(c##7), "+v"(c##8), "+v"(c##9), "+v"(c##10), "+v"(c##11))

/* Defines NAME(iters) for TARGET: 12 chains of TYPE set by SET1(i) and
 * advanced ITERS times by STEP (using the constants CONSTS declares), then
 * summed by ADD and reduced to one number by REDUCE (only so that the work
 * is not optimised away). */
#define PEAK_PROBE(NAME, TARGET, TYPE, CONSTS, SET1, STEP, ADD, REDUCE) \
    __attribute__((target(TARGET))) static double NAME(long iters) {     \
        CONSTS;                                                           \
        TYPE CHAINS12_INIT(SET1);                                         \
        for (long it = 0; it < iters; it++) {                             \
            CHAINS12_STEP(STEP);                                          \
            KEEP12(a);                                                    \
        }                                                                 \
        return REDUCE(CHAINS12_SUM(ADD));                                 \
    }

#define FMA_CONSTS(V, SET1) const V m = SET1(0.999999f), c = SET1(1e-7f)
#define INT8_CONSTS(V, SET1) const V u = SET1(3), w = SET1(-2)

#define FMA512_STEP(x) _mm512_fmadd_ps(x, m, c)
PEAK_PROBE(fma_avx512, "avx512f", __m512, FMA_CONSTS(__m512, _mm512_set1_ps), _mm512_set1_ps, FMA512_STEP,
           _mm512_add_ps, _mm512_reduce_add_ps)

#define FMA256_STEP(x) _mm256_fmadd_ps(x, m, c)
PEAK_PROBE(fma_avx2, "avx2,fma", __m256, FMA_CONSTS(__m256, _mm256_set1_ps), _mm256_set1_ps, FMA256_STEP,
           _mm256_add_ps, _mm256_cvtss_f32)

#define VNNI512_STEP(x) _mm512_dpbusd_epi32(x, u, w)
#define VNNI512_REDUCE(s) (double)(uint32_t)_mm512_reduce_add_epi32(s) /* unsigned: the chains wrap around */
PEAK_PROBE(vnni_avx512, "avx512f,avx512vnni", __m512i, INT8_CONSTS(__m512i, _mm512_set1_epi8), _mm512_set1_epi32,
           VNNI512_STEP, _mm512_add_epi32, VNNI512_REDUCE)

#define BF16_CONSTS \
    const __m512bh u = (__m512bh)_mm512_set1_epi32(0x3F7F3F7F), w = (__m512bh)_mm512_set1_epi32(0x33D633D6)
#define BF16_STEP(x) _mm512_dpbf16_ps(x, u, w)
PEAK_PROBE(dpbf16_avx512, "avx512f,avx512bf16", __m512, BF16_CONSTS, _mm512_set1_ps, BF16_STEP, _mm512_add_ps,
           _mm512_reduce_add_ps)

#define MADDUBS_STEP(x) _mm256_add_epi32(x, _mm256_madd_epi16(_mm256_maddubs_epi16(u, w), one))
PEAK_PROBE(maddubs_avx2, "avx2", __m256i,
           INT8_CONSTS(__m256i, _mm256_set1_epi8); const __m256i one = _mm256_set1_epi16(1), _mm256_set1_epi32,
           MADDUBS_STEP, _mm256_add_epi32, _mm256_cvtsi256_si32)
#endif

static uint64_t read_plain(const uint8_t *p, size_t n) {
    const uint64_t *q = (const uint64_t *)p;
    uint64_t s = 0;
    for (size_t i = 0; i < n / 8; i++) s += q[i];
    return s;
}

/* 1 when ILPD_CPU_ISA keeps the kernels below LEVEL ("avx512" or "avx2"):
 * the probes follow the cap. */
static int isa_capped(const char *level) {
    const char *cap = getenv("ILPD_CPU_ISA");
    if (!cap) return 0;
    if (!strcmp(cap, "scalar")) return 1;
    return !strcmp(level, "avx512") && (!strcmp(cap, "avx2") || !strcmp(cap, "avxvnni"));
}

static int have_avx512(void) {
#ifdef BENCH_X86
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni") && !isa_capped("avx512");
#else
    return 0;
#endif
}

static int have_avx2(void) {
#ifdef BENCH_X86
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !isa_capped("avx2");
#else
    return 0;
#endif
}

/* The BF16 pair dot product that BF16 prompts run on (kern_avx512.c). */
static int have_bf16_dot(void) {
#ifdef BENCH_X86
    return have_avx512() && __builtin_cpu_supports("avx512bf16") && !getenv("ILPD_CPU_NO_BF16");
#else
    return 0;
#endif
}

static void *probe_thread(void *v) {
    probe_arg *a = v;
    pthread_barrier_wait(a->bar);
    switch (a->kind) {
    case 0:
#ifdef BENCH_X86
        if (have_avx2()) {
            a->sum = read_avx2(a->p, a->n);
            break;
        }
#endif
        a->sum = read_plain(a->p, a->n);
        break;
    case 1:
#ifdef BENCH_X86
        if (have_avx512()) {
            a->sum = (uint64_t)fma_avx512(a->iters);
            a->ops = (double)a->iters * 12 * 16 * 2;
        } else if (have_avx2()) {
            a->sum = (uint64_t)fma_avx2(a->iters);
            a->ops = (double)a->iters * 12 * 8 * 2;
        }
#endif
        break;
    case 2:
#ifdef BENCH_X86
        if (have_avx512()) {
            a->sum = (uint64_t)vnni_avx512(a->iters);
            a->ops = (double)a->iters * 12 * 64 * 2;
        } else if (have_avx2()) {
            a->sum = (uint64_t)maddubs_avx2(a->iters);
            a->ops = (double)a->iters * 12 * 32 * 2;
        }
#endif
        break;
    case 3:
#ifdef BENCH_X86
        if (have_bf16_dot()) {
            a->sum = (uint64_t)dpbf16_avx512(a->iters);
            a->ops = (double)a->iters * 12 * 32 * 2;
        }
#endif
        break;
    }
    return NULL;
}

/* Runs KIND on N threads once; returns the seconds taken (or -1) and adds the ops done to *OPS. */
static double probe_run(int kind, int n, const uint8_t *buf, size_t bytes, long iters, double *ops) {
    pthread_t th[256];
    probe_arg args[256];
    pthread_barrier_t bar;
    if (n > 256) n = 256;
    pthread_barrier_init(&bar, NULL, (unsigned)n + 1);
    size_t share = bytes / (size_t)n / 128 * 128;
    for (int i = 0; i < n; i++) {
        args[i] = (probe_arg){buf ? buf + (size_t)i * share : NULL, share, 0, kind, iters, 0, &bar};
        if (pthread_create(&th[i], NULL, probe_thread, &args[i])) {
            n = i; /* cannot happen in practice; the barrier would hang, so give up */
            return -1;
        }
    }
    pthread_barrier_wait(&bar);
    double t0 = cli_now_s();
    uint64_t sink = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        sink += args[i].sum;
        if (ops) *ops += args[i].ops;
    }
    double dt = cli_now_s() - t0;
    pthread_barrier_destroy(&bar);
    __asm__ __volatile__("" ::"r"(sink));
    return dt;
}

/* Read bandwidth in bytes/s (best of REPS passes over a 1 GiB buffer), or 0. */
static double measure_bandwidth(int n, int reps) {
    size_t bytes = (size_t)1 << 30;
    uint8_t *buf = aligned_alloc(4096, bytes);
    if (!buf) return 0;
    memset(buf, 1, bytes);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double dt = probe_run(0, n, buf, bytes, 0, NULL);
        size_t share = bytes / (size_t)n / 128 * 128;
        if (dt > 0 && share * n / dt > best) best = (double)(share * n) / dt;
    }
    free(buf);
    return best;
}

/* Peak ops/s of KIND (1: float FMA, 2: int8 dot, 3: BF16 dot) on n threads, best of 3; 0 where the CPU lacks it. */
static double measure_peak(int kind, int n) {
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double ops = 0, dt = probe_run(kind, n, NULL, 0, 20000000, &ops);
        if (dt > 0 && ops / dt > best) best = ops / dt;
    }
    return best;
}

static size_t current_rss(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0, rss = 0;
    if (!f) return 0;
    if (fscanf(f, "%lu %lu", &pages, &rss) != 2) rss = 0;
    fclose(f);
    return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}

/* ---- the command ---- */

const char cli_bench_usage[] =
    "  ilpd bench    -m MODEL [-t THREADS] [-p PROMPT_TOKENS] [-n GEN_TOKENS] [--layer-mask BASE64]\n"
    "                [--kv-f16] [--reps R] [--json] [--verify [--device cpu|cuda|auto]] [--json-schema FILE]\n"
    "  --verify            the cost of verifying k tokens in one pass against one decode step (on the\n"
    "                      CPU, or the device --device names)\n"
    "  --json-schema FILE  generate under that JSON Schema (constrained decoding, stopping where the\n"
    "                      grammar ends) and report the grammar's share of the decode time\n";

static int usage(void) { return cli_usage_print(cli_bench_usage, 0); }

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s ? s : "", &end, 10);
    if (!s || errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "ilpd bench: %s expects an integer in [%d, %d]\n", opt, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

typedef struct {
    const char *model, *mask_b64, *schema_path;
    char *schema;                /* the --json-schema file's text */
    int n_threads, n_prompt, n_gen, json, kv_f16, reps, verify;
    engine_device device;        /* --verify only */
    int device_set;
} bench_opts;

/* Parses the options of `ilpd bench` into O. Returns -1 to go on, or the
 * exit status (0 after --help, 2 for a usage error). */
static int bench_parse(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.n_prompt = 128, .n_gen = 128, .reps = 1};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(a)) {
            return cli_usage_print(cli_bench_usage, 1);
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!v) return usage();
            o->model = v;
            i++;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (parse_int(a, v, 0, 1024, &o->n_threads)) return 2;
            i++;
        } else if (!strcmp(a, "-p")) {
            if (parse_int(a, v, 1, 1 << 20, &o->n_prompt)) return 2;
            i++;
        } else if (!strcmp(a, "-n")) {
            if (parse_int(a, v, 1, 1 << 20, &o->n_gen)) return 2;
            i++;
        } else if (!strcmp(a, "--reps")) {
            if (parse_int(a, v, 1, 100, &o->reps)) return 2;
            i++;
        } else if (!strcmp(a, "--layer-mask")) {
            if (!v) return usage();
            o->mask_b64 = v;
            i++;
        } else if (!strcmp(a, "--json-schema")) {
            if (!v) return usage();
            o->schema_path = v;
            i++;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--kv-f16")) {
            o->kv_f16 = 1;
        } else if (!strcmp(a, "--verify")) {
            o->verify = 1;
        } else if (!strcmp(a, "--device")) {
            if (cli_device_parse(v, &o->device)) return 2;
            o->device_set = 1;
            i++;
        } else {
            fprintf(stderr, "ilpd bench: unknown argument '%s'\n", a);
            return usage();
        }
    }
    if (!o->model) return usage();
    if (o->device_set && !o->verify) {
        fprintf(stderr, "ilpd bench: --device goes with --verify (the GPU's speed: test_cuda --bench)\n");
        return 2;
    }
    if (o->n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->n_threads = n > 0 ? (int)n : 1;
    }
    return -1;
}

/* What one bench run measured, and the shape it needs to report it. */
typedef struct {
    char name[256];
    int n_layers, computed, n_generated, quant, bf16; /* bf16: BF16 weights */
    size_t wbytes, wbytes_full, head_bytes, kv_bytes, peak_rss, rss;
    double layer_params, params, t_load, best_pp, best_tg, best_ttft;
    double grammar_ms, decode_ms;  /* --json-schema: time in the grammar, and in decoding, of the best run */
    int n_forced, n_masks;
} bench_result;

/* Fills MASK (per layer) from the --layer-mask option, or all ones. 0 or -1. */
static int bench_mask(const bench_opts *o, int n_layers, uint8_t *mask) {
    memset(mask, 1, MASK_MAX_LAYERS);
    if (!o->mask_b64) return 0;
    uint8_t wire[MASK_WIRE_BYTES];
    if (mask_decode_b64_for(o->mask_b64, strlen(o->mask_b64), n_layers, wire)) return -1;
    mask_from_wire(wire, n_layers, mask);
    return 0;
}

/* Loads the model, runs a warm-up and o->reps measured requests of
 * n_prompt random tokens and n_gen generated ones, and fills R (the best
 * run counts). Returns 0, or the exit status after printing why. */
static int bench_run(const bench_opts *o, bench_result *r) {
    char err[512];
    engine_params ep = {.model_path = o->model, .n_ctx = o->n_prompt + o->n_gen, .n_threads = o->n_threads,
                        .device = ENGINE_DEVICE_CPU, .kv_f16 = o->kv_f16};
    memset(r, 0, sizeof *r);
    r->t_load = cli_now_s();
    engine *e = engine_open(&ep, err, sizeof err);
    if (!e) {
        fprintf(stderr, "ilpd bench: %s\n", err);
        return 1;
    }
    r->t_load = cli_now_s() - r->t_load;
    const engine_info *in = engine_get_info(e);
    uint8_t mask[MASK_MAX_LAYERS];
    int rc = 1;
    int32_t *prompt = NULL;
    if (bench_mask(o, in->n_layers, mask)) {
        fprintf(stderr, "ilpd bench: --layer-mask must be the base64 of %d bytes of 0/1\n", MASK_WIRE_BYTES);
        rc = 2;
        goto done;
    }
    r->wbytes = r->wbytes_full = r->head_bytes = in->head_bytes;
    for (int l = 0; l < in->n_layers; l++) {
        r->wbytes_full += in->layer_bytes[l];
        if (mask[l]) {
            r->computed++;
            r->wbytes += in->layer_bytes[l];
        }
    }
    /* parameters per token (multiply-adds) of the computed layers and the head */
    double q_dim = (double)in->n_heads * in->head_dim, kv_dim = (double)in->n_kv_heads * in->head_dim;
    r->layer_params = in->dim * q_dim * 2 + in->dim * kv_dim * 2 + 3.0 * in->dim * in->ffn_dim;
    r->params = r->layer_params * r->computed + (double)in->n_vocab * in->dim;
    prompt = malloc((size_t)o->n_prompt * sizeof *prompt);
    if (!prompt) {
        fprintf(stderr, "ilpd bench: out of memory\n");
        goto done;
    }
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < o->n_prompt; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        int lo = in->n_vocab > 16 ? 3 : 0;
        prompt[i] = lo + (int32_t)((rng >> 33) % (uint64_t)(in->n_vocab - lo));
    }
    engine_gen_params gp = {.max_tokens = o->n_gen, .temperature = 0, .top_p = 1, .layer_mask = mask,
                            .ignore_eos = !o->schema, .format_schema = o->schema};
    engine_callbacks cb = {0};
    engine_result res;
    /* warm-up: a short request */
    engine_gen_params wp = gp;
    wp.max_tokens = 2;
    engine_generate(e, prompt, o->n_prompt < 16 ? o->n_prompt : 16, &wp, &cb, &res);
    r->best_ttft = 1e30;
    for (int rep = 0; res.reason != ENGINE_STOP_ERROR && rep < o->reps; rep++) {
        engine_generate(e, prompt, o->n_prompt, &gp, &cb, &res);
        double pp = o->n_prompt / (res.prefill_ms / 1e3);
        double tg = res.n_generated > 1 ? (res.n_generated - 1) / ((res.last_token_ms - res.ttft_ms) / 1e3) : 0;
        if (pp > r->best_pp) r->best_pp = pp;
        if (tg > r->best_tg) {
            r->best_tg = tg;
            r->grammar_ms = res.grammar_ms;
            r->decode_ms = res.total_ms - res.prefill_ms;
            r->n_forced = res.n_forced;
            r->n_masks = res.n_masks;
        }
        if (res.ttft_ms < r->best_ttft) r->best_ttft = res.ttft_ms;
        r->kv_bytes = res.kv_bytes;
        r->n_generated = res.n_generated;
    }
    if (res.reason == ENGINE_STOP_ERROR) {
        fprintf(stderr, "ilpd bench: %s\n", res.error);
        goto done;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    r->peak_rss = (size_t)ru.ru_maxrss * 1024;
    r->rss = current_rss();
    snprintf(r->name, sizeof r->name, "%s", in->name);
    r->bf16 = !strcmp(in->weight_type, "BF16");
    r->n_layers = in->n_layers;
    /* quantized when the layers hold fewer than 2 bytes per parameter */
    r->quant = (double)(r->wbytes - r->head_bytes) / (r->layer_params * (r->computed ? r->computed : 1)) < 1.9;
    rc = 0;
done:
    free(prompt);
    engine_close(e);
    return rc;
}

/* Prints R against the machine's limits, measured now (the model is gone,
 * and so out of the peak RSS): a table, or one JSON line with --json. */
static void bench_report(const bench_opts *o, const bench_result *r) {
    double bw = measure_bandwidth(o->n_threads, 5);
    double flops = measure_peak(1, o->n_threads), iops = measure_peak(2, o->n_threads);
    double roof_tg = bw > 0 ? bw / (double)r->wbytes : 0;
    double bflops = r->bf16 ? measure_peak(3, o->n_threads) : 0;
    double peak = r->quant ? iops : bflops > 0 ? bflops : flops;
    const char *unit = r->quant ? "op(int8)" : bflops > 0 ? "flop(bf16 dot)" : "flop";
    double roof_pp = peak > 0 ? peak / (2 * r->params) : 0;
    if (o->json) {
        printf("{\"model\":\"%s\",\"threads\":%d,\"n_prompt\":%d,\"n_gen\":%d,\"n_generated\":%d,\"layers\":%d,"
               "\"layers_computed\":%d,\"pp_tok_s\":%.3f,\"tg_tok_s\":%.3f,\"ttft_ms\":%.3f,\"peak_rss_bytes\":%zu,"
               "\"rss_bytes\":%zu,\"kv_bytes\":%zu,\"weight_bytes_per_token\":%zu,\"weight_bytes_per_token_full\":%zu,"
               "\"bandwidth_gbs\":%.3f,\"tg_roofline_tok_s\":%.3f,\"tg_roofline_ratio\":%.4f,\"peak_gflops\":%.1f,"
               "\"peak_int8_gops\":%.1f,\"peak_bf16_gflops\":%.1f,\"pp_roofline_tok_s\":%.3f,\"pp_roofline_ratio\":%.4f,\"load_s\":%.3f,"
               "\"grammar_ms\":%.3f,\"grammar_share\":%.5f,\"forced_tokens\":%d,\"grammar_masks\":%d}\n",
               r->name, o->n_threads, o->n_prompt, o->n_gen, r->n_generated, r->n_layers, r->computed, r->best_pp,
               r->best_tg, r->best_ttft, r->peak_rss, r->rss, r->kv_bytes, r->wbytes, r->wbytes_full, bw / 1e9, roof_tg,
               roof_tg > 0 ? r->best_tg / roof_tg : 0, flops / 1e9, iops / 1e9, bflops / 1e9, roof_pp,
               roof_pp > 0 ? r->best_pp / roof_pp : 0, r->t_load, r->grammar_ms,
               r->decode_ms > 0 ? r->grammar_ms / r->decode_ms : 0, r->n_forced, r->n_masks);
        return;
    }
    printf("model            %s (%d layers, %d computed)\n", o->model, r->n_layers, r->computed);
    printf("threads          %d\n", o->n_threads);
    printf("prompt           %d tokens: %.2f tok/s (roofline %.1f tok/s at %.0f G%s/s: %.0f%%)\n", o->n_prompt,
           r->best_pp, roof_pp, peak / 1e9, unit, roof_pp > 0 ? 100 * r->best_pp / roof_pp : 0);
    printf("generation       %d tokens: %.2f tok/s (roofline %.2f tok/s: %.0f%%)\n", r->n_generated, r->best_tg, roof_tg,
           roof_tg > 0 ? 100 * r->best_tg / roof_tg : 0);
    printf("time to first    %.1f ms\n", r->best_ttft);
    if (o->schema)
        printf("grammar          %.3f ms/token, %.2f%% of decoding (%d forced tokens, %d full masks)\n",
               r->grammar_ms / (r->n_generated ? r->n_generated : 1),
               r->decode_ms > 0 ? 100 * r->grammar_ms / r->decode_ms : 0, r->n_forced, r->n_masks);
    printf("weights/token    %.1f MB (full depth %.1f MB)\n", r->wbytes / 1e6, r->wbytes_full / 1e6);
    printf("read bandwidth   %.2f GB/s (%d threads)\n", bw / 1e9, o->n_threads);
    printf("peak compute     %.1f GFLOP/s (FMA), %.1f GOP/s (int8)", flops / 1e9, iops / 1e9);
    if (bflops > 0) printf(", %.1f GFLOP/s (BF16 dot)", bflops / 1e9);
    printf("\n");
    printf("peak RSS         %.1f MB (now %.1f MB)\n", r->peak_rss / 1e6, r->rss / 1e6);
    printf("KV cache         %zu bytes\n", r->kv_bytes);
    printf("load             %.2f s\n", r->t_load);
}

/* --verify: the table of verify(k) / decode(1), k = 1..ENGINE_VERIFY_ROWS rows,
 * after a context of -p tokens (lossless mode's verification cost). */
static int bench_verify(const bench_opts *o) {
    char err[512];
    engine_params ep = {.model_path = o->model, .n_ctx = o->n_prompt + ENGINE_VERIFY_ROWS, .n_threads = o->n_threads,
                        .device = o->device_set ? o->device : ENGINE_DEVICE_CPU, .kv_f16 = o->kv_f16};
    engine *e = engine_open(&ep, err, sizeof err);
    if (!e) {
        fprintf(stderr, "ilpd bench: %s\n", err);
        return 1;
    }
    int reps = 50 * o->reps, rc = 0;
    double one = 0;
    printf("%-6s %10s %14s%s\n", "rows", "ms/pass", "vs 1 row", o->json ? "" : "   (after a context of -p tokens)");
    for (int k = 1; k <= ENGINE_VERIFY_ROWS && rc == 0; k++) {
        double ms = engine_bench_rows(e, o->n_prompt, k, reps);
        if (ms < 0) {
            fprintf(stderr, "ilpd bench: the verification pass of %d rows failed\n", k);
            rc = 1;
            break;
        }
        if (k == 1) one = ms;
        printf("%-6d %10.4f %13.2fx\n", k, ms, ms / one);
    }
    engine_close(e);
    return rc;
}

int cli_bench(int argc, char **argv) {
    bench_opts o;
    bench_result r;
    int rc = bench_parse(argc, argv, &o);
    if (rc >= 0) return rc;
    log_set_plain(1);
    if (o.verify) return bench_verify(&o);
    if (o.schema_path && !(o.schema = cli_read_file(o.schema_path, 1 << 20))) {
        fprintf(stderr, "ilpd bench: %s: cannot read the schema\n", o.schema_path);
        return 1;
    }
    rc = bench_run(&o, &r);
    if (rc == 0) bench_report(&o, &r);
    free(o.schema);
    return rc;
}
