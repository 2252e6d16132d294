/*
 * testing_json.c - the JSON layer in klua_testing, for the specs.
 *
 *   view(json)                 a view of json, parsed lazily (as the store's)
 *   view_probe(json)           a view and a probe: probe() is the number of
 *                              references on the view's blob besides the
 *                              probe's own; probe:view() is another view of
 *                              the same blob
 *   event_view(frame, kind [, table])
 *                              the view a handler gets for a watch event
 *                              (reusing the event's parse), or nil, err
 *   decode_event(frame, kind [, table])
 *                              {type=, ns=, name=, rv=, object_json=, code=,
 *                              reason=, message=, initial_events_end=,
 *                              parsed_bytes= (memory the parse kept for the
 *                              view holds)} or nil, err; table: the event of
 *                              a Table watch (kl_decode_table_event)
 *   row_view(row)              a view of a Table row's object, or nil, err
 *   table_cells(view)          the cells of the row the view's object came
 *                              in, or nil (kl_view_push_cells)
 *   decode_list(body)          {items = {{ns=, name=, rv=, json=}...}, rv=,
 *                              continue=, remaining=} or nil, err
 *   decode_status(body)        {code=, reason=, message=} or nil
 *   view_json(v)               kl_view_json: the bytes of a view, or nil
 *   view_copy(v)               kl_view_copy
 *   copy, get, type            klua.copy, klua.get and klua.type
 *   json, null                 the klua.json table and klua.null
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "wire/decode.h"
#include "wire/list_stream.h"
#include "wire/prune.h"
#include "wire/json.h"
#include "lua/lua_json.h"
#include "testing.h"
#include "lua/view.h"

#define PROBE_MT "klua_testing.blob_probe"

static const char *type_names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};

/* Wraps s in a blob-backed kl_obj, as the store holds objects. */
static kl_blob *blob_from_arg(lua_State *L, int i) {
    size_t len;
    const char *s = luaL_checklstring(L, i, &len);
    kl_blob *b = kl_blob_new(s, len);
    if (!b) luaL_error(L, "out of memory");
    return b;
}

static void push_view_of(lua_State *L, kl_blob *b) {
    kl_obj o = {0};
    o.blob = b;
    o.len = b->len;
    kl_view_push(L, &o, NULL);
}

static int t_view(lua_State *L) {
    kl_blob *b = blob_from_arg(L, 1);
    push_view_of(L, b);
    kl_blob_unref(b);
    return 1;
}

/* testing.editable_view(json) -> the view a transform is given. */
static int t_editable_view(lua_State *L) {
    kl_blob *b = blob_from_arg(L, 1);
    kl_obj o = {.blob = b, .len = b->len};
    kl_view_push_editable(L, &o, NULL);
    kl_blob_unref(b);
    return 1;
}

/* testing.seal(view): what a transform's return does to its object. */
static int t_seal(lua_State *L) {
    kl_view_seal(L, 1);
    return 0;
}

/* testing.edits_touch(view, parent, key) */
static int t_edits_touch(lua_State *L) {
    const char *const member[1][2] = {{luaL_optstring(L, 2, NULL), luaL_checkstring(L, 3)}};
    lua_pushboolean(L, kl_view_edits_touch(L, 1, member, 1));
    return 1;
}

static kl_blob *check_probe(lua_State *L) { return kl_testing_unbox(L, 1, PROBE_MT, "blob probe"); }

static int probe_refs(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)check_probe(L)->refs - 1);
    return 1;
}

static int probe_gc(lua_State *L) {
    kl_blob_unref(kl_testing_take(L, PROBE_MT));
    return 0;
}

static int probe_view(lua_State *L) {
    push_view_of(L, check_probe(L));
    return 1;
}

static int t_view_probe(lua_State *L) {
    void **probe = kl_testing_box(L, PROBE_MT);
    kl_blob *b = blob_from_arg(L, 1);
    *probe = b;
    push_view_of(L, b);
    lua_insert(L, -2);
    return 2;
}

static void push_event(lua_State *L, const kl_event *ev) {
    lua_newtable(L);
    kl_testing_set_string(L, "type", type_names[ev->type]);
    kl_testing_set_string(L, "ns", ev->obj.ns);
    kl_testing_set_string(L, "name", ev->obj.name);
    kl_testing_set_string(L, "rv", ev->obj.rv);
    if (ev->obj.blob) {
        lua_pushlstring(L, ev->obj.blob->data + ev->obj.off, ev->obj.len);
        lua_setfield(L, -2, "object_json");
    }
    lua_pushinteger(L, ev->code);
    lua_setfield(L, -2, "code");
    kl_testing_set_string(L, "reason", ev->reason);
    kl_testing_set_string(L, "message", ev->message);
    lua_pushboolean(L, ev->initial_events_end);
    lua_setfield(L, -2, "initial_events_end");
    if (ev->parsed) {
        lua_pushinteger(L, (lua_Integer)kl_json_doc_memory(ev->parsed));
        lua_setfield(L, -2, "parsed_bytes");
    }
}

/* Decodes the frame at 1 with the kind at 2, as an event of a Table watch
 * when the boolean at 3 is true; pushes nil, err on failure. */
static int decode_arg(lua_State *L, kl_event *ev) {
    kl_blob *b = blob_from_arg(L, 1);
    const char *kind = luaL_optstring(L, 2, NULL);
    char err[256];
    int rc = lua_toboolean(L, 3) ? kl_decode_table_event(b, kind, ev, err, sizeof err)
                                 : kl_decode_event(b, kind, ev, err, sizeof err);
    kl_blob_unref(b);
    if (rc == 0) return 0;
    lua_pushnil(L);
    lua_pushstring(L, err);
    return -1;
}

static int t_decode_event(lua_State *L) {
    kl_event ev;
    if (decode_arg(L, &ev) < 0) return 2;
    push_event(L, &ev);
    kl_event_clear(&ev);
    return 1;
}

static int t_event_view(lua_State *L) {
    kl_event ev;
    if (decode_arg(L, &ev) < 0) return 2;
    if (!ev.obj.blob) {
        kl_event_clear(&ev);
        return luaL_error(L, "an ERROR event has no object to view");
    }
    kl_view_push(L, &ev.obj, ev.parsed);
    kl_event_clear(&ev);
    return 1;
}

/* table_cells(view): kl_view_push_cells. */
static int t_table_cells(lua_State *L) {
    kl_view_push_cells(L, 1);
    return 1;
}

/* row_view(row): a view of the object of the Table row at 1 (kl_decode_row),
 * or nil, err. */
static int t_row_view(lua_State *L) {
    kl_blob *b = blob_from_arg(L, 1);
    kl_obj o;
    char err[256];
    int rc = kl_decode_row(b, &o, err, sizeof err);
    kl_blob_unref(b);
    if (rc < 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    kl_view_push(L, &o, NULL);
    kl_obj_clear(&o);
    return 1;
}

static void push_item(lua_State *L, const kl_obj *o) {
    lua_createtable(L, 0, 4);
    kl_testing_set_string(L, "ns", o->ns);
    kl_testing_set_string(L, "name", o->name);
    kl_testing_set_string(L, "rv", o->rv);
    lua_pushlstring(L, o->blob->data + o->off, o->len);
    lua_setfield(L, -2, "json");
}

static int push_list(lua_State *L, kl_list *list);

static int t_decode_list(lua_State *L) {
    size_t len;
    const char *body = luaL_checklstring(L, 1, &len);
    kl_list list;
    char err[256];
    if (kl_decode_list(body, len, &list, err, sizeof err) < 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    return push_list(L, &list);
}

/* check_list(body [, kind [, table]]): kl_decode_list, then kl_list_check:
 * true, or nil, err. */
static int t_check_list(lua_State *L) {
    size_t len;
    const char *body = luaL_checklstring(L, 1, &len);
    const char *kind = luaL_optstring(L, 2, NULL);
    kl_list list;
    char err[256];
    int rc = kl_decode_list(body, len, &list, err, sizeof err);
    if (rc == 0) rc = kl_list_check(&list, kind, lua_toboolean(L, 3), err, sizeof err);
    kl_list_clear(&list);
    if (rc < 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* decode_list_stream({chunk, ...} [, max_item [, rows [, cbor [, trace [, drop]]]]]):
 * the streaming decoder fed the chunks in order; the same result as
 * decode_list. rows: read a Table's rows too (kl_list_stream_rows); cbor:
 * the chunks are a CBOR body (kl_list_stream_cbor); drop: a dotted path to
 * prune from each item (kl_list_stream_prune). With trace, the result has
 * besides decoded_after (how many items were decoded after each chunk) and
 * held (the most bytes the stream's own buffers held at once). */
static int t_decode_list_stream(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer max = luaL_optinteger(L, 2, 16 << 20);
    int trace = lua_toboolean(L, 5);
    kl_list list;
    kl_list_stream s;
    kl_list_stream_init(&s, &list, (size_t)max);
    if (lua_toboolean(L, 3)) kl_list_stream_rows(&s);
    if (lua_toboolean(L, 4)) kl_list_stream_cbor(&s);
    const char *drop = luaL_optstring(L, 6, NULL);
    kl_prune *prune = NULL;
    if (drop) {
        char perr[200];
        if (!(prune = kl_prune_new(&drop, 1, perr, sizeof perr))) return luaL_error(L, "%s", perr);
        kl_list_stream_prune(&s, prune);
    }
    lua_Integer n = (lua_Integer)luaL_len(L, 1);
    int rc = 0;
    size_t held = 0;
    lua_createtable(L, (int)n, 0); /* items decoded after each chunk */
    for (lua_Integer i = 1; i <= n && rc == 0; i++) {
        size_t len;
        lua_rawgeti(L, 1, i);
        const char *chunk = luaL_checklstring(L, -1, &len);
        rc = kl_list_stream_feed(&s, chunk, len);
        lua_pop(L, 1);
        lua_pushinteger(L, (lua_Integer)list.n);
        lua_rawseti(L, -2, i);
        if (s.scratch_cap + s.envcap > held) held = s.scratch_cap + s.envcap;
    }
    if (rc == 0) rc = kl_list_stream_finish(&s);
    kl_list_stream_free(&s);
    kl_prune_free(prune);
    if (rc < 0) {
        kl_list_clear(&list);
        lua_pushnil(L);
        lua_pushstring(L, s.err);
        return 2;
    }
    push_list(L, &list);
    if (!trace) {
        lua_remove(L, -2);
        return 1;
    }
    lua_rotate(L, -2, 1);
    lua_setfield(L, -2, "decoded_after");
    lua_pushinteger(L, (lua_Integer)held);
    lua_setfield(L, -2, "held");
    return 1;
}

static int push_list(lua_State *L, kl_list *l) {
    kl_list list = *l;
    lua_newtable(L);
    lua_createtable(L, (int)list.n, 0);
    for (size_t i = 0; i < list.n; i++) {
        push_item(L, &list.items[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "items");
    kl_testing_set_string(L, "rv", list.rv);
    kl_testing_set_string(L, "continue", list.cont);
    lua_pushinteger(L, list.remaining);
    lua_setfield(L, -2, "remaining");
    lua_pushboolean(L, list.has_items);
    lua_setfield(L, -2, "has_items");
    kl_list_clear(&list);
    return 1;
}

static int t_decode_status(lua_State *L) {
    size_t len;
    const char *body = luaL_checklstring(L, 1, &len);
    int code;
    char *reason, *message;
    if (kl_decode_status(body, len, &code, &reason, &message) < 0) return 0;
    lua_newtable(L);
    lua_pushinteger(L, code);
    lua_setfield(L, -2, "code");
    kl_testing_set_string(L, "reason", reason);
    kl_testing_set_string(L, "message", message);
    free(reason);
    free(message);
    return 1;
}

/* kl_view_write into a Lua table of pieces; an edited member goes through
 * klua.json.encode. */
static void piece_put(void *ctx, const char *s, size_t n) {
    lua_State *L = ctx;
    lua_pushlstring(L, s, n);
    lua_rawseti(L, 2, (lua_Integer)lua_rawlen(L, 2) + 1);
}

static void piece_value(void *ctx, int idx, const kl_view_step *steps) {
    (void)steps;
    lua_State *L = ctx;
    kl_lua_json_encode(L, idx);
    lua_rawseti(L, 2, (lua_Integer)lua_rawlen(L, 2) + 1);
}

/* testing.view_json(v) -> what kl_view_write writes of v, or nothing when
 * v is no view. */
static int t_view_json(lua_State *L) {
    lua_settop(L, 1);
    lua_newtable(L); /* stack: v, pieces */
    kl_view_writer w = {piece_put, piece_value, L};
    if (!kl_view_write(L, 1, &w)) return 0;
    lua_getglobal(L, "table");
    lua_getfield(L, -1, "concat");
    lua_pushvalue(L, 2);
    lua_call(L, 1, 1);
    return 1;
}

static int t_view_copy(lua_State *L) {
    kl_view_copy(L, 1);
    return 1;
}

void kl_testing_open_json(lua_State *L) {
    static const luaL_Reg funcs[] = {{"view", t_view},
                                     {"view_probe", t_view_probe},
                                     {"event_view", t_event_view},
                                     {"row_view", t_row_view},
                                     {"table_cells", t_table_cells},
                                     {"decode_event", t_decode_event},
                                     {"decode_list", t_decode_list},
                                     {"decode_list_stream", t_decode_list_stream},
                                     {"check_list", t_check_list},
                                     {"decode_status", t_decode_status},
                                     {"view_json", t_view_json},
                                     {"editable_view", t_editable_view},
                                     {"seal", t_seal},
                                     {"edits_touch", t_edits_touch},
                                     {"view_copy", t_view_copy},
                                     {NULL, NULL}};
    kl_view_open(L);
    if (luaL_newmetatable(L, PROBE_MT)) {
        lua_pushcfunction(L, probe_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, probe_refs);
        lua_setfield(L, -2, "__call");
        lua_createtable(L, 0, 1);
        lua_pushcfunction(L, probe_view);
        lua_setfield(L, -2, "view");
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    luaL_setfuncs(L, funcs, 0);
    kl_view_set_functions(L);
    kl_lua_json_push_module(L);
    lua_setfield(L, -2, "json");
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "null");
}
