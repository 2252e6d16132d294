/*
 * task.h - script code running in a coroutine on the loop.
 *
 * A task runs one function. When it finishes or fails its done callback
 * runs; a failure is logged with its traceback and the task's name, and
 * counted, and nothing else stops. A task that runs past the instruction
 * budget in one go is stopped the same way. A C function that needs to wait
 * (for a response, a timer) calls kl_task_suspend and yields; whoever ends
 * the wait pushes the results on the task's thread and calls kl_task_resume.
 */
#ifndef KLUA_TASK_H
#define KLUA_TASK_H

#include <lua.h>

#include "runtime.h"

typedef void (*kl_task_done_fn)(void *ud, kl_task *t, int ok);

/* Runs the function under nargs arguments on top of rt->L, popping them
 * all. name says what runs, for errors ("handler pods:update"). done (may
 * be NULL) runs when the task ends. Returns 1 if the task is suspended, 0
 * if it has already ended. [-(nargs+1), +0] */
int kl_task_spawn(kl_rt *rt, const char *name, int nargs, kl_task_done_fn done, void *ud);
/* The task running on thread L, or NULL when L is not a task's thread. */
kl_task *kl_task_current(lua_State *L);
/* Marks the running task as waiting; the C function then returns lua_yield. */
void kl_task_suspend(kl_task *t);
/* Resumes a waiting task with nres values already pushed on its thread. */
void kl_task_resume(kl_task *t, int nres);
lua_State *kl_task_thread(kl_task *t);
const char *kl_task_name(kl_task *t);
/* Frees every task, waiting or pooled; called when the runtime closes. */
void kl_task_pool_free(kl_rt *rt);

#endif
