/*
 * testing_prune.c - `klua_testing.prune(json, paths)` for the specs.
 *
 * Runs kl_prune_obj over json (one object) with the dotted paths of the
 * list paths. Returns the JSON it leaves and whether it rewrote it (true),
 * found nothing to drop (false) or met bytes that are not an object (nil);
 * raises the message kl_prune_new gives for a path it refuses.
 */
#include <lauxlib.h>

#include "testing.h"
#include "wire/prune.h"

#define MAX_PATHS 16

static int t_prune(lua_State *L) {
    size_t len;
    const char *json = luaL_checklstring(L, 1, &len);
    luaL_checktype(L, 2, LUA_TTABLE);
    const char *paths[MAX_PATHS];
    size_t n = (size_t)luaL_len(L, 2);
    luaL_argcheck(L, n <= MAX_PATHS, 2, "at most 16 paths");
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, 2, (lua_Integer)i + 1); /* stack: json, paths, path */
        paths[i] = luaL_checkstring(L, -1);
        lua_pop(L, 1); /* the string stays alive in the paths table */
    }
    char err[256];
    kl_prune *p = kl_prune_new(paths, n, err, sizeof err);
    if (!p) return luaL_error(L, "%s", err);
    kl_obj o = {.blob = kl_blob_new(json, len), .len = len};
    int rc = kl_prune_obj(p, &o);
    kl_prune_free(p);
    lua_pushlstring(L, o.blob->data + o.off, o.len);
    kl_blob_unref(o.blob);
    if (rc < 0) lua_pushnil(L);
    else lua_pushboolean(L, rc);
    return 2;
}

void kl_testing_open_prune(lua_State *L) {
    lua_pushcfunction(L, t_prune);
    lua_setfield(L, -2, "prune");
}
