/* backend.c - what every backend shares. */
#include "kernels/backend.h"

#include <stdio.h>

size_t kb_kv_bytes(kb_kv_type t, int n_ctx, int kv_dim) {
    return (size_t)n_ctx * (size_t)kv_dim * (t == KB_KV_F16 ? 2 : 4);
}

#ifndef ILPD_CUDA
kb_backend *kb_cuda_create(int dev, char *err, size_t errlen) {
    (void)dev;
    snprintf(err, errlen, "this build has no CUDA backend (built with CUDA=0 or without nvcc)");
    return NULL;
}
#endif
