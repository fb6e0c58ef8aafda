/* test_cuda_emu.c - the checks of test_cuda.c on the emulated GPU: the CUDA
 * backend's kernels compiled for the host (kernels/cuda/cuda_emu.cuh), run
 * against the CPU backend on machines without a GPU. Built by the Makefile's
 * CUDA section (it links build/.../kernels/cuda/cuda_emu.o). */
#define CUDA_EMU 1
#include "tests/unit/test_cuda.c"
