/*
 * cmd_test.h - `klua test [busted args...]`: runs a user's busted specs with
 * the test harness (lua/klua/testing.lua, docs/testing.md) on the Lua path.
 */
#ifndef KLUA_CMD_TEST_H
#define KLUA_CMD_TEST_H

#include <limits.h>
#include <stddef.h>

/* Execs busted under lua5.4 with args (nargs of them) after busted's name,
 * LUA_PATH starting with the harness's directory and KLUA_BIN naming this
 * klua. Returns only on failure, with the exit code, after saying on stderr
 * what is missing. */
int kl_cmd_test(int nargs, char **args);

/* Finds this klua (into exe) and which of dirs, each a path relative to
 * its directory ("/../share/klua/lua" as installed, "/../lua" in the source
 * tree), holds file; writes that directory, resolved, to dir. 0, or -1
 * after saying on stderr, as `klua COMMAND`, that what (the file's
 * description) is missing and how to install it. */
int kl_find_installed(const char *command, const char *what, const char *const *dirs, size_t ndirs,
                      const char *file, char exe[PATH_MAX], char dir[PATH_MAX]);

#endif
