/* lua_loop.c - klua.core's timers, sleep and clocks, over base/loop.c; see lua_loop.h. */
#include "lua/lua_loop.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <time.h>

#include "base/xalloc.h"
#include "lua/object.h"
#include "lua/task.h"

#define TIMER_MT "klua.timer"

typedef struct timers timers;
typedef struct timer timer;

/* The script's handle of a timer; its user value 2 is the function. */
typedef struct timer_box {
    kl_object o; /* state: the timer; NULL once it has fired for good or is cancelled */
    double seconds;
    int every;
} timer_box;

struct timer {
    timers *c;
    timer **list; /* the part's live timers, or its held ones */
    timer *prev, *next;
    uint64_t loop_id;
    timer_box *box;
    int box_ref; /* the handle, kept while the timer lives: its pointer stays valid */
    double interval; /* > 0 for klua.every */
};

/* The runtime's part KL_RT_TIMERS: klua.after and klua.every's timers. */
struct timers {
    kl_rt *rt;
    timer *timers; /* the live ones */
    timer *held;   /* made but not started (core.start_timer): they keep nothing running */
};

static timers *timers_of(lua_State *L) { return kl_rt_state(kl_rt_of(L), KL_RT_TIMERS); }

static void timer_link(timer *tm, timer **list) {
    tm->list = list;
    tm->prev = NULL;
    tm->next = *list;
    if (*list) (*list)->prev = tm;
    *list = tm;
}

static void timer_unlink(timer *tm) {
    if (tm->prev) tm->prev->next = tm->next;
    else *tm->list = tm->next;
    if (tm->next) tm->next->prev = tm->prev;
}

/* Frees tm; its handle says why: NULL when it ended as it should. */
static void timer_free(timer *tm, const char *why) {
    timers *c = tm->c;
    timer_unlink(tm);
    kl_loop_cancel(kl_rt_loop(c->rt), tm->loop_id);
    kl_object_close(&tm->box->o, why);
    lua_State *L = kl_rt_lua(c->rt);
    lua_rawgeti(L, LUA_REGISTRYINDEX, tm->box_ref); /* stack: handle */
    lua_pushnil(L);
    lua_setiuservalue(L, -2, 2); /* the function goes with the timer, for the collector */
    lua_pop(L, 1);
    luaL_unref(L, LUA_REGISTRYINDEX, tm->box_ref);
    free(tm);
}

static void on_timer(kl_loop *loop, void *ud) {
    timer *tm = ud;
    kl_rt *rt = tm->c->rt;
    lua_State *L = kl_rt_lua(rt);
    tm->loop_id = 0;
    lua_rawgeti(L, LUA_REGISTRYINDEX, tm->box_ref); /* stack: handle */
    lua_getiuservalue(L, -1, 2);
    lua_remove(L, -2); /* stack: fn, for the task */
    if (tm->interval > 0) {
        tm->loop_id = kl_loop_after(loop, tm->interval, on_timer, tm);
        kl_task_spawn(rt, NULL, "klua.every callback", 0, NULL, NULL);
    } else {
        /* Freed first (fn is already on the stack), so the callback runs
         * with its timer gone and the script can count as idle after it. */
        timer_free(tm, NULL);
        kl_task_spawn(rt, NULL, "klua.after callback", 0, NULL, NULL);
    }
}

/* Pushes a new timer's handle; box_ref keeps the handle alive while the
 * timer lives, so that tm->box stays valid. Every call that can raise
 * (out of memory under --memory-limit) comes before the timer is
 * allocated, as liolib opens a file only once its handle exists: a
 * failed call leaves nothing behind. */
static int add_timer(lua_State *L, double interval) {
    timers *c = timers_of(L);
    lua_Number secs = luaL_checknumber(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_settop(L, 3);
    int held = lua_toboolean(L, 3);
    luaL_argcheck(L, secs >= 0, 1, "seconds must not be negative");
    luaL_argcheck(L, interval == 0 || secs > 0, 1, "the interval must be positive");
    if (kl_rt_closing(kl_rt_of(L))) luaL_error(L, "cannot start a timer: klua is shutting down");
    timer_box *box = kl_object_new(L, TIMER_MT, sizeof *box, 1, NULL); /* stack: seconds, fn, held, handle */
    box->seconds = secs;
    box->every = interval > 0;
    lua_pushvalue(L, 2);
    lua_setiuservalue(L, -2, 2);
    lua_pushvalue(L, -1); /* stack: ..., handle, handle */
    int box_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    timer *tm = kl_xcalloc(1, sizeof *tm);
    tm->c = c;
    tm->interval = interval > 0 ? secs : 0;
    tm->box = box;
    tm->box_ref = box_ref;
    box->o.state = tm;
    if (held) {
        timer_link(tm, &c->held);
    } else {
        tm->loop_id = kl_loop_after(kl_rt_loop(c->rt), secs, on_timer, tm);
        timer_link(tm, &c->timers);
    }
    return 1;
}

/* core.after(seconds, fn [, held]) -> timer: runs fn once, `seconds` from
 * now; with held, from core.start_timer on. */
static int l_after(lua_State *L) { return add_timer(L, 0); }
/* core.every(seconds, fn [, held]) -> timer: runs fn every `seconds`. */
static int l_every(lua_State *L) { return add_timer(L, 1); }

/* core.start_timer(timer): starts a held timer, from now; does nothing to
 * one started already, fired or cancelled. */
static int l_start_timer(lua_State *L) {
    timer *tm = kl_object_check(L, 1, TIMER_MT);
    if (!tm || tm->list != &tm->c->held) return 0;
    timer_unlink(tm);
    tm->loop_id = kl_loop_after(kl_rt_loop(tm->c->rt), tm->box->seconds, on_timer, tm);
    timer_link(tm, &tm->c->timers);
    return 0;
}

/* t:cancel() -> true if the timer was still pending (or repeating). */
static int l_cancel(lua_State *L) {
    timer *tm = kl_object_check(L, 1, TIMER_MT);
    lua_pushboolean(L, tm != NULL);
    if (tm) {
        kl_rt *rt = tm->c->rt;
        timer_free(tm, NULL);
        kl_rt_check_idle(rt);
    }
    return 1;
}

/* tostring(t) -> "timer(every 5 s)", "timer(after 0.5 s, done)". */
static int l_timer_tostring(lua_State *L) {
    timer_box *b = luaL_checkudata(L, 1, TIMER_MT);
    const timer *tm = b->o.state;
    const char *how = !tm ? (b->o.closed ? ", closed" : ", done") : tm->list == &tm->c->held ? ", held" : "";
    const char *verb = b->every ? "every" : "after";
    lua_Integer whole;
    if (lua_numbertointeger(b->seconds, &whole) && (lua_Number)whole == b->seconds) /* "30 s", not "30.0 s" */
        lua_pushfstring(L, "timer(%s %I s%s)", verb, whole, how);
    else
        lua_pushfstring(L, "timer(%s %f s%s)", verb, (lua_Number)b->seconds, how);
    return 1;
}

static void on_sleep_over(kl_loop *loop, void *ud) {
    (void)loop;
    kl_task_resume(ud, 0);
}

/* The task's deadline passed: the sleep ends now. */
static void cut_sleep(kl_task *t, void *ud, uint64_t id) {
    kl_loop_cancel(ud, id);
    kl_task_resume(t, 0);
}

/* core.sleep(seconds): suspends the calling task; at once past its
 * deadline, and no longer than until it. */
static int l_sleep(lua_State *L) {
    kl_task *t = kl_task_check_wait(L, "klua.sleep");
    lua_Number secs = luaL_checknumber(L, 1);
    if (kl_task_expired(t)) return 0;
    kl_loop *loop = kl_rt_loop(kl_rt_of(L));
    uint64_t id = kl_loop_after(loop, secs, on_sleep_over, t);
    kl_task_suspend(t);
    kl_task_on_cancel(t, cut_sleep, loop, id);
    return lua_yield(L, 0);
}

/* core.set_deadline(seconds, why): the calling task's waits end once
 * `seconds` have passed (task.h, kl_task_set_deadline); why names it in
 * their errors. */
static int l_set_deadline(lua_State *L) {
    kl_task *t = kl_task_check_wait(L, "a deadline");
    lua_Number secs = luaL_checknumber(L, 1);
    luaL_argcheck(L, secs > 0, 1, "a deadline must be a positive number of seconds");
    kl_task_set_deadline(t, secs, luaL_checkstring(L, 2));
    return 0;
}

/* core.clear_deadline() -> true when the calling task's deadline had
 * passed. */
static int l_clear_deadline(lua_State *L) {
    kl_task *t = kl_task_current(L);
    lua_pushboolean(L, t && kl_task_clear_deadline(t));
    return 1;
}

/* core.wall_time() -> seconds since the epoch, to the microsecond: for
 * the times a record carries (a Lease's renewTime), never to measure. */
static int l_wall_time(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)(ts.tv_nsec / 1000) / 1e6);
    return 1;
}

/* core.now() -> seconds on a monotonic clock. */
static int l_now(lua_State *L) {
    lua_pushnumber(L, kl_now());
    return 1;
}

static void timers_open(void *state, lua_State *L) {
    (void)state;
    static const luaL_Reg fns[] = {{"after", l_after}, {"every", l_every}, {"start_timer", l_start_timer},
                                   {"sleep", l_sleep}, {"now", l_now},     {"wall_time", l_wall_time},
                                   {"set_deadline", l_set_deadline}, {"clear_deadline", l_clear_deadline},
                                   {NULL, NULL}};
    static const luaL_Reg timer_methods[] = {{"cancel", l_cancel}, {NULL, NULL}};
    static const luaL_Reg timer_meta[] = {{"__tostring", l_timer_tostring}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0); /* stack: core */
    kl_object_class(L, TIMER_MT, timer_methods, timer_meta);
}

static int timers_idle(void *state) { return !((timers *)state)->timers; }

static void timers_close(void *state) {
    timers *c = state;
    while (c->timers) timer_free(c->timers, KL_OBJECT_SHUTDOWN);
    while (c->held) timer_free(c->held, KL_OBJECT_SHUTDOWN);
}

void kl_lua_loop_init(kl_rt *rt) {
    static const kl_rt_hooks hooks = {
        .open = timers_open, .idle = timers_idle, .close = timers_close, .free = free};
    timers *c = kl_xcalloc(1, sizeof *c);
    c->rt = rt;
    kl_rt_register(rt, KL_RT_TIMERS, &hooks, c);
}
