/* arch.c - the table of supported families (arch.h). */
#include "engine/arch.h"

#include <string.h>

static const model_arch ARCHS[] = {
    {.name = "llama", .neox = 0, .qkv_bias = ARCH_OPTIONAL, .qk_norm = ARCH_ABSENT},
    {.name = "qwen2", .neox = 1, .qkv_bias = ARCH_REQUIRED, .qk_norm = ARCH_ABSENT},
    {.name = "qwen3", .neox = 1, .qkv_bias = ARCH_OPTIONAL, .qk_norm = ARCH_REQUIRED},
    {.name = "gemma3", .neox = 1, .qkv_bias = ARCH_ABSENT, .qk_norm = ARCH_REQUIRED, .post_norm = ARCH_REQUIRED,
     .gelu = 1, .embed_scale = 1, .swa_period = 6},
    {.name = "phi3", .neox = 1, .qkv_bias = ARCH_ABSENT, .qk_norm = ARCH_ABSENT, .fused = 1},
};

const model_arch *arch_find(const char *name) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof *ARCHS; i++)
        if (!strcmp(ARCHS[i].name, name)) return &ARCHS[i];
    return NULL;
}

const char *arch_names(void) { return "llama, qwen2, qwen3, gemma3, phi3"; }
