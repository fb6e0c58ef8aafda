/* fuzz.c (gguf) - libFuzzer harness for the GGUF reader (engine/gguf.c):
 * header, metadata and tensor table parsed from the input buffer
 * (gguf_open_buffer: the same parser gguf_open runs over its mapping), then
 * every key, array element and tensor that the reader accepted is read
 * back, so that a bound it failed to check shows as an ASan report (the
 * input buffer is exactly its size). Last, the vocabulary is loaded from the
 * metadata and used, as the engine does. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/tokenizer.h"

/* Reads every byte of [P, P+N) (ASan checks the range) into a sum. */
static volatile uint8_t sink;
static void touch(const void *p, uint64_t n) {
    const uint8_t *b = p;
    uint8_t s = 0;
    for (uint64_t i = 0; i < n; i++) s ^= b[i];
    sink = s;
}

/* Array elements read back: all of a short array, the ends of a long one. */
static void walk_array(const gguf_kv *kv) {
    for (uint64_t i = 0; i < kv->arr_len; i++) {
        if (i == 64 && kv->arr_len > 128) i = kv->arr_len - 64;
        if (kv->arr_type == GGUF_TYPE_STRING) {
            gguf_str s = gguf_arr_str(kv, i);
            touch(s.ptr, s.len);
        } else {
            (void)gguf_arr_num(kv, i);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    err[0] = 0;
    gguf_file *f = gguf_open_buffer(data, size, "fuzz.gguf", err, sizeof err);
    if (!f) {
        if (!err[0]) __builtin_trap(); /* a refusal always says why */
        return 0;
    }
    if (f->alignment == 0 || (f->n_tensors && f->data_offset > size)) __builtin_trap();
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        touch(kv->key.ptr, kv->key.len);
        if (kv->type == GGUF_TYPE_ARRAY) walk_array(kv);
        /* every key is found again by name (the first of equal names) */
        char *name = strndup(kv->key.ptr, (size_t)kv->key.len);
        if (!name) continue;
        if (strlen(name) == kv->key.len) {
            const gguf_kv *found = gguf_kv_find(f, name);
            if (!found || found->key.len != kv->key.len) __builtin_trap();
            int64_t i64;
            float f32;
            int b;
            gguf_kv_get_i64(f, name, &i64);
            gguf_kv_get_f32(f, name, &f32);
            gguf_kv_get_bool(f, name, &b);
            free(gguf_kv_get_str(f, name));
        }
        free(name);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        touch(t->name.ptr, t->name.len);
        if ((const uint8_t *)t->data < data || t->nbytes > size ||
            (const uint8_t *)t->data - data > (ptrdiff_t)(size - t->nbytes))
            __builtin_trap(); /* the tensor lies inside the file */
        touch(t->data, t->nbytes);
        (void)ggml_type_name(t->type);
        (void)ggml_row_bytes(t->type, t->ne[0]);
    }
    gguf_tensor_find(f, "token_embd.weight");
    tok_vocab *v = tok_vocab_load(f, err, sizeof err); /* the vocabulary tables are metadata too */
    if (v) {
        int32_t ids[64];
        char piece[64];
        static const char text[] = "Hello world <s> \xE2\x96\x81x\xff";
        int n = tok_encode(v, text, sizeof text - 1, 1, 1, ids, 64);
        for (int i = 0; i < n && i < 64; i++) {
            if (ids[i] < 0 || ids[i] >= tok_n_vocab(v)) __builtin_trap();
            tok_piece(v, ids[i], piece, sizeof piece);
        }
        tok_vocab_free(v);
    }
    gguf_close(f);
    return 0;
}
