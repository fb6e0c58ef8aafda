/* cuda_backend.cu - the CUDA implementation of backend.h.
 *
 * One device, one stream, one cuBLAS handle. Weights are uploaded once in
 * their file format (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K), or, for the
 * types without device kernels yet (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K,
 * IQ4_NL, IQ4_XS), dequantised on the host at upload and stored as F16 (so
 * they run as F16 weights: more device memory and bandwidth than their
 * format, a first step; their own kernels belong to the GPU work); any
 * other type is refused naming it. Activations and the KV cache (F32 or
 * F16) live in device memory.
 *
 * matmul, by the number of rows n:
 *   n >= gemm_min_n (9)  cuBLAS: F32 weights by SGEMM (FP32, no TF32);
 *                        the others by GemmEx on F16 inputs with FP32
 *                        accumulation: the activation is converted to F16
 *                        once, F16 weights are used as they are, the other
 *                        types are dequantised to F16 tile by tile (32 MiB
 *                        of scratch) just before their GEMM.
 *   else                 own kernels, one warp per weight row, up to 8
 *                        rows of the activation per pass: float weights by
 *                        float dot products (16-byte loads when the width
 *                        allows), Q8_0/Q4_0/Q4_K/Q6_K by dp4a against the
 *                        activation quantised once per matmul to int8 in
 *                        blocks of 32 (the same rounding as the CPU); an
 *                        RMSNorm or attention whose output such a matmul
 *                        takes right after quantises it as it writes it
 *                        (act_fusable), and the matmul skips that launch.
 * attention: the new K/V rows are stored in the cache, then
 *   decode (up to 8 query rows of one KV head: n tokens x the query heads
 *   that share it; head size 32..256): one block per (KV head, split of
 *   the positions), which also rotates the queries and new keys
 *   (attention_rope) and stores the new rows of its split, reads each
 *   cached K/V row once for all those rows,
 *   a warp at a time with 4- to 16-byte loads, and keeps an online softmax
 *   per row in registers (k_attn_dec);
 *   prompts (32 queries or more; head size 64, 128 or 256): flash attention on
 *   the CUDA cores, one block of 256 threads per (tile of 64 queries, head,
 *   split) over tiles of 32-64 positions, scores and outputs in register
 *   tiles, the softmax of a row in a half-warp (k_attn_tile);
 *   otherwise one block per (tile of up to 16 queries, head, split) runs an
 *   online softmax over tiles of 32 cached positions staged in shared
 *   memory (k_attn);
 *   when there are too few blocks to fill the GPU the positions are split
 *   (flash-decoding) and a second kernel merges the partial softmaxes.
 * RMSNorm, RoPE (cos/sin in double, as on the CPU), SwiGLU and the additions
 * round like the CPU code (no fused multiply-add where the CPU has none).
 * Decode steps (kb->step_begin .. step_end: embed, the layers, the logits'
 * matmul of up to 64 rows) are recorded, not launched, and at their end run
 * as they come the first time their calls are seen, captured into a CUDA
 * graph the second time and replayed from then on: one graph launch a
 * token instead of some 260 kernel launches (8B shape). The kernels read
 * a step's position from device memory, so one graph serves every
 * position (see "Decode steps" below).
 * pick: the next token of each row of logits, greedy or drawn (temperature,
 *   top-k, top-p) in the host sampler's walking order with its uniform,
 *   one block a row; only the picks (12 bytes a row) are copied back.
 *
 * Errors: alloc and reserve return NULL/-1 on cudaMalloc failure (a clean
 * per-request error for the engine); a failed launch, copy or
 * synchronisation is recorded in the backend's error state (kb_fail), which
 * the engine reads. reserve() allocates every scratch buffer; the
 * operations only use them (a shape larger than reserved falls back to a
 * slower path where there is one, or is a recorded failure). The same file
 * compiles on the host with -DILPD_CUDA_EMU into an emulated backend for the
 * tests (cuda_compat.cuh, cuda_emu.cuh).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <new>
#include <type_traits>
#include <vector>

#include "kernels/cuda/cuda_compat.cuh"
#include "kernels/cuda/cuda_quant.cuh"
#ifdef ILPD_CUDA_EMU
#include "kernels/cuda/cuda_emu.cuh"
#else
#include <cublas_v2.h>
#endif

extern "C" {
#include "kernels/backend.h"
#include "kernels/quant.h"
#include "kernels/cuda/cuda_backend.h"
}

#ifdef ILPD_CUDA_EMU
#define KB_CREATE kb_cuda_emu_create
#define KB_SELFTEST kb_cuda_emu_selftest
#define KB_GRAPH_STATS kb_cuda_emu_graph_stats
#define KB_NAME "cuda-emu"
#else
#define KB_CREATE kb_cuda_create
#define KB_SELFTEST kb_cuda_selftest
#define KB_GRAPH_STATS kb_cuda_graph_stats
#define KB_NAME "cuda"
#endif

namespace ILPD_NS {

enum { MV_THREADS = 128, MV_NT = 8, ATT_THREADS = 128, ATT_QT = 16, ATT_TILE = 32, EW_THREADS = 256 };
/* decode attention: warps a block, positions a warp reads at once, fewest positions a split */
enum { DEC_WARPS = 4, DEC_U = 4, DEC_MIN_SPLIT = 64 };
/* prompt attention in tiles: queries a tile, threads a block, fewest queries that use it */
enum { TQ = 64, TQ_LD = TQ + 4, TILE_THREADS = 256, TILE_MIN_N = 32 };
static const size_t W16_TILE_BYTES = (size_t)32 << 20;

/* ======================================================================
 * Kernels
 * ====================================================================== */

/* A matvec block has MV_THREADS / 32 warps, WPR (1, 2 or 4) of them per
 * weight row: more warps a row for wide rows, so that each thread has a few
 * loads to make and the GPU has many in flight. The warp's row, its index
 * among the row's warps (sub) and its lane. */
struct mv_pos {
    int r, sub, lane;
};
KDEV mv_pos mv_at(int wpr) {
    int warp = threadIdx.x >> 5;
    mv_pos m = {(int)blockIdx.x * ((MV_THREADS / 32) / wpr) + warp / wpr, warp % wpr, (int)(threadIdx.x & 31)};
    return m;
}

/* Sums each row's partial dots over its WPR warps, in warp order; every
 * thread calls it. The totals end in ACC of lane 0 of the row's first warp
 * (sub 0). */
template <int NT> KDEV void mv_reduce(float *acc, int wpr) {
    SMEM float red[MV_THREADS / 32][NT];
KUNROLL
    for (int t = 0; t < NT; t++) acc[t] = warp_sum(acc[t]);
    if (wpr == 1) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0)
        for (int t = 0; t < NT; t++) red[warp][t] = acc[t];
    sync_block();
    if (warp % wpr == 0 && lane == 0)
        for (int t = 0; t < NT; t++) {
            float sum = 0.0f;
            for (int i = 0; i < wpr; i++) sum += red[warp + i][t];
            acc[t] = sum;
        }
}

/* Up to 3 weights of one type and width that multiply the same input in
 * one launch (Q, K and V; gate and up): the grid's rows are weight 0's,
 * then weight 1's, ...; out[i] is weight i's [n][rows[i]]. */
struct mv_set {
    const void *w[3];
    float *out[3];
    int rows[3], count;
};
static_assert(sizeof(mv_set) == 6 * sizeof(void *) + 4 * sizeof(int), "no padding: decode steps compare its bytes");

/* Element I (< 3) of a parameter array, by selects: a dynamic index would
 * copy the kernel's parameters to local memory. */
template <typename E> KDEV E mv_sel(const E *a, int i) { return i == 0 ? a[0] : i == 1 ? a[1] : a[2]; }

/* Which weight of S global row R is in; R becomes the row within it, or
 * the weight's row count when R is past the set's last row. */
KDEV int mv_pick(const mv_set &s, int *r) {
    int i = 0;
    if (s.count > 1 && *r >= s.rows[0]) {
        *r -= s.rows[0];
        i = 1;
        if (s.count > 2 && *r >= s.rows[1]) {
            *r -= s.rows[1];
            i = 2;
        }
    }
    int rows = mv_sel(s.rows, i);
    if (*r > rows) *r = rows;
    return i;
}

/* out[i][t*rows[i] + r] = row r of weight i (quantised type T) . activation
 * token t, for t < n <= NT; WPR warps per row (mv_at). */
template <int T, int NT>
KGLOBAL void k_mv_quant(mv_set set, size_t row_bytes, int cols, const int8_t *__restrict__ aq,
                        const float *__restrict__ ad, const float *__restrict__ ads, int n, int wpr) {
    typedef wtraits<T> W;
    mv_pos at = mv_at(wpr);
    int r = at.r, wi = mv_pick(set, &r), rows = mv_sel(set.rows, wi);
    int nb32 = cols >> 5, items = r < rows ? (cols / W::QK) * W::PARTS : 0;
    const uint8_t *row = static_cast<const uint8_t *>(mv_sel(set.w, wi)) + (size_t)(r < rows ? r : 0) * row_bytes;
    float acc[NT];
KUNROLL
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    for (int it = at.sub * 32 + at.lane; it < items; it += 32 * wpr) {
        int b = it / W::PARTS, p = it % W::PARTS;
        const uint8_t *blk = row + (size_t)b * W::BYTES;
KUNROLL
        for (int t = 0; t < NT; t++) {
            if (t < n) {
                size_t a0 = (size_t)t * cols + (size_t)b * W::QK, s0 = (size_t)t * nb32 + (size_t)b * (W::QK / 32);
                acc[t] += vdot<T>(blk, aq + a0, ad + s0, ads + s0, p);
            }
        }
    }
    mv_reduce<NT>(acc, wpr);
    if (r < rows && at.sub == 0 && at.lane == 0)
        for (int t = 0; t < NT && t < n; t++) mv_sel(set.out, wi)[(size_t)t * rows + r] = acc[t];
}

KDEV void unpack8(int t, uint4 v, float *f) {
    uint32_t u[4] = {v.x, v.y, v.z, v.w};
KUNROLL
    for (int i = 0; i < 4; i++) {
        uint16_t lo = (uint16_t)(u[i] & 0xffff), hi = (uint16_t)(u[i] >> 16);
        f[2 * i] = t == WT_BF16 ? bf2f(lo) : h2f(lo);
        f[2 * i + 1] = t == WT_BF16 ? bf2f(hi) : h2f(hi);
    }
}

/* The same for float weights (F32, F16, BF16); VEC: 16-byte loads (the
 * width is a multiple of 8 values, or 4 for F32, and x is 16-byte aligned). */
template <int T, int NT, bool VEC>
KGLOBAL void k_mv_float(mv_set set, int cols, const float *__restrict__ x, int n, int wpr) {
    mv_pos at = mv_at(wpr);
    int r = at.r, wi = mv_pick(set, &r), rows = mv_sel(set.rows, wi);
    int live = r < rows, first = at.sub * 32 + at.lane, step = 32 * wpr;
    const void *w = mv_sel(set.w, wi);
    if (!live) r = 0;
    float acc[NT];
KUNROLL
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    if (VEC && T == WT_F32) {
        const float4 *wr = reinterpret_cast<const float4 *>(static_cast<const float *>(w) + (size_t)r * cols);
        int nv = live ? cols >> 2 : 0;
        for (int v = first; v < nv; v += step) {
            float4 a = wr[v];
KUNROLL
            for (int t = 0; t < NT; t++) {
                if (t < n) {
                    float4 b = reinterpret_cast<const float4 *>(x + (size_t)t * cols)[v];
                    acc[t] += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
                }
            }
        }
    } else if (VEC) {
        const uint4 *wr = reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(w) + (size_t)r * cols);
        int nv = live ? cols >> 3 : 0;
        for (int v = first; v < nv; v += step) {
            float f[8];
            unpack8(T, wr[v], f);
KUNROLL
            for (int t = 0; t < NT; t++) {
                if (t < n) {
                    const float4 *xb = reinterpret_cast<const float4 *>(x + (size_t)t * cols) + 2 * v;
                    float4 b0 = xb[0], b1 = xb[1];
                    if (T == WT_BF16) { /* a BF16 weight multiplies its input rounded to BF16 */
                        b0.x = bf16_round(b0.x), b0.y = bf16_round(b0.y), b0.z = bf16_round(b0.z), b0.w = bf16_round(b0.w);
                        b1.x = bf16_round(b1.x), b1.y = bf16_round(b1.y), b1.z = bf16_round(b1.z), b1.w = bf16_round(b1.w);
                    }
                    acc[t] += f[0] * b0.x + f[1] * b0.y + f[2] * b0.z + f[3] * b0.w + f[4] * b1.x + f[5] * b1.y +
                              f[6] * b1.z + f[7] * b1.w;
                }
            }
        }
    } else {
        const uint8_t *row = static_cast<const uint8_t *>(w) + (size_t)r * cols * (T == WT_F32 ? 4 : 2);
        for (int k = first; k < (live ? cols : 0); k += step) {
            float a = dq_elem(T, row, k);
KUNROLL
            for (int t = 0; t < NT; t++)
                if (t < n) acc[t] += a * (T == WT_BF16 ? bf16_round(x[(size_t)t * cols + k]) : x[(size_t)t * cols + k]);
        }
    }
    mv_reduce<NT>(acc, wpr);
    if (live && at.sub == 0 && at.lane == 0)
        for (int t = 0; t < NT && t < n; t++) mv_sel(set.out, wi)[(size_t)t * rows + r] = acc[t];
}

/* The reference: any type, any n, one warp per row, float dot of the
 * dequantised weight (ILPD_CUDA_REF=1, and the fallback without scratch). */
KGLOBAL void k_mv_ref(int type, const uint8_t *__restrict__ w, size_t row_bytes, int rows, int cols,
                      const float *__restrict__ x, int n, float *__restrict__ out, int ldo) {
    int lane = threadIdx.x & 31;
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const uint8_t *row = w + (size_t)r * row_bytes;
    for (int t = 0; t < n; t++) {
        float acc = 0.0f;
        for (int k = lane; k < cols; k += 32) {
            float xv = x[(size_t)t * cols + k];
            acc += dq_elem(type, row, k) * (type == WT_BF16 ? bf16_round(xv) : xv);
        }
        acc = warp_sum(acc);
        if (lane == 0) out[(size_t)t * ldo + r] = acc;
    }
}

/* Quantises NBLOCKS blocks of 32 floats to int8 (one warp per block):
 * q = rint(x / d), d = amax / 127, ds = d * sum(q): each block its own
 * scale (the CPU backend rounds its scales to multiples of a per-256 unit
 * for its integer sums; here the sums are per block). */
KDEV float silu_mul(float a, float u) { return fmul_rn(a / fadd_rn(1.0f, expf(-a)), u); }

/* Block B of the quantised activation from its 32 values, V on LANE of a
 * warp (every lane calls it). */
KDEV void quant_block(float v, size_t b, int lane, int8_t *__restrict__ qs, float *__restrict__ d,
                      float *__restrict__ ds) {
    float amax = warp_max(fabsf(v));
    float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
    int q = f2i_rn(fmul_rn(v, id));
    qs[b * 32 + lane] = (int8_t)q;
    int sum = warp_sum_i(q);
    if (lane == 0) {
        d[b] = db;
        ds[b] = db * (float)sum;
    }
}

/* A quantised activation of rows of COLS values (a multiple of 32): the
 * int8 values, each block's scale, scale times the block's sum (the act
 * scratch: act_at). Q NULL: none. */
struct act_view {
    int8_t *q;
    float *d, *ds;
};

/* OUT[I] = V and, with A.q, V quantised into A: a kernel writing an
 * activation for the matmul after it. With A.q every lane of the warp
 * calls it, for 32 consecutive I of one block (lane = I % 32). */
KDEV void out_store(float *out, size_t i, float v, act_view a) {
    out[i] = v;
    if (a.q) quant_block(v, i / 32, (int)(i & 31), a.q, a.d, a.ds);
}

/* With UP: the values quantised are silu(x) * up, rounded as k_swiglu
 * rounds them (the down projection's input, in the same launch). */
KGLOBAL void k_quant_act(const float *__restrict__ x, const float *__restrict__ up, int nblocks,
                         int8_t *__restrict__ qs, float *__restrict__ d, float *__restrict__ ds) {
    int b = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (b >= nblocks) return;
    float v = x[(size_t)b * 32 + lane];
    if (up) v = silu_mul(v, up[(size_t)b * 32 + lane]);
    quant_block(v, (size_t)b, lane, qs, d, ds);
}

/* COUNT values of W (quantised type T, rows of ROW_BYTES, COLS wide, a
 * multiple of 32) as F16: a thread per 32 values, one division per block
 * and 16-byte stores (OUT 16-byte aligned). */
template <int T>
KGLOBAL void k_dequant_q_f16(const uint8_t *__restrict__ w, size_t row_bytes, int cols, size_t count,
                             uint16_t *__restrict__ out) {
    size_t nb = count / 32, stride = (size_t)gridDim.x * blockDim.x;
    int bpr = cols / 32;
    for (size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x; b < nb; b += stride) {
        size_t r = b / (size_t)bpr;
        int k0 = (int)(b - r * (size_t)bpr) * 32;
        const uint8_t *row = w + r * row_bytes;
        uint32_t h[16];
KUNROLL
        for (int i = 0; i < 16; i++)
            h[i] = (uint32_t)f2h(dq_elem(T, row, k0 + 2 * i)) | ((uint32_t)f2h(dq_elem(T, row, k0 + 2 * i + 1)) << 16);
#ifdef __CUDA_ARCH__
        uint4 *o = reinterpret_cast<uint4 *>(out + b * 32);
KUNROLL
        for (int i = 0; i < 4; i++) o[i] = make_uint4(h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]);
#else
        for (int i = 0; i < 16; i++) {
            out[b * 32 + 2 * i] = (uint16_t)(h[i] & 0xffff);
            out[b * 32 + 2 * i + 1] = (uint16_t)(h[i] >> 16);
        }
#endif
    }
}

/* COUNT values of W (type T, rows of ROW_BYTES, COLS wide) as F16. */
template <int T>
KGLOBAL void k_dequant_f16(const uint8_t *__restrict__ w, size_t row_bytes, int cols, size_t count,
                           uint16_t *__restrict__ out) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        size_t r = i / (size_t)cols;
        int k = (int)(i - r * (size_t)cols);
        out[i] = f2h(dq_elem(T, w + r * row_bytes, k));
    }
}

/* Y = X in F16 (BF16: rounded to BF16 first, for a BF16 weight). */
KGLOBAL void k_f32_to_f16(const float *__restrict__ x, size_t count, int bf16, uint16_t *__restrict__ y) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        y[i] = f2h(bf16 ? bf16_round(x[i]) : x[i]);
}

KGLOBAL void k_embed(int type, const uint8_t *__restrict__ w, size_t row_bytes, int rows, int cols,
                     const int32_t *__restrict__ ids, float *__restrict__ out) {
    int i = blockIdx.x, id = ids[i];
    float *o = out + (size_t)i * cols;
    if (id < 0 || id >= rows) {
        for (int k = threadIdx.x; k < cols; k += blockDim.x) o[k] = 0.0f;
        return;
    }
    const uint8_t *row = w + (size_t)id * row_bytes;
    for (int k = threadIdx.x; k < cols; k += blockDim.x) o[k] = dq_elem(type, row, k);
}

/* One block per row: out = x * (1 / sqrt(mean(x^2) + eps)) * g; with ADD,
 * x += y first (each thread adds the values it then squares and scales, so
 * OUT may be Y: it is written after the barrier). With AQ.q (DIM a
 * multiple of 32, blockDim too), OUT is also quantised as k_quant_act
 * would (the matmul that follows skips its own quantisation). */
template <bool ADD>
KGLOBAL void k_rmsnorm(float *x, const float *y, const float *__restrict__ g, int dim, float eps, float *out,
                       act_view aq) {
    SMEM float red[32];
    SMEM float scale_s;
    float *xi = x + (size_t)blockIdx.x * dim;
    float s = 0.0f;
    if (ADD) {
        const float *yi = y + (size_t)blockIdx.x * dim;
        for (int k = threadIdx.x; k < dim; k += blockDim.x) xi[k] = fadd_rn(xi[k], yi[k]);
    }
    for (int k = threadIdx.x; k < dim; k += blockDim.x) s += xi[k] * xi[k];
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    sync_block();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += red[i];
        scale_s = (float)(1.0 / sqrt((double)t / dim + (double)eps));
    }
    sync_block();
    float sc = scale_s;
    for (int k = threadIdx.x; k < dim; k += blockDim.x) /* warp-uniform with AQ: a warp, 32 values of a block */
        out_store(out, (size_t)blockIdx.x * dim + k, fmul_rn(fmul_rn(xi[k], sc), g[k]), aq);
}

/* A kernel's first position: POS0 as it is or, in a replayed decode step
 * (DPOS not NULL: the step's position lives in device memory, written
 * before each replay), *DPOS + POS0. */
KDEV int pos_at(int pos0, const int *dpos) { return dpos ? *dpos + pos0 : pos0; }

/* RoPE as the CPU computes it: the cos and sin of position POS at inverse
 * frequency INV (in double), scaled by MSCALE; and element A (FIRST) or B
 * of the pair (X0, X1) = (x[a], x[b]) rotated by them. */
KDEV void rope_cs(int pos, float inv, float mscale, float *cs, float *sn) {
    double th = (double)pos * (double)inv;
    *cs = fmul_rn((float)cos(th), mscale);
    *sn = fmul_rn((float)sin(th), mscale);
}
KDEV float rope_rot(float x0, float x1, float cs, float sn, bool first) {
    return first ? fsub_rn(fmul_rn(x0, cs), fmul_rn(x1, sn)) : fadd_rn(fmul_rn(x0, sn), fmul_rn(x1, cs));
}

/* One block per row (position pos0 + row, pos_at): rotates the first NROT
 * dimensions of every head of HD (the rest pass through), the N_HEADS of X
 * and then the N_HEADS2 of X2 (the keys with the queries: 0 for none). */
KGLOBAL void k_rope(float *__restrict__ x, int n_heads, float *__restrict__ x2, int n_heads2, int hd, int nrot,
                    int neox, const float *__restrict__ inv_freq, int pos0, const int *dpos, float mscale) {
    SMEM float cs[512];
    SMEM float sn[512];
    int half = nrot / 2;
    pos0 = pos_at(pos0, dpos);
    for (int k = threadIdx.x; k < half; k += blockDim.x)
        rope_cs(pos0 + (int)blockIdx.x, inv_freq[k], mscale, &cs[k], &sn[k]);
    sync_block();
    float *xr = x + (size_t)blockIdx.x * n_heads * hd, *xr2 = x2 ? x2 + (size_t)blockIdx.x * n_heads2 * hd : NULL;
    for (int idx = threadIdx.x; idx < (n_heads + n_heads2) * half; idx += blockDim.x) {
        int h = idx / half, k = idx - h * half;
        float *v = h < n_heads ? xr + (size_t)h * hd : xr2 + (size_t)(h - n_heads) * hd;
        int a = neox ? k : 2 * k, b = neox ? k + half : 2 * k + 1;
        float x0 = v[a], x1 = v[b];
        v[a] = rope_rot(x0, x1, cs[k], sn[k], true);
        v[b] = rope_rot(x0, x1, cs[k], sn[k], false);
    }
}

/* Element I of a KV cache (F32, or F16 when KVT is 1) = X. */
template <int KVT> KDEV void kv_put(void *p, size_t i, float x) {
    if (KVT == 0)
        static_cast<float *>(p)[i] = x;
    else
        static_cast<uint16_t *>(p)[i] = f2h(x);
}

template <int KVT>
KGLOBAL void k_kv_store(const float *__restrict__ k, const float *__restrict__ v, void *kc, void *vc, int pos0,
                        const int *dpos, int kv_dim, size_t count) {
    size_t stride = (size_t)gridDim.x * blockDim.x, off = (size_t)pos_at(pos0, dpos) * kv_dim;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        kv_put<KVT>(kc, off + i, k[i]);
        kv_put<KVT>(vc, off + i, v[i]);
    }
}

template <int KVT> KDEV float kv_at(const void *p, size_t i) {
    return KVT == 0 ? static_cast<const float *>(p)[i] : h2f(static_cast<const uint16_t *>(p)[i]);
}

/* Attention for query rows [i0, i0+qt) (i0 = blockIdx.x * qt) of head
 * blockIdx.y over the positions of split blockIdx.z: [s*split_len,
 * (s+1)*split_len), causally cut (row i sees positions <= pos0 + i) and,
 * with WINDOW > 0, to the last WINDOW of them.
 * Online softmax over tiles of TILE positions (TILE <= 32: lane = position
 * in the score phase). With one split the result goes to OUT; otherwise the
 * unnormalised output, the running max and the sum go to PART
 * [token][head][split][hd + 2] for k_attn_combine.
 * Shared memory (floats): Q[qt][hd] K[tile][hd+1] V[tile][hd] P[qt][tile]
 * O[qt][hd] M[qt] L[qt] A[qt]. */
template <int KVT>
KGLOBAL void k_attn(const float *__restrict__ q, const void *__restrict__ kc, const void *__restrict__ vc, int kv_dim,
                    int n, int pos0, const int *dpos, int n_heads, int group, int hd, int qt, int tile, int split_len,
                    int nsplit, float scale, int window, float *__restrict__ out, float *__restrict__ part) {
    DYN_SMEM(float, sm);
    pos0 = pos_at(pos0, dpos);
    int h = blockIdx.y, s = blockIdx.z, i0 = blockIdx.x * qt;
    int tid = threadIdx.x, nthr = blockDim.x, warp = tid >> 5, lane = tid & 31, nwarps = nthr >> 5;
    int nq = n - i0 < qt ? n - i0 : qt;
    size_t kvoff = (size_t)(h / group) * hd;
    int pmax = pos0 + i0 + nq - 1;
    int pbeg = s * split_len, pend = pbeg + split_len < pmax + 1 ? pbeg + split_len : pmax + 1;
    if (window > 0 && pbeg < pos0 + i0 - window + 1) pbeg = pos0 + i0 - window + 1; /* before the first row's window */
    float *Q = sm, *K = Q + qt * hd, *V = K + tile * (hd + 1), *P = V + tile * hd, *O = P + qt * tile;
    float *M = O + qt * hd, *L = M + qt, *A = L + qt;
    for (int idx = tid; idx < nq * hd; idx += nthr) {
        int r = idx / hd, d = idx - r * hd;
        Q[idx] = q[((size_t)(i0 + r) * n_heads + h) * hd + d];
    }
    for (int idx = tid; idx < qt * hd; idx += nthr) O[idx] = 0.0f;
    for (int r = tid; r < qt; r += nthr) {
        M[r] = -INFINITY;
        L[r] = 0.0f;
        A[r] = 1.0f;
    }
    sync_block();
    for (int t0 = pbeg; t0 < pend; t0 += tile) {
        int nt = pend - t0 < tile ? pend - t0 : tile;
        for (int idx = tid; idx < nt * hd; idx += nthr) {
            int t = idx / hd, d = idx - t * hd;
            size_t g = (size_t)(t0 + t) * kv_dim + kvoff + d;
            K[t * (hd + 1) + d] = kv_at<KVT>(kc, g);
            V[t * hd + d] = kv_at<KVT>(vc, g);
        }
        sync_block();
        for (int r = warp; r < nq; r += nwarps) { /* warp-uniform */
            int pq = pos0 + i0 + r;
            float sc = -INFINITY;
            if (lane < nt && t0 + lane <= pq && (window <= 0 || pq - (t0 + lane) < window)) {
                const float *qr = Q + r * hd, *kr = K + lane * (hd + 1);
                float dot = 0.0f;
                for (int d = 0; d < hd; d++) dot += qr[d] * kr[d];
                sc = dot * scale;
            }
            float mold = M[r];
            float mnew = fmaxf(mold, warp_max(sc));
            float p = mnew == -INFINITY ? 0.0f : expf(sc - mnew);
            float alpha = mnew == -INFINITY ? 1.0f : expf(mold - mnew);
            float psum = warp_sum(p);
            if (lane < tile) P[r * tile + lane] = p;
            if (lane == 0) {
                M[r] = mnew;
                L[r] = L[r] * alpha + psum;
                A[r] = alpha;
            }
        }
        sync_block();
        for (int idx = tid; idx < nq * hd; idx += nthr) {
            int r = idx / hd, d = idx - r * hd;
            float acc = O[idx] * A[r];
            const float *pr = P + r * tile;
            for (int t = 0; t < nt; t++) acc += pr[t] * V[t * hd + d];
            O[idx] = acc;
        }
        sync_block();
    }
    for (int idx = tid; idx < nq * hd; idx += nthr) {
        int r = idx / hd, d = idx - r * hd;
        size_t tok = (size_t)(i0 + r);
        if (nsplit == 1) {
            out[(tok * n_heads + h) * hd + d] = O[idx] / L[r];
        } else {
            float *pp = part + ((tok * n_heads + h) * nsplit + s) * (size_t)(hd + 2);
            pp[d] = O[idx];
            if (d == 0) {
                pp[hd] = M[r];
                pp[hd + 1] = L[r];
            }
        }
    }
}

/* DPL values from element I of a KV cache (F32 or F16): on the device one
 * load of 4 to 16 bytes (I is a multiple of DPL: the row starts at a whole
 * head, the lane at L * DPL). */
template <int KVT, int DPL> KDEV void kv_vec(const void *p, size_t i, float *f) {
#ifdef __CUDA_ARCH__
    if (KVT == 1 && DPL >= 2) {
        const uint16_t *h = static_cast<const uint16_t *>(p) + i;
        uint32_t u[4] = {0, 0, 0, 0};
        if (DPL == 8) {
            uint4 v = *reinterpret_cast<const uint4 *>(h);
            u[0] = v.x, u[1] = v.y, u[2] = v.z, u[3] = v.w;
        } else if (DPL == 4) {
            uint2 v = *reinterpret_cast<const uint2 *>(h);
            u[0] = v.x, u[1] = v.y;
        } else {
            u[0] = *reinterpret_cast<const uint32_t *>(h);
        }
KUNROLL
        for (int j = 0; j < DPL / 2; j++) {
            f[2 * j] = h2f((uint16_t)(u[j] & 0xffff));
            f[2 * j + 1] = h2f((uint16_t)(u[j] >> 16));
        }
    } else if (KVT == 0 && DPL >= 4) {
        const float4 *v = reinterpret_cast<const float4 *>(static_cast<const float *>(p) + i);
KUNROLL
        for (int j = 0; j < DPL / 4; j++) {
            float4 a = v[j];
            f[4 * j] = a.x, f[4 * j + 1] = a.y, f[4 * j + 2] = a.z, f[4 * j + 3] = a.w;
        }
    } else
#endif
    {
KUNROLL
        for (int d = 0; d < DPL; d++) f[d] = kv_at<KVT>(p, i + d);
    }
}

/* RoPE applied by a kernel that reads the rows (k_attn_dec): the head's
 * HD/2 inverse frequencies (NULL: none), the pairing and the scale of cos
 * and sin, as k_rope takes them (every dimension rotates). */
struct rope_in {
    const float *inv;
    int neox;
    float mscale;
};

/* Element E of the head X (HD values) rotated as k_rope rotates it, by its
 * position's CS and SN (HD/2 each, rope_cs). */
template <int HD> KDEV float rope_elem(const float *x, int e, const float *cs, const float *sn, int neox) {
    int half = HD / 2, k = neox ? (e < half ? e : e - half) : e / 2;
    int a = neox ? k : 2 * k, b = neox ? k + half : 2 * k + 1;
    return rope_rot(x[a], x[b], cs[k], sn[k], e == a);
}

/* Decode attention: the ROWS = n * group query rows (token r / group, head
 * kvh * group + r % group; ROWS <= R) that share KV head kvh = blockIdx.x,
 * over the positions of split blockIdx.y ([s*split_len, (s+1)*split_len)),
 * causally cut per row and, with WINDOW > 0, to each row's window. The K
 * and V of a position are read once for all the rows (grouped-query
 * attention) and by one warp at a time: lane L holds dimensions
 * [L*DPL, L*DPL+DPL) (head size 32 * DPL) of the queries, K, V and the
 * outputs, so a row of K is one coalesced read. Warp w takes DEC_U
 * positions at a time, the warps taking turns; each keeps an online
 * softmax per row in registers, and the warps' results merge in shared
 * memory. Outputs as k_attn's: OUT with one split, PART otherwise. With
 * KNEW and VNEW (n rows of kv_dim, positions pos0..), the block whose split
 * holds a new row's position first stores it in the cache (k_kv_store's
 * work, in this launch). With ROPE.inv, the queries and the new keys are
 * rotated here (k_rope's work): Q and KNEW hold them unrotated. */
template <int KVT, int DPL, int R>
KGLOBAL void k_attn_dec(const float *__restrict__ q, void *kc, void *vc, const float *__restrict__ knew,
                        const float *__restrict__ vnew, int kv_dim, int n, int pos0, const int *dpos, int n_heads,
                        int group, int split_len, int nsplit, float scale, int window, float *__restrict__ out,
                        float *__restrict__ part, act_view aq, rope_in rope) {
    enum { HD = 32 * DPL };
    pos0 = pos_at(pos0, dpos);
    SMEM float sm_o[DEC_WARPS][R * HD];
    SMEM float sm_m[DEC_WARPS][R];
    SMEM float sm_l[DEC_WARPS][R];
    SMEM float rcs[8][HD / 2]; /* with ROPE: cos and sin of the n <= 8 new positions */
    SMEM float rsn[8][HD / 2];
    int kvh = blockIdx.x, s = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (rope.inv) {
        for (int idx = threadIdx.x; idx < n * (HD / 2); idx += blockDim.x) {
            int t = idx / (HD / 2), k = idx - t * (HD / 2);
            rope_cs(pos0 + t, rope.inv[k], rope.mscale, &rcs[t][k], &rsn[t][k]);
        }
        sync_block();
    }
    if (knew) { /* the n new rows of this KV head that fall in this split, stored before they are read */
        int lo = s * split_len, hi = lo + split_len;
        for (int idx = threadIdx.x; idx < n * HD; idx += blockDim.x) {
            int t = idx / HD, p = pos0 + t, e = idx - t * HD;
            if (p < lo || p >= hi) continue;
            size_t src = (size_t)t * kv_dim + (size_t)kvh * HD + e, dst = src + (size_t)pos0 * kv_dim;
            float kx = rope.inv ? rope_elem<HD>(knew + (src - e), e, rcs[t], rsn[t], rope.neox) : knew[src];
            kv_put<KVT>(kc, dst, kx);
            kv_put<KVT>(vc, dst, vnew[src]);
        }
        sync_block();
    }
    int rows = n * group;
    int pbeg = s * split_len, pend = pbeg + split_len < pos0 + n ? pbeg + split_len : pos0 + n;
    if (window > 0 && pbeg < pos0 - window + 1) pbeg = pos0 - window + 1; /* before the first row's window */
    float qv[R][DPL], o[R][DPL], m[R], l[R];
KUNROLL
    for (int r = 0; r < R; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        const float *qh = q + ((size_t)(r / group) * n_heads + (size_t)kvh * group + r % group) * HD;
        int t = r / group; /* < 8: R <= 8 */
KUNROLL
        for (int d = 0; d < DPL; d++) {
            int e = lane * DPL + d;
            qv[r][d] = r >= rows ? 0.0f : rope.inv ? rope_elem<HD>(qh, e, rcs[t], rsn[t], rope.neox) : qh[e];
            o[r][d] = 0.0f;
        }
    }
    size_t koff = (size_t)kvh * HD + (size_t)lane * DPL;
    for (int p0 = pbeg + warp * DEC_U; p0 < pend; p0 += DEC_WARPS * DEC_U) {
        float kf[DEC_U][DPL], vf[DEC_U][DPL];
KUNROLL
        for (int u = 0; u < DEC_U; u++) {
            int p = p0 + u < pend ? p0 + u : pend - 1; /* past the end: read a valid row, masked below */
            kv_vec<KVT, DPL>(kc, (size_t)p * kv_dim + koff, kf[u]);
            kv_vec<KVT, DPL>(vc, (size_t)p * kv_dim + koff, vf[u]);
        }
KUNROLL
        for (int r = 0; r < R; r++) {
            if (r >= rows) break; /* warp-uniform */
            int pq = pos0 + r / group;
            float sc[DEC_U], mx = m[r];
KUNROLL
            for (int u = 0; u < DEC_U; u++) {
                float dot = 0.0f;
KUNROLL
                for (int d = 0; d < DPL; d++) dot += qv[r][d] * kf[u][d];
                dot = warp_sum(dot);
                int p = p0 + u;
                int vis = p < pend && p <= pq && (window <= 0 || pq - p < window);
                sc[u] = vis ? dot * scale : -INFINITY;
                mx = fmaxf(mx, sc[u]);
            }
            if (mx == -INFINITY) continue; /* nothing visible yet: warp-uniform */
            float alpha = expf(m[r] - mx);
            l[r] *= alpha;
KUNROLL
            for (int d = 0; d < DPL; d++) o[r][d] *= alpha;
KUNROLL
            for (int u = 0; u < DEC_U; u++) {
                float pu = expf(sc[u] - mx);
                l[r] += pu;
KUNROLL
                for (int d = 0; d < DPL; d++) o[r][d] += pu * vf[u][d];
            }
            m[r] = mx;
        }
    }
KUNROLL
    for (int r = 0; r < R; r++) {
        if (r >= rows) break;
        if (lane == 0) {
            sm_m[warp][r] = m[r];
            sm_l[warp][r] = l[r];
        }
KUNROLL
        for (int d = 0; d < DPL; d++) sm_o[warp][r * HD + lane * DPL + d] = o[r][d];
    }
    sync_block();
    for (int idx = threadIdx.x; idx < rows * HD; idx += blockDim.x) {
        int r = idx / HD, d = idx - r * HD;
        float mx = -INFINITY, sum = 0.0f, acc = 0.0f;
        for (int w = 0; w < DEC_WARPS; w++) mx = fmaxf(mx, sm_m[w][r]);
        for (int w = 0; w < DEC_WARPS; w++) {
            if (sm_m[w][r] == -INFINITY) continue;
            float a = expf(sm_m[w][r] - mx);
            sum += a * sm_l[w][r];
            acc += a * sm_o[w][r * HD + d];
        }
        size_t tok = (size_t)(r / group), h = (size_t)kvh * group + r % group;
        if (nsplit == 1) {
            out_store(out, (tok * n_heads + h) * HD + d, acc / sum, aq);
        } else {
            float *pp = part + ((tok * n_heads + h) * nsplit + s) * (size_t)(HD + 2);
            pp[d] = acc;
            if (d == 0) {
                pp[HD] = mx;
                pp[HD + 1] = sum;
            }
        }
    }
}

/* 4 floats of shared memory at P (16-byte aligned on the device). */
KDEV void sm_ld4(const float *p, float *f) {
#ifdef __CUDA_ARCH__
    float4 v = *reinterpret_cast<const float4 *>(p);
    f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
#else
    for (int i = 0; i < 4; i++) f[i] = p[i];
#endif
}

/* Prompt attention, flash attention on the CUDA cores: query rows [i0,
 * i0+TQ) (i0 = blockIdx.x * TQ) of head blockIdx.y over the positions of
 * split blockIdx.z, causal and windowed as k_attn, in tiles of BK
 * positions. 256 threads as a 16 x 16 grid: thread (ty, tx) owns query
 * rows 4ty..4ty+3 throughout, the tile's positions tx*CT.. for the scores
 * and the dimensions tx*DT.. of the output, so the softmax of a row lives
 * in one half-warp (half_max/half_sum) and its running max, sum and output
 * stay in registers; the scores are 4 x CT register tiles over the
 * transposed queries and keys. Shared memory (floats): Qt[HD][TQ]
 * Kt[HD][BK] V[BK][HD] Pt[BK][TQ_LD]. Results as k_attn's. */
template <int KVT, int HD, int BK>
KGLOBAL void k_attn_tile(const float *__restrict__ q, const void *__restrict__ kc, const void *__restrict__ vc,
                         int kv_dim, int n, int pos0, const int *dpos, int n_heads, int group, int split_len,
                         int nsplit, float scale, int window, float *__restrict__ out, float *__restrict__ part) {
    enum { CT = BK / 16, DT = HD / 16 };
    pos0 = pos_at(pos0, dpos);
    DYN_SMEM(float, sm);
    float *Qt = sm, *Kt = Qt + HD * TQ, *V = Kt + HD * BK, *Pt = V + BK * HD;
    int h = blockIdx.y, s = blockIdx.z, i0 = blockIdx.x * TQ;
    int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
    int nq = n - i0 < TQ ? n - i0 : TQ;
    size_t kvoff = (size_t)(h / group) * HD;
    int pmax = pos0 + i0 + nq - 1;
    int pbeg = s * split_len, pend = pbeg + split_len < pmax + 1 ? pbeg + split_len : pmax + 1;
    if (window > 0 && pbeg < pos0 + i0 - window + 1) pbeg = pos0 + i0 - window + 1; /* before the first row's window */
    for (int idx = tid; idx < TQ * HD; idx += TILE_THREADS) {
        int r = idx % TQ, d = idx / TQ;
        Qt[d * TQ + r] = r < nq ? q[((size_t)(i0 + r) * n_heads + h) * HD + d] : 0.0f;
    }
    float m[4], l[4], o[4][DT];
KUNROLL
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
KUNROLL
        for (int e = 0; e < DT; e++) o[i][e] = 0.0f;
    }
    for (int t0 = pbeg; t0 < pend; t0 += BK) {
        int nt = pend - t0 < BK ? pend - t0 : BK;
        sync_block(); /* the previous tile's readers are done (the first time: Qt is written) */
        for (int idx = tid; idx < BK * HD; idx += TILE_THREADS) {
            int t = idx % BK, d = idx / BK; /* consecutive threads: consecutive positions of Kt's row d */
            Kt[d * BK + t] = t < nt ? kv_at<KVT>(kc, (size_t)(t0 + t) * kv_dim + kvoff + d) : 0.0f;
        }
        for (int idx = tid; idx < BK * HD; idx += TILE_THREADS) {
            int t = idx / HD, d = idx % HD;
            V[t * HD + d] = t < nt ? kv_at<KVT>(vc, (size_t)(t0 + t) * kv_dim + kvoff + d) : 0.0f;
        }
        sync_block();
        float sc[4][CT];
KUNROLL
        for (int i = 0; i < 4; i++)
KUNROLL
            for (int j = 0; j < CT; j++) sc[i][j] = 0.0f;
        for (int d = 0; d < HD; d++) {
            float a[4], b[CT];
            sm_ld4(Qt + d * TQ + 4 * ty, a);
KUNROLL
            for (int j = 0; j < CT; j += 2) {
                b[j] = Kt[d * BK + tx * CT + j];
                b[j + 1] = Kt[d * BK + tx * CT + j + 1];
            }
KUNROLL
            for (int i = 0; i < 4; i++)
KUNROLL
                for (int j = 0; j < CT; j++) sc[i][j] += a[i] * b[j];
        }
KUNROLL
        for (int i = 0; i < 4; i++) {
            int r = 4 * ty + i, pq = pos0 + i0 + r;
            float mx = -INFINITY;
KUNROLL
            for (int j = 0; j < CT; j++) {
                int c = tx * CT + j, p = t0 + c;
                int vis = r < nq && c < nt && p <= pq && (window <= 0 || pq - p < window);
                sc[i][j] = vis ? sc[i][j] * scale : -INFINITY;
                mx = fmaxf(mx, sc[i][j]);
            }
            mx = half_max(mx);
            float mnew = fmaxf(m[i], mx);
            float alpha = mnew == -INFINITY ? 1.0f : expf(m[i] - mnew), ps = 0.0f;
KUNROLL
            for (int j = 0; j < CT; j++) {
                float pj = mnew == -INFINITY ? 0.0f : expf(sc[i][j] - mnew);
                Pt[(tx * CT + j) * TQ_LD + r] = pj;
                ps += pj;
            }
            ps = half_sum(ps);
            l[i] = l[i] * alpha + ps;
            m[i] = mnew;
KUNROLL
            for (int e = 0; e < DT; e++) o[i][e] *= alpha;
        }
        sync_block();
        for (int t = 0; t < nt; t++) {
            float pv[4], vv[DT];
            sm_ld4(Pt + t * TQ_LD + 4 * ty, pv);
KUNROLL
            for (int e = 0; e < DT; e += 4) sm_ld4(V + t * HD + tx * DT + e, vv + e);
KUNROLL
            for (int i = 0; i < 4; i++)
KUNROLL
                for (int e = 0; e < DT; e++) o[i][e] += pv[i] * vv[e];
        }
    }
KUNROLL
    for (int i = 0; i < 4; i++) {
        int r = 4 * ty + i;
        if (r >= nq) break;
        size_t tok = (size_t)(i0 + r);
KUNROLL
        for (int e = 0; e < DT; e++) {
            int d = tx * DT + e;
            if (nsplit == 1) {
                out[(tok * n_heads + h) * HD + d] = o[i][e] / l[i];
            } else {
                float *pp = part + ((tok * n_heads + h) * nsplit + s) * (size_t)(HD + 2);
                pp[d] = o[i][e];
                if (d == 0) {
                    pp[HD] = m[i];
                    pp[HD + 1] = l[i];
                }
            }
        }
    }
}

/* Merges the splits of (head blockIdx.x, token blockIdx.y). */
KGLOBAL void k_attn_combine(const float *__restrict__ part, int nsplit, int n_heads, int hd, float *__restrict__ out,
                            act_view aq) {
    int h = blockIdx.x;
    size_t tok = blockIdx.y;
    const float *p = part + (tok * n_heads + h) * nsplit * (size_t)(hd + 2);
    float mx = -INFINITY;
    for (int s = 0; s < nsplit; s++) mx = fmaxf(mx, p[(size_t)s * (hd + 2) + hd]);
    float l = 0.0f;
    for (int s = 0; s < nsplit; s++) {
        float m = p[(size_t)s * (hd + 2) + hd];
        if (m != -INFINITY) l += expf(m - mx) * p[(size_t)s * (hd + 2) + hd + 1];
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < nsplit; s++) {
            float m = p[(size_t)s * (hd + 2) + hd];
            if (m != -INFINITY) acc += expf(m - mx) * p[(size_t)s * (hd + 2) + d];
        }
        out_store(out, (tok * n_heads + h) * hd + d, acc / l, aq);
    }
}

KGLOBAL void k_swiglu(float *__restrict__ g, const float *__restrict__ u, size_t count) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) g[i] = silu_mul(g[i], u[i]);
}

/* GELU in its tanh form times up (Gemma's GeGLU). */
KGLOBAL void k_geglu(float *__restrict__ g, const float *__restrict__ u, size_t count) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        float a = g[i];
        float t = tanhf(0.7978845608f * a * (1.0f + 0.044715f * a * a));
        g[i] = fmul_rn(0.5f * a * (1.0f + t), u[i]);
    }
}

KGLOBAL void k_scale(float *__restrict__ x, float by, size_t count) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) x[i] = fmul_rn(x[i], by);
}

KGLOBAL void k_add(float *__restrict__ x, const float *__restrict__ y, size_t count) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) x[i] = fadd_rn(x[i], y[i]);
}

KGLOBAL void k_add_bias(float *__restrict__ x, const float *__restrict__ b, int cols, size_t count) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        x[i] = fadd_rn(x[i], b[i % (size_t)cols]);
}

/* ---- The next token, picked on the device (kb_backend.pick) ----
 * One block a row of logits. A draw walks the tokens in sampler.c's
 * order, so that the same uniform picks the same token but where float
 * sums in another order round across a boundary: the whole row in id
 * order, a top k or a nucleus best first (the larger logit first, the
 * lower id on ties). */
enum { PICK_THREADS = 1024, PICK_CAND = 2 * PICK_THREADS, PICK_ROWS = 16, PICK_NONE = 0x7fffffff };
/* Top-k and top-p draw from the logits within PICK_SPAN temperatures of
 * the largest (weights down to e^-24 of the largest's), sorted in shared
 * memory; a row whose top k or nucleus reaches below them, or that has more
 * than PICK_CAND of them, is left to the host (id -1). */
#define PICK_SPAN 24.0f

struct pick_draw {
    float temp, top_p;
    int top_k;
    float u[PICK_ROWS]; /* each row's uniform */
};

KDEV bool pick_before(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

/* Every thread of the block passes its V; returns V of threads 0..t
 * summed, and leaves those sums in S (S[t] for thread t). */
KDEV double pick_scan(double *s, double v) {
    int t = threadIdx.x;
    s[t] = v;
    sync_block();
    for (int o = 1; o < PICK_THREADS; o <<= 1) {
        double add = t >= o ? s[t - o] : 0.0;
        sync_block();
        s[t] += add;
        sync_block();
    }
    return s[t];
}

/* Sorts C_L/C_I[0, n) (n <= PICK_CAND, the rest padding) best first: a
 * bitonic sort over the power of two at or above n. */
KDEV void pick_sort(float *c_l, int *c_i, int n) {
    int size_all = 2;
    while (size_all < n) size_all *= 2;
    for (int size = 2; size <= size_all; size *= 2)
        for (int stride = size / 2; stride > 0; stride /= 2) {
            for (int j = threadIdx.x; j < size_all / 2; j += PICK_THREADS) {
                int a = 2 * j - (j & (stride - 1)), b = a + stride;
                bool first = (a & size) == 0; /* this run ends best first, else best last */
                if (pick_before(c_l[b], c_i[b], c_l[a], c_i[a]) == first) {
                    float tl = c_l[a];
                    int ti = c_i[a];
                    c_l[a] = c_l[b], c_i[a] = c_i[b];
                    c_l[b] = tl, c_i[b] = ti;
                }
            }
            sync_block();
        }
}

KGLOBAL void k_pick(const float *__restrict__ logits, int width, pick_draw d, kb_pick *__restrict__ out) {
    SMEM float s_top[PICK_THREADS], s_2nd[PICK_THREADS], c_l[PICK_CAND];
    SMEM int s_id[PICK_THREADS], c_i[PICK_CAND];
    SMEM double s_sum[PICK_THREADS];
    SMEM int s_pick;
    SMEM double s_kept;
    const int t = threadIdx.x, row = blockIdx.x;
    const float *l = logits + (size_t)row * width;
    /* the largest logit (the lowest id on ties) and the next largest */
    float a = -INFINITY, b = -INFINITY;
    int ia = PICK_NONE;
    for (int i = t; i < width; i += PICK_THREADS) {
        float v = l[i];
        if (pick_before(v, i, a, ia)) b = a, a = v, ia = i;
        else if (v > b) b = v;
    }
    s_top[t] = a, s_2nd[t] = b, s_id[t] = ia;
    sync_block();
    for (int o = PICK_THREADS / 2; o > 0; o /= 2) {
        if (t < o) {
            float a2 = s_top[t + o], b2 = s_2nd[t + o];
            int i2 = s_id[t + o];
            if (pick_before(a2, i2, s_top[t], s_id[t])) {
                s_2nd[t] = fmaxf(b2, s_top[t]);
                s_top[t] = a2, s_id[t] = i2;
            } else {
                s_2nd[t] = fmaxf(s_2nd[t], a2);
            }
        }
        sync_block();
    }
    const float mx = s_top[0], temp = d.temp;
    kb_pick res = {s_id[0] == PICK_NONE ? 0 : s_id[0], mx, s_2nd[0]};
    if (temp <= 0.0f || !(mx > -INFINITY && mx < INFINITY)) { /* greedy; or nothing to draw from */
        if (t == 0) out[row] = res;
        return;
    }
    if (t == 0) s_pick = -1;
    const float u = d.u[row];
    if (d.top_k >= width && d.top_p >= 1.0f) {
        /* the whole row in id order, as sampler.c walks it: thread t's share
         * is ids [t * per, (t + 1) * per), and the thread whose share of
         * the weight holds r walks it */
        int per = (width + PICK_THREADS - 1) / PICK_THREADS, i0 = t * per, i1 = i0 + per < width ? i0 + per : width;
        double w = 0;
        for (int i = i0; i < i1; i++) w += expf((l[i] - mx) / temp);
        double incl = pick_scan(s_sum, w), excl = t ? s_sum[t - 1] : 0.0;
        double r = (double)u * s_sum[PICK_THREADS - 1];
        if (r >= excl && r < incl) {
            int last = -1;
            for (int i = i0; i < i1; i++) {
                float p = expf((l[i] - mx) / temp);
                if (p > 0.0f) last = i;
                excl += p;
                if (r < excl) break;
            }
            s_pick = last; /* the last weighed one when rounding walked past the end */
        }
        sync_block();
        if (t == 0) {
            res.id = s_pick >= 0 ? s_pick : res.id;
            out[row] = res;
        }
        return;
    }
    /* the candidates, in shared memory, best first */
    const float lo = mx - PICK_SPAN * temp;
    int cnt = 0;
    for (int i = t; i < width; i += PICK_THREADS) cnt += l[i] >= lo;
    int at = (int)pick_scan(s_sum, cnt) - cnt, n = (int)s_sum[PICK_THREADS - 1];
    int k = d.top_k < width ? d.top_k : width;
    if (n > PICK_CAND || (k < width && k > n)) {
        if (t == 0) {
            res.id = -1;
            out[row] = res;
        }
        return;
    }
    for (int j = t; j < PICK_CAND; j += PICK_THREADS) c_l[j] = -INFINITY, c_i[j] = PICK_NONE;
    sync_block();
    for (int i = t; i < width; i += PICK_THREADS)
        if (l[i] >= lo) c_l[at] = l[i], c_i[at++] = i;
    sync_block();
    pick_sort(c_l, c_i, n);
    /* the weight top-p measures against: the top k's, or the whole row's */
    double whole = 0;
    if (k == width) {
        double all = 0;
        for (int i = t; i < width; i += PICK_THREADS) all += expf((l[i] - mx) / temp);
        pick_scan(s_sum, all);
        whole = s_sum[PICK_THREADS - 1];
        sync_block(); /* read by all before the next scan writes */
    }
    /* thread t's candidates 2t and 2t + 1, and the weight up to them */
    int kk = k < n ? k : n, j0 = 2 * t, j1 = j0 + 1;
    float w0 = j0 < kk ? expf((c_l[j0] - mx) / temp) : 0.0f, w1 = j1 < kk ? expf((c_l[j1] - mx) / temp) : 0.0f;
    double incl = pick_scan(s_sum, (double)w0 + w1), excl = t ? s_sum[t - 1] : 0.0, mid = excl + w0;
    if (k < width) whole = s_sum[PICK_THREADS - 1];
    /* the nucleus: the first M candidates, M the least whose weight reaches top_p of the whole */
    int m = kk;
    double kept = s_sum[PICK_THREADS - 1];
    if (d.top_p < 1.0f) {
        double target = (double)d.top_p * whole;
        if (t == 0) s_pick = 0; /* no nucleus yet */
        sync_block();
        if (excl < target && incl >= target) {
            s_pick = mid >= target && j0 < kk ? j0 + 1 : j1 + 1;
            s_kept = mid >= target && j0 < kk ? mid : incl;
        }
        sync_block();
        m = s_pick, kept = s_kept;
        sync_block();
        if (m == 0) { /* it reaches below the candidates */
            if (t == 0) {
                res.id = -1;
                out[row] = res;
            }
            return;
        }
        if (t == 0) s_pick = -1;
        sync_block();
    }
    double r = (double)u * kept;
    if (j0 < m && r >= excl && r < mid) s_pick = c_i[j0];
    else if (j1 < m && r >= mid && r < incl) s_pick = c_i[j1];
    sync_block();
    if (t == 0) {
        res.id = s_pick >= 0 ? s_pick : c_i[m - 1];
        out[row] = res;
    }
}

#ifndef ILPD_CUDA_EMU
KGLOBAL void k_read(const uint4 *__restrict__ p, size_t count, unsigned *sink) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc; /* never in practice: keeps the loads */
}
#endif

/* ======================================================================
 * The runtime: real CUDA, or the emulation
 * ====================================================================== */

struct cu_buf {
    void *p;
    size_t cap;
};

enum { STEP_GRAPHS = 16 };
static const size_t STEP_BYTES = (1 + KB_STEP_ROWS) * sizeof(int32_t); /* a step's position and tokens */

/* Deferred launches: closures (trivially copyable: the launch's arguments
 * by value) laid out in one byte arena, each run through its own
 * function, so that recording a launch allocates nothing once the arena
 * has grown. */
struct cu_ops {
    struct op {
        void (*run)(const void *);
        size_t off;
    };
    std::vector<unsigned char> arena;
    std::vector<op> list;
    void clear() {
        arena.clear();
        list.clear();
    }
    /* Appends F (at a multiple of 16 bytes: the arena's data is aligned
     * as operator new aligns); throws std::bad_alloc. */
    template <typename F> void add(const F &f) {
        static_assert(std::is_trivially_copyable<F>::value && alignof(F) <= 16, "a deferred launch is copied as bytes");
        size_t off = (arena.size() + 15) / 16 * 16;
        list.push_back(op{[](const void *p) { (*static_cast<const F *>(p))(); }, off});
        arena.resize(off + sizeof(F));
        memcpy(arena.data() + off, static_cast<const void *>(&f), sizeof(F));
    }
    void run() const {
        for (const op &o : list) o.run(arena.data() + o.off);
    }
};

/* A decode step seen before: the bytes of its calls (kernels, shapes,
 * arguments, positions as offsets from the step's) and, from its second
 * time on, its graph. */
struct cu_graph {
    std::vector<unsigned char> key;
    unsigned long long last = 0; /* the step it was last used in (the least recent goes first) */
    bool ready = false;          /* the graph exists */
#ifdef ILPD_CUDA_EMU
    cu_ops ops; /* the emulation's graph: the launches themselves */
#else
    cudaGraphExec_t exec = nullptr;
#endif
};

/* The decode step being recorded (kb->step_begin .. step_end) and the
 * graphs of earlier ones. */
struct cu_steps {
    bool on = false;
    int pos0 = 0, ntok = 0;
    unsigned slots = 0;                     /* the RoPE frequency slots this step reads */
    std::vector<unsigned char> key;         /* its calls so far */
    cu_ops ops;                             /* its launches, deferred */
    cu_graph graphs[STEP_GRAPHS];
    unsigned long long count = 0, captured = 0, replayed = 0;
    int32_t *host = nullptr; /* [1 + KB_STEP_ROWS]: the step's position, then its tokens (pinned) */
    int32_t *dev = nullptr;  /* the device copy its kernels read */
#ifndef ILPD_CUDA_EMU
    cudaEvent_t copied = nullptr; /* the last copy of host to dev is done */
#endif
};

struct cu_impl {
    kb_backend *kb;             /* the backend this is the implementation of (its error state) */
    int dev;
    int sm_count;
    size_t smem_optin;
    char dev_name[256];
#ifndef ILPD_CUDA_EMU
    cudaStream_t stream;
    cublasHandle_t blas;
#endif
    unsigned long long launches;
    int gemm_min_n, ref, debug;
    /* the kernels of 2026-12-07, each switchable for side-by-side runs on a
     * GPU: 0 = the attention kernel before them (ILPD_CUDA_ATTN_BASIC=1),
     * most warps a matvec row (ILPD_CUDA_MV_WARPS, 1 = before), weight
     * sets and SwiGLU with its quantisation in one launch
     * (ILPD_CUDA_SETS=0: one launch a weight and an operation) */
    int attn_new, mv_warps, sets;
    int graphs;                 /* decode steps recorded and replayed as CUDA graphs (ILPD_CUDA_GRAPHS=0: not) */
    int capturing;              /* a stream capture is under way: no synchronisation */
    cu_steps *st;               /* NULL when graphs are off */
    /* the activation that act holds quantised (an RMSNorm's output, act_n
     * rows of act_cols), for the launch right after: launch() forgets it */
    const float *act_of;
    int act_n, act_cols;
    size_t mem_used, mem_limit; /* emulation: "device" bytes in use and the budget (0: none) */
    char label[300];            /* kb->name: "cuda:0 (NVIDIA H200)" */
    cu_buf act, x16, w16, part, ids;
    float *inv_dev, *inv_host; /* RoPE inverse frequencies: 2 slots of inv_cap values each (reserve), so that */
    int inv_n[2], inv_cap;     /* Gemma's two kinds of layers alternate without uploads; inv_n: values a slot holds */
    int inv_next;              /* the slot the next upload replaces */
    kb_pick *picks;            /* PICK_ROWS picks (pick), or NULL: the engine picks from copied logits */
};

static cu_impl *impl_of(kb_backend *kb) { return static_cast<cu_impl *>(kb->impl); }

/* Records the failure of an operation in the backend's error state (the
 * operations return nothing; allocation failures are reported by
 * alloc/reserve/weight_upload instead). */
static void report(cu_impl *c, const char *what, const char *msg) { kb_fail(c->kb, "%s: %s", what, msg); }

#ifndef ILPD_CUDA_EMU

static void ensure_dev(cu_impl *c) {
    static thread_local int cur = -1;
    if (cur != c->dev) {
        cudaSetDevice(c->dev);
        cur = c->dev;
    }
}

static void *rt_malloc(cu_impl *c, size_t bytes) {
    ensure_dev(c);
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError(); /* not sticky: clear it */
        return NULL;
    }
    return p;
}

static void rt_free(cu_impl *c, void *p) {
    if (!p) return;
    ensure_dev(c);
    cudaFree(p);
}

static int rt_sync(cu_impl *c) {
    ensure_dev(c);
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        report(c, "synchronize", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

enum { H2D, D2H, D2D };
static int rt_copy(cu_impl *c, void *dst, const void *src, size_t bytes, int kind) {
    ensure_dev(c);
    cudaMemcpyKind k = kind == H2D ? cudaMemcpyHostToDevice : kind == D2H ? cudaMemcpyDeviceToHost
                                                                          : cudaMemcpyDeviceToDevice;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k, c->stream);
    if (e != cudaSuccess) {
        report(c, "copy", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

static void rt_after(cu_impl *c, const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && c->debug && !c->capturing) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) report(c, what, cudaGetErrorString(e));
}

/* K<<<G, B, SMEM>>>(A...) on the stream, now. */
template <typename... P, typename... A>
static void rt_launch(cu_impl *c, const char *what, void (*k)(P...), dim3 g, dim3 b, size_t smem, A... a) {
    k<<<g, b, smem, c->stream>>>(a...);
    rt_after(c, what);
}

static const char *blas_str(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "error";
    }
}

/* C[m x n] (column-major, ldc) = A^T B with A stored k x m (lda), B k x n (ldb). */
static int blas_sgemm(cu_impl *c, int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *cc,
                      int ldc) {
    const float one = 1.0f, zero = 0.0f;
    __atomic_fetch_add(&c->launches, 1ull, __ATOMIC_RELAXED);
    cublasStatus_t s = cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, a, lda, b, ldb, &zero, cc, ldc);
    if (s != CUBLAS_STATUS_SUCCESS) return -1;
    rt_after(c, "cublasSgemm");
    return 0;
}

static int blas_hgemm(cu_impl *c, int m, int n, int k, const uint16_t *a, int lda, const uint16_t *b, int ldb,
                      float *cc, int ldc) {
    const float one = 1.0f, zero = 0.0f;
    __atomic_fetch_add(&c->launches, 1ull, __ATOMIC_RELAXED);
    cublasStatus_t s = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, a, CUDA_R_16F, lda, b,
                                    CUDA_R_16F, ldb, &zero, cc, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        static int warned;
        if (!warned++) kb_warn("cuda", "cublasGemmEx: %s; using the own kernels", blas_str(s));
        return -1;
    }
    rt_after(c, "cublasGemmEx");
    return 0;
}

/* The step buffers: the position and tokens in pinned host memory, their
 * device copy, the event of the last copy. 0 or -1. */
static int step_alloc(cu_impl *c, cu_steps *st) {
    if (cudaMallocHost(&st->host, STEP_BYTES) != cudaSuccess) st->host = nullptr;
    st->dev = static_cast<int32_t *>(rt_malloc(c, STEP_BYTES));
    if (cudaEventCreateWithFlags(&st->copied, cudaEventDisableTiming) != cudaSuccess) st->copied = nullptr;
    cudaGetLastError();
    return st->host && st->dev && st->copied ? 0 : -1;
}

static void step_release(cu_impl *c, cu_steps *st) {
    if (st->host) cudaFreeHost(st->host);
    rt_free(c, st->dev);
    if (st->copied) cudaEventDestroy(st->copied);
}

/* Waits until the last copy of st->host is done (it may be rewritten). */
static void step_wait(cu_impl *c) { cudaEventSynchronize(c->st->copied); }

/* Queues the copy of the step's position and N tokens to the device. 0 or -1. */
static int step_upload(cu_impl *c, int n) {
    if (rt_copy(c, c->st->dev, c->st->host, (size_t)(1 + n) * sizeof(int32_t), H2D)) return -1;
    cudaEventRecord(c->st->copied, c->stream);
    return 0;
}

/* Captures the recorded launches into G's graph. 0, or -1 when the graph
 * API fails (kb_warn says why; nothing ran). */
static int graph_capture(cu_impl *c, cu_graph *g) {
    cudaGraph_t graph = nullptr;
    int had_error = kb_error(c->kb) != NULL;
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) {
        c->capturing = 1;
        c->st->ops.run();
        c->capturing = 0;
        e = cudaStreamEndCapture(c->stream, &graph);
    }
    if (e == cudaSuccess) e = cudaGraphInstantiate(&g->exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e == cudaSuccess) return 0;
    cudaGetLastError();
    if (!had_error) kb_error_clear(c->kb); /* a launch the capture refused: it runs again as it comes */
    g->exec = nullptr;
    kb_warn("cuda", "CUDA graphs: %s; decode steps launch kernel by kernel", cudaGetErrorString(e));
    return -1;
}

static void graph_launch(cu_impl *c, cu_graph *g) {
    cudaError_t e = cudaGraphLaunch(g->exec, c->stream);
    if (e != cudaSuccess) report(c, "graph launch", cudaGetErrorString(e));
}

static void graph_drop(cu_graph *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    g->exec = nullptr;
    g->ready = false;
}

#else /* ---- emulation ---- */

/* "Device memory" is host memory with a budget per backend
 * (ILPD_CUDA_EMU_MEM bytes at creation; 0: none) so that the tests can run
 * out of it. Blocks carry their size in a 64-byte header. Returns NULL when
 * over the budget or out of host memory. */
static void *rt_malloc(cu_impl *c, size_t bytes) {
    if (bytes > ((size_t)1 << 40) || (c->mem_limit && c->mem_used + bytes > c->mem_limit)) return NULL;
    void *p = NULL;
    if (posix_memalign(&p, 64, 64 + (bytes ? bytes : 1))) return NULL;
    memcpy(p, &bytes, sizeof bytes);
    c->mem_used += bytes;
    return static_cast<unsigned char *>(p) + 64;
}

static void rt_free(cu_impl *c, void *p) {
    if (!p) return;
    unsigned char *b = static_cast<unsigned char *>(p) - 64;
    size_t bytes;
    memcpy(&bytes, b, sizeof bytes);
    c->mem_used -= bytes;
    free(b);
}

static int rt_sync(cu_impl *c) {
    (void)c;
    return 0;
}

enum { H2D, D2H, D2D };
static int rt_copy(cu_impl *c, void *dst, const void *src, size_t bytes, int kind) {
    (void)c;
    (void)kind;
    if (bytes) memcpy(dst, src, bytes);
    return 0;
}

template <typename... P, typename... A>
static void rt_launch(cu_impl *c, const char *what, void (*k)(P...), dim3 g, dim3 b, size_t smem, A... a) {
    if (g.x == 0 || g.y == 0 || g.z == 0) {
        fprintf(stderr, "cuda-emu: %s: empty grid\n", what);
        abort();
    }
    if (smem > c->smem_optin) {
        fprintf(stderr, "cuda-emu: %s: %zu bytes of shared memory, over the %zu allowed\n", what, smem, c->smem_optin);
        abort();
    }
    emu_launch(k, g, b, smem, a...);
}

static int blas_sgemm(cu_impl *c, int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *cc,
                      int ldc) {
    c->launches++;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int l = 0; l < k; l++) s += a[(size_t)i * lda + l] * b[(size_t)j * ldb + l];
            cc[(size_t)j * ldc + i] = s;
        }
    return 0;
}

static int blas_hgemm(cu_impl *c, int m, int n, int k, const uint16_t *a, int lda, const uint16_t *b, int ldb,
                      float *cc, int ldc) {
    c->launches++;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int l = 0; l < k; l++) s += h2f(a[(size_t)i * lda + l]) * h2f(b[(size_t)j * ldb + l]);
            cc[(size_t)j * ldc + i] = s;
        }
    return 0;
}

/* The emulation's step buffers: host memory both. */
static int step_alloc(cu_impl *c, cu_steps *st) {
    st->host = static_cast<int32_t *>(malloc(STEP_BYTES));
    st->dev = static_cast<int32_t *>(rt_malloc(c, STEP_BYTES));
    return st->host && st->dev ? 0 : -1;
}

static void step_release(cu_impl *c, cu_steps *st) {
    free(st->host);
    rt_free(c, st->dev);
}

static void step_wait(cu_impl *c) { (void)c; }

static int step_upload(cu_impl *c, int n) {
    return rt_copy(c, c->st->dev, c->st->host, (size_t)(1 + n) * sizeof(int32_t), H2D);
}

/* The emulation's graph is a copy of the recorded launches. 0 or -1. */
static int graph_capture(cu_impl *c, cu_graph *g) {
    try {
        g->ops = c->st->ops;
    } catch (const std::bad_alloc &) {
        return -1;
    }
    return 0;
}

static void graph_launch(cu_impl *c, cu_graph *g) {
    (void)c;
    g->ops.run();
}

static void graph_drop(cu_graph *g) {
    std::vector<unsigned char>().swap(g->ops.arena);
    std::vector<cu_ops::op>().swap(g->ops.list);
    g->ready = false;
}

#endif

/* ======================================================================
 * Decode steps: recorded, then replayed as CUDA graphs
 *
 * Between step_begin and step_end, launch() records each kernel (its
 * bytes: kernel, shape, arguments) and defers it. At step_end the step
 * runs: as it comes the first time its bytes are seen, captured into a
 * graph the second time, replayed from then on. Positions are the only
 * arguments that change from step to step; in a step the kernels get them
 * as offsets from the step's position, which lives in device memory
 * (st->dev[0], pos_at) and is copied there before each run with the
 * step's tokens (embed reads st->dev + 1). Attention sizes its split of
 * the positions for a power of two of them (step_npos), so that a graph
 * serves every position up to it.
 * ====================================================================== */

static bool step_on(const cu_impl *c) { return c->st && c->st->on; }

template <typename T> static void key_put(std::vector<unsigned char> &key, const T &v) {
    const unsigned char *p = reinterpret_cast<const unsigned char *>(&v);
    key.insert(key.end(), p, p + sizeof v);
}

template <typename... P, typename... A>
static void step_record(cu_impl *c, const char *what, void (*k)(P...), dim3 g, dim3 b, size_t smem, A... a) {
    std::vector<unsigned char> &key = c->st->key;
    try {
        key_put(key, k);
        key_put(key, g);
        key_put(key, b);
        key_put(key, smem);
        (key_put(key, a), ...);
        c->st->ops.add([=]() { rt_launch(c, what, k, g, b, smem, a...); });
    } catch (const std::bad_alloc &) {
        report(c, what, "out of host memory recording the decode step");
    }
}

/* K<<<G, B, SMEM>>>(A...): now, or in a step at its end. A fault a test
 * armed for this launch stops it. */
template <typename... P, typename... A>
static void launch(cu_impl *c, const char *what, void (*k)(P...), dim3 g, dim3 b, size_t smem, A... a) {
    c->act_of = NULL;
    if (kb_fault_due(c->kb, __atomic_fetch_add(&c->launches, 1ull, __ATOMIC_RELAXED), what)) return;
    if (step_on(c)) return step_record(c, what, k, g, b, smem, a...);
    rt_launch(c, what, k, g, b, smem, a...);
}

/* A kernel's position argument: *POS as it is (NULL returned) or, in a
 * step, *POS made an offset from the step's position, and where that
 * position lives. -1 (recorded as a failure of WHAT) for a position before
 * the step's. */
static int step_pos(cu_impl *c, const char *what, int *pos, const int **dpos) {
    *dpos = NULL;
    if (!step_on(c)) return 0;
    if (*pos < c->st->pos0) {
        report(c, what, "a position before the decode step's");
        return -1;
    }
    *pos -= c->st->pos0;
    *dpos = c->st->dev;
    return 0;
}

/* The positions attention plans its split for: NPOS, or in a step the
 * power of two at or above it (at least 256, at most N_CTX). */
static int step_npos(const cu_impl *c, int npos, int n_ctx) {
    if (!step_on(c)) return npos;
    int p = 256;
    while (p < npos) p *= 2;
    return p < n_ctx ? p : n_ctx > npos ? n_ctx : npos;
}

/* Drops the graphs and frees the step buffers (C has no graphs after). */
static void steps_free(cu_impl *c) {
    if (!c->st) return;
    for (int i = 0; i < STEP_GRAPHS; i++) graph_drop(&c->st->graphs[i]);
    step_release(c, c->st);
    delete c->st;
    c->st = NULL;
    c->graphs = 0;
}

static void cu_step_begin(kb_backend *kb, int pos0) {
    cu_impl *c = impl_of(kb);
    cu_steps *st = c->st;
    if (!c->graphs || !st) return;
    if (st->on) return report(c, "step", "a decode step begun inside another");
    step_wait(c);
    st->on = true;
    st->pos0 = pos0;
    st->ntok = 0;
    st->slots = 0;
    st->key.clear();
    st->ops.clear();
}

/* The graph of the step whose calls were these bytes, or NULL. */
static cu_graph *step_find(cu_steps *st) {
    for (int i = 0; i < STEP_GRAPHS; i++) {
        cu_graph *g = &st->graphs[i];
        if (!g->key.empty() && g->key == st->key) return g;
    }
    return NULL;
}

/* Remembers the step's bytes in the least recently used slot (its graph
 * dropped); nothing when out of host memory. */
static void step_remember(cu_steps *st) {
    cu_graph *g = &st->graphs[0];
    for (int i = 1; i < STEP_GRAPHS; i++)
        if (st->graphs[i].last < g->last) g = &st->graphs[i];
    graph_drop(g);
    g->last = st->count;
    try {
        g->key = st->key;
    } catch (const std::bad_alloc &) {
        g->key.clear();
    }
}

static void cu_step_end(kb_backend *kb) {
    cu_impl *c = impl_of(kb);
    cu_steps *st = c->st;
    if (!step_on(c)) return;
    st->on = false;
    st->count++;
    if (kb_error(kb)) return; /* an operation failed: the step does not run */
    st->host[0] = st->pos0;
    if (step_upload(c, st->ntok)) return;
    cu_graph *g = step_find(st);
    if (g && g->ready) {
        st->replayed++;
    } else if (g && graph_capture(c, g) == 0) {
        g->ready = true;
        st->captured++;
    } else if (g) {
        c->graphs = 0; /* the graph API failed: from now on every launch as it comes */
    }
    if (g && g->ready) {
        g->last = st->count;
        return graph_launch(c, g);
    }
    if (!g) step_remember(st);
    st->ops.run();
}

/* Grows BUF to at least BYTES (by half again at least, so that a slowly
 * growing need reallocates rarely: cudaMalloc synchronises); the old
 * contents are not kept. 0 or -1 (out of memory: the old buffer stays). */
static int buf_grow(cu_impl *c, cu_buf *b, size_t bytes) {
    if (b->cap >= bytes) return 0;
    size_t want = b->cap && bytes < b->cap + b->cap / 2 ? b->cap + b->cap / 2 : bytes;
    void *p = rt_malloc(c, want);
    if (!p && want > bytes) p = rt_malloc(c, want = bytes);
    if (!p) return -1;
    if (b->p) {
        rt_sync(c); /* kernels in flight may still use the old one */
        rt_free(c, b->p);
    }
    b->p = p;
    b->cap = want;
    return 0;
}

static unsigned grid_for(cu_impl *c, size_t count, int threads) {
    size_t g = (count + threads - 1) / threads, cap = (size_t)c->sm_count * 32;
    if (g > cap) g = cap;
    return g ? (unsigned)g : 1u;
}

/* ======================================================================
 * The backend operations
 * ====================================================================== */

#ifdef ILPD_CUDA_EMU
static size_t cu_mem_free(kb_backend *kb) {
    cu_impl *c = impl_of(kb);
    return !c->mem_limit ? (size_t)-1 : c->mem_limit > c->mem_used ? c->mem_limit - c->mem_used : 0;
}
#else
static size_t cu_mem_free(kb_backend *kb) {
    size_t free_b = 0, total_b = 0;
    ensure_dev(impl_of(kb));
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return (size_t)-1;
    }
    return free_b;
}
#endif

static void *cu_alloc(kb_backend *kb, size_t bytes) { return rt_malloc(impl_of(kb), (bytes + 255) / 256 * 256); }

static void cu_free(kb_backend *kb, void *p) { rt_free(impl_of(kb), p); }

static void cu_to_host(kb_backend *kb, void *dst, const void *src, size_t bytes) {
    cu_impl *c = impl_of(kb);
    if (!bytes) return;
    if (step_on(c)) return report(c, "to_host", "a copy inside a decode step");
    if (rt_copy(c, dst, src, bytes, D2H) == 0) rt_sync(c);
}

/* The cache is position-major: positions 0..n-1 are the first n rows. */
static void cu_kv_save(kb_backend *kb, const kb_kv *c, int n, void *k, void *v) {
    size_t bytes = kb_kv_bytes(c->type, n, c->kv_dim);
    cu_to_host(kb, k, c->k, bytes);
    cu_to_host(kb, v, c->v, bytes);
}

static void cu_kv_load(kb_backend *kb, kb_kv *c, int n, const void *k, const void *v);

static void cu_to_backend(kb_backend *kb, void *dst, const void *src, size_t bytes) {
    cu_impl *c = impl_of(kb);
    c->act_of = NULL; /* DST may be what act holds quantised */
    if (!bytes) return;
    if (step_on(c)) return report(c, "to_backend", "a copy inside a decode step");
    if (rt_copy(c, dst, src, bytes, H2D) == 0) rt_sync(c);
}

static void cu_kv_load(kb_backend *kb, kb_kv *c, int n, const void *k, const void *v) {
    size_t bytes = kb_kv_bytes(c->type, n, c->kv_dim);
    cu_to_backend(kb, c->k, k, bytes);
    cu_to_backend(kb, c->v, v, bytes);
}

/* Bytes of the quantised activation of N rows of COLS (three 256-aligned parts). */
static size_t act_bytes(size_t n, size_t cols) {
    size_t nb = cols / 32;
    return (n * cols + 255) / 256 * 256 + 2 * ((n * nb * 4 + 255) / 256 * 256);
}

/* After the launch that quantised OUT (N rows of COLS) into act: the next
 * launch, if it is a quantised matmul of OUT, skips its quantisation. */
static void act_hold(cu_impl *c, const float *out, int n, int cols) {
    if (kb_error(c->kb)) return; /* the launch did not run */
    c->act_of = out;
    c->act_n = n;
    c->act_cols = cols;
}

/* The quantised activation of N rows of COLS in the act scratch. */
static act_view act_at(const cu_impl *c, size_t n, size_t cols) {
    size_t nb = n * (cols / 32);
    uint8_t *base = static_cast<uint8_t *>(c->act.p);
    act_view a;
    a.q = reinterpret_cast<int8_t *>(base);
    a.d = reinterpret_cast<float *>(base + (n * cols + 255) / 256 * 256);
    a.ds = reinterpret_cast<float *>(reinterpret_cast<uint8_t *>(a.d) + (nb * 4 + 255) / 256 * 256);
    return a;
}

static size_t attn_smem(int qt, int tile, int hd) {
    return sizeof(float) * ((size_t)qt * hd * 2 + (size_t)tile * (hd + 1) + (size_t)tile * hd + (size_t)qt * tile +
                            3 * (size_t)qt);
}

/* How attention runs N queries over NPOS positions: with the decode kernel
 * (dec: its rows a block, R >= n * group), the tiled prompt kernel (bk: its
 * positions a tile) or the general one (qt queries per block, tile
 * positions per shared-memory tile), and the split of the positions
 * (flash-decoding) with its partial results' bytes. tile is 0 when the head
 * size does not fit shared memory. */
typedef struct {
    int dec, bk, qt, tile, nsplit, split_len;
    size_t part_bytes;
} attn_plan;

/* The tiled prompt kernel's positions a tile for head size HD (0: not
 * this head size) and its shared memory. */
static int tile_bk(int hd) { return hd == 64 ? 64 : hd == 128 || hd == 256 ? 32 : 0; }
static size_t tile_smem(int hd, int bk) {
    return sizeof(float) * ((size_t)hd * TQ + 2 * (size_t)hd * bk + (size_t)bk * TQ_LD);
}

/* The decode kernel's rows a block for N queries of shape S (a power of
 * two), or 0 when it does not apply: head sizes 32, 64, 128 and 256, at
 * most 8 rows (4 for 256: registers). */
static int dec_rows(int n, const kb_attn_shape *s) {
    int hd = s->head_dim, rows = n * (s->n_heads / s->n_kv_heads);
    if (hd != 32 && hd != 64 && hd != 128 && hd != 256) return 0;
    if (rows > (hd == 256 ? 4 : 8)) return 0;
    int r = 1;
    while (r < rows) r *= 2;
    return r;
}

static attn_plan attn_plan_make(const cu_impl *c, int n, int npos, const kb_attn_shape *s) {
    int hd = s->head_dim, heads = s->n_heads;
    attn_plan p = {c->attn_new ? dec_rows(n, s) : 0, tile_bk(hd), 1, ATT_TILE, 1, npos, 0};
    if (!c->attn_new || p.dec || n < TILE_MIN_N || tile_smem(hd, p.bk) > c->smem_optin) p.bk = 0;
    int blocks, want = 2 * c->sm_count, unit, least;
    if (p.dec) {
        blocks = s->n_kv_heads;
        unit = DEC_WARPS * DEC_U;
        least = DEC_MIN_SPLIT;
    } else if (p.bk) {
        blocks = (n + TQ - 1) / TQ * heads;
        unit = p.bk;
        least = 2 * p.bk;
    } else {
        while (p.tile > 1 && attn_smem(1, p.tile, hd) > c->smem_optin) p.tile /= 2;
        if (attn_smem(1, p.tile, hd) > c->smem_optin) {
            p.tile = 0;
            return p;
        }
        p.qt = n < ATT_QT ? n : ATT_QT;
        while (p.qt > 1 && attn_smem(p.qt, p.tile, hd) > 48 * 1024) p.qt /= 2;
        blocks = (n + p.qt - 1) / p.qt * heads;
        unit = p.tile;
        least = 2 * p.tile;
    }
    if (blocks >= want || npos <= least) return p;
    int nsplit = (want + blocks - 1) / blocks, most = (npos + least - 1) / least;
    if (nsplit > most) nsplit = most;
    if (nsplit > 64) nsplit = 64;
    int len = (npos + nsplit - 1) / nsplit;
    len = (len + unit - 1) / unit * unit;
    p.nsplit = (npos + len - 1) / len;
    p.split_len = p.nsplit > 1 ? len : npos;
    /* sized by the count before rounding: never less than the split, and
     * never more for fewer positions (what reserve relies on) */
    if (p.nsplit > 1) p.part_bytes = (size_t)n * heads * nsplit * (hd + 2) * sizeof(float);
    return p;
}

/* What reserve() allocates for shape S: the int8 activation (act) of
 * max_rows rows, the token ids of embed, RoPE's inverse frequencies (2
 * slots of half a head), attention's partial results, the F16 activation
 * and the F16 weight tile of the GEMM path (bytes). */
typedef struct {
    size_t act, ids, half, part, x16, w16;
} cu_scratch;

static cu_scratch scratch_for(const cu_impl *c, const kb_scratch_shape *s) {
    size_t w = (size_t)(s->max_width > 32 ? s->max_width : 32), rows = (size_t)(s->max_rows > 1 ? s->max_rows : 1);
    cu_scratch b = {act_bytes(rows, w), (rows > 256 ? rows : 256) * 4, s->attn ? (size_t)s->attn->head_dim / 2 : 0,
                    0, rows * w * 2, W16_TILE_BYTES};
    for (int n = 1; s->attn && n <= (int)rows; n++) {
        attn_plan p = attn_plan_make(c, n, s->n_ctx, s->attn);
        if (p.part_bytes > b.part) b.part = p.part_bytes;
    }
    return b;
}

static size_t cu_scratch_bytes(kb_backend *kb, const kb_scratch_shape *s) {
    cu_scratch b = scratch_for(impl_of(kb), s);
    return b.act + b.ids + 2 * b.half * sizeof(float) + b.part + b.x16 + b.w16;
}

/* Allocates the scratch for requests of shape S: the int8 activation of
 * max_rows rows (at least one), the token ids of embed, RoPE's frequencies;
 * and, optional (without them attention does not split and cuBLAS does not
 * run), attention's partial results and the F16 activation and weight tile
 * of the GEMM path. */
static int cu_reserve(kb_backend *kb, const kb_scratch_shape *s) {
    cu_impl *c = impl_of(kb);
    size_t w = (size_t)(s->max_width > 32 ? s->max_width : 32);
    cu_scratch b = scratch_for(c, s);
    int half = (int)b.half;
    if (kb->fail_scratch) {
        kb->fail_scratch = 0;
        goto oom;
    }
    if (buf_grow(c, &c->act, b.act) && buf_grow(c, &c->act, act_bytes(1, w))) goto oom;
    if (buf_grow(c, &c->ids, b.ids) && buf_grow(c, &c->ids, 256 * 4)) goto oom;
    if (half > c->inv_cap) {
        float *host = static_cast<float *>(malloc(2 * (size_t)half * sizeof(float)));
        float *dev = static_cast<float *>(rt_malloc(c, 2 * (size_t)half * sizeof(float)));
        if (!host || !dev) {
            free(host);
            rt_free(c, dev);
            goto oom;
        }
        rt_sync(c);
        free(c->inv_host);
        rt_free(c, c->inv_dev);
        c->inv_host = host;
        c->inv_dev = dev;
        c->inv_cap = half;
        c->inv_n[0] = c->inv_n[1] = 0;
    }
    if (b.part) buf_grow(c, &c->part, b.part);
    buf_grow(c, &c->x16, b.x16);
    if (!c->w16.p && buf_grow(c, &c->w16, b.w16)) buf_grow(c, &c->w16, b.w16 / 8);
    return 0;
oom:
    kb_fail(kb, "reserve: out of device memory for the scratch of %d rows of %d", s->max_rows, s->max_width);
    return -1;
}

/* The weight types this backend's kernels decode in their own format
 * (dq_elem, the dequantise and dp4a kernels): 1; the types dequantised to
 * F16 at upload: 2; the others: 0 (refused at upload). */
static int cu_type_supported(ggml_type t) {
    switch (t) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_K: case GGML_TYPE_Q6_K: return 1;
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q3_K: case GGML_TYPE_Q5_K: case GGML_TYPE_IQ4_NL: case GGML_TYPE_IQ4_XS: return 2;
    default: return 0;
    }
}

/* The type of W's device copy: its own, or F16 when dequantised at upload. */
static ggml_type dev_type(const kb_weight *w) { return cu_type_supported(w->type) == 2 ? GGML_TYPE_F16 : w->type; }

/* Dequantises W's rows on the host, a few at a time, into the F16 device
 * buffer DST; 0 or -1 (out of host memory, a failed copy). */
static int upload_as_f16(cu_impl *c, const kb_weight *w, uint16_t *dst) {
    size_t rb = ggml_row_bytes(w->type, (uint64_t)w->cols), per = (size_t)w->cols;
    int tile = (int)((4u << 20) / (per * 2)) + 1;
    float *row = static_cast<float *>(malloc(per * sizeof(float)));
    uint16_t *stage = static_cast<uint16_t *>(malloc((size_t)tile * per * 2));
    int rc = row && stage ? 0 : -1;
    for (int r0 = 0; rc == 0 && r0 < w->rows; r0 += tile) {
        int tr = w->rows - r0 < tile ? w->rows - r0 : tile;
        for (int r = 0; r < tr; r++) {
            quant_dequantize_row(w->type, static_cast<const uint8_t *>(w->host) + (size_t)(r0 + r) * rb, row, w->cols);
            for (size_t k = 0; k < per; k++) stage[(size_t)r * per + k] = quant_f32_to_f16(row[k]);
        }
        if (rt_copy(c, dst + (size_t)r0 * per, stage, (size_t)tr * per * 2, H2D) || rt_sync(c)) rc = -1;
    }
    free(row);
    free(stage);
    return rc;
}

static int cu_weight_upload(kb_backend *kb, kb_weight *w) {
    cu_impl *c = impl_of(kb);
    if (w->dev) return 0; /* already ours */
    int how = cu_type_supported(w->type);
    if (!how) {
        kb_fail(kb, "weight_upload: %s weights (type %d) are not supported by the CUDA backend", ggml_type_name(w->type),
                (int)w->type);
        return -1;
    }
    size_t bytes = how == 2 ? (size_t)w->rows * (size_t)w->cols * 2
                   : w->nbytes ? w->nbytes : (size_t)w->rows * ggml_row_bytes(w->type, (uint64_t)w->cols);
    void *p = rt_malloc(c, bytes);
    if (!p) return -1;
    int rc = how == 2 ? upload_as_f16(c, w, static_cast<uint16_t *>(p)) : rt_copy(c, p, w->host, bytes, H2D) || rt_sync(c);
    if (rc) {
        if (how == 2) kb_fail(kb, "weight_upload: out of host memory to dequantise a %s weight", ggml_type_name(w->type));
        rt_free(c, p);
        return -1;
    }
    w->dev = p;
    return 0;
}

static void cu_weight_release(kb_backend *kb, kb_weight *w) {
    cu_impl *c = impl_of(kb);
    if (!w->dev) return;
    rt_sync(c);
    rt_free(c, w->dev);
    w->dev = NULL;
}

static void cu_embed(kb_backend *kb, float *out, const kb_weight *emb, const int32_t *tokens, int n) {
    cu_impl *c = impl_of(kb);
    if (n <= 0) return;
    if (!emb->dev) return report(c, "embed", "the embedding is not uploaded");
    ggml_type dt = dev_type(emb);
    size_t rb = ggml_row_bytes(dt, (uint64_t)emb->cols);
    if (step_on(c)) { /* the tokens go to the device with the step's position */
        cu_steps *st = c->st;
        if (st->ntok + n > KB_STEP_ROWS) return report(c, "embed", "more tokens than a decode step takes");
        memcpy(st->host + 1 + st->ntok, tokens, (size_t)n * sizeof *tokens);
        st->ntok += n;
        return launch(c, "embed", k_embed, dim3((unsigned)n), dim3(EW_THREADS), 0, (int)dt,
                      static_cast<const uint8_t *>(emb->dev), rb, emb->rows, emb->cols,
                      static_cast<const int32_t *>(st->dev + 1 + st->ntok - n), out);
    }
    int cap = (int)(c->ids.cap / 4);
    if (cap < 1) return report(c, "embed", "no scratch reserved for the token ids");
    for (int i0 = 0; i0 < n; i0 += cap) {
        int m = n - i0 < cap ? n - i0 : cap;
        if (rt_copy(c, c->ids.p, tokens + i0, (size_t)m * 4, H2D)) return;
        launch(c, "embed", k_embed, dim3((unsigned)m), dim3(EW_THREADS), 0, (int)dt,
               static_cast<const uint8_t *>(emb->dev), rb, emb->rows, emb->cols,
               static_cast<const int32_t *>(c->ids.p), out + (size_t)i0 * emb->cols);
        if (m < n - i0) rt_sync(c); /* the ids buffer is reused */
    }
}

static int rmsnorm_threads(int dim) { return dim >= 1024 ? 1024 : dim >= 256 ? 256 : 32 * ((dim + 31) / 32); }

/* Whether a matmul of N rows goes through cuBLAS: from gemm_min_n rows on,
 * but never in a decode step (the own kernels, whose launches a step
 * records). */
static int use_gemm(const cu_impl *c, int n) { return c->gemm_min_n > 0 && n >= c->gemm_min_n && !step_on(c); }

/* Whether a kernel writing N rows of COLS for a matmul may also quantise
 * them into the act scratch for it (act_hold): weight sets on, the own
 * kernels (not cuBLAS, not the reference), whole blocks, room. */
static int act_fusable(const cu_impl *c, int n, int cols) {
    return c->sets && !c->ref && !use_gemm(c, n) && cols % 32 == 0 && act_bytes((size_t)n, (size_t)cols) <= c->act.cap;
}

/* RMSNorm (ADD: after x += y) of N rows of DIM into OUT. When OUT is not X
 * (a matmul's input, not Qwen3's per-head norms), the own kernels would
 * multiply it (not cuBLAS) and it fits the act scratch,
 * the kernel also quantises it there and act_of says so: a quantised
 * matmul right after skips its quantisation launch. */
static void rmsnorm_launch(cu_impl *c, bool add, float *x, const float *y, float *out, const kb_weight *w, int n,
                           int dim, float eps) {
    if (n <= 0) return;
    int quant = out != x && act_fusable(c, n, dim);
    act_view a = quant ? act_at(c, (size_t)n, (size_t)dim) : act_view{NULL, NULL, NULL};
    dim3 g((unsigned)n), b((unsigned)rmsnorm_threads(dim));
    const float *gw = static_cast<const float *>(w->dev);
    if (add)
        launch(c, "add_rmsnorm", k_rmsnorm<true>, g, b, 0, x, y, gw, dim, eps, out, a);
    else
        launch(c, "rmsnorm", k_rmsnorm<false>, g, b, 0, x, y, gw, dim, eps, out, a);
    if (quant) act_hold(c, out, n, dim);
}

static void cu_rmsnorm(kb_backend *kb, float *out, const float *x, const kb_weight *w, int n, int dim, float eps) {
    rmsnorm_launch(impl_of(kb), false, const_cast<float *>(x), NULL, out, w, n, dim, eps);
}

static void cu_add_rmsnorm(kb_backend *kb, float *x, const float *y, float *out, const kb_weight *w, int n, int dim,
                           float eps) {
    rmsnorm_launch(impl_of(kb), true, x, y, out, w, n, dim, eps);
}

/* Warps per row for rows of ITEMS loads a lane: each thread makes at least
 * 4 when it can. */
static int mv_wpr(const cu_impl *c, int items) {
    int w = items >= 4 * 32 * 4 ? 4 : items >= 4 * 32 * 2 ? 2 : 1;
    return w < c->mv_warps ? w : c->mv_warps;
}

static dim3 mv_grid(int rows, int wpr) {
    int per = (MV_THREADS / 32) / wpr;
    return dim3((unsigned)((rows + per - 1) / per));
}

/* SET's rows in all. */
static int mv_rows(const mv_set &set) {
    int rows = 0;
    for (int i = 0; i < set.count; i++) rows += set.rows[i];
    return rows;
}

template <int T>
static void mv_quant_launch(cu_impl *c, const mv_set &set, int cols, size_t rb, const int8_t *aq, const float *ad,
                            const float *ads, int n) {
    int wpr = mv_wpr(c, cols / wtraits<T>::QK * wtraits<T>::PARTS);
    dim3 grid = mv_grid(mv_rows(set), wpr);
    if (n == 1)
        launch(c, "matvec", k_mv_quant<T, 1>, grid, dim3(MV_THREADS), 0, set, rb, cols, aq, ad, ads, n, wpr);
    else
        launch(c, "matvec", k_mv_quant<T, MV_NT>, grid, dim3(MV_THREADS), 0, set, rb, cols, aq, ad, ads, n, wpr);
}

template <int T>
static void mv_float_launch(cu_impl *c, const mv_set &set, int cols, const float *x, int n) {
    int vec = (T == WT_F32 ? cols % 4 == 0 : cols % 8 == 0) && ((uintptr_t)x & 15) == 0;
    for (int i = 0; i < set.count; i++) vec = vec && ((uintptr_t)set.w[i] & 15) == 0;
    int wpr = mv_wpr(c, vec ? cols / (T == WT_F32 ? 4 : 8) : cols);
    dim3 grid = mv_grid(mv_rows(set), wpr);
    if (vec && n == 1)
        launch(c, "matvec", k_mv_float<T, 1, true>, grid, dim3(MV_THREADS), 0, set, cols, x, n, wpr);
    else if (vec)
        launch(c, "matvec", k_mv_float<T, MV_NT, true>, grid, dim3(MV_THREADS), 0, set, cols, x, n, wpr);
    else if (n == 1)
        launch(c, "matvec", k_mv_float<T, 1, false>, grid, dim3(MV_THREADS), 0, set, cols, x, n, wpr);
    else
        launch(c, "matvec", k_mv_float<T, MV_NT, false>, grid, dim3(MV_THREADS), 0, set, cols, x, n, wpr);
}

static int is_quant(ggml_type t) {
    return t == GGML_TYPE_Q8_0 || t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K;
}

/* The cuBLAS path; 0, or -1 when it cannot run (the caller falls back). */
static int matmul_gemm(cu_impl *c, float *out, const kb_weight *w, const float *x, int n, size_t rb) {
    int rows = w->rows, cols = w->cols;
    if (w->type == GGML_TYPE_F32)
        return blas_sgemm(c, rows, n, cols, static_cast<const float *>(w->dev), cols, x, cols, out, rows);
    size_t xe = (size_t)n * cols;
    if (c->x16.cap < xe * 2) return -1;
    if (w->type != GGML_TYPE_F16 && c->w16.cap < (size_t)cols * 2) return -1;
    uint16_t *x16 = static_cast<uint16_t *>(c->x16.p);
    launch(c, "to_f16", k_f32_to_f16, dim3(grid_for(c, xe, EW_THREADS)), dim3(EW_THREADS), 0, x, xe,
           (int)(w->type == GGML_TYPE_BF16), x16);
    if (w->type == GGML_TYPE_F16)
        return blas_hgemm(c, rows, n, cols, static_cast<const uint16_t *>(w->dev), cols, x16, cols, out, rows);
    int tile = (int)(c->w16.cap / ((size_t)cols * 2));
    if (tile > rows) tile = rows;
    uint16_t *w16 = static_cast<uint16_t *>(c->w16.p);
    for (int r0 = 0; r0 < rows; r0 += tile) {
        int tr = rows - r0 < tile ? rows - r0 : tile;
        size_t cnt = (size_t)tr * cols;
        const uint8_t *src = static_cast<const uint8_t *>(w->dev) + (size_t)r0 * rb;
        dim3 g(grid_for(c, cnt, EW_THREADS)), gq(grid_for(c, cnt / 32, EW_THREADS)), b(EW_THREADS);
        switch (w->type) {
        case GGML_TYPE_BF16: launch(c, "dequant", k_dequant_f16<WT_BF16>, g, b, 0, src, rb, cols, cnt, w16); break;
        case GGML_TYPE_Q8_0: launch(c, "dequant", k_dequant_q_f16<WT_Q8_0>, gq, b, 0, src, rb, cols, cnt, w16); break;
        case GGML_TYPE_Q4_0: launch(c, "dequant", k_dequant_q_f16<WT_Q4_0>, gq, b, 0, src, rb, cols, cnt, w16); break;
        case GGML_TYPE_Q4_K: launch(c, "dequant", k_dequant_q_f16<WT_Q4_K>, gq, b, 0, src, rb, cols, cnt, w16); break;
        case GGML_TYPE_Q6_K: launch(c, "dequant", k_dequant_q_f16<WT_Q6_K>, gq, b, 0, src, rb, cols, cnt, w16); break;
        default: return -1;
        }
        if (blas_hgemm(c, tr, n, cols, w16, cols, x16, cols, out + r0, rows)) return -1;
    }
    return 0;
}

static void matmul_ref(cu_impl *c, float *out, const kb_weight *w, const float *x, int n, size_t rb) {
    dim3 grid((unsigned)((w->rows + MV_THREADS / 32 - 1) / (MV_THREADS / 32)));
    launch(c, "matvec_ref", k_mv_ref, grid, dim3(MV_THREADS), 0, (int)w->type, static_cast<const uint8_t *>(w->dev),
           rb, w->rows, w->cols, x, n, out, w->rows);
}

/* SET (its outputs at row 0) for tokens [t0, t0 + n). */
static mv_set mv_rows_from(const mv_set &set, int t0) {
    mv_set at = set;
    for (int i = 0; i < set.count; i++) at.out[i] = set.out[i] + (size_t)t0 * set.rows[i];
    return at;
}

/* The own kernels for the COUNT weights W (as the device holds them, one
 * type and width) times the same N rows of X: the activation quantised once
 * for all of them, one launch per 8 rows. */
static void matmul_own(cu_impl *c, float *const *outs, const kb_weight *w, int count, const float *x, const float *up,
                       int n) {
    int cols = w[0].cols;
    size_t rb = ggml_row_bytes(w[0].type, (uint64_t)cols);
    mv_set set;
    memset(&set, 0, sizeof set);
    set.count = count;
    for (int i = 0; i < count; i++) {
        set.w[i] = w[i].dev;
        set.out[i] = outs[i];
        set.rows[i] = w[i].rows;
    }
    if (is_quant(w[0].type)) {
        size_t per = act_bytes(1, (size_t)cols);
        int cap = 0;
        while (cap < n && act_bytes((size_t)cap + 1, (size_t)cols) <= c->act.cap) cap++;
        if (cap < 1 || c->act.cap < per) {
            if (up) return report(c, "matmul", "no scratch for the activation of the fused SwiGLU");
            for (int i = 0; i < count; i++) matmul_ref(c, outs[i], &w[i], x, n, rb);
            return;
        }
        /* quantised already by the RMSNorm that wrote X (rmsnorm_launch) */
        int have = !up && n <= cap && c->act_of == x && c->act_n == n && c->act_cols == cols;
        for (int t0 = 0; t0 < n; t0 += cap) {
            int nt = n - t0 < cap ? n - t0 : cap;
            size_t nb = (size_t)nt * (cols / 32);
            act_view a = act_at(c, (size_t)nt, (size_t)cols);
            if (!have)
                launch(c, "quantize", k_quant_act, dim3((unsigned)((nb + MV_THREADS / 32 - 1) / (MV_THREADS / 32))),
                       dim3(MV_THREADS), 0, x + (size_t)t0 * cols, up ? up + (size_t)t0 * cols : up, (int)nb, a.q, a.d,
                       a.ds);
            for (int s0 = 0; s0 < nt; s0 += MV_NT) {
                int m = nt - s0 < MV_NT ? nt - s0 : MV_NT;
                const int8_t *q = a.q + (size_t)s0 * cols;
                const float *d = a.d + (size_t)s0 * (cols / 32), *ds = a.ds + (size_t)s0 * (cols / 32);
                mv_set at = mv_rows_from(set, t0 + s0);
                switch (w[0].type) {
                case GGML_TYPE_Q8_0: mv_quant_launch<WT_Q8_0>(c, at, cols, rb, q, d, ds, m); break;
                case GGML_TYPE_Q4_0: mv_quant_launch<WT_Q4_0>(c, at, cols, rb, q, d, ds, m); break;
                case GGML_TYPE_Q4_K: mv_quant_launch<WT_Q4_K>(c, at, cols, rb, q, d, ds, m); break;
                default: mv_quant_launch<WT_Q6_K>(c, at, cols, rb, q, d, ds, m); break;
                }
            }
            if (t0 + nt < n) rt_sync(c); /* the activation buffer is reused */
        }
        return;
    }
    for (int s0 = 0; s0 < n; s0 += MV_NT) {
        int m = n - s0 < MV_NT ? n - s0 : MV_NT;
        const float *xs = x + (size_t)s0 * cols;
        mv_set at = mv_rows_from(set, s0);
        switch (w[0].type) {
        case GGML_TYPE_F32: mv_float_launch<WT_F32>(c, at, cols, xs, m); break;
        case GGML_TYPE_F16: mv_float_launch<WT_F16>(c, at, cols, xs, m); break;
        case GGML_TYPE_BF16: mv_float_launch<WT_BF16>(c, at, cols, xs, m); break;
        default: return report(c, "matmul", "unsupported weight type");
        }
    }
}

/* One weight W (as the device holds it): the reference, cuBLAS, or the own kernels. */
static void matmul_one(cu_impl *c, float *out, const kb_weight *w, const float *x, int n) {
    size_t rb = ggml_row_bytes(w->type, (uint64_t)w->cols);
    if (c->ref) return matmul_ref(c, out, w, x, n, rb);
    if (use_gemm(c, n) && matmul_gemm(c, out, w, x, n, rb) == 0) return;
    matmul_own(c, &out, w, 1, x, NULL, n);
}

static void cu_matmul_many(kb_backend *kb, float *const *outs, const kb_weight *const *ws, int count, const float *x,
                           int n) {
    cu_impl *c = impl_of(kb);
    if (n <= 0 || count <= 0) return;
    if (count > KB_MATMUL_MANY) return report(c, "matmul", "more weights than one launch takes");
    kb_weight dw[KB_MATMUL_MANY]; /* as the device holds them (F16 for the types dequantised at upload) */
    int same = 1;
    for (int i = 0; i < count; i++) {
        if (!ws[i]->dev) return report(c, "matmul", "the weight is not uploaded");
        dw[i] = *ws[i];
        dw[i].type = dev_type(ws[i]);
        same = same && dw[i].type == dw[0].type && dw[i].cols == dw[0].cols;
    }
    if (same && c->sets && !c->ref && !use_gemm(c, n))
        return matmul_own(c, outs, dw, count, x, NULL, n);
    for (int i = 0; i < count; i++) matmul_one(c, outs[i], &dw[i], x, n);
}

static void cu_matmul(kb_backend *kb, float *out, const kb_weight *w, const float *x, int n) {
    cu_matmul_many(kb, &out, &w, 1, x, n);
}

static void cu_swiglu(kb_backend *kb, float *gate, const float *up, size_t n);

/* A quantised down projection of up to 8 rows whose activation fits the
 * scratch quantises silu(gate) * up in its one quantisation launch (gate is
 * left as it was); anything else runs SwiGLU, then the matmul. */
static void cu_swiglu_matmul(kb_backend *kb, float *out, const kb_weight *w, float *gate, const float *up, int n) {
    cu_impl *c = impl_of(kb);
    if (n <= 0) return;
    kb_weight dw = *w;
    dw.type = dev_type(w);
    if (w->dev && is_quant(dw.type) && act_fusable(c, n, dw.cols)) return matmul_own(c, &out, &dw, 1, gate, up, n);
    cu_swiglu(kb, gate, up, (size_t)n * w->cols);
    cu_matmul(kb, out, w, gate, n);
}

static void cu_add_bias(kb_backend *kb, float *x, const kb_weight *b, int n) {
    cu_impl *c = impl_of(kb);
    size_t cnt = (size_t)n * b->cols;
    if (!cnt) return;
    launch(c, "add_bias", k_add_bias, dim3(grid_for(c, cnt, EW_THREADS)), dim3(EW_THREADS), 0, x,
           static_cast<const float *>(b->dev), b->cols, cnt);
}

/* The device copy of the HALF inverse frequencies INV: a slot that holds
 * them, else the older slot after uploading them; NULL when that fails (or
 * when a decode step, whose launches wait for its end, already reads both
 * slots). */
static const float *rope_freqs(cu_impl *c, const float *inv, int half) {
    size_t bytes = (size_t)half * sizeof(float);
    unsigned *used = step_on(c) ? &c->st->slots : NULL;
    for (int k = 0; k < 2; k++)
        if (c->inv_n[k] == half && !memcmp(c->inv_host + (size_t)k * c->inv_cap, inv, bytes)) {
            if (used) *used |= 1u << k;
            return c->inv_dev + (size_t)k * c->inv_cap;
        }
    int k = c->inv_next;
    if (used && (*used >> k & 1)) {
        report(c, "rope", "a third table of frequencies in one decode step");
        return NULL;
    }
    if (used) *used |= 1u << k;
    c->inv_next ^= 1;
    float *host = c->inv_host + (size_t)k * c->inv_cap, *dev = c->inv_dev + (size_t)k * c->inv_cap;
    memcpy(host, inv, bytes);
    c->inv_n[k] = half;
    if (rt_copy(c, dev, host, bytes, H2D) || rt_sync(c)) {
        c->inv_n[k] = 0;
        return NULL;
    }
    return dev;
}

/* X's N_HEADS and, when X2 is not NULL, X2's N_HEADS2, in one launch. */
static void rope_launch(cu_impl *c, float *x, int n_heads, float *x2, int n_heads2, int n, const kb_attn_shape *s,
                        int pos0) {
    int nrot = s->n_rot ? s->n_rot : s->head_dim, half = nrot / 2, heads = n_heads + (x2 ? n_heads2 : 0);
    if (n <= 0) return;
    if (half > c->inv_cap) return report(c, "rope", "head size larger than the scratch reserved");
    const int *dpos;
    if (step_pos(c, "rope", &pos0, &dpos)) return;
    const float *freqs = rope_freqs(c, s->inv_freq, half);
    if (!freqs) return;
    int threads = heads * half >= 256 ? 256 : 32 * ((heads * half + 31) / 32);
    launch(c, "rope", k_rope, dim3((unsigned)n), dim3((unsigned)threads), 0, x, n_heads, x2, x2 ? n_heads2 : 0,
           s->head_dim, nrot, s->neox, freqs, pos0, dpos, s->mscale != 0 ? s->mscale : 1.0f);
}

static void cu_rope(kb_backend *kb, float *x, int n, int n_heads, const kb_attn_shape *s, int pos0) {
    rope_launch(impl_of(kb), x, n_heads, NULL, 0, n, s, pos0);
}

static void cu_rope_qk(kb_backend *kb, float *q, float *k, int n, int n_heads, int n_kv_heads, const kb_attn_shape *s,
                       int pos0) {
    cu_impl *c = impl_of(kb);
    if (!c->sets) { /* the A/B switch: as before, a launch each */
        rope_launch(c, q, n_heads, NULL, 0, n, s, pos0);
        return rope_launch(c, k, n_kv_heads, NULL, 0, n, s, pos0);
    }
    rope_launch(c, q, n_heads, k, n_kv_heads, n, s, pos0);
}

/* k_attn_dec for head size 32 * DPL and ROWS (dec_rows) rows a block. */
template <int KVT, int DPL, typename... A>
static void dec_launch(cu_impl *c, int rows, dim3 g, A... a) {
    dim3 b(32 * DEC_WARPS);
    switch (rows) {
    case 1: return launch(c, "attention", k_attn_dec<KVT, DPL, 1>, g, b, 0, a...);
    case 2: return launch(c, "attention", k_attn_dec<KVT, DPL, 2>, g, b, 0, a...);
    case 4: return launch(c, "attention", k_attn_dec<KVT, DPL, 4>, g, b, 0, a...);
    default: return launch(c, "attention", k_attn_dec<KVT, DPL, DPL == 8 ? 4 : 8>, g, b, 0, a...);
    }
}

template <int KVT, typename... A>
static void dec_launch_hd(cu_impl *c, int hd, int rows, dim3 g, A... a) {
    switch (hd) {
    case 32: return dec_launch<KVT, 1>(c, rows, g, a...);
    case 64: return dec_launch<KVT, 2>(c, rows, g, a...);
    case 128: return dec_launch<KVT, 4>(c, rows, g, a...);
    default: return dec_launch<KVT, 8>(c, rows, g, a...);
    }
}

/* The tiled prompt kernel for head size HD (64, 128 or 256: tile_bk). */
typedef void (*tile_kernel_fn)(const float *, const void *, const void *, int, int, int, const int *, int, int, int,
                               int, float, int, float *, float *);
template <int KVT> static tile_kernel_fn tile_kernel(int hd) {
    return hd == 64 ? k_attn_tile<KVT, 64, 64> : hd == 128 ? k_attn_tile<KVT, 128, 32> : k_attn_tile<KVT, 256, 32>;
}

/* Attention by plan P over a KV cache of type KVT (the K/V rows stored). */
template <int KVT>
static void attn_launch(cu_impl *c, const attn_plan &p, const float *q, const float *k, const float *v,
                        const kb_kv *cache, int n, int pos0, const int *dpos, const kb_attn_shape *s, float scale,
                        float *out, float *part, act_view aq, rope_in rope) {
    int hd = s->head_dim, heads = s->n_heads, group = s->n_heads / s->n_kv_heads, kvd = cache->kv_dim;
    void *kc = cache->k, *vc = cache->v;
    if (p.dec) /* the new rows stored by the decode kernel itself */
        return dec_launch_hd<KVT>(c, hd, p.dec, dim3((unsigned)s->n_kv_heads, (unsigned)p.nsplit), q, kc, vc, k, v,
                                  kvd, n, pos0, dpos, heads, group, p.split_len, p.nsplit, scale, s->window, out, part,
                                  aq, rope);
    size_t cnt = (size_t)n * kvd;
    launch(c, "kv_store", k_kv_store<KVT>, dim3(grid_for(c, cnt, EW_THREADS)), dim3(EW_THREADS), 0, k, v, kc, vc, pos0,
           dpos, kvd, cnt);
    if (p.bk)
        return launch(c, "attention", tile_kernel<KVT>(hd),
                      dim3((unsigned)((n + TQ - 1) / TQ), (unsigned)heads, (unsigned)p.nsplit), dim3(TILE_THREADS),
                      tile_smem(hd, p.bk), q, kc, vc, kvd, n, pos0, dpos, heads, group, p.split_len, p.nsplit,
                      scale, s->window, out, part);
    launch(c, "attention", k_attn<KVT>, dim3((unsigned)((n + p.qt - 1) / p.qt), (unsigned)heads, (unsigned)p.nsplit),
           dim3(ATT_THREADS), attn_smem(p.qt, p.tile, hd), q, kc, vc, kvd, n, pos0, dpos, heads, group, hd, p.qt,
           p.tile, p.split_len, p.nsplit, scale, s->window, out, part);
}

/* attention, or with ROPE attention_rope: the decode kernel rotates Q and
 * the new K itself when every dimension rotates; otherwise rope_qk comes
 * first. */
static void attention_run(cu_impl *c, float *out, float *q, float *k, const float *v, kb_kv *cache, int n, int pos0,
                          const kb_attn_shape *s, int rope) {
    if (n <= 0) return;
    int f16 = cache->type == KB_KV_F16, npos = step_npos(c, pos0 + n, cache->n_ctx), rel = pos0;
    int hd = s->head_dim, heads = s->n_heads;
    attn_plan p = attn_plan_make(c, n, npos, s);
    rope_in ri = {NULL, 0, 1.0f};
    if (rope && p.dec && c->sets && (!s->n_rot || s->n_rot == hd) && hd / 2 <= c->inv_cap) {
        ri.inv = rope_freqs(c, s->inv_freq, hd / 2);
        if (!ri.inv) return;
        ri.neox = s->neox;
        ri.mscale = s->mscale != 0 ? s->mscale : 1.0f;
    } else if (rope) {
        cu_rope_qk(c->kb, q, k, n, heads, s->n_kv_heads, s, pos0);
    }
    const int *dpos;
    if (step_pos(c, "attention", &rel, &dpos)) return;
    if (!p.tile) return report(c, "attention", "head size too large for shared memory");
    if (p.part_bytes > c->part.cap) { /* not reserved: no split */
        p.nsplit = 1;
        p.split_len = npos;
    }
    float scale = s->scale != 0 ? s->scale : 1.0f / sqrtf((float)hd);
    float *part = static_cast<float *>(c->part.p);
    /* the output quantised for the projection after it, by the kernel that writes it */
    int quant = (p.nsplit > 1 || p.dec) && hd % 32 == 0 && act_fusable(c, n, heads * hd);
    act_view none = {NULL, NULL, NULL}, aq = quant ? act_at(c, (size_t)n, (size_t)heads * hd) : none;
    if (f16)
        attn_launch<1>(c, p, q, k, v, cache, n, rel, dpos, s, scale, out, part, p.nsplit > 1 ? none : aq, ri);
    else
        attn_launch<0>(c, p, q, k, v, cache, n, rel, dpos, s, scale, out, part, p.nsplit > 1 ? none : aq, ri);
    if (p.nsplit > 1)
        launch(c, "attention_combine", k_attn_combine, dim3((unsigned)heads, (unsigned)n),
               dim3(hd >= 128 ? 128 : 32 * ((hd + 31) / 32)), 0, (const float *)part, p.nsplit, heads, hd, out, aq);
    if (quant) act_hold(c, out, n, heads * hd);
}

static void cu_attention(kb_backend *kb, float *out, const float *q, const float *k, const float *v, kb_kv *cache,
                         int n, int pos0, const kb_attn_shape *s) {
    attention_run(impl_of(kb), out, const_cast<float *>(q), const_cast<float *>(k), v, cache, n, pos0, s, 0);
}

static void cu_attention_rope(kb_backend *kb, float *out, float *q, float *k, const float *v, kb_kv *cache, int n,
                              int pos0, const kb_attn_shape *s) {
    attention_run(impl_of(kb), out, q, k, v, cache, n, pos0, s, 1);
}

static void cu_swiglu(kb_backend *kb, float *gate, const float *up, size_t n) {
    cu_impl *c = impl_of(kb);
    if (!n) return;
    launch(c, "swiglu", k_swiglu, dim3(grid_for(c, n, EW_THREADS)), dim3(EW_THREADS), 0, gate, up, n);
}

static void cu_geglu(kb_backend *kb, float *gate, const float *up, size_t n) {
    cu_impl *c = impl_of(kb);
    if (!n) return;
    launch(c, "geglu", k_geglu, dim3(grid_for(c, n, EW_THREADS)), dim3(EW_THREADS), 0, gate, up, n);
}

static void cu_scale(kb_backend *kb, float *x, float by, size_t n) {
    cu_impl *c = impl_of(kb);
    if (!n) return;
    launch(c, "scale", k_scale, dim3(grid_for(c, n, EW_THREADS)), dim3(EW_THREADS), 0, x, by, n);
}

static void cu_add(kb_backend *kb, float *x, const float *y, size_t n) {
    cu_impl *c = impl_of(kb);
    if (!n) return;
    launch(c, "add", k_add, dim3(grid_for(c, n, EW_THREADS)), dim3(EW_THREADS), 0, x, y, n);
}

/* One launch and one copy of the picks per PICK_ROWS rows. */
static void cu_pick(kb_backend *kb, kb_pick *out, const float *logits, int n, int width, const kb_pick_params *p,
                    const float *u) {
    cu_impl *c = impl_of(kb);
    if (step_on(c)) return report(c, "pick", "inside a decode step");
    for (int r = 0; r < n; r += PICK_ROWS) {
        int rows = n - r < PICK_ROWS ? n - r : PICK_ROWS;
        pick_draw d = {p->temperature, p->top_p, p->top_k, {0}};
        for (int i = 0; i < rows && p->temperature > 0; i++) d.u[i] = u[r + i];
        launch(c, "pick", k_pick, dim3(rows), dim3(PICK_THREADS), 0, logits + (size_t)r * width, width, d, c->picks);
        if (kb_error(kb) || rt_copy(c, out + r, c->picks, rows * sizeof *out, D2H) || rt_sync(c)) return;
    }
}

static void cu_sync(kb_backend *kb) {
    if (!step_on(impl_of(kb))) rt_sync(impl_of(kb)); /* in a step nothing has run yet */
}

static uint64_t cu_launches(kb_backend *kb) { return __atomic_load_n(&impl_of(kb)->launches, __ATOMIC_RELAXED); }

static void cu_destroy(kb_backend *kb) {
    if (!kb) return;
    cu_impl *c = impl_of(kb);
    if (c) {
        rt_sync(c);
        steps_free(c);
        cu_buf *bufs[] = {&c->act, &c->x16, &c->w16, &c->part, &c->ids};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) rt_free(c, bufs[i]->p);
        rt_free(c, c->inv_dev);
        rt_free(c, c->picks);
        free(c->inv_host);
#ifndef ILPD_CUDA_EMU
        if (c->blas) cublasDestroy(c->blas);
        if (c->stream) cudaStreamDestroy(c->stream);
#endif
        free(c);
    }
    free(kb);
}

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

static kb_backend *create(int dev, char *err, size_t errlen) {
    cu_impl *c = static_cast<cu_impl *>(calloc(1, sizeof(cu_impl)));
    kb_backend *kb = static_cast<kb_backend *>(calloc(1, sizeof(kb_backend)));
    if (!c || !kb) {
        free(c);
        free(kb);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    kb->impl = c;
    c->kb = kb;
    c->dev = dev;
#ifndef ILPD_CUDA_EMU
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        if (e != cudaSuccess)
            snprintf(err, errlen, "no usable CUDA device (%s)", cudaGetErrorString(e));
        else
            snprintf(err, errlen, "no CUDA device found");
        cudaGetLastError();
        free(c);
        free(kb);
        return NULL;
    }
    if (dev < 0 || dev >= count) {
        snprintf(err, errlen, "CUDA device %d does not exist (%d found)", dev, count);
        free(c);
        free(kb);
        return NULL;
    }
    cudaDeviceProp p;
    if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&p, dev)) != cudaSuccess) {
        snprintf(err, errlen, "CUDA device %d: %s", dev, cudaGetErrorString(e));
        cudaGetLastError();
        free(c);
        free(kb);
        return NULL;
    }
    if (p.major < 8) {
        snprintf(err, errlen, "CUDA device %d (%s) has compute capability %d.%d; this build needs 8.0 or newer", dev,
                 p.name, p.major, p.minor);
        free(c);
        free(kb);
        return NULL;
    }
    snprintf(c->dev_name, sizeof c->dev_name, "%s", p.name);
    snprintf(c->label, sizeof c->label, "cuda:%d (%s)", dev, p.name);
    c->sm_count = p.multiProcessorCount;
    c->smem_optin = p.sharedMemPerBlockOptin;
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        snprintf(err, errlen, "CUDA device %d: cannot create a stream: %s", dev, cudaGetErrorString(e));
        cudaGetLastError();
        free(c);
        free(kb);
        return NULL;
    }
    cublasStatus_t bs = cublasCreate(&c->blas);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cuBLAS on CUDA device %d: %s", dev, blas_str(bs));
        c->blas = NULL;
        cu_destroy(kb);
        return NULL;
    }
    cublasSetStream(c->blas, c->stream);
    cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH); /* FP32 SGEMM stays FP32 (no TF32) */
    cudaFuncSetAttribute((const void *)k_attn<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c->smem_optin);
    cudaFuncSetAttribute((const void *)k_attn<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)c->smem_optin);
    for (int hd = 64; hd <= 256; hd *= 2) {
        cudaFuncSetAttribute((const void *)tile_kernel<0>(hd), cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)c->smem_optin);
        cudaFuncSetAttribute((const void *)tile_kernel<1>(hd), cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)c->smem_optin);
    }
    cudaGetLastError();
#else
    (void)err;
    (void)errlen;
    snprintf(c->dev_name, sizeof c->dev_name, "emulated GPU");
    snprintf(c->label, sizeof c->label, "%s", KB_NAME);
    c->sm_count = env_int("ILPD_CUDA_EMU_SMS", 4);
    c->smem_optin = (size_t)env_int("ILPD_CUDA_EMU_SMEM", 100 * 1024);
    const char *lim = getenv("ILPD_CUDA_EMU_MEM");
    c->mem_limit = lim && *lim ? (size_t)strtoull(lim, NULL, 10) : 0;
#endif
    c->gemm_min_n = env_int("ILPD_CUDA_GEMM_MIN_N", 9);
    c->ref = env_int("ILPD_CUDA_REF", 0);
    c->attn_new = !env_int("ILPD_CUDA_ATTN_BASIC", 0);
    c->mv_warps = env_int("ILPD_CUDA_MV_WARPS", 4);
    c->mv_warps = c->mv_warps >= 4 ? 4 : c->mv_warps >= 2 ? 2 : 1;
    c->sets = env_int("ILPD_CUDA_SETS", 1);
    c->debug = env_int("ILPD_CUDA_DEBUG", 0);
    c->graphs = env_int("ILPD_CUDA_GRAPHS", 1);
    if (c->graphs) {
        c->st = new (std::nothrow) cu_steps;
        if (!c->st || step_alloc(c, c->st)) {
            steps_free(c);
            kb_warn("cuda", "no memory for the decode steps' buffers: no CUDA graphs");
        }
    }
    if (env_int("ILPD_CUDA_PICK", 1)) {
        c->picks = static_cast<kb_pick *>(rt_malloc(c, PICK_ROWS * sizeof(kb_pick)));
        if (!c->picks) kb_warn("cuda", "no memory for the picks: the logits go to the host");
    }
    kb->name = c->label;
    /* prompts in passes of 512 rows: each pass reads (and for the quantised
     * types dequantises) every weight once, so fewer passes, fewer reads */
    kb->prompt_rows = env_int("ILPD_CUDA_PROMPT_ROWS", 512);
    kb->alloc = cu_alloc;
    kb->free = cu_free;
    kb->to_host = cu_to_host;
    kb->to_backend = cu_to_backend;
    kb->kv_save = cu_kv_save;
    kb->kv_load = cu_kv_load;
    kb->reserve = cu_reserve;
    kb->scratch_bytes = cu_scratch_bytes;
    kb->mem_free = cu_mem_free;
    kb->matmul_many = cu_matmul_many;
    kb->add_rmsnorm = cu_add_rmsnorm;
    kb->swiglu_matmul = cu_swiglu_matmul;
    kb->rope_qk = cu_rope_qk;
    kb->attention_rope = cu_attention_rope;
    kb->weight_upload = cu_weight_upload;
    kb->weight_release = cu_weight_release;
    kb->embed = cu_embed;
    kb->rmsnorm = cu_rmsnorm;
    kb->matmul = cu_matmul;
    kb->add_bias = cu_add_bias;
    kb->rope = cu_rope;
    kb->attention = cu_attention;
    kb->swiglu = cu_swiglu;
    kb->geglu = cu_geglu;
    kb->scale = cu_scale;
    kb->add = cu_add;
    kb->step_begin = cu_step_begin;
    kb->step_end = cu_step_end;
    kb->pick = c->picks ? cu_pick : NULL;
    kb->sync = cu_sync;
    kb->launches = cu_launches;
    kb->destroy = cu_destroy;
    return kb;
}

/* ======================================================================
 * Host self-test of the weight decoding and the int8 dot products
 * ====================================================================== */

static uint32_t st_rng = 12345;
static uint32_t st_next() {
    st_rng ^= st_rng << 13;
    st_rng ^= st_rng >> 17;
    st_rng ^= st_rng << 5;
    return st_rng;
}
static float st_unif() { return (float)(st_next() >> 8) / 16777216.0f * 2.0f - 1.0f; }

/* Random bytes for every quant, sane F16 scales. */
static void st_fill(int t, uint8_t *buf, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) buf[i] = (uint8_t)st_next();
    uint16_t h;
    switch (t) {
    case WT_F32:
        for (size_t i = 0; i + 4 <= bytes; i += 4) {
            float f = st_unif();
            memcpy(buf + i, &f, 4);
        }
        break;
    case WT_F16:
        for (size_t i = 0; i + 2 <= bytes; i += 2) {
            h = f2h(st_unif());
            memcpy(buf + i, &h, 2);
        }
        break;
    case WT_BF16:
        for (size_t i = 0; i + 2 <= bytes; i += 2) {
            float f = st_unif();
            uint32_t u;
            memcpy(&u, &f, 4);
            h = (uint16_t)(u >> 16);
            memcpy(buf + i, &h, 2);
        }
        break;
    case WT_Q8_0:
    case WT_Q4_0: {
        size_t bb = t == WT_Q8_0 ? 34 : 18;
        for (size_t i = 0; i + bb <= bytes; i += bb) {
            h = f2h(0.01f + 0.02f * (st_unif() + 1.0f));
            memcpy(buf + i, &h, 2);
        }
        break;
    }
    case WT_Q4_K:
        for (size_t i = 0; i + 144 <= bytes; i += 144) {
            h = f2h(0.001f + 0.01f * (st_unif() + 1.0f));
            memcpy(buf + i, &h, 2);
            h = f2h(0.001f + 0.01f * (st_unif() + 1.0f));
            memcpy(buf + i + 2, &h, 2);
        }
        break;
    case WT_Q6_K:
        for (size_t i = 0; i + 210 <= bytes; i += 210) {
            h = f2h(0.001f + 0.01f * (st_unif() + 1.0f));
            memcpy(buf + i + 208, &h, 2);
        }
        break;
    }
}

template <int T>
static double st_lane_dot(const uint8_t *row, int cols, const int8_t *aq, const float *ad, const float *ads) {
    typedef wtraits<T> W;
    int items = (cols / W::QK) * W::PARTS;
    double total = 0;
    for (int lane = 0; lane < 32; lane++) { /* as the lanes of k_mv_quant */
        float acc = 0.0f;
        for (int it = lane; it < items; it += 32) {
            int b = it / W::PARTS, p = it % W::PARTS;
            acc += vdot<T>(row + (size_t)b * W::BYTES, aq + (size_t)b * W::QK, ad + b * (W::QK / 32),
                           ads + b * (W::QK / 32), p);
        }
        total += acc;
    }
    return total;
}

/* k_quant_act on the host (blocks of 32, d = amax / 127, q = nearbyint(x /
 * d), ds = d * sum(q)), for the check of the int8 dot products. */
static void st_quant_act(const float *x, int cols, int8_t *qs, float *d, float *ds) {
    for (int b = 0; b < cols / 32; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * b + i]));
        float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            int q = (int)nearbyintf(x[32 * b + i] * id);
            qs[32 * b + i] = (int8_t)q;
            sum += q;
        }
        d[b] = db;
        ds[b] = db * (float)sum;
    }
}

static int st_fail(char *err, size_t errlen, int fails, const char *fmt, ...) {
    if (!fails) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return fails + 1;
}

static int selftest(char *err, size_t errlen) {
    static const int types[] = {WT_F32, WT_F16, WT_BF16, WT_Q8_0, WT_Q4_0, WT_Q4_K, WT_Q6_K};
    int fails = 0;
    if (err && errlen) err[0] = 0;
    /* F16 round trips */
    for (uint32_t hbits = 0; hbits < 65536; hbits++) {
        uint16_t h = (uint16_t)hbits;
        float a = h2f(h), b = quant_f16_to_f32(h);
        if (memcmp(&a, &b, 4)) fails = st_fail(err, errlen, fails, "f16 %04x decodes differently", h);
    }
    for (int i = 0; i < 100000; i++) {
        float f = st_unif() * (i % 3 == 0 ? 1e-5f : i % 3 == 1 ? 1.0f : 7e4f);
        if (f2h(f) != quant_f32_to_f16(f)) fails = st_fail(err, errlen, fails, "f32 %g encodes differently", f);
    }
    const int rows = 3;
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        int t = types[ti];
        int cols = t == WT_Q4_K || t == WT_Q6_K ? 1024 : t == WT_Q8_0 || t == WT_Q4_0 ? 320 : 100;
        size_t rb = ggml_row_bytes((ggml_type)t, (uint64_t)cols);
        uint8_t *w = static_cast<uint8_t *>(malloc(rb * rows));
        float *ref = static_cast<float *>(malloc(sizeof(float) * cols)), *x = static_cast<float *>(malloc(sizeof(float) * cols));
        int8_t *qs = static_cast<int8_t *>(malloc((size_t)cols));
        float *d = static_cast<float *>(malloc(sizeof(float) * cols / 32 + 4)),
              *ds = static_cast<float *>(malloc(sizeof(float) * cols / 32 + 4));
        if (!w || !ref || !x || !qs || !d || !ds) {
            fails = st_fail(err, errlen, fails, "out of memory");
        } else {
            st_fill(t, w, rb * rows);
            for (int r = 0; r < rows; r++) {
                const uint8_t *row = w + rb * r;
                quant_dequantize_row((ggml_type)t, row, ref, cols);
                for (int k = 0; k < cols; k++) {
                    float g = dq_elem(t, row, k);
                    if (memcmp(&g, &ref[k], 4)) {
                        fails = st_fail(err, errlen, fails, "%s row %d value %d: %g, the CPU says %g",
                                        ggml_type_name((ggml_type)t), r, k, g, ref[k]);
                        break;
                    }
                }
                if (t != WT_Q8_0 && t != WT_Q4_0 && t != WT_Q4_K && t != WT_Q6_K) continue;
                for (int k = 0; k < cols; k++) x[k] = st_unif() * (k % 7 == 0 ? 3.0f : 1.0f);
                st_quant_act(x, cols, qs, d, ds);
                double want = 0, mag = 0;
                for (int k = 0; k < cols; k++) {
                    double term = (double)ref[k] * ((double)qs[k] * d[k / 32]);
                    want += term;
                    mag += fabs(term);
                }
                double got = t == WT_Q8_0   ? st_lane_dot<WT_Q8_0>(row, cols, qs, d, ds)
                             : t == WT_Q4_0 ? st_lane_dot<WT_Q4_0>(row, cols, qs, d, ds)
                             : t == WT_Q4_K ? st_lane_dot<WT_Q4_K>(row, cols, qs, d, ds)
                                            : st_lane_dot<WT_Q6_K>(row, cols, qs, d, ds);
                if (fabs(got - want) > 1e-5 * mag + 1e-6)
                    fails = st_fail(err, errlen, fails, "%s row %d: int8 dot %.7g, expected %.7g (scale %.3g)",
                                    ggml_type_name((ggml_type)t), r, got, want, mag);
            }
        }
        free(w);
        free(ref);
        free(x);
        free(qs);
        free(d);
        free(ds);
    }
    return fails;
}

} // namespace ILPD_NS

extern "C" kb_backend *KB_CREATE(int dev, char *err, size_t errlen) { return ILPD_NS::create(dev, err, errlen); }

extern "C" void KB_GRAPH_STATS(kb_backend *kb, unsigned long long *steps, unsigned long long *captured,
                               unsigned long long *replayed) {
    const ILPD_NS::cu_steps *st = ILPD_NS::impl_of(kb)->st;
    *steps = st ? st->count : 0;
    *captured = st ? st->captured : 0;
    *replayed = st ? st->replayed : 0;
}

extern "C" int KB_SELFTEST(char *err, size_t errlen) { return ILPD_NS::selftest(err, errlen); }

#ifdef ILPD_CUDA_EMU
extern "C" size_t kb_cuda_emu_mem_used(kb_backend *kb) { return ILPD_NS::impl_of(kb)->mem_used; }
#else
extern "C" size_t kb_cuda_mem_used(kb_backend *kb) {
    ILPD_NS::cu_impl *c = ILPD_NS::impl_of(kb);
    size_t free_b = 0, total_b = 0;
    ILPD_NS::ensure_dev(c);
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return total_b - free_b;
}
#endif

#ifndef ILPD_CUDA_EMU
extern "C" int kb_cuda_bandwidth(int dev, size_t bytes, double *read_gbs, double *copy_gbs, size_t *mem_used,
                                 size_t *mem_total, char *err, size_t errlen) {
    using namespace ILPD_NS;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= dev) {
        snprintf(err, errlen, "no CUDA device %d (%s)", dev, e != cudaSuccess ? cudaGetErrorString(e) : "not found");
        cudaGetLastError();
        return -1;
    }
    cudaSetDevice(dev);
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, dev);
    bytes = bytes / 64 * 64;
    void *a = NULL, *b = NULL;
    unsigned *sink = NULL;
    cudaEvent_t t0, t1;
    cudaEventCreate(&t0);
    cudaEventCreate(&t1);
    int rc = -1;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes / 2) != cudaSuccess ||
        cudaMalloc(&sink, 4) != cudaSuccess) {
        snprintf(err, errlen, "cannot allocate %zu + %zu bytes on the device", bytes, bytes / 2);
        cudaGetLastError();
        goto done;
    }
    {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        if (mem_used) *mem_used = total_b - free_b;
        if (mem_total) *mem_total = total_b;
        cudaMemset(a, 1, bytes);
        cudaMemset(b, 0, bytes / 2);
        cudaDeviceSynchronize();
        double best_r = 0, best_c = 0;
        for (int rep = 0; rep < 6; rep++) {
            float ms = 0;
            cudaEventRecord(t0);
            k_read<<<p.multiProcessorCount * 8, 512>>>(static_cast<const uint4 *>(a), bytes / 16, sink);
            cudaEventRecord(t1);
            cudaEventSynchronize(t1);
            cudaEventElapsedTime(&ms, t0, t1);
            if (rep && ms > 0 && bytes / (ms * 1e6) > best_r) best_r = bytes / (ms * 1e6);
            cudaEventRecord(t0);
            cudaMemcpyAsync(b, a, bytes / 2, cudaMemcpyDeviceToDevice);
            cudaEventRecord(t1);
            cudaEventSynchronize(t1);
            cudaEventElapsedTime(&ms, t0, t1);
            if (rep && ms > 0 && bytes / (ms * 1e6) > best_c) best_c = bytes / (ms * 1e6);
        }
        if ((e = cudaGetLastError()) != cudaSuccess) {
            snprintf(err, errlen, "%s", cudaGetErrorString(e));
            goto done;
        }
        *read_gbs = best_r;
        *copy_gbs = best_c;
        rc = 0;
    }
done:
    cudaFree(a);
    cudaFree(b);
    cudaFree(sink);
    cudaEventDestroy(t0);
    cudaEventDestroy(t1);
    return rc;
}
#endif
