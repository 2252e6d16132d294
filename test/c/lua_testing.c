/* lua_testing.c - entry point of the spec-only module; see testing.h. */
#include "testing.h"

#include <lauxlib.h>

int luaopen_klua_testing(lua_State *L);

void kl_testing_set_string(lua_State *L, const char *key, const char *value) {
    if (!value) return;
    lua_pushstring(L, value);
    lua_setfield(L, -2, key);
}

void kl_testing_set_number(lua_State *L, const char *key, double value) {
    lua_pushnumber(L, value);
    lua_setfield(L, -2, key);
}

void kl_testing_set_integer(lua_State *L, const char *key, lua_Integer value) {
    lua_pushinteger(L, value);
    lua_setfield(L, -2, key);
}

void kl_testing_set_boolean(lua_State *L, const char *key, int value) {
    lua_pushboolean(L, value);
    lua_setfield(L, -2, key);
}

double kl_testing_opt_number(lua_State *L, const char *key) {
    lua_getfield(L, 1, key);
    double v = luaL_optnumber(L, -1, 0);
    lua_pop(L, 1);
    return v;
}

void kl_testing_new_class(lua_State *L, const char *name, const luaL_Reg *methods) {
    if (luaL_newmetatable(L, name)) {
        luaL_setfuncs(L, methods, 0);
        lua_pushvalue(L, -1);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
}

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
