/*
 * lua_check.h - a libFuzzer target whose promises a Lua check states.
 *
 * For a module of the Lua library compiled into klua (klua.selector,
 * klua.cmd.jsonpath): the target file defines CHECK_NAME (the target's name),
 * CHECK_MODULE (what to require) and CHECK_FILE (the check under fuzz/),
 * then includes this header. The check is read once at start-up from
 * $KLUA_ROOT/fuzz/, or ./fuzz/ when KLUA_ROOT is unset, and returns a
 * function called as check(input, module, fail) for each input; fail, or
 * any Lua error, aborts.
 */
#ifndef KLUA_FUZZ_LUA_CHECK_H
#define KLUA_FUZZ_LUA_CHECK_H

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "lua/embedded.h"
#include "lua_coverage.h"

static lua_State *L; /* stack: the check function, the module */

static void die(const char *what, const char *detail) {
    fprintf(stderr, CHECK_NAME ": %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

static int fail(lua_State *S) {
    die("broken promise", luaL_checkstring(S, 1));
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    L = luaL_newstate();
    if (!L) die("cannot make a Lua state", NULL);
    luaL_openlibs(L);
    kl_embedded_add_searcher(L);
    lua_coverage_start(L);
    const char *root = getenv("KLUA_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/fuzz/" CHECK_FILE, root && *root ? root : ".");
    if (luaL_loadfile(L, path) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK)
        die("cannot load the check (run from the checkout's root or set KLUA_ROOT)", lua_tostring(L, -1));
    lua_getglobal(L, "require");
    lua_pushstring(L, CHECK_MODULE);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) die("cannot load " CHECK_MODULE, lua_tostring(L, -1));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lua_pushvalue(L, 1);
    lua_pushlstring(L, (const char *)data, size);
    lua_pushvalue(L, 2);
    lua_pushcfunction(L, fail);
    if (lua_pcall(L, 3, 0, 0) != LUA_OK) die("the check raised", lua_tostring(L, -1));
    lua_gc(L, LUA_GCSTEP, 0);
    return 0;
}

#endif
