/*
 * lua_queue.c - work queues for scripts: client-go's rate-limited,
 * delaying queue (queue.c) with a get() that suspends the calling task
 * until a key is ready.
 *
 * Waiting workers are woken from deferred work, never from inside the call
 * that added the key, so an add in a handler does not run a reconcile in
 * the middle of that handler.
 *
 * A queue belongs to its Lua handle: it is freed when the handle is
 * collected (a worker waiting in get() keeps the handle on its stack), or
 * when the runtime closes. A handle whose queue is gone raises "this queue
 * is closed" from every method, so a __gc handler that runs at exit is safe.
 */
#include "lua/lua_queue.h"

#include <lauxlib.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "lua/object.h"
#include "lua/opt.h"
#include "cache/queue.h"
#include "lua/task.h"
#include "base/xalloc.h"

#define QUEUE_MT "klua.queue"

typedef struct lua_queue lua_queue;

/* The runtime's part KL_RT_QUEUES. */
typedef struct queues {
    kl_rt *rt;
    lua_queue *list; /* every live queue */
} queues;

struct lua_queue {
    queues *all;
    kl_queue *q;
    kl_object *handle; /* its state is this queue */
    lua_queue *prev, *next;
    kl_task **waiters; /* workers suspended in get(), oldest first */
    size_t nwaiters, capwaiters;
    uint64_t wake_id; /* the deferred wake, or 0 */
    uint64_t timer;
    double timer_at;
};

static lua_queue *check_queue(lua_State *L) { return kl_object_check(L, 1, QUEUE_MT); }

static void wake(kl_loop *loop, void *ud);

static void schedule_wake(lua_queue *lq) {
    if (!lq->wake_id && lq->nwaiters) lq->wake_id = kl_loop_defer(kl_rt_loop(lq->all->rt), wake, lq);
}

static void on_due(kl_loop *loop, void *ud) {
    (void)loop;
    lua_queue *lq = ud;
    lq->timer = 0;
    schedule_wake(lq);
}

static kl_task *pop_waiter(lua_queue *lq) {
    kl_task *t = lq->waiters[0];
    memmove(lq->waiters, lq->waiters + 1, --lq->nwaiters * sizeof *lq->waiters);
    return t;
}

/* get's results on L: key and priority, or nil once shut down; how many. */
static int push_got(lua_State *L, const char *key, int prio) {
    if (!key) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushstring(L, key);
    lua_pushinteger(L, prio);
    return 2;
}

/* Hands ready keys to waiting workers; arms a timer for delayed ones. */
static void wake(kl_loop *loop, void *ud) {
    (void)loop;
    lua_queue *lq = ud;
    lq->wake_id = 0;
    double now = kl_now();
    while (lq->nwaiters && !kl_rt_ended(lq->all->rt)) {
        int shut = 0, prio = 0;
        const char *key = kl_queue_get(lq->q, now, &shut, &prio);
        if (!key && !shut) break;
        kl_task *t = pop_waiter(lq);
        lua_State *co = kl_task_thread(t);
        kl_task_resume(t, push_got(co, key, prio)); /* stack of the worker: ..., get's results */
    }
    double next = kl_queue_next_ready(lq->q);
    if (lq->nwaiters && next >= 0 && (!lq->timer || next < lq->timer_at)) {
        kl_loop_cancel(kl_rt_loop(lq->all->rt), lq->timer);
        lq->timer_at = next;
        lq->timer = kl_loop_after(kl_rt_loop(lq->all->rt), next - now, on_due, lq);
    }
}

static const char *check_key(lua_State *L) {
    const char *key = luaL_checkstring(L, 2);
    luaL_argcheck(L, key[0] != '\0', 2, "a key must not be empty");
    return key;
}

/* The optional priority at arg: an integer, 0 when absent. */
static int opt_priority(lua_State *L, int arg) {
    lua_Integer p = luaL_optinteger(L, arg, KL_QUEUE_NORMAL);
    luaL_argcheck(L, p >= INT_MIN && p <= INT_MAX, arg, "a priority must fit in 32 bits");
    return (int)p;
}

/* q:add(key [, priority]) -> false when key was queued already (the add is
 * merged into that one, a lower priority raised to this one, or ignored
 * after shutdown), else true. */
static int l_add(lua_State *L) {
    lua_queue *lq = check_queue(L);
    lua_pushboolean(L, kl_queue_add(lq->q, check_key(L), opt_priority(L, 3), kl_now()));
    schedule_wake(lq);
    return 1;
}

/* q:add_after(key, seconds [, priority]): queues key later. */
static int l_add_after(lua_State *L) {
    lua_queue *lq = check_queue(L);
    const char *key = check_key(L);
    kl_queue_add_after(lq->q, key, luaL_checknumber(L, 3), opt_priority(L, 4), kl_now());
    schedule_wake(lq);
    return 0;
}

/* q:add_rate_limited(key [, priority]) -> seconds: queues key after its
 * backoff (5 ms doubling to 1000 s) and the overall token bucket (10/s,
 * burst 100) allow; returns that wait. */
static int l_add_rate_limited(lua_State *L) {
    lua_queue *lq = check_queue(L);
    lua_pushnumber(L, kl_queue_add_rate_limited(lq->q, check_key(L), opt_priority(L, 3), kl_now()));
    schedule_wake(lq);
    return 1;
}

/* q:forget(key): clears key's failure count. */
static int l_forget(lua_State *L) {
    lua_queue *lq = check_queue(L);
    kl_queue_forget(lq->q, check_key(L));
    return 0;
}

/* q:num_requeues(key) -> failures of key since it was last forgotten. */
static int l_num_requeues(lua_State *L) {
    lua_queue *lq = check_queue(L);
    lua_pushinteger(L, kl_queue_num_requeues(lq->q, check_key(L)));
    return 1;
}

/* q:get() -> the next key and its priority, suspending until one is
 * ready; nil once the queue is shut down and drained. */
static int l_get(lua_State *L) {
    lua_queue *lq = check_queue(L);
    kl_task *t = kl_task_check_wait(L, "q:get()");
    int shut = 0, prio = 0;
    const char *key = kl_queue_get(lq->q, kl_now(), &shut, &prio);
    if (key || shut) return push_got(L, key, prio);
    lq->waiters = kl_buf_grow(lq->waiters, &lq->capwaiters, lq->nwaiters + 1, sizeof *lq->waiters, 4);
    lq->waiters[lq->nwaiters++] = t;
    kl_task_suspend(t);
    /* A delayed key may be due before anything else wakes the queue: the
     * wake arms its timer. It is deferred, as t must have yielded before
     * anything can resume it. */
    schedule_wake(lq);
    return lua_yield(L, 0);
}

/* q:done(key): ends processing of key (re-queued if added meanwhile). */
static int l_done(lua_State *L) {
    lua_queue *lq = check_queue(L);
    kl_queue_done(lq->q, check_key(L), kl_now());
    schedule_wake(lq);
    return 0;
}

/* q:len() -> keys queued and ready. */
static int l_len(lua_State *L) {
    lua_queue *lq = check_queue(L);
    lua_pushinteger(L, (lua_Integer)kl_queue_len(lq->q));
    return 1;
}

/* q:shutdown(): no more adds; waiting workers get nil once drained. */
static int l_shutdown(lua_State *L) {
    lua_queue *lq = check_queue(L);
    kl_queue_shutdown(lq->q);
    schedule_wake(lq);
    return 0;
}

/* Sets t[name] = {count, sum, max, buckets = {{le, count}...}} for the
 * table t on top; the bucket counts are cumulative, as Prometheus's are,
 * and the last bound, +Inf, is left to the count. */
static void push_dist(lua_State *L, const kl_queue_dist *d, const char *name) {
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, (lua_Integer)d->count);
    lua_setfield(L, -2, "count");
    lua_pushnumber(L, d->sum);
    lua_setfield(L, -2, "sum");
    lua_pushnumber(L, d->max);
    lua_setfield(L, -2, "max");
    lua_createtable(L, KL_QUEUE_BUCKETS - 1, 0); /* stack: ..., t, dist, buckets */
    uint64_t below = 0;
    for (int i = 0; i < KL_QUEUE_BUCKETS - 1; i++) {
        below += d->buckets[i];
        lua_createtable(L, 2, 0); /* stack: ..., t, dist, buckets, {le, count} */
        lua_pushnumber(L, kl_queue_bucket_bound(i));
        lua_rawseti(L, -2, 1);
        lua_pushinteger(L, (lua_Integer)below);
        lua_rawseti(L, -2, 2);
        lua_rawseti(L, -2, i + 1); /* buckets[i + 1] = {le, count} */
    }
    lua_setfield(L, -2, "buckets"); /* stack: ..., t, dist */
    lua_setfield(L, -2, name);      /* stack: ..., t */
}

/* q:stats() -> {depth, processing, waiting, failing, adds, retries,
 * longest, oldest, wait = {count, sum, max}, work = {...}}. */
static int l_stats(lua_State *L) {
    lua_queue *lq = check_queue(L);
    kl_queue_stats s;
    kl_queue_get_stats(lq->q, kl_now(), &s);
    lua_createtable(L, 0, 11);
#define FIELD(f)                           \
    lua_pushinteger(L, (lua_Integer)s.f); \
    lua_setfield(L, -2, #f)
    FIELD(depth);
    FIELD(processing);
    FIELD(waiting);
    FIELD(failing);
    FIELD(adds);
    FIELD(retries);
#undef FIELD
    lua_pushnumber(L, s.longest);
    lua_setfield(L, -2, "longest");
    lua_pushnumber(L, s.oldest);
    lua_setfield(L, -2, "oldest");
    push_dist(L, &s.wait, "wait");
    push_dist(L, &s.work, "work");
    return 1;
}

/* core.queue{base_delay=, max_delay=, qps=, burst=} -> a work queue. */
static int l_queue(lua_State *L) {
    kl_rt *rt = kl_rt_of(L);
    if (kl_rt_closing(rt)) return luaL_error(L, "cannot make a queue: klua is shutting down");
    kl_queue_opts o = {0};
    if (lua_istable(L, 1)) {
        o.base_delay = kl_opt_number(L, 1, "base_delay");
        o.max_delay = kl_opt_number(L, 1, "max_delay");
        o.qps = kl_opt_number(L, 1, "qps");
        o.burst = (int)kl_opt_number(L, 1, "burst");
    }
    /* The handle first: it is the one allocation here that can raise (out
     * of memory under --memory-limit), and nothing after it does. */
    kl_object *handle = kl_object_new(L, QUEUE_MT, sizeof *handle, 0, NULL); /* stack: ..., handle */
    lua_queue *lq = kl_xcalloc(1, sizeof *lq);
    lq->all = kl_rt_state(rt, KL_RT_QUEUES);
    lq->q = kl_queue_new(&o);
    lq->handle = handle;
    handle->state = lq;
    lq->next = lq->all->list;
    if (lq->all->list) lq->all->list->prev = lq;
    lq->all->list = lq;
    return 1;
}

static void queue_free(lua_queue *lq) {
    queues *all = lq->all;
    if (lq->prev) lq->prev->next = lq->next;
    else all->list = lq->next;
    if (lq->next) lq->next->prev = lq->prev;
    kl_object_close(lq->handle, KL_OBJECT_SHUTDOWN);
    kl_loop_cancel(kl_rt_loop(all->rt), lq->timer);
    kl_loop_cancel(kl_rt_loop(all->rt), lq->wake_id);
    kl_queue_free(lq->q);
    free(lq->waiters);
    free(lq);
}

static int l_gc(lua_State *L) {
    kl_object *o = luaL_checkudata(L, 1, QUEUE_MT);
    if (o->state) queue_free(o->state);
    return 0;
}

/* tostring(q) -> "queue(2 ready)", or "queue(closed)". */
static int l_tostring(lua_State *L) {
    kl_object *o = luaL_checkudata(L, 1, QUEUE_MT);
    lua_queue *lq = o->state;
    if (lq) lua_pushfstring(L, "queue(%I ready)", (lua_Integer)kl_queue_len(lq->q));
    else lua_pushliteral(L, "queue(closed)");
    return 1;
}

/* Frees every queue; the handles stay, closed. */
static void queues_close(void *state) {
    queues *all = state;
    while (all->list) queue_free(all->list);
}

static void queues_open(void *state, lua_State *L) {
    (void)state;
    static const luaL_Reg methods[] = {
        {"add", l_add},       {"add_after", l_add_after}, {"add_rate_limited", l_add_rate_limited},
        {"forget", l_forget}, {"num_requeues", l_num_requeues}, {"get", l_get},
        {"done", l_done},     {"len", l_len},
        {"shutdown", l_shutdown}, {"stats", l_stats},     {NULL, NULL}};
    static const luaL_Reg meta[] = {{"__gc", l_gc}, {"__tostring", l_tostring}, {NULL, NULL}};
    kl_object_class(L, QUEUE_MT, methods, meta);
    lua_pushcfunction(L, l_queue);
    lua_setfield(L, -2, "queue");
}

void kl_lua_queue_init(kl_rt *rt) {
    static const kl_rt_hooks hooks = {.open = queues_open, .close = queues_close, .free = free};
    queues *all = kl_xcalloc(1, sizeof *all);
    all->rt = rt;
    kl_rt_register(rt, KL_RT_QUEUES, &hooks, all);
}
