/*
 * lua_json.h - the klua.json table: JSON text to Lua values and back.
 *
 * Decoding gives plain tables, exactly as klua.copy(view) does: JSON integers
 * that fit 64 bits are Lua integers, other numbers floats, null is
 * klua.null (the light userdata NULL, the same value as cjson.null), and
 * every array carries the shared metatable klua.json.array_mt so that it
 * encodes back as an array even when empty.
 *
 * Encoding rules (docs/json.md has the reasons):
 *   integers print without ".0"; an integer-valued float prints as an
 *   integer (3.0 -> 3), other floats with the fewest digits that read back
 *   exactly (at most 17); NaN and infinities are errors.
 *   A table marked with array_mt is an array (even empty); an unmarked
 *   table whose keys are exactly 1..n is an array; an empty unmarked table
 *   is {}; a table whose keys are all strings is an object; anything else
 *   (mixed or sparse keys) is an error. Object key order is not kept.
 *   Strings must be valid UTF-8 (an error otherwise); quotes, backslashes and
 *   control characters are escaped, everything else is passed through.
 *   klua.null is null; a view is written as its raw JSON bytes.
 *   Cycles, functions, threads, other userdata are errors that name the
 *   path: "cannot encode a function at spec.template".
 */
#ifndef KLUA_LUA_JSON_H
#define KLUA_LUA_JSON_H

#include <lua.h>

#include "wire/json.h"

/* Pushes the klua.json table: encode, decode, null, array_mt, array.
 * [-0, +1] */
void kl_lua_json_push_module(lua_State *L);

/* Encodes the value at idx to JSON into a new Lua string pushed on the
 * stack, or raises a Lua error with a clear message. Views are emitted from
 * their raw bytes. [-0, +1, e] */
void kl_lua_json_encode(lua_State *L, int idx);

/* As kl_lua_json_encode, but pushes a userdata holding the text rather than
 * a string, and returns the text (its length in *len): for a caller that
 * copies it out at once, before any other encode, which may overwrite it.
 * [-0, +1, e] */
const char *kl_lua_json_encode_text(lua_State *L, int idx, size_t *len);

/* Decodes s into a value as klua.copy(view) would. Returns 1 with the value
 * pushed, or pushes nil and a message and returns 2. [-0, +1|+2] */
int kl_lua_json_decode(lua_State *L, const char *s, size_t len);

/* How klua.json.encode writes the table at idx: '[' an array, '{' an
 * object, 0 neither (mixed or sparse keys). [-0, +0] */
int kl_lua_json_table_kind(lua_State *L, int idx);

/* Pushes the metatable that marks tables as JSON arrays, creating it on
 * first use. [-0, +1] */
void kl_lua_json_push_array_mt(lua_State *L);

/* Pushes the value at tape index i fully decoded, as klua.json.decode
 * would; amt is the stack index of the array metatable (unused when the
 * value is not a container). [-0, +1] */
void kl_lua_json_push_value(lua_State *L, const kl_json_tape *t, size_t i, int amt);

/* Pushes a userdata holding a kl_json_doc pointer (initially NULL) that
 * frees the document when collected, so that a memory error raised while a
 * document is turned into Lua values does not leak it. Store the document
 * in *guard; free it and set NULL when done. [-0, +1] */
kl_json_doc **kl_lua_json_push_guard(lua_State *L);

#endif
