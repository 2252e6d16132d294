/* testing_media.c - kl_media_of for spec/unit/media_spec.lua. */
#include "testing.h"

#include <lauxlib.h>

#include "wire/media.h"

/* media_of(content_type or nil) -> the type klua reads it as, its framing
 * and decoding names, or nil when klua does not read it */
static int t_media_of(lua_State *L) {
    const kl_media *m = kl_media_of(luaL_optstring(L, 1, NULL));
    if (!m) return 0;
    lua_pushstring(L, m->type);
    static const char *const framing[] = {"none", "json values", "cbor sequence"};
    static const char *const decoding[] = {"none", "json", "cbor"};
    lua_pushstring(L, framing[m->framing]);
    lua_pushstring(L, decoding[m->decoding]);
    return 3;
}

void kl_testing_open_media(lua_State *L) {
    lua_pushcfunction(L, t_media_of);
    lua_setfield(L, -2, "media_of");
}
