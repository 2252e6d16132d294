/*
 * lua_informer.h - informers for scripts (core.informer{...}, over
 * cache/informer.h) and the dispatch of their notifications to handlers.
 */
#ifndef KLUA_LUA_INFORMER_H
#define KLUA_LUA_INFORMER_H

#include <lua.h>

#include "cache/reflector.h"
#include "lua/runtime.h"

/* Makes the runtime's part KL_RT_INFORMERS (kl_rt_new). Dispatch begins
 * once the main chunk has returned; the part is synced once every informer
 * has handed its first list to its handlers, idle only without informers,
 * and closing frees every informer with its requests (its handle then
 * raises "this informer is closed"). */
void kl_lua_informer_init(kl_rt *rt);

/* Pushes a reflector's last transitions (kl_reflector_history), oldest
 * first, as of `now`: {{age = seconds ago, from =, to =, cause =, action =}, ...}. */
void kl_lua_push_history(lua_State *L, const kl_reflector_record *rec, size_t n, double now);

#endif
