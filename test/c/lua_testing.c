/* lua_testing.c - entry point of the spec-only module; see testing.h. */
#include "testing.h"

#include <lauxlib.h>

int luaopen_klua_testing(lua_State *L);

int luaopen_klua_testing(lua_State *L) {
    lua_newtable(L);
    kl_testing_open_framer(L);
    kl_testing_open_config(L);
    kl_testing_open_queue(L);
    kl_testing_open_json(L);
    kl_testing_open_xalloc(L);
    kl_testing_open_loop(L);
    kl_testing_open_prune(L);
    kl_testing_open_reflector(L);
    kl_testing_open_runtime(L);
    kl_testing_open_media(L);
    return 1;
}
