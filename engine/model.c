/* model.c - loading the weights of the Llama-block families (engine/arch.h)
 * and the masked forward pass. */
#include "engine/model.h"
#include "probe/mask.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MODEL_CHUNK 64      /* prompt rows per operation, unless the backend prefers others */
#define MODEL_LOGIT_ROWS 64 /* rows of logits computed at once */
/* Each tensor starts on its own page, so that one layer's weights can be
 * protected as a unit (the test that a skipped layer reads no weight). */
#define WEIGHT_ALIGN 4096
#define HUGE_PAGE ((size_t)2 << 20)
#define WEIGHT_SPAN(n) (((n) + WEIGHT_ALIGN - 1) / WEIGHT_ALIGN * WEIGHT_ALIGN)

typedef struct {
    const gguf_file *f;
    char *err;
    size_t errlen;
} loader;

__attribute__((format(printf, 2, 3))) static int load_fail(loader *ld, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ld->err, ld->errlen, "%s: %s", ld->f->path, msg);
    return -1;
}

/* The load error of a weight the backend refused (say, a type it has no
 * kernels for): names the tensor (NAME_FMT...) and its type, then the
 * backend's reason. */
__attribute__((format(printf, 4, 5))) static void upload_fail(loader *ld, kb_backend *kb, const kb_weight *w,
                                                              const char *name_fmt, ...) {
    char name[96];
    va_list ap;
    va_start(ap, name_fmt);
    vsnprintf(name, sizeof name, name_fmt, ap);
    va_end(ap);
    const char *why = kb_error(kb); /* NULL when the backend recorded no reason */
    load_fail(ld, "cannot upload tensor '%s' (%s) to the %s backend: %s", name, ggml_type_name(w->type), kb->name,
              why ? why : "out of memory");
}

/* Reads the integer "ARCH.KEY" into *out; missing keys use DEF (or fail when DEF < 0). */
static int arch_int(loader *ld, const char *arch, const char *key, int def, int *out) {
    char name[128];
    int64_t v;
    snprintf(name, sizeof name, "%s.%s", arch, key);
    int rc = gguf_kv_get_i64(ld->f, name, &v);
    if (rc == 0 && def >= 0) {
        *out = def;
        return 0;
    }
    if (rc == 0) return load_fail(ld, "missing metadata key '%s'", name);
    if (rc < 0) return load_fail(ld, "metadata key '%s' is not an integer", name);
    if (v <= 0 || v > (1 << 24)) return load_fail(ld, "metadata '%s' = %lld is out of range", name, (long long)v);
    *out = (int)v;
    return 0;
}

static float arch_float(loader *ld, const char *arch, const char *key, float def) {
    char name[128];
    float v;
    snprintf(name, sizeof name, "%s.%s", arch, key);
    return gguf_kv_get_f32(ld->f, name, &v) == 1 ? v : def;
}

/* Finds tensor NAME with shape [cols, rows] (rows 0 for a 1-D tensor) and
 * fills W (host pointer set later). Returns 0, 1 when absent and optional,
 * or -1. */
static int find_weight(loader *ld, const char *name, int cols, int rows, int optional, kb_weight *w,
                       const gguf_tensor **out) {
    const gguf_tensor *t = gguf_tensor_find(ld->f, name);
    memset(w, 0, sizeof *w);
    *out = NULL;
    if (!t) return optional ? 1 : load_fail(ld, "missing tensor '%s'", name);
    int want_dims = rows ? 2 : 1;
    if ((int)t->n_dims != want_dims || t->ne[0] != (uint64_t)cols || (rows && t->ne[1] != (uint64_t)rows))
        return load_fail(ld, "tensor '%s' has shape [%llu, %llu], expected [%d, %d]", name, (unsigned long long)t->ne[0],
                         t->n_dims > 1 ? (unsigned long long)t->ne[1] : 0ull, cols, rows);
    if (!rows && t->type != GGML_TYPE_F32) return load_fail(ld, "tensor '%s' must be F32", name);
    w->type = t->type;
    w->cols = cols;
    w->rows = rows ? rows : 1;
    w->nbytes = t->nbytes;
    *out = t;
    return 0;
}

typedef struct {
    kb_weight *w;
    const gguf_tensor *t;
    size_t off;           /* where W's bytes start in T's (a row range of a fused tensor) */
} weight_ref;

/* Rows [R0, R0 + ROWS) of the 2-D tensor T (COLS wide) as the weight W,
 * added to REFS: the pieces of a fused tensor (Phi-3's attn_qkv and
 * gate-up ffn_up). */
static void weight_rows(const gguf_tensor *t, int cols, int r0, int rows, kb_weight *w, weight_ref *refs,
                        int *n_refs) {
    size_t rb = ggml_row_bytes(t->type, (uint64_t)cols);
    memset(w, 0, sizeof *w);
    w->type = t->type;
    w->cols = cols;
    w->rows = rows;
    w->nbytes = rb * (size_t)rows;
    refs[(*n_refs)++] = (weight_ref){w, t, rb * (size_t)r0};
}

/* Layer L's fused tensors, when the family allows them and the file has
 * them: blk.L.attn_qkv.weight ([dim] x [q_dim + 2 kv_dim]: Q, K, V rows) and
 * an ffn_up.weight of 2 ffn_dim rows without ffn_gate (gate rows, then up
 * rows: llama.cpp's SwiGLU of the two halves). Sets *QKV / *UP when taken.
 * Returns 0 or -1 (a fused tensor of the wrong shape). */
static int fused_weights(loader *ld, const model *m, int l, model_layer *L, weight_ref *refs, int *n_refs, int *qkv,
                         int *up) {
    char name[96];
    *qkv = *up = 0;
    if (!m->family->fused) return 0;
    snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", l);
    const gguf_tensor *t = gguf_tensor_find(ld->f, name);
    if (t) {
        if (t->n_dims != 2 || t->ne[0] != (uint64_t)m->dim || t->ne[1] != (uint64_t)(m->q_dim + 2 * m->kv_dim))
            return load_fail(ld, "tensor '%s' has shape [%llu, %llu], expected [%d, %d] (Q, K and V rows)", name,
                             (unsigned long long)t->ne[0], t->n_dims > 1 ? (unsigned long long)t->ne[1] : 0ull, m->dim,
                             m->q_dim + 2 * m->kv_dim);
        weight_rows(t, m->dim, 0, m->q_dim, &L->wq, refs, n_refs);
        weight_rows(t, m->dim, m->q_dim, m->kv_dim, &L->wk, refs, n_refs);
        weight_rows(t, m->dim, m->q_dim + m->kv_dim, m->kv_dim, &L->wv, refs, n_refs);
        *qkv = 1;
    } else {
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
        if (!gguf_tensor_find(ld->f, name))
            return load_fail(ld, "missing tensor 'blk.%d.attn_qkv.weight' (or attn_q, attn_k and attn_v)", l);
    }
    snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", l);
    if (gguf_tensor_find(ld->f, name)) return 0;
    snprintf(name, sizeof name, "blk.%d.ffn_up.weight", l);
    t = gguf_tensor_find(ld->f, name);
    if (!t) return load_fail(ld, "missing tensor '%s'", name);
    if (t->n_dims != 2 || t->ne[0] != (uint64_t)m->dim || t->ne[1] != (uint64_t)(2 * m->ffn_dim))
        return load_fail(ld, "tensor '%s' has shape [%llu, %llu], expected [%d, %d] (gate and up rows, no ffn_gate)",
                         name, (unsigned long long)t->ne[0], t->n_dims > 1 ? (unsigned long long)t->ne[1] : 0ull,
                         m->dim, 2 * m->ffn_dim);
    weight_rows(t, m->dim, 0, m->ffn_dim, &L->w_gate, refs, n_refs);
    weight_rows(t, m->dim, m->ffn_dim, m->ffn_dim, &L->w_up, refs, n_refs);
    *up = 1;
    return 0;
}

/* A layer's weights, listed once: the tensor name after "blk.N.", the
 * field, and the shape as widths of the model (rows NONE: a 1-D tensor). */
typedef enum { WIDTH_NONE, WIDTH_DIM, WIDTH_Q, WIDTH_KV, WIDTH_FFN, WIDTH_HEAD } width_kind;
/* Weights every family has, and the groups a family has or not (arch.h):
 * within a group the first weight decides, and the others must follow. */
typedef enum { GROUP_CORE, GROUP_BIAS, GROUP_QK_NORM, GROUP_POST_NORM } weight_group;
typedef struct {
    const char *suffix;
    size_t field;         /* offsetof(model_layer, ...) */
    width_kind cols, rows;
    weight_group group;
} layer_weight_def;

static const layer_weight_def LAYER_WEIGHTS[] = {
    {"attn_norm.weight", offsetof(model_layer, attn_norm), WIDTH_DIM, WIDTH_NONE, GROUP_CORE},
    {"attn_q.weight", offsetof(model_layer, wq), WIDTH_DIM, WIDTH_Q, GROUP_CORE},
    {"attn_k.weight", offsetof(model_layer, wk), WIDTH_DIM, WIDTH_KV, GROUP_CORE},
    {"attn_v.weight", offsetof(model_layer, wv), WIDTH_DIM, WIDTH_KV, GROUP_CORE},
    {"attn_output.weight", offsetof(model_layer, wo), WIDTH_Q, WIDTH_DIM, GROUP_CORE},
    {"ffn_norm.weight", offsetof(model_layer, ffn_norm), WIDTH_DIM, WIDTH_NONE, GROUP_CORE},
    {"ffn_gate.weight", offsetof(model_layer, w_gate), WIDTH_DIM, WIDTH_FFN, GROUP_CORE},
    {"ffn_up.weight", offsetof(model_layer, w_up), WIDTH_DIM, WIDTH_FFN, GROUP_CORE},
    {"ffn_down.weight", offsetof(model_layer, w_down), WIDTH_FFN, WIDTH_DIM, GROUP_CORE},
    {"attn_q.bias", offsetof(model_layer, bq), WIDTH_Q, WIDTH_NONE, GROUP_BIAS},
    {"attn_k.bias", offsetof(model_layer, bk), WIDTH_KV, WIDTH_NONE, GROUP_BIAS},
    {"attn_v.bias", offsetof(model_layer, bv), WIDTH_KV, WIDTH_NONE, GROUP_BIAS},
    {"attn_q_norm.weight", offsetof(model_layer, q_norm), WIDTH_HEAD, WIDTH_NONE, GROUP_QK_NORM},
    {"attn_k_norm.weight", offsetof(model_layer, k_norm), WIDTH_HEAD, WIDTH_NONE, GROUP_QK_NORM},
    {"post_attention_norm.weight", offsetof(model_layer, post_attn_norm), WIDTH_DIM, WIDTH_NONE, GROUP_POST_NORM},
    {"post_ffw_norm.weight", offsetof(model_layer, post_ffn_norm), WIDTH_DIM, WIDTH_NONE, GROUP_POST_NORM},
};
#define N_LAYER_WEIGHTS (sizeof LAYER_WEIGHTS / sizeof *LAYER_WEIGHTS)

static kb_weight *layer_weight(model_layer *L, size_t i) { return (kb_weight *)((char *)L + LAYER_WEIGHTS[i].field); }

static int width_of(const model *m, width_kind k) {
    switch (k) {
    case WIDTH_DIM: return m->dim;
    case WIDTH_Q: return m->q_dim;
    case WIDTH_KV: return m->kv_dim;
    case WIDTH_FFN: return m->ffn_dim;
    case WIDTH_HEAD: return m->head_dim;
    case WIDTH_NONE: break;
    }
    return 0;
}

/* YaRN (llama.cpp's rope_yarn with ext_factor 1): frequency I of HALF is
 * the interpolated one (F / FACTOR) below the correction range [LOW, HIGH]
 * of dimension pairs, the original one above it, a linear ramp between. */
static double yarn_freq(double f, int i, double factor, double low, double high) {
    double y = (i - low) / (high - low > 0.001 ? high - low : 0.001);
    double keep = 1 - (y < 0 ? 0 : y > 1 ? 1 : y); /* share of the original frequency */
    return f / factor * (1 - keep) + f * keep;
}

/* The first (LOW, rounded down) and last (HIGH, rounded up) dimension pair
 * whose wavelength fits BETA_FAST / BETA_SLOW turns in ORIG positions, as
 * ggml_rope_yarn_corr_dims computes them. */
static void yarn_range(int n_dims, int orig, float base, float beta_fast, float beta_slow, double *low, double *high) {
    float lo = floorf(n_dims * logf(orig / (beta_fast * 2 * (float)M_PI)) / (2 * logf(base)));
    float hi = ceilf(n_dims * logf(orig / (beta_slow * 2 * (float)M_PI)) / (2 * logf(base)));
    *low = lo > 0 ? lo : 0;
    *high = hi < n_dims - 1 ? hi : n_dims - 1;
}

/* Computes the RoPE inverse frequencies with the file's scaling: Llama 3.1
 * (rope_freqs.weight factors, or the rope.scaling.* keys), linear, or YaRN
 * (which also scales the rotation by mscale = 1 + 0.1 ln(factor), as
 * llama.cpp does for files without yarn_log_multiplier). */
static int rope_setup(model *m, loader *ld) {
    int half = m->n_rot / 2;
    float base = arch_float(ld, m->arch, "rope.freq_base", 10000.0f);
    m->inv_freq = malloc((size_t)half * sizeof(float));
    if (!m->inv_freq) return load_fail(ld, "out of memory");
    const gguf_tensor *ft = gguf_tensor_find(ld->f, "rope_freqs.weight");
    if (ft && (ft->type != GGML_TYPE_F32 || ft->ne[0] != (uint64_t)half))
        return load_fail(ld, "tensor 'rope_freqs.weight' must be F32 with rope.dimension_count/2 = %d values", half);
    const gguf_tensor *fs = gguf_tensor_find(ld->f, "rope_factors_short.weight");
    const gguf_tensor *fl = gguf_tensor_find(ld->f, "rope_factors_long.weight");
    const gguf_tensor *tabs[] = {fs, fl};
    static const char *const tab_names[] = {"rope_factors_short.weight", "rope_factors_long.weight"};
    for (int i = 0; i < 2; i++)
        if (tabs[i] && (tabs[i]->type != GGML_TYPE_F32 || tabs[i]->n_dims != 1 || tabs[i]->ne[0] != (uint64_t)half))
            return load_fail(ld, "tensor '%s' must be F32 with rope.dimension_count/2 = %d values", tab_names[i], half);
    if (!fs != !fl) return load_fail(ld, "LongRoPE needs both rope_factors_short and rope_factors_long");
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch);
    char *stype = gguf_kv_get_str(ld->f, key);
    enum { NONE, LINEAR, LLAMA3, YARN, LONGROPE } kind = fs ? LONGROPE : NONE;
    if (stype && !strcmp(stype, "linear")) kind = LINEAR;
    else if (stype && !strcmp(stype, "llama3")) kind = LLAMA3;
    else if (stype && !strcmp(stype, "yarn")) kind = YARN;
    else if (stype && strcmp(stype, "none") && !(fs && !strcmp(stype, "longrope"))) {
        /* LongRoPE without its factor tables: refused rather than run wrong */
        int rc = load_fail(ld, "unsupported rope scaling '%s' (none, linear, llama3, yarn and longrope with its "
                               "rope_factors_short/long tensors are supported)", stype);
        free(stype);
        return rc;
    }
    free(stype);
    if (fs && kind != LONGROPE) return load_fail(ld, "rope_factors_short/long with another rope scaling");
    float factor = arch_float(ld, m->arch, "rope.scaling.factor", 1.0f);
    float lo = arch_float(ld, m->arch, "rope.scaling.low_freq_factor", 1.0f);
    float hi = arch_float(ld, m->arch, "rope.scaling.high_freq_factor", 4.0f);
    int orig = m->n_ctx_train;
    if (arch_int(ld, m->arch, "rope.scaling.original_context_length", m->n_ctx_train, &orig)) return -1;
    if (kind != NONE && !(factor > 0)) return load_fail(ld, "rope.scaling.factor %g must be positive", factor);
    if (kind == YARN && arch_float(ld, m->arch, "rope.scaling.yarn_log_multiplier", 0.0f) != 0.0f)
        return load_fail(ld, "YaRN with yarn_log_multiplier (DeepSeek's attention factor) is unsupported");
    double y_low = 0, y_high = 0;
    if (kind == YARN && !ft) {
        yarn_range(m->n_rot, orig, base, arch_float(ld, m->arch, "rope.scaling.yarn_beta_fast", 32.0f),
                   arch_float(ld, m->arch, "rope.scaling.yarn_beta_slow", 1.0f), &y_low, &y_high);
        m->attn.mscale = factor > 1 ? 1.0f + 0.1f * logf(factor) : 1.0f;
    }
    m->rope_orig_ctx = orig;
    if (kind == LONGROPE) {
        if (!(m->inv_freq_long = malloc((size_t)half * sizeof(float)))) return load_fail(ld, "out of memory");
        for (int i = 0; i < half; i++)
            m->inv_freq_long[i] = (float)(pow(base, -2.0 * i / m->n_rot) / ((const float *)fl->data)[i]);
    }
    float attn_factor = arch_float(ld, m->arch, "rope.scaling.attn_factor", 1.0f);
    if (kind != YARN && attn_factor != 1.0f) m->attn.mscale = attn_factor; /* llama.cpp's rope_attn_factor */
    for (int i = 0; i < half; i++) {
        double f = pow(base, -2.0 * i / m->n_rot);
        if (kind == LONGROPE) {
            f /= ((const float *)fs->data)[i];
        } else if (ft) {
            f /= ((const float *)ft->data)[i];
        } else if (kind == LLAMA3) {
            double wavelen = 2 * M_PI / f, lo_wl = orig / lo, hi_wl = orig / hi;
            if (wavelen > lo_wl) {
                f /= factor;
            } else if (wavelen >= hi_wl) {
                double smooth = (orig / wavelen - lo) / (hi - lo);
                f = (1 - smooth) * f / factor + smooth * f;
            }
        } else if (kind == LINEAR) {
            f /= factor;
        } else if (kind == YARN) {
            f = yarn_freq(f, i, factor, y_low, y_high);
        }
        m->inv_freq[i] = (float)f;
    }
    m->attn.inv_freq = m->inv_freq;
    return 0;
}

/* The family's scales (embedding, attention scores, logit cap) and its
 * sliding-window layers: every layer but each swa_period-th sees only the
 * last attention.sliding_window positions, rotated with rope.freq_base_swa
 * and no rope scaling (llama.cpp's gemma3). A file without the window key
 * has global layers only. */
static int gemma_setup(model *m, loader *ld) {
    const model_arch *fam = m->family;
    m->embed_scale = fam->embed_scale ? sqrtf((float)m->dim) : 1.0f;
    m->logit_softcap = arch_float(ld, m->arch, "final_logit_softcapping", 0.0f);
    if (fam->embed_scale) /* Gemma's query_pre_attn_scalar: dim / heads for the 62-layer 27B, else the head size */
        m->attn.scale = 1.0f / sqrtf((float)(m->n_layers == 62 ? m->dim / m->n_heads : m->head_dim));
    if (!fam->swa_period) return 0;
    char key[128];
    int64_t v = 0;
    snprintf(key, sizeof key, "%s.attention.sliding_window", m->arch);
    if (gguf_kv_get_i64(ld->f, key, &v) < 0 || v < 0 || v > (1 << 24))
        return load_fail(ld, "metadata '%s' must be an integer from 0 (no window) to %d", key, 1 << 24);
    int window = (int)v, period = fam->swa_period;
    if (!window) return 0;
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", m->arch);
    if (gguf_kv_get_i64(ld->f, key, &v) == 1) { /* an array (per-layer flags) is ignored, as llama.cpp does */
        if (v < 0 || v > m->n_layers) return load_fail(ld, "metadata '%s' = %lld is out of range", key, (long long)v);
        period = (int)v;
    }
    int half = m->n_rot / 2;
    float base = arch_float(ld, m->arch, "rope.freq_base_swa", 10000.0f);
    if (!(m->inv_freq_swa = malloc((size_t)half * sizeof(float)))) return load_fail(ld, "out of memory");
    for (int i = 0; i < half; i++) m->inv_freq_swa[i] = (float)pow(base, -2.0 * i / m->n_rot);
    m->attn_swa = m->attn;
    m->attn_swa.inv_freq = m->inv_freq_swa;
    m->attn_swa.mscale = 0;
    m->attn_swa.window = window;
    for (int l = 0; l < m->n_layers; l++) m->layers[l].swa = period == 0 || l % period < period - 1;
    return 0;
}

static int read_hparams(model *m, loader *ld) {
    char *arch = gguf_kv_get_str(ld->f, "general.architecture");
    if (!arch) return load_fail(ld, "missing 'general.architecture'");
    m->family = arch_find(arch);
    if (!m->family) {
        int rc = load_fail(ld, "unsupported architecture '%s' (%s are supported)", arch, arch_names());
        free(arch);
        return rc;
    }
    snprintf(m->arch, sizeof m->arch, "%s", arch);
    free(arch);
    if (arch_int(ld, m->arch, "block_count", -1, &m->n_layers) || arch_int(ld, m->arch, "embedding_length", -1, &m->dim) ||
        arch_int(ld, m->arch, "feed_forward_length", -1, &m->ffn_dim) ||
        arch_int(ld, m->arch, "attention.head_count", -1, &m->n_heads) ||
        arch_int(ld, m->arch, "attention.head_count_kv", m->n_heads, &m->n_kv_heads) ||
        arch_int(ld, m->arch, "context_length", 2048, &m->n_ctx_train))
        return -1;
    if (m->n_layers > MASK_MAX_LAYERS)
        return load_fail(ld, "block_count %d is more than the %d layers supported", m->n_layers, MASK_MAX_LAYERS);
    if (m->dim % m->n_heads) return load_fail(ld, "embedding_length %d is not a multiple of head_count %d", m->dim, m->n_heads);
    if (arch_int(ld, m->arch, "attention.key_length", m->dim / m->n_heads, &m->head_dim)) return -1;
    int head_v = m->head_dim;
    if (arch_int(ld, m->arch, "attention.value_length", m->head_dim, &head_v)) return -1;
    if (head_v != m->head_dim)
        return load_fail(ld, "key and value heads of different sizes (%d, %d) are unsupported", m->head_dim, head_v);
    if (m->n_heads % m->n_kv_heads)
        return load_fail(ld, "head_count %d is not a multiple of head_count_kv %d", m->n_heads, m->n_kv_heads);
    if (m->head_dim % 2 || m->head_dim > 1024) return load_fail(ld, "unsupported head size %d", m->head_dim);
    if (arch_int(ld, m->arch, "rope.dimension_count", m->head_dim, &m->n_rot)) return -1;
    if (m->n_rot % 2 || m->n_rot > m->head_dim) /* fewer: partial rotary (Phi-4-mini), the rest passes through */
        return load_fail(ld, "rope.dimension_count %d must be even and at most the head size %d", m->n_rot,
                         m->head_dim);
    m->eps = arch_float(ld, m->arch, "attention.layer_norm_rms_epsilon", 1e-5f);
    m->q_dim = m->n_heads * m->head_dim;
    m->kv_dim = m->n_kv_heads * m->head_dim;
    m->attn.n_heads = m->n_heads;
    m->attn.n_kv_heads = m->n_kv_heads;
    m->attn.head_dim = m->head_dim;
    m->attn.n_rot = m->n_rot;
    m->attn.neox = m->family->neox;
    const gguf_tensor *emb = gguf_tensor_find(ld->f, "token_embd.weight");
    if (!emb || emb->n_dims != 2) return load_fail(ld, "missing 2-D tensor 'token_embd.weight'");
    if (emb->ne[1] > (1u << 24)) return load_fail(ld, "absurd vocabulary size %llu", (unsigned long long)emb->ne[1]);
    m->n_vocab = (int)emb->ne[1];
    return rope_setup(m, ld);
}

int model_load(model *m, const gguf_file *f, kb_backend *kb, char *err, size_t errlen) {
    loader ld = {f, err, errlen};
    weight_ref *refs = NULL;
    memset(m, 0, sizeof *m);
    if (read_hparams(m, &ld)) goto fail;
    m->layers = calloc((size_t)m->n_layers, sizeof *m->layers);
    refs = calloc((size_t)m->n_layers * N_LAYER_WEIGHTS + 3, sizeof *refs);
    if (!m->layers || !refs) {
        load_fail(&ld, "out of memory");
        goto fail;
    }
    if (gemma_setup(m, &ld)) goto fail;
    int n_refs = 0, rc;
    const gguf_tensor *t;
#define WEIGHT(name, w, cols, rows, optional)                                     \
    do {                                                                          \
        rc = find_weight(&ld, name, cols, rows, optional, w, &t);                 \
        if (rc < 0) goto fail;                                                    \
        if (rc == 0) refs[n_refs++] = (weight_ref){w, t, 0};                      \
    } while (0)
    WEIGHT("token_embd.weight", &m->tok_embd, m->dim, m->n_vocab, 0);
    WEIGHT("output_norm.weight", &m->output_norm, m->dim, 0, 0);
    WEIGHT("output.weight", &m->output, m->dim, m->n_vocab, 1);
    if (rc == 1) m->output = m->tok_embd; /* tied head: shares the embedding */
    for (int l = 0; l < m->n_layers; l++) {
        model_layer *L = &m->layers[l];
        char name[96];
        int *has[] = {[GROUP_BIAS] = &L->has_bias, [GROUP_QK_NORM] = &L->has_qk_norm,
                      [GROUP_POST_NORM] = &L->has_post_norm};
        arch_need need[] = {[GROUP_BIAS] = m->family->qkv_bias, [GROUP_QK_NORM] = m->family->qk_norm,
                            [GROUP_POST_NORM] = m->family->post_norm};
        weight_group prev = GROUP_CORE;
        int qkv, up;
        if (fused_weights(&ld, m, l, L, refs, &n_refs, &qkv, &up)) goto fail;
        for (size_t i = 0; i < N_LAYER_WEIGHTS; i++) {
            const layer_weight_def *d = &LAYER_WEIGHTS[i];
            kb_weight *lw = layer_weight(L, i);
            if ((qkv && (lw == &L->wq || lw == &L->wk || lw == &L->wv)) || (up && (lw == &L->w_gate || lw == &L->w_up)))
                continue; /* taken from a fused tensor */
            int first = d->group != prev;
            prev = d->group;
            if (d->group != GROUP_CORE && need[d->group] == ARCH_ABSENT) continue;
            /* the group's first weight decides whether the others are required */
            int optional = d->group != GROUP_CORE && (first ? need[d->group] == ARCH_OPTIONAL : !*has[d->group]);
            snprintf(name, sizeof name, "blk.%d.%s", l, d->suffix);
            WEIGHT(name, layer_weight(L, i), width_of(m, d->cols), width_of(m, d->rows), optional);
            if (d->group != GROUP_CORE && first) *has[d->group] = rc == 0;
        }
    }
#undef WEIGHT
    /* Copy every weight into one anonymous allocation: file pages of a
     * mapping that sits idle get dropped by the kernel, anonymous ones not. */
    size_t total = 0;
    for (int i = 0; i < n_refs; i++) total += WEIGHT_SPAN(refs[i].w->nbytes);
    /* In whole huge pages, and asked to be backed by them: the kernel's
     * access scanner (DAMON here) clears accessed bits of idle pages, and
     * with 4 KiB pages the first request after an idle spell then pays for
     * re-walking ~250 pages per MiB of weights; with 2 MiB pages it is ~1. */
    size_t span = (total + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (posix_memalign(&m->weights_mem, HUGE_PAGE, span ? span : HUGE_PAGE)) {
        m->weights_mem = NULL;
        load_fail(&ld, "out of memory for %zu bytes of weights", total);
        goto fail;
    }
    madvise(m->weights_mem, span, MADV_HUGEPAGE); /* advice: failure is harmless */
    m->weights_bytes = total;
    size_t off = 0, page = (size_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < n_refs; i++) {
        const uint8_t *src = (const uint8_t *)refs[i].t->data + refs[i].off;
        memcpy((uint8_t *)m->weights_mem + off, src, refs[i].w->nbytes);
        refs[i].w->host = (uint8_t *)m->weights_mem + off;
        off += WEIGHT_SPAN(refs[i].w->nbytes);
        /* the file's pages go as soon as they are copied, so that the
         * peak memory is the weights once, not twice (a page shared with
         * a tensor still to copy is read again from the page cache) */
        uintptr_t a = (uintptr_t)src / page * page, b = ((uintptr_t)src + refs[i].w->nbytes) / page * page;
        if (f->owns_map && b > a) madvise((void *)a, b - a, MADV_DONTNEED);
    }
    if (m->output.host == NULL) m->output = m->tok_embd;
    if (f->owns_map) madvise((void *)f->map, f->map_size, MADV_DONTNEED); /* a caller's buffer stays */
    for (int l = 0; l < m->n_layers; l++) {
        model_layer *L = &m->layers[l];
        for (size_t i = 0; i < N_LAYER_WEIGHTS; i++) {
            kb_weight *w = layer_weight(L, i);
            if (!w->host) continue;
            L->bytes += w->nbytes;
            if (kb->weight_upload(kb, w)) {
                upload_fail(&ld, kb, w, "blk.%d.%s", l, LAYER_WEIGHTS[i].suffix);
                goto fail;
            }
        }
    }
    if (kb->weight_upload(kb, &m->tok_embd)) {
        upload_fail(&ld, kb, &m->tok_embd, "token_embd.weight");
        goto fail;
    }
    if (kb->weight_upload(kb, &m->output_norm)) {
        upload_fail(&ld, kb, &m->output_norm, "output_norm.weight");
        goto fail;
    }
    if (m->output.host != m->tok_embd.host && kb->weight_upload(kb, &m->output)) {
        upload_fail(&ld, kb, &m->output, "output.weight");
        goto fail;
    }
    if (m->output.host == m->tok_embd.host) m->output = m->tok_embd;
    free(refs);
    return 0;
fail:
    free(refs);
    model_free(m, kb);
    return -1;
}

int model_layer_protect(model *m, int l, int protect) {
    if (l < 0 || l >= m->n_layers) return -1;
    for (size_t i = 0; i < N_LAYER_WEIGHTS; i++) {
        const kb_weight *w = layer_weight(&m->layers[l], i);
        if (w->host && mprotect((void *)w->host, WEIGHT_SPAN(w->nbytes), protect ? PROT_NONE : PROT_READ | PROT_WRITE))
            return -1;
    }
    return 0;
}

void model_free(model *m, kb_backend *kb) {
    if (m->layers) {
        for (int l = 0; l < m->n_layers; l++)
            for (size_t i = 0; i < N_LAYER_WEIGHTS; i++)
                if (layer_weight(&m->layers[l], i)->dev) kb->weight_release(kb, layer_weight(&m->layers[l], i));
    }
    if (m->output.dev && m->output.dev != m->tok_embd.dev) kb->weight_release(kb, &m->output);
    if (m->tok_embd.dev) kb->weight_release(kb, &m->tok_embd);
    if (m->output_norm.dev) kb->weight_release(kb, &m->output_norm);
    free(m->layers);
    free(m->inv_freq);
    free(m->inv_freq_swa);
    free(m->inv_freq_long);
    free(m->weights_mem);
    memset(m, 0, sizeof *m);
}

static void kv_release(model_state *s, kb_backend *kb, int l) {
    if (!s->kv[l].k) return;
    kb->free(kb, s->kv[l].k);
    kb->free(kb, s->kv[l].v);
    s->kv_bytes -= 2 * kb_kv_bytes(s->kv[l].type, s->kv[l].n_ctx, s->kv[l].kv_dim);
    s->kv[l].k = s->kv[l].v = NULL;
}

/* Allocates the KV cache of layer L; 0 or -1 with err set. */
static int kv_alloc(model_state *s, const model *m, kb_backend *kb, int l, char *err, size_t errlen) {
    kb_kv *kv = &s->kv[l];
    size_t bytes = kb_kv_bytes(s->kv_type, s->n_ctx, m->kv_dim);
    kv->type = s->kv_type;
    kv->n_ctx = s->n_ctx;
    kv->kv_dim = m->kv_dim;
    kv->head_dim = m->head_dim;
    kv->k = kb->alloc(kb, bytes);
    kv->v = kv->k ? kb->alloc(kb, bytes) : NULL;
    if (!kv->k || !kv->v) {
        kb->free(kb, kv->k);
        kv->k = NULL;
        snprintf(err, errlen, "out of memory for the KV cache of layer %d (%zu bytes)", l, 2 * bytes);
        return -1;
    }
    s->kv_bytes += 2 * bytes;
    return 0;
}

/* The rows a request state of MAX_ROWS rows runs at once (its chunk), its
 * rows of logits, and the bytes of its activation buffers in model_state
 * order (x, xb, q, k, v, att, hb, hb2, logits). */
enum { STATE_BUFS = 9 };
static void state_sizes(const model *m, const kb_backend *kb, int max_rows, int *chunk, int *logit_rows,
                        size_t bytes[STATE_BUFS]) {
    int rows = max_rows < 1 ? 1 : max_rows, pass = kb->prompt_rows > 0 ? kb->prompt_rows : MODEL_CHUNK;
    *chunk = rows < pass ? rows : pass;
    *logit_rows = *chunk < MODEL_LOGIT_ROWS ? *chunk : MODEL_LOGIT_ROWS;
    size_t c = (size_t)*chunk, f = sizeof(float);
    int wide = m->dim > m->q_dim ? m->dim : m->q_dim;
    size_t b[STATE_BUFS] = {(size_t)rows * m->dim * f, c * wide * f,         c * m->q_dim * f,
                            c * m->kv_dim * f,         c * m->kv_dim * f,    c * m->q_dim * f,
                            c * m->ffn_dim * f,        c * m->ffn_dim * f,   (size_t)*logit_rows * m->n_vocab * f};
    memcpy(bytes, b, sizeof b);
}

static kb_scratch_shape scratch_shape(const model *m, int chunk, int n_ctx) {
    int wide = m->dim > m->q_dim ? m->dim : m->q_dim;
    kb_scratch_shape shape = {chunk, m->ffn_dim > wide ? m->ffn_dim : wide, n_ctx, &m->attn};
    return shape;
}

size_t model_state_bytes(const model *m, kb_backend *kb, int n_ctx, int max_rows, const uint8_t *mask,
                         kb_kv_type kv_type) {
    int chunk, logit_rows;
    size_t bytes[STATE_BUFS], sum = 0;
    state_sizes(m, kb, max_rows, &chunk, &logit_rows, bytes);
    for (int i = 0; i < STATE_BUFS; i++) sum += bytes[i];
    for (int l = 0; l < m->n_layers; l++)
        if (!mask || mask[l]) sum += 2 * kb_kv_bytes(kv_type, n_ctx, m->kv_dim);
    kb_scratch_shape shape = scratch_shape(m, chunk, n_ctx);
    return sum + (kb->scratch_bytes ? kb->scratch_bytes(kb, &shape) : 0);
}

int model_context_fit(const model *m, kb_backend *kb, int n_ctx, kb_kv_type kv_type, size_t room) {
    if (model_state_bytes(m, kb, n_ctx, n_ctx, NULL, kv_type) <= room) return n_ctx;
    int lo = 1, hi = n_ctx; /* lo fits (or is 1), hi does not */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (model_state_bytes(m, kb, mid, mid, NULL, kv_type) <= room) lo = mid;
        else hi = mid;
    }
    return lo >= 2 && model_state_bytes(m, kb, lo, lo, NULL, kv_type) <= room ? lo : 0;
}

int model_state_init(model_state *s, const model *m, kb_backend *kb, int n_ctx, int max_rows, const uint8_t *mask,
                     kb_kv_type kv_type, char *err, size_t errlen) {
    size_t bytes[STATE_BUFS];
    memset(s, 0, sizeof *s);
    s->n_layers = m->n_layers;
    s->n_ctx = n_ctx;
    s->kv_type = kv_type;
    s->max_rows = max_rows < 1 ? 1 : max_rows;
    state_sizes(m, kb, s->max_rows, &s->chunk, &s->logit_rows, bytes);
    s->mask = malloc((size_t)m->n_layers);
    s->kv = calloc((size_t)m->n_layers, sizeof *s->kv);
    if (!s->mask || !s->kv) goto oom;
    for (int l = 0; l < m->n_layers; l++) s->mask[l] = mask ? mask[l] != 0 : 1;
    float **bufs[STATE_BUFS] = {&s->x, &s->xb, &s->q, &s->k, &s->v, &s->att, &s->hb, &s->hb2, &s->logits};
    for (int i = 0; i < STATE_BUFS; i++)
        if (!(*bufs[i] = kb->alloc(kb, bytes[i]))) goto oom;
    for (int l = 0; l < m->n_layers; l++)
        if (s->mask[l] && kv_alloc(s, m, kb, l, err, errlen)) goto fail;
    /* after the KV cache: a request that does not fit grows no scratch */
    kb_scratch_shape shape = scratch_shape(m, s->chunk, n_ctx);
    if (kb->reserve(kb, &shape)) {
        snprintf(err, errlen, "%s", kb_error(kb) ? kb_error(kb) : "reserve: out of memory");
        goto fail;
    }
    return 0;
oom:
    snprintf(err, errlen, "out of memory for the request state (%d positions)", n_ctx);
fail:
    model_state_free(s, kb);
    return -1;
}

void model_state_free(model_state *s, kb_backend *kb) {
    for (int l = 0; s->kv && l < s->n_layers; l++) kv_release(s, kb, l);
    free(s->kv);
    free(s->mask);
    float *bufs[] = {s->x, s->xb, s->q, s->k, s->v, s->att, s->hb, s->hb2, s->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) kb->free(kb, bufs[i]);
    memset(s, 0, sizeof *s);
}

int model_state_set_mask(model_state *s, const model *m, kb_backend *kb, const uint8_t *mask, char *err,
                         size_t errlen) {
    for (int l = 0; l < m->n_layers; l++) {
        s->mask[l] = mask[l] != 0;
        if (!s->mask[l]) kv_release(s, kb, l);
        else if (!s->kv[l].k && kv_alloc(s, m, kb, l, err, errlen)) return -1;
    }
    return 0;
}

void model_set_context(model *m, int n_ctx) {
    if (m->inv_freq_long) m->attn.inv_freq = n_ctx > m->rope_orig_ctx ? m->inv_freq_long : m->inv_freq;
}

void model_embed(const model *m, kb_backend *kb, model_state *s, const int32_t *tokens, int n) {
    kb->embed(kb, s->x, &m->tok_embd, tokens, n);
    if (m->embed_scale != 1.0f) kb->scale(kb, s->x, m->embed_scale, (size_t)n * m->dim);
}

/* One layer over rows [r0, r0+n) (positions pos0+r0..). With ADDEND, the
 * layer before left its output in s->xb to be added to the residual
 * stream: the addition goes with this layer's first RMSNorm (one pass on
 * backends that fuse them). With LEAVE, this layer leaves its own output so
 * (returns 1); else it adds it (returns 0). */
static int layer_forward(const model *m, kb_backend *kb, model_state *s, int l, int r0, int n, int pos0, int addend,
                         int leave) {
    const model_layer *L = &m->layers[l];
    const kb_attn_shape *attn = L->swa ? &m->attn_swa : &m->attn;
    float *x = s->x + (size_t)r0 * m->dim;
    if (addend)
        kb_add_rmsnorm(kb, x, s->xb, s->xb, &L->attn_norm, n, m->dim, m->eps);
    else
        kb->rmsnorm(kb, s->xb, x, &L->attn_norm, n, m->dim, m->eps);
    float *qkv[3] = {s->q, s->k, s->v};
    const kb_weight *wqkv[3] = {&L->wq, &L->wk, &L->wv};
    kb_matmul_many(kb, qkv, wqkv, 3, s->xb, n);
    if (L->has_bias) {
        kb->add_bias(kb, s->q, &L->bq, n);
        kb->add_bias(kb, s->k, &L->bk, n);
        kb->add_bias(kb, s->v, &L->bv, n);
    }
    if (L->has_qk_norm) { /* each head a row of head_dim values, normed in place */
        kb->rmsnorm(kb, s->q, s->q, &L->q_norm, n * m->n_heads, m->head_dim, m->eps);
        kb->rmsnorm(kb, s->k, s->k, &L->k_norm, n * m->n_kv_heads, m->head_dim, m->eps);
    }
    kb_attention_rope(kb, s->att, s->q, s->k, s->v, &s->kv[l], n, pos0 + r0, attn);
    kb->matmul(kb, s->xb, &L->wo, s->att, n);
    if (L->has_post_norm) kb->rmsnorm(kb, s->xb, s->xb, &L->post_attn_norm, n, m->dim, m->eps);
    kb_add_rmsnorm(kb, x, s->xb, s->xb, &L->ffn_norm, n, m->dim, m->eps);
    float *gu[2] = {s->hb, s->hb2};
    const kb_weight *wgu[2] = {&L->w_gate, &L->w_up};
    kb_matmul_many(kb, gu, wgu, 2, s->xb, n);
    if (m->family->gelu) {
        kb->geglu(kb, s->hb, s->hb2, (size_t)n * m->ffn_dim);
        kb->matmul(kb, s->xb, &L->w_down, s->hb, n);
    } else {
        kb_swiglu_matmul(kb, s->xb, &L->w_down, s->hb, s->hb2, n);
    }
    if (L->has_post_norm) kb->rmsnorm(kb, s->xb, s->xb, &L->post_ffn_norm, n, m->dim, m->eps);
    if (leave) return 1;
    kb->add(kb, x, s->xb, (size_t)n * m->dim);
    return 0;
}

/* Layers [l0, l1) that MASK and, when not NULL, DRAFT compute. */
static void forward_masked(const model *m, kb_backend *kb, model_state *s, int n, int pos0, int l0, int l1,
                           const uint8_t *draft) {
    /* rows in one pass: each layer's last addition goes with the next one's first norm */
    int one = n <= s->chunk, addend = 0;
    for (int l = l0; l < l1 && l < m->n_layers; l++) {
        if (!s->mask[l] || (draft && !draft[l])) continue;
        if (one) {
            addend = layer_forward(m, kb, s, l, 0, n, pos0, addend, 1);
            continue;
        }
        for (int r = 0; r < n; r += s->chunk)
            layer_forward(m, kb, s, l, r, n - r < s->chunk ? n - r : s->chunk, pos0, 0, 0);
    }
    if (addend) kb->add(kb, s->x, s->xb, (size_t)n * m->dim);
}

void model_forward_layers(const model *m, kb_backend *kb, model_state *s, int n, int pos0, int l0, int l1) {
    forward_masked(m, kb, s, n, pos0, l0, l1, NULL);
}

/* Final norm and output head for C rows from r0 into s->logits. */
static void logits_rows(const model *m, kb_backend *kb, model_state *s, int r0, int c) {
    kb->rmsnorm(kb, s->xb, s->x + (size_t)r0 * m->dim, &m->output_norm, c, m->dim, m->eps);
    kb->matmul(kb, s->logits, &m->output, s->xb, c);
}

/* Rows [r, r + c) of s->logits to HOST_OUT, soft-capped when the family caps them. */
static void logits_copy(const model *m, kb_backend *kb, model_state *s, int r, int c, float *host_out) {
    kb->to_host(kb, host_out, s->logits + (size_t)r * m->n_vocab, (size_t)c * m->n_vocab * sizeof(float));
    if (m->logit_softcap > 0)
        for (size_t i = 0; i < (size_t)c * m->n_vocab; i++)
            host_out[i] = m->logit_softcap * tanhf(host_out[i] / m->logit_softcap);
}

void model_logits(const model *m, kb_backend *kb, model_state *s, int r0, int n, float *host_out) {
    for (int r = 0; r < n; r += s->logit_rows) {
        int c = n - r < s->logit_rows ? n - r : s->logit_rows;
        logits_rows(m, kb, s, r0 + r, c);
        logits_copy(m, kb, s, 0, c, host_out + (size_t)r * m->n_vocab);
    }
}

/* model_decode up to the logits: when the NL rows fit s->logits (returns
 * 1) they are left there, else (0) they are not computed. */
static int decode_logits(const model *m, kb_backend *kb, model_state *s, const int32_t *tokens, int n, int pos0,
                         const uint8_t *draft, int r0, int nl) {
    int fit = nl <= s->logit_rows, step = fit && n <= KB_STEP_ROWS;
    if (step) kb_step_begin(kb, pos0);
    model_embed(m, kb, s, tokens, n);
    forward_masked(m, kb, s, n, pos0, 0, m->n_layers, draft);
    if (fit) logits_rows(m, kb, s, r0, nl);
    if (step) kb_step_end(kb);
    return fit;
}

void model_decode(const model *m, kb_backend *kb, model_state *s, const int32_t *tokens, int n, int pos0,
                  const uint8_t *draft, int r0, int nl, float *host_out) {
    if (decode_logits(m, kb, s, tokens, n, pos0, draft, r0, nl)) logits_copy(m, kb, s, 0, nl, host_out);
    else model_logits(m, kb, s, r0, nl, host_out);
}

int model_can_pick(const model *m, const kb_backend *kb) { return kb->pick && !(m->logit_softcap > 0); }

void model_decode_pick(const model *m, kb_backend *kb, model_state *s, const int32_t *tokens, int n, int pos0,
                       const uint8_t *draft, int r0, int nl, const kb_pick_params *pp, const float *u, kb_pick *out) {
    if (decode_logits(m, kb, s, tokens, n, pos0, draft, r0, nl)) kb->pick(kb, out, s->logits, nl, m->n_vocab, pp, u);
    else kb_fail(kb, "pick: %d rows of logits at once (at most %d)", nl, s->logit_rows);
}

void model_logits_pick(const model *m, kb_backend *kb, model_state *s, int r0, const kb_pick_params *pp,
                       const float *u, kb_pick *out) {
    logits_rows(m, kb, s, r0, 1);
    kb->pick(kb, out, s->logits, 1, m->n_vocab, pp, u);
}

void model_logits_fetch(const model *m, kb_backend *kb, model_state *s, int r, float *host_out) {
    logits_copy(m, kb, s, r, 1, host_out);
}
