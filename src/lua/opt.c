/* opt.c - options from a Lua table; see opt.h. */
#include "lua/opt.h"

#include <lauxlib.h>

double kl_opt_number(lua_State *L, int idx, const char *field) {
    lua_getfield(L, idx, field);
    double v = lua_isnil(L, -1) ? 0 : (double)luaL_checknumber(L, -1);
    lua_pop(L, 1);
    return v;
}

const char *kl_opt_string(lua_State *L, int idx, const char *field, const char *what) {
    int t = lua_getfield(L, idx, field);
    if (t == LUA_TNIL) return NULL;
    if (t != LUA_TSTRING && t != LUA_TNUMBER)
        luaL_error(L, "%s option %s must be a string, not a %s", what, field, lua_typename(L, t));
    return lua_tostring(L, -1);
}

int kl_opt_boolean(lua_State *L, int idx, const char *field, const char *what) {
    int t = lua_getfield(L, idx, field);
    if (t != LUA_TNIL && t != LUA_TBOOLEAN)
        luaL_error(L, "%s option %s must be true or false, not a %s", what, field, lua_typename(L, t));
    int v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}
