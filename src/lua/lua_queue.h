/*
 * lua_queue.h - work queues for scripts (core.queue{...}, over
 * cache/queue.h), with a get() that suspends the calling task.
 */
#ifndef KLUA_LUA_QUEUE_H
#define KLUA_LUA_QUEUE_H

#include "lua/runtime.h"

/* Makes the runtime's part KL_RT_QUEUES (kl_rt_new). A queue belongs to
 * its handle and never keeps the script running by itself (its waiting
 * workers do, as tasks); closing frees every queue, and a handle whose
 * queue is gone raises "this queue is closed". */
void kl_lua_queue_init(kl_rt *rt);

#endif
