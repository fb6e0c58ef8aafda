/* gguf.h - read-only access to GGUF v3 files (llama.cpp's model format).
 *
 * gguf_open() maps the file, validates every count, length, type, offset and
 * alignment against the file size, and builds a key/value table and a tensor
 * table that point into the mapping. Nothing is trusted: a truncated or
 * hostile file yields an error message naming the file and the problem.
 */
#ifndef ILPD_GGUF_H
#define ILPD_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/quant.h"

/* GGUF metadata value types. */
typedef enum {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_value_type;

#define GGUF_MAX_DIMS 4

/* A string inside the mapping: not NUL-terminated. */
typedef struct {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct {
    gguf_str key;
    gguf_value_type type;
    gguf_value_type arr_type; /* element type when type == GGUF_TYPE_ARRAY */
    uint64_t arr_len;         /* element count when type == GGUF_TYPE_ARRAY */
    const uint8_t *data;      /* the value (or the first array element) in the mapping */
    gguf_str *strs;           /* string arrays: every element, indexed once at open */
} gguf_kv;

typedef struct {
    gguf_str name;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the fastest-varying (row width) */
    ggml_type type;
    uint64_t offset;            /* relative to the data section */
    uint64_t nbytes;
    const void *data;           /* into the mapping */
} gguf_tensor;

typedef struct {
    char *path;
    const uint8_t *map;
    size_t map_size;
    int owns_map;               /* 1 when gguf_open mapped the file itself */
    uint32_t version;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;
} gguf_file;

/* Opens and validates PATH. Returns a new gguf_file the caller frees with
 * gguf_close(), or NULL with a message "PATH: problem" written to err. */
gguf_file *gguf_open(const char *path, char *err, size_t errlen);
/* Same, for a buffer the caller owns and keeps alive (used by the fuzzer). */
gguf_file *gguf_open_buffer(const void *buf, size_t size, const char *name, char *err, size_t errlen);
void gguf_close(gguf_file *f);

/* Metadata lookups. Each returns NULL / the fallback when the key is absent
 * or has another type; integer getters accept any integer type in range. */
const gguf_kv *gguf_kv_find(const gguf_file *f, const char *key);
int gguf_kv_get_i64(const gguf_file *f, const char *key, int64_t *out);  /* 1 found, 0 absent, -1 wrong type */
int gguf_kv_get_f32(const gguf_file *f, const char *key, float *out);
int gguf_kv_get_bool(const gguf_file *f, const char *key, int *out);
/* Returns a newly allocated NUL-terminated copy of a string value, or NULL. */
char *gguf_kv_get_str(const gguf_file *f, const char *key);
/* Array element access; i must be < kv->arr_len. */
gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i);
double gguf_arr_num(const gguf_kv *kv, uint64_t i);

const gguf_tensor *gguf_tensor_find(const gguf_file *f, const char *name);


#endif
