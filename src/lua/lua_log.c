/* lua_log.c - what scripts write: the log, over base/log.c, and klua
 * watch's stdout; see lua_log.h. */
#include "lua/lua_log.h"

#include <lauxlib.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>

#include "base/log.h"
#include "lua/runtime.h"

/* core.log(level, message): level is "debug", "info", "warn" or "error". */
static int l_log(lua_State *L) {
    static const char *const names[] = {"debug", "info", "warn", "error", NULL};
    _Static_assert(KL_LOG_DEBUG == 0 && KL_LOG_ERROR == 3, "names follows kl_log_level");
    int level = luaL_checkoption(L, 1, NULL, names);
    const char *msg = luaL_checkstring(L, 2);
    kl_log((kl_log_level)level, kl_rt_script_name(kl_rt_of(L)), "%s", msg);
    return 0;
}

/* core.verbosity() -> the -v level. */
static int l_verbosity(lua_State *L) {
    lua_pushinteger(L, kl_log_verbosity());
    return 1;
}

/* core.stdout_closed() -> true once stdout's reader has gone: a pipe or
 * socket whose other end closed reports POLLERR or POLLHUP, so klua watch
 * can tell without a line to write. Never blocks. */
static int l_stdout_closed(lua_State *L) {
    struct pollfd p = {.fd = STDOUT_FILENO, .events = 0};
    lua_pushboolean(L, poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)));
    return 1;
}

/* core.write_stdout(s) -> true, or nil, a message and errno, as
 * io.stdout:write(s) answers: the same write to C's stdout, which
 * io.stdout is, for klua watch's lines, without the file method's check
 * of the handle it is called on (a third of its cost for a short line). */
static int l_write_stdout(lua_State *L) {
    size_t n;
    const char *s = luaL_checklstring(L, 1, &n);
    return luaL_fileresult(L, fwrite(s, 1, n, stdout) == n, NULL);
}

void kl_lua_log_open(lua_State *L) {
    static const luaL_Reg fns[] = {{"log", l_log},
                                   {"verbosity", l_verbosity},
                                   {"stdout_closed", l_stdout_closed},
                                   {"write_stdout", l_write_stdout},
                                   {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
