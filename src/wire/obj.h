/*
 * obj.h - one Kubernetes object as the pipeline carries it.
 *
 * The object stays in the JSON bytes it arrived in; only its identity is
 * decoded up front. The decoder produces these, the store keeps them, and a
 * Lua view reads the bytes lazily.
 */
#ifndef KLUA_OBJ_H
#define KLUA_OBJ_H

#include "base/blob.h"

typedef struct kl_obj {
    kl_blob *blob;   /* one reference, owned by whoever holds the kl_obj */
    size_t off, len; /* the object's JSON is blob->data[off, off+len) */
    /* The identity, "ns\0name\0rv\0" from ns on: in one allocation of its
     * own (one malloc per object, not three: objects arrive by the hundred
     * thousand), or, once kl_obj_settle moved it, in blob's padding. */
    char *ns;        /* metadata.namespace; "" for cluster-scoped objects */
    char *name;      /* metadata.name */
    char *rv;        /* metadata.resourceVersion; "" when absent */
} kl_obj;

/* Releases what o owns and zeroes it. */
void kl_obj_clear(kl_obj *o);
/* Sets o's identity from three strings of the given lengths (NULL for ""). */
void kl_obj_set_identity(kl_obj *o, const char *ns, size_t nsn, const char *name, size_t namen,
                         const char *rv, size_t rvn);
/* Moves o's identity into its blob's padding, behind the NUL that ends the
 * bytes, and frees the allocation it had: 48 bytes an object of the bench's
 * Pods (docs/architecture.md, "What a cached object costs"). The padding is
 * there for simdjson, which reads it but whose parse does not depend on what
 * it holds. Only when o holds the blob's one reference (nothing else may
 * claim its padding) and the identity fits; otherwise nothing changes. Once
 * settled, o->blob must not be swapped for another blob: the store settles
 * what it stores, after transforms and prunes have run. */
void kl_obj_settle(kl_obj *o);
/* Writes the cache key, "ns/name" or "name", into buf; returns its length
 * (truncated like snprintf). */
size_t kl_obj_key(const kl_obj *o, char *buf, size_t size);

#endif
