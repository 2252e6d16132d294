/*
 * testing_store.c - `klua_testing.store()` for the specs: a kl_store fed
 * with JSON objects.
 *
 * Each object is decoded as a LIST item is (kl_decode_item), into a blob of
 * its own. Methods: put(json) -> whether the key was present and the JSON
 * it held; get(key) -> {json, ns, name, rv} or nil; delete(key) -> the
 * JSON removed, or nil; replace({json, ...}) -> the changes as sorted
 * "add|update|delete key rv" strings; keys([ns]) -> the sorted keys, of
 * namespace ns only when given; len().
 */
#include <lauxlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "cache/store.h"
#include "testing.h"

#define STORE_MT "klua_testing.store"

static kl_store *check(lua_State *L) { return kl_testing_unbox(L, 1, STORE_MT, "store"); }

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
    *kl_testing_box(L, STORE_MT) = kl_store_new();
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

static int s_get(lua_State *L) {
    const kl_obj *o = kl_store_get(check(L), luaL_checkstring(L, 2));
    if (!o) return 0;
    lua_createtable(L, 0, 4);
    push_json(L, o);
    lua_setfield(L, -2, "json");
    kl_testing_set_string(L, "ns", o->ns);
    kl_testing_set_string(L, "name", o->name);
    kl_testing_set_string(L, "rv", o->rv);
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
    append(L);
    if (old) kl_obj_clear(old);
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
    kl_store_replace(s, &list, on_change, L);
    kl_list_clear(&list);
    sort_top(L);
    return 1;
}

static int s_keys(lua_State *L) {
    kl_store *s = check(L);
    const char *ns = luaL_optstring(L, 2, NULL);
    lua_newtable(L);
    size_t cur = 0;
    const kl_obj *o;
    while ((o = ns ? kl_store_next_in(s, ns, &cur) : kl_store_next(s, &cur))) {
        char key[512];
        kl_obj_key(o, key, sizeof key);
        lua_pushstring(L, key);
        append(L);
    }
    sort_top(L);
    return 1;
}

static int s_len(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)kl_store_len(check(L)));
    return 1;
}

static int s_gc(lua_State *L) {
    kl_store_free(kl_testing_take(L, STORE_MT));
    return 0;
}

void kl_testing_open_store(lua_State *L) {
    static const luaL_Reg methods[] = {{"put", s_put},   {"get", s_get}, {"delete", s_delete},
                                       {"replace", s_replace}, {"keys", s_keys}, {"len", s_len},
                                       {"__gc", s_gc},   {NULL, NULL}};
    kl_testing_new_class(L, STORE_MT, methods);
    lua_pushcfunction(L, s_new);
    lua_setfield(L, -2, "store");
}
