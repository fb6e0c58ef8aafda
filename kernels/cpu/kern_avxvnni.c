/* kern_avxvnni.c - the AVX2 kernels of kern_avx2.c built again for CPUs with
 * AVX-VNNI (256-bit vpdpbusd without AVX-512: Alder Lake and later, Zen 4
 * and later): every u8 x s8 dot product of the integer paths is one
 * vpdpbusd instead of maddubs and madd, with the same sums. */
#define KERN_AVX2_VNNI 1
#define KERN_AVX2_NAME "avxvnni"
#define KERN_AVX2_FEATURES "avx2,fma,f16c,bmi2,avxvnni"
#define KERN_AVX2_GET cpu_kern_avxvnni
#include "kernels/cpu/kern_avx2.c"
