/* view_edit.c - views that take writes, recorded beside the object's
 * bytes: the object a transform is given while it runs, and klua.edit's;
 * see view_impl.h.
 *
 * A transform is client-go's SetTransform, whose functions change the
 * object they are given and return it: so is the view a transform gets,
 * and klua.edit gives the same to a reconcile that changes an object to
 * send. A write to such a view or to a view inside it is recorded, not
 * applied: the bytes stay as they are, and the edits lie beside them in a
 * table E, the root's user value 1, by the tape index of the container
 * written to: E[at] = C, C[name] = value for an object's member (DELETED
 * for one set to nil) and C[k] = value for an array's element, C[0] its
 * length once it changed. Reads see the edits. The JSON written for the
 * view (what the cache keeps, what klua.api sends) is its bytes with each
 * container written to rewritten member by member and each container with
 * edits inside written around them, every other byte copied as it is. Two
 * views of the same value share its edits, as two references to one table
 * do.
 */
#include "lua/view_impl.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "wire/scan.h"

/* The value of a member set to nil: klua.null is JSON's null, kept. */
static const char DELETED = 'd';

static int is_deleted(lua_State *L, int i) { return lua_touserdata(L, i) == &DELETED; }

/* Pushes the edits E of v's object, or nil when there are none yet;
 * with create, makes them. [-0, +1, e] */
static int push_object_edits(lua_State *L, int vi, const view *v, int create) {
    kl_view_root_push(L, vi, v); /* stack: ..., root */
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
int kl_view_edit_read(lua_State *L, int vi, const view *v, size_t at, int ki) {
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

static size_t write_value(writing *g, size_t at, size_t off, size_t end);

/* The byte where the next value or key starts, at or after off. */
static size_t skip_separators(writing *g, size_t off) {
    return kl_json_raw_seek(g->text, g->end, off, 0, 0);
}

/* The byte just past the container at tape index at, its tokens from tape
 * index from on starting at byte off. */
static size_t container_end(writing *g, size_t at, size_t from, size_t off) {
    return kl_json_raw_seek(g->text, g->end, off, from, kl_jt_close(g->t, at)) + 1;
}

/* A member name an object's edits hold: its bytes, which C anchors. */
typedef struct name {
    const char *s;
    size_t n;
} name;

#define NAMES_MAX 16

/* The names C (at ci) holds edits of, in names, and how many; NAMES_MAX + 1
 * when there are more, and each member is then looked up in C. Finding a
 * member among a few names is cheaper than a Lua string made for each. */
static size_t edited_names(lua_State *L, int ci, name *names) {
    size_t count = 0;
    lua_pushnil(L);
    while (lua_next(L, ci)) { /* stack: ..., key, value */
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING) continue;
        if (count == NAMES_MAX) {
            lua_pop(L, 1);
            return NAMES_MAX + 1;
        }
        names[count].s = lua_tolstring(L, -1, &names[count].n);
        count++;
    }
    return count;
}

static int among(const name *names, size_t count, const char *s, size_t n) {
    if (count > NAMES_MAX) return 1;
    for (size_t i = 0; i < count; i++)
        if (names[i].n == n && memcmp(names[i].s, s, n) == 0) return 1;
    return 0;
}

/* Writes the object at tape index at, whose '{' is at byte off, with its
 * edits C on top of the stack: member by member. Returns the byte past
 * its '}'. */
static size_t write_object(writing *g, size_t at, size_t off) {
    lua_State *L = g->L;
    int ci = lua_gettop(L), first = 1;
    name names[NAMES_MAX];
    size_t nnames = edited_names(L, ci, names), close = kl_jt_close(g->t, at), p = off + 1;
    put(g, "{", 1);
    for (size_t i = at + 1; i < close; i = kl_jt_next(g->t, i + 1)) {
        size_t ko = skip_separators(g, p), ke = kl_json_raw_skip(g->text, g->end, ko);
        size_t vo = skip_separators(g, ke);
        p = skip_value(g, vo);
        kl_view_step step = {NULL, 0, 0, NULL};
        step.key = kl_jt_string(g->t, i, &step.keylen);
        int edited = 0;
        if (among(names, nnames, step.key, step.keylen)) {
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
            else write_value(g, i + 1, vo, p);
            leave(g, up);
        }
        lua_settop(L, ci);
    }
    lua_pushnil(L);
    while (lua_next(L, ci)) { /* the members added: stack: ..., C, key, value */
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
    put(g, "}", 1);
    return container_end(g, at, close, p);
}

/* Writes the array at tape index at, whose '[' is at byte off, with its
 * edits C on top of the stack: element by element. Returns the byte past
 * its ']'. */
static size_t write_array(writing *g, size_t at, size_t off) {
    lua_State *L = g->L;
    int ci = lua_gettop(L);
    lua_Integer was = (lua_Integer)kl_jt_count(g->t, at), n = edited_len(L, ci, g->t, at);
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
        if (lua_rawgeti(L, ci, k) != LUA_TNIL) value(g, ci + 1);
        else write_value(g, i, vo, p);
        leave(g, up);
        lua_settop(L, ci);
        if (k <= was) i = kl_jt_next(g->t, i);
    }
    put(g, "]", 1);
    return container_end(g, at, i, p); /* past the elements a shrunk array left out */
}

/* Writes the container at tape index at, whose bytes start at off (and end
 * at end, or 0 when not known), with edits inside it but none of its own:
 * as its bytes, but for the members with edits inside, each found by its
 * tape index and written in place, so that the bytes around them are
 * copied without a walk of every member. Returns the byte past it. */
static size_t write_around(writing *g, size_t at, size_t off, size_t end) {
    const kl_json_tape *t = g->t;
    int object = kl_jt_type(t, at) == '{';
    size_t close = kl_jt_close(t, at), written = off, from = at, from_off = off;
    long long k = 1;
    for (size_t i = at + 1; i < close; i = kl_jt_next(t, i + object), k++) {
        size_t vi = i + object; /* an object's member: its name at i, its value at i + 1 */
        if (!edits_within(g, vi)) continue;
        size_t vo = kl_json_raw_seek(g->text, g->end, from_off, from, vi);
        put(g, g->text + written, vo - written);
        kl_view_step step = {NULL, 0, k, NULL};
        if (object) step.key = kl_jt_string(t, i, &step.keylen);
        const kl_view_step **up = enter(g, &step);
        written = from_off = write_value(g, vi, vo, 0);
        leave(g, up);
        from = kl_jt_next(t, vi);
    }
    if (!end) end = container_end(g, at, from, from_off);
    put(g, g->text + written, end - written);
    return end;
}

/* Writes the value at tape index at, whose bytes start at off (and end at
 * end, or 0 when not known): the bytes themselves unless edits lie inside
 * it. Returns the byte past it. */
static size_t write_value(writing *g, size_t at, size_t off, size_t end) {
    lua_State *L = g->L;
    if (!edits_within(g, at)) {
        if (!end) end = skip_value(g, off);
        put(g, g->text + off, end - off);
        return end;
    }
    luaL_checkstack(L, 8, "klua: an edited object nested too deeply");
    if (lua_rawgeti(L, g->ei, (lua_Integer)at) != LUA_TTABLE) end = write_around(g, at, off, end); /* stack: ..., C|nil */
    else if (kl_jt_type(g->t, at) == '{') end = write_object(g, at, off);
    else end = write_array(g, at, off);
    lua_pop(L, 1);
    return end;
}

/* ---- what view.c's metamethods call ---- */

void kl_view_edit_write(lua_State *L, view *v) {
    lua_settop(L, 3);
    size_t at = kl_view_at(L, v);
    push_edits(L, 1, v, at, 1); /* stack: view, key, value, C */
    if (kl_jt_type(&v->doc->t, at) == '[') set_element(L, &v->doc->t, at);
    else set_member(L);
    v->doc->edited = 1;
}

int kl_view_edit_len(lua_State *L, int vi, const view *v, size_t at, lua_Integer *n) {
    int own = push_edits(L, vi, v, at, 0); /* stack: ..., C|nil */
    if (own) *n = edited_len(L, lua_gettop(L), &v->doc->t, at);
    lua_pop(L, 1);
    return own;
}

/* The iterator of pairs(view) for a container with edits: view.c's view_next's
 * upvalues, and its edits C third. An object's members come in JSON order
 * as edited, then those added (the tape position 0 once past the tape's,
 * the last of them then in upvalue 5). */
static int edited_next(lua_State *L) {
    view *v = lua_touserdata(L, lua_upvalueindex(2));
    const kl_json_tape *t = &v->doc->t;
    size_t at = kl_view_at(L, v);
    int ci = lua_upvalueindex(3), posi = lua_upvalueindex(4), nexti = lua_upvalueindex(5);
    if (kl_jt_type(t, at) == '[') {
        lua_Integer k = lua_tointeger(L, nexti);
        if (k > edited_len(L, ci, t, at)) return 0;
        lua_pushinteger(L, k + 1);
        lua_replace(L, nexti);
        lua_pushinteger(L, k); /* stack: k */
        if (!kl_view_edit_read(L, lua_upvalueindex(2), v, at, lua_gettop(L)))
            kl_view_member_push(L, lua_upvalueindex(2), lua_upvalueindex(1), v, kl_view_element(v, at, k, 1));
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
            kl_view_member_push(L, lua_upvalueindex(2), lua_upvalueindex(1), v, value);
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

int kl_view_edit_pairs(lua_State *L, int vi, view *v, size_t at, int mt) {
    vi = lua_absindex(L, vi);
    mt = lua_absindex(L, mt);
    if (!push_edits(L, vi, v, at, 0)) { /* stack: ..., C|nil */
        lua_pop(L, 1);
        return 0;
    }
    lua_pushvalue(L, mt);
    lua_pushvalue(L, vi);
    lua_rotate(L, -3, 2); /* stack: ..., mt, view, C */
    lua_pushinteger(L, (lua_Integer)at + 1);
    lua_pushinteger(L, 1);
    lua_pushcclosure(L, edited_next, 5);
    return 1;
}

/* Whether the edits C at ci (nil: none) name a member. */
static int names(lua_State *L, int ci, const char *name) {
    if (lua_type(L, ci) != LUA_TTABLE) return 0;
    int found = lua_getfield(L, ci, name) != LUA_TNIL;
    lua_pop(L, 1);
    return found;
}

int kl_view_edit_touches(lua_State *L, int vi, const view *v, size_t at, const char *const members[][2],
                         size_t n) {
    if (!push_object_edits(L, vi, v, 0)) { /* stack: ..., E|nil */
        lua_pop(L, 1);
        return 0;
    }
    int ei = lua_gettop(L), touched = 0;
    lua_rawgeti(L, ei, (lua_Integer)at); /* stack: ..., E, C of the object|nil */
    lua_pushnil(L);                      /* stack: ..., E, C, C of parent|nil */
    const char *parent = NULL;           /* whose edits are at ei + 2 */
    for (size_t i = 0; i < n && !touched; i++) {
        const char *p = members[i][0];
        if (!p) {
            touched = names(L, ei + 1, members[i][1]);
            continue;
        }
        if (!parent || strcmp(parent, p) != 0) { /* members of one parent come together */
            parent = p;
            if ((touched = names(L, ei + 1, p))) break;
            size_t in = kl_jt_get(&v->doc->t, at, p);
            if (in) lua_rawgeti(L, ei, (lua_Integer)in);
            else lua_pushnil(L);
            lua_replace(L, ei + 2);
        }
        touched = names(L, ei + 2, members[i][1]);
    }
    lua_settop(L, ei - 1);
    return touched;
}

void kl_view_edit_json(lua_State *L, int vi, view *v, const kl_view_writer *w) {
    size_t n;
    const char *s = kl_view_bytes(v, &n);
    size_t at = kl_view_at(L, v);
    push_object_edits(L, vi, v, 0); /* stack: ..., E */
    const vdoc *d = v->doc;
    writing g = {.L = L, .w = w, .t = &d->t, .text = d->blob->data, .end = d->off + d->len,
                 .ei = lua_gettop(L)};
    g.edited = edited_indexes(L, g.ei, &g.nedited); /* stack: ..., E, indexes */
    g.link = &g.steps;
    kl_scan_init(&g.scan);
    write_value(&g, at, (size_t)(s - d->blob->data), (size_t)(s - d->blob->data) + n);
    lua_pop(L, 2);
}
