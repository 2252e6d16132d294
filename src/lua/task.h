/*
 * task.h - script code running in a coroutine on the loop.
 *
 * A task runs one function. When it finishes or fails its done callback
 * runs; a failure is logged with its traceback and the task's name, and
 * counted, and nothing else stops. A C function that needs to wait (for a
 * response, a timer) gets its task from kl_task_check_wait, calls
 * kl_task_suspend and yields; whoever ends the wait pushes the results on
 * the task's thread and calls kl_task_resume from the loop.
 *
 * A count hook on every thread of the Lua state counts the instructions of
 * the running task and looks for SIGINT/SIGTERM every 100000
 * instructions. A task that runs past the instruction budget in one go, or
 * that runs when a signal arrives (under a graceful stop, as its phase
 * says: see runtime.h), is stopped: from then on every further
 * instruction it runs fails again (in its own coroutines too, within a
 * period), so no pcall, xpcall handler, __close or __gc can catch its way
 * out, until the error has left the task. A task stopped by a signal is no
 * failure: it is logged on one info line and not counted. A failure's
 * error value is turned into text under protection and a budget of its
 * own, so that no __tostring can crash or hold klua.
 */
#ifndef KLUA_TASK_H
#define KLUA_TASK_H

#include <lua.h>
#include <stdint.h>

#include "lua/runtime.h"

typedef struct kl_task kl_task;
/* How a task ended, for its done callback. */
typedef enum {
    KL_TASK_RETURNED,
    KL_TASK_FAILED,      /* raised an error or ran out of memory */
    KL_TASK_OVER_BUDGET, /* stopped by --instruction-budget: a failure too */
    KL_TASK_STOPPED      /* stopped by a signal (no failure), or never started */
} kl_task_end;
typedef void (*kl_task_done_fn)(void *ud, kl_task *t, kl_task_end end);

/* Makes the runtime's part KL_RT_TASKS (kl_rt_new) and installs the count
 * hook on the Lua state, before any thread is made from it: threads
 * inherit their creator's hook. Idle while no task runs or waits; closed
 * after every other part (kl_rt_free): every task is freed, waiting or
 * pooled. */
void kl_task_init(kl_rt *rt);
/* Guards the count hook against the script: xpcall's message handler is
 * not called once the task is stopped, debug.sethook raises an error
 * (nothing may remove or replace the hook), and coroutine.close and
 * coroutine.wrap do not run the __close handlers of a coroutine a stop
 * ended (hooks are off on it). Called once the standard libraries are
 * open. [-0, +0, e] */
void kl_task_open_guards(lua_State *L);
/* Runs the function under nargs arguments on top of the runtime's main
 * Lua thread (kl_rt_lua), popping them
 * all. from is the thread whose C function starts the task (its C stack
 * depth carries over), or NULL from the loop. name says what runs, for
 * errors ("add handler of pods"). done (may be NULL) runs when the task
 * ends, with t no longer to be used; with t NULL and KL_TASK_STOPPED when it did not start: the run has ended
 * (kl_rt_ended), and no script code starts then. Out of memory never keeps it from
 * starting (task.c's task_get). Returns 1 if the task is
 * suspended, 0 if it has already ended or never started. [-(nargs+1), +0] */
int kl_task_spawn(kl_rt *rt, lua_State *from, const char *name, int nargs, kl_task_done_fn done,
                  void *ud);
/* The task running on thread L, or NULL when L is not a task's thread. */
kl_task *kl_task_current(lua_State *L);
/* The task on L that is about to wait in `what` ("klua.sleep"); raises an
 * error naming where waiting is allowed when L is no task's thread or
 * cannot yield here (a __gc handler, a table.sort comparison). */
kl_task *kl_task_check_wait(lua_State *L, const char *what);
/* Marks the running task as waiting; the C function then returns lua_yield. */
void kl_task_suspend(kl_task *t);
/* Resumes a waiting task with nres values already pushed on its thread.
 * Called from the loop only, never from script code. */
void kl_task_resume(kl_task *t, int nres);

/* A wait that can be cut short, as a pending operation of lua-nginx-module
 * has a cleanup: after kl_task_suspend, the waiting C function names how
 * to end its wait early. fn undoes what the wait started (cancels its
 * request, its timer: ud and id say which) and resumes t with the wait's
 * own results for "cancelled". The resume forgets it. */
typedef void (*kl_task_cancel_fn)(kl_task *t, void *ud, uint64_t id);
void kl_task_on_cancel(kl_task *t, kl_task_cancel_fn fn, void *ud, uint64_t id);
/* Gives t a deadline `seconds` from now, as a Go context's: when it passes,
 * the wait t is in is cancelled (when it can be: see kl_task_on_cancel),
 * and every wait t starts later ends at once, until the deadline is
 * cleared. why (copied) says whose deadline it is, for the waits' errors.
 * A task that ends drops its deadline. */
void kl_task_set_deadline(kl_task *t, double seconds, const char *why);
/* Drops t's deadline; returns 1 when it had passed. */
int kl_task_clear_deadline(kl_task *t);
/* What the deadline t ran past says of itself, or NULL while t has none
 * that has passed: a wait that sees a text ends at once. */
const char *kl_task_expired(const kl_task *t);
lua_State *kl_task_thread(kl_task *t);
/* Tasks that failed so far (klua.stats().task_errors). */
unsigned long kl_task_errors(const kl_rt *rt);
/* Runs stopped for passing --instruction-budget (klua.stats().budget_stops). */
unsigned long kl_task_budget_stops(const kl_rt *rt);
/* Tasks waiting now (klua.stats().suspended). */
size_t kl_task_suspended(const kl_rt *rt);
/* Marks t as running a reconcile: a graceful stop's first signal lets it
 * go on (see kl_rt_graceful). */
void kl_task_set_reconciling(kl_task *t, int on);

#endif
