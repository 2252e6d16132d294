/* task.c - script code in coroutines on the loop; see task.h. */
#include "lua/task.h"

#include <lauxlib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/xalloc.h"

#define POOL_MAX 64 /* idle threads kept; a burst beyond is freed */
/* Instructions between two looks for a signal: a read() of the signalfd
 * per ~1 ms of Lua at most, which costs nothing measurable. */
#define HOOK_PERIOD 100000

/* Why every further instruction of the running task fails. */
enum { STOPPED_BY_BUDGET = 1, STOPPED_BY_SIGNAL };

/* What runs now: the innermost task being resumed. Saved and restored
 * around every resume, so that a task started from inside another one
 * leaves the outer one's state as it found it. */
typedef struct run_state {
    kl_task *task;      /* NULL while no task runs */
    long used;          /* instructions run since the resume */
    int stopped;        /* 0 or STOPPED_BY_*: every instruction fails */
    int enforce_memory; /* the memory limit binds only while script code runs */
    unsigned signals;   /* signals that had come when the resume began */
} run_state;

/* The runtime's part KL_RT_TASKS. */
typedef struct tasks {
    kl_rt *rt;
    lua_State *L;
    run_state cur;
    kl_task *all;    /* every task alive, for the final clean-up */
    kl_task **pool;  /* finished tasks kept for reuse with their threads */
    size_t npool, cappool;
    size_t suspended; /* tasks waiting on I/O or a timer */
    unsigned long errors;
} tasks;

static tasks *tasks_of(const kl_rt *rt) { return kl_rt_state(rt, KL_RT_TASKS); }

/* The run state changed: the memory limit binds as it says. */
static void set_cur(tasks *ts, run_state cur) {
    ts->cur = cur;
    kl_rt_bind_memory(ts->rt, cur.enforce_memory);
}

struct kl_task {
    tasks *ts;
    lua_State *co;
    int ref; /* keeps co alive in the registry */
    char name[200]; /* as long as the longest a caller makes: an informer's handler, a transform */
    kl_task_done_fn done;
    void *ud;
    int waiting;
    int reconciling; /* a graceful stop lets it finish (core.reconciling) */
    kl_task *prev, *next; /* every task of the runtime, pooled or not */
};

kl_task *kl_task_current(lua_State *L) { return *(kl_task **)lua_getextraspace(L); }
void kl_task_set_reconciling(kl_task *t, int on) { t->reconciling = on; }
lua_State *kl_task_thread(kl_task *t) { return t->co; }

kl_task *kl_task_check_wait(lua_State *L, const char *what) {
    kl_task *t = kl_task_current(L);
    if (!t)
        luaL_error(L, "%s must be called from the script's main chunk, a handler, a timer or a "
                      "reconcile function, not from a coroutine the script created", what);
    if (!lua_isyieldable(L))
        luaL_error(L, "%s cannot wait inside a function that C code calls without letting it "
                      "wait (a __gc or __close handler, a table.sort comparison, a string.gsub "
                      "replacement): wait in the handler itself", what);
    return t;
}

/* A task from the pool, or a new one. Its thread is the host's, as a view
 * is: made with --memory-limit lifted, as a task started inside another
 * (klua.on_synced in a timer) would otherwise raise on the main thread,
 * which no call protects. So a task always starts (docs/architecture.md,
 * "Out of memory"). */
static kl_task *task_get(tasks *ts) {
    if (ts->npool) return ts->pool[--ts->npool];
    kl_rt_bind_memory(ts->rt, 0);
    lua_State *co = lua_newthread(ts->L);
    int ref = luaL_ref(ts->L, LUA_REGISTRYINDEX);
    kl_rt_bind_memory(ts->rt, ts->cur.enforce_memory);
    kl_task *t = kl_xcalloc(1, sizeof *t);
    t->ts = ts;
    t->co = co;
    t->ref = ref;
    *(kl_task **)lua_getextraspace(co) = t;
    t->next = ts->all;
    if (ts->all) ts->all->prev = t;
    ts->all = t;
    return t;
}

static void task_destroy(kl_task *t) {
    *(kl_task **)lua_getextraspace(t->co) = NULL;
    luaL_unref(t->ts->L, LUA_REGISTRYINDEX, t->ref);
    if (t->prev) t->prev->next = t->next;
    else t->ts->all = t->next;
    if (t->next) t->next->prev = t->prev;
    free(t);
}

static void task_put(kl_task *t) {
    tasks *ts = t->ts;
    if (ts->npool == ts->cappool && ts->cappool < POOL_MAX) {
        kl_task **p = kl_buf_try_grow(ts->pool, &ts->cappool, ts->npool + 1, sizeof *p, 8);
        if (p) ts->pool = p;
    }
    if (ts->npool < ts->cappool) ts->pool[ts->npool++] = t;
    else task_destroy(t);
}


static const char *signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

/* Instructions to run before the hook's next call: what is left of the
 * budget, at most a period, so the budget binds exactly on the task's own
 * thread. */
static int next_count(const tasks *ts) {
    long budget = kl_rt_options(ts->rt)->instruction_budget;
    long left = budget > 0 ? budget - ts->cur.used : HOOK_PERIOD;
    return left < 1 ? 1 : left > HOOK_PERIOD ? HOOK_PERIOD : (int)left;
}

/* Whether a signal stops what runs now. Without a graceful stop, any
 * signal does. With one (kl_rt_graceful) the first signal stops the task
 * that was running when it came, unless that is a reconcile the stop waits
 * for, and nothing that starts later; once the stop is cut short (a second
 * signal, its timeout) every task stops, a reconcile spinning past the
 * timeout included. Code outside tasks is then the runtime's own (the
 * endpoint's answers, the report of a stop cut short). At close the first
 * signal is in hand already, and a second one ends the process: finalizers
 * are left to the budget. */
static int stopped_by_signal(kl_rt *rt, const run_state *c) {
    kl_loop *loop = kl_rt_loop(rt);
    if (kl_rt_closing(rt) || !kl_loop_poll_signal(loop)) return 0;
    if (!kl_rt_graceful_set(rt)) return 1;
    if (!c->task) return 0;
    if (kl_rt_shutdown_overdue(rt)) return 1;
    return kl_loop_signal_count(loop) > c->signals && !c->task->reconciling;
}

/* Runs on every thread, the coroutines a script creates included (they
 * inherit it), and counts for whatever the run state says runs now. */
static void count_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    kl_rt *rt = kl_rt_of(L);
    tasks *ts = tasks_of(rt);
    long budget = kl_rt_options(rt)->instruction_budget;
    run_state *c = &ts->cur;
    if (!c->stopped) {
        c->used += lua_gethookcount(L);
        if (stopped_by_signal(rt, c)) c->stopped = STOPPED_BY_SIGNAL;
        else if (budget > 0 && c->used >= budget) c->stopped = STOPPED_BY_BUDGET;
    }
    if (!c->stopped) {
        lua_sethook(L, count_hook, LUA_MASKCOUNT, next_count(ts));
        return;
    }
    /* The error is catchable, so the hook fires on every instruction from
     * now on: a pcall that caught it fails again at its caller's next one,
     * on the task's thread too when a coroutine of the script ran out. */
    lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
    if (c->task && c->task->co != L) lua_sethook(c->task->co, count_hook, LUA_MASKCOUNT, 1);
    if (c->stopped == STOPPED_BY_SIGNAL)
        luaL_error(L, "stopped: klua is stopping on %s", signal_name(kl_loop_signal(kl_rt_loop(rt))));
    luaL_error(L, "stopped after running past its instruction budget of %I instructions "
                  "(raise it with --instruction-budget)", (lua_Integer)budget);
}

static int tasks_idle(void *state) {
    tasks *ts = state;
    return !ts->cur.task && !ts->suspended;
}

/* Every task, waiting or pooled, is freed: their waits can no longer end.
 * The run state starts afresh, so __gc handlers have a budget of their own. */
static void tasks_close(void *state) {
    tasks *ts = state;
    set_cur(ts, (run_state){0});
    while (ts->all) task_destroy(ts->all);
    ts->npool = 0;
    free(ts->pool);
    ts->pool = NULL;
    ts->cappool = 0;
}

void kl_task_init(kl_rt *rt) {
    static const kl_rt_hooks hooks = {.idle = tasks_idle, .close = tasks_close, .free = free};
    tasks *ts = kl_xcalloc(1, sizeof *ts);
    ts->rt = rt;
    ts->L = kl_rt_lua(rt);
    kl_rt_register(rt, KL_RT_TASKS, &hooks, ts);
    lua_sethook(ts->L, count_hook, LUA_MASKCOUNT, HOOK_PERIOD);
}

unsigned long kl_task_errors(const kl_rt *rt) { return tasks_of(rt)->errors; }
size_t kl_task_suspended(const kl_rt *rt) { return tasks_of(rt)->suspended; }

/* The message handler of an xpcall, wrapped: an error raised by the count
 * hook calls the handler with hooks off, so once the task is stopped the
 * script's handler is not called at all and the error passes unchanged. */
static int guarded_handler(lua_State *L) {
    if (tasks_of(kl_rt_of(L))->cur.stopped) return 1;
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1); /* stack: handler, message */
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static int guard_handler(lua_State *L) {
    lua_settop(L, 1);
    lua_pushcclosure(L, guarded_handler, 1);
    return 1;
}

/* xpcall stays a Lua function tail-calling the real one, so that the
 * protected function can still wait (lua_pcallk underneath). */
static const char xpcall_chunk[] =
    "local xpcall, guard = xpcall, ...\n"
    "return function(f, msgh, ...)\n"
    "  if type(msgh) ~= 'function' then return xpcall(f, msgh, ...) end\n"
    "  return xpcall(f, guard(msgh), ...)\n"
    "end\n";

void kl_task_open_guards(lua_State *L) {
    if (luaL_loadbuffer(L, xpcall_chunk, sizeof xpcall_chunk - 1, "=xpcall") != LUA_OK) lua_error(L);
    lua_pushcfunction(L, guard_handler);
    lua_call(L, 1, 1);
    lua_setglobal(L, "xpcall");
}

static void report_failure(kl_task *t, int status) {
    tasks *ts = t->ts;
    const kl_rt_opts *opts = kl_rt_options(ts->rt);
    const char *script = kl_rt_script_name(ts->rt);
    lua_State *co = t->co;
    const char *msg = lua_tostring(co, -1);
    char buf[160];
    if (!msg && luaL_getmetafield(co, -1, "__tostring") != LUA_TNIL) {
        lua_pop(co, 1);
        msg = luaL_tolstring(co, -1, NULL); /* an error table that reads well */
    } else if (!msg) {
        snprintf(buf, sizeof buf, "(error object is a %s value)", luaL_typename(co, -1));
        msg = buf;
    }
    if (status == LUA_ERRMEM && opts->memory_limit) {
        lua_pushfstring(co, "%s: not enough memory: the Lua state reached its limit of %d MiB "
                            "(raise it with --memory-limit)", t->name,
                        (int)(opts->memory_limit >> 20));
        kl_log(KL_LOG_ERROR, script, "%s", lua_tostring(co, -1));
    } else {
        luaL_traceback(ts->L, co, msg, 0);
        kl_log(KL_LOG_ERROR, script, "%s failed: %s", t->name, lua_tostring(ts->L, -1));
        lua_pop(ts->L, 1);
    }
    ts->errors++;
}

/* Ends a task: back to the pool (or freed, when its thread cannot be used
 * again), then its done callback. */
static void finish(kl_task *t, int ok, int reuse) {
    kl_task_done_fn done = t->done;
    void *ud = t->ud;
    kl_rt *rt = t->ts->rt;
    t->done = NULL;
    t->ud = NULL;
    if (reuse) task_put(t);
    else task_destroy(t);
    if (done) done(ud, t, ok);
    kl_rt_check_idle(rt);
}

/* Resumes t from thread from (NULL from the loop); returns 1 if it is
 * waiting afterwards. A task may start another from inside one of its C
 * calls (klua.on_synced in a timer): the run state of the outer one is put
 * back as it was when the inner one returns or waits. */
static int run(kl_task *t, lua_State *from, int nargs) {
    tasks *ts = t->ts;
    lua_State *co = t->co;
    run_state outer = ts->cur;
    set_cur(ts, (run_state){.task = t, .enforce_memory = 1,
                        .signals = kl_loop_signal_count(kl_rt_loop(ts->rt))});
    lua_sethook(co, count_hook, LUA_MASKCOUNT, next_count(ts));
    int nres;
    int status = lua_resume(co, from, nargs, &nres);
    int stopped = ts->cur.stopped;
    /* Outside every task the count starts again with each task's end. */
    set_cur(ts, outer.task ? outer : (run_state){0});
    if (status == LUA_YIELD && t->waiting) return 1;
    if (status == LUA_OK) {
        lua_settop(co, 0);
        finish(t, 1, 1);
        return 0;
    }
    /* The report is the host's: no limit binds it, as none does at the top
     * level, though the task that started this one runs under one. */
    kl_rt_bind_memory(ts->rt, 0);
    if (status == LUA_YIELD) {
        lua_settop(co, 0);
        lua_pushstring(co, "coroutine.yield was called outside a coroutine the script created");
        status = LUA_ERRRUN;
    }
    if (stopped == STOPPED_BY_SIGNAL)
        kl_log(KL_LOG_INFO, kl_rt_script_name(ts->rt), "%s interrupted: klua is stopping on %s",
               t->name, signal_name(kl_loop_signal(kl_rt_loop(ts->rt))));
    else report_failure(t, status);
    kl_rt_bind_memory(ts->rt, ts->cur.enforce_memory);
    if (stopped) {
        /* The error left the hook's call with hooks off on this thread
         * (Lua turns them back on only in a pcall that catches): its
         * __close handlers would run unchecked and a later task on it
         * would never be stopped. The thread is dropped unreset. */
        finish(t, 0, 0);
        return 0;
    }
    lua_resetthread(co);
    finish(t, 0, 1);
    return 0;
}

int kl_task_spawn(kl_rt *rt, lua_State *from, const char *name, int nargs, kl_task_done_fn done,
                  void *ud) {
    tasks *ts = tasks_of(rt);
    if (kl_loop_stopping(kl_rt_loop(rt))) {
        lua_pop(ts->L, nargs + 1);
        if (done) done(ud, NULL, 0);
        return 0;
    }
    kl_task *t = task_get(ts);
    size_t n = strlen(name);
    if (n >= sizeof t->name) n = sizeof t->name - 1;
    memcpy(t->name, name, n); /* not snprintf: a handler call costs little more */
    t->name[n] = 0;
    t->done = done;
    t->ud = ud;
    t->waiting = 0;
    t->reconciling = 0;
    lua_xmove(ts->L, t->co, nargs + 1); /* the task's stack: fn, args */
    return run(t, from, nargs);
}

void kl_task_suspend(kl_task *t) {
    t->waiting = 1;
    t->ts->suspended++;
}

void kl_task_resume(kl_task *t, int nres) {
    t->waiting = 0;
    t->ts->suspended--;
    run(t, NULL, nres);
}
