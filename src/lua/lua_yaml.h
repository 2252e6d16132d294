/*
 * lua_yaml.h - klua.core.yaml: Lua values to YAML text, as kubectl -o yaml
 * writes objects (go-yaml over libyaml's emitter).
 *
 * Keys are sorted as go-yaml sorts them (x9 before x10); sequences inside
 * mappings are not indented; a string that would read back as another type
 * (a number, a bool, null, a timestamp) is double-quoted, one with a newline
 * is a literal block, other strings are plain where YAML allows; long lines
 * fold at 80 columns, as go-yaml's do. Values are
 * what klua.json.decode gives (tables marked with klua.json.array_mt are
 * sequences, klua.null is null); views must be copied first.
 */
#ifndef KLUA_LUA_YAML_H
#define KLUA_LUA_YAML_H

#include <lua.h>

/* Pushes the yaml table: encode(value) -> text, one YAML document ending
 * in a newline, or raises an error naming the value it cannot write.
 * [-0, +1] */
void kl_lua_yaml_push_module(lua_State *L);

#endif
