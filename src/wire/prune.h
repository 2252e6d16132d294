/*
 * prune.h - dropping named members from objects before they are cached.
 *
 * A cache transform, as client-go's SetTransform is most often used: an
 * informer whose handlers never read metadata.managedFields (or
 * status.conditions, or any other member) need not keep their bytes for
 * every cached object. A prune is a set of dotted paths through objects
 * ("metadata.managedFields"); kl_prune_obj rewrites an object's JSON without
 * the members they name, so a view of the result reads like the original
 * minus those members.
 *
 * Paths go through objects only (a member of an array's elements cannot be
 * named) and name members by the strings their names spell: a name written
 * with escapes is unescaped to be compared, since encoding/json's Encoder,
 * which apimachinery's serializer/json writes with, escapes <, > and & in
 * names as \u003c, \u003e and \u0026. A path that would remove what the
 * cache keys on or what a view needs to know the object's type is refused:
 * kind, apiVersion, metadata, metadata.name, metadata.namespace,
 * metadata.resourceVersion, metadata.uid.
 */
#ifndef KLUA_PRUNE_H
#define KLUA_PRUNE_H

#include <stddef.h>

#include "wire/obj.h"

typedef struct kl_prune kl_prune;

/* Compiles n dotted paths. Returns the prune, or NULL with a one-line
 * message in err such as
 *   path "metadata..x" has an empty member name
 *   path "metadata.name" cannot be dropped: the cache keys on it
 */
kl_prune *kl_prune_new(const char *const *paths, size_t n, char *err, size_t errlen);
void kl_prune_free(kl_prune *p);

/* Rewrites o without the members p names: when o's JSON holds at least one,
 * o's blob is replaced by a new one holding only the rewritten object (off
 * 0, exactly as long as the rewrite) and 1 is returned; otherwise o is untouched and 0 is returned. Bytes
 * that are not a JSON object leave o untouched and return -1. */
int kl_prune_obj(kl_prune *p, kl_obj *o);

/* The object s[0, n) without the members p names, in a new blob of its
 * exact size; NULL when s holds none of them or is not a JSON object. For
 * bytes not yet in a blob of their own (a LIST item being read). */
kl_blob *kl_prune_copy(kl_prune *p, const char *s, size_t n);

#endif
