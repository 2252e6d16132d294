/*
 * fuzz_view.c - libFuzzer target for the lazy Lua views (src/lua/view.c) and
 * klua.json (src/lua/lua_json.c).
 *
 * The input is any bytes, usually a JSON object or a watch frame. It walks,
 * with fuzz/view_walk.lua, the views a script can get:
 *   1. a view over the input, parsed on first access (as the store's);
 *   2. when the input decodes as a watch event with an object: the view a
 *      handler gets, sharing the event's parsed tape, and
 *   3. a view over that event's object bytes, parsed on first access;
 *   4. decoded as an event of a Table watch and as a Table row: the view of
 *      the row's object, whose cells (kl_view_push_cells) are nil or a
 *      list.
 * The walk itself checks what must agree; an error escaping it, or a view
 * still holding the input's blob after a full collection, aborts. One Lua
 * state serves every input: a new state per input would cost more than
 * the walk itself.
 *
 * fuzz/view_walk.lua is read once at start-up from $KLUA_ROOT/fuzz/, or
 * from ./fuzz/ when KLUA_ROOT is unset (make fuzz runs from the checkout).
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "wire/decode.h"
#include "lua/lua_json.h"
#include "lua/view.h"

/* The state every input is walked in; its stack holds walk and the table of
 * klua's object functions (copy, get, type and json, as in klua). */
static lua_State *state;

static void die(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_view: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, r;
    do {
        buf = kl_buf_grow(buf, &cap, n + 1, 1, 16384);
        r = fread(buf + n, 1, cap - n, f);
        n += r;
    } while (r > 0);
    fclose(f);
    *len = n;
    return buf;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *root = getenv("KLUA_ROOT");
    char path[4096];
    snprintf(path, sizeof path, "%s/fuzz/view_walk.lua", root && *root ? root : ".");
    size_t len;
    char *src = read_all(path, &len);
    if (!src) die("cannot read the walk script (run from the checkout's root or set KLUA_ROOT)", path);
    state = luaL_newstate();
    if (!state) die("out of memory", NULL);
    luaL_openlibs(state);
    kl_view_open(state);
    if (luaL_loadbuffer(state, src, len, "@fuzz/view_walk.lua") != LUA_OK || lua_pcall(state, 0, 1, 0) != LUA_OK)
        die("cannot load the walk script", lua_tostring(state, -1));
    free(src);
    lua_newtable(state);
    kl_view_set_functions(state);
    kl_lua_json_push_module(state);
    lua_setfield(state, -2, "json");
    return 0;
}

/* fail(message): the walk found a broken promise. */
static int l_fail(lua_State *L) {
    luaL_traceback(L, L, luaL_optstring(L, 1, "(no message)"), 1);
    die("broken promise", lua_tostring(L, -1));
    return 0;
}

/* Calls walk(view, klua, fail) for the view on top of the stack, which it
 * pops. [-1, +0] */
static void walk(lua_State *L) {
    lua_pushvalue(L, 1); /* walk */
    lua_insert(L, -2);
    lua_pushvalue(L, 2); /* klua */
    lua_pushcfunction(L, l_fail);
    if (lua_pcall(L, 3, 0, 0) != LUA_OK) die("the walk raised an error", lua_tostring(L, -1));
}

static void walk_event_views(lua_State *L, kl_blob *frame) {
    kl_event ev;
    char err[256];
    if (kl_decode_event(frame, NULL, &ev, err, sizeof err) < 0) return;
    if (ev.obj.blob) {
        kl_view_push(L, &ev.obj, ev.parsed);
        walk(L);
        kl_view_push(L, &ev.obj, NULL);
        walk(L);
    }
    kl_event_clear(&ev);
}

/* Reads the cells of the view on top, then walks the view (popping it). */
static void walk_with_cells(lua_State *L) {
    kl_view_push_cells(L, -1); /* stack: ..., view, cells */
    int t = lua_type(L, -1);
    if (t != LUA_TNIL && t != LUA_TTABLE) die("a row's cells are neither nil nor a list", NULL);
    lua_pop(L, 1);
    walk(L);
}

static void walk_table_views(lua_State *L, kl_blob *b) {
    kl_event ev;
    char err[256];
    if (kl_decode_table_event(b, NULL, &ev, err, sizeof err) == 0 && ev.obj.blob) {
        kl_view_push(L, &ev.obj, ev.parsed);
        walk_with_cells(L);
    }
    kl_event_clear(&ev);
    kl_obj o;
    if (kl_decode_row(b, &o, err, sizeof err) == 0) {
        kl_view_push(L, &o, NULL);
        walk_with_cells(L);
        kl_obj_clear(&o);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kl_blob *b = kl_blob_new((const char *)data, size);
    if (!b) die("out of memory", NULL);
    kl_obj whole = {.blob = b, .off = 0, .len = size};
    kl_view_push(state, &whole, NULL);
    walk(state);
    walk_event_views(state, b);
    walk_table_views(state, b);
    lua_gc(state, LUA_GCCOLLECT);
    if (lua_gettop(state) != 2) die("the walk left the stack unbalanced", NULL);
    if (b->refs != 1) die("a view still holds its blob after a full collection", NULL);
    kl_blob_unref(b);
    return 0;
}
