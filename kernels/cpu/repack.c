/* repack.c - the in-place x16 layouts of the 32-value types (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, IQ4_NL: the rp32 layout of cpu_internal.h) and of Q4_K,
 * Q5_K, Q6_K, IQ4_XS, Q2_K and Q3_K, and reading one row back out of them.
 *
 * Q4_K/Q5_K, per super-block of 16 rows: d[16] (F16) at 0, dmin[16] at 32;
 * at 64 + 16j + r row r's sub-block j scale (low 4 bits) and min (high 4);
 * at 192 + 16p + r the top 2 bits of scale 2p, min 2p, scale 2p+1, min
 * 2p+1 (2 bits each, from bit 0); Q5_K: at 256 + 64k + 4r row r's qh bytes
 * 4k..4k+3; then (at 256, Q5_K 768) 4 chunks c of 8 steps k of 16 rows x 4
 * bytes: row r's qs bytes 32c + 4k.. at 512c + 64k + 4r.
 *
 * Q6_K, per super-block of 16 rows (3360 bytes): d[16] (F16) at 0; at
 * 32 + 16g + r row r's scale g (int8, one per 16 values); then for each
 * half n of 128 values, 8 steps k of 192 bytes (at 288 + 192 (8n + k)):
 * row r's ql bytes 64n + 4k.. at + 4r, its ql bytes 64n + 32 + 4k.. at
 * + 64 + 4r, its qh bytes 32n + 4k.. at + 128 + 4r (a step holds 16 values
 * a row: 4 of each 32 of the half).
 *
 * IQ4_XS, per super-block of 16 rows (2176 bytes): d[16] (F16) at 0; row
 * r's scales_l (4 bytes) at 32 + 4r, its scales_h (2 bytes) at 96 + 2r;
 * then each block j of 32 values as the rp32 layout's chunks
 * (cpu_internal.h): row r's qs bytes 16j + 4k.. at 128 + 256j + 64k + 4r.
 *
 * Q2_K, per super-block of 16 rows (1344 bytes): d[16] (F16) at 0, dmin[16]
 * at 32; at 64 + 16g + r row r's scale byte g (scale and min of the 16s g);
 * then for each half n of 128 values, 8 steps k: row r's qs bytes 32n +
 * 4k.. at 320 + 64 (8n + k) + 4r.
 *
 * Q3_K, per super-block of 16 rows (1760 bytes): d[16] (F16) at 0; row r's
 * scale bytes 4i..4i+3 (the file's 12-byte packing) at 32 + 64i + 4r; its
 * hmask bytes 4k.. at 224 + 64k + 4r; then as Q2_K its qs bytes 32n + 4k..
 * at 736 + 64 (8n + k) + 4r. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/quant.h"

int repack_supported(ggml_type t) {
    return rp32_type(t) || t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K || t == GGML_TYPE_IQ4_XS ||
           t == GGML_TYPE_Q2_K || t == GGML_TYPE_Q3_K;
}

/* 1 for the 32-value types of the rp32 layout (cpu_internal.h). */
int rp32_type(ggml_type t) {
    return t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1 ||
           t == GGML_TYPE_Q8_0 || t == GGML_TYPE_IQ4_NL;
}

/* Offset of the quants in a file block of T: after d (and m, and qh). */
static int file_qs_off(ggml_type t) { return 2 + (rp32_has_min(t) ? 2 : 0) + (rp32_has_bits(t) ? 4 : 0); }

/* Row R's file block BLK into rp32 group block O (whose masks start zeroed). */
static void pack_rp32(ggml_type t, const uint8_t *blk, int r, uint8_t *o) {
    int nk = t == GGML_TYPE_Q8_0 ? 8 : 4, ch = rp32_chunk_off(t), mo = rp32_mask_off(t);
    const uint8_t *qs = blk + file_qs_off(t);
    uint32_t qh = 0;
    memcpy(o + 2 * r, blk, 2);
    if (rp32_has_min(t)) memcpy(o + 32 + 2 * r, blk + 2, 2);
    if (rp32_has_bits(t)) memcpy(&qh, qs - 4, 4);
    for (int k = 0; k < nk; k++)
        for (int i = 0; i < 4; i++) {
            int bit = 4 * r + i;
            o[ch + k * 64 + bit] = t == GGML_TYPE_Q8_0 ? (uint8_t)(qs[4 * k + i] ^ 0x80) : qs[4 * k + i];
            if (!rp32_has_bits(t)) continue;
            o[mo + 16 * k + bit / 8] |= (uint8_t)(((qh >> (4 * k + i)) & 1) << (bit % 8));
            o[mo + 16 * k + 8 + bit / 8] |= (uint8_t)(((qh >> (16 + 4 * k + i)) & 1) << (bit % 8));
        }
}

/* The file block BLK of row R of rp32 group block O. */
static void unpack_rp32(ggml_type t, const uint8_t *o, int r, uint8_t *blk) {
    int nk = t == GGML_TYPE_Q8_0 ? 8 : 4, ch = rp32_chunk_off(t), mo = rp32_mask_off(t);
    uint8_t *qs = blk + file_qs_off(t);
    uint32_t qh = 0;
    memcpy(blk, o + 2 * r, 2);
    if (rp32_has_min(t)) memcpy(blk + 2, o + 32 + 2 * r, 2);
    for (int k = 0; k < nk; k++)
        for (int i = 0; i < 4; i++) {
            int bit = 4 * r + i;
            uint8_t v = o[ch + k * 64 + bit];
            qs[4 * k + i] = t == GGML_TYPE_Q8_0 ? (uint8_t)(v ^ 0x80) : v;
            if (!rp32_has_bits(t)) continue;
            qh |= (uint32_t)((o[mo + 16 * k + bit / 8] >> (bit % 8)) & 1) << (4 * k + i);
            qh |= (uint32_t)((o[mo + 16 * k + 8 + bit / 8] >> (bit % 8)) & 1) << (16 + 4 * k + i);
        }
    if (rp32_has_bits(t)) memcpy(qs - 4, &qh, 4);
}

/* Row R's Q4_K/Q5_K scales and mins (the file block BLK's 12-byte packing)
 * into group block O (the bytes around them move as pieces). */
static void pack_kq_scales(const uint8_t *blk, int r, uint8_t *o) {
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) q4k_scale_min(blk + 4, j, &sc[j], &m[j]);
    for (int j = 0; j < 8; j++) o[64 + j * 16 + r] = (uint8_t)((sc[j] & 15) | (m[j] & 15) << 4);
    for (int p = 0; p < 4; p++)
        o[192 + p * 16 + r] =
            (uint8_t)((sc[2 * p] >> 4) | (m[2 * p] >> 4) << 2 | (sc[2 * p + 1] >> 4) << 4 | (m[2 * p + 1] >> 4) << 6);
}

/* The same back: row R's scales and mins of group block O into the file
 * block BLK's 12-byte packing. */
static void unpack_kq_scales(const uint8_t *o, int r, uint8_t *blk) {
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        uint8_t lo = o[64 + j * 16 + r], hi = (uint8_t)(o[192 + (j / 2) * 16 + r] >> (4 * (j & 1)));
        sc[j] = (uint8_t)((lo & 15) | (hi & 3) << 4);
        m[j] = (uint8_t)((lo >> 4) | ((hi >> 2) & 3) << 4);
    }
    uint8_t *s = blk + 4;
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
}

/* The pieces of row R's file block of a 256-value type that move unchanged
 * and where they go in a group block (above): F[i] (file offset), X[i]
 * (group offset), LEN[i]; returns their count (at most 65). Q4_K/Q5_K's
 * scales and mins are recoded instead (pack_kq_scales). */
static int pieces_256(ggml_type t, int r, size_t *f, size_t *x, size_t *len) {
    int m = 0;
#define PIECE(F, X, L) (f[m] = (size_t)(F), x[m] = (size_t)(X), len[m++] = (L))
    if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K) { /* d, dmin, scales[12], Q5_K's qh[32], qs[128] */
        const int q5 = t == GGML_TYPE_Q5_K;
        PIECE(0, 2 * r, 2);
        PIECE(2, 32 + 2 * r, 2);
        for (int k = 0; k < 8 && q5; k++) PIECE(16 + 4 * k, 256 + 64 * k + 4 * r, 4);
        for (int c = 0; c < 4; c++)
            for (int k = 0; k < 8; k++) PIECE((q5 ? 48 : 16) + 32 * c + 4 * k, (q5 ? 768 : 256) + 64 * (8 * c + k) + 4 * r, 4);
        return m;
    }
    if (t == GGML_TYPE_IQ4_XS) { /* d, scales_h, scales_l[4], qs[128] */
        PIECE(0, 2 * r, 2);
        PIECE(2, 96 + 2 * r, 2);
        PIECE(4, 32 + 4 * r, 4);
        for (int j = 0; j < 8; j++)
            for (int k = 0; k < 4; k++) PIECE(8 + 16 * j + 4 * k, 128 + 256 * j + 64 * k + 4 * r, 4);
        return m;
    }
    if (t == GGML_TYPE_Q3_K) { /* hmask[32], qs[64], scales[12], d */
        PIECE(108, 2 * r, 2);
        for (int i = 0; i < 3; i++) PIECE(96 + 4 * i, 32 + 64 * i + 4 * r, 4);
        for (int k = 0; k < 8; k++) PIECE(4 * k, 224 + 64 * k + 4 * r, 4);
        for (int n = 0; n < 2; n++)
            for (int k = 0; k < 8; k++) PIECE(32 + 32 * n + 4 * k, 736 + 64 * (8 * n + k) + 4 * r, 4);
        return m;
    }
    if (t == GGML_TYPE_Q2_K) { /* scales[16], qs[64], d, dmin */
        PIECE(80, 2 * r, 2);
        PIECE(82, 32 + 2 * r, 2);
        for (int g = 0; g < 16; g++) PIECE(g, 64 + 16 * g + r, 1);
        for (int n = 0; n < 2; n++)
            for (int k = 0; k < 8; k++) PIECE(16 + 32 * n + 4 * k, 320 + 64 * (8 * n + k) + 4 * r, 4);
        return m;
    }
    for (int n = 0; n < 2; n++) /* Q6_K: ql[128], qh[64], scales[16], d */
        for (int k = 0; k < 8; k++)
            for (int p = 0; p < 3; p++) /* ql low half, ql high half, qh */
                PIECE((p == 2 ? 128 + 32 * n : 64 * n + 32 * p) + 4 * k, 288 + 192 * (8 * n + k) + 64 * p + 4 * r, 4);
    for (int g = 0; g < 16; g++) PIECE(192 + g, 32 + 16 * g + r, 1);
    PIECE(208, 2 * r, 2);
#undef PIECE
    return m;
}

/* Moves row R's block of a 256-value type between the file layout and a
 * group block: FROM is the group block when UNPACK, else the file block;
 * TO the other. */
static void move_256(ggml_type t, int r, const uint8_t *from, uint8_t *to, int unpack) {
    size_t f[65], x[65], len[65];
    int m = pieces_256(t, r, f, x, len);
    for (int i = 0; i < m; i++) memcpy(to + (unpack ? f[i] : x[i]), from + (unpack ? x[i] : f[i]), len[i]);
}

size_t repack_group_bytes(ggml_type t, int cols) { return RP_ROWS * ggml_row_bytes(t, (uint64_t)cols); }

/* Packs the 16 file-layout rows SRC (row_bytes apart) into DST. */
static void pack_group(ggml_type t, const uint8_t *src, size_t row_bytes, int nb, uint8_t *dst) {
    size_t bb = ggml_type_block_bytes(t);
    for (int b = 0; b < nb; b++) {
        uint8_t *o = dst + (size_t)b * RP_ROWS * bb;
        if (rp32_has_bits(t)) memset(o + rp32_mask_off(t), 0, 64);
        for (int r = 0; r < RP_ROWS; r++) {
            const uint8_t *blk = src + (size_t)r * row_bytes + (size_t)b * bb;
            if (rp32_type(t)) {
                pack_rp32(t, blk, r, o);
                continue;
            }
            move_256(t, r, blk, o, 0);
            if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K) pack_kq_scales(blk, r, o);
        }
    }
}

int repack_weight(ggml_type t, void *data, int rows, int cols) {
    if (!repack_supported(t) || rows < RP_ROWS) return 0;
    size_t row_bytes = ggml_row_bytes(t, (uint64_t)cols), gb = RP_ROWS * row_bytes;
    int nb = cols / ggml_type_block_size(t);
    uint8_t *tmp = malloc(gb);
    if (!tmp) return -1;
    for (int g = 0; g < rows / RP_ROWS; g++) {
        uint8_t *p = (uint8_t *)data + (size_t)g * gb;
        memcpy(tmp, p, gb);
        pack_group(t, tmp, row_bytes, nb, p);
    }
    free(tmp);
    return 0;
}

/* Rebuilds the file-layout block of row lane R of repacked block O. */
static void unpack_block(ggml_type t, const uint8_t *o, int r, uint8_t *blk) {
    if (rp32_type(t)) {
        unpack_rp32(t, o, r, blk);
        return;
    }
    move_256(t, r, o, blk, 1);
    if (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K) unpack_kq_scales(o, r, blk);
}

void repack_dequant_row(ggml_type t, const void *data, int rows, int cols, int r, float *out) {
    size_t row_bytes = ggml_row_bytes(t, (uint64_t)cols);
    int g = r / RP_ROWS;
    if (!repack_supported(t) || g >= rows / RP_ROWS) {
        quant_dequantize_row(t, (const uint8_t *)data + (size_t)r * row_bytes, out, cols);
        return;
    }
    int bs = ggml_type_block_size(t), nb = cols / bs;
    size_t bb = ggml_type_block_bytes(t);
    const uint8_t *base = (const uint8_t *)data + (size_t)g * RP_ROWS * row_bytes;
    uint8_t blk[256];
    for (int b = 0; b < nb; b++) {
        unpack_block(t, base + (size_t)b * RP_ROWS * bb, r % RP_ROWS, blk);
        quant_dequantize_row(t, blk, out + (size_t)b * bs, bs);
    }
}
