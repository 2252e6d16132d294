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

void kl_testing_add_transition(lua_State *L, const char *from, const char *event_key, const char *event,
                               const char *to, const char *then) {
    lua_createtable(L, 0, 4);
    kl_testing_set_string(L, "from", from);
    kl_testing_set_string(L, event_key, event);
    kl_testing_set_string(L, "to", to);
    kl_testing_set_string(L, "then", then);
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
}

double kl_testing_opt_number(lua_State *L, const char *key) {
    lua_getfield(L, 1, key);
    double v = luaL_optnumber(L, -1, 0);
    lua_pop(L, 1);
    return v;
}

void **kl_testing_box(lua_State *L, const char *mt) {
    void **slot = lua_newuserdatauv(L, sizeof *slot, 0);
    *slot = NULL;
    luaL_setmetatable(L, mt);
    return slot;
}

void *kl_testing_unbox(lua_State *L, int arg, const char *mt, const char *what) {
    void **slot = luaL_checkudata(L, arg, mt);
    if (!*slot) luaL_error(L, "bad argument #%d (%s already freed)", arg, what);
    return *slot;
}

void *kl_testing_take(lua_State *L, const char *mt) {
    void **slot = luaL_checkudata(L, 1, mt);
    void *p = *slot;
    *slot = NULL;
    return p;
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
    kl_testing_open_store(L);
    kl_testing_open_reflector(L);
    kl_testing_open_runtime(L);
    kl_testing_open_collector(L);
    kl_testing_open_media(L);
    return 1;
}
