/* cuda_compat.cuh - the part of CUDA that the kernels use, behind a few names,
 * so that one source compiles two ways:
 *
 *   nvcc                     the real thing (sm_80, sm_90);
 *   g++ -DILPD_CUDA_EMU      a host emulation for the tests of machines
 *                            without a GPU (cuda_emu.cuh): blocks run one at
 *                            a time, the threads of a block as fibers that
 *                            switch at __syncthreads and at warp shuffles;
 *                            "device memory" is host memory (so ASan sees
 *                            every out-of-bounds access of a kernel).
 *
 * Kernels use: threadIdx/blockIdx/blockDim/gridDim (x, y, z), SMEM (static
 * shared arrays), DYN_SMEM (the dynamic shared buffer), sync_block(),
 * warp_sum/warp_max (butterfly shuffles over a whole warp: every lane of the
 * warp must call them), half_sum/half_max (the same over each half-warp of 16
 * lanes; every lane calls them too), dp4a, f2i_rn, h2f/f2h/bf2f/bf16_round and
 * the KGLOBAL/KDEV/KHD qualifiers. Each build defines only the shuffle itself
 * (shfl_xor); the reductions over it are written once. Everything else is
 * plain C++ arithmetic.
 */
#ifndef ILPD_CUDA_COMPAT_CUH
#define ILPD_CUDA_COMPAT_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifndef ILPD_CUDA_EMU
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define ILPD_NS ilpd_cuda
#else
#define ILPD_NS ilpd_cuda_emu
#endif

extern "C" {
#include "kernels/quant.h" /* the host side of h2f / f2h */
}

namespace ILPD_NS {

#ifndef ILPD_CUDA_EMU

#define KGLOBAL __global__
#define KDEV __device__ __forceinline__
#define KHD __host__ __device__ __forceinline__
#define SMEM __shared__
#define DYN_SMEM(T, name)                                        \
    extern __shared__ __align__(16) unsigned char name##_raw[]; \
    T *name = reinterpret_cast<T *>(name##_raw)

KDEV void sync_block() { __syncthreads(); }
KDEV float shfl_xor(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
KDEV int shfl_xor_i(int v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }
KDEV int f2i_rn(float x) { return __float2int_rn(x); }
/* Products and sums that the compiler must not fuse into an FMA (to round
 * exactly as the CPU reference does). */
#ifdef __CUDA_ARCH__
#define fmul_rn(a, b) __fmul_rn((a), (b))
#define fadd_rn(a, b) __fadd_rn((a), (b))
#define fsub_rn(a, b) __fsub_rn((a), (b))
#else
KHD float fmul_rn(float a, float b) { return a * b; }
KHD float fadd_rn(float a, float b) { return a + b; }
KHD float fsub_rn(float a, float b) { return a - b; }
#endif

#else /* ---- host emulation ---- */

#define KGLOBAL static
#define KDEV inline
#define KHD inline
#define SMEM static

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float4 {
    float x, y, z, w;
};
struct uint4 {
    unsigned x, y, z, w;
};
struct uint2 {
    unsigned x, y;
};

struct emu_fiber; /* cuda_emu.cuh */
dim3 &emu_thread_idx();
extern dim3 emu_block_idx, emu_block_dim, emu_grid_dim;
void *emu_dyn_smem();
void emu_sync_block();
float emu_shfl_xor(float v, int o);
int emu_shfl_xor_i(int v, int o);

#define threadIdx (::ILPD_NS::emu_thread_idx())
#define blockIdx (::ILPD_NS::emu_block_idx)
#define blockDim (::ILPD_NS::emu_block_dim)
#define gridDim (::ILPD_NS::emu_grid_dim)
#define DYN_SMEM(T, name) T *name = reinterpret_cast<T *>(emu_dyn_smem())

static inline void sync_block() { emu_sync_block(); }
static inline float shfl_xor(float v, int o) { return emu_shfl_xor(v, o); }
static inline int shfl_xor_i(int v, int o) { return emu_shfl_xor_i(v, o); }
/* as the device's cvt.rni.s32.f32: NaN gives 0, out of range saturates */
static inline int f2i_rn(float x) {
    if (x != x) return 0;
    if (x >= 2147483647.0f) return 2147483647;
    if (x <= -2147483648.0f) return -2147483647 - 1;
    return (int)nearbyintf(x);
}
static inline float fmul_rn(float a, float b) { return a * b; }
static inline float fadd_rn(float a, float b) { return a + b; }
static inline float fsub_rn(float a, float b) { return a - b; }

#endif

/* Butterfly reductions over groups of W lanes (32: the warp; 16: each
 * half-warp), the same on both sides: every lane of the warp calls them. */
template <int W> KDEV float lanes_sum(float v) {
    for (int o = W / 2; o > 0; o >>= 1) v += shfl_xor(v, o);
    return v;
}
template <int W> KDEV float lanes_max(float v) {
    for (int o = W / 2; o > 0; o >>= 1) v = fmaxf(v, shfl_xor(v, o));
    return v;
}
KDEV float warp_sum(float v) { return lanes_sum<32>(v); }
KDEV float warp_max(float v) { return lanes_max<32>(v); }
KDEV float half_sum(float v) { return lanes_sum<16>(v); }
KDEV float half_max(float v) { return lanes_max<16>(v); }
KDEV int warp_sum_i(int v) {
    for (int o = 16; o > 0; o >>= 1) v += shfl_xor_i(v, o);
    return v;
}

/* ---- conversions, the same on both sides (the host uses the CPU backend's
 * bit-exact ones) ---- */

#if defined(__CUDA_ARCH__)
#define KUNROLL _Pragma("unroll")
#else
#define KUNROLL
#endif

KHD float h2f(uint16_t h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    return quant_f16_to_f32(h);
#endif
}

/* Round to nearest even, overflow to infinity, subnormals kept. */
KHD uint16_t f2h(float f) {
#ifdef __CUDA_ARCH__
    return __half_as_ushort(__float2half_rn(f));
#else
    return quant_f32_to_f16(f);
#endif
}

KHD float bf2f(uint16_t h) {
#ifdef __CUDA_ARCH__
    return __uint_as_float((uint32_t)h << 16);
#else
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
#endif
}

/* F rounded to BF16 (to nearest, ties to even; a NaN stays a NaN), as a
 * float: what a BF16 weight multiplies (llama.cpp's semantics; the CPU
 * backend does the same). */
KHD float bf16_round(float f) {
#ifdef __CUDA_ARCH__
    uint32_t u = __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
#endif
    u = (u & 0x7FFFFFFFu) > 0x7F800000u ? (u | 0x00400000u) & 0xFFFF0000u : (u + 0x7FFFu + ((u >> 16) & 1)) & 0xFFFF0000u;
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* Dot product of 4 signed bytes, plus c. */
KHD int dp4a(int a, int b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * i)) * (int)(int8_t)(uint8_t)((uint32_t)b >> (8 * i));
    return c;
#endif
}

} // namespace ILPD_NS

#endif
