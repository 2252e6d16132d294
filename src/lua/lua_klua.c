/*
 * lua_klua.c - klua.core: requests, timers, logging, stop; see lua_klua.h.
 *
 * Functions that wait (request, sleep) suspend the calling task and yield;
 * they may only be called from a task: the script's main chunk, a handler,
 * a timer callback or a reconcile function.
 */
#include "lua/lua_klua.h"

#include <lauxlib.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/procstat.h"
#include "lua/lua_json.h"
#include "lua/lua_yaml.h"
#include "lua/object.h"
#include "lua/task.h"
#include "lua/view.h"
#include "base/xalloc.h"

#define TIMER_MT "klua.timer"

typedef struct core core;
typedef struct timer timer;

/* The script's handle of a timer; its user value 2 is the function. */
typedef struct timer_box {
    kl_object o; /* state: the timer; NULL once it has fired for good or is cancelled */
    double seconds;
    int every;
} timer_box;

struct timer {
    core *c;
    timer **list; /* the core's timers, or its held ones */
    timer *prev, *next;
    uint64_t loop_id;
    timer_box *box;
    int box_ref; /* the handle, kept while the timer lives: its pointer stays valid */
    double interval; /* > 0 for klua.every */
};

/* The runtime's part KL_RT_CORE: klua.after and klua.every's timers. */
struct core {
    kl_rt *rt;
    timer *timers; /* the live ones */
    timer *held;   /* made but not started (core.start_timer): they keep nothing running */
};

static core *core_of(lua_State *L) { return kl_rt_state(kl_rt_of(L), KL_RT_CORE); }

/* Raises an error when the runtime is closing: what a __gc handler run at
 * exit makes would outlive everything it needs. */
static void check_open(lua_State *L, const char *what) {
    if (kl_rt_closing(kl_rt_of(L))) luaL_error(L, "%s: klua is shutting down", what);
}

/* ---- request ---------------------------------------------------------- */

static void on_request_done(void *ud, const kl_http_resp *resp) {
    kl_task *t = ud;
    lua_State *co = kl_task_thread(t);
    /* stack of the task: ..., then core.request's results */
    if (resp->outcome != KL_HTTP_OK && resp->outcome != KL_HTTP_STATUS) {
        lua_pushnil(co);
        lua_pushstring(co, kl_http_outcome_name(resp->outcome));
        if (resp->outcome == KL_HTTP_TOO_LARGE)
            lua_pushfstring(co, "%s: ask for less at a time (api.list's limit option), or raise "
                                "--memory-limit, which bounds one response too",
                            resp->error);
        else
            lua_pushstring(co, resp->error ? resp->error : "request failed");
        kl_task_resume(t, 3);
        return;
    }
    lua_pushinteger(co, resp->status);
    lua_pushlstring(co, resp->body ? resp->body : "", resp->body_len);
    if (resp->retry_after >= 0) lua_pushnumber(co, resp->retry_after);
    else lua_pushnil(co);
    if (kl_http_is_json(resp->content_type)) lua_pushnil(co);
    else lua_pushstring(co, resp->content_type);
    kl_task_resume(t, 4);
}

/* core.request(method, path [, body [, content_type [, accept [, send_by]]]])
 * -> status, body, retry_after, not_json when the server answered (any
 * status; not_json: the answer's Content-Type when it is not JSON, else
 * nil), | nil, outcome, message when it did not (outcome:
 * kl_http_outcome_name; "TooLate" when core.now() had reached send_by
 * before it could leave). Yields until the request has ended. */
static int l_request(lua_State *L) {
    kl_task *t = kl_task_check_wait(L, "an API call");
    kl_rt *rt = kl_rt_of(L);
    double timeout = kl_rt_options(rt)->request_timeout;
    size_t blen = 0;
    kl_http_opts o = {
        .method = luaL_checkstring(L, 1),
        .path = luaL_checkstring(L, 2),
        .body = luaL_optlstring(L, 3, NULL, &blen),
        .content_type = luaL_optstring(L, 4, NULL),
        .accept = luaL_optstring(L, 5, NULL),
        .timeout_ms = timeout > 0 ? (long)(timeout * 1000) : 60000,
        /* The body becomes a string of the Lua state, and then its tables:
         * one over the state's limit could never be decoded there. */
        .max_body = kl_rt_options(rt)->memory_limit,
        .send_by = luaL_optnumber(L, 6, 0),
    };
    o.body_len = blen;
    luaL_argcheck(L, o.path[0] == '/', 2, "path must start with '/'");
    kl_http_start(kl_rt_http(rt), &o, (kl_http_cb){.done = on_request_done}, t);
    kl_task_suspend(t);
    return lua_yield(L, 0);
}

/* ---- timers ----------------------------------------------------------- */

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
    core *c = tm->c;
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
    core *c = core_of(L);
    lua_Number secs = luaL_checknumber(L, 1);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_settop(L, 3);
    int held = lua_toboolean(L, 3);
    luaL_argcheck(L, secs >= 0, 1, "seconds must not be negative");
    luaL_argcheck(L, interval == 0 || secs > 0, 1, "the interval must be positive");
    check_open(L, "cannot start a timer");
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

/* core.sleep(seconds): suspends the calling task. */
static int l_sleep(lua_State *L) {
    kl_task *t = kl_task_check_wait(L, "klua.sleep");
    lua_Number secs = luaL_checknumber(L, 1);
    kl_loop_after(kl_rt_loop(kl_rt_of(L)), secs, on_sleep_over, t);
    kl_task_suspend(t);
    return lua_yield(L, 0);
}

/* ---- the rest --------------------------------------------------------- */

/* core.stop([code]): ends the run once the current callback returns; no
 * further script code starts. klua run exits with code (default 0). */
static int l_stop(lua_State *L) {
    kl_rt_advance(kl_rt_of(L), KL_RT_EV_STOP, (int)luaL_optinteger(L, 1, 0));
    return 0;
}

/* core.phase() -> the runtime's phase: "LOADING", "RUNNING", "DRAINING",
 * ... (runtime.h). */
static int l_phase(lua_State *L) {
    lua_pushstring(L, kl_rt_phase_name(kl_rt_current(kl_rt_of(L))));
    return 1;
}

/* core.advance(step): the graceful shutdown's own steps, "drained" (the
 * reconciles in flight ended: DRAINING -> HOOKS) and "hooks ran" (HOOKS ->
 * RELEASING); raises for a step the phase table does not declare now. */
static int l_advance(lua_State *L) {
    static const char *const steps[] = {"drained", "hooks ran", NULL};
    static const kl_rt_event events[] = {KL_RT_EV_DRAINED, KL_RT_EV_HOOKS_RAN};
    kl_rt_event e = events[luaL_checkoption(L, 1, NULL, steps)];
    kl_rt *rt = kl_rt_of(L);
    if (!kl_rt_can(rt, e))
        return luaL_error(L, "the runtime does not go on \"%s\" from %s", kl_rt_event_name(e),
                          kl_rt_phase_name(kl_rt_current(rt)));
    kl_rt_advance(rt, e, 0);
    return 0;
}

/* core.graceful_shutdown(start, describe): the first SIGINT/SIGTERM runs
 * start(signal name) as a task instead of stopping; describe() names what
 * still runs should the stop be cut short (kl_rt_graceful). */
static int l_graceful_shutdown(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    kl_rt *rt = kl_rt_of(L);
    if (kl_rt_graceful_set(rt)) return luaL_error(L, "the graceful shutdown is already set");
    lua_settop(L, 2);
    kl_rt_graceful(rt, L);
    return 0;
}

/* core.reconciling(on): marks the calling task as running a reconcile,
 * which a graceful stop lets finish. */
static int l_reconciling(lua_State *L) {
    kl_task *t = kl_task_current(L);
    if (!t) return luaL_error(L, "core.reconciling must be called from a task");
    kl_task_set_reconciling(t, lua_toboolean(L, 1));
    return 0;
}

/* core.log(level, message): level is "debug", "info", "warn" or "error". */
static int l_log(lua_State *L) {
    static const char *const names[] = {"debug", "info", "warn", "error", NULL};
    _Static_assert(KL_LOG_DEBUG == 0 && KL_LOG_ERROR == 3, "names follows kl_log_level");
    int level = luaL_checkoption(L, 1, NULL, names);
    const char *msg = luaL_checkstring(L, 2);
    kl_log((kl_log_level)level, kl_rt_script_name(kl_rt_of(L)), "%s", msg);
    return 0;
}

/* core.verbosity() -> the -v level. */
static int l_verbosity(lua_State *L) {
    lua_pushinteger(L, kl_log_verbosity());
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

/* core.namespace() -> the namespace of the kubeconfig context. */
static int l_namespace(lua_State *L) {
    lua_pushstring(L, kl_conn_namespace(kl_rt_conn(kl_rt_of(L))));
    return 1;
}

/* core.stdout_closed() -> true once stdout's reader has gone: a pipe or
 * socket whose other end closed reports POLLERR or POLLHUP, so klua watch
 * can tell without a line to write. Never blocks. */
static int l_stdout_closed(lua_State *L) {
    struct pollfd p = {.fd = STDOUT_FILENO, .events = 0};
    lua_pushboolean(L, poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)));
    return 1;
}

/* core.write_stdout(s) -> true, or nil, a message and errno, as
 * io.stdout:write(s) answers: the same write to C's stdout, which
 * io.stdout is, for klua watch's lines, without the file method's check
 * of the handle it is called on (a third of its cost for a short line). */
static int l_write_stdout(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    return luaL_fileresult(L, fwrite(s, 1, n, stdout) == n, NULL);
}

/* core.on_synced(fn): fn runs once every informer has synced. */
static int l_on_synced(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    kl_rt_on_synced(L, 1);
    return 0;
}

/* core.stats() -> {task_errors=, lua_memory=, suspended=}. */
static int l_stats(lua_State *L) {
    kl_rt *rt = kl_rt_of(L);
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)kl_task_errors(rt));
    lua_setfield(L, -2, "task_errors");
    lua_pushinteger(L, (lua_Integer)kl_rt_memory(rt));
    lua_setfield(L, -2, "lua_memory");
    lua_pushinteger(L, (lua_Integer)kl_task_suspended(rt));
    lua_setfield(L, -2, "suspended");
    return 1;
}

static void set_string(lua_State *L, const char *key, const char *v) {
    if (!v) return;
    lua_pushstring(L, v);
    lua_setfield(L, -2, key);
}

static void set_number(lua_State *L, const char *key, double v) {
    if (v <= 0) return;
    lua_pushnumber(L, v);
    lua_setfield(L, -2, key);
}

/* core.controller_options() -> what --leader-elect and its flags asked:
 * {leader_elect, election_id, election_namespace, lease_duration,
 * renew_deadline, retry_period, script} (unset flags absent), and
 * graceful_shutdown_timeout (seconds, 30 unless set) and shards (when set). */
static int l_controller_options(lua_State *L) {
    const kl_ctl_opts *o = &kl_rt_options(kl_rt_of(L))->ctl;
    lua_createtable(L, 0, 9);
    lua_pushboolean(L, o->leader_elect);
    lua_setfield(L, -2, "leader_elect");
    set_string(L, "election_id", o->election_id);
    set_string(L, "election_namespace", o->election_namespace);
    set_number(L, "lease_duration", o->lease_duration);
    set_number(L, "renew_deadline", o->renew_deadline);
    set_number(L, "retry_period", o->retry_period);
    lua_pushnumber(L, o->graceful_shutdown_timeout > 0 ? o->graceful_shutdown_timeout : 30);
    lua_setfield(L, -2, "graceful_shutdown_timeout");
    if (o->shards) {
        lua_pushinteger(L, o->shards);
        lua_setfield(L, -2, "shards");
    }
    if (o->script) {
        const char *base = strrchr(o->script, '/');
        set_string(L, "script", base ? base + 1 : o->script);
    }
    return 1;
}

/* core.process() -> the process_* figures (procstat.h), or nil. */
static int l_process(lua_State *L) {
    kl_procstat st;
    if (kl_procstat_read(&st) < 0) return 0;
    const struct {
        const char *key;
        double v;
    } fields[] = {{"cpu_seconds", st.cpu_seconds}, {"resident_bytes", st.resident_bytes},
                  {"virtual_bytes", st.virtual_bytes}, {"open_fds", st.open_fds},
                  {"max_fds", st.max_fds},         {"start_time", st.start_time}};
    lua_createtable(L, 0, 6);
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
        lua_pushnumber(L, fields[k].v);
        lua_setfield(L, -2, fields[k].key);
    }
    return 1;
}

/* core.http_metrics() -> {host =, requests = {{method, code, n}, ...},
 * durations = {{verb, {count =, sum =, buckets = {{le, n}, ...}}}, ...}}:
 * the HTTP layer's client-go request metrics (conn/http.h). */
static int l_http_metrics(lua_State *L) {
    kl_http *h = kl_rt_http(kl_rt_of(L));
    size_t n;
    lua_createtable(L, 0, 3);
    lua_pushstring(L, kl_http_host(h));
    lua_setfield(L, -2, "host");
    const kl_http_count *c = kl_http_counts(h, &n);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 3, 0);
        lua_pushstring(L, c[i].method);
        lua_rawseti(L, -2, 1);
        lua_pushstring(L, c[i].code);
        lua_rawseti(L, -2, 2);
        lua_pushinteger(L, (lua_Integer)c[i].n);
        lua_rawseti(L, -2, 3);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "requests");
    const kl_http_latency *l = kl_http_latencies(h, &n);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 2, 0);
        lua_pushstring(L, l[i].verb);
        lua_rawseti(L, -2, 1);
        lua_createtable(L, 0, 3);
        lua_pushinteger(L, (lua_Integer)l[i].n);
        lua_setfield(L, -2, "count");
        lua_pushnumber(L, l[i].sum);
        lua_setfield(L, -2, "sum");
        lua_createtable(L, KL_HTTP_BUCKETS, 0);
        for (int b = 0; b < KL_HTTP_BUCKETS; b++) {
            lua_createtable(L, 2, 0);
            lua_pushnumber(L, kl_http_buckets[b]);
            lua_rawseti(L, -2, 1);
            lua_pushinteger(L, (lua_Integer)l[i].le[b]);
            lua_rawseti(L, -2, 2);
            lua_rawseti(L, -2, b + 1);
        }
        lua_setfield(L, -2, "buckets");
        lua_rawseti(L, -2, 2);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "durations");
    return 1;
}

/* Adds klua.core's own functions, the view functions and klua.json. */
static void core_open(void *state, lua_State *L) {
    (void)state;
    static const luaL_Reg fns[] = {
        {"request", l_request}, {"after", l_after},         {"every", l_every},
        {"start_timer", l_start_timer}, {"sleep", l_sleep}, {"stop", l_stop},
        {"log", l_log},         {"verbosity", l_verbosity}, {"now", l_now}, {"wall_time", l_wall_time},
        {"namespace", l_namespace}, {"on_synced", l_on_synced}, {"stats", l_stats},
        {"controller_options", l_controller_options}, {"process", l_process},
        {"stdout_closed", l_stdout_closed}, {"write_stdout", l_write_stdout},
        {"graceful_shutdown", l_graceful_shutdown}, {"phase", l_phase}, {"advance", l_advance},
        {"reconciling", l_reconciling}, {"http_metrics", l_http_metrics}, {NULL, NULL}};
    static const luaL_Reg timer_methods[] = {{"cancel", l_cancel}, {NULL, NULL}};
    static const luaL_Reg timer_meta[] = {{"__tostring", l_timer_tostring}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0); /* stack: core */
    lua_createtable(L, 0, 3); /* stack: core, lease_defaults */
    lua_pushinteger(L, KL_LEASE_DURATION);
    lua_setfield(L, -2, "lease_duration");
    lua_pushinteger(L, KL_RENEW_DEADLINE);
    lua_setfield(L, -2, "renew_deadline");
    lua_pushinteger(L, KL_RETRY_PERIOD);
    lua_setfield(L, -2, "retry_period");
    lua_setfield(L, -2, "lease_defaults");
    kl_object_class(L, TIMER_MT, timer_methods, timer_meta);
    kl_object_set_functions(L);
    kl_view_set_functions(L);
    kl_lua_json_push_module(L); /* stack: core, json */
    lua_setfield(L, -2, "json");
    kl_lua_yaml_push_module(L); /* stack: core, yaml */
    lua_setfield(L, -2, "yaml");
}

static int core_idle(void *state) { return !((core *)state)->timers; }

static void core_close(void *state) {
    core *c = state;
    while (c->timers) timer_free(c->timers, KL_OBJECT_SHUTDOWN);
    while (c->held) timer_free(c->held, KL_OBJECT_SHUTDOWN);
}

void kl_lua_klua_init(kl_rt *rt) {
    static const kl_rt_hooks hooks = {
        .open = core_open, .idle = core_idle, .close = core_close, .free = free};
    core *c = kl_xcalloc(1, sizeof *c);
    c->rt = rt;
    kl_rt_register(rt, KL_RT_CORE, &hooks, c);
}
