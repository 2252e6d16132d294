/*
 * testing.h - the spec-only Lua module `klua_testing`.
 *
 * The specs run in the stock lua5.4 interpreter; this module exposes the C
 * stages (framer, decoder, views, store, queue, config, loop, prune,
 * reflector, the runtime's phase table, the collector's mode table) to
 * them directly so that one runner covers the C host too. Each stage registers its functions
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
void kl_testing_open_store(lua_State *L);
void kl_testing_open_reflector(lua_State *L);
void kl_testing_open_runtime(lua_State *L);
void kl_testing_open_collector(lua_State *L);
void kl_testing_open_media(lua_State *L);

/* What the openers share. The setters store into the table at the top of
 * the stack (kl_testing_set_string nothing for NULL); kl_testing_opt_number
 * reads a field of the options table at argument 1, 0 when absent. */
void kl_testing_set_string(lua_State *L, const char *key, const char *value);
void kl_testing_set_number(lua_State *L, const char *key, double value);
void kl_testing_set_integer(lua_State *L, const char *key, lua_Integer value);
void kl_testing_set_boolean(lua_State *L, const char *key, int value);
double kl_testing_opt_number(lua_State *L, const char *key);
/* Appends one transition of a state machine's declared table to the list at
 * the top of the stack, as {from=, [event_key]=event, to=, ['then']=}: the
 * reflector names its events "when", the runtime "event". */
void kl_testing_add_transition(lua_State *L, const char *from, const char *event_key, const char *event,
                               const char *to, const char *then);
/* A userdata of class mt that boxes one pointer, freed by its __gc.
 * kl_testing_box pushes an empty one, its metatable already set so that what
 * is put in its slot cannot leak when a later step raises, and returns the
 * slot; kl_testing_unbox reads the pointer of the one at arg, raising "what
 * already freed" once it is taken; kl_testing_take, for __gc, empties the
 * one at 1 and returns what it held. */
void **kl_testing_box(lua_State *L, const char *mt);
void *kl_testing_unbox(lua_State *L, int arg, const char *mt, const char *what);
void *kl_testing_take(lua_State *L, const char *mt);
/* Creates the metatable `name` with methods as its __index; pops it. */
void kl_testing_new_class(lua_State *L, const char *name, const luaL_Reg *methods);

#endif
