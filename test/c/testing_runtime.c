/* testing_runtime.c - the runtime's phase table for the specs:
 * `klua_testing.runtime_transitions()`. */
#include <lauxlib.h>

#include "lua/runtime.h"
#include "testing.h"

/* runtime_transitions() -> { {from=, event=, to=, ['then']=}, ... } */
static int runtime_transitions(lua_State *L) {
    size_t n;
    const kl_rt_transition *t = kl_rt_transitions(&n);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 0, 4);
        lua_pushstring(L, kl_rt_phase_name(t[i].from));
        lua_setfield(L, -2, "from");
        lua_pushstring(L, kl_rt_event_name(t[i].event));
        lua_setfield(L, -2, "event");
        lua_pushstring(L, kl_rt_phase_name(t[i].to));
        lua_setfield(L, -2, "to");
        lua_pushstring(L, t[i].then);
        lua_setfield(L, -2, "then");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

void kl_testing_open_runtime(lua_State *L) {
    lua_pushcfunction(L, runtime_transitions);
    lua_setfield(L, -2, "runtime_transitions");
}
