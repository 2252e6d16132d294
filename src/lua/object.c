/*
 * object.c - the klua objects' one shape; see object.h.
 */
#include "lua/object.h"

#include <string.h>

#define PREFIX "klua."

const char KL_OBJECT_SHUTDOWN[] = "is closed: klua is shutting down";

/* The registry's table of the classes' metatables (mt = true), by which
 * core.state tells a klua object from another userdata. */
static const char classes_key = 0;

/* The kind of class tname: "informer" for "klua.informer". */
static const char *kind_of(const char *tname) {
    return strncmp(tname, PREFIX, sizeof PREFIX - 1) == 0 ? tname + sizeof PREFIX - 1 : tname;
}

void kl_object_class(lua_State *L, const char *tname, const luaL_Reg *methods, const luaL_Reg *meta) {
    if (!luaL_newmetatable(L, tname)) { /* stack: mt */
        lua_pop(L, 1);
        return;
    }
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &classes_key) != LUA_TTABLE) { /* stack: mt, classes */
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &classes_key);
    }
    lua_pushvalue(L, -2);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3); /* classes[mt] = true */
    lua_pop(L, 1);     /* stack: mt */
    if (meta) luaL_setfuncs(L, meta, 0);
    lua_newtable(L); /* stack: mt, methods */
    if (methods) luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index"); /* stack: mt */
    lua_pop(L, 1);
}

void *kl_object_new(lua_State *L, const char *tname, size_t size, int nuv, void *state) {
    kl_object *o = lua_newuserdatauv(L, size, 1 + nuv); /* stack: obj */
    memset(o, 0, size);
    o->state = state;
    lua_newtable(L);
    lua_setiuservalue(L, -2, 1); /* the Lua modules' state table */
    luaL_setmetatable(L, tname);
    return o;
}

void *kl_object_check(lua_State *L, int idx, const char *tname) {
    kl_object *o = luaL_checkudata(L, idx, tname);
    if (!o->state && o->closed) luaL_error(L, "this %s %s", kind_of(tname), o->closed);
    return o->state;
}

void kl_object_close(kl_object *o, const char *why) {
    o->state = NULL;
    o->closed = why;
}

/* Pushes the class name that core's argument at idx names ("klua.informer"
 * for "informer") and its metatable, or nil when there is none; returns
 * whether there is one. [-0, +2, e] */
static int push_class(lua_State *L, int idx) {
    return luaL_getmetatable(L, lua_pushfstring(L, PREFIX "%s", luaL_checkstring(L, idx))) != LUA_TNIL;
}

/* core.class(kind [, meta]) -> the methods table of klua.<kind>'s objects,
 * made (as a class of Lua methods) when there is none, with meta's fields
 * (__tostring, ...) set in the metatable. */
static int l_class(lua_State *L) {
    lua_settop(L, 2);
    const char *tname = lua_pushfstring(L, PREFIX "%s", luaL_checkstring(L, 1)); /* stack: kind, meta, tname */
    kl_object_class(L, tname, NULL, NULL);
    luaL_getmetatable(L, tname); /* stack: kind, meta, tname, mt */
    if (!lua_isnil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        for (lua_pushnil(L); lua_next(L, 2);) { /* stack: ..., mt, key, value */
            lua_pushvalue(L, -2);
            lua_insert(L, -2);
            lua_rawset(L, -4); /* mt[key] = value; stack: ..., mt, key, for lua_next */
        }
    }
    lua_getfield(L, -1, "__index"); /* stack: kind, meta, tname, mt, methods */
    return 1;
}

/* core.new(kind, state) -> a new object of the class core.class made, its
 * Lua state the table state. Nothing closes it: its state is all Lua's. */
static int l_new(lua_State *L) {
    const char *tname = lua_pushfstring(L, PREFIX "%s", luaL_checkstring(L, 1)); /* stack: kind, state, tname */
    luaL_checktype(L, 2, LUA_TTABLE);
    if (luaL_getmetatable(L, tname) == LUA_TNIL) return luaL_error(L, "no klua object is a %s", lua_tostring(L, 1));
    lua_pop(L, 1);
    kl_object *o = kl_object_new(L, tname, sizeof *o, 0, NULL); /* stack: kind, state, tname, obj */
    o->state = o; /* open for good */
    lua_pushvalue(L, 2);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

/* core.state(obj) -> the table the Lua modules keep obj's state in; raises
 * for anything but a klua object. */
static int l_state(lua_State *L) {
    lua_settop(L, 1);
    if (lua_type(L, 1) == LUA_TUSERDATA && lua_rawgetp(L, LUA_REGISTRYINDEX, &classes_key) == LUA_TTABLE &&
        lua_getmetatable(L, 1)) { /* stack: obj, classes, mt */
        if (lua_rawget(L, -2) == LUA_TBOOLEAN) {
            lua_getiuservalue(L, 1, 1); /* stack: obj, classes, true, state */
            return 1;
        }
    }
    return luaL_typeerror(L, 1, "klua object");
}

/* core.is(v, kind) -> whether v is an object of klua.<kind> (closed or not). */
static int l_is(lua_State *L) {
    lua_pushboolean(L, lua_type(L, 1) == LUA_TUSERDATA && push_class(L, 2) &&
                           luaL_testudata(L, 1, lua_tostring(L, -2)) != NULL);
    return 1;
}

void kl_object_set_functions(lua_State *L) {
    static const luaL_Reg fns[] = {{"class", l_class}, {"new", l_new}, {"state", l_state}, {"is", l_is}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
