/*
 * lua_procstat.h - core.process(): the process_* figures of klua's
 * metrics (base/procstat.h), or nil where they cannot be read.
 */
#ifndef KLUA_LUA_PROCSTAT_H
#define KLUA_LUA_PROCSTAT_H

#include <lua.h>

/* Adds core.process to the klua.core table on top of L. [-0, +0, e] */
void kl_lua_procstat_open(lua_State *L);

#endif
