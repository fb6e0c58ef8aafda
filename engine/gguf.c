/* gguf.c - GGUF v3 parser with bounds checks on every read. */
#include "engine/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
/* Limits that no real model reaches; they keep hostile counts from
 * turning into huge allocations before the bounds checks can fail. */
#define GGUF_MAX_KEY_LEN 65535u
#define GGUF_MAX_TENSORS 1000000u

typedef struct {
    const uint8_t *p;
    size_t size, pos;
    char *err;
    size_t errlen;
    const char *name;
} reader;

static int fail(reader *r, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->errlen, "%s: %s", r->name, msg);
    return -1;
}

static int need(reader *r, uint64_t n, const char *what) {
    if (n > r->size - r->pos)
        return fail(r, "truncated file: %s at offset %zu needs %llu bytes, %zu left", what, r->pos,
                    (unsigned long long)n, r->size - r->pos);
    return 0;
}

static int read_u32(reader *r, uint32_t *v, const char *what) {
    if (need(r, 4, what)) return -1;
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int read_u64(reader *r, uint64_t *v, const char *what) {
    if (need(r, 8, what)) return -1;
    memcpy(v, r->p + r->pos, 8);
    r->pos += 8;
    return 0;
}

static int read_str(reader *r, gguf_str *s, const char *what) {
    uint64_t len;
    if (read_u64(r, &len, what)) return -1;
    if (need(r, len, what)) return -1;
    s->ptr = (const char *)r->p + r->pos;
    s->len = len;
    r->pos += len;
    return 0;
}

static size_t scalar_size(gguf_value_type t) {
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* Reads one key/value pair; string arrays get an index of their elements. */
static int read_kv(reader *r, gguf_kv *kv) {
    uint32_t type;
    if (read_str(r, &kv->key, "metadata key")) return -1;
    if (kv->key.len == 0 || kv->key.len > GGUF_MAX_KEY_LEN)
        return fail(r, "metadata key of invalid length %llu at offset %zu",
                    (unsigned long long)kv->key.len, r->pos);
    if (read_u32(r, &type, "metadata type")) return -1;
    if (type >= GGUF_TYPE_COUNT)
        return fail(r, "metadata '%.*s' has unknown type %u", (int)kv->key.len, kv->key.ptr, type);
    kv->type = (gguf_value_type)type;
    kv->data = r->p + r->pos;
    if (kv->type == GGUF_TYPE_STRING) {
        gguf_str s;
        return read_str(r, &s, "metadata string");
    }
    if (kv->type != GGUF_TYPE_ARRAY) return need(r, scalar_size(kv->type), "metadata value") ? -1 : (r->pos += scalar_size(kv->type), 0);

    uint32_t at;
    if (read_u32(r, &at, "array type") || read_u64(r, &kv->arr_len, "array length")) return -1;
    if (at >= GGUF_TYPE_COUNT || at == GGUF_TYPE_ARRAY)
        return fail(r, "metadata '%.*s' is an array of invalid type %u", (int)kv->key.len, kv->key.ptr, at);
    kv->arr_type = (gguf_value_type)at;
    kv->data = r->p + r->pos;
    if (kv->arr_type != GGUF_TYPE_STRING) {
        size_t es = scalar_size(kv->arr_type);
        if (kv->arr_len > (r->size - r->pos) / es)
            return fail(r, "metadata '%.*s': array of %llu elements runs past the end of the file",
                        (int)kv->key.len, kv->key.ptr, (unsigned long long)kv->arr_len);
        r->pos += kv->arr_len * es;
        return 0;
    }
    /* Every string needs at least its 8-byte length, which bounds the count. */
    if (kv->arr_len > (r->size - r->pos) / 8)
        return fail(r, "metadata '%.*s': array of %llu strings runs past the end of the file",
                    (int)kv->key.len, kv->key.ptr, (unsigned long long)kv->arr_len);
    kv->strs = malloc((kv->arr_len ? kv->arr_len : 1) * sizeof *kv->strs);
    if (!kv->strs) return fail(r, "out of memory indexing '%.*s'", (int)kv->key.len, kv->key.ptr);
    for (uint64_t i = 0; i < kv->arr_len; i++)
        if (read_str(r, &kv->strs[i], "array string")) return -1;
    return 0;
}

static int read_tensor_info(reader *r, gguf_tensor *t) {
    uint32_t n_dims, type;
    if (read_str(r, &t->name, "tensor name")) return -1;
    if (t->name.len == 0 || t->name.len > GGUF_MAX_KEY_LEN)
        return fail(r, "tensor name of invalid length %llu", (unsigned long long)t->name.len);
    if (read_u32(r, &n_dims, "tensor dimension count")) return -1;
    if (n_dims == 0 || n_dims > GGUF_MAX_DIMS)
        return fail(r, "tensor '%.*s' has %u dimensions (1..%d allowed)", (int)t->name.len, t->name.ptr, n_dims,
                    GGUF_MAX_DIMS);
    t->n_dims = n_dims;
    uint64_t nel = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d < n_dims && read_u64(r, &t->ne[d], "tensor shape")) return -1;
        if (t->ne[d] == 0 || t->ne[d] > (1ull << 40) || nel > (1ull << 42) / t->ne[d])
            return fail(r, "tensor '%.*s' has an absurd shape (dimension %u = %llu)", (int)t->name.len, t->name.ptr,
                        d, (unsigned long long)t->ne[d]);
        nel *= t->ne[d];
    }
    if (read_u32(r, &type, "tensor type") || read_u64(r, &t->offset, "tensor offset")) return -1;
    t->type = (ggml_type)type;
    if (!ggml_type_block_size(t->type))
        return fail(r, "tensor '%.*s' has unsupported type %u", (int)t->name.len, t->name.ptr, type);
    size_t row = ggml_row_bytes(t->type, t->ne[0]);
    if (!row)
        return fail(r, "tensor '%.*s': row width %llu is not a multiple of the %s block size %d", (int)t->name.len,
                    t->name.ptr, (unsigned long long)t->ne[0], ggml_type_name(t->type), ggml_type_block_size(t->type));
    t->nbytes = row * (nel / t->ne[0]);
    return 0;
}

static void free_tables(gguf_file *f) {
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++) free(f->kv[i].strs);
    free(f->kv);
    free(f->tensors);
    f->kv = NULL;
    f->tensors = NULL;
}

static int name_cmp(const void *a, const void *b) {
    const gguf_str *x = &(*(const gguf_tensor *const *)a)->name, *y = &(*(const gguf_tensor *const *)b)->name;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return memcmp(x->ptr, y->ptr, x->len);
}

/* Fails on two tensors of the same name: sorted, then neighbours compared,
 * so that a file with a million tensors is checked in a blink rather than
 * in a trillion comparisons. Returns 0 or -1. */
static int check_unique_names(reader *r, const gguf_file *f) {
    if (f->n_tensors < 2) return 0;
    const gguf_tensor **by_name = malloc(f->n_tensors * sizeof *by_name);
    if (!by_name) return fail(r, "out of memory");
    for (uint64_t i = 0; i < f->n_tensors; i++) by_name[i] = &f->tensors[i];
    qsort(by_name, f->n_tensors, sizeof *by_name, name_cmp);
    for (uint64_t i = 1; i < f->n_tensors; i++)
        if (!name_cmp(&by_name[i - 1], &by_name[i])) {
            const gguf_str *n = &by_name[i]->name;
            free(by_name);
            return fail(r, "duplicate tensor '%.*s'", (int)n->len, n->ptr);
        }
    free(by_name);
    return 0;
}

/* Parses the mapping f->map of f->map_size bytes into f. */
static int parse(gguf_file *f, char *err, size_t errlen) {
    reader r = {.p = f->map, .size = f->map_size, .err = err, .errlen = errlen, .name = f->path};
    uint32_t magic;
    if (read_u32(&r, &magic, "magic")) return -1;
    if (magic != GGUF_MAGIC) return fail(&r, "not a GGUF file (bad magic 0x%08x)", magic);
    if (read_u32(&r, &f->version, "version")) return -1;
    if (f->version != 3 && f->version != 2)
        return fail(&r, "unsupported GGUF version %u (2 and 3 are supported)", f->version);
    if (read_u64(&r, &f->n_tensors, "tensor count") || read_u64(&r, &f->n_kv, "metadata count")) return -1;
    /* A kv needs at least 12 bytes, a tensor info at least 28. */
    if (f->n_kv > r.size / 12) return fail(&r, "absurd metadata count %llu", (unsigned long long)f->n_kv);
    if (f->n_tensors > GGUF_MAX_TENSORS || f->n_tensors > r.size / 28)
        return fail(&r, "absurd tensor count %llu", (unsigned long long)f->n_tensors);

    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    if (!f->kv || !f->tensors) return fail(&r, "out of memory");
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (read_kv(&r, &f->kv[i])) return -1;

    f->alignment = 32;
    const gguf_kv *al = gguf_kv_find(f, "general.alignment");
    if (al) {
        int64_t a;
        if (gguf_kv_get_i64(f, "general.alignment", &a) != 1 || a <= 0 || a > 65536 || (a & (a - 1)))
            return fail(&r, "general.alignment must be a power of two up to 65536");
        f->alignment = (uint64_t)a;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (read_tensor_info(&r, &f->tensors[i])) return -1;

    f->data_offset = (r.pos + f->alignment - 1) / f->alignment * f->alignment;
    if (f->n_tensors && f->data_offset > r.size) return fail(&r, "truncated file: no tensor data section");
    uint64_t data_size = r.size - (f->n_tensors ? f->data_offset : r.size);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment)
            return fail(&r, "tensor '%.*s' offset %llu is not aligned to %llu", (int)t->name.len, t->name.ptr,
                        (unsigned long long)t->offset, (unsigned long long)f->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return fail(&r, "tensor '%.*s' (offset %llu, %llu bytes) lies past the end of the file", (int)t->name.len,
                        t->name.ptr, (unsigned long long)t->offset, (unsigned long long)t->nbytes);
        t->data = f->map + f->data_offset + t->offset;
    }
    return check_unique_names(&r, f);
}

static gguf_file *file_new(const char *name, char *err, size_t errlen) {
    gguf_file *f = calloc(1, sizeof *f);
    if (f) f->path = strdup(name);
    if (!f || !f->path) {
        snprintf(err, errlen, "%s: out of memory", name);
        free(f);
        return NULL;
    }
    return f;
}

gguf_file *gguf_open_buffer(const void *buf, size_t size, const char *name, char *err, size_t errlen) {
    gguf_file *f = file_new(name, err, errlen);
    if (!f) return NULL;
    f->map = buf;
    f->map_size = size;
    if (parse(f, err, errlen)) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

gguf_file *gguf_open(const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size < 24) {
        snprintf(err, errlen, "%s: truncated file: %lld bytes is too small for a GGUF header", path,
                 (long long)st.st_size);
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: mmap failed: %s", path, strerror(errno));
        return NULL;
    }
    gguf_file *f = file_new(path, err, errlen);
    if (!f) {
        munmap(map, (size_t)st.st_size);
        return NULL;
    }
    f->map = map;
    f->map_size = (size_t)st.st_size;
    f->owns_map = 1;
    if (parse(f, err, errlen)) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    free_tables(f);
    if (f->owns_map) munmap((void *)f->map, f->map_size);
    free(f->path);
    free(f);
}

const gguf_kv *gguf_kv_find(const gguf_file *f, const char *key) {
    size_t n = strlen(key);
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key.len == n && !memcmp(f->kv[i].key.ptr, key, n)) return &f->kv[i];
    return NULL;
}

static int scalar_as_double(gguf_value_type t, const uint8_t *p, double *out) {
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32; float f32;
            uint64_t u64; int64_t i64; double f64; } v;
    size_t sz = scalar_size(t);
    if (!sz) return -1;
    memcpy(&v, p, sz);
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_BOOL: *out = v.u8; break;
    case GGUF_TYPE_INT8: *out = v.i8; break;
    case GGUF_TYPE_UINT16: *out = v.u16; break;
    case GGUF_TYPE_INT16: *out = v.i16; break;
    case GGUF_TYPE_UINT32: *out = v.u32; break;
    case GGUF_TYPE_INT32: *out = v.i32; break;
    case GGUF_TYPE_FLOAT32: *out = v.f32; break;
    case GGUF_TYPE_UINT64: *out = (double)v.u64; break;
    case GGUF_TYPE_INT64: *out = (double)v.i64; break;
    case GGUF_TYPE_FLOAT64: *out = v.f64; break;
    default: return -1;
    }
    return 0;
}

int gguf_kv_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_kv_find(f, key);
    if (!kv) return 0;
    switch (kv->type) {
    case GGUF_TYPE_UINT64: {
        uint64_t u;
        memcpy(&u, kv->data, 8);
        if (u > INT64_MAX) return -1;
        *out = (int64_t)u;
        return 1;
    }
    case GGUF_TYPE_INT64: memcpy(out, kv->data, 8); return 1;
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16:
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_BOOL: {
        double d;
        scalar_as_double(kv->type, kv->data, &d);
        *out = (int64_t)d;
        return 1;
    }
    default: return -1;
    }
}

int gguf_kv_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gguf_kv_find(f, key);
    double d;
    if (!kv) return 0;
    if (kv->type == GGUF_TYPE_ARRAY || kv->type == GGUF_TYPE_STRING || scalar_as_double(kv->type, kv->data, &d))
        return -1;
    *out = (float)d;
    return 1;
}

int gguf_kv_get_bool(const gguf_file *f, const char *key, int *out) {
    int64_t v;
    int rc = gguf_kv_get_i64(f, key, &v);
    if (rc == 1) *out = v != 0;
    return rc;
}

char *gguf_kv_get_str(const gguf_file *f, const char *key) {
    const gguf_kv *kv = gguf_kv_find(f, key);
    if (!kv || kv->type != GGUF_TYPE_STRING) return NULL;
    uint64_t len;
    memcpy(&len, kv->data, 8);
    char *s = malloc(len + 1);
    if (!s) return NULL;
    memcpy(s, kv->data + 8, len);
    s[len] = 0;
    return s;
}

gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i) {
    return kv->strs[i];
}

double gguf_arr_num(const gguf_kv *kv, uint64_t i) {
    double d = 0;
    scalar_as_double(kv->arr_type, kv->data + i * scalar_size(kv->arr_type), &d);
    return d;
}

const gguf_tensor *gguf_tensor_find(const gguf_file *f, const char *name) {
    size_t n = strlen(name);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].name.len == n && !memcmp(f->tensors[i].name.ptr, name, n)) return &f->tensors[i];
    return NULL;
}
