/*
 * lua_log.h - what scripts write: core.log and core.verbosity (base/log.h),
 * and core.stdout_closed and core.write_stdout for klua watch's lines.
 */
#ifndef KLUA_LUA_LOG_H
#define KLUA_LUA_LOG_H

#include <lua.h>

/* Adds the functions to the klua.core table on top of L. [-0, +0, e] */
void kl_lua_log_open(lua_State *L);

#endif
