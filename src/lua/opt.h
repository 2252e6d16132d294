/*
 * opt.h - options from a Lua table argument, as core.informer{...} and
 * core.queue{...} take them: an absent field is the option's default.
 */
#ifndef KLUA_OPT_H
#define KLUA_OPT_H

#include <lua.h>

/* The number in field of the table at idx, or 0 when the field is nil;
 * raises luaL_checknumber's error for anything else. [-0, +0, e] */
double kl_opt_number(lua_State *L, int idx, const char *field);
/* The string (or number, as a string) in field of the table at idx, or
 * NULL when the field is nil; raises "<what> option <field> must be a
 * string" for anything else. The value stays pushed so that the string
 * lives until the caller returns: a number converted by lua_tolstring
 * exists only in that stack slot. [-0, +1, e] */
const char *kl_opt_string(lua_State *L, int idx, const char *field, const char *what);
/* Whether field of the table at idx is true: 0 when nil; raises "<what>
 * option <field> must be true or false" for anything but a boolean.
 * [-0, +0, e] */
int kl_opt_boolean(lua_State *L, int idx, const char *field, const char *what);

#endif
