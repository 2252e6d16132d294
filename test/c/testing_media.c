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
    switch (m->framing) {
    case KL_FRAMING_JSON_VALUES: lua_pushstring(L, "json values"); break;
    }
    switch (m->decoding) {
    case KL_DECODING_JSON: lua_pushstring(L, "json"); break;
    }
    return 3;
}

void kl_testing_open_media(lua_State *L) {
    lua_pushcfunction(L, t_media_of);
    lua_setfield(L, -2, "media_of");
}
