/*
 * testing_framer.c - `klua_testing.framer(max, scanner)` for the specs.
 *
 * With scanner ("avx512", "avx2" or "portable") it runs that one instead of
 * the fastest this CPU runs, or returns nil and a message when it cannot.
 * Returns a framer object whose :feed(bytes) returns the list of events the
 * bytes completed, each {frame = "..."} or {oversize = max}, whose
 * :pending() tells how many bytes of an unfinished frame it holds, and whose
 * :reset() drops them and starts over between values. With cbor true it
 * frames a CBOR Sequence: each frame is an item's JSON text, and bytes that
 * are not an item klua reads are {malformed = "why"}.
 *
 * `klua_testing.cbor_to_json(bytes)` is kl_cbor_to_json: the JSON text, or
 * nil and the message.
 */
#include <lauxlib.h>
#include <string.h>

#include "wire/framer.h"
#include "testing.h"

#define FRAMER_MT "klua_testing.framer"

typedef struct {
    kl_framer f;
    lua_State *L; /* set during feed: events are appended to the table on top */
} test_framer;

static void append_event(lua_State *L) {
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
}

static void on_frame(void *ud, kl_blob *b) {
    test_framer *t = ud;
    lua_createtable(t->L, 0, 1);
    lua_pushlstring(t->L, b->data, b->len);
    lua_setfield(t->L, -2, "frame");
    append_event(t->L);
    kl_blob_unref(b);
}

static void on_oversize(void *ud, size_t max) {
    test_framer *t = ud;
    lua_createtable(t->L, 0, 1);
    lua_pushinteger(t->L, (lua_Integer)max);
    lua_setfield(t->L, -2, "oversize");
    append_event(t->L);
}

static void on_malformed(void *ud, const char *why) {
    test_framer *t = ud;
    lua_createtable(t->L, 0, 1);
    lua_pushstring(t->L, why);
    lua_setfield(t->L, -2, "malformed");
    append_event(t->L);
}

static int t_feed(lua_State *L) {
    test_framer *t = luaL_checkudata(L, 1, FRAMER_MT);
    size_t len;
    const char *s = luaL_checklstring(L, 2, &len);
    lua_newtable(L);
    t->L = L;
    int rc = kl_framer_feed(&t->f, s, len);
    t->L = NULL;
    if (rc < 0) return luaL_error(L, "framer: out of memory");
    return 1;
}

static int t_pending(lua_State *L) {
    test_framer *t = luaL_checkudata(L, 1, FRAMER_MT);
    lua_pushinteger(L, (lua_Integer)kl_framer_pending(&t->f));
    return 1;
}

static int t_reset(lua_State *L) {
    test_framer *t = luaL_checkudata(L, 1, FRAMER_MT);
    kl_framer_reset(&t->f);
    return 0;
}

static int t_gc(lua_State *L) {
    test_framer *t = luaL_checkudata(L, 1, FRAMER_MT);
    kl_framer_reset(&t->f);
    return 0;
}

static int t_new(lua_State *L) {
    lua_Integer max = luaL_optinteger(L, 1, (lua_Integer)KL_FRAME_MAX_DEFAULT);
    luaL_argcheck(L, max > 0, 1, "max must be positive");
    const char *scanner = luaL_optstring(L, 2, NULL);
    int cbor = lua_toboolean(L, 3);
    test_framer *t = lua_newuserdatauv(L, sizeof *t, 0);
    memset(t, 0, sizeof *t);
    kl_framer_init(&t->f, (size_t)max, (kl_framer_callbacks){on_frame, on_oversize, on_malformed}, t);
    kl_framer_cbor(&t->f, cbor);
    if (scanner && kl_framer_use_scanner(&t->f, scanner) < 0) {
        luaL_pushfail(L);
        lua_pushfstring(L, "this CPU or build has no %s scanner", scanner);
        return 2;
    }
    luaL_setmetatable(L, FRAMER_MT);
    return 1;
}

static int t_cbor_to_json(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    char err[200];
    kl_blob *json = kl_cbor_to_json(s, len, err, sizeof err);
    if (!json) {
        luaL_pushfail(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_pushlstring(L, json->data, json->len);
    kl_blob_unref(json);
    return 1;
}

void kl_testing_open_framer(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"feed", t_feed}, {"pending", t_pending}, {"reset", t_reset}, {"__gc", t_gc}, {NULL, NULL}};
    kl_testing_new_class(L, FRAMER_MT, methods);
    lua_pushcfunction(L, t_new);
    lua_setfield(L, -2, "framer");
    lua_pushcfunction(L, t_cbor_to_json);
    lua_setfield(L, -2, "cbor_to_json");
}
