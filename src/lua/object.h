/*
 * object.h - the one shape of the klua objects a script holds that have
 * C state: informers, queues, timers (docs/architecture.md, "The Lua
 * layer").
 *
 * As Lua's liolib makes files: a full userdata whose metatable is named
 * "klua.<kind>" (luaL_newmetatable, so __name makes type errors and the
 * default tostring name it), whose __index is a methods table apart from
 * the metatable (no metamethod reads as a method), and which is checked
 * with luaL_checkudata. The userdata starts with a kl_object: the C state,
 * NULL once the runtime or the script closed it, and why. Its user value 1
 * is a table for the state that Lua modules keep about the object (an
 * informer's name and indexes), which no script reaches by indexing it;
 * further user values are the C module's own.
 *
 * The Lua modules reach the same things through klua.core: core.class
 * (kind [, meta]) the methods table, to which they add methods (a class
 * of Lua methods alone is made by it); core.new(kind, state) an object of
 * such a class; core.state(obj) the user value 1; core.is(v, kind) the one
 * type check.
 */
#ifndef KLUA_OBJECT_H
#define KLUA_OBJECT_H

#include <lua.h>
#include <lauxlib.h>

typedef struct kl_object {
    void *state;        /* the C state; NULL once closed, or once it ended */
    const char *closed; /* with state NULL, why: KL_OBJECT_SHUTDOWN or another;
                           NULL for a state that ended as it should (a timer that fired) */
} kl_object;

/* Creates the metatable tname ("klua.<kind>") with methods in a methods
 * table of its own as __index, and the metamethods meta (__tostring,
 * __gc, __close: each optional); does nothing when tname exists already.
 * Stack unchanged. [-0, +0, e] */
void kl_object_class(lua_State *L, const char *tname, const luaL_Reg *methods, const luaL_Reg *meta);

/* Pushes a new object of class tname, size bytes (a struct that starts
 * with a kl_object, zeroed but for state), user value 1 a new state table
 * and nuv more user values for the caller (nil until set). [-0, +1, m] */
void *kl_object_new(lua_State *L, const char *tname, size_t size, int nuv, void *state);

/* The C state of the object of class tname at idx: raises a type error
 * when idx is not one, "this <kind> <closed>" when it is closed, and
 * returns NULL for an object whose state ended as it should. [-0, +0, e] */
void *kl_object_check(lua_State *L, int idx, const char *tname);

/* Why the runtime closed an object at the end: what every kind says. */
extern const char KL_OBJECT_SHUTDOWN[];

/* Marks o closed: its state gone, for why (KL_OBJECT_SHUTDOWN, or another
 * static string), or NULL when it ended as it should. */
void kl_object_close(kl_object *o, const char *why);

/* Adds core.class, core.new, core.state and core.is to the table on top.
 * [-0, +0, e] */
void kl_object_set_functions(lua_State *L);

#endif
