/* arch.c - the table of supported families (arch.h). */
#include "engine/arch.h"

#include <string.h>

static const model_arch ARCHS[] = {
    {"llama", 0, ARCH_OPTIONAL, ARCH_ABSENT},
    {"qwen2", 1, ARCH_REQUIRED, ARCH_ABSENT},
    {"qwen3", 1, ARCH_OPTIONAL, ARCH_REQUIRED},
};

const model_arch *arch_find(const char *name) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof *ARCHS; i++)
        if (!strcmp(ARCHS[i].name, name)) return &ARCHS[i];
    return NULL;
}

const char *arch_names(void) { return "llama, qwen2, qwen3"; }
