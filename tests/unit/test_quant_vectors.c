/* test_quant_vectors.c - the scalar reference of every tensor type against
 * llama.cpp's gguf-py, bit for bit: tests/data/quant/TYPE.bin holds random
 * blocks and the floats gguf-py dequantizes them to (written by
 * scripts/model/quant_vectors.py). quant_dequantize_row must give the same
 * float bits; quant_dot_row must agree with a double-precision dot of those
 * floats. Also the type table (block sizes, names) for each type. Run from
 * the repository root. */
#include "kernels/quant.h"
#include "tests/unit/check.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    ggml_type type;
    int block_size;
    size_t block_bytes;
} type_case;

static const type_case CASES[] = {
    {"F16", GGML_TYPE_F16, 1, 2},        {"BF16", GGML_TYPE_BF16, 1, 2},       {"Q4_0", GGML_TYPE_Q4_0, 32, 18},
    {"Q4_1", GGML_TYPE_Q4_1, 32, 20},    {"Q5_0", GGML_TYPE_Q5_0, 32, 22},     {"Q5_1", GGML_TYPE_Q5_1, 32, 24},
    {"Q8_0", GGML_TYPE_Q8_0, 32, 34},    {"Q2_K", GGML_TYPE_Q2_K, 256, 84},    {"Q3_K", GGML_TYPE_Q3_K, 256, 110},
    {"Q4_K", GGML_TYPE_Q4_K, 256, 144},  {"Q5_K", GGML_TYPE_Q5_K, 256, 176},   {"Q6_K", GGML_TYPE_Q6_K, 256, 210},
    {"IQ4_NL", GGML_TYPE_IQ4_NL, 32, 18}, {"IQ4_XS", GGML_TYPE_IQ4_XS, 256, 136},
};

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads the whole file; NULL when it cannot. */
static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                *len = (size_t)n;
            }
        }
    }
    fclose(f);
    return buf;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rnd(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 23) - 1.0);
}

static void check_type(const type_case *c) {
    CHECK(ggml_type_block_size(c->type) == c->block_size && ggml_type_block_bytes(c->type) == c->block_bytes &&
              !strcmp(ggml_type_name(c->type), c->name),
          "%s: block of %d values in %zu bytes, named %s", c->name, c->block_size, c->block_bytes, c->name);
    char path[256];
    snprintf(path, sizeof path, "tests/data/quant/%s.bin", c->name);
    size_t len = 0;
    uint8_t *f = slurp(path, &len);
    if (!f) {
        CHECK(0, "%s: cannot read %s (run from the repository root)", c->name, path);
        return;
    }
    uint32_t type = len >= 20 ? rd32(f + 8) : 0, n = len >= 20 ? rd32(f + 12) : 0, nbytes = len >= 20 ? rd32(f + 16) : 0;
    int ok_header = len >= 20 && !memcmp(f, "ILPDQV1", 8) && type == (uint32_t)c->type && n > 0 &&
                    n % (uint32_t)c->block_size == 0 && nbytes == ggml_row_bytes(c->type, n) &&
                    len == 20 + (size_t)nbytes + 4 * (size_t)n;
    CHECK(ok_header, "%s: %s is a vector file of this type (%u values, %u bytes)", c->name, path, n, nbytes);
    if (!ok_header) {
        free(f);
        return;
    }
    const uint8_t *blocks = f + 20;
    float *want = malloc(4 * (size_t)n), *got = malloc(4 * (size_t)n), *x = malloc(4 * (size_t)n);
    if (!want || !got || !x) {
        CHECK(0, "%s: out of memory", c->name);
        free(want), free(got), free(x), free(f);
        return;
    }
    memcpy(want, blocks + nbytes, 4 * (size_t)n); /* little-endian host */
    memset(got, 0xff, 4 * (size_t)n);
    quant_dequantize_row(c->type, blocks, got, (int)n);
    int first_bad = -1;
    for (uint32_t i = 0; i < n && first_bad < 0; i++)
        if (memcmp(&got[i], &want[i], 4)) first_bad = (int)i;
    CHECK(first_bad < 0, "%s: quant_dequantize_row matches gguf-py bit for bit (%u values)%s", c->name, n,
          first_bad < 0 ? "" : " - differs");
    if (first_bad >= 0)
        printf("#   %s value %d: got %.9g, gguf-py %.9g\n", c->name, first_bad, got[first_bad], want[first_bad]);

    /* Rows of one block each and of every block together. */
    int bs = c->block_size == 1 ? 64 : c->block_size;
    double worst = 0;
    int rows_ok = 1;
    for (int t = 0; t < 3; t++) {
        for (uint32_t i = 0; i < n; i++) x[i] = rnd();
        for (int r0 = -1; r0 < (int)(n / (uint32_t)bs); r0++) { /* -1: the whole vector as one row */
            int off = r0 < 0 ? 0 : r0 * bs, len_ = r0 < 0 ? (int)n : bs;
            double ref = 0, mag = 0;
            for (int i = 0; i < len_; i++) {
                ref += (double)want[off + i] * (double)x[off + i];
                mag += fabs((double)want[off + i] * (double)x[off + i]);
            }
            const uint8_t *row = blocks + ggml_row_bytes(c->type, (uint64_t)off);
            double d = fabs((double)quant_dot_row(c->type, row, x + off, len_) - ref);
            double rel = mag > 0 ? d / mag : d;
            if (rel > worst) worst = rel;
            if (!(d <= 1e-5 * mag + 1e-30)) rows_ok = 0;
        }
    }
    CHECK(rows_ok, "%s: quant_dot_row agrees with a double dot of the reference values (worst %.2g of the magnitude)",
          c->name, worst);
    free(want), free(got), free(x), free(f);
}

int main(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) check_type(&CASES[i]);
    /* A type number that is not a format stays refused by the table. */
    CHECK(ggml_type_block_size((ggml_type)4) == 0 && ggml_type_block_size((ggml_type)15) == 0 &&
              ggml_row_bytes((ggml_type)22, 256) == 0,
          "removed and unsupported type numbers (4, 15, 22) have no block size");
    CHECK_DONE();
}
