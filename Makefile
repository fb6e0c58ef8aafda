# ilpd - build, test, run.
#   make            build ./ilpd (CUDA backend too when nvcc is found; CUDA=0 to skip it)
#   make test       build and run every test (SANITIZE=1: ASan+UBSan build)
#   make run        install what is missing (sudo when not root), build, serve the default model on 127.0.0.1:8080
#   make bench      speed benchmarks (see README)

CC       ?= gcc
PYTHON   ?= /usr/bin/python3
SANITIZE ?= 0
CUDA     ?= auto
MODEL    ?= models/ilpd-demo-F16.gguf
PORT     ?= 8080
CTX      ?=
# CTX: the context in tokens (empty: the model's trained context, capped by --kv-budget-mb)
HOST     ?= 127.0.0.1
PREFIX   ?= /usr/local
DESTDIR  ?=

WARN     := -Wall -Wextra -Werror
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE $(WARN) -pthread -I.
LIBS     := -lm -lpcre2-8 -lcjson -lmicrohttpd -lb64 -lcrypto -pthread

ifeq ($(SANITIZE),1)
  BUILD  := build/san
  CFLAGS := $(CFLAGS_BASE) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
  LDFLAGS_SAN := -fsanitize=address,undefined
  BIN    := $(BUILD)/ilpd
else
  BUILD  := build/rel
  CFLAGS := $(CFLAGS_BASE) -O3 -g
  LDFLAGS_SAN :=
  BIN    := ilpd
endif

# CUDA backend: built when nvcc exists unless CUDA=0.
NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(CUDA),0)
  NVCC :=
endif
CUDA_SRCS := $(wildcard kernels/cuda/*.cu)
ifneq ($(NVCC),)
ifneq ($(CUDA_SRCS),)
  # nvcc may be a wrapper script outside the toolkit (/usr/local/bin/nvcc), so
  # the runtime libraries are looked for where toolkits install them.
  CUDA_LIBDIR := $(firstword $(foreach d,$(patsubst %/bin/nvcc,%/lib64,$(NVCC)) \
                   /usr/local/cuda/lib64 $(sort $(wildcard /usr/local/cuda-*/lib64)) \
                   /usr/lib/x86_64-linux-gnu,$(if $(wildcard $(d)/libcudart.so),$(d))))
  ifeq ($(CUDA_LIBDIR),)
    $(warning nvcc found ($(NVCC)) but no libcudart.so: building without the CUDA backend)
    NVCC :=
  else
    CFLAGS    += -DILPD_CUDA=1
    CUDA_OBJS := $(patsubst %.cu,$(BUILD)/%.o,$(CUDA_SRCS))
    LIBS      += -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudart -lcublas -lstdc++
  endif
  NVCCFLAGS := -O3 -std=c++17 -I. -gencode arch=compute_80,code=sm_80 \
               -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
               -Xcompiler -Wall,-Wextra,-Werror
endif
endif

SRCS := $(wildcard engine/*.c kernels/*.c kernels/cpu/*.c probe/*.c server/*.c server/cli/*.c)
OBJS := $(patsubst %.c,$(BUILD)/%.o,$(SRCS)) $(CUDA_OBJS)
# Everything but the program's entry point, for the C unit tests to link.
LIB_OBJS := $(filter-out $(BUILD)/server/main.o,$(OBJS))
UNIT_SRCS := $(wildcard tests/unit/*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))
DEPS := $(OBJS:.o=.d) $(UNIT_BINS:=.d)

.PHONY: all test run bench fuzz install deps test-deps clean
all: $(BIN)

$(BIN): $(OBJS)
	$(CC) $(LDFLAGS_SAN) -o $@ $^ $(LIBS)

# A stamp named after the flags: objects built with other flags (say, before
# nvcc or kernels/cuda/ appeared, or with CUDA=0) are rebuilt, not mixed.
FLAGS_STAMP := $(BUILD)/flags-$(shell echo '$(CC) $(CFLAGS) $(NVCCFLAGS) $(LIBS)' | md5sum | cut -c1-12)
$(FLAGS_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/flags-*
	@touch $@

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/tests/%: tests/unit/%.c $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -o $@ $< $(LIB_OBJS) $(LIBS)

$(BUILD)/%.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

-include $(DEPS)
# The CUDA backend's extra rules (host emulation build for its tests) and the
# libFuzzer harnesses (`make fuzz FUZZ_SECONDS=N`) live beside their sources.
-include kernels/cuda/cuda.mk
-include tests/fuzz/fuzz.mk

# Installs the Debian packages the build, the tests and `make run` need
# (only those missing; as root, or with sudo otherwise).
deps:
	@scripts/make/install-deps.sh --sudo

# `make test` never runs sudo: as root it installs what is missing, otherwise
# it prints the missing packages and the command that installs them.
test-deps:
	@scripts/make/install-deps.sh

test: test-deps $(BIN) $(UNIT_BINS)
	@ILPD=$(abspath $(BIN)) UNIT_DIR=$(abspath $(BUILD)/tests) SANITIZE=$(SANITIZE) PYTHON=$(PYTHON) tests/run.sh $(T)

run: deps $(BIN)
	./$(BIN) serve -m $(MODEL) --host $(HOST) --port $(PORT) $(if $(CTX),-c $(CTX))

# Installs the binary, the default config (kept if present), the probes, the
# built-in model and the systemd units; DESTDIR and PREFIX are honoured.
install: $(BIN)
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/ilpd
	install -d $(DESTDIR)$(PREFIX)/share/ilpd/probes $(DESTDIR)$(PREFIX)/share/ilpd/models $(DESTDIR)$(PREFIX)/share/doc/ilpd
	install -m 0644 config/probes/*.json $(DESTDIR)$(PREFIX)/share/ilpd/probes/ 2>/dev/null || true
	if [ -f $(MODEL) ]; then install -m 0644 $(MODEL) $(DESTDIR)$(PREFIX)/share/ilpd/models/; fi
	install -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/ilpd/
	install -d $(DESTDIR)/etc/ilpd
	[ -f $(DESTDIR)/etc/ilpd/ilpd.conf ] || sed -e 's|^probe_dir = .*|probe_dir = $(PREFIX)/share/ilpd/probes|' \
	    -e 's|^# model = .*|model = $(PREFIX)/share/ilpd/models/$(notdir $(MODEL))|' config/ilpd.conf > $(DESTDIR)/etc/ilpd/ilpd.conf
	sed 's|/usr/local|$(PREFIX)|g' systemd/ilpd.service > ilpd.service.tmp && install -D -m 0644 ilpd.service.tmp $(DESTDIR)/etc/systemd/system/ilpd.service
	sed 's|/usr/local|$(PREFIX)|g' systemd/ilpd@.service > ilpd.service.tmp && install -D -m 0644 ilpd.service.tmp $(DESTDIR)/etc/systemd/system/ilpd@.service
	rm -f ilpd.service.tmp
	if [ -z "$(DESTDIR)" ] && ! getent passwd ilpd >/dev/null; then useradd --system --no-create-home --shell /usr/sbin/nologin ilpd; fi

# Speed benchmarks: makes the synthetic bench models when missing (bench/models/,
# git-ignored; scripts/make/make_bench_models.sh), then runs `ilpd bench` on each and
# prints a table (scripts/make/bench.sh; LLAMA_BENCH=path/to/llama-bench adds
# llama.cpp's numbers on the same files, LLAMA_QUANTIZE=path/to/llama-quantize
# the files of llama.cpp's presets, ROUNDS=2 two interleaved rounds with the
# ratios, ISA=avx2 caps ilpd's kernels; see the scripts).
BENCH_THREADS ?= 2
bench: $(BIN)
	@LLAMA_QUANTIZE=$(LLAMA_QUANTIZE) scripts/make/make_bench_models.sh
	@ILPD=$(abspath $(BIN)) THREADS=$(BENCH_THREADS) scripts/make/bench.sh

clean:
	rm -rf build ilpd
