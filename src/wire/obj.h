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
    /* The identity, in one allocation that starts at ns (one malloc per
     * object, not three: objects arrive by the hundred thousand). */
    char *ns;        /* metadata.namespace; "" for cluster-scoped objects */
    char *name;      /* metadata.name */
    char *rv;        /* metadata.resourceVersion; "" when absent */
} kl_obj;

/* Releases what o owns and zeroes it. */
void kl_obj_clear(kl_obj *o);
/* Sets o's identity from three strings of the given lengths (NULL for ""). */
void kl_obj_set_identity(kl_obj *o, const char *ns, size_t nsn, const char *name, size_t namen,
                         const char *rv, size_t rvn);
/* Writes the cache key, "ns/name" or "name", into buf; returns its length
 * (truncated like snprintf). */
size_t kl_obj_key(const kl_obj *o, char *buf, size_t size);

#endif
