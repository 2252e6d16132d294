/* lua_procstat.c - the process's own figures for scripts, over
 * base/procstat.c; see lua_procstat.h. */
#include "lua/lua_procstat.h"

#include <lauxlib.h>

#include "base/procstat.h"

/* core.process() -> the process_* figures (procstat.h), or nil. */
static int l_process(lua_State *L) {
    kl_procstat st;
    if (kl_procstat_read(&st) < 0) return 0;
    const struct {
        const char *key;
        double v;
    } fields[] = {{"cpu_seconds", st.cpu_seconds}, {"resident_bytes", st.resident_bytes},
                  {"virtual_bytes", st.virtual_bytes}, {"open_fds", st.open_fds},
                  {"max_fds", st.max_fds},         {"start_time", st.start_time}};
    lua_createtable(L, 0, 6);
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
        lua_pushnumber(L, fields[k].v);
        lua_setfield(L, -2, fields[k].key);
    }
    return 1;
}

void kl_lua_procstat_open(lua_State *L) {
    lua_pushcfunction(L, l_process);
    lua_setfield(L, -2, "process");
}
