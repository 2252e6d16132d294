/*
 * testing_cli.c - `require 'klua_testing.cli'` for the specs: klua's
 * command-line parser (src/cli.c) without running a command.
 *
 *   cli.parse{'-v', '4', 'watch', 'pods'} -> options, or nil and the message
 *   klua would print (without its trailing newline)
 *   cli.suggest(word, names) -> the nearest of names and klua's global flags,
 *   or nil: what klua passes to klua.cmd.watch's parse for its suggestions
 *
 * options: command, script, args (a list), help (COMMAND --help), verbosity, log_format ("text" or
 * "json"), kubeconfig, context, server, token, insecure_skip_tls_verify,
 * allow_insecure_credentials, instruction_budget, memory_limit (bytes),
 * idle_timeout, watch_timeout_min, watch_timeout_max, page_size,
 * watch_list ("off", "on" or "auto"), watch_list_deadline, cache_compression,
 * cache_compression_after. Unset strings are nil and unset numbers
 * 0, as klua's runtime receives them.
 *
 * A submodule of klua_testing.so, found by Lua's all-in-one C loader, so
 * that it needs no entry in the main module.
 */
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "testing.h"

int luaopen_klua_testing_cli(lua_State *L);

static void push_options(lua_State *L, const kl_cli *c) {
    lua_createtable(L, 0, 20);
    kl_testing_set_string(L, "command", c->command);
    kl_testing_set_string(L, "script", c->script);
    kl_testing_set_boolean(L, "help", c->help);
    lua_createtable(L, c->nargs, 0);
    for (int i = 0; i < c->nargs; i++) {
        lua_pushstring(L, c->args[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "args");
    kl_testing_set_integer(L, "verbosity", c->verbosity);
    kl_testing_set_string(L, "log_format", c->format == KL_LOG_JSON ? "json" : "text");
    kl_testing_set_string(L, "kubeconfig", c->rt.conn.kubeconfig);
    kl_testing_set_string(L, "context", c->rt.conn.context);
    kl_testing_set_string(L, "server", c->rt.conn.server);
    kl_testing_set_string(L, "token", c->rt.conn.token);
    kl_testing_set_boolean(L, "insecure_skip_tls_verify", c->rt.conn.insecure_skip_tls_verify);
    kl_testing_set_boolean(L, "allow_insecure_credentials", c->rt.conn.allow_insecure_credentials);
    kl_testing_set_string(L, "as", c->rt.conn.as);
    kl_testing_set_string(L, "as_uid", c->rt.conn.as_uid);
    lua_createtable(L, (int)c->rt.conn.n_as_groups, 0);
    for (size_t i = 0; i < c->rt.conn.n_as_groups; i++) {
        lua_pushstring(L, c->rt.conn.as_groups[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "as_groups");
    kl_testing_set_boolean(L, "disable_compression", c->rt.conn.disable_compression);
    kl_testing_set_integer(L, "instruction_budget", (lua_Integer)c->rt.instruction_budget);
    kl_testing_set_integer(L, "memory_limit", (lua_Integer)c->rt.memory_limit);
    kl_testing_set_number(L, "idle_timeout", c->rt.idle_timeout);
    kl_testing_set_number(L, "watch_timeout_min", c->rt.watch_timeout_min);
    kl_testing_set_number(L, "watch_timeout_max", c->rt.watch_timeout_max);
    kl_testing_set_integer(L, "page_size", c->rt.page_size);
    static const char *const watch_list[] = {"off", "on", "auto"};
    kl_testing_set_string(L, "watch_list", watch_list[c->rt.watch_list]);
    kl_testing_set_number(L, "watch_list_deadline", c->rt.watch_list_deadline);
    kl_testing_set_boolean(L, "cache_compression", c->rt.cache_compression);
    kl_testing_set_number(L, "cache_compression_after", c->rt.cache_compression_after);
}

/* The arguments as argv, "klua" first; the strings stay in the table. */
static char **build_argv(lua_State *L, int *argc) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 1);
    luaL_argcheck(L, n >= 0 && n < 100000, 1, "too many arguments");
    char **argv = lua_newuserdatauv(L, ((size_t)n + 2) * sizeof *argv, 0);
    argv[0] = "klua";
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, 1, i);
        argv[i] = (char *)luaL_checkstring(L, -1);
        lua_pop(L, 1); /* the table keeps the string alive */
    }
    argv[n + 1] = NULL;
    *argc = (int)n + 1;
    return argv;
}

/* parse(args) -> options | nil, message. */
static int t_parse(lua_State *L) {
    int argc;
    char **argv = build_argv(L, &argc);
    char *msg = NULL;
    size_t msglen = 0;
    FILE *errs = open_memstream(&msg, &msglen);
    if (!errs) return luaL_error(L, "open_memstream failed");
    kl_cli c;
    int rc = kl_cli_parse(&c, argc, argv, errs);
    fclose(errs);
    if (rc == 0) {
        push_options(L, &c);
    } else {
        lua_pushnil(L);
        while (msglen && msg[msglen - 1] == '\n') msglen--;
        lua_pushlstring(L, msg, msglen);
    }
    free(msg);
    kl_cli_free(&c);
    return rc == 0 ? 1 : 2;
}

int luaopen_klua_testing_cli(lua_State *L) {
    static const luaL_Reg funcs[] = {{"parse", t_parse}, {NULL, NULL}};
    luaL_newlib(L, funcs);
    kl_cli_push_suggest(L);
    lua_setfield(L, -2, "suggest");
    return 1;
}
