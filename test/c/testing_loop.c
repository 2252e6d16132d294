/*
 * testing_loop.c - `klua_testing.loop()` for the specs: the event loop's
 * deferred work, driven from Lua.
 *
 * loop:defer(tag) defers work that appends tag to the loop's log when it
 * runs (the tag "stop" also stops the loop) and returns its id;
 * loop:cancel_when_run(id, other) makes work id cancel work other when it
 * runs; loop:cancel(id) cancels; loop:run() runs the loop until it stops
 * and returns the log as an array of tags.
 */
#include <lauxlib.h>
#include <string.h>

#include "base/loop.h"
#include "testing.h"

#define LOOP_MT "klua_testing.loop"

/* A userdata whose uservalue is its tag, kept alive in the loop's works
 * table for as long as the loop. */
typedef struct work {
    struct tloop *tl;
    uint64_t id, cancels;
} work;

typedef struct tloop {
    kl_loop *loop;
    lua_State *L;
    int log_ref;   /* the array of tags run so far */
    int works_ref; /* every work made, kept for as long as the loop */
} tloop;

static tloop *check_loop(lua_State *L) {
    tloop *tl = luaL_checkudata(L, 1, LOOP_MT);
    luaL_argcheck(L, tl->loop != NULL, 1, "loop already freed");
    return tl;
}

static void no_transfers(kl_loop *loop, CURL *easy, CURLcode result) {
    (void)loop;
    (void)easy;
    (void)result;
}

static void run_work(kl_loop *loop, void *ud) {
    work *w = ud;
    lua_State *L = w->tl->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, w->tl->log_ref);
    lua_rawgeti(L, LUA_REGISTRYINDEX, w->tl->works_ref);
    lua_rawgeti(L, -1, (lua_Integer)w->id);
    lua_getiuservalue(L, -1, 1);
    lua_replace(L, -3);
    lua_pop(L, 1);
    const char *tag = lua_tostring(L, -1);
    if (tag && !strcmp(tag, "stop")) kl_loop_stop(loop);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
    lua_pop(L, 1);
    kl_loop_cancel(loop, w->cancels);
}

/* loop:defer(tag) -> id */
static int l_defer(lua_State *L) {
    tloop *tl = check_loop(L);
    luaL_checkstring(L, 2);
    work *w = lua_newuserdatauv(L, sizeof *w, 1);
    w->tl = tl;
    lua_pushvalue(L, 2);
    lua_setiuservalue(L, -2, 1);
    w->id = kl_loop_defer(tl->loop, run_work, w);
    if (!w->id) return luaL_error(L, "out of memory");
    lua_rawgeti(L, LUA_REGISTRYINDEX, tl->works_ref);
    lua_pushvalue(L, -2);
    lua_rawseti(L, -2, (lua_Integer)w->id);
    lua_pop(L, 2);
    lua_pushinteger(L, (lua_Integer)w->id);
    return 1;
}

/* loop:cancel_when_run(id, other) */
static int l_cancel_when_run(lua_State *L) {
    tloop *tl = check_loop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, tl->works_ref);
    lua_rawgeti(L, -1, luaL_checkinteger(L, 2));
    work *w = lua_touserdata(L, -1);
    luaL_argcheck(L, w != NULL, 2, "no such work");
    w->cancels = (uint64_t)luaL_checkinteger(L, 3);
    return 0;
}

/* loop:cancel(id) */
static int l_cancel(lua_State *L) {
    kl_loop_cancel(check_loop(L)->loop, (uint64_t)luaL_checkinteger(L, 2));
    return 0;
}

/* loop:run() -> the tags of the work that ran, in order */
static int l_run(lua_State *L) {
    tloop *tl = check_loop(L);
    tl->L = L;
    kl_loop_run(tl->loop);
    lua_rawgeti(L, LUA_REGISTRYINDEX, tl->log_ref);
    return 1;
}

static int l_gc(lua_State *L) {
    tloop *tl = luaL_checkudata(L, 1, LOOP_MT);
    kl_loop_free(tl->loop);
    tl->loop = NULL;
    luaL_unref(L, LUA_REGISTRYINDEX, tl->log_ref);
    luaL_unref(L, LUA_REGISTRYINDEX, tl->works_ref);
    return 0;
}

static int l_loop(lua_State *L) {
    tloop *tl = lua_newuserdatauv(L, sizeof *tl, 0);
    tl->loop = kl_loop_new(no_transfers);
    if (!tl->loop) return luaL_error(L, "cannot make a loop");
    lua_newtable(L);
    tl->log_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_newtable(L);
    tl->works_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    luaL_setmetatable(L, LOOP_MT);
    return 1;
}

void kl_testing_open_loop(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"defer", l_defer}, {"cancel", l_cancel}, {"cancel_when_run", l_cancel_when_run}, {"run", l_run}, {"__gc", l_gc}, {NULL, NULL}};
    if (luaL_newmetatable(L, LOOP_MT)) {
        luaL_setfuncs(L, methods, 0);
        lua_pushvalue(L, -1);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    lua_pushcfunction(L, l_loop);
    lua_setfield(L, -2, "loop");
}
