# kernels/cuda/cuda.mk - the CUDA backend's extra rules (included by the Makefile).
#
# The real backend (kernels/cuda/*.cu by nvcc, -DILPD_CUDA=1) is built by the
# Makefile's CUDA section whenever nvcc exists. Here: the SAME source compiled
# by the host C++ compiler with -DILPD_CUDA_EMU into an emulated GPU
# (kernels/cuda/cuda_emu.cuh runs every kernel as loops over blocks and
# threads), linked only into tests/unit/test_cuda_emu.c. It needs neither
# nvcc nor a GPU, so it is built with CUDA=0 too, and with SANITIZE=1 the
# kernels run under ASan+UBSan (every out-of-bounds access of a kernel is a
# host access).

CXX ?= g++
CUDA_EMU_OBJ := $(BUILD)/kernels/cuda/cuda_emu.o
CUDA_EMU_FLAGS := -std=c++17 -D_GNU_SOURCE -DILPD_CUDA_EMU $(WARN) -pthread -I.
ifeq ($(SANITIZE),1)
  CUDA_EMU_FLAGS += -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
else
  CUDA_EMU_FLAGS += -O2 -g
endif

$(CUDA_EMU_OBJ): kernels/cuda/cuda_backend.cu
	@mkdir -p $(dir $@)
	$(CXX) $(CUDA_EMU_FLAGS) -MMD -MP -x c++ -c $< -o $@

# test_cuda_emu.c includes test_cuda.c; it links the emulated backend beside
# everything else (the namespaces and C entry points of the two builds differ).
$(BUILD)/tests/test_cuda_emu: tests/unit/test_cuda_emu.c tests/unit/test_cuda.c $(CUDA_EMU_OBJ) $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -o $@ $< $(CUDA_EMU_OBJ) $(LIB_OBJS) $(LIBS) -lstdc++

-include $(CUDA_EMU_OBJ:.o=.d)
