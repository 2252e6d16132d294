/*
 * blob.h - reference-counted immutable byte buffers.
 *
 * Object bytes are shared between the stages without copying: the framer
 * produces a blob per frame, the store keeps a reference per cached object,
 * and a Lua view keeps a reference for as long as a script holds it. The
 * buffer is NUL-terminated and padded so that SIMD parsers may read past
 * the end safely.
 */
#ifndef KLUA_BLOB_H
#define KLUA_BLOB_H

#include <stddef.h>

/* Bytes a parser may read past len; matches simdjson's SIMDJSON_PADDING. */
#define KL_BLOB_PADDING 64

typedef struct kl_blob {
    size_t refs;
    size_t len;
    char data[]; /* len bytes, then KL_BLOB_PADDING zero bytes */
} kl_blob;

/* A new blob holding a copy of data[0..len), with one reference. */
kl_blob *kl_blob_new(const char *data, size_t len);
/* A blob of len uninitialised bytes (padding zeroed), for callers that fill it. */
kl_blob *kl_blob_alloc(size_t len);
kl_blob *kl_blob_ref(kl_blob *b);
/* Drops one reference; frees at zero. NULL is ignored. */
void kl_blob_unref(kl_blob *b);

#endif
