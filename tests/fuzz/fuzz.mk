# libFuzzer harnesses (clang): `make fuzz FUZZ_SECONDS=N` builds each harness
# in tests/fuzz/<name>/ against the few project modules it reaches
# (instrumented, with ASan+UBSan, in build/fuzz/, apart from build/rel and
# build/san) and runs them one after another for N seconds each from their
# seed corpora (scripts/make/fuzz.sh); it prints the executions per harness and
# fails when one crashed. Included by the root Makefile.
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_NAMES="hint gguf"] [SHARED=../shared]
FUZZ_SECONDS ?= 60
FUZZ_CC      ?= clang
FUZZ_DIR     := build/fuzz
FUZZ_NAMES   ?= messages hint gguf tokenizer chat
# Only the parsers are linked: no kernels, no engine, so kernels/cpu/*.c and
# their per-file ISA flags never reach this build.
FUZZ_MODS_messages  := server/messages.c engine/utf8.c
FUZZ_MODS_hint      := probe/mask.c probe/hint.c
FUZZ_MODS_gguf      := engine/gguf.c engine/tokenizer.c kernels/quant.c engine/utf8.c
FUZZ_MODS_tokenizer := engine/gguf.c engine/tokenizer.c kernels/quant.c engine/utf8.c
FUZZ_MODS_chat      := engine/chat.c
FUZZ_LIBS    := -lm -lpcre2-8 -lcjson -lb64 -pthread
FUZZ_CFLAGS  := $(CFLAGS_BASE) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
                -fno-sanitize-recover=undefined
# The tokenizer harness links objects built without comparison tracing
# (obj-fast/): its hot loops are hash lookups, where tracing more than halved
# the speed and guided nothing (the seeds carry the special-token texts).
FUZZ_OBJDIR_tokenizer := obj-fast
fuzz_objs     = $(patsubst %.c,$(FUZZ_DIR)/$(or $(FUZZ_OBJDIR_$(1)),obj)/%.o,$(FUZZ_MODS_$(1)))
FUZZ_OBJS    := $(sort $(foreach n,$(FUZZ_NAMES),$(call fuzz_objs,$(n))))
FUZZ_BINS    := $(patsubst %,$(FUZZ_DIR)/fuzz_%,$(FUZZ_NAMES))

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_DIR)/obj-fast/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -fno-sanitize-coverage=trace-cmp -MMD -MP -c $< -o $@

# One explicit link rule per harness, each with its own module list (explicit
# prerequisites, so make keeps the objects between runs).
define fuzz_bin
$(FUZZ_DIR)/fuzz_$(1): tests/fuzz/$(1)/fuzz.c $(call fuzz_objs,$(1))
	$$(FUZZ_CC) $$(FUZZ_CFLAGS) -fsanitize=fuzzer -MMD -MP -o $$@ $$< $(call fuzz_objs,$(1)) $$(FUZZ_LIBS)
endef
$(foreach n,$(FUZZ_NAMES),$(eval $(call fuzz_bin,$(n))))

-include $(FUZZ_OBJS:.o=.d) $(FUZZ_BINS:=.d)

fuzz: $(FUZZ_BINS)
	@FUZZ_DIR=$(FUZZ_DIR) FUZZ_SECONDS=$(FUZZ_SECONDS) PYTHON=$(PYTHON) SHARED=$(or $(SHARED),../shared) \
	    scripts/make/fuzz.sh $(FUZZ_NAMES)
