/*
 * lua_coverage.h - coverage of Lua code for libFuzzer.
 *
 * The Lua interpreter is not instrumented, so a target whose logic is Lua
 * would look like one path to libFuzzer whatever the input did. A line
 * hook marks each (function, line) reached in libFuzzer's extra counters,
 * which it reads as coverage: inputs that reach new Lua lines are kept.
 */
#ifndef KLUA_FUZZ_LUA_COVERAGE_H
#define KLUA_FUZZ_LUA_COVERAGE_H

#include <lua.h>
#include <stdint.h>

static uint8_t lua_lines[8192] __attribute__((used, section("__libfuzzer_extra_counters")));

static void lua_line_hook(lua_State *L, lua_Debug *ar) {
    if (!lua_getinfo(L, "S", ar)) return;
    uintptr_t h = (uintptr_t)ar->source * 31u + (uintptr_t)ar->linedefined * 131u + (uintptr_t)ar->currentline;
    h ^= h >> 13;
    uint8_t *c = &lua_lines[(h * 2654435761u) % sizeof lua_lines];
    if (*c < 255) (*c)++;
}

/* Starts marking the lines L runs. [-0, +0] */
static inline void lua_coverage_start(lua_State *L) { lua_sethook(L, lua_line_hook, LUA_MASKLINE, 0); }

#endif
