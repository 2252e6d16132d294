/*
 * view.h - lazy read-only Lua views over objects kept as JSON bytes.
 *
 * Handlers and cache lookups receive views, not decoded tables: a view
 * decodes only what the script touches, so reading three fields of a Pod
 * costs a parse of its bytes (reused from the watch event when there is
 * one) and three lookups, never a table per field.
 *
 * The Lua contract:
 *   obj.metadata.name, obj.spec.containers[1].image: indexing works as on
 *     tables. Objects and arrays inside are views too; scalars are plain
 *     values: strings, booleans, integers as Lua integers (math.type
 *     'integer') when they fit 64 bits, other numbers as floats, and JSON
 *     null as klua.null (the same value as cjson.null). Missing keys are
 *     nil; arrays are 1-based.
 *   pairs(view) walks an object's members in JSON order or an array's
 *     elements 1..n; ipairs works on arrays. #view is an array's length and
 *     0 for an object (as for a table without an array part).
 *   A member reads as itself whatever its name: views have no methods
 *     (obj.metadata.labels.copy is the label "copy", nil when missing).
 *     The operations are functions of the klua module, which work alike
 *     on views and on plain tables: klua.copy(v) a plain, mutable, fully
 *     decoded table (as klua.json.decode would build it: arrays carry
 *     klua.json.array_mt); klua.get(v, k1, k2, ...) a nested member or nil
 *     when a step is missing; klua.type(v) "object", "array", ...
 *   tostring(view) and klua.json.encode(view) give the value's JSON, its
 *     exact bytes. type(view) is "userdata".
 *   Writes raise "klua: cannot set field 'x': objects from the cache are
 *     read-only; use klua.edit(obj) or klua.copy(obj) to change it", but
 *     in the views that take writes: klua.edit(v)'s, and the object a
 *     transform is given while it runs (kl_view_push_editable).
 *   Two views of the same value compare equal (==).
 *
 * Lifetime: a view holds a reference on its object's blob, so it stays
 * readable after the store drops the object. The parsed form, shared by
 * the views of one object, is freed with the last of them; it comes from
 * the Lua state's allocator (so --memory-limit covers it) but lies outside
 * the collector's heap, which counts it as debt instead: a dead view kept
 * for its finalizer's cycle then cannot raise the next cycle's threshold.
 * A view read after its object was collected (by a __gc handler that
 * reaches it in that same cycle) raises an error.
 */
#ifndef KLUA_VIEW_H
#define KLUA_VIEW_H

#include <lua.h>

#include "wire/obj.h"

/* Creates the metatables; call once per lua_State. Stack unchanged. [-0, +0] */
void kl_view_open(lua_State *L);
/* Makes debug.setmetatable refuse a view, once the standard libraries are
 * open. [-0, +0, e] */
void kl_view_guard_debug(lua_State *L);

/* Pushes a view of o's object (takes its own blob reference). parsed:
 * optional parsed form of the bytes from kl_decode_event (kl_event.parsed,
 * a kl_json_doc with the object selected); the view copies what it needs,
 * the caller keeps ownership. NULL parses lazily on first access. [-0, +1] */
void kl_view_push(lua_State *L, const kl_obj *o, void *parsed);

/* As kl_view_push, for a transform: the view takes writes, as client-go's
 * transforms change the object they are given. obj.x = v, obj.a.b = nil,
 * arr[#arr + 1] = v, table.insert and table.remove on its arrays are
 * recorded beside the bytes, not applied to them: reads, pairs, #,
 * klua.get and klua.copy see them, and kl_view_write writes the bytes with
 * them. An array's elements 1 to #arr + 1 can be set, and only the last
 * to nil, as on a table that stays a sequence. [-0, +1] */
void kl_view_push_editable(lua_State *L, const kl_obj *o, void *parsed);

/* Ends the writes to the view at idx and to views inside it (its
 * transform returned or failed): a write then raises. Its edits stay as read.
 * [-0, +0, e] */
void kl_view_seal(lua_State *L, int idx);

/* Whether the value at idx is a view. [-0, +0] */
int kl_view_test(lua_State *L, int idx);

/* Whether the value at idx is a view of an object that writes changed. [-0, +0] */
int kl_view_edited(lua_State *L, int idx);

/* Whether a write went to any of the n members {parent, key}:
 * obj[parent][key] (obj[key] for a NULL parent) or obj[parent] itself, obj
 * the view at idx, an object. It answers from the edits alone: a write may
 * have set the value it found. [-0, +0, e] */
int kl_view_edits_touch(lua_State *L, int idx, const char *const members[][2], size_t n);

/* One step from the view written down to an edited member: an object's
 * member named key (keylen bytes), or with key NULL an array's element
 * index; next the step below it, NULL at the member. */
typedef struct kl_view_step {
    const char *key;
    size_t keylen;
    long long index;
    const struct kl_view_step *next;
} kl_view_step;

/* Where kl_view_write writes: put the text as it is; value the Lua value
 * at stack index idx (an edited member, or an added member's name),
 * encoded, where steps lead to it from the view, for its errors to name. */
typedef struct kl_view_writer {
    void (*put)(void *ctx, const char *s, size_t n);
    void (*value)(void *ctx, int idx, const kl_view_step *steps);
    void *ctx;
} kl_view_writer;

/* If the value at idx is a view, writes its JSON through w and returns 1,
 * else returns 0: its exact bytes, and for an object edited (see
 * kl_view_push_editable) those bytes with each edited container written
 * member by member, a member not written to copied as it is. Raises an
 * error for a view whose object was collected. [-0, +0, e] */
int kl_view_write(lua_State *L, int idx, const kl_view_writer *w);

/* Pushes a plain, mutable, fully decoded copy of the view at idx (as
 * klua.copy(obj)). Raises an error if idx is not a view. [-0, +1, e] */
void kl_view_copy(lua_State *L, int idx);

/* Pushes the cells of the Table row that the object of the view at idx
 * came in (kl_decode_row, kl_decode_table_event), decoded as klua.json
 * decodes, or nil when it came alone. Parses the row: for printing, not
 * for hot paths. Raises an error if idx is not a view. [-0, +1, e] */
void kl_view_push_cells(lua_State *L, int idx);

/* Sets the functions copy, get and type (klua.copy, klua.get, klua.type)
 * in the table on top of the stack; kl_view_open must have run. [-0, +0] */
void kl_view_set_functions(lua_State *L);

#endif
