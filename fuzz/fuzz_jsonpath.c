/*
 * fuzz_jsonpath.c - libFuzzer target for kubectl's JSONPath templates as
 * klua watch reads them (-o jsonpath=, custom-columns, --sort-by):
 * lua/klua/cmd/jsonpath.lua, the copy compiled into klua.
 *
 * fuzz/jsonpath_check.lua says what an input is and which promises hold
 * (lua_check.h runs it).
 */
#define CHECK_NAME "fuzz_jsonpath"
#define CHECK_MODULE "klua.cmd.jsonpath"
#define CHECK_FILE "jsonpath_check.lua"
#include "lua_check.h"
