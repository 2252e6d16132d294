/* task.c - script code in coroutines on the loop; see task.h. */
#include "task.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define POOL_MAX 64 /* idle threads kept; a burst beyond is freed */

struct kl_task {
    kl_rt *rt;
    lua_State *co;
    int ref; /* keeps co alive in the registry */
    char name[96];
    kl_task_done_fn done;
    void *ud;
    int waiting;
    kl_task *prev, *next; /* every task of the runtime, pooled or not */
};

kl_task *kl_task_current(lua_State *L) { return *(kl_task **)lua_getextraspace(L); }
lua_State *kl_task_thread(kl_task *t) { return t->co; }
const char *kl_task_name(kl_task *t) { return t->name; }

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

static void budget_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    /* Coroutines a script creates inherit the hook but are no tasks. */
    lua_Integer budget = (lua_Integer)kl_rt_of(L)->opts.instruction_budget;
    luaL_error(L, "stopped after running past its instruction budget of %I instructions "
                  "(raise it with --instruction-budget)", budget);
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

/* Ends a task: back to the pool, then its done callback. */
static void finish(kl_task *t, int ok) {
    kl_task_done_fn done = t->done;
    void *ud = t->ud;
    kl_rt *rt = t->rt;
    t->done = NULL;
    t->ud = NULL;
    task_put(t);
    if (done) done(ud, t, ok);
    kl_rt_check_idle(rt);
}

/* Resumes t; returns 1 if it is waiting afterwards. */
static int run(kl_task *t, int nargs) {
    kl_rt *rt = t->rt;
    lua_State *co = t->co;
    if (rt->opts.instruction_budget > 0)
        lua_sethook(co, budget_hook, LUA_MASKCOUNT, (int)rt->opts.instruction_budget);
    int nres;
    rt->enforce_memory = 1;
    int status = lua_resume(co, rt->L, nargs, &nres);
    rt->enforce_memory = 0;
    if (status == LUA_YIELD && t->waiting) return 1;
    if (status == LUA_YIELD) {
        lua_settop(co, 0);
        lua_pushstring(co, "coroutine.yield was called outside a coroutine the script created");
        status = LUA_ERRRUN;
    }
    if (status == LUA_OK) {
        lua_settop(co, 0);
        finish(t, 1);
        return 0;
    }
    report_failure(t, status);
    lua_resetthread(co);
    finish(t, 0);
    return 0;
}

int kl_task_spawn(kl_rt *rt, const char *name, int nargs, kl_task_done_fn done, void *ud) {
    kl_task *t = task_get(rt);
    if (!t) {
        lua_pop(rt->L, nargs + 1);
        kl_log(KL_LOG_ERROR, rt->script_name, "out of memory starting %s", name);
        if (done) done(ud, NULL, 0);
        return 0;
    }
    snprintf(t->name, sizeof t->name, "%s", name);
    t->done = done;
    t->ud = ud;
    t->waiting = 0;
    lua_xmove(rt->L, t->co, nargs + 1);
    return run(t, nargs);
}

void kl_task_suspend(kl_task *t) {
    t->waiting = 1;
    t->rt->suspended++;
}

void kl_task_resume(kl_task *t, int nres) {
    t->waiting = 0;
    t->rt->suspended--;
    run(t, nres);
}
