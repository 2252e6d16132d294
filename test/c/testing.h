/*
 * testing.h - the spec-only Lua module `klua_testing`.
 *
 * The specs run in the stock lua5.4 interpreter; this module exposes the C
 * stages (framer, decoder, views, store, queue, config, loop, prune,
 * reflector, the runtime's phase table) to them directly so that one runner covers the C host too. Each stage registers its functions
 * from its own file: the opener receives the module table at the top of the
 * stack and must leave the stack as it found it.
 */
#ifndef KLUA_TESTING_H
#define KLUA_TESTING_H

#include <lauxlib.h>
#include <lua.h>

void kl_testing_open_framer(lua_State *L);
void kl_testing_open_config(lua_State *L);
void kl_testing_open_queue(lua_State *L);
void kl_testing_open_json(lua_State *L);
void kl_testing_open_xalloc(lua_State *L);
void kl_testing_open_loop(lua_State *L);
void kl_testing_open_prune(lua_State *L);
void kl_testing_open_reflector(lua_State *L);
void kl_testing_open_runtime(lua_State *L);
void kl_testing_open_media(lua_State *L);

/* What the openers share. The setters store into the table at the top of
 * the stack (kl_testing_set_string nothing for NULL); kl_testing_opt_number
 * reads a field of the options table at argument 1, 0 when absent. */
void kl_testing_set_string(lua_State *L, const char *key, const char *value);
void kl_testing_set_number(lua_State *L, const char *key, double value);
void kl_testing_set_integer(lua_State *L, const char *key, lua_Integer value);
void kl_testing_set_boolean(lua_State *L, const char *key, int value);
double kl_testing_opt_number(lua_State *L, const char *key);
/* Creates the metatable `name` with methods as its __index; pops it. */
void kl_testing_new_class(lua_State *L, const char *name, const luaL_Reg *methods);

#endif
