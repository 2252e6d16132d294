/*
 * lua_loop.h - the loop's timers and clocks for scripts: core.after,
 * core.every, core.start_timer, core.sleep, core.now, core.wall_time.
 *
 * Timers are the runtime's part KL_RT_TIMERS (kl_rt_new): a live timer
 * keeps the script running; they are freed when the runtime closes, and
 * their callbacks do not run again. core.sleep suspends the calling task.
 */
#ifndef KLUA_LUA_LOOP_H
#define KLUA_LUA_LOOP_H

#include "lua/runtime.h"

void kl_lua_loop_init(kl_rt *rt);

#endif
