/* embedded.c - `require` for klua's compiled-in Lua library; see embedded.h. */
#include "lua/embedded.h"

#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

/* package.searchers entry: the loader of a compiled-in module and its path. */
static int search_embedded(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    for (const kl_embedded *e = kl_embedded_lua; e->module; e++) {
        if (strcmp(e->module, name) != 0) continue;
        char chunk[160];
        snprintf(chunk, sizeof chunk, "@%s", e->path);
        if (luaL_loadbuffer(L, e->src, e->len, chunk) != LUA_OK) return lua_error(L);
        lua_pushstring(L, e->path);
        return 2;
    }
    lua_pushfstring(L, "\n\tno module '%s' built into klua", name);
    return 1;
}

void kl_embedded_add_searcher(lua_State *L) {
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "searchers");
    lua_Integer n = (lua_Integer)luaL_len(L, -1);
    for (lua_Integer i = n; i >= 2; i--) {
        lua_rawgeti(L, -1, i);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushcfunction(L, search_embedded);
    lua_rawseti(L, -2, 2);
    lua_pop(L, 2);
}
