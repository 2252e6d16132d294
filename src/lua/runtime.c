/* runtime.c - the Lua state, the loop and the script's lifetime; see runtime.h. */
#include "lua/runtime.h"

#include <lauxlib.h>
#include <lua-cjson.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/pool.h"
#include "lua/collector.h"
#include "lua/embedded.h"
#include "lua/lua_endpoint.h"
#include "lua/lua_webhook.h"
#include "lua/lua_informer.h"
#include "lua/lua_klua.h"
#include "lua/lua_loop.h"
#include "lua/lua_queue.h"
#include "lua/task.h"
#include "lua/view.h"


/* klua run's graceful stop (controller-runtime's), set by
 * core.graceful_shutdown before any signal: the first SIGINT/SIGTERM then
 * leads to DRAINING, which starts the Lua function start_ref as a task
 * (lua/klua/internal/shutdown.lua); it moves on to HOOKS and RELEASING through
 * core.advance and ends the run with klua.stop. */
typedef struct graceful_stop {
    int start_ref;    /* function(signal name), or LUA_NOREF: no graceful stop */
    int describe_ref; /* function() -> what still runs, for the report */
} graceful_stop;

/* DRAINING, HOOKS, RELEASING: the stop under way. */
typedef struct stopping_st {
    double deadline; /* kl_now() past which it is cut short */
    uint64_t timer;  /* ...and the loop's timer for it */
    uint64_t start;  /* the deferred start of the Lua side, until it runs */
} stopping_st;

typedef struct part {
    const kl_rt_hooks *hooks;
    void *state;
} part;

struct kl_rt {
    lua_State *L;
    kl_loop *loop;
    kl_conn *conn;
    kl_http *http;
    kl_rt_opts opts;
    size_t mem_used;
    kl_pool pool;      /* the Lua state's small blocks */
    kl_collector gc;   /* which collector runs, by mem_used */
    int memory_binds;  /* script code runs: the memory limit binds */
    part parts[KL_RT_NPARTS];
    int on_synced_ref; /* table of callbacks waiting for sync, or LUA_NOREF */
    graceful_stop graceful;
    kl_rt_phase phase;
    union {
        stopping_st stopping; /* DRAINING, HOOKS, RELEASING */
        int code;             /* STOPPED, CUT_SHORT: the exit code */
    } in;
    char script_name[64];
};

/* ---- the phases --------------------------------------------------------- */

#define NEW KL_RT_NEW
#define LOADING KL_RT_LOADING
#define RUNNING KL_RT_RUNNING
#define DRAINING KL_RT_DRAINING
#define HOOKS KL_RT_SHUTDOWN_HOOKS
#define RELEASING KL_RT_RELEASING
#define STOPPED KL_RT_STOPPED
#define CUT_SHORT KL_RT_CUT_SHORT
#define CLOSED KL_RT_CLOSED

static const char *const phase_names[KL_RT_NPHASES] = {
    [NEW] = "NEW",       [LOADING] = "LOADING", [RUNNING] = "RUNNING",
    [DRAINING] = "DRAINING", [HOOKS] = "HOOKS", [RELEASING] = "RELEASING",
    [STOPPED] = "STOPPED", [CUT_SHORT] = "CUT_SHORT", [CLOSED] = "CLOSED",
};

static const char *const event_names[KL_RT_NEVENTS] = {
    [KL_RT_EV_RUN] = "kl_rt_run",
    [KL_RT_EV_MAIN_ENDED] = "the main chunk ended",
    [KL_RT_EV_MAIN_FAILED] = "the main chunk failed",
    [KL_RT_EV_STOP] = "klua.stop(code)",
    [KL_RT_EV_IDLE] = "nothing left to run",
    [KL_RT_EV_SIGNAL] = "SIGINT/SIGTERM",
    [KL_RT_EV_SIGNAL_GRACEFUL] = "SIGINT/SIGTERM, a graceful stop set",
    [KL_RT_EV_DRAINED] = "the reconciles in flight ended",
    [KL_RT_EV_HOOKS_RAN] = "the hooks ran",
    [KL_RT_EV_DEADLINE] = "the deadline passed",
    [KL_RT_EV_CLOSE] = "kl_rt_free",
};

#define ROW(from, ev, to, then) {from, KL_RT_EV_##ev, to, then}
static const kl_rt_transition table[] = {
    ROW(NEW, RUN, LOADING, "the main chunk runs; informers list, handlers wait"),
    ROW(NEW, SIGNAL, STOPPED, "the script never starts; exit 0"),
    ROW(NEW, CLOSE, CLOSED, "the script did not load, or never ran"),
    ROW(LOADING, MAIN_ENDED, RUNNING, "handlers, timers and klua.on_synced start"),
    ROW(LOADING, MAIN_FAILED, STOPPED, "exit 1"),
    ROW(LOADING, STOP, STOPPED, "exit code"),
    ROW(LOADING, SIGNAL, STOPPED, "every task stops (klua watch); exit 0"),
    ROW(LOADING, SIGNAL_GRACEFUL, DRAINING, "the shutdown starts, within its deadline"),
    ROW(RUNNING, IDLE, STOPPED, "exit 0"),
    ROW(RUNNING, STOP, STOPPED, "exit code"),
    ROW(RUNNING, SIGNAL, STOPPED, "every task stops (klua watch); exit 0"),
    ROW(RUNNING, SIGNAL_GRACEFUL, DRAINING, "the shutdown starts, within its deadline"),
    ROW(DRAINING, MAIN_ENDED, DRAINING, "no handler starts for a script not loaded"),
    ROW(DRAINING, DRAINED, HOOKS, "no handler starts; the on_shutdown hooks run"),
    ROW(DRAINING, STOP, STOPPED, "exit code"),
    ROW(DRAINING, DEADLINE, CUT_SHORT, "every task stops; exit 1"),
    ROW(HOOKS, MAIN_ENDED, HOOKS, ""),
    ROW(HOOKS, HOOKS_RAN, RELEASING, "the Lease and the shards are released"),
    ROW(HOOKS, STOP, STOPPED, "exit code"),
    ROW(HOOKS, DEADLINE, CUT_SHORT, "every task stops; exit 1"),
    ROW(RELEASING, MAIN_ENDED, RELEASING, ""),
    ROW(RELEASING, STOP, STOPPED, "exit code (the shutdown's own: 0)"),
    ROW(RELEASING, DEADLINE, CUT_SHORT, "every task stops; exit 1"),
    ROW(STOPPED, MAIN_ENDED, STOPPED, ""),
    ROW(STOPPED, MAIN_FAILED, STOPPED, "exit 1"),
    ROW(STOPPED, STOP, STOPPED, "exit code"),
    ROW(STOPPED, SIGNAL, STOPPED, "every task stops"),
    ROW(STOPPED, CLOSE, CLOSED, "teardown; nothing new may be made"),
    ROW(CUT_SHORT, MAIN_ENDED, CUT_SHORT, ""),
    ROW(CUT_SHORT, STOP, CUT_SHORT, "exit 1 all the same"),
    ROW(CUT_SHORT, CLOSE, CLOSED, "teardown; nothing new may be made"),
    ROW(CLOSED, STOP, CLOSED, "a __gc handler's: the run is over"),
};
#undef ROW

const kl_rt_transition *kl_rt_transitions(size_t *n) {
    *n = sizeof table / sizeof *table;
    return table;
}

const char *kl_rt_phase_name(kl_rt_phase p) { return p < KL_RT_NPHASES ? phase_names[p] : "?"; }
const char *kl_rt_event_name(kl_rt_event e) { return e < KL_RT_NEVENTS ? event_names[e] : "?"; }

static const kl_rt_transition *find(kl_rt_phase from, kl_rt_event e) {
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (table[i].from == from && table[i].event == e) return &table[i];
    return NULL;
}

/* The parts, made in this order by kl_rt_new (kl_rt_part). */
static void (*const part_init[KL_RT_NPARTS])(kl_rt *) = {
    [KL_RT_TASKS] = kl_task_init,
    [KL_RT_CORE] = kl_lua_klua_init,
    [KL_RT_TIMERS] = kl_lua_loop_init,
    [KL_RT_INFORMERS] = kl_lua_informer_init,
    [KL_RT_QUEUES] = kl_lua_queue_init,
    [KL_RT_ENDPOINTS] = kl_lua_endpoint_init,
    [KL_RT_WEBHOOKS] = kl_lua_webhook_init,
};

void kl_rt_register(kl_rt *rt, kl_rt_part p, const kl_rt_hooks *hooks, void *state) {
    rt->parts[p] = (part){hooks, state};
}

void *kl_rt_state(const kl_rt *rt, kl_rt_part p) { return rt->parts[p].state; }
lua_State *kl_rt_lua(const kl_rt *rt) { return rt->L; }
kl_loop *kl_rt_loop(const kl_rt *rt) { return rt->loop; }
kl_conn *kl_rt_conn(const kl_rt *rt) { return rt->conn; }
kl_http *kl_rt_http(const kl_rt *rt) { return rt->http; }
const kl_rt_opts *kl_rt_options(const kl_rt *rt) { return &rt->opts; }
const char *kl_rt_script_name(const kl_rt *rt) { return rt->script_name; }
size_t kl_rt_memory(const kl_rt *rt) { return rt->mem_used; }
const char *kl_rt_collector(const kl_rt *rt) { return kl_collector_mode_name(rt->gc.mode); }
void kl_rt_bind_memory(kl_rt *rt, int on) { rt->memory_binds = on; }
kl_rt_phase kl_rt_current(const kl_rt *rt) { return rt->phase; }
int kl_rt_closing(const kl_rt *rt) { return rt->phase == CLOSED; }
int kl_rt_ended(const kl_rt *rt) { return rt->phase >= STOPPED; }
int kl_rt_can(const kl_rt *rt, kl_rt_event e) { return find(rt->phase, e) != NULL; }

static int parts_idle(const kl_rt *rt) {
    for (int i = 0; i < KL_RT_NPARTS; i++) {
        const part *p = &rt->parts[i];
        if (p->hooks && p->hooks->idle && !p->hooks->idle(p->state)) return 0;
    }
    return 1;
}

static int parts_synced(const kl_rt *rt) {
    for (int i = 0; i < KL_RT_NPARTS; i++) {
        const part *p = &rt->parts[i];
        if (p->hooks && p->hooks->synced && !p->hooks->synced(p->state)) return 0;
    }
    return 1;
}

kl_rt *kl_rt_of(lua_State *L) {
    void *ud;
    lua_getallocf(L, &ud);
    return ud;
}

static int stopping(kl_rt_phase p) { return p == DRAINING || p == HOOKS || p == RELEASING; }

static const char *signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

static double shutdown_timeout(const kl_rt *rt) {
    double t = rt->opts.ctl.graceful_shutdown_timeout;
    return t > 0 ? t : 30;
}

/* The graceful stop's Lua side, as a task; deferred from the signal,
 * which may be taken inside the count hook. */
static void start_shutdown(kl_loop *loop, void *ud) {
    kl_rt *rt = ud;
    rt->in.stopping.start = 0;
    lua_rawgeti(rt->L, LUA_REGISTRYINDEX, rt->graceful.start_ref);
    lua_pushstring(rt->L, signal_name(kl_loop_signal(loop)));
    kl_task_spawn(rt, NULL, "the graceful shutdown", 1, NULL, NULL);
}

static void on_deadline(kl_loop *loop, void *ud) {
    (void)loop;
    kl_rt *rt = ud;
    rt->in.stopping.timer = 0;
    kl_rt_advance(rt, KL_RT_EV_DEADLINE, 0);
}

void kl_rt_check_deadline(kl_rt *rt) {
    if (stopping(rt->phase) && kl_now() >= rt->in.stopping.deadline)
        kl_rt_advance(rt, KL_RT_EV_DEADLINE, 0);
}

/* What a second SIGINT/SIGTERM does, by phase: where a graceful stop is
 * set (before the first signal is taken) or under way, it exits 1 with a
 * line, as controller-runtime's second signal does (os.Exit(1) in
 * pkg/manager/signals); elsewhere it kills (loop.h). */
static void set_signal_policy(kl_rt *rt) {
    int exits;
    switch (rt->phase) {
    case NEW:
    case LOADING:
    case RUNNING:
        exits = kl_rt_graceful_set(rt);
        break;
    case DRAINING:
    case HOOKS:
    case RELEASING:
    case CUT_SHORT:
        exits = 1;
        break;
    default:
        exits = 0;
    }
    if (exits) kl_loop_on_second_signal(rt->loop, 1, "klua: a second signal: exiting at once, the graceful shutdown cut short");
    else kl_loop_on_second_signal(rt->loop, -1, NULL);
}

/* What the phase left owned: the graceful stop's timers, once it is over. */
static void leave(kl_rt *rt, const kl_rt_transition *t) {
    if (!stopping(t->from) || stopping(t->to)) return;
    kl_loop_cancel(rt->loop, rt->in.stopping.timer);
    kl_loop_cancel(rt->loop, rt->in.stopping.start);
}

static void enter(kl_rt *rt, const kl_rt_transition *t, int code) {
    switch (t->to) {
    case DRAINING: {
        double timeout = shutdown_timeout(rt);
        rt->in.stopping = (stopping_st){
            .deadline = kl_now() + timeout,
            .timer = kl_loop_after(rt->loop, timeout, on_deadline, rt),
            .start = kl_loop_defer(rt->loop, start_shutdown, rt),
        };
        break;
    }
    case STOPPED:
        if (t->event == KL_RT_EV_STOP) rt->in.code = code;
        else if (t->event == KL_RT_EV_MAIN_FAILED) rt->in.code = 1;
        else if (t->from != STOPPED) rt->in.code = 0;
        kl_loop_stop(rt->loop);
        break;
    case CUT_SHORT:
        rt->in.code = 1;
        kl_loop_stop(rt->loop);
        break;
    default:
        break;
    }
}

/* The one way the phase changes: along the table, or klua aborts. It may
 * run inside the count hook (a signal taken there): what it does, and the
 * parts' phase hooks, only set state and schedule work. */
void kl_rt_advance(kl_rt *rt, kl_rt_event e, int code) {
    const kl_rt_transition *t = find(rt->phase, e);
    if (!t) {
        kl_log(KL_LOG_ERROR, "klua", "runtime bug: \"%s\" does not lead from %s; aborting",
               kl_rt_event_name(e), phase_names[rt->phase]);
        abort();
    }
    kl_vlog(2, "klua", "%s -> %s: %s", phase_names[t->from], phase_names[t->to], event_names[e]);
    leave(rt, t);
    rt->phase = t->to;
    enter(rt, t, code);
    if (rt->loop) set_signal_policy(rt);
    for (int i = 0; i < KL_RT_NPARTS; i++) {
        const part *p = &rt->parts[i];
        if (p->hooks && p->hooks->phase) p->hooks->phase(p->state, t);
    }
}

/* The first SIGINT/SIGTERM, taken by the loop or the count hook. */
static void on_signal(kl_loop *loop, void *ud) {
    (void)loop;
    kl_rt *rt = ud;
    int graceful = kl_rt_graceful_set(rt) && (rt->phase == LOADING || rt->phase == RUNNING);
    kl_rt_advance(rt, graceful ? KL_RT_EV_SIGNAL_GRACEFUL : KL_RT_EV_SIGNAL, 0);
}

/* The memory limit binds only while script code runs, so the host's own
 * pushes (views, threads) can never fail outside a protected call. */
static void *rt_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    kl_rt *rt = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        kl_pool_realloc_fast(&rt->pool, ptr, osize, 0);
        rt->mem_used -= old;
        kl_collector_note(&rt->gc, rt->mem_used);
        return NULL;
    }
    if (rt->memory_binds && rt->opts.memory_limit && nsize > old &&
        rt->mem_used - old + nsize > rt->opts.memory_limit)
        return NULL;
    void *p = kl_pool_realloc_fast(&rt->pool, ptr, osize, nsize);
    if (p) {
        rt->mem_used = rt->mem_used - old + nsize;
        kl_collector_note(&rt->gc, rt->mem_used);
    }
    return p;
}

static void preload(lua_State *L, const char *name, lua_CFunction open) {
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, open);
    lua_setfield(L, -2, name);
    lua_pop(L, 1);
}

/* The klua.core opener: a table every part adds its functions to. */
static int open_core(lua_State *L) {
    kl_rt *rt = kl_rt_of(L);
    lua_newtable(L);
    for (int i = 0; i < KL_RT_NPARTS; i++) {
        const part *p = &rt->parts[i];
        if (p->hooks && p->hooks->open) p->hooks->open(p->state, L);
    }
    return 1;
}

static int open_state(lua_State *L) {
    luaL_openlibs(L);
    kl_collector_open(&kl_rt_of(L)->gc, L);
    kl_task_open_guards(L);
    kl_view_open(L);
    kl_view_guard_debug(L);
    preload(L, "cjson", luaopen_cjson);
    preload(L, "klua.core", open_core);
    kl_embedded_add_searcher(L);
    lua_getglobal(L, "require");
    lua_pushstring(L, "klua");
    lua_call(L, 1, 1);
    lua_setglobal(L, "klua");
    return 0;
}

kl_rt *kl_rt_new(const kl_rt_opts *opts, char *err, size_t errlen) {
    kl_rt *rt = calloc(1, sizeof *rt);
    if (!rt) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    rt->opts = *opts;
    rt->on_synced_ref = LUA_NOREF;
    rt->graceful.start_ref = rt->graceful.describe_ref = LUA_NOREF;
    snprintf(rt->script_name, sizeof rt->script_name, "script");
    rt->conn = kl_conn_load(&opts->conn, err, errlen);
    if (!rt->conn) goto fail;
    rt->loop = kl_loop_new(kl_http_transfer_done);
    if (rt->loop) kl_conn_attach(rt->conn, rt->loop);
    if (rt->loop) kl_loop_on_signal(rt->loop, on_signal, rt);
    rt->http = rt->loop ? kl_http_new(rt->loop, rt->conn) : NULL;
    rt->L = lua_newstate(rt_alloc, rt);
    if (!rt->loop || !rt->http || !rt->L) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    kl_collector_init(&rt->gc, rt->L, rt->loop, &rt->mem_used);
    /* Threads copy the main thread's extra space: NULL marks them (and the
     * coroutines a script creates) as no task of ours. */
    *(kl_task **)lua_getextraspace(rt->L) = NULL;
    for (int i = 0; i < KL_RT_NPARTS; i++) part_init[i](rt);
    lua_pushcfunction(rt->L, open_state);
    if (lua_pcall(rt->L, 0, 0, 0) != LUA_OK) {
        snprintf(err, errlen, "cannot start Lua: %s", lua_tostring(rt->L, -1));
        goto fail;
    }
    return rt;
fail:
    kl_rt_free(rt);
    return NULL;
}

static void close_part(kl_rt *rt, kl_rt_part which) {
    const part *p = &rt->parts[which];
    if (p->hooks && p->hooks->close) p->hooks->close(p->state);
}

/* The one teardown order. Script code may still run in it: the __gc
 * handlers that lua_close calls. So first the endpoints and the webhook
 * server (they call into Lua), then everything that could start script code or that a handle
 * points to is closed (timers, informers with their requests, queues;
 * their handles then raise "closed"), then the requests of API calls,
 * then the tasks, whose waits can no longer end (and the run state, so
 * that __gc handlers start with a budget of their own); then lua_close,
 * while making anything new is refused (CLOSED) and the loop and the
 * tasks' run state, which the count hook reads, still exist; then what is
 * left of the parts; the loop, which only holds pointers to what is gone
 * by now, and the connection last. */
void kl_rt_free(kl_rt *rt) {
    if (!rt) return;
    kl_rt_advance(rt, KL_RT_EV_CLOSE, 0);
    rt->memory_binds = 0;
    close_part(rt, KL_RT_ENDPOINTS);
    close_part(rt, KL_RT_WEBHOOKS);
    close_part(rt, KL_RT_TIMERS);
    close_part(rt, KL_RT_INFORMERS);
    close_part(rt, KL_RT_QUEUES);
    kl_http_free(rt->http);
    if (rt->conn) kl_conn_detach(rt->conn);
    close_part(rt, KL_RT_TASKS);
    kl_collector_close(&rt->gc);
    if (rt->L) lua_close(rt->L);
    kl_pool_release(&rt->pool);
    for (int i = 0; i < KL_RT_NPARTS; i++) {
        const part *p = &rt->parts[i];
        if (p->hooks && p->hooks->free) p->hooks->free(p->state);
    }
    kl_loop_free(rt->loop);
    kl_conn_free(rt->conn);
    free(rt);
}

void kl_rt_check_idle(kl_rt *rt) {
    if (rt->phase == RUNNING && parts_idle(rt)) kl_rt_advance(rt, KL_RT_EV_IDLE, 0);
}

int kl_rt_stop_signal(const kl_rt *rt) { return kl_loop_signal(rt->loop); }

void kl_rt_on_synced(lua_State *L, int idx) {
    kl_rt *rt = kl_rt_of(L);
    idx = lua_absindex(L, idx);
    if (rt->on_synced_ref == LUA_NOREF) {
        lua_newtable(L);
        rt->on_synced_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, rt->on_synced_ref); /* stack: ..., waiting */
    lua_pushvalue(L, idx);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
    lua_pop(L, 1);
    kl_rt_check_synced(rt, L);
}

void kl_rt_check_synced(kl_rt *rt, lua_State *from) {
    if (rt->phase != RUNNING || rt->on_synced_ref == LUA_NOREF || !parts_synced(rt)) return;
    lua_State *L = rt->L;
    int ref = rt->on_synced_ref;
    rt->on_synced_ref = LUA_NOREF;
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref); /* stack: waiting */
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
    lua_Integer n = (lua_Integer)luaL_len(L, -1);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i); /* stack: waiting, fn; the task pops fn */
        kl_task_spawn(rt, from, "klua.on_synced callback", 0, NULL, NULL);
    }
    lua_pop(L, 1);
}

/* Sets klua.core.args to the script's arguments. */
static void set_args(kl_rt *rt, int argc, char **argv) {
    lua_State *L = rt->L;
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getfield(L, -1, "klua.core"); /* stack: loaded, core */
    lua_createtable(L, argc, 0);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "args");
    lua_pop(L, 2);
}

int kl_rt_graceful_set(const kl_rt *rt) { return rt->graceful.start_ref != LUA_NOREF; }

void kl_rt_graceful(kl_rt *rt, lua_State *L) {
    rt->graceful.describe_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    rt->graceful.start_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    set_signal_policy(rt);
}

/* One error line naming what the stop was still waiting for, from the
 * describe function (klua's own: it runs outside every task). */
static void report_timed_out(kl_rt *rt) {
    lua_State *L = rt->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, rt->graceful.describe_ref);
    const char *what = lua_pcall(L, 0, 1, 0) == LUA_OK && lua_isstring(L, -1) ? lua_tostring(L, -1)
                                                                                 : "(unknown)";
    kl_log(KL_LOG_ERROR, "klua", "shutdown timed out after %gs (--graceful-shutdown-timeout); still running: %s",
           shutdown_timeout(rt), what);
    lua_pop(L, 1);
}

/* A main chunk cut short by a signal ended: it did not fail. */
static void on_main_done(void *ud, kl_task *t, kl_task_end end) {
    (void)t;
    kl_rt *rt = ud;
    int failed = end != KL_TASK_RETURNED && !kl_loop_signal(rt->loop);
    kl_rt_advance(rt, failed ? KL_RT_EV_MAIN_FAILED : KL_RT_EV_MAIN_ENDED, 0);
    kl_rt_check_synced(rt, NULL);
}

static void set_script_name(kl_rt *rt, const char *path) {
    const char *base = path ? strrchr(path, '/') : NULL;
    snprintf(rt->script_name, sizeof rt->script_name, "%s", base ? base + 1 : path ? path : "script");
}

int kl_rt_run(kl_rt *rt, const char *path, const char *chunk, int argc, char **argv) {
    lua_State *L = rt->L;
    /* A signal before the run: the script never starts. */
    if (rt->phase == STOPPED) return rt->in.code;
    set_script_name(rt, path ? path : "-e");
    int st = chunk ? luaL_loadbuffer(L, chunk, strlen(chunk), path ? path : "=(command line)")
                   : luaL_loadfile(L, path);
    if (st != LUA_OK) {
        if (kl_log_format_json()) kl_log(KL_LOG_ERROR, "klua", "%s", lua_tostring(L, -1));
        else fprintf(stderr, "klua: %s\n", lua_tostring(L, -1));
        lua_pop(L, 1);
        return 1;
    }
    set_args(rt, argc, argv);
    for (int i = 0; i < argc; i++) lua_pushstring(L, argv[i]);
    kl_rt_advance(rt, KL_RT_EV_RUN, 0);
    kl_task_spawn(rt, NULL, "the script's main chunk", argc, on_main_done, rt);
    kl_rt_check_idle(rt);
    if (!kl_rt_ended(rt)) kl_loop_run(rt->loop);
    /* controller-runtime's manager returns an error when its runnables
     * outlast the grace period. */
    if (rt->phase == CUT_SHORT) report_timed_out(rt);
    return rt->in.code;
}
