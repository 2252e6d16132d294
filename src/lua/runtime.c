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
#include "lua/embedded.h"
#include "lua/lua_endpoint.h"
#include "lua/lua_informer.h"
#include "lua/lua_klua.h"
#include "lua/lua_queue.h"
#include "lua/task.h"
#include "lua/view.h"


/* A graceful stop (controller-runtime's): with start_ref set, the first
 * SIGINT/SIGTERM does not stop the loop but starts that Lua function as a
 * task (lua/klua/shutdown.lua), which ends the run with klua.stop when the
 * reconciles in flight, the on_shutdown hooks and the Lease's release are
 * done; the timeout cuts it short, and a second signal ends the process at
 * once with status 1 (loop.h), as controller-runtime's second signal does
 * (os.Exit(1) in pkg/manager/signals). */
typedef struct graceful_stop {
    int start_ref;    /* function(signal name), or LUA_NOREF: no graceful stop */
    int describe_ref; /* function() -> what still runs, for the report */
    double deadline;  /* kl_now() past which the stop is cut short; 0 before the signal */
    uint64_t timer;
    int timed_out;    /* the deadline passed: the stop was cut short */
} graceful_stop;

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
    int memory_binds;  /* script code runs: the memory limit binds */
    part parts[KL_RT_NPARTS];
    int on_synced_ref; /* table of callbacks waiting for sync, or LUA_NOREF */
    graceful_stop shutdown;
    int exit_code;
    int script_failed;
    int main_done;
    int running; /* inside kl_rt_run */
    int closing; /* kl_rt_free has begun: nothing new may be made */
    char script_name[64];
};

/* The parts, made in this order by kl_rt_new (kl_rt_part). */
static void (*const part_init[KL_RT_NPARTS])(kl_rt *) = {
    [KL_RT_TASKS] = kl_task_init,
    [KL_RT_CORE] = kl_lua_klua_init,
    [KL_RT_INFORMERS] = kl_lua_informer_init,
    [KL_RT_QUEUES] = kl_lua_queue_init,
    [KL_RT_ENDPOINTS] = kl_lua_endpoint_init,
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
int kl_rt_closing(const kl_rt *rt) { return rt->closing; }
int kl_rt_started(const kl_rt *rt) { return rt->main_done; }
void kl_rt_bind_memory(kl_rt *rt, int on) { rt->memory_binds = on; }

void kl_rt_exit(kl_rt *rt, int code) {
    rt->exit_code = code;
    kl_loop_stop(rt->loop);
}

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

/* The memory limit binds only while script code runs, so the host's own
 * pushes (views, threads) can never fail outside a protected call. */
static void *rt_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    kl_rt *rt = ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        kl_pool_realloc(&rt->pool, ptr, osize, 0);
        rt->mem_used -= old;
        return NULL;
    }
    if (rt->memory_binds && rt->opts.memory_limit && nsize > old &&
        rt->mem_used - old + nsize > rt->opts.memory_limit)
        return NULL;
    void *p = kl_pool_realloc(&rt->pool, ptr, osize, nsize);
    if (p) rt->mem_used = rt->mem_used - old + nsize;
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
    rt->shutdown.start_ref = rt->shutdown.describe_ref = LUA_NOREF;
    snprintf(rt->script_name, sizeof rt->script_name, "script");
    rt->conn = kl_conn_load(&opts->conn, err, errlen);
    if (!rt->conn) goto fail;
    rt->loop = kl_loop_new(kl_http_transfer_done);
    if (rt->loop) kl_conn_attach(rt->conn, rt->loop);
    rt->http = rt->loop ? kl_http_new(rt->loop, rt->conn) : NULL;
    rt->L = lua_newstate(rt_alloc, rt);
    if (!rt->loop || !rt->http || !rt->L) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
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
 * handlers that lua_close calls. So first the endpoints (they call into
 * Lua), then everything that could start script code or that a handle
 * points to is closed (timers, informers with their requests, queues;
 * their handles then raise "closed"), then the requests of API calls,
 * then the tasks, whose waits can no longer end (and the run state, so
 * that __gc handlers start with a budget of their own); then lua_close,
 * while making anything new is refused (rt->closing) and the loop and the
 * tasks' run state, which the count hook reads, still exist; then what is
 * left of the parts; the loop, which only holds pointers to what is gone
 * by now, and the connection last. */
void kl_rt_free(kl_rt *rt) {
    if (!rt) return;
    rt->closing = 1;
    rt->memory_binds = 0;
    close_part(rt, KL_RT_ENDPOINTS);
    close_part(rt, KL_RT_CORE);
    close_part(rt, KL_RT_INFORMERS);
    close_part(rt, KL_RT_QUEUES);
    kl_http_free(rt->http);
    if (rt->conn) kl_conn_detach(rt->conn);
    close_part(rt, KL_RT_TASKS);
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
    if (rt->running && rt->main_done && parts_idle(rt)) kl_loop_stop(rt->loop);
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
    if (rt->running) kl_rt_check_synced(rt, L);
}

void kl_rt_check_synced(kl_rt *rt, lua_State *from) {
    if (!rt->main_done || rt->on_synced_ref == LUA_NOREF || !parts_synced(rt)) return;
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

static const char *signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

/* Nothing more runs: the loop stops and kl_rt_run reports what was left. */
static void time_out(kl_rt *rt) {
    rt->shutdown.timed_out = 1;
    kl_loop_stop(rt->loop);
}

int kl_rt_shutdown_overdue(kl_rt *rt) {
    if (!rt->shutdown.timed_out && rt->shutdown.deadline > 0 && kl_now() >= rt->shutdown.deadline)
        time_out(rt);
    return rt->shutdown.timed_out;
}

static void on_shutdown_deadline(kl_loop *loop, void *ud) {
    (void)loop;
    kl_rt *rt = ud;
    rt->shutdown.timer = 0;
    time_out(rt);
}

static void start_shutdown(kl_loop *loop, void *ud) {
    kl_rt *rt = ud;
    lua_rawgeti(rt->L, LUA_REGISTRYINDEX, rt->shutdown.start_ref);
    lua_pushstring(rt->L, signal_name(kl_loop_signal(loop)));
    kl_task_spawn(rt, NULL, "the graceful shutdown", 1, NULL, NULL);
}

static double shutdown_timeout(const kl_rt *rt) {
    double t = rt->opts.ctl.graceful_shutdown_timeout;
    return t > 0 ? t : 30;
}

/* May run inside the count hook (kl_loop_poll_signal): it only schedules. */
static void on_signal(kl_loop *loop, void *ud) {
    kl_rt *rt = ud;
    rt->shutdown.deadline = kl_now() + shutdown_timeout(rt);
    rt->shutdown.timer = kl_loop_after(loop, shutdown_timeout(rt), on_shutdown_deadline, rt);
    kl_loop_defer(loop, start_shutdown, rt);
}

int kl_rt_graceful_set(const kl_rt *rt) { return rt->shutdown.start_ref != LUA_NOREF; }

void kl_rt_graceful(kl_rt *rt, lua_State *L) {
    rt->shutdown.describe_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    rt->shutdown.start_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    kl_loop_on_signal(rt->loop, on_signal, rt);
    kl_loop_on_second_signal(rt->loop, 1, "klua: a second signal: exiting at once, the graceful shutdown cut short");
}

/* One error line naming what the stop was still waiting for, from the
 * describe function (klua's own: it runs outside every task). */
static void report_timed_out(kl_rt *rt) {
    lua_State *L = rt->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, rt->shutdown.describe_ref);
    const char *what = lua_pcall(L, 0, 1, 0) == LUA_OK && lua_isstring(L, -1) ? lua_tostring(L, -1)
                                                                                 : "(unknown)";
    kl_log(KL_LOG_ERROR, "klua", "shutdown timed out after %gs (--graceful-shutdown-timeout); still running: %s",
           shutdown_timeout(rt), what);
    lua_pop(L, 1);
}

static void on_main_done(void *ud, kl_task *t, int ok) {
    (void)t;
    kl_rt *rt = ud;
    rt->main_done = 1;
    for (int i = 0; i < KL_RT_NPARTS; i++) {
        const part *p = &rt->parts[i];
        if (p->hooks && p->hooks->started) p->hooks->started(p->state);
    }
    if (ok) kl_rt_check_synced(rt, NULL);
    /* Cut short by a signal is a stop, not a failure. */
    if (!ok && !kl_loop_signal(rt->loop)) {
        rt->script_failed = 1;
        kl_loop_stop(rt->loop);
    }
}
static void set_script_name(kl_rt *rt, const char *path) {
    const char *base = path ? strrchr(path, '/') : NULL;
    snprintf(rt->script_name, sizeof rt->script_name, "%s", base ? base + 1 : path ? path : "script");
}

int kl_rt_run(kl_rt *rt, const char *path, const char *chunk, int argc, char **argv) {
    lua_State *L = rt->L;
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
    rt->running = 1;
    kl_task_spawn(rt, NULL, "the script's main chunk", argc, on_main_done, rt);
    if (!rt->script_failed) {
        kl_rt_check_idle(rt);
        if (!kl_loop_stopping(rt->loop)) kl_loop_run(rt->loop);
    }
    rt->running = 0;
    if (rt->shutdown.timer) kl_loop_cancel(rt->loop, rt->shutdown.timer);
    /* controller-runtime's manager returns an error when its runnables
     * outlast the grace period. */
    if (rt->shutdown.timed_out) {
        report_timed_out(rt);
        return 1;
    }
    if (rt->script_failed) return 1;
    return rt->exit_code;
}
