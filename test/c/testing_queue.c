/*
 * testing_queue.c - `klua_testing.queue(opts)`, `klua_testing.hmap()` and
 * `klua_testing.ring()` for the specs.
 *
 * queue(opts) returns a work queue whose methods mirror kl_queue_*; every
 * method that needs the time takes it as its last argument, so specs drive
 * a fake clock. hmap() returns a string map whose values are integers;
 * ring() a FIFO of integers that tells its array's capacity.
 */
#include <lauxlib.h>
#include <stdint.h>

#include "base/hmap.h"
#include "base/ring.h"
#include "cache/queue.h"
#include "testing.h"

#define QUEUE_MT "klua_testing.queue"
#define HMAP_MT "klua_testing.hmap"
#define RING_MT "klua_testing.ring"

/* ---- queue ---- */

static kl_queue *check_queue(lua_State *L) { return kl_testing_unbox(L, 1, QUEUE_MT, "queue"); }

/* The optional priority at arg, KL_QUEUE_NORMAL when absent. */
static int opt_priority(lua_State *L, int arg) { return (int)luaL_optinteger(L, arg, KL_QUEUE_NORMAL); }

/* q:add(key, now [, priority]) */
static int q_add(lua_State *L) {
    kl_queue *q = check_queue(L);
    kl_queue_add(q, luaL_checkstring(L, 2), opt_priority(L, 4), luaL_checknumber(L, 3));
    return 0;
}

/* q:add_after(key, delay, now [, priority]) */
static int q_add_after(lua_State *L) {
    kl_queue *q = check_queue(L);
    const char *key = luaL_checkstring(L, 2);
    kl_queue_add_after(q, key, luaL_checknumber(L, 3), opt_priority(L, 5), luaL_checknumber(L, 4));
    return 0;
}

/* q:add_rate_limited(key, now [, priority]) */
static int q_add_rate_limited(lua_State *L) {
    kl_queue *q = check_queue(L);
    kl_queue_add_rate_limited(q, luaL_checkstring(L, 2), opt_priority(L, 4), luaL_checknumber(L, 3));
    return 0;
}

/* q:forget(key) */
static int q_forget(lua_State *L) {
    kl_queue_forget(check_queue(L), luaL_checkstring(L, 2));
    return 0;
}

/* q:num_requeues(key) -> integer */
static int q_num_requeues(lua_State *L) {
    lua_pushinteger(L, kl_queue_num_requeues(check_queue(L), luaL_checkstring(L, 2)));
    return 1;
}

/* q:advance(now) -> how many delayed keys fell due */
static int q_advance(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)kl_queue_advance(check_queue(L), luaL_checknumber(L, 2)));
    return 1;
}

/* q:get(now) -> key or nil, shut_down, priority or nil */
static int q_get(lua_State *L) {
    int shut_down, prio;
    const char *key = kl_queue_get(check_queue(L), luaL_checknumber(L, 2), &shut_down, &prio);
    if (key) lua_pushstring(L, key);
    else lua_pushnil(L);
    lua_pushboolean(L, shut_down);
    if (key) lua_pushinteger(L, prio);
    else lua_pushnil(L);
    return 3;
}

/* q:done(key, now) */
static int q_done(lua_State *L) {
    kl_queue *q = check_queue(L);
    kl_queue_done(q, luaL_checkstring(L, 2), luaL_checknumber(L, 3));
    return 0;
}

/* q:next_ready() -> time or nil */
static int q_next_ready(lua_State *L) {
    double t = kl_queue_next_ready(check_queue(L));
    if (t < 0) lua_pushnil(L);
    else lua_pushnumber(L, t);
    return 1;
}

/* q:len() -> keys ready for get */
static int q_len(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)kl_queue_len(check_queue(L)));
    return 1;
}

/* q:shutdown() */
static int q_shutdown(lua_State *L) {
    kl_queue_shutdown(check_queue(L));
    return 0;
}

/* q:shutting_down() -> boolean */
static int q_shutting_down(lua_State *L) {
    lua_pushboolean(L, kl_queue_shutting_down(check_queue(L)));
    return 1;
}

/* Pushes {count=, sum=, max=, buckets={n1, n2, ...}} and stores it as name
 * in the table below it. */
static void set_dist(lua_State *L, const char *name, const kl_queue_dist *d) {
    lua_createtable(L, 0, 4);
    kl_testing_set_integer(L, "count", d->count);
    kl_testing_set_number(L, "sum", d->sum);
    kl_testing_set_number(L, "max", d->max);
    lua_createtable(L, KL_QUEUE_BUCKETS, 0);
    for (int i = 0; i < KL_QUEUE_BUCKETS; i++) {
        lua_pushinteger(L, (lua_Integer)d->buckets[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "buckets");
    lua_setfield(L, -2, name);
}

/* q:stats(now) -> table of kl_queue_stats fields */
static int q_stats(lua_State *L) {
    kl_queue_stats s;
    kl_queue_get_stats(check_queue(L), luaL_checknumber(L, 2), &s);
    lua_createtable(L, 0, 11);
    kl_testing_set_integer(L, "depth", s.depth);
    kl_testing_set_integer(L, "processing", s.processing);
    kl_testing_set_integer(L, "waiting", s.waiting);
    kl_testing_set_integer(L, "failing", s.failing);
    kl_testing_set_integer(L, "adds", s.adds);
    kl_testing_set_integer(L, "retries", s.retries);
    kl_testing_set_number(L, "unfinished", s.unfinished);
    kl_testing_set_number(L, "longest", s.longest);
    kl_testing_set_number(L, "oldest", s.oldest);
    set_dist(L, "wait", &s.wait);
    set_dist(L, "work", &s.work);
    return 1;
}

static int q_gc(lua_State *L) {
    kl_queue_free(kl_testing_take(L, QUEUE_MT));
    return 0;
}

/* queue([{base_delay=, max_delay=, qps=, burst=}]) -> queue */
static int q_new(lua_State *L) {
    kl_queue_opts opts = {0};
    if (!lua_isnoneornil(L, 1)) {
        luaL_checktype(L, 1, LUA_TTABLE);
        opts.base_delay = kl_testing_opt_number(L, "base_delay");
        opts.max_delay = kl_testing_opt_number(L, "max_delay");
        opts.qps = kl_testing_opt_number(L, "qps");
        opts.burst = (int)kl_testing_opt_number(L, "burst");
    }
    void **slot = kl_testing_box(L, QUEUE_MT);
    if (!(*slot = kl_queue_new(&opts))) return luaL_error(L, "queue: out of memory");
    return 1;
}

/* queue_bucket_bounds() -> {upper bound of each histogram bucket} */
static int q_bucket_bounds(lua_State *L) {
    lua_createtable(L, KL_QUEUE_BUCKETS, 0);
    for (int i = 0; i < KL_QUEUE_BUCKETS; i++) {
        lua_pushnumber(L, kl_queue_bucket_bound(i));
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* ---- hmap ---- */

static kl_hmap *check_hmap(lua_State *L) { return kl_testing_unbox(L, 1, HMAP_MT, "map"); }

static void *int_value(lua_Integer v) { return (void *)(intptr_t)v; }

/* m:put(key, integer) -> "added" or "replaced" */
static int m_put(lua_State *L) {
    kl_hmap *m = check_hmap(L);
    int rc = kl_hmap_put(m, luaL_checkstring(L, 2), int_value(luaL_checkinteger(L, 3)));
    if (rc < 0) return luaL_error(L, "hmap: out of memory");
    lua_pushstring(L, rc ? "added" : "replaced");
    return 1;
}

/* m:get(key) -> integer or nil */
static int m_get(lua_State *L) {
    void *v;
    if (kl_hmap_lookup(check_hmap(L), luaL_checkstring(L, 2), NULL, &v))
        lua_pushinteger(L, (lua_Integer)(intptr_t)v);
    else
        lua_pushnil(L);
    return 1;
}

/* m:del(key) -> the removed integer, or nil when key was absent */
static int m_del(lua_State *L) {
    void *v;
    if (kl_hmap_del(check_hmap(L), luaL_checkstring(L, 2), &v))
        lua_pushinteger(L, (lua_Integer)(intptr_t)v);
    else
        lua_pushnil(L);
    return 1;
}

/* m:len() -> integer */
static int m_len(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)kl_hmap_len(check_hmap(L)));
    return 1;
}

/* m:items() -> {key = integer, ...}, built by iterating the map */
static int m_items(lua_State *L) {
    kl_hmap *m = check_hmap(L);
    lua_createtable(L, 0, (int)kl_hmap_len(m));
    size_t cursor = 0;
    const char *key;
    void *v;
    while (kl_hmap_next(m, &cursor, &key, &v)) {
        lua_pushinteger(L, (lua_Integer)(intptr_t)v);
        lua_setfield(L, -2, key);
    }
    return 1;
}

static int m_gc(lua_State *L) {
    kl_hmap_free(kl_testing_take(L, HMAP_MT));
    return 0;
}

/* hmap() -> map */
static int m_new(lua_State *L) {
    void **slot = kl_testing_box(L, HMAP_MT);
    if (!(*slot = kl_hmap_new())) return luaL_error(L, "hmap: out of memory");
    return 1;
}

/* ---- ring ---- */

static kl_ring *check_ring(lua_State *L) { return luaL_checkudata(L, 1, RING_MT); }

/* r:push(integer) */
static int r_push(lua_State *L) {
    kl_ring *r = check_ring(L);
    lua_Integer v = luaL_checkinteger(L, 2);
    kl_ring_push(r, &v);
    return 0;
}

/* r:pop() -> the oldest integer, or nil when empty */
static int r_pop(lua_State *L) {
    lua_Integer v;
    if (kl_ring_pop(check_ring(L), &v)) lua_pushinteger(L, v);
    else lua_pushnil(L);
    return 1;
}

/* r:len(), r:cap() -> integer */
static int r_len(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)kl_ring_len(check_ring(L)));
    return 1;
}

static int r_cap(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)kl_ring_cap(check_ring(L)));
    return 1;
}

static int r_gc(lua_State *L) {
    kl_ring_free(check_ring(L));
    return 0;
}

/* ring() -> ring of integers */
static int r_new(lua_State *L) {
    kl_ring *r = lua_newuserdatauv(L, sizeof *r, 0);
    kl_ring_init(r, sizeof(lua_Integer));
    luaL_setmetatable(L, RING_MT);
    return 1;
}

/* Creates the metatable `name` with methods as its __index; pops it. */
void kl_testing_open_queue(lua_State *L) {
    static const luaL_Reg queue_methods[] = {
        {"add", q_add},
        {"add_after", q_add_after},
        {"add_rate_limited", q_add_rate_limited},
        {"forget", q_forget},
        {"num_requeues", q_num_requeues},
        {"advance", q_advance},
        {"get", q_get},
        {"done", q_done},
        {"next_ready", q_next_ready},
        {"len", q_len},
        {"shutdown", q_shutdown},
        {"shutting_down", q_shutting_down},
        {"stats", q_stats},
        {"__gc", q_gc},
        {NULL, NULL}};
    static const luaL_Reg hmap_methods[] = {
        {"put", m_put}, {"get", m_get}, {"del", m_del}, {"len", m_len},
        {"items", m_items}, {"__gc", m_gc}, {NULL, NULL}};
    static const luaL_Reg ring_methods[] = {
        {"push", r_push}, {"pop", r_pop}, {"len", r_len}, {"cap", r_cap}, {"__gc", r_gc}, {NULL, NULL}};
    static const luaL_Reg functions[] = {{"queue", q_new}, {"queue_bucket_bounds", q_bucket_bounds},
                                         {"hmap", m_new}, {"ring", r_new}, {NULL, NULL}};
    kl_testing_new_class(L, QUEUE_MT, queue_methods);
    kl_testing_new_class(L, HMAP_MT, hmap_methods);
    kl_testing_new_class(L, RING_MT, ring_methods);
    luaL_setfuncs(L, functions, 0);
}
