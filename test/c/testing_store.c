/*
 * testing_store.c - `klua_testing.store()` for the specs: a kl_store fed
 * with JSON objects.
 *
 * Each object is decoded as a LIST item is (kl_decode_item), into a blob of
 * its own. Methods: put(json) -> whether the key was present and the JSON
 * it held; get(key) -> {json, ns, name, rv} or nil; delete(key) -> the
 * JSON removed, or nil; replace({json, ...}) -> the changes as sorted
 * "add|update|delete key rv" strings, and the JSON each update and
 * delete handed over, by key; keys([ns]) -> the sorted keys, of
 * namespace ns only when given; objects([ns]) -> the sorted JSON of the
 * objects iterated likewise; packed() (s_packed); len().
 *
 * Its clock is the spec's, at 0 until set_time(t). compact{after=,
 * slice_bytes=, slice_entries=, min_bytes=} (KL_STORE_COMPACTION's for
 * those not given) -> whether the pass goes on, and when the next is due
 * (nil: none); compression() -> {objects, bytes, json_bytes, dict_bytes}.
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "cache/store.h"
#include "testing.h"

#define STORE_MT "klua_testing.store"

/* The store and the clock it reads. */
typedef struct tstore {
    kl_store *s;
    double now;
} tstore;

static tstore *check_t(lua_State *L) { return kl_testing_unbox(L, 1, STORE_MT, "store"); }
static kl_store *check(lua_State *L) { return check_t(L)->s; }

static double fake_now(void *ud) { return ((tstore *)ud)->now; }

/* Decodes json into *o; raises on bytes that are not an object with a name. */
static void decode(lua_State *L, int arg, kl_obj *o) {
    size_t len;
    const char *json = luaL_checklstring(L, arg, &len);
    kl_blob *b = kl_blob_new(json, len);
    char err[256];
    int rc = kl_decode_item(b, o, NULL, err, sizeof err);
    kl_blob_unref(b);
    if (rc) luaL_error(L, "%s", err);
}

static void push_json(lua_State *L, const kl_obj *o) { lua_pushlstring(L, o->blob->data + o->off, o->len); }

static int s_new(lua_State *L) {
    void **slot = kl_testing_box(L, STORE_MT);
    tstore *t = kl_xcalloc(1, sizeof *t);
    t->s = kl_store_new();
    kl_store_set_clock(t->s, fake_now, t);
    *slot = t;
    return 1;
}

static int s_put(lua_State *L) {
    kl_store *s = check(L);
    kl_obj o, old;
    memset(&old, 0, sizeof old);
    decode(L, 2, &o);
    int had = kl_store_put(s, &o, &old);
    lua_pushboolean(L, had);
    if (had) push_json(L, &old);
    else lua_pushnil(L);
    kl_obj_clear(&old);
    return 2;
}

/* Every read is checked for what store.h promises readers: a blob of
 * their own (released here, so that ASan sees one too many or too few),
 * padded with zeros past the object. */
static void check_read(lua_State *L, const kl_obj *o) {
    if (o->off + o->len > o->blob->len) luaL_error(L, "a read's bytes run past its blob");
    for (size_t i = 0; i < KL_BLOB_PADDING; i++)
        if (o->blob->data[o->blob->len + i]) luaL_error(L, "a read's blob is not padded with zeros");
}

static int s_get(lua_State *L) {
    kl_obj o;
    if (!kl_store_get(check(L), luaL_checkstring(L, 2), &o)) return 0;
    check_read(L, &o);
    lua_createtable(L, 0, 4);
    push_json(L, &o);
    lua_setfield(L, -2, "json");
    kl_testing_set_string(L, "ns", o.ns);
    kl_testing_set_string(L, "name", o.name);
    kl_testing_set_string(L, "rv", o.rv);
    kl_store_release(&o);
    return 1;
}

static int s_delete(lua_State *L) {
    kl_obj old;
    if (!kl_store_delete(check(L), luaL_checkstring(L, 2), &old)) return 0;
    push_json(L, &old);
    kl_obj_clear(&old);
    return 1;
}

/* Sorts the list at the top of the stack with table.sort. */
static void sort_top(lua_State *L) {
    lua_getglobal(L, "table");
    lua_getfield(L, -1, "sort");
    lua_remove(L, -2);
    lua_pushvalue(L, -2);
    lua_call(L, 1, 0);
}

/* Appends the value at the top of the stack to the list under it. */
static void append(lua_State *L) { lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1); }

static void on_change(void *ud, kl_change change, kl_obj *old, kl_obj *now) {
    lua_State *L = ud;
    static const char *const names[] = {"add", "update", "delete"};
    const kl_obj *o = now ? now : old;
    char key[512];
    kl_obj_key(o, key, sizeof key);
    lua_pushfstring(L, "%s %s %s", names[change], key, o->rv);
    append(L); /* stack: olds, changes */
    if (!old) return;
    push_json(L, old);
    lua_setfield(L, -3, key);
    kl_obj_clear(old);
}

static int s_replace(lua_State *L) {
    kl_store *s = check(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    kl_list list;
    memset(&list, 0, sizeof list);
    list.n = (size_t)luaL_len(L, 2);
    list.items = kl_xcalloc(list.n ? list.n : 1, sizeof *list.items);
    for (size_t i = 0; i < list.n; i++) {
        lua_rawgeti(L, 2, (lua_Integer)i + 1);
        decode(L, -1, &list.items[i]);
        lua_pop(L, 1);
    }
    lua_newtable(L);
    lua_newtable(L); /* stack: olds, changes */
    kl_store_replace(s, &list, on_change, L);
    kl_list_clear(&list);
    sort_top(L);
    lua_insert(L, -2);
    return 2;
}

/* The sorted keys (json 0) or JSON (1) of the objects iterated. */
static int iterate(lua_State *L, int json) {
    kl_store *s = check(L);
    const char *ns = luaL_optstring(L, 2, NULL);
    lua_newtable(L);
    size_t cur = 0;
    kl_obj o;
    while (ns ? kl_store_next_in(s, ns, &cur, &o) : kl_store_next(s, &cur, &o)) {
        check_read(L, &o);
        char key[512];
        kl_obj_key(&o, key, sizeof key);
        if (json) push_json(L, &o);
        else lua_pushstring(L, key);
        kl_store_release(&o);
        append(L);
    }
    sort_top(L);
    return 1;
}

/* packed() -> by key, how kl_store_next_packed handed each object over:
 * {packed = whether compressed, held = the bytes its blob held then,
 * json = its JSON, unpacked when packed}. */
static int s_packed(lua_State *L) {
    kl_store *s = check(L);
    lua_newtable(L);
    size_t cur = 0;
    kl_obj o;
    int packed;
    while (kl_store_next_packed(s, &cur, &o, &packed)) {
        char key[512];
        kl_obj_key(&o, key, sizeof key);
        lua_createtable(L, 0, 3);
        lua_pushboolean(L, packed);
        lua_setfield(L, -2, "packed");
        lua_pushinteger(L, (lua_Integer)o.blob->len);
        lua_setfield(L, -2, "held");
        if (packed) kl_store_unpack(s, &o);
        check_read(L, &o);
        push_json(L, &o);
        lua_setfield(L, -2, "json");
        kl_store_release(&o);
        lua_setfield(L, -2, key);
    }
    return 1;
}

static int s_keys(lua_State *L) { return iterate(L, 0); }
static int s_objects(lua_State *L) { return iterate(L, 1); }

static int s_set_time(lua_State *L) {
    check_t(L)->now = luaL_checknumber(L, 2);
    return 0;
}

static size_t opt_size(lua_State *L, const char *field, size_t dflt) {
    lua_getfield(L, 2, field);
    size_t v = lua_isnil(L, -1) ? dflt : (size_t)luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    return v;
}

static int s_compact(lua_State *L) {
    kl_store *s = check(L);
    kl_store_compaction c = KL_STORE_COMPACTION;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_getfield(L, 2, "after");
        if (!lua_isnil(L, -1)) c.after = luaL_checknumber(L, -1);
        lua_pop(L, 1);
        c.slice_bytes = opt_size(L, "slice_bytes", c.slice_bytes);
        c.slice_entries = opt_size(L, "slice_entries", c.slice_entries);
        c.min_bytes = opt_size(L, "min_bytes", c.min_bytes);
        c.block_bytes = opt_size(L, "block_bytes", c.block_bytes);
    }
    double due = 0;
    lua_pushboolean(L, kl_store_compact(s, &c, &due));
    if (due > 0) lua_pushnumber(L, due);
    else lua_pushnil(L);
    return 2;
}

static int s_compression(lua_State *L) {
    kl_store_compression_stats z;
    kl_store_compression(check(L), &z);
    lua_createtable(L, 0, 5);
    kl_testing_set_integer(L, "objects", (lua_Integer)z.objects);
    kl_testing_set_integer(L, "bytes", (lua_Integer)z.bytes);
    kl_testing_set_integer(L, "json_bytes", (lua_Integer)z.json_bytes);
    kl_testing_set_integer(L, "dict_bytes", (lua_Integer)z.dict_bytes);
    kl_testing_set_integer(L, "block_bytes", (lua_Integer)z.block_bytes);
    return 1;
}

static int s_len(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)kl_store_len(check(L)));
    return 1;
}

static int s_gc(lua_State *L) {
    tstore *t = kl_testing_take(L, STORE_MT);
    if (t) kl_store_free(t->s);
    free(t);
    return 0;
}

void kl_testing_open_store(lua_State *L) {
    static const luaL_Reg methods[] = {{"put", s_put},
                                       {"get", s_get},
                                       {"delete", s_delete},
                                       {"replace", s_replace},
                                       {"keys", s_keys},
                                       {"objects", s_objects},
                                       {"packed", s_packed},
                                       {"len", s_len},
                                       {"set_time", s_set_time},
                                       {"compact", s_compact},
                                       {"compression", s_compression},
                                       {"__gc", s_gc},
                                       {NULL, NULL}};
    kl_testing_new_class(L, STORE_MT, methods);
    lua_pushcfunction(L, s_new);
    lua_setfield(L, -2, "store");
}
