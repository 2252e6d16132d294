/* task.c - script code in coroutines on the loop; see task.h. */
#include "lua/task.h"

#include <lauxlib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

#define POOL_MAX 64 /* idle threads kept; a burst beyond is freed */
/* Instructions between two looks for a signal: a read() of the signalfd
 * per ~1 ms of Lua at most, which costs nothing measurable. */
#define HOOK_PERIOD 100000

struct kl_task {
    kl_rt *rt;
    lua_State *co;
    int ref; /* keeps co alive in the registry */
    char name[96];
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

static kl_task *task_get(kl_rt *rt) {
    if (rt->npool) return rt->pool[--rt->npool];
    kl_task *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->rt = rt;
    t->co = lua_newthread(rt->L);
    *(kl_task **)lua_getextraspace(t->co) = t;
    t->ref = luaL_ref(rt->L, LUA_REGISTRYINDEX);
    t->next = rt->tasks;
    if (rt->tasks) rt->tasks->prev = t;
    rt->tasks = t;
    return t;
}

static void task_destroy(kl_task *t) {
    *(kl_task **)lua_getextraspace(t->co) = NULL;
    luaL_unref(t->rt->L, LUA_REGISTRYINDEX, t->ref);
    if (t->prev) t->prev->next = t->next;
    else t->rt->tasks = t->next;
    if (t->next) t->next->prev = t->prev;
    free(t);
}

static void task_put(kl_task *t) {
    kl_rt *rt = t->rt;
    if (rt->npool == rt->cappool && rt->cappool < POOL_MAX) {
        size_t cap = rt->cappool ? rt->cappool * 2 : 8;
        kl_task **p = realloc(rt->pool, cap * sizeof *p);
        if (p) {
            rt->pool = p;
            rt->cappool = cap;
        }
    }
    if (rt->npool < rt->cappool) rt->pool[rt->npool++] = t;
    else task_destroy(t);
}

void kl_task_pool_free(kl_rt *rt) {
    while (rt->tasks) task_destroy(rt->tasks);
    rt->npool = 0;
    free(rt->pool);
    rt->pool = NULL;
    rt->cappool = 0;
}

static const char *signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

/* Instructions to run before the hook's next call: what is left of the
 * budget, at most a period, so the budget binds exactly on the task's own
 * thread. */
static int next_count(const kl_rt *rt) {
    long budget = rt->opts.instruction_budget;
    long left = budget > 0 ? budget - rt->cur.used : HOOK_PERIOD;
    return left < 1 ? 1 : left > HOOK_PERIOD ? HOOK_PERIOD : (int)left;
}

/* Whether a signal stops what runs now. Without a graceful stop, any
 * signal does. With one (kl_rt_shutdown) the first signal stops the task
 * that was running when it came, unless that is a reconcile the stop waits
 * for, and nothing that starts later; once the stop is cut short (a second
 * signal, its timeout) every task stops, a reconcile spinning past the
 * timeout included. Code outside tasks is then the runtime's own (the
 * endpoint's answers, the report of a stop cut short). At close the first
 * signal is in hand already, and a second one ends the process: finalizers
 * are left to the budget. */
static int stopped_by_signal(kl_rt *rt, const kl_run_state *c) {
    if (rt->closing || !kl_loop_poll_signal(rt->loop)) return 0;
    if (rt->shutdown.start_ref == LUA_NOREF) return 1;
    if (!c->task) return 0;
    if (kl_rt_shutdown_overdue(rt)) return 1;
    return kl_loop_signal_count(rt->loop) > c->signals && !c->task->reconciling;
}

/* Runs on every thread, the coroutines a script creates included (they
 * inherit it), and counts for whatever rt->cur says runs now. */
static void count_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    kl_rt *rt = kl_rt_of(L);
    kl_run_state *c = &rt->cur;
    if (!c->stopped) {
        c->used += lua_gethookcount(L);
        if (stopped_by_signal(rt, c)) c->stopped = KL_STOPPED_BY_SIGNAL;
        else if (rt->opts.instruction_budget > 0 && c->used >= rt->opts.instruction_budget)
            c->stopped = KL_STOPPED_BY_BUDGET;
    }
    if (!c->stopped) {
        lua_sethook(L, count_hook, LUA_MASKCOUNT, next_count(rt));
        return;
    }
    /* The error is catchable, so the hook fires on every instruction from
     * now on: a pcall that caught it fails again at its caller's next one,
     * on the task's thread too when a coroutine of the script ran out. */
    lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
    if (c->task && c->task->co != L) lua_sethook(c->task->co, count_hook, LUA_MASKCOUNT, 1);
    if (c->stopped == KL_STOPPED_BY_SIGNAL)
        luaL_error(L, "stopped: klua is stopping on %s", signal_name(kl_loop_signal(rt->loop)));
    luaL_error(L, "stopped after running past its instruction budget of %I instructions "
                  "(raise it with --instruction-budget)", (lua_Integer)rt->opts.instruction_budget);
}

void kl_task_init(kl_rt *rt) { lua_sethook(rt->L, count_hook, LUA_MASKCOUNT, HOOK_PERIOD); }

/* The message handler of an xpcall, wrapped: an error raised by the count
 * hook calls the handler with hooks off, so once the task is stopped the
 * script's handler is not called at all and the error passes unchanged. */
static int guarded_handler(lua_State *L) {
    if (kl_rt_of(L)->cur.stopped) return 1;
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
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
    kl_rt *rt = t->rt;
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
    if (status == LUA_ERRMEM && rt->opts.memory_limit) {
        lua_pushfstring(co, "%s: not enough memory: the Lua state reached its limit of %d MiB "
                            "(raise it with --memory-limit)", t->name,
                        (int)(rt->opts.memory_limit >> 20));
        kl_log(KL_LOG_ERROR, rt->script_name, "%s", lua_tostring(co, -1));
    } else {
        luaL_traceback(rt->L, co, msg, 0);
        kl_log(KL_LOG_ERROR, rt->script_name, "%s failed: %s", t->name, lua_tostring(rt->L, -1));
        lua_pop(rt->L, 1);
    }
    rt->task_errors++;
}

/* Ends a task: back to the pool (or freed, when its thread cannot be used
 * again), then its done callback. */
static void finish(kl_task *t, int ok, int reuse) {
    kl_task_done_fn done = t->done;
    void *ud = t->ud;
    kl_rt *rt = t->rt;
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
    kl_rt *rt = t->rt;
    lua_State *co = t->co;
    kl_run_state outer = rt->cur;
    rt->cur = (kl_run_state){.task = t, .enforce_memory = 1, .signals = kl_loop_signal_count(rt->loop)};
    lua_sethook(co, count_hook, LUA_MASKCOUNT, next_count(rt));
    int nres;
    int status = lua_resume(co, from, nargs, &nres);
    int stopped = rt->cur.stopped;
    /* Outside every task the count starts again with each task's end. */
    rt->cur = outer.task ? outer : (kl_run_state){0};
    if (status == LUA_YIELD && t->waiting) return 1;
    if (status == LUA_YIELD) {
        lua_settop(co, 0);
        lua_pushstring(co, "coroutine.yield was called outside a coroutine the script created");
        status = LUA_ERRRUN;
    }
    if (status == LUA_OK) {
        lua_settop(co, 0);
        finish(t, 1, 1);
        return 0;
    }
    if (stopped == KL_STOPPED_BY_SIGNAL)
        kl_log(KL_LOG_INFO, rt->script_name, "%s interrupted: klua is stopping on %s", t->name,
               signal_name(kl_loop_signal(rt->loop)));
    else report_failure(t, status);
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
    kl_task *t = kl_loop_stopping(rt->loop) ? NULL : task_get(rt);
    if (!t) {
        lua_pop(rt->L, nargs + 1);
        if (!kl_loop_stopping(rt->loop))
            kl_log(KL_LOG_ERROR, rt->script_name, "out of memory starting %s", name);
        if (done) done(ud, NULL, 0);
        return 0;
    }
    snprintf(t->name, sizeof t->name, "%s", name);
    t->done = done;
    t->ud = ud;
    t->waiting = 0;
    t->reconciling = 0;
    lua_xmove(rt->L, t->co, nargs + 1);
    return run(t, from, nargs);
}

void kl_task_suspend(kl_task *t) {
    t->waiting = 1;
    t->rt->suspended++;
}

void kl_task_resume(kl_task *t, int nres) {
    t->waiting = 0;
    t->rt->suspended--;
    run(t, NULL, nres);
}
