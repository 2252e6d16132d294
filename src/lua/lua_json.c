/* lua_json.c - the klua.json table; see lua_json.h. */
#include "lua/lua_json.h"

#include <lauxlib.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/gonum.h"
#include "base/jsonesc.h"
#include "base/utf8.h"
#include "lua/view.h"

#define ARRAY_MT "klua.json.array"

void kl_lua_json_push_array_mt(lua_State *L) { luaL_newmetatable(L, ARRAY_MT); }

/* ---- JSON to Lua ---- */

/*
 * Pushing a string Lua interns (up to 40 bytes, Lua's LUAI_MAXSHORTLEN)
 * hashes all its bytes and walks a chain of Lua's string table, whose
 * links are mostly cold: a third of klua.copy(pod)'s time went there. The
 * member names and most short values of cached objects repeat from one
 * object to the next ("metadata", "f:status", "Running", a namespace), so
 * a decode first looks for the string in a small cache of the strings it
 * pushed lately: one string per slot, the slot chosen by a hash of the
 * length and the first and last 8 bytes, the bytes kept in the slot so that
 * neither a hit nor a miss touches a Lua string. A slot that holds other
 * bytes is overwritten. The Lua strings are anchored in a table, the cache's
 * user value, in the registry; a script that changes that table through
 * debug.getregistry gets misses. The cache keeps at most STRING_SLOTS short
 * strings alive: at most about 150 KB in all.
 */
#define STRINGS_KEY "klua.json.strings"
#define STRING_SLOTS 1024 /* a power of 2 */
#define STRING_SHORT 40

/* One cache line a slot, so that a lookup reads one line. A string of n
 * bytes is its length, head and tail (string_key) and, beyond 16 bytes,
 * the n - 16 bytes between head and tail. */
typedef struct string_slot {
    const void *lua; /* the anchored string, as lua_topointer gives it; NULL when empty */
    uint64_t head, tail;
    unsigned char len;
    char middle[STRING_SHORT - 16];
    char pad[64 - sizeof(void *) - 2 * sizeof(uint64_t) - 1 - (STRING_SHORT - 16)];
} string_slot;
_Static_assert(sizeof(string_slot) == 64, "a slot is one cache line");

/* A decode in progress: the tape, the stack indexes of the array
 * metatable and of the strings' anchor table, and their slots. */
typedef struct tree {
    lua_State *L;
    const kl_json_tape *t;
    int amt, anchors;
    string_slot *slots;
} tree;

/* Pushes the anchor table of the string cache and returns its slots. */
static string_slot *push_string_cache(lua_State *L) {
    void *ud;
    if (lua_getfield(L, LUA_REGISTRYINDEX, STRINGS_KEY) == LUA_TUSERDATA) {
        ud = lua_touserdata(L, -1);
    } else {
        lua_pop(L, 1);
        ud = lua_newuserdatauv(L, (STRING_SLOTS + 1) * sizeof(string_slot), 1);
        memset(ud, 0, (STRING_SLOTS + 1) * sizeof(string_slot));
        lua_createtable(L, STRING_SLOTS, 0);
        lua_setiuservalue(L, -2, 1);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, STRINGS_KEY); /* stack: ..., cache */
    }
    lua_getiuservalue(L, -1, 1);
    lua_remove(L, -2); /* stack: ..., anchors */
    return (string_slot *)(((uintptr_t)ud + sizeof(string_slot) - 1) & ~(uintptr_t)(sizeof(string_slot) - 1));
}

/* The first and the last 8 bytes of s, which hold all of its bytes when
 * it has at most 16 (shorter strings in other ways that also hold them all). */
static void string_key(const char *s, size_t n, uint64_t *head, uint64_t *tail) {
    *head = *tail = 0;
    if (n >= 8) {
        memcpy(head, s, 8);
        memcpy(tail, s + n - 8, 8);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        *head = (uint64_t)a << 32 | b;
    } else if (n) {
        *head = (uint64_t)(unsigned char)s[0] << 16 | (uint64_t)(unsigned char)s[n / 2] << 8 | (unsigned char)s[n - 1];
    }
}

static void push_string(const tree *d, const char *s, size_t n) {
    lua_State *L = d->L;
    if (n > STRING_SHORT) {
        lua_pushlstring(L, s, n);
        return;
    }
    uint64_t head, tail;
    string_key(s, n, &head, &tail);
    uint64_t h = (head ^ ((tail * 0x9e3779b97f4a7c15ULL) >> 7) ^ n) * 0xff51afd7ed558ccdULL;
    size_t i = (size_t)(h >> 40) & (STRING_SLOTS - 1);
    string_slot *e = &d->slots[i];
    if (e->lua && e->len == n && e->head == head && e->tail == tail &&
        (n <= 16 || memcmp(e->middle, s + 8, n - 16) == 0)) {
        lua_rawgeti(L, d->anchors, (lua_Integer)i + 1);
        if (lua_topointer(L, -1) == e->lua) return;
        lua_pop(L, 1);
    }
    lua_pushlstring(L, s, n);
    lua_pushvalue(L, -1);
    lua_rawseti(L, d->anchors, (lua_Integer)i + 1);
    e->lua = lua_topointer(L, -1);
    e->head = head;
    e->tail = tail;
    e->len = (unsigned char)n;
    if (n > 16) memcpy(e->middle, s + 8, n - 16);
}

static void push_scalar(lua_State *L, const kl_json_tape *t, size_t i) {
    size_t len;
    const char *s;
    switch (kl_jt_type(t, i)) {
    case '"':
        s = kl_jt_string(t, i, &len);
        lua_pushlstring(L, s, len);
        break;
    case 'l': lua_pushinteger(L, (lua_Integer)kl_jt_int(t, i)); break;
    case 'u': lua_pushnumber(L, (lua_Number)kl_jt_uint(t, i)); break;
    case 'd': lua_pushnumber(L, (lua_Number)kl_jt_double(t, i)); break;
    case 't': lua_pushboolean(L, 1); break;
    case 'f': lua_pushboolean(L, 0); break;
    default: lua_pushlightuserdata(L, NULL); break;
    }
}

static void push_tree(const tree *d, size_t i, int depth);

/* While its members are pushed a container holds 2 slots of the stack
 * (itself and a key), and the innermost a few more: rather than a check
 * per container, room is made for 8 levels at a time. */
static void push_container(const tree *d, size_t i, int depth) {
    lua_State *L = d->L;
    const kl_json_tape *t = d->t;
    if (depth % 8 == 0) luaL_checkstack(L, 2 * 8 + 4, "JSON nested too deeply");
    size_t n = kl_jt_count(t, i), end = kl_jt_close(t, i);
    if (kl_jt_type(t, i) == '{') {
        lua_createtable(L, 0, n > INT32_MAX ? 0 : (int)n);
        for (size_t j = i + 1; j < end; j = kl_jt_next(t, j + 1)) {
            size_t klen;
            const char *k = kl_jt_string(t, j, &klen);
            push_string(d, k, klen);
            push_tree(d, j + 1, depth + 1);
            lua_rawset(L, -3);
        }
        return;
    }
    lua_createtable(L, n > INT32_MAX ? 0 : (int)n, 0);
    lua_Integer k = 1;
    for (size_t j = i + 1; j < end; j = kl_jt_next(t, j)) {
        push_tree(d, j, depth + 1);
        lua_rawseti(L, -2, k++);
    }
    lua_pushvalue(L, d->amt);
    lua_setmetatable(L, -2);
}

static void push_tree(const tree *d, size_t i, int depth) {
    size_t len;
    const char *s;
    switch (kl_jt_type(d->t, i)) {
    case '{':
    case '[': push_container(d, i, depth); break;
    case '"':
        s = kl_jt_string(d->t, i, &len);
        push_string(d, s, len);
        break;
    default: push_scalar(d->L, d->t, i);
    }
}

void kl_lua_json_push_value(lua_State *L, const kl_json_tape *t, size_t i, int amt) {
    if (kl_jt_type(t, i) != '{' && kl_jt_type(t, i) != '[') {
        push_scalar(L, t, i);
        return;
    }
    luaL_checkstack(L, 3, "JSON nested too deeply");
    string_slot *slots = push_string_cache(L); /* stack: ..., anchors */
    tree d = {L, t, amt, lua_gettop(L), slots};
    push_container(&d, i, 0); /* stack: ..., anchors, value */
    lua_remove(L, -2);
}

#define GUARD_MT "klua.json.guard"

static int guard_gc(lua_State *L) {
    kl_json_doc **d = lua_touserdata(L, 1);
    kl_json_free(*d);
    *d = NULL;
    return 0;
}

kl_json_doc **kl_lua_json_push_guard(lua_State *L) {
    kl_json_doc **d = lua_newuserdatauv(L, sizeof *d, 0);
    *d = NULL;
    if (luaL_newmetatable(L, GUARD_MT)) {
        lua_pushcfunction(L, guard_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    return d;
}

int kl_lua_json_decode(lua_State *L, const char *s, size_t len) {
    kl_lua_json_push_array_mt(L); /* stack: ..., amt */
    int amt = lua_gettop(L);
    kl_json_doc **guard = kl_lua_json_push_guard(L); /* stack: ..., amt, guard */
    kl_json_error jerr;
    *guard = kl_json_parse(s, len, 0, &jerr);
    if (!*guard) {
        char msg[160];
        kl_json_error_format(&jerr, "text", msg, sizeof msg);
        lua_pop(L, 2);
        lua_pushnil(L);
        lua_pushstring(L, msg);
        return 2;
    }
    kl_json_tape t = kl_json_doc_tape(*guard);
    kl_lua_json_push_value(L, &t, 1, amt); /* stack: ..., amt, guard, value */
    kl_json_free(*guard);
    *guard = NULL;
    lua_replace(L, amt); /* stack: ..., value, guard */
    lua_pop(L, 1);
    return 1;
}

/* ---- Lua to JSON ---- */

/* Where the encoder is, for error messages and cycle detection. */
typedef struct path {
    const struct path *up;
    const char *key; /* member name, or NULL for an array index */
    size_t keylen;
    lua_Integer index;
    const void *table; /* the table being encoded at this level, if any */
    int once;          /* its stack index when it is encoded in one pass, its
                        * keys not counted first (encode_once), else 0 */
    int marked;        /* with once: the table is marked as an array */
} path;

typedef struct enc {
    lua_State *L;
    int box;   /* stack index of the userdata holding buf */
    int amt;   /* stack index of the array metatable */
    char *buf;
    size_t len, cap;
} enc;

/* kl_buf_cap's growth, but into a userdata rather than kl_buf_grow's heap
 * block: an error half-way leaves it to the collector, and it counts
 * against the script's memory cap. */
static void grow(enc *e, size_t n);

static inline void reserve(enc *e, size_t n) {
    if (e->cap - e->len < n) grow(e, n);
}

static void grow(enc *e, size_t n) {
    size_t cap = kl_buf_cap(e->cap, e->len + n, 256);
    char *b = lua_newuserdatauv(e->L, cap, 0);
    memcpy(b, e->buf, e->len);
    lua_replace(e->L, e->box); /* the larger buffer in the old one's slot, which the collector frees */
    e->buf = b;
    e->cap = cap;
}

static void put(enc *e, const char *s, size_t n) {
    reserve(e, n);
    memcpy(e->buf + e->len, s, n);
    e->len += n;
}

static void putc_(enc *e, char c) {
    reserve(e, 1);
    e->buf[e->len++] = c;
}

/* Pushes the path as text, like spec.containers[1].image. */
static void push_path(lua_State *L, const path *p) {
    const path *chain[KL_JSON_MAX_DEPTH + 2];
    int n = 0;
    for (; p && p->up && n < KL_JSON_MAX_DEPTH + 2; p = p->up) chain[n++] = p;
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (int i = n - 1; i >= 0; i--) {
        if (chain[i]->key) {
            if (i != n - 1) luaL_addchar(&b, '.');
            luaL_addlstring(&b, chain[i]->key, chain[i]->keylen);
        } else {
            char num[32];
            snprintf(num, sizeof num, "[%lld]", (long long)chain[i]->index);
            luaL_addstring(&b, num);
        }
    }
    luaL_pushresult(&b);
}

/* Raises "cannot encode <what> at <path><why>". */
static int raise_error(enc *e, const path *p, const char *what, const char *why) {
    lua_State *L = e->L;
    if (p->up) {
        push_path(L, p);
        return luaL_error(L, "klua.json.encode: cannot encode %s at %s%s", what, lua_tostring(L, -1), why);
    }
    return luaL_error(L, "klua.json.encode: cannot encode %s%s", what, why);
}

typedef enum { AS_OBJECT, AS_ARRAY, AS_INVALID } table_shape;
static table_shape table_shape_of(lua_State *L, int idx, int marked, lua_Integer *n);

#define KEYS_WHY ": its keys must be all strings (an object) or exactly 1..n (an array)"
#define MARKED_WHY ": it is marked as an array but its keys are not exactly 1..n"

/* Raises the error met at p, or the one a table around it would have
 * raised first: a table encoded in one pass has its keys checked only as
 * they come, where the others' are checked before any member, so the
 * outermost of them whose keys are mixed or sparse is the error. */
static int enc_error(enc *e, const path *p, const char *what, const char *why) {
    const path *chain[KL_JSON_MAX_DEPTH + 2];
    int n = 0;
    for (const path *q = p; q && n < KL_JSON_MAX_DEPTH + 2; q = q->up) chain[n++] = q;
    for (int i = n - 1; i >= 0; i--) {
        lua_Integer count;
        if (chain[i]->once && table_shape_of(e->L, chain[i]->once, chain[i]->marked, &count) == AS_INVALID)
            return raise_error(e, chain[i], "a table", chain[i]->marked ? MARKED_WHY : KEYS_WHY);
    }
    return raise_error(e, p, what, why);
}

static void encode_value(enc *e, int idx, const path *p, int depth);

/* Bytes a string holds as they are: printable ASCII (and DEL) but the
 * quote and the backslash. */
static const unsigned char PLAIN[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
};

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* The high bit of each byte of w that is not PLAIN, and maybe of bytes
 * above such a byte (a borrow runs up), never below: the lowest bit set is
 * the first byte that is not. */
static inline uint64_t not_plain8(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL, high = ones << 7;
    uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    return (((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b) | w) & high;
}

/* Copies the run of PLAIN bytes s starts with to out, 8 bytes a step, and
 * returns its length; out has room for n bytes, and the bytes written
 * past the run are the caller's to overwrite. A Pod's strings are nearly
 * all plain, most of them short: a byte at a time, and a memcpy of the
 * run, this was a quarter of encoding one. The last word read overlaps
 * the one before, whose bytes are plain, and a string of 4 to 7 bytes is
 * read as its first and its last 4. */
static size_t copy_plain(char *out, const char *s, size_t n) {
    uint64_t w, m;
    size_t i = 0;
    if (n >= 8) {
        for (; i + 8 <= n; i += 8) {
            memcpy(&w, s + i, 8);
            memcpy(out + i, &w, 8);
            if ((m = not_plain8(w))) return i + ((size_t)__builtin_ctzll(m) >> 3);
        }
        if (i == n) return n;
        memcpy(&w, s + n - 8, 8);
        memcpy(out + n - 8, &w, 8);
        m = not_plain8(w);
        return m ? n - 8 + ((size_t)__builtin_ctzll(m) >> 3) : n;
    }
    if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        memcpy(out, &a, 4);
        memcpy(out + n - 4, &b, 4);
        if (!(m = not_plain8(a | (uint64_t)b << 32))) return n;
        size_t k = (size_t)__builtin_ctzll(m) >> 3;
        return k < 4 ? k : n - 8 + k;
    }
    for (; i < n && PLAIN[(unsigned char)s[i]]; i++) out[i] = s[i];
    return i;
}
#else
static size_t copy_plain(char *out, const char *s, size_t n) {
    size_t i = 0;
    for (; i < n && PLAIN[(unsigned char)s[i]]; i++) out[i] = s[i];
    return i;
}
#endif

static void encode_string(enc *e, const char *s, size_t n, const path *p) {
    reserve(e, n + 2);
    e->buf[e->len++] = '"';
    for (size_t i = 0;;) {
        reserve(e, n - i + 1); /* the rest as it is, and the closing quote */
        size_t plain = copy_plain(e->buf + e->len, s + i, n - i);
        e->len += plain;
        i += plain;
        if (i == n) break;
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            size_t l = kl_utf8_len((const unsigned char *)s + i, n - i);
            if (!l) {
                char why[64];
                snprintf(why, sizeof why, ": it is not valid UTF-8 (at byte %zu)", i);
                enc_error(e, p, "a string", why);
            }
            put(e, s + i, l);
            i += l;
            continue;
        }
        char esc[KL_JSONESC_MAX];
        put(e, esc, kl_jsonesc_char(c, esc)); /* not PLAIN and ASCII: it has an escape */
        i++;
    }
    putc_(e, '"');
}

/* lua_Integer in decimal, as LUA_INTEGER_FMT prints it, without printf's
 * parsing of its format for each of an object's numbers. */
static size_t format_integer(lua_Integer v, char *out) {
    char digits[24];
    size_t n = 0, len = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) out[len++] = '-';
    while (n) out[len++] = digits[--n];
    return len;
}

/* Floats as Go's encoding/json writes them (base/gonum.h), the API
 * server's own form: a number read from the server encodes to the text it
 * came as, and an integer-valued float to an integer. */
static void encode_number(enc *e, int idx, const path *p) {
    char num[KL_GONUM_MAX];
    size_t n;
    if (lua_isinteger(e->L, idx)) {
        n = format_integer(lua_tointeger(e->L, idx), num);
    } else {
        double d = (double)lua_tonumber(e->L, idx);
        if (isnan(d)) enc_error(e, p, "NaN", "");
        if (isinf(d)) enc_error(e, p, "an infinite number", "");
        n = kl_gonum_json(d, num);
    }
    put(e, num, n);
}

/* How a table encodes. */

/* Counts the keys of the table at idx and sets *n; decides its shape. */
static table_shape table_shape_of(lua_State *L, int idx, int marked, lua_Integer *n) {
    lua_Integer count = 0, ints = 0, max = 0;
    int strings = 0, others = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        count++;
        if (lua_type(L, -2) == LUA_TSTRING) {
            strings = 1;
        } else if (lua_isinteger(L, -2) && lua_tointeger(L, -2) > 0) {
            ints++;
            if (lua_tointeger(L, -2) > max) max = lua_tointeger(L, -2);
        } else {
            others = 1;
        }
        lua_pop(L, 1);
    }
    *n = count;
    int sequence = !strings && !others && ints == count && max == count;
    if (marked) return sequence ? AS_ARRAY : AS_INVALID;
    if (count == 0) return AS_OBJECT;
    if (sequence) return AS_ARRAY;
    return strings && !others && ints == 0 ? AS_OBJECT : AS_INVALID;
}

int kl_lua_json_table_kind(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    kl_lua_json_push_array_mt(L);
    int marked = 0;
    if (lua_getmetatable(L, idx)) {
        marked = lua_rawequal(L, -1, -2);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_Integer n;
    switch (table_shape_of(L, idx, marked, &n)) {
    case AS_ARRAY: return '[';
    case AS_OBJECT: return '{';
    default: return 0;
    }
}

static void encode_array(enc *e, int idx, lua_Integer n, const path *p, int depth) {
    putc_(e, '[');
    for (lua_Integer i = 1; i <= n; i++) {
        if (i > 1) putc_(e, ',');
        path child = {p, NULL, 0, i, NULL, 0, 0};
        lua_rawgeti(e->L, idx, i);
        encode_value(e, lua_gettop(e->L), &child, depth + 1);
        lua_pop(e->L, 1);
    }
    putc_(e, ']');
}

/* Encodes the table at idx in one pass, without counting its keys first:
 * as an object when it is unmarked, as an array when it is marked as one.
 * 1, or 0 at the first key that does not fit (not a string; not the next
 * of 1, 2, ... n as an array's part gives them), the stack as it was and
 * the output to be rewound, for the caller to decide the table's shape as
 * for any other. Most tables are objects (all of klua.copy's but arrays),
 * and this walks each once instead of twice. */
static int encode_once(enc *e, int idx, const path *p, int depth, int as_array) {
    lua_State *L = e->L;
    putc_(e, as_array ? '[' : '{');
    lua_Integer i = 0;
    lua_pushnil(L);
    int value = lua_gettop(L) + 1; /* where lua_next puts each member's value */
    while (lua_next(L, idx)) {
        if (as_array ? !lua_isinteger(L, -2) || lua_tointeger(L, -2) != i + 1 : lua_type(L, -2) != LUA_TSTRING) {
            lua_pop(L, 2);
            return 0;
        }
        if (i++) putc_(e, ',');
        path child = {p, NULL, 0, i, NULL, 0, 0};
        if (!as_array) {
            child.index = 0;
            child.key = lua_tolstring(L, -2, &child.keylen);
            encode_string(e, child.key, child.keylen, &child);
            putc_(e, ':');
        }
        encode_value(e, value, &child, depth + 1);
        lua_pop(L, 1);
    }
    putc_(e, as_array ? ']' : '}');
    return 1;
}

static void encode_table(enc *e, int idx, const path *p, int depth) {
    lua_State *L = e->L;
    const void *t = lua_topointer(L, idx);
    for (const path *q = p->up; q; q = q->up)
        if (q->table == t) enc_error(e, p, "a table", ": it contains itself");
    if (depth >= KL_JSON_MAX_DEPTH) enc_error(e, p, "a table", ": nested deeper than 1024 levels");
    luaL_checkstack(L, 4, "klua.json.encode: nested too deeply");
    path here = *p;
    here.table = t;
    int marked = 0;
    if (lua_getmetatable(L, idx)) {
        marked = lua_rawequal(L, -1, e->amt);
        lua_pop(L, 1);
    }
    size_t start = e->len;
    here.once = idx;
    here.marked = marked;
    if (encode_once(e, idx, &here, depth, marked)) return;
    here.once = 0;
    e->len = start;
    /* Neither an object nor an array with its members in order: an
     * unmarked table with only string keys (or none), and a marked one
     * with keys 1..n as they come, were written above. */
    lua_Integer n;
    if (table_shape_of(L, idx, marked, &n) == AS_ARRAY) encode_array(e, idx, n, &here, depth);
    else enc_error(e, p, "a table", marked ? MARKED_WHY : KEYS_WHY);
}

/* A view's place in the encoding, for the members of a transform's object
 * that were written (kl_view_writer). */
typedef struct in_view {
    enc *e;
    const path *p;
    int depth;
} in_view;

static void view_put(void *ctx, const char *s, size_t n) { put(((in_view *)ctx)->e, s, n); }

/* Encodes the value at idx as the path p, then steps, leads to it. */
static void encode_stepped(in_view *v, int idx, const kl_view_step *s, const path *p) {
    if (!s) {
        encode_value(v->e, idx, p, v->depth + 1);
        return;
    }
    path child = {p, s->key, s->keylen, (lua_Integer)s->index, NULL, 0, 0};
    encode_stepped(v, idx, s->next, &child);
}

static void view_value(void *ctx, int idx, const kl_view_step *steps) {
    in_view *v = ctx;
    /* An edit can hold the object it edits: a table would be found in the path. */
    if (v->depth + 1 >= KL_JSON_MAX_DEPTH)
        enc_error(v->e, v->p, "an edited object", ": nested deeper than 1024 levels (does it contain itself?)");
    encode_stepped(v, idx, steps, v->p);
}

/* Writes the view at idx: its bytes, edits and all. Returns 0 for any
 * other userdata. */
static int encode_view(enc *e, int idx, const path *p, int depth) {
    in_view v = {e, p, depth};
    kl_view_writer w = {view_put, view_value, &v};
    return kl_view_write(e->L, idx, &w);
}

static void encode_value(enc *e, int idx, const path *p, int depth) {
    lua_State *L = e->L;
    size_t n;
    const char *s;
    switch (lua_type(L, idx)) {
    case LUA_TNIL: put(e, "null", 4); break;
    case LUA_TBOOLEAN: lua_toboolean(L, idx) ? put(e, "true", 4) : put(e, "false", 5); break;
    case LUA_TNUMBER: encode_number(e, idx, p); break;
    case LUA_TSTRING:
        s = lua_tolstring(L, idx, &n);
        encode_string(e, s, n, p);
        break;
    case LUA_TTABLE: encode_table(e, idx, p, depth); break;
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == NULL) {
            put(e, "null", 4);
            break;
        }
        enc_error(e, p, "a light userdata", " (only klua.null is allowed)");
        break;
    case LUA_TUSERDATA:
        if (encode_view(e, idx, p, depth)) break;
        enc_error(e, p, "a userdata", " (only views from the cache are allowed)");
        break;
    default:
        enc_error(e, p, lua_type(L, idx) == LUA_TFUNCTION ? "a function" : "a thread", "");
    }
}

/* The registry's key of the buffer the last encode left: encoding an object
 * again (a transform's every result) starts with room for it, rather than
 * growing a new buffer from 256 bytes each time. An encode takes it out of
 * the registry while it writes: a finalizer run by one of its allocations
 * may encode too, and must start a buffer of its own. */
static const char ENC_BUF = 'b';
#define ENC_BUF_KEEP ((size_t)64 << 10) /* larger ones are left to the collector */

/* Encodes the value at idx into the buffer userdata pushed; its length in
 * *len. [-0, +1, e] */
static const char *encode_to_buffer(lua_State *L, int idx, size_t *len) {
    idx = lua_absindex(L, idx);
    enc e = {L, 0, 0, NULL, 0, 0};
    kl_lua_json_push_array_mt(L); /* stack: ..., amt */
    e.amt = lua_gettop(L);
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &ENC_BUF) == LUA_TUSERDATA) { /* stack: ..., amt, buf */
        e.buf = lua_touserdata(L, -1);
        e.cap = lua_rawlen(L, -1);
        lua_pushnil(L);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &ENC_BUF);
    } else {
        lua_pop(L, 1);
        e.cap = 256;
        e.buf = lua_newuserdatauv(L, e.cap, 0);
    }
    e.box = lua_gettop(L);
    path root = {NULL, NULL, 0, 0, NULL, 0, 0};
    encode_value(&e, idx, &root, 0);
    if (e.cap <= ENC_BUF_KEEP) {
        lua_pushvalue(L, e.box);
        lua_rawsetp(L, LUA_REGISTRYINDEX, &ENC_BUF);
    }
    lua_remove(L, e.amt); /* stack: ..., buf */
    *len = e.len;
    return e.buf;
}

void kl_lua_json_encode(lua_State *L, int idx) {
    size_t n;
    const char *s = encode_to_buffer(L, idx, &n); /* stack: ..., buf */
    lua_pushlstring(L, s, n);                     /* stack: ..., buf, text */
    lua_remove(L, -2);
}

const char *kl_lua_json_encode_text(lua_State *L, int idx, size_t *len) {
    return encode_to_buffer(L, idx, len);
}

/* ---- the module ---- */

/* klua.json.encode(value) -> string. Raises an error naming the path of
 * anything that has no JSON form. */
static int l_encode(lua_State *L) {
    luaL_checkany(L, 1);
    kl_lua_json_encode(L, 1);
    return 1;
}

/* klua.json.decode(text) -> value, or nil and a message saying where the
 * text is not valid JSON. */
static int l_decode(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    return kl_lua_json_decode(L, s, len);
}

/* klua.json.array([t]) -> t marked as a JSON array (a new empty table when
 * t is absent), so that it encodes as [] even when empty. */
static int l_array(lua_State *L) {
    if (lua_isnoneornil(L, 1)) {
        lua_settop(L, 0);
        lua_newtable(L);
    }
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
    kl_lua_json_push_array_mt(L);
    lua_setmetatable(L, 1);
    return 1;
}

void kl_lua_json_push_module(lua_State *L) {
    static const luaL_Reg funcs[] = {{"encode", l_encode}, {"decode", l_decode}, {"array", l_array}, {NULL, NULL}};
    luaL_newlib(L, funcs);
    lua_pushlightuserdata(L, NULL);
    lua_setfield(L, -2, "null");
    kl_lua_json_push_array_mt(L);
    lua_setfield(L, -2, "array_mt");
}
