/*
 * fuzz_selector.c - libFuzzer target for the client-side label selector
 * (lua/klua/selector.lua, the copy compiled into klua).
 *
 * fuzz/selector_check.lua says what an input is and which promises hold
 * (lua_check.h runs it).
 */
#define CHECK_NAME "fuzz_selector"
#define CHECK_MODULE "klua.selector"
#define CHECK_FILE "selector_check.lua"
#include "lua_check.h"
