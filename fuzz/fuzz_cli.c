/*
 * fuzz_cli.c - libFuzzer target for klua's command-line parsers: the global
 * flag parser (src/cli/cli.c) and the `klua watch` flag parser
 * (require('klua.cmd.watch').parse in lua/klua/cmd/watch.lua).
 *
 * The input is an argument list, the words separated by NUL bytes (so
 * "watch\0pods\0-n\0default" is `klua watch pods -n default`); at most 64
 * words are taken. kl_cli_parse gets them after argv[0] = "klua", and
 * klua.cmd.watch's parse gets them as its argument table. Rejecting a line is
 * fine; a parse that succeeds must describe the line it was given:
 *   kl_cli_parse: the command, script and arguments are words of argv (or
 *   "help" or "version"), in order, and the numeric settings are within their bounds;
 *   kl_cli_answer (help, unknown commands, watch's words checked by
 *   klua.cmd.watch, all written to /dev/null) leaves to main() only run, watch,
 *   record, replay, webhook-config, test, version and completion, and
 *   otherwise gives an exit status of 0, 1 or 2;
 *   klua.cmd.watch parse, given klua's suggest function: returns options (targets,
 *   a known output format, jsonpath and custom-columns with theirs parsed) or
 *   nil, a message and a suggestion that is a flag, never raises, and the
 *   options ask for help or have at least one resource, and not both -n
 *   and -A.
 * The watch module is the copy compiled into klua (lua_embedded.c), loaded
 * with what it requires (klua.selector checks -l) and nothing else of the
 * runtime.
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "lua/embedded.h"
#include "lua_coverage.h"

#define MAX_WORDS 64

static struct {
    lua_State *L;  /* stack: klua.cmd.watch's parse */
    FILE *devnull; /* where kl_cli_parse's complaints go */
} g;

static void die(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_cli: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g.devnull = fopen("/dev/null", "w");
    g.L = luaL_newstate();
    if (!g.devnull || !g.L) die("cannot set up", NULL);
    luaL_openlibs(g.L);
    kl_embedded_add_searcher(g.L);
    lua_coverage_start(g.L);
    lua_getglobal(g.L, "require");
    lua_pushstring(g.L, "klua.cmd.watch");
    if (lua_pcall(g.L, 1, 1, 0) != LUA_OK) die("cannot load klua.cmd.watch", lua_tostring(g.L, -1));
    lua_getfield(g.L, -1, "parse");
    if (!lua_isfunction(g.L, -1)) die("klua.cmd.watch has no parse function", NULL);
    lua_remove(g.L, -2);
    return 0;
}

/* Splits data at NULs into argv[1..]; returns argc. The words live in buf. */
static int split(const uint8_t *data, size_t size, char *buf, char **argv) {
    memcpy(buf, data, size);
    buf[size] = 0;
    int argc = 0;
    argv[argc++] = "klua";
    for (size_t i = 0; i <= size && argc <= MAX_WORDS;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    return argc;
}

static int is_word(char **argv, int argc, const char *s) {
    for (int i = 1; i < argc; i++)
        if (argv[i] == s) return 1;
    return 0;
}

static void check_cli(int argc, char **argv) {
    kl_cli c;
    if (kl_cli_parse(&c, argc, argv, g.devnull) == 0) {
        /* --help and --version stand for the commands help and version. */
        if (c.command && strcmp(c.command, "help") && strcmp(c.command, "version") && !is_word(argv, argc, c.command))
            die("the command is not a word of the line", NULL);
        if (c.script && (!c.command || strcmp(c.command, "run") != 0 || !is_word(argv, argc, c.script)))
            die("a script was taken outside `run SCRIPT`", NULL);
        if (c.nargs < 0 || c.nargs > argc - 1) die("more arguments than words", NULL);
        for (int i = 0; i < c.nargs; i++)
            if (!is_word(argv, argc, c.args[i]) || (i && c.args[i] <= c.args[i - 1]))
                die("the arguments are not words of the line in order", NULL);
        if (c.verbosity < 0 || c.rt.instruction_budget < 0 || c.rt.page_size < 0 || c.rt.idle_timeout < 0 ||
            c.rt.watch_list_deadline < 0)
            die("a setting is out of its bounds", NULL);
        if (c.rt.watch_timeout_min && !(c.rt.watch_timeout_max > c.rt.watch_timeout_min))
            die("--watch-timeout gives an empty range", NULL);
        int code = kl_cli_answer(&c, g.devnull, g.devnull);
        int to_run = c.command && (!strcmp(c.command, "run") || !strcmp(c.command, "watch") ||
                                   !strcmp(c.command, "record") || !strcmp(c.command, "replay") ||
                                   !strcmp(c.command, "webhook-config") || !strcmp(c.command, "test") ||
                                   !strcmp(c.command, "version") || !strcmp(c.command, "completion"));
        if (code < 0 ? !to_run : code > 2) die("kl_cli_answer gave a status it should not", c.command);
    }
    kl_cli_free(&c);
}

/* Field key of the options table at -1 is nil or a string. */
static int string_or_nil(lua_State *L, const char *key) {
    int t = lua_getfield(L, -1, key);
    lua_pop(L, 1);
    return t == LUA_TNIL || t == LUA_TSTRING;
}

/* The options at -1 (a table), checked. [-0, +0] */
static void check_watch_options(lua_State *L) {
    if (lua_getfield(L, -1, "help") != LUA_TNIL) {
        if (!lua_toboolean(L, -1)) die("options with help that is not true", NULL);
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    if (lua_getfield(L, -1, "targets") != LUA_TTABLE || luaL_len(L, -1) < 1) die("options without a resource", NULL);
    for (lua_Integer i = 1; i <= luaL_len(L, -1); i++) {
        lua_rawgeti(L, -1, i);
        if (!lua_istable(L, -1) || lua_getfield(L, -1, "resource") != LUA_TSTRING) die("a target without a resource", NULL);
        lua_pop(L, 1);
        if (!string_or_nil(L, "name")) die("a target whose name is not a string", NULL);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_getfield(L, -1, "output");
    const char *out = lua_tostring(L, -1);
    static const char *const formats[] = {"table", "wide", "name", "json", "ndjson", "yaml", "line", NULL};
    int known = 0;
    for (int i = 0; out && formats[i]; i++) known |= !strcmp(out, formats[i]);
    if (out && !known) {
        const char *needs = !strcmp(out, "jsonpath") ? "template" : !strcmp(out, "custom-columns") ? "columns" : NULL;
        if (!needs) die("options with an output that is not one of the formats", out);
        if (lua_getfield(L, -2, needs) != LUA_TTABLE) die("a template format without its parsed template", out);
        lua_pop(L, 1);
    }
    if (!out) die("options without an output", NULL);
    lua_pop(L, 1);
    if (!string_or_nil(L, "namespace") || !string_or_nil(L, "name") || !string_or_nil(L, "selector") ||
        !string_or_nil(L, "field_selector") || !string_or_nil(L, "expr"))
        die("an option that is not a string", NULL);
    lua_getfield(L, -1, "all_namespaces");
    lua_getfield(L, -2, "namespace");
    if (lua_toboolean(L, -2) && !lua_isnil(L, -1)) die("options with both -n and -A", NULL);
    lua_pop(L, 2);
}

static void check_watch(int argc, char **argv) {
    lua_State *L = g.L;
    int base = lua_gettop(L);
    lua_pushvalue(L, 1);
    lua_createtable(L, argc - 1, 0);
    for (int i = 1; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i);
    }
    kl_cli_push_suggest(L);
    if (lua_pcall(L, 2, 3, 0) != LUA_OK) die("klua.cmd.watch parse raised", lua_tostring(L, -1));
    if (lua_isnil(L, -3)) {
        if (!lua_isstring(L, -2)) die("klua.cmd.watch parse failed without a message", NULL);
        if (!lua_isnil(L, -1) && (!lua_isstring(L, -1) || lua_tostring(L, -1)[0] != '-'))
            die("klua.cmd.watch parse suggested something that is not a flag", NULL);
    } else {
        lua_pop(L, 2);
        if (!lua_istable(L, -1)) die("klua.cmd.watch parse returned neither options nor nil", NULL);
        check_watch_options(L);
    }
    lua_settop(L, base);
    lua_gc(L, LUA_GCSTEP, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    char *argv[MAX_WORDS + 2];
    if (!buf) die("out of memory", NULL);
    int argc = split(data, size, buf, argv);
    check_cli(argc, argv);
    check_watch(argc, argv);
    free(buf);
    return 0;
}
