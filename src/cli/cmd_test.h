/*
 * cmd_test.h - `klua test [busted args...]`: runs a user's busted specs with
 * the test harness (lua/klua/testing.lua, docs/testing.md) on the Lua path.
 */
#ifndef KLUA_CMD_TEST_H
#define KLUA_CMD_TEST_H

/* Execs busted under lua5.4 with args (nargs of them) after busted's name,
 * LUA_PATH starting with the harness's directory and KLUA_BIN naming this
 * klua. Returns only on failure, with the exit code, after saying on stderr
 * what is missing. */
int kl_cmd_test(int nargs, char **args);

#endif
