/*
 * testing_loop.c - `klua_testing.loop()` for the specs: the event loop's
 * deferred work, driven from Lua.
 *
 * loop:defer(tag) defers work that appends tag to the loop's log when it
 * runs (the tag "stop" also stops the loop; the tag "arm" also sets a timer,
 * due at once, that appends "timer": it runs on the next iteration) and
 * returns its id; loop:relay(tag, n, last) defers work that appends tag..1
 * and defers the next step, up to tag..n, which defers work tagged last;
 * loop:cancel_when_run(id, other) makes work id cancel work other when it
 * runs; loop:cancel(id) cancels; loop:run() runs the loop until it stops
 * and returns the log as an array of tags.
 *
 * loop:timers(n, late_every) sets n timers and returns their ids: timer i
 * (from 1) is due in an hour when i is a multiple of late_every, at once
 * otherwise, and logs the number i when it runs; one more timer, due at
 * once and set last, stops the loop. The timers due at once run in the
 * order they were set, the late ones wait among them in the heap until the
 * loop is freed. loop:timer_compares() is kl_loop_timer_compares.
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

static void log_tag(lua_State *L, int log_ref, const char *tag) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, log_ref);
    lua_pushstring(L, tag);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
    lua_pop(L, 1);
}

static void run_timer(kl_loop *loop, void *ud) {
    (void)loop;
    tloop *tl = ud;
    log_tag(tl->L, tl->log_ref, "timer");
}

static void run_work(kl_loop *loop, void *ud) {
    work *w = ud;
    lua_State *L = w->tl->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, w->tl->works_ref);
    lua_rawgeti(L, -1, (lua_Integer)w->id);
    lua_getiuservalue(L, -1, 1); /* stack: works, work, tag */
    const char *tag = lua_tostring(L, -1);
    if (!strcmp(tag, "stop")) kl_loop_stop(loop);
    if (!strcmp(tag, "arm")) kl_loop_after(loop, 0, run_timer, w->tl);
    log_tag(L, w->tl->log_ref, tag);
    lua_pop(L, 3);
    kl_loop_cancel(loop, w->cancels);
}

/* Defers work tagged with the string at index tag; its id. */
static uint64_t defer_work(lua_State *L, tloop *tl, int tag) {
    work *w = lua_newuserdatauv(L, sizeof *w, 1);
    w->tl = tl;
    w->cancels = 0;
    lua_pushvalue(L, tag);
    lua_setiuservalue(L, -2, 1);
    w->id = kl_loop_defer(tl->loop, run_work, w);
    lua_rawgeti(L, LUA_REGISTRYINDEX, tl->works_ref);
    lua_pushvalue(L, -2);
    lua_rawseti(L, -2, (lua_Integer)w->id);
    lua_pop(L, 2);
    return w->id;
}

/* A step of a relay: uservalue 1 its tag, 2 the tag of the work after its
 * last step. */
typedef struct relay {
    tloop *tl;
    int step, steps;
} relay;

static void run_relay(kl_loop *loop, void *ud) {
    relay *r = ud;
    lua_State *L = r->tl->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->tl->works_ref);
    lua_rawgetp(L, -1, r);                   /* stack: works, relay */
    lua_getiuservalue(L, -1, 1);             /* stack: works, relay, tag */
    lua_pushfstring(L, "%s%d", lua_tostring(L, -1), ++r->step);
    log_tag(L, r->tl->log_ref, lua_tostring(L, -1));
    lua_pop(L, 2);                           /* stack: works, relay */
    if (r->step < r->steps) {
        kl_loop_defer(loop, run_relay, r);
    } else {
        lua_getiuservalue(L, -1, 2);         /* stack: works, relay, last */
        defer_work(L, r->tl, lua_gettop(L));
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
}

/* loop:relay(tag, n, last) */
static int l_relay(lua_State *L) {
    tloop *tl = check_loop(L);
    luaL_checkstring(L, 2);
    int steps = (int)luaL_checkinteger(L, 3);
    luaL_checkstring(L, 4);
    luaL_argcheck(L, steps > 0, 3, "at least one step");
    relay *r = lua_newuserdatauv(L, sizeof *r, 2);
    *r = (relay){tl, 0, steps};
    lua_pushvalue(L, 2);
    lua_setiuservalue(L, -2, 1);
    lua_pushvalue(L, 4);
    lua_setiuservalue(L, -2, 2);
    lua_rawgeti(L, LUA_REGISTRYINDEX, tl->works_ref);
    lua_pushvalue(L, -2);
    lua_rawsetp(L, -2, r);
    lua_pop(L, 2);
    kl_loop_defer(tl->loop, run_relay, r);
    return 0;
}

/* The timers of loop:timers, in one userdata kept in the works table. */
typedef struct numbered {
    tloop *tl;
    lua_Integer i;
} numbered;

static void run_numbered(kl_loop *loop, void *ud) {
    (void)loop;
    numbered *t = ud;
    lua_State *L = t->tl->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, t->tl->log_ref);
    lua_pushinteger(L, t->i);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
    lua_pop(L, 1);
}

static void run_stop(kl_loop *loop, void *ud) {
    tloop *tl = ud;
    kl_loop_stop(loop);
    log_tag(tl->L, tl->log_ref, "stop");
}

/* loop:timers(n, late_every) -> ids */
static int l_timers(lua_State *L) {
    tloop *tl = check_loop(L);
    lua_Integer n = luaL_checkinteger(L, 2), late_every = luaL_checkinteger(L, 3);
    luaL_argcheck(L, n > 0, 2, "at least one timer");
    luaL_argcheck(L, late_every > 0, 3, "a positive number");
    numbered *ts = lua_newuserdatauv(L, (size_t)n * sizeof *ts, 0);
    lua_rawgeti(L, LUA_REGISTRYINDEX, tl->works_ref);
    lua_pushvalue(L, -2);
    lua_rawsetp(L, -2, ts);
    lua_pop(L, 2);
    lua_createtable(L, (int)n, 0);
    for (lua_Integer i = 1; i <= n; i++) {
        ts[i - 1] = (numbered){tl, i};
        double delay = i % late_every ? 0 : 3600;
        lua_pushinteger(L, (lua_Integer)kl_loop_after(tl->loop, delay, run_numbered, &ts[i - 1]));
        lua_rawseti(L, -2, i);
    }
    kl_loop_after(tl->loop, 0, run_stop, tl);
    return 1;
}

static int l_timer_compares(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)kl_loop_timer_compares(check_loop(L)->loop));
    return 1;
}

/* loop:defer(tag) -> id */
static int l_defer(lua_State *L) {
    tloop *tl = check_loop(L);
    luaL_checkstring(L, 2);
    lua_pushinteger(L, (lua_Integer)defer_work(L, tl, 2));
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
        {"defer", l_defer}, {"relay", l_relay}, {"cancel", l_cancel}, {"cancel_when_run", l_cancel_when_run}, {"run", l_run},
        {"timers", l_timers}, {"timer_compares", l_timer_compares}, {"__gc", l_gc}, {NULL, NULL}};
    kl_testing_new_class(L, LOOP_MT, methods);
    lua_pushcfunction(L, l_loop);
    lua_setfield(L, -2, "loop");
}
