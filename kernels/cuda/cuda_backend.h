/* cuda_backend.h - what the CUDA backend offers besides backend.h (for the
 * tests and scripts/make/gpu-check.sh). C linkage.
 *
 * kb_cuda_create() itself is declared in backend.h. The same source,
 * compiled by g++ with -DILPD_CUDA_EMU, gives kb_cuda_emu_create(): the
 * backend on an emulated GPU (host memory, blocks run one at a time, threads
 * as fibers; see cuda_emu.cuh), which tests/unit/test_cuda_emu.c compares
 * against the CPU backend on machines without a GPU.
 *
 * Environment (read at creation):
 *   ILPD_CUDA_GEMM_MIN_N  matmuls of at least this many rows go through
 *                         cuBLAS (default 9; 0 or a huge value: never)
 *   ILPD_CUDA_REF=1       every matmul through the plain reference kernel
 *                         (float dot of dequantised weights): a debugging aid
 *   ILPD_CUDA_DEBUG=1     synchronise and check for errors after each launch
 *   ILPD_CUDA_GRAPHS=0    decode steps launch kernel by kernel (default 1:
 *                         each step recorded, captured as a CUDA graph the
 *                         second time its calls recur, replayed after)
 * and for the emulation only:
 *   ILPD_CUDA_EMU_MEM     "device memory" budget in bytes (default: none), so
 *                         that tests can run out of it
 *   ILPD_CUDA_EMU_SMS     multiprocessors it claims (4: decides the
 *                         attention's split over the positions)
 *   ILPD_CUDA_EMU_SMEM    shared memory per block it allows (100 KiB)
 */
#ifndef ILPD_CUDA_BACKEND_H
#define ILPD_CUDA_BACKEND_H

#include <stddef.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The emulated backend (always built; no GPU needed). */
kb_backend *kb_cuda_emu_create(int dev, char *err, size_t errlen);

/* Host-side checks of the kernels' weight decoding and int8 dot products
 * against kernels/cpu/quant.c (no GPU needed). Returns the number of
 * failures (0: all good), the first one described in ERR. */
int kb_cuda_selftest(char *err, size_t errlen);     /* nvcc build only */
int kb_cuda_emu_selftest(char *err, size_t errlen); /* the emulation build */

/* Device memory in use, bytes: for the emulation, what this backend has
 * allocated; on a GPU, the whole device's (cudaMemGetInfo: total - free, as
 * nvidia-smi counts it), or 0 when it cannot be read. */
size_t kb_cuda_mem_used(kb_backend *kb);     /* nvcc build only */
size_t kb_cuda_emu_mem_used(kb_backend *kb); /* the emulation build */

/* Decode steps (kb->step_begin) so far, graphs captured and graph replays
 * (all 0 with ILPD_CUDA_GRAPHS=0). */
void kb_cuda_graph_stats(kb_backend *kb, unsigned long long *steps, unsigned long long *captured,
                         unsigned long long *replayed);     /* nvcc build only */
void kb_cuda_emu_graph_stats(kb_backend *kb, unsigned long long *steps, unsigned long long *captured,
                             unsigned long long *replayed); /* the emulation build */

/* Measures device memory bandwidth on DEV over BYTES (>= 4 GiB is
 * meaningful): a read kernel (READ_GBS) and a device-to-device copy
 * (COPY_GBS, bytes read + written), best of a few runs, GB/s (1e9). Also
 * reports the memory in use and in total (bytes). 0, or -1 with ERR. */
int kb_cuda_bandwidth(int dev, size_t bytes, double *read_gbs, double *copy_gbs, size_t *mem_used,
                      size_t *mem_total, char *err, size_t errlen); /* nvcc build only */

#ifdef __cplusplus
}
#endif

#endif
