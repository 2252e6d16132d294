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

/* luaopen-style opener for "klua.core". [-0, +1] */
int kl_open_core(lua_State *L);
/* Sets klua.core.args to the script's arguments. */
void kl_klua_set_args(kl_rt *rt, int argc, char **argv);
/* Fires klua.on_synced callbacks once every informer has synced; from is
 * the thread of the C function asking (NULL from the loop). */
void kl_klua_check_synced(kl_rt *rt, lua_State *from);
/* Frees timers, informers and queues; their handles then raise an error
 * saying so. Called before the Lua state closes. */
void kl_klua_close(kl_rt *rt);

/* From lua_informer.c: adds `informer` to the core table on top. [-0, +0] */
void kl_informer_open(lua_State *L);
/* Whether every informer has synced (vacuously true with none). */
int kl_informers_synced(kl_rt *rt);
void kl_informers_close(kl_rt *rt);
/* Starts delivering notifications: called once the main chunk returned. */
void kl_informers_start_dispatch(kl_rt *rt);

/* From lua_queue.c: adds `queue` to the core table on top. [-0, +0] */
void kl_queue_open(lua_State *L);
void kl_queues_close(kl_rt *rt);

#endif
