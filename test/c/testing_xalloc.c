/* testing_xalloc.c - the allocation-failure hook for specs; see testing.h. */
#include <lauxlib.h>

#include "testing.h"
#include "base/xalloc.h"

/* testing.fail_allocation_after(n): the n-th host allocation from now
 * fails (0: the next one), which aborts the process; -1 turns it off. */
static int t_fail_allocation_after(lua_State *L) {
    kl_xalloc_fail_after((long)luaL_checkinteger(L, 1));
    return 0;
}

void kl_testing_open_xalloc(lua_State *L) {
    lua_pushcfunction(L, t_fail_allocation_after);
    lua_setfield(L, -2, "fail_allocation_after");
}
