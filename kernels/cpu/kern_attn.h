/* kern_attn.h - plain attention of G query heads over one KV head (see
 * cpu_internal.h), written once for every kernel table: each kern_*.c
 * includes it after its own dot_f32, dot_f16, exp_sum, axpy_f32 and
 * axpy_f16, with KERN_TARGET set to its target attribute (empty for scalar)
 * and KERN_ATTN to the name to define, so that every ISA compiles it with
 * its own primitives inlined. Not a public header: no include guard. */

static KERN_TARGET void KERN_ATTN(const float *q, int G, const void *k, const void *v, int f16, size_t stride,
                                  int npos, int hd, float scale, float *score, float *out) {
    for (int g = 0; g < G; g++) {
        float *sc = score + (size_t)g * npos;
        const float *qg = q + (size_t)g * hd;
        float mx = -INFINITY;
        if (f16) {
            for (int t = 0; t < npos; t++) sc[t] = dot_f16(qg, (const uint16_t *)k + t * stride, hd) * scale;
        } else {
            for (int t = 0; t < npos; t++) sc[t] = dot_f32(qg, (const float *)k + t * stride, hd) * scale;
        }
        for (int t = 0; t < npos; t++) mx = sc[t] > mx ? sc[t] : mx;
        float inv = 1.0f / exp_sum(sc, npos, mx);
        for (int t = 0; t < npos; t++) sc[t] *= inv;
        memset(out + (size_t)g * hd, 0, (size_t)hd * sizeof(float));
    }
    for (int t = 0; t < npos; t++)
        for (int g = 0; g < G; g++) {
            if (f16)
                axpy_f16(out + (size_t)g * hd, score[(size_t)g * npos + t], (const uint16_t *)v + t * stride, hd);
            else
                axpy_f32(out + (size_t)g * hd, score[(size_t)g * npos + t], (const float *)v + t * stride, hd);
        }
}
