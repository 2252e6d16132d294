/*
 * lua_transform.h - a script's function as an informer's cache transform
 * (klua.informer{transform = function(obj) ... end}), as client-go's
 * SharedIndexInformer.SetTransform.
 *
 * The function gets each listed and watched object, deleted ones too, as a
 * read-only view before it is cached and before any handler sees it, and
 * returns what to cache: the view itself (cached as it came, no copy) or a
 * table (klua.copy(obj) changed), which is encoded to JSON once and cached
 * as those bytes, so views, klua.copy, indexes and inf:get read it like any
 * object. It runs as a task (lua/task.h) of its own per object: under the
 * instruction budget and the memory cap, stopped by a signal like any
 * handler, and it cannot wait (klua.sleep, requests), since the cache
 * cannot hold the stream for it.
 *
 * The object is refused (the informer relists after a backoff, see
 * cache/informer.h) when the function raises, runs past its budget, returns
 * something else than a view or a table, or a table whose kind, apiVersion,
 * metadata.name, .namespace, .resourceVersion or .uid differ from the
 * object's: the cache keys on them. The error is logged as a failed task
 * named "transform of <informer>".
 */
#ifndef KLUA_LUA_TRANSFORM_H
#define KLUA_LUA_TRANSFORM_H

#include <lua.h>

#include "cache/informer.h"

typedef struct kl_lua_transform kl_lua_transform;

/* The transform of the informer option `transform` of the table at idx, a
 * function, for the informer named informer; NULL when the option is nil.
 * Raises when it is something else, before anything is made. [-0, +0, e] */
kl_lua_transform *kl_lua_transform_opt(lua_State *L, int idx, const char *informer);

/* Makes t inf's transform; inf owns it from then on. */
void kl_lua_transform_attach(kl_lua_transform *t, kl_informer *inf);

#endif
