/* view.c - lazy read-only Lua views over JSON bytes; see view.h. */
#include "lua/view_impl.h"

#include <lauxlib.h>
#include <string.h>

#include "wire/decode.h"
#include "wire/json.h"
#include "lua/lua_json.h"

#define VIEW_MT "klua.view"
#define ROOT_MT "klua.view.root"

/* The root view and its vdoc in one userdata (metatable ROOT_MT, whose
 * __gc drops the blob and frees the tape): one Lua object per object
 * pushed, not two. */
typedef struct root {
    view v;
    vdoc d;
} root;

/* Pushes the userdata holding the vdoc of the view v at vi. */
void kl_view_root_push(lua_State *L, int vi, const view *v) {
    if (v->is_root) lua_pushvalue(L, vi);
    else lua_getiuservalue(L, vi, 1);
}

/* ---- the parsed form ---- */

/* The view's doc, or an error once its root's __gc dropped it: a view
 * another finalizer reaches in the cycle that collected its object. */
static vdoc *live_doc(lua_State *L, const view *v) {
    if (!v->doc->blob) luaL_error(L, "klua: a view read after its object was collected (from a __gc handler?)");
    return v->doc;
}

/* The bytes a tape of t's size takes: nwords words, then the strings. */
static size_t tape_size(const kl_json_tape *t, size_t nstrings) {
    return t->nwords * sizeof(uint64_t) + nstrings;
}

/* Copies t into a block of its own, owned by d (freed by root_gc), and points
 * d at it. On failure to allocate, raises the Lua state's memory error;
 * d is left unparsed. */
static void adopt_tape(lua_State *L, vdoc *d, const kl_json_tape *t, size_t nstrings, size_t root) {
    size_t size = tape_size(t, nstrings);
    void *ud;
    lua_Alloc alloc = lua_getallocf(L, &ud);
    uint64_t *words = alloc(ud, NULL, 0, size);
    if (!words) {
        /* No room: a Lua object of that size gets it as Lua does, through
         * an emergency collection, or raises Lua's memory error. Under the
         * generational collector that collection can find room a full one
         * from here does not; the object, dropped, gives it back. */
        lua_newuserdatauv(L, size, 0);
        lua_pop(L, 1);
        lua_gc(L, LUA_GCCOLLECT);
        words = alloc(ud, NULL, 0, size);
    }
    if (!words) luaL_error(L, "not enough memory");
    memcpy(words, t->words, t->nwords * sizeof *words);
    memcpy(words + t->nwords, t->strings, nstrings);
    d->t.words = words;
    d->t.strings = (const uint8_t *)(words + t->nwords);
    d->t.nwords = t->nwords;
    d->tape_size = size;
    d->root = root;
}

/* Counts bytes the collector cannot see as its debt, in whole KiB. */
static void add_debt(lua_State *L, size_t bytes) {
    int kb = (int)(bytes >> 10);
    if (kb > 0 && lua_gc(L, LUA_GCISRUNNING)) lua_gc(L, LUA_GCSTEP, kb);
}

/* Paces the collector by a view's memory that it cannot see: the tape (the
 * collector saw in_lua bytes of the view) and the blob, of which the view
 * may be the last holder. Counted as debt, which is no part of the heap
 * size that sets the next cycle's threshold, so that dead views cannot
 * raise it. A watch event's tape is larger than its compact JSON but for
 * escape-heavy strings, and mostly made of the same bytes' worth: the
 * larger of the two counts, as if the view had allocated it. */
static void account_view(lua_State *L, const kl_blob *b, size_t in_lua, size_t tape) {
    size_t bytes = b->len + KL_BLOB_PADDING;
    if (bytes < in_lua + tape) bytes = in_lua + tape;
    add_debt(L, bytes - in_lua);
}

/* Parses d on first use. */
static void parse_doc(lua_State *L, vdoc *d) {
    kl_json_doc **guard = kl_lua_json_push_guard(L); /* stack: ..., guard (frees the doc on error) */
    kl_json_error err;
    *guard = kl_json_parse(d->blob->data + d->off, d->len, 1, &err);
    if (!*guard) {
        char msg[200];
        kl_json_error_format(&err, "klua: a cached object", msg, sizeof msg);
        luaL_error(L, "%s", msg);
    }
    kl_json_tape t = kl_json_doc_tape(*guard);
    adopt_tape(L, d, &t, kl_json_doc_strings_size(*guard), kl_json_doc_selected(*guard));
    kl_json_free(*guard);
    *guard = NULL;
    lua_pop(L, 1);
    add_debt(L, d->tape_size); /* the blob was counted when the view was pushed */
}

/* The tape index of the view v, parsing its object on first use. */
size_t kl_view_at(lua_State *L, view *v) {
    vdoc *d = live_doc(L, v);
    if (v->at) return v->at;
    if (!d->root) parse_doc(L, d);
    return d->root;
}

/* ---- pushing values ---- */

/* Pushes a new view of tape index at, sharing the root of the view at vi;
 * mt is the index of the view metatable. */
static void push_child_view(lua_State *L, int vi, int mt, const view *parent, size_t at) {
    view *c = lua_newuserdatauv(L, sizeof *c, 1);
    memset(c, 0, sizeof *c);
    c->doc = parent->doc;
    c->at = at;
    lua_pushvalue(L, mt);
    lua_setmetatable(L, -2);     /* stack: ..., child */
    kl_view_root_push(L, vi, parent); /* stack: ..., child, root */
    lua_setiuservalue(L, -2, 1); /* the child keeps the shared root alive; stack: ..., child */
}

/* Pushes the value at tape index i (0: nil) of the view at vi: a view for
 * an object or array, the plain value otherwise. */
void kl_view_member_push(lua_State *L, int vi, int mt, const view *v, size_t i) {
    const kl_json_tape *t = &v->doc->t;
    if (!i) lua_pushnil(L);
    else if (kl_jt_type(t, i) == '{' || kl_jt_type(t, i) == '[') push_child_view(L, vi, mt, v, i);
    else kl_lua_json_push_value(L, t, i, 0);
}

/* The tape index of element k (1-based) of the array at tape index at, or
 * 0. With v, the array is v's own and v remembers where the walk stopped,
 * so that walking it in order is linear. */
size_t kl_view_element(view *v, size_t at, lua_Integer k, int own) {
    vdoc *d = v->doc;
    const kl_json_tape *t = &d->t;
    if (kl_jt_type(t, at) != '[' || k < 1 || (size_t)k > kl_jt_count(t, at)) return 0;
    size_t i = 1, pos = at + 1;
    if (own && v->cursor && (size_t)k >= v->cursor) {
        i = v->cursor;
        pos = v->cursor_at;
    }
    if (d->walked_array == at && d->walked_k > i && (size_t)k >= d->walked_k) {
        i = d->walked_k;
        pos = d->walked_at;
    }
    for (; i < (size_t)k; i++) pos = kl_jt_next(t, pos);
    if (own) {
        v->cursor = i;
        v->cursor_at = pos;
    }
    d->walked_array = at;
    d->walked_k = i;
    d->walked_at = pos;
    return pos;
}

/* The tape index of key (a string or an integer at ki) in the value at
 * tape index at of v's tape, or 0. cursor: whether that value is v's own,
 * whose array cursor then speeds up walking it in order. */
static size_t member_at(lua_State *L, view *v, size_t at, int ki, int cursor) {
    const kl_json_tape *t = &v->doc->t;
    if (lua_type(L, ki) == LUA_TSTRING) {
        size_t n;
        const char *k = lua_tolstring(L, ki, &n);
        return kl_jt_find(t, at, k, n);
    }
    int isint = 0;
    lua_Integer k = lua_type(L, ki) == LUA_TNUMBER ? lua_tointegerx(L, ki, &isint) : 0;
    return isint ? kl_view_element(v, at, k, cursor) : 0;
}

/* The tape index of key (a string or an integer at ki) in the view v,
 * or 0. */
static size_t lookup(lua_State *L, view *v, int ki) {
    return member_at(L, v, kl_view_at(L, v), ki, 1);
}

/* ---- metamethods; upvalue 1 is the view metatable, 2 the root's ---- */

#define MT_UPVALUE lua_upvalueindex(1)
#define ROOT_MT_UPVALUE lua_upvalueindex(2)

static int is_view(lua_State *L, int i) {
    if (lua_type(L, i) != LUA_TUSERDATA || !lua_getmetatable(L, i)) return 0;
    int ok = lua_rawequal(L, -1, MT_UPVALUE) || lua_rawequal(L, -1, ROOT_MT_UPVALUE);
    lua_pop(L, 1);
    return ok;
}

static view *check_view(lua_State *L, int i) {
    if (!is_view(L, i)) luaL_typeerror(L, i, "klua view");
    return lua_touserdata(L, i);
}

/* view[key]: the member key, or element key of an array, whatever its name.
 * Views have no methods: a method's name would hide a member of that name
 * (a label "copy", a ConfigMap key "get"), so the operations on objects are
 * functions of the klua module instead. */
static int view_index(lua_State *L) {
    view *v = check_view(L, 1);
    if (v->doc->edited && kl_view_edit_read(L, 1, v, kl_view_at(L, v), 2)) return 1;
    kl_view_member_push(L, 1, MT_UPVALUE, v, lookup(L, v, 2));
    return 1;
}

/* view[key] = value: an error, but in an object that takes writes (klua.edit's,
 * a transform's while it runs: view_edit.c). */
static int view_newindex(lua_State *L) {
    view *v = check_view(L, 1);
    if (v->doc->edit == EDIT_OPEN) {
        kl_view_edit_write(L, v);
        return 0;
    }
    if (v->doc->edit == EDIT_SEALED)
        return luaL_error(L, "klua: cannot set %s: the transform that was given this object has "
                             "ended; use klua.edit(obj) or klua.copy(obj) to change it",
                          luaL_tolstring(L, 2, NULL));
    if (lua_type(L, 2) == LUA_TSTRING)
        return luaL_error(L, "klua: cannot set field '%s': objects from the cache are read-only; "
                             "use klua.edit(obj) or klua.copy(obj) to change it", lua_tostring(L, 2));
    return luaL_error(L, "klua: cannot set %s: objects from the cache are read-only; "
                         "use klua.edit(obj) or klua.copy(obj) to change it", luaL_typename(L, 2));
}

/* #view: an array's length; 0 for an object. */
static int view_len(lua_State *L) {
    view *v = check_view(L, 1);
    size_t at = kl_view_at(L, v);
    const kl_json_tape *t = &v->doc->t;
    lua_Integer n = 0;
    if (kl_jt_type(t, at) == '[' && !(v->doc->edited && kl_view_edit_len(L, 1, v, at, &n)))
        n = (lua_Integer)kl_jt_count(t, at);
    lua_pushinteger(L, n);
    return 1;
}

/* The iterator of pairs(view). Upvalues: the view metatable, the view, the
 * tape index of the next member or element, the next array index. */
static int view_next(lua_State *L) {
    view *v = lua_touserdata(L, lua_upvalueindex(2));
    const kl_json_tape *t = &v->doc->t;
    size_t at = kl_view_at(L, v);
    size_t pos = (size_t)lua_tointeger(L, lua_upvalueindex(3));
    if (!pos || pos >= kl_jt_close(t, at)) return 0;
    size_t value = pos;
    if (kl_jt_type(t, at) == '{') {
        size_t n;
        const char *k = kl_jt_string(t, pos, &n);
        lua_pushlstring(L, k, n);
        value = pos + 1;
    } else {
        lua_Integer k = lua_tointeger(L, lua_upvalueindex(4));
        lua_pushinteger(L, k); /* stack: key */
        lua_pushinteger(L, k + 1);
        lua_replace(L, lua_upvalueindex(4)); /* the next index */
    }
    kl_view_member_push(L, lua_upvalueindex(2), lua_upvalueindex(1), v, value); /* stack: key, value */
    lua_pushinteger(L, (lua_Integer)kl_jt_next(t, value));
    lua_replace(L, lua_upvalueindex(3)); /* the next position on the tape */
    return 2;
}

/* pairs(view): members in JSON order, or elements 1..n. */
static int view_pairs(lua_State *L) {
    view *v = check_view(L, 1);
    lua_settop(L, 1);
    size_t at = kl_view_at(L, v);
    const kl_json_tape *t = &v->doc->t;
    int container = kl_jt_type(t, at) == '{' || kl_jt_type(t, at) == '[';
    if (!(container && v->doc->edited && kl_view_edit_pairs(L, 1, v, at, MT_UPVALUE))) {
        /* view_next's upvalues: the metatable, the view, the tape position, the next index */
        lua_pushvalue(L, MT_UPVALUE);
        lua_pushvalue(L, 1);
        lua_pushinteger(L, container ? (lua_Integer)at + 1 : 0); /* 0: a scalar has nothing to walk */
        lua_pushinteger(L, 1);
        lua_pushcclosure(L, view_next, 4);
    } /* stack: view, next */
    lua_pushvalue(L, 1);
    lua_pushnil(L); /* stack: view, next, view, nil: what pairs returns */
    return 3;
}

/* The bytes of the view's value within its blob. */
const char *kl_view_bytes(view *v, size_t *len) {
    vdoc *d = v->doc;
    if (!v->at) {
        *len = d->len;
        return d->blob->data + d->off;
    }
    if (!v->raw_len) {
        size_t end = d->off + d->len;
        v->raw_off = kl_json_raw_seek(d->blob->data, end, d->off, d->root, v->at);
        v->raw_len = kl_json_raw_skip(d->blob->data, end, v->raw_off) - v->raw_off;
    }
    *len = v->raw_len;
    return d->blob->data + v->raw_off;
}

/* tostring(view) -> the value's JSON text, its exact bytes. */
static int view_tostring(lua_State *L) {
    view *v = check_view(L, 1);
    live_doc(L, v);
    if (v->doc->edited) {
        kl_lua_json_encode(L, 1);
        return 1;
    }
    size_t len;
    const char *s = kl_view_bytes(v, &len);
    lua_pushlstring(L, s, len);
    return 1;
}

/* a == b for two views of the same value. */
static int view_eq(lua_State *L) {
    int same = 0;
    if (is_view(L, 1) && is_view(L, 2)) {
        const view *a = lua_touserdata(L, 1), *b = lua_touserdata(L, 2);
        same = a->doc == b->doc && a->at == b->at;
    }
    lua_pushboolean(L, same);
    return 1;
}

static int root_gc(lua_State *L) {
    root *r = lua_touserdata(L, 1);
    if (r->d.tape_size) {
        void *ud;
        lua_Alloc alloc = lua_getallocf(L, &ud);
        alloc(ud, (void *)r->d.t.words, r->d.tape_size, 0);
    }
    memset(&r->d.t, 0, sizeof r->d.t);
    r->d.tape_size = r->d.root = 0;
    kl_blob_unref(r->d.blob);
    r->d.blob = NULL;
    return 0;
}

/* The view at idx, or NULL: a root view or any other. */
static view *test_view(lua_State *L, int idx) {
    view *v = luaL_testudata(L, idx, VIEW_MT);
    return v ? v : luaL_testudata(L, idx, ROOT_MT);
}

static view *check_view_arg(lua_State *L, int idx) {
    view *v = test_view(L, idx);
    if (!v) luaL_typeerror(L, idx, "klua view");
    return v;
}

void kl_view_open(lua_State *L) {
    static const luaL_Reg metamethods[] = {{"__index", view_index}, {"__newindex", view_newindex},
                                           {"__len", view_len},     {"__pairs", view_pairs},
                                           {"__tostring", view_tostring}, {"__eq", view_eq},
                                           {NULL, NULL}};
    if (!luaL_newmetatable(L, VIEW_MT)) {
        lua_pop(L, 1);
        return;
    }
    luaL_newmetatable(L, ROOT_MT); /* stack: view mt, root mt */
    lua_pushcfunction(L, root_gc);
    lua_setfield(L, -2, "__gc");
    for (int mt = -2; mt <= -1; mt++) {
        lua_pushvalue(L, mt);
        lua_pushvalue(L, -3);
        lua_pushvalue(L, -3); /* stack: view mt, root mt, mt, view mt, root mt */
        luaL_setfuncs(L, metamethods, 2); /* each gets both metatables as upvalues */
        /* getmetatable(view) is a name, and setmetatable refuses a view:
         * the metatables are every view's, and a script that could reach
         * them could drop root_gc and keep a blob for good, or call it and
         * free one a view still reads. */
        lua_pushliteral(L, VIEW_MT);
        lua_setfield(L, -2, "__metatable");
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
    kl_lua_json_push_array_mt(L);
    lua_pop(L, 1);
}

/* debug.setmetatable, refusing a view, which getmetatable's __metatable
 * does not: a root view without root_gc would keep its blob for good. */
static int guarded_setmetatable(lua_State *L) {
    if (test_view(L, 1)) return luaL_argerror(L, 1, "the metatable of a klua view cannot be changed");
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

void kl_view_guard_debug(lua_State *L) {
    if (lua_getglobal(L, "debug") != LUA_TTABLE) { /* stack: debug */
        lua_pop(L, 1);
        return;
    }
    lua_getfield(L, -1, "setmetatable");
    lua_pushcclosure(L, guarded_setmetatable, 1);
    lua_setfield(L, -2, "setmetatable");
    lua_pop(L, 1);
}

/* Pushes a root view of o; nuv user values (1 for a transform's object,
 * whose edits are the first). */
static root *push_root_view(lua_State *L, const kl_obj *o, void *parsed, int nuv) {
    kl_json_doc *pd = parsed;
    root *r = lua_newuserdatauv(L, sizeof *r, nuv);
    memset(r, 0, sizeof *r);
    r->d.off = o->off;
    r->d.len = o->len;
    r->v.doc = &r->d;
    r->v.is_root = 1;
    luaL_setmetatable(L, ROOT_MT); /* stack: ..., root view */
    r->d.blob = kl_blob_ref(o->blob);
    if (pd) { /* after __gc is set, which frees the tape also when something raises later */
        kl_json_tape t = kl_json_doc_tape(pd);
        adopt_tape(L, &r->d, &t, kl_json_doc_strings_size(pd), kl_json_doc_selected(pd));
    }
    account_view(L, o->blob, sizeof *r, r->d.tape_size);
    return r;
}

void kl_view_push(lua_State *L, const kl_obj *o, void *parsed) { push_root_view(L, o, parsed, 0); }

void kl_view_push_editable(lua_State *L, const kl_obj *o, void *parsed) {
    push_root_view(L, o, parsed, 1)->d.edit = EDIT_OPEN;
}

void kl_view_seal(lua_State *L, int idx) {
    view *v = check_view_arg(L, idx);
    if (v->doc->edit == EDIT_OPEN) v->doc->edit = EDIT_SEALED;
}

int kl_view_test(lua_State *L, int idx) { return test_view(L, idx) != NULL; }

int kl_view_edited(lua_State *L, int idx) {
    view *v = test_view(L, idx);
    return v && v->doc->edited;
}

int kl_view_edits_touch(lua_State *L, int idx, const char *const members[][2], size_t n) {
    view *v = check_view_arg(L, idx);
    if (!v->doc->edited) return 0;
    idx = lua_absindex(L, idx);
    return kl_view_edit_touches(L, idx, v, kl_view_at(L, v), members, n);
}

int kl_view_write(lua_State *L, int idx, const kl_view_writer *w) {
    view *v = test_view(L, idx);
    if (!v) return 0;
    live_doc(L, v);
    if (v->doc->edited) {
        kl_view_edit_json(L, lua_absindex(L, idx), v, w);
        return 1;
    }
    size_t n;
    const char *bytes = kl_view_bytes(v, &n);
    w->put(w->ctx, bytes, n);
    return 1;
}

void kl_view_push_cells(lua_State *L, int idx) {
    const vdoc *d = live_doc(L, check_view_arg(L, idx));
    if (d->off == 0 && d->len == d->blob->len) {
        lua_pushnil(L); /* the blob is the object alone */
        return;
    }
    kl_json_doc **guard = kl_lua_json_push_guard(L); /* stack: ..., guard */
    kl_json_error err;
    *guard = kl_json_parse(d->blob->data, d->blob->len, 1, &err);
    size_t cells = 0;
    kl_json_tape t = {0};
    if (*guard) {
        t = kl_json_doc_tape(*guard);
        cells = kl_decode_row_cells(d->blob, &t, d->off);
    }
    if (cells) {
        kl_lua_json_push_array_mt(L); /* stack: ..., guard, amt */
        kl_lua_json_push_value(L, &t, cells, lua_gettop(L)); /* stack: ..., guard, amt, cells */
        lua_remove(L, -2); /* stack: ..., guard, cells */
    } else {
        lua_pushnil(L); /* stack: ..., guard, nil */
    }
    kl_json_free(*guard);
    *guard = NULL;
    lua_remove(L, -2);
}

void kl_view_copy(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    view *v = check_view_arg(L, idx);
    if (v->doc->edited) { /* its JSON as edited, decoded: edits lie all over the tape */
        size_t n;
        const char *s = kl_lua_json_encode_text(L, idx, &n); /* stack: ..., buffer */
        kl_lua_json_decode(L, s, n);                          /* stack: ..., buffer, copy */
        lua_remove(L, -2);
        return;
    }
    size_t at = kl_view_at(L, v);
    kl_lua_json_push_array_mt(L); /* stack: ..., amt */
    kl_lua_json_push_value(L, &v->doc->t, at, lua_gettop(L)); /* stack: ..., amt, copy */
    lua_remove(L, -2);
}

/* ---- klua.copy, klua.get, klua.type ---- */

static void copy_value(lua_State *L, int idx, int seen, int amt, int depth);

/* Pushes a deep copy of the table at idx; seen maps each table already
 * copied to its copy, so that shared parts stay shared and cycles end. */
static void copy_table(lua_State *L, int idx, int seen, int amt, int depth) {
    lua_pushvalue(L, idx);
    if (lua_rawget(L, seen) != LUA_TNIL) return;
    lua_pop(L, 1);
    if (depth >= KL_JSON_MAX_DEPTH) luaL_error(L, "klua.copy: a table nested deeper than %d levels", KL_JSON_MAX_DEPTH);
    luaL_checkstack(L, 6, "klua.copy: nested too deeply");
    lua_newtable(L);
    int copy = lua_gettop(L);
    lua_pushvalue(L, idx);
    lua_pushvalue(L, copy);
    lua_rawset(L, seen);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pushvalue(L, -2);                                   /* key value key */
        copy_value(L, lua_gettop(L) - 1, seen, amt, depth + 1); /* key value key copy */
        lua_rawset(L, copy);
        lua_pop(L, 1);
    }
    if (lua_getmetatable(L, idx)) lua_setmetatable(L, copy);
}

static void copy_value(lua_State *L, int idx, int seen, int amt, int depth) {
    view *v = test_view(L, idx);
    if (v && v->doc->edited) kl_view_copy(L, idx);
    else if (v) kl_lua_json_push_value(L, &v->doc->t, kl_view_at(L, v), amt);
    else if (lua_type(L, idx) == LUA_TTABLE) copy_table(L, idx, seen, amt, depth);
    else lua_pushvalue(L, idx);
}

/* klua.copy(v) -> a plain, mutable, fully decoded copy of a view (as
 * klua.json.decode would build it), a deep copy of a table (views inside
 * decoded too, metatables kept), or v itself for any other value. */
static int l_copy(lua_State *L) {
    luaL_checkany(L, 1);
    lua_settop(L, 1);
    if (test_view(L, 1)) { /* the usual case, which needs no table of what was copied */
        kl_view_copy(L, 1);
        return 1;
    }
    lua_newtable(L);              /* stack: v, seen (tables already copied) */
    kl_lua_json_push_array_mt(L); /* stack: v, seen, amt */
    copy_value(L, 1, 2, 3, 0);
    return 1;
}

/* klua.get(v, k1, ..., kn) -> v[k1][k2]...[kn], or nil as soon as a step is
 * missing or reaches a value without members (a string, a number,
 * klua.null). Views and tables alike; a table's members are read raw.
 * Once a step reaches a view, the rest of the way is walked on its tape:
 * only the value reached is pushed, not a view of each object passed
 * through. Upvalues: the view metatable and the root's. */
static int l_get(lua_State *L) {
    int n = lua_gettop(L);
    luaL_checkany(L, 1);
    lua_pushvalue(L, 1); /* stack: v, k1..kn, cur */
    int k = 2;
    for (; k <= n; k++) {
        int viewed = is_view(L, n + 1);
        if (viewed && !((view *)lua_touserdata(L, n + 1))->doc->edited) break;
        if (!viewed && lua_type(L, n + 1) != LUA_TTABLE) {
            lua_pushnil(L);
            return 1;
        }
        lua_pushvalue(L, k);
        if (viewed) lua_gettable(L, n + 1); /* a transform's object, edited: as its __index reads */
        else lua_rawget(L, n + 1);
        lua_replace(L, n + 1); /* cur = cur[k] */
    }
    if (k > n) return 1;
    view *v = lua_touserdata(L, n + 1);
    size_t at = lookup(L, v, k);
    while (at && ++k <= n) at = member_at(L, v, at, k, 0);
    kl_view_member_push(L, n + 1, MT_UPVALUE, v, at);
    return 1;
}

static const char *tape_type_name(char c) {
    switch (c) {
    case '{': return "object";
    case '[': return "array";
    case '"': return "string";
    case 't':
    case 'f': return "boolean";
    case 'n': return "null";
    default: return "number";
    }
}

/* klua.type(v) -> the JSON type of v as klua reads and writes it: "object",
 * "array", "string", "number", "boolean" or "null", for a view and for a
 * plain value alike (a table as klua.json.encode would write it); Lua's
 * type() name for a value without a JSON form ("nil", "function", "table"
 * for a table with mixed keys, ...). */
static int l_type(lua_State *L) {
    luaL_checkany(L, 1);
    view *v = test_view(L, 1);
    const char *name;
    if (v) {
        name = tape_type_name(kl_jt_type(&v->doc->t, kl_view_at(L, v)));
    } else if (lua_type(L, 1) == LUA_TTABLE) {
        int kind = kl_lua_json_table_kind(L, 1);
        name = kind == '[' ? "array" : kind == '{' ? "object" : "table";
    } else if (lua_type(L, 1) == LUA_TLIGHTUSERDATA && !lua_touserdata(L, 1)) {
        name = "null";
    } else {
        name = luaL_typename(L, 1);
    }
    lua_pushstring(L, name);
    return 1;
}

/* Pushes a view that takes writes over the bytes of the view v at 1: the
 * same blob, and the tape copied when v is a parsed object's root; an
 * edited v's JSON as edited. [-0, +1, e] */
static void push_edit_of(lua_State *L, view *v) {
    vdoc *d = v->doc;
    size_t n;
    const char *s = kl_view_bytes(v, &n);
    kl_obj o = {.blob = d->blob, .off = (size_t)(s - d->blob->data), .len = n};
    root *r = push_root_view(L, &o, NULL, 1); /* stack: v, edit */
    r->d.edit = EDIT_OPEN;
    if (d->edited) {
        /* Made once the root holds a blob, which its __gc drops should
         * the encode raise; nothing raises between the new blob and the
         * root taking it. */
        const char *text = kl_lua_json_encode_text(L, 1, &n); /* stack: v, edit, buffer */
        kl_blob_unref(r->d.blob);
        r->d.blob = kl_blob_new(text, n);
        r->d.off = 0;
        r->d.len = n;
        lua_pop(L, 1);
    } else if (v->is_root && d->root) { /* parsed already: its tape serves as it is */
        adopt_tape(L, &r->d, &d->t, d->tape_size - d->t.nwords * sizeof *d->t.words, d->root);
        add_debt(L, r->d.tape_size);
    }
}

/* klua.edit(v) -> a view of v's object that takes writes, as the object a
 * transform is given does (view_edit.c), for a change to send: cheaper
 * than klua.copy(v) when a change is small, since only what is written is
 * made in Lua and the rest is sent as the bytes it was. A table is given
 * back as it is: it takes writes already. */
static int l_edit(lua_State *L) {
    luaL_checkany(L, 1);
    lua_settop(L, 1);
    view *v = test_view(L, 1);
    if (!v) {
        if (lua_type(L, 1) == LUA_TTABLE) return 1;
        return luaL_typeerror(L, 1, "view or table");
    }
    live_doc(L, v);
    push_edit_of(L, v);
    return 1;
}

/* core.writable(v) -> whether writes to v are taken: a table, or a view
 * from klua.edit or given to a transform while it runs. */
static int l_writable(lua_State *L) {
    view *v = test_view(L, 1);
    lua_pushboolean(L, v ? v->doc->edit == EDIT_OPEN : lua_type(L, 1) == LUA_TTABLE);
    return 1;
}

void kl_view_set_functions(lua_State *L) {
    static const luaL_Reg funcs[] = {{"copy", l_copy}, {"get", l_get}, {"type", l_type}, {"edit", l_edit},
                                     {"writable", l_writable}, {NULL, NULL}};
    luaL_getmetatable(L, VIEW_MT);
    luaL_getmetatable(L, ROOT_MT); /* stack: t, view mt, root mt */
    luaL_setfuncs(L, funcs, 2);
}
