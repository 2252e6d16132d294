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
/* Instructions between two looks for a signal (~1 ms of Lua). */
#define HOOK_PERIOD 100000
/* Instructions an error value's __tostring may run for a failure's log. */
#define FORMAT_BUDGET 1000000

/* Why every further instruction of the running task fails. */
enum { STOPPED_BY_BUDGET = 1, STOPPED_BY_SIGNAL };

/* What the signal taken stops, as the runtime's phase says (tasks_phase). */
typedef enum {
    STOP_NOTHING,  /* no signal taken yet */
    STOP_ALL,      /* no graceful stop: whatever runs, in a task or not */
    STOP_EARLIER,  /* a graceful stop: the task running when the signal came, unless a reconcile */
    STOP_TASKS,    /* the graceful stop cut short: every task */
    STOP_CLOSED    /* the teardown: finalizers are left to the budget */
} signal_policy;

/* What runs now: the innermost task being resumed. Saved and restored
 * around every resume, so that a task started from inside another one
 * leaves the outer one's state as it found it. */
typedef struct run_state {
    kl_task *task;      /* NULL while no task runs */
    long budget;        /* instructions it may run; 0 = unlimited */
    long used;          /* instructions run since the resume */
    int stopped;        /* 0 or STOPPED_BY_*: every instruction fails */
    int enforce_memory; /* the memory limit binds only while script code runs */
    int signalled;      /* the signal had been taken when the resume began */
} run_state;

/* The runtime's part KL_RT_TASKS. */
typedef struct tasks {
    kl_rt *rt;
    lua_State *L;
    run_state cur;
    kl_task *all;    /* every task alive, for the final clean-up */
    kl_task **pool;  /* finished tasks kept for reuse with their threads */
    int stopped_ref; /* weak-keyed table: the threads a stop's error ended */
    size_t npool, cappool;
    size_t suspended; /* tasks waiting on I/O or a timer */
    unsigned long errors;
    unsigned long budget_stops; /* tasks stopped by --instruction-budget */
    signal_policy on_signal;
} tasks;

static tasks *tasks_of(const kl_rt *rt) { return kl_rt_state(rt, KL_RT_TASKS); }

/* The run state outside every task: --instruction-budget binds (the
 * teardown's finalizers), the memory limit does not. */
static run_state idle_state(const tasks *ts) {
    return (run_state){.budget = kl_rt_options(ts->rt)->instruction_budget};
}

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
    kl_task_cancel_fn cancel; /* ends the wait early, or NULL */
    void *cancel_ud;
    uint64_t cancel_id;
    uint64_t deadline_timer; /* the deadline's, while it has not passed */
    int expired;
    char why[160]; /* whose deadline */
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
    long budget = ts->cur.budget;
    long left = budget > 0 ? budget - ts->cur.used : HOOK_PERIOD;
    return left < 1 ? 1 : left > HOOK_PERIOD ? HOOK_PERIOD : (int)left;
}

/* Whether a signal stops what runs now. The count hook takes a signal
 * that came (the runtime's phase changes then, and with it on_signal);
 * code outside tasks under a graceful stop is the runtime's own (the
 * endpoint's answers, the report of a stop cut short); at close the
 * signal is in hand already, and a second one ends the process. */
static int stopped_by_signal(kl_rt *rt, tasks *ts, const run_state *c) {
    if (ts->on_signal == STOP_CLOSED) return 0;
    kl_loop_poll_signal(kl_rt_loop(rt));
    /* A reconcile spinning past the deadline: its timer cannot run. */
    if (ts->on_signal == STOP_EARLIER && c->task) kl_rt_check_deadline(rt);
    switch (ts->on_signal) {
    case STOP_ALL:
        return 1;
    case STOP_TASKS:
        return c->task != NULL;
    case STOP_EARLIER:
        return c->task && !c->signalled && !c->task->reconciling;
    default:
        return 0;
    }
}

/* The signal policy follows the transitions that set it. */
static void tasks_phase(void *state, const kl_rt_transition *t) {
    tasks *ts = state;
    if (t->to == KL_RT_CLOSED) ts->on_signal = STOP_CLOSED;
    else if (t->to == KL_RT_CUT_SHORT) ts->on_signal = STOP_TASKS;
    else if (t->event == KL_RT_EV_SIGNAL) ts->on_signal = STOP_ALL;
    else if (t->event == KL_RT_EV_SIGNAL_GRACEFUL) ts->on_signal = STOP_EARLIER;
}

/* Lua leaves hooks off on a thread whose hook raised an error that no pcall
 * on it caught: the __close handlers that closing such a coroutine runs
 * (coroutine.close, coroutine.wrap) would run unchecked. The thread is
 * noted, so that they are not run at all; under the hook they would fail
 * at their first instruction anyway. The memory limit is lifted for the
 * note: it must not turn the stop into an out-of-memory error. */
static void note_stopped_thread(tasks *ts, lua_State *L) {
    kl_rt_bind_memory(ts->rt, 0);
    lua_rawgeti(L, LUA_REGISTRYINDEX, ts->stopped_ref);
    lua_pushthread(L);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    kl_rt_bind_memory(ts->rt, ts->cur.enforce_memory);
}

/* Runs on every thread, the coroutines a script creates included (they
 * inherit it), and counts for whatever the run state says runs now. */
static void count_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    kl_rt *rt = kl_rt_of(L);
    tasks *ts = tasks_of(rt);
    run_state *c = &ts->cur;
    long budget = c->budget;
    if (!c->stopped) {
        c->used += lua_gethookcount(L);
        if (stopped_by_signal(rt, ts, c)) c->stopped = STOPPED_BY_SIGNAL;
        else if (budget > 0 && c->used >= budget) {
            c->stopped = STOPPED_BY_BUDGET;
            ts->budget_stops++;
        }
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
    note_stopped_thread(ts, L);
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
    set_cur(ts, idle_state(ts));
    while (ts->all) task_destroy(ts->all);
    ts->npool = 0;
    free(ts->pool);
    ts->pool = NULL;
    ts->cappool = 0;
}

void kl_task_init(kl_rt *rt) {
    static const kl_rt_hooks hooks = {
        .idle = tasks_idle, .phase = tasks_phase, .close = tasks_close, .free = free};
    tasks *ts = kl_xcalloc(1, sizeof *ts);
    ts->rt = rt;
    ts->L = kl_rt_lua(rt);
    ts->cur = idle_state(ts);
    lua_newtable(ts->L);
    lua_createtable(ts->L, 0, 1);
    lua_pushliteral(ts->L, "k");
    lua_setfield(ts->L, -2, "__mode");
    lua_setmetatable(ts->L, -2);
    ts->stopped_ref = luaL_ref(ts->L, LUA_REGISTRYINDEX);
    kl_rt_register(rt, KL_RT_TASKS, &hooks, ts);
    lua_sethook(ts->L, count_hook, LUA_MASKCOUNT, HOOK_PERIOD);
}

unsigned long kl_task_errors(const kl_rt *rt) { return tasks_of(rt)->errors; }
unsigned long kl_task_budget_stops(const kl_rt *rt) { return tasks_of(rt)->budget_stops; }
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

/* coroutine.close and coroutine.wrap, but a coroutine that a stop ended
 * is not closed (see note_stopped_thread); wrap stays a Lua function so
 * that its error names the caller's line as Lua's own does. */
static const char coroutine_chunk[] =
    "local create, resume, status, close, stopped = ...\n"
    "local function guarded_close(co)\n"
    "  if stopped(co) then return false, 'klua stopped this coroutine: its __close handlers are not run' end\n"
    "  return close(co)\n"
    "end\n"
    "local function finish(co, ok, ...)\n"
    "  if ok then return ... end\n"
    "  local err = ...\n"
    "  if status(co) == 'dead' and not stopped(co) then\n"
    "    local closed, closing_err = close(co)\n"
    "    if not closed then err = closing_err end\n"
    "  end\n"
    "  error(err, 2)\n"
    "end\n"
    "local function wrap(f)\n"
    "  local co = create(f)\n"
    "  return function(...) return finish(co, resume(co, ...)) end\n"
    "end\n"
    "return guarded_close, wrap\n";

static int is_stopped_thread(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTHREAD);
    lua_rawgeti(L, LUA_REGISTRYINDEX, tasks_of(kl_rt_of(L))->stopped_ref);
    lua_pushvalue(L, 1);
    lua_pushboolean(L, lua_rawget(L, -2) != LUA_TNIL);
    return 1;
}

static int refuse_sethook(lua_State *L) {
    return luaL_error(L, "debug.sethook is not available in klua: klua's own hook enforces "
                         "--instruction-budget and stops scripts on SIGINT/SIGTERM");
}

void kl_task_open_guards(lua_State *L) {
    if (luaL_loadbuffer(L, xpcall_chunk, sizeof xpcall_chunk - 1, "=xpcall") != LUA_OK) lua_error(L);
    lua_pushcfunction(L, guard_handler);
    lua_call(L, 1, 1);
    lua_setglobal(L, "xpcall");

    lua_getglobal(L, "debug");
    lua_pushcfunction(L, refuse_sethook);
    lua_setfield(L, -2, "sethook");
    lua_pop(L, 1);

    lua_getglobal(L, "coroutine");
    if (luaL_loadbuffer(L, coroutine_chunk, sizeof coroutine_chunk - 1, "=coroutine") != LUA_OK)
        lua_error(L);
    lua_getfield(L, -2, "create"); /* stack: coroutine, chunk, create */
    lua_getfield(L, -3, "resume");
    lua_getfield(L, -4, "status");
    lua_getfield(L, -5, "close");
    lua_pushcfunction(L, is_stopped_thread);
    lua_call(L, 5, 2); /* stack: coroutine, close, wrap */
    lua_setfield(L, -3, "wrap");
    lua_setfield(L, -2, "close");
    lua_pop(L, 1);
}

/* The error value's text, as lua.c's message handler makes it. */
static int error_text(lua_State *L) {
    if (lua_type(L, 1) == LUA_TSTRING || lua_type(L, 1) == LUA_TNUMBER) lua_tostring(L, 1);
    else if (!luaL_callmeta(L, 1, "__tostring")) lua_pushnil(L);
    return 1;
}

/* Pushes on ts->L the text of the error value on top of co. A __tostring
 * is script code: it runs under protection, with the memory limit and a
 * budget of its own, since it may fail, return no string or never return;
 * then the text is lua.c's placeholder. */
static const char *push_error_text(tasks *ts, lua_State *co) {
    lua_State *L = ts->L;
    const char *type = luaL_typename(co, -1);
    lua_pushcfunction(L, error_text);
    lua_pushvalue(co, -1);
    lua_xmove(co, L, 1);
    run_state outer = ts->cur;
    set_cur(ts, (run_state){.budget = FORMAT_BUDGET, .enforce_memory = 1});
    lua_sethook(L, count_hook, LUA_MASKCOUNT, next_count(ts));
    int st = lua_pcall(L, 1, 1, 0);
    set_cur(ts, outer);
    if (st == LUA_OK && lua_type(L, -1) == LUA_TSTRING) return lua_tostring(L, -1);
    lua_pop(L, 1);
    return lua_pushfstring(L, "(error object is a %s value)", type);
}

static void report_failure(kl_task *t, int status) {
    tasks *ts = t->ts;
    const kl_rt_opts *opts = kl_rt_options(ts->rt);
    const char *script = kl_rt_script_name(ts->rt);
    lua_State *co = t->co;
    if (status == LUA_ERRMEM && opts->memory_limit) {
        lua_pushfstring(co, "%s: not enough memory: the Lua state reached its limit of %d MiB "
                            "(raise it with --memory-limit)", t->name,
                        (int)(opts->memory_limit >> 20));
        kl_log(KL_LOG_ERROR, script, "%s", lua_tostring(co, -1));
    } else {
        luaL_traceback(ts->L, co, push_error_text(ts, co), 0);
        kl_log(KL_LOG_ERROR, script, "%s failed: %s", t->name, lua_tostring(ts->L, -1));
        lua_pop(ts->L, 2);
    }
    ts->errors++;
}

/* Ends a task: back to the pool (or freed, when its thread cannot be used
 * again), then its done callback. */
static void finish(kl_task *t, kl_task_end end, int reuse) {
    kl_task_clear_deadline(t);
    kl_task_done_fn done = t->done;
    void *ud = t->ud;
    kl_rt *rt = t->ts->rt;
    t->done = NULL;
    t->ud = NULL;
    if (reuse) task_put(t);
    else task_destroy(t);
    if (done) done(ud, t, end);
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
    set_cur(ts, (run_state){.task = t, .budget = kl_rt_options(ts->rt)->instruction_budget,
                            .enforce_memory = 1, .signalled = kl_loop_signal(kl_rt_loop(ts->rt)) != 0});
    lua_sethook(co, count_hook, LUA_MASKCOUNT, next_count(ts));
    int nres;
    int status = lua_resume(co, from, nargs, &nres);
    int stopped = ts->cur.stopped;
    /* Outside every task the count starts again with each task's end. */
    set_cur(ts, outer.task ? outer
                           : (run_state){.budget = outer.budget, .enforce_memory = outer.enforce_memory});
    if (status == LUA_YIELD && t->waiting) return 1;
    if (status == LUA_OK) {
        lua_settop(co, 0);
        finish(t, KL_TASK_RETURNED, 1);
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
        finish(t, stopped == STOPPED_BY_SIGNAL ? KL_TASK_STOPPED : KL_TASK_OVER_BUDGET, 0);
        return 0;
    }
    lua_resetthread(co);
    finish(t, KL_TASK_FAILED, 1);
    return 0;
}

int kl_task_spawn(kl_rt *rt, lua_State *from, const char *name, int nargs, kl_task_done_fn done,
                  void *ud) {
    tasks *ts = tasks_of(rt);
    if (kl_rt_ended(rt)) {
        lua_pop(ts->L, nargs + 1);
        if (done) done(ud, NULL, KL_TASK_STOPPED);
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
    t->cancel = NULL;
    t->ts->suspended--;
    run(t, NULL, nres);
}

void kl_task_on_cancel(kl_task *t, kl_task_cancel_fn fn, void *ud, uint64_t id) {
    t->cancel = fn;
    t->cancel_ud = ud;
    t->cancel_id = id;
}

static void on_deadline(kl_loop *loop, void *ud) {
    (void)loop;
    kl_task *t = ud;
    t->deadline_timer = 0;
    t->expired = 1;
    if (!t->waiting || !t->cancel) return;
    kl_task_cancel_fn fn = t->cancel;
    t->cancel = NULL;
    fn(t, t->cancel_ud, t->cancel_id);
}

void kl_task_set_deadline(kl_task *t, double seconds, const char *why) {
    kl_task_clear_deadline(t);
    snprintf(t->why, sizeof t->why, "%s", why);
    t->deadline_timer = kl_loop_after(kl_rt_loop(t->ts->rt), seconds, on_deadline, t);
}

int kl_task_clear_deadline(kl_task *t) {
    int expired = t->expired;
    if (t->deadline_timer) kl_loop_cancel(kl_rt_loop(t->ts->rt), t->deadline_timer);
    t->deadline_timer = 0;
    t->expired = 0;
    return expired;
}

const char *kl_task_expired(const kl_task *t) { return t->expired ? t->why : NULL; }
