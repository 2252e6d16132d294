/*
 * lua_klua.h - `klua.core`, the C half of the `klua` module.
 *
 * lua/klua/init.lua builds the public `klua` module on top of these
 * functions; scripts never need klua.core directly.
 */
#ifndef KLUA_LUA_KLUA_H
#define KLUA_LUA_KLUA_H

#include <lua.h>

#include "lua/runtime.h"

/* Makes the runtime's part KL_RT_CORE (kl_rt_new): klua.core's own
 * functions (klua.stop, the graceful stop's steps, core.phase, the run's
 * settings) and those of the stateless bindings (lua_http.h, lua_log.h,
 * lua_procstat.h), opened into the table that the other parts fill too.
 * It has no state. */
void kl_lua_klua_init(kl_rt *rt);

#endif
