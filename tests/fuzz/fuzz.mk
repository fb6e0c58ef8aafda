# libFuzzer harnesses (clang): `make fuzz FUZZ_SECONDS=N` builds each harness
# in tests/fuzz/<name>/ against the project's sources (instrumented, with
# ASan+UBSan, in build/fuzz/) and runs it for N seconds from its seed corpus
# (scripts/fuzz.sh). Included by the root Makefile.
FUZZ_SECONDS ?= 60
FUZZ_CC      ?= clang
FUZZ_DIR     := build/fuzz
FUZZ_NAMES   := messages hint gguf tokenizer chat
# The modules the harnesses reach (parsers only: no kernels, no engine).
FUZZ_SRCS    := engine/gguf.c engine/tokenizer.c engine/chat.c engine/log.c engine/textout.c probe/mask.c probe/hint.c \
                server/messages.c
FUZZ_CFLAGS  := $(CFLAGS_BASE) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
                -fno-sanitize-recover=undefined
FUZZ_OBJS    := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_SRCS))
FUZZ_BINS    := $(patsubst %,$(FUZZ_DIR)/fuzz_%,$(FUZZ_NAMES))

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_DIR)/fuzz_%: tests/fuzz/%/fuzz.c $(FUZZ_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJS) $(LIBS)

-include $(FUZZ_OBJS:.o=.d)

fuzz: $(FUZZ_BINS)
	@FUZZ_DIR=$(FUZZ_DIR) FUZZ_SECONDS=$(FUZZ_SECONDS) PYTHON=$(PYTHON) scripts/fuzz.sh $(FUZZ_NAMES)
