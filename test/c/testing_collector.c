/* testing_collector.c - the Lua collector's mode table for the specs:
 * `klua_testing.collector_transitions()`. */
#include <lauxlib.h>

#include "lua/collector.h"
#include "testing.h"

/* collector_transitions() -> { {from=, event=, to=, ['then']=}, ... } */
static int collector_transitions(lua_State *L) {
    size_t n;
    const kl_gc_transition *t = kl_collector_transitions(&n);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++)
        kl_testing_add_transition(L, kl_collector_mode_name(t[i].from), "event", kl_collector_event_name(t[i].event),
                                  kl_collector_mode_name(t[i].to), t[i].then);
    return 1;
}

void kl_testing_open_collector(lua_State *L) {
    lua_pushcfunction(L, collector_transitions);
    lua_setfield(L, -2, "collector_transitions");
}
