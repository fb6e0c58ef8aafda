/* fuzz.c (gguf) - libFuzzer harness for the GGUF reader (engine/gguf.c):
 * header, metadata and tensor table parsed from a buffer, then every key
 * and tensor looked up the way the engine does. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "gguf.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    gguf_file *f = gguf_open_buffer(data, size, "fuzz.gguf", err, sizeof err);
    if (!f) {
        if (!err[0]) __builtin_trap(); /* a refusal always says why */
        return 0;
    }
    int64_t i64;
    float f32;
    int b;
    gguf_kv_get_i64(f, "llama.block_count", &i64);
    gguf_kv_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &f32);
    gguf_kv_get_bool(f, "tokenizer.ggml.add_bos_token", &b);
    char *arch = gguf_kv_get_str(f, "general.architecture");
    free(arch);
    gguf_tensor_find(f, "token_embd.weight");
    tok_vocab *v = tok_vocab_load(f, err, sizeof err); /* the vocabulary tables are metadata too */
    if (v) {
        int32_t ids[64];
        tok_encode(v, "Hello world", 11, 1, 1, ids, 64);
        tok_vocab_free(v);
    }
    gguf_close(f);
    return 0;
}
