/* view.c - lazy read-only Lua views over JSON bytes; see view.h. */
#include "lua/view.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "wire/decode.h"
#include "wire/json.h"
#include "wire/scan.h"
#include "lua/lua_json.h"

#define VIEW_MT "klua.view"
#define ROOT_MT "klua.view.root"

/*
 * One object's bytes and, once parsed, its tape, shared by all views of
 * the object. It lives in the root view's userdata (a root), which the
 * other views keep alive as their user value. The tape is a block of its
 * own from the Lua state's allocator (so that it counts towards
 * --memory-limit and klua.stats().lua_memory) but outside the collector's
 * sight: a dead root, which its __gc keeps for one more cycle, would
 * otherwise carry its tape into the heap size that sets the next cycle's
 * threshold, and with a pause over 200 dead views' tapes would raise each
 * threshold more than the last, the heap growing without bound. The
 * collector is paced by the tape as debt instead (see account_view).
 */
typedef struct vdoc {
    kl_blob *blob;    /* one reference, dropped by __gc; NULL once dropped */
    size_t off, len;  /* the root value's JSON is blob->data[off, off+len) */
    size_t root;      /* tape index of the root value; 0 until parsed */
    kl_json_tape t;   /* t.words: the tape's block, freed by __gc */
    size_t tape_size; /* the size of that block; 0 until parsed */
    int edit;         /* EDIT_NONE, or a transform's object: see "edits" below */
    int edited;       /* some write was recorded, in the root's user value 1 */
} vdoc;

enum { EDIT_NONE, EDIT_OPEN, EDIT_SEALED };

/* A view: one value inside a vdoc; user value 1 is its root, for all but
 * the root view itself. */
typedef struct view {
    vdoc *doc;
    size_t at;               /* tape index of the value; 0 for the root */
    size_t cursor, cursor_at; /* array element `cursor` (1-based) is at tape index cursor_at */
    size_t raw_off, raw_len; /* the value's bytes in the blob, once found (raw_len > 0) */
    int is_root;
} view;

/* The root view and its vdoc in one userdata (metatable ROOT_MT, whose
 * __gc drops the blob and frees the tape): one Lua object per object
 * pushed, not two. */
typedef struct root {
    view v;
    vdoc d;
} root;

/* Pushes the userdata holding the vdoc of the view v at vi. */
static void push_root(lua_State *L, int vi, const view *v) {
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
        lua_gc(L, LUA_GCCOLLECT); /* as Lua does before it gives up on an allocation */
        words = alloc(ud, NULL, 0, size);
    }
    if (!words) {
        lua_newuserdatauv(L, size, 0); /* raises Lua's own memory error, as a Lua object of this size would */
        luaL_error(L, "not enough memory");
    }
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
static size_t view_at(lua_State *L, view *v) {
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
    push_root(L, vi, parent);    /* stack: ..., child, root */
    lua_setiuservalue(L, -2, 1); /* the child keeps the shared root alive; stack: ..., child */
}

/* Pushes the value at tape index i (0: nil) of the view at vi: a view for
 * an object or array, the plain value otherwise. */
static void push_member(lua_State *L, int vi, int mt, const view *v, size_t i) {
    const kl_json_tape *t = &v->doc->t;
    if (!i) lua_pushnil(L);
    else if (kl_jt_type(t, i) == '{' || kl_jt_type(t, i) == '[') push_child_view(L, vi, mt, v, i);
    else kl_lua_json_push_value(L, t, i, 0);
}

/* The tape index of element k (1-based) of the array at tape index at, or
 * 0. With v, the array is v's own and v remembers where the walk stopped,
 * so that walking it in order is linear. */
static size_t element(const kl_json_tape *t, view *v, size_t at, lua_Integer k) {
    if (kl_jt_type(t, at) != '[' || k < 1 || (size_t)k > kl_jt_count(t, at)) return 0;
    size_t i = 1, pos = at + 1;
    if (v && v->cursor && (size_t)k >= v->cursor) {
        i = v->cursor;
        pos = v->cursor_at;
    }
    for (; i < (size_t)k; i++) pos = kl_jt_next(t, pos);
    if (v) {
        v->cursor = i;
        v->cursor_at = pos;
    }
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
    return isint ? element(t, cursor ? v : NULL, at, k) : 0;
}

/* The tape index of key (a string or an integer at ki) in the view v,
 * or 0. */
static size_t lookup(lua_State *L, view *v, int ki) {
    return member_at(L, v, view_at(L, v), ki, 1);
}

static const char *view_bytes(view *v, size_t *len);

/* ---- edits: the object a transform is given ----
 *
 * A transform is client-go's SetTransform, whose functions change the
 * object they are given and return it: so is the view a transform gets.
 * A write to it or to a view inside it is recorded, not applied: the
 * bytes stay as they are, and the edits lie beside them in a table E, the
 * root's user value 1, by the tape index of the container written to:
 * E[at] = C, C[name] = value for an object's member (DELETED for one set
 * to nil) and C[k] = value for an array's element, C[0] its length once it
 * changed. Reads see the edits; the JSON written for the view (what the
 * cache keeps) is its bytes with the edited containers written member by
 * member, each member that was not written copied as it is. Two views of
 * the same value share its edits, as two references to one table do. */

/* The value of a member set to nil: klua.null is JSON's null, kept. */
static const char DELETED = 'd';

static int is_deleted(lua_State *L, int i) { return lua_touserdata(L, i) == &DELETED; }

/* Pushes the edits E of v's object, or nil when there are none yet;
 * with create, makes them. [-0, +1, e] */
static int push_object_edits(lua_State *L, int vi, const view *v, int create) {
    push_root(L, vi, v); /* stack: ..., root */
    if (lua_getiuservalue(L, -1, 1) != LUA_TTABLE && create) { /* stack: ..., root, E|nil */
        lua_pop(L, 1);
        lua_createtable(L, 0, 2);
        lua_pushvalue(L, -1);
        lua_setiuservalue(L, -3, 1);
    }
    lua_remove(L, -2); /* stack: ..., E|nil */
    return lua_type(L, -1) == LUA_TTABLE;
}

/* Pushes C, the edits of the container at tape index at of v's object, or
 * nil when it has none; with create, makes them. [-0, +1, e] */
static int push_edits(lua_State *L, int vi, const view *v, size_t at, int create) {
    if (!push_object_edits(L, vi, v, create)) return 0; /* stack: ..., nil */
    if (lua_rawgeti(L, -1, (lua_Integer)at) != LUA_TTABLE && create) { /* stack: ..., E, C|nil */
        lua_pop(L, 1);
        lua_createtable(L, 0, 1);
        lua_pushvalue(L, -1);
        lua_rawseti(L, -3, (lua_Integer)at);
    }
    lua_remove(L, -2); /* stack: ..., C|nil */
    return lua_type(L, -1) == LUA_TTABLE;
}

/* The length of the array at tape index at, its edits C at ci (0: none). */
static lua_Integer edited_len(lua_State *L, int ci, const kl_json_tape *t, size_t at) {
    lua_Integer n = (lua_Integer)kl_jt_count(t, at);
    if (ci && lua_rawgeti(L, ci, 0) == LUA_TNUMBER) n = lua_tointeger(L, -1);
    if (ci) lua_pop(L, 1);
    return n;
}

/* Pushes view[key] (the key at ki) as the edits of v's value at tape index
 * at say it is, and returns 1; returns 0, pushing nothing, when they say
 * nothing of it and the tape answers. [-0, +(0|1), e] */
static int push_edited(lua_State *L, int vi, const view *v, size_t at, int ki) {
    if (!push_edits(L, vi, v, at, 0)) {
        lua_pop(L, 1);
        return 0;
    }
    int ci = lua_gettop(L); /* stack: ..., C */
    if (kl_jt_type(&v->doc->t, at) == '[') {
        int isint = 0;
        lua_Integer k = lua_type(L, ki) == LUA_TNUMBER ? lua_tointegerx(L, ki, &isint) : 0;
        if (isint && (k < 1 || k > edited_len(L, ci, &v->doc->t, at))) lua_pushnil(L);
        else if (!isint || lua_rawgeti(L, ci, k) == LUA_TNIL) {
            lua_settop(L, ci - 1);
            return 0;
        }
    } else {
        lua_pushvalue(L, ki);
        if (lua_rawget(L, ci) == LUA_TNIL) {
            lua_settop(L, ci - 1);
            return 0;
        }
        if (is_deleted(L, -1)) {
            lua_pop(L, 1);
            lua_pushnil(L);
        }
    }
    lua_remove(L, ci);
    return 1;
}

/* C[key] = value for an object's member, key at 2 and value at 3, C on top. */
static void set_member(lua_State *L) {
    if (lua_type(L, 2) != LUA_TSTRING)
        luaL_error(L, "klua: cannot set a %s key of an object: its members are named by strings",
                   luaL_typename(L, 2));
    lua_pushvalue(L, 2);
    if (lua_isnil(L, 3)) lua_pushlightuserdata(L, (void *)&DELETED);
    else lua_pushvalue(L, 3);
    lua_rawset(L, -3);
}

/* C[k] = value for element k of the array at tape index at, as a table
 * with a border at its length would take it: elements 1 to n + 1 can be
 * set, and only the last one to nil (table.insert and table.remove do no
 * other). k at 2, value at 3, C on top. */
static void set_element(lua_State *L, const kl_json_tape *t, size_t at) {
    int ci = lua_gettop(L), isint = 0;
    lua_Integer k = lua_type(L, 2) == LUA_TNUMBER ? lua_tointegerx(L, 2, &isint) : 0;
    lua_Integer n = edited_len(L, ci, t, at);
    if (!isint || k < 1 || k > n + 1)
        luaL_error(L, "klua: cannot set element %s of an array of %d: only 1 to %d (#arr + 1)",
                   luaL_tolstring(L, 2, NULL), (int)n, (int)n + 1);
    int unset = lua_isnil(L, 3);
    if (unset && k < n)
        luaL_error(L, "klua: cannot set element %d of %d to nil: it would leave a hole; "
                      "table.remove(arr, %d) closes it", (int)k, (int)n, (int)k);
    if (unset && k == n + 1) return;
    /* Either write may raise a memory error, the one that adds a key to C:
     * the element goes before the length grows and after it shrinks, so
     * that an element is never counted that C does not hold (an element
     * past the length is one no read reaches). Setting nil never raises. */
    if (unset) {
        lua_pushinteger(L, n - 1);
        lua_rawseti(L, ci, 0);
    }
    lua_pushvalue(L, 3);
    lua_rawseti(L, ci, k);
    if (k == n + 1) {
        lua_pushinteger(L, n + 1);
        lua_rawseti(L, ci, 0);
    }
}

static int by_index(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* Pushes a userdata holding the tape indexes of the containers E (at ei)
 * has edits of, in order; their count in *n. Writing asks, for each
 * container it passes, whether one lies inside it: a search, where a walk
 * of E would make a transform that edits every element of a long array
 * quadratic. [-0, +1, e] */
static const size_t *edited_indexes(lua_State *L, int ei, size_t *n) {
    size_t count = 0;
    lua_pushnil(L);
    while (lua_next(L, ei)) {
        lua_pop(L, 1);
        count++;
    }
    size_t *at = lua_newuserdatauv(L, count * sizeof *at, 0);
    *n = 0;
    lua_pushnil(L);
    while (lua_next(L, ei)) {
        lua_pop(L, 1);
        at[(*n)++] = (size_t)lua_tointeger(L, -1);
    }
    qsort(at, *n, sizeof *at, by_index);
    return at;
}

/* Writing a view's JSON: its text, and the object's edits. */
typedef struct writing {
    lua_State *L;
    const kl_view_writer *w;
    const kl_json_tape *t;
    const char *text;
    size_t end; /* text[end] is past the object */
    int ei;     /* stack index of E */
    const size_t *edited; /* the containers E has edits of (edited_indexes) */
    size_t nedited;
    kl_scan scan; /* finds where an object or array ends, 64 bytes at a time */
    const kl_view_step *steps;  /* from the view to the member being written */
    const kl_view_step **link; /* where the next step down goes */
} writing;

/* The byte just past the value at off: the members not written to are
 * copied by their spans, most of a Pod's bytes. */
static size_t skip_value(writing *g, size_t off) {
    char c = g->text[off];
    if (c != '{' && c != '[') return kl_json_raw_skip(g->text, g->end, off);
    kl_scan_start(&g->scan);
    int done = 0;
    size_t n = kl_scan_value(&g->scan, g->text + off, g->end - off, &done);
    return done ? off + n : g->end;
}

static void put(writing *g, const char *s, size_t n) { g->w->put(g->w->ctx, s, n); }

/* Steps down to a member, for the errors of encoding it to name; returns
 * what leave takes to step back up. */
static const kl_view_step **enter(writing *g, kl_view_step *step) {
    const kl_view_step **up = g->link;
    *up = step;
    g->link = &step->next;
    return up;
}

static void leave(writing *g, const kl_view_step **up) {
    *up = NULL;
    g->link = up;
}

static void value(writing *g, int idx) { g->w->value(g->w->ctx, idx, g->steps); }

/* Whether edits lie at tape index at or inside the value there. */
static int edits_within(const writing *g, size_t at) {
    char type = kl_jt_type(g->t, at);
    if (type != '{' && type != '[') return 0;
    size_t lo = 0, hi = g->nedited, close = kl_jt_close(g->t, at);
    while (lo < hi) { /* the first edited container at or after at */
        size_t mid = lo + (hi - lo) / 2;
        if (g->edited[mid] < at) lo = mid + 1;
        else hi = mid;
    }
    return lo < g->nedited && g->edited[lo] < close;
}

static void write_value(writing *g, size_t at, size_t off);

/* The byte where the next value or key starts, at or after off. */
static size_t skip_separators(writing *g, size_t off) {
    return kl_json_raw_seek(g->text, g->end, off, 0, 0);
}

/* Writes the object at tape index at, whose '{' is at byte off, with its
 * edits C on top of the stack, or nil when it has none of its own. */
static void write_object(writing *g, size_t at, size_t off) {
    lua_State *L = g->L;
    int ci = lua_gettop(L), first = 1, own = lua_type(L, ci) == LUA_TTABLE;
    put(g, "{", 1);
    for (size_t i = at + 1, close = kl_jt_close(g->t, at), p = off + 1; i < close; i = kl_jt_next(g->t, i + 1)) {
        size_t ko = skip_separators(g, p), ke = kl_json_raw_skip(g->text, g->end, ko);
        size_t vo = skip_separators(g, ke);
        p = skip_value(g, vo);
        kl_view_step step = {NULL, 0, 0, NULL};
        step.key = kl_jt_string(g->t, i, &step.keylen);
        int edited = 0;
        if (own) {
            lua_pushlstring(L, step.key, step.keylen);
            edited = lua_rawget(L, ci) != LUA_TNIL; /* stack: ..., C, edit|nil */
        }
        if (!(edited && is_deleted(L, -1))) {
            if (!first) put(g, ",", 1);
            first = 0;
            put(g, g->text + ko, ke - ko);
            put(g, ":", 1);
            const kl_view_step **up = enter(g, &step);
            if (edited) value(g, lua_gettop(L));
            else write_value(g, i + 1, vo);
            leave(g, up);
        }
        lua_settop(L, ci);
    }
    lua_pushnil(L);
    while (own && lua_next(L, ci)) { /* the members added: stack: ..., C, key, value */
        kl_view_step step = {NULL, 0, 0, NULL};
        step.key = lua_tolstring(L, -2, &step.keylen);
        if (!is_deleted(L, -1) && !kl_jt_find(g->t, at, step.key, step.keylen)) {
            if (!first) put(g, ",", 1);
            first = 0;
            const kl_view_step **up = enter(g, &step);
            value(g, ci + 1);
            put(g, ":", 1);
            value(g, ci + 2);
            leave(g, up);
        }
        lua_pop(L, 1);
    }
    lua_settop(L, ci);
    put(g, "}", 1);
}

/* Writes the array at tape index at, whose '[' is at byte off, with its
 * edits C on top of the stack, or nil when it has none of its own. */
static void write_array(writing *g, size_t at, size_t off) {
    lua_State *L = g->L;
    int ci = lua_gettop(L), own = lua_type(L, ci) == LUA_TTABLE;
    lua_Integer was = (lua_Integer)kl_jt_count(g->t, at), n = own ? edited_len(L, ci, g->t, at) : was;
    put(g, "[", 1);
    size_t i = at + 1, p = off + 1;
    for (lua_Integer k = 1; k <= n; k++) {
        if (k > 1) put(g, ",", 1);
        size_t vo = 0;
        if (k <= was) {
            vo = skip_separators(g, p);
            p = skip_value(g, vo);
        }
        kl_view_step step = {NULL, 0, (long long)k, NULL};
        const kl_view_step **up = enter(g, &step);
        if (own && lua_rawgeti(L, ci, k) != LUA_TNIL) value(g, ci + 1);
        else write_value(g, i, vo);
        leave(g, up);
        lua_settop(L, ci);
        if (k <= was) i = kl_jt_next(g->t, i);
    }
    put(g, "]", 1);
}

/* Writes the value at tape index at, whose bytes start at off: the bytes
 * themselves unless edits lie inside it. */
static void write_value(writing *g, size_t at, size_t off) {
    lua_State *L = g->L;
    if (!edits_within(g, at)) {
        put(g, g->text + off, skip_value(g, off) - off);
        return;
    }
    luaL_checkstack(L, 8, "klua: an edited object nested too deeply");
    lua_rawgeti(L, g->ei, (lua_Integer)at); /* stack: ..., C|nil */
    if (kl_jt_type(g->t, at) == '{') write_object(g, at, off);
    else write_array(g, at, off);
    lua_pop(L, 1);
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
    if (v->doc->edited && push_edited(L, 1, v, view_at(L, v), 2)) return 1;
    push_member(L, 1, MT_UPVALUE, v, lookup(L, v, 2));
    return 1;
}

/* view[key] = value: an error, but in a transform's object (see "edits"). */
static int view_newindex(lua_State *L) {
    view *v = check_view(L, 1);
    if (v->doc->edit == EDIT_OPEN) {
        lua_settop(L, 3);
        size_t at = view_at(L, v);
        push_edits(L, 1, v, at, 1); /* stack: view, key, value, C */
        if (kl_jt_type(&v->doc->t, at) == '[') set_element(L, &v->doc->t, at);
        else set_member(L);
        v->doc->edited = 1;
        return 0;
    }
    if (v->doc->edit == EDIT_SEALED)
        return luaL_error(L, "klua: cannot set %s: the transform that was given this object has "
                             "ended; use klua.copy(obj) for a mutable table",
                          luaL_tolstring(L, 2, NULL));
    if (lua_type(L, 2) == LUA_TSTRING)
        return luaL_error(L, "klua: cannot set field '%s': objects from the cache are read-only; "
                             "use klua.copy(obj) for a mutable table", lua_tostring(L, 2));
    return luaL_error(L, "klua: cannot set %s: objects from the cache are read-only; "
                         "use klua.copy(obj) for a mutable table", luaL_typename(L, 2));
}

/* #view: an array's length; 0 for an object. */
static int view_len(lua_State *L) {
    view *v = check_view(L, 1);
    size_t at = view_at(L, v);
    const kl_json_tape *t = &v->doc->t;
    if (kl_jt_type(t, at) != '[') lua_pushinteger(L, 0);
    else if (v->doc->edited && push_edits(L, 1, v, at, 0)) lua_pushinteger(L, edited_len(L, lua_gettop(L), t, at));
    else lua_pushinteger(L, (lua_Integer)kl_jt_count(t, at));
    return 1;
}

/* The iterator of pairs(view). Upvalues: the view metatable, the view, the
 * tape index of the next member or element, the next array index. */
static int view_next(lua_State *L) {
    view *v = lua_touserdata(L, lua_upvalueindex(2));
    const kl_json_tape *t = &v->doc->t;
    size_t at = view_at(L, v);
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
    push_member(L, lua_upvalueindex(2), lua_upvalueindex(1), v, value); /* stack: key, value */
    lua_pushinteger(L, (lua_Integer)kl_jt_next(t, value));
    lua_replace(L, lua_upvalueindex(3)); /* the next position on the tape */
    return 2;
}

/* The iterator of pairs(view) for a container with edits: view_next's
 * upvalues, and its edits C third. An object's members come in JSON order
 * as edited, then those added (the tape position 0 once past the tape's,
 * the last of them then in upvalue 5). */
static int edited_next(lua_State *L) {
    view *v = lua_touserdata(L, lua_upvalueindex(2));
    const kl_json_tape *t = &v->doc->t;
    size_t at = view_at(L, v);
    int ci = lua_upvalueindex(3), posi = lua_upvalueindex(4), nexti = lua_upvalueindex(5);
    if (kl_jt_type(t, at) == '[') {
        lua_Integer k = lua_tointeger(L, nexti);
        if (k > edited_len(L, ci, t, at)) return 0;
        lua_pushinteger(L, k + 1);
        lua_replace(L, nexti);
        lua_pushinteger(L, k); /* stack: k */
        if (!push_edited(L, lua_upvalueindex(2), v, at, lua_gettop(L)))
            push_member(L, lua_upvalueindex(2), lua_upvalueindex(1), v, element(t, v, at, k));
        return 2;
    }
    for (size_t pos = (size_t)lua_tointeger(L, posi); pos && pos < kl_jt_close(t, at);) {
        size_t n;
        const char *k = kl_jt_string(t, pos, &n);
        size_t value = pos + 1;
        pos = kl_jt_next(t, value);
        lua_pushinteger(L, (lua_Integer)pos);
        lua_replace(L, posi);
        lua_pushlstring(L, k, n);
        lua_pushvalue(L, -1);
        int type = lua_rawget(L, ci); /* stack: key, edit|nil */
        if (type == LUA_TNIL) {
            lua_pop(L, 1);
            push_member(L, lua_upvalueindex(2), lua_upvalueindex(1), v, value);
            return 2;
        }
        if (!is_deleted(L, -1)) return 2;
        lua_pop(L, 2);
    }
    lua_pushinteger(L, 0);
    lua_replace(L, posi);
    lua_pushvalue(L, nexti); /* the last member added given, or 1 before the first */
    if (lua_type(L, -1) != LUA_TSTRING) {
        lua_pop(L, 1);
        lua_pushnil(L);
    }
    while (lua_next(L, ci)) { /* stack: key, value */
        size_t n;
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &n) : NULL;
        if (k && !is_deleted(L, -1) && !kl_jt_find(t, at, k, n)) {
            lua_pushvalue(L, -2);
            lua_replace(L, nexti);
            return 2;
        }
        lua_pop(L, 1);
    }
    return 0;
}

/* pairs(view): members in JSON order, or elements 1..n. */
static int view_pairs(lua_State *L) {
    view *v = check_view(L, 1);
    lua_settop(L, 1);
    size_t at = view_at(L, v);
    const kl_json_tape *t = &v->doc->t;
    int container = kl_jt_type(t, at) == '{' || kl_jt_type(t, at) == '[';
    int edited = container && v->doc->edited && push_edits(L, 1, v, at, 0); /* stack: view[, C|nil] */
    lua_settop(L, 1 + edited);
    /* the iterator's upvalues: the metatable, the view, [its edits,] the tape position, the next index */
    lua_pushvalue(L, MT_UPVALUE);
    lua_pushvalue(L, 1);
    if (edited) lua_rotate(L, 2, 2); /* stack: view, mt, view, C */
    lua_pushinteger(L, container ? (lua_Integer)at + 1 : 0); /* 0: a scalar has nothing to walk */
    lua_pushinteger(L, 1);
    lua_pushcclosure(L, edited ? edited_next : view_next, 4 + edited); /* stack: view, next */
    lua_pushvalue(L, 1);
    lua_pushnil(L); /* stack: view, next, view, nil: what pairs returns */
    return 3;
}

/* The bytes of the view's value within its blob. */
static const char *view_bytes(view *v, size_t *len) {
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
    const char *s = view_bytes(v, &len);
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

/* Whether the edits of the container at tape index at name a member. */
static int edit_named(lua_State *L, int vi, const view *v, size_t at, const char *name) {
    int found = 0;
    if (push_edits(L, vi, v, at, 0)) { /* stack: ..., C */
        found = lua_getfield(L, -1, name) != LUA_TNIL;
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return found;
}

int kl_view_edits_touch(lua_State *L, int idx, const char *const members[][2], size_t n) {
    view *v = check_view_arg(L, idx);
    if (!v->doc->edited) return 0;
    idx = lua_absindex(L, idx);
    size_t at = view_at(L, v);
    for (size_t i = 0; i < n; i++) {
        const char *parent = members[i][0];
        if (parent && edit_named(L, idx, v, at, parent)) return 1;
        size_t in = parent ? kl_jt_get(&v->doc->t, at, parent) : at;
        if (in && edit_named(L, idx, v, in, members[i][1])) return 1;
    }
    return 0;
}

/* Writes through w the JSON of the view v at vi, its edits applied. */
static void write_view(lua_State *L, int vi, view *v, const kl_view_writer *w) {
    size_t n;
    const char *s = view_bytes(v, &n);
    if (!v->doc->edited) {
        w->put(w->ctx, s, n);
        return;
    }
    size_t at = view_at(L, v);
    push_object_edits(L, vi, v, 0); /* stack: ..., E */
    const vdoc *d = v->doc;
    writing g = {.L = L, .w = w, .t = &d->t, .text = d->blob->data, .end = d->off + d->len,
                 .ei = lua_gettop(L)};
    g.edited = edited_indexes(L, g.ei, &g.nedited); /* stack: ..., E, indexes */
    g.link = &g.steps;
    kl_scan_init(&g.scan);
    write_value(&g, at, (size_t)(s - d->blob->data));
    lua_pop(L, 2);
}

int kl_view_write(lua_State *L, int idx, const kl_view_writer *w) {
    view *v = test_view(L, idx);
    if (!v) return 0;
    live_doc(L, v);
    write_view(L, lua_absindex(L, idx), v, w);
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
    size_t at = view_at(L, v);
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
    else if (v) kl_lua_json_push_value(L, &v->doc->t, view_at(L, v), amt);
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
    push_member(L, n + 1, MT_UPVALUE, v, at);
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
        name = tape_type_name(kl_jt_type(&v->doc->t, view_at(L, v)));
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

void kl_view_set_functions(lua_State *L) {
    static const luaL_Reg funcs[] = {{"copy", l_copy}, {"get", l_get}, {"type", l_type}, {NULL, NULL}};
    luaL_getmetatable(L, VIEW_MT);
    luaL_getmetatable(L, ROOT_MT); /* stack: t, view mt, root mt */
    luaL_setfuncs(L, funcs, 2);
}
