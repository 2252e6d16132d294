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
    for (size_t i = 0; i < n; i++)
        kl_testing_add_transition(L, kl_rt_phase_name(t[i].from), "event", kl_rt_event_name(t[i].event),
                                  kl_rt_phase_name(t[i].to), t[i].then);
    return 1;
}

void kl_testing_open_runtime(lua_State *L) {
    lua_pushcfunction(L, runtime_transitions);
    lua_setfield(L, -2, "runtime_transitions");
}
