/* lua_yaml.c - klua.core.yaml; see lua_yaml.h. */
#include "lua/lua_yaml.h"

#include <errno.h>
#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/buf.h"
#include "base/gonum.h"
#include "base/xalloc.h"
#include "lua/lua_json.h"
#include "lua/yaml_plain.h"

/* Deeper than any object the API server stores; stops a cycle. */
#define MAX_DEPTH 200

typedef struct {
    char *buf;
    size_t len, cap;
} out_buf;

/* One encode's state, in a userdata whose __gc frees the emitter and the
 * text, so that a Lua error raised half-way (out of memory) leaks nothing. */
typedef struct {
    lua_State *L;
    yaml_emitter_t em;
    int started;       /* em is initialised */
    out_buf out;
    const char *error; /* what could not be written; NULL while all is well */
} writer;

#define WRITER_MT "klua.yaml.writer"

static int writer_gc(lua_State *L) {
    writer *w = luaL_checkudata(L, 1, WRITER_MT);
    if (w->started) yaml_emitter_delete(&w->em);
    w->started = 0;
    free(w->out.buf);
    w->out.buf = NULL;
    return 0;
}

static int on_write(void *data, unsigned char *bytes, size_t size) {
    out_buf *o = data;
    o->buf = kl_buf_grow(o->buf, &o->cap, o->len + size, 1, 4096);
    memcpy(o->buf + o->len, bytes, size);
    o->len += size;
    return 1;
}

static int emit(writer *w, yaml_event_t *ev) {
    if (!yaml_emitter_emit(&w->em, ev)) {
        if (!w->error) w->error = w->em.problem ? w->em.problem : "the YAML emitter failed";
        return -1;
    }
    return 0;
}

static int scalar(writer *w, const char *text, size_t len, yaml_scalar_style_t style, int plain) {
    yaml_event_t ev;
    yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)text, (int)len, plain, 1, style);
    return emit(w, &ev);
}

static int string_scalar(writer *w, const char *s, size_t len) {
    if (memchr(s, '\n', len)) return scalar(w, s, len, YAML_LITERAL_SCALAR_STYLE, 0);
    if (strlen(s) == len && kl_yaml_plain_not_string(s)) return scalar(w, s, len, YAML_DOUBLE_QUOTED_SCALAR_STYLE, 0);
    return scalar(w, s, len, YAML_ANY_SCALAR_STYLE, 1);
}

/* kubectl writes YAML from the object's JSON text (sigs.k8s.io/yaml),
 * which go-yaml reads back: a float's encoding/json text is an integer
 * there when it has no fraction and fits 64 bits (12345678901234567000),
 * which go-yaml writes as that integer ("-0" as 0), else a float, which it
 * writes with strconv's 'g' (1.23456789123e+08, 1e+20). */
static void float_text(double d, char text[KL_GONUM_MAX]) {
    kl_gonum_json(d, text);
    if (!strpbrk(text, ".e")) {
        errno = 0;
        if (text[0] == '-') {
            long long v = strtoll(text, NULL, 10);
            if (errno == 0) {
                snprintf(text, KL_GONUM_MAX, "%lld", v);
                return;
            }
        } else {
            unsigned long long v = strtoull(text, NULL, 10);
            if (errno == 0) {
                snprintf(text, KL_GONUM_MAX, "%llu", v);
                return;
            }
        }
    }
    kl_gonum_g(d, text);
}

static int number_scalar(writer *w, int idx) {
    char text[KL_GONUM_MAX];
    if (lua_isinteger(w->L, idx)) {
        snprintf(text, sizeof text, LUA_INTEGER_FMT, lua_tointeger(w->L, idx));
    } else {
        double d = lua_tonumber(w->L, idx);
        if (isnan(d)) snprintf(text, sizeof text, ".nan");
        else if (isinf(d)) snprintf(text, sizeof text, d > 0 ? "+.inf" : "-.inf");
        else float_text(d, text);
    }
    return scalar(w, text, strlen(text), YAML_PLAIN_SCALAR_STYLE, 1);
}

static int value(writer *w, int idx, int depth);

static int is_letter(unsigned char c) { return (c | 32) >= 'a' && (c | 32) <= 'z' ? 1 : c >= 0x80; }
static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* go-yaml's order of map keys (keyList.Less in yaml.v2 sorter.go): by
 * character, but anything else before a letter (f2 before float1, "."
 * before f:spec), and runs of digits by their value, so x9 comes before
 * x10. Bytes of multibyte characters count as letters, which keeps UTF-8
 * keys in code point order; go-yaml asks Unicode, for which a symbol such
 * as an arrow is no letter. */
static int key_order(const char *a, const char *b) {
    size_t i = 0;
    for (; a[i] && b[i]; i++) {
        unsigned char ca = (unsigned char)a[i], cb = (unsigned char)b[i];
        if (ca == cb) continue;
        int la = is_letter(ca), lb = is_letter(cb);
        if (la && lb) return ca < cb ? -1 : 1;
        if (la || lb) return lb ? -1 : 1;
        /* A run of digits that began before i (with a non-zero digit)
         * compares by what follows, with the same weight on both sides. */
        unsigned long long na = 0, nb = 0;
        if (ca == '0' || cb == '0')
            for (size_t j = i; j-- > 0 && is_digit((unsigned char)a[j]);)
                if (a[j] != '0') {
                    na = nb = 1;
                    break;
                }
        size_t ea = i, eb = i;
        for (; is_digit((unsigned char)a[ea]); ea++) na = na * 10 + (unsigned)(a[ea] - '0');
        for (; is_digit((unsigned char)b[eb]); eb++) nb = nb * 10 + (unsigned)(b[eb] - '0');
        if (na != nb) return na < nb ? -1 : 1;
        if (ea != eb) return ea < eb ? -1 : 1;
        return ca < cb ? -1 : 1;
    }
    return a[i] ? 1 : b[i] ? -1 : 0;
}

static int sort_keys(const void *a, const void *b) { return key_order(*(char *const *)a, *(char *const *)b); }

/* A mapping with its string keys sorted, as go-yaml writes a map. The key
 * list is a userdata, so that a Lua error on the way leaks nothing. */
static int mapping(writer *w, int idx, int depth) {
    lua_State *L = w->L;
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        n += lua_type(L, -1) == LUA_TSTRING;
    }
    /* The key strings stay alive: the table holds them and is not changed. */
    const char **keys = lua_newuserdatauv(L, (n ? n : 1) * sizeof *keys, 0);
    size_t k = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TSTRING) keys[k++] = lua_tostring(L, -1);
    }
    qsort(keys, n, sizeof *keys, sort_keys);
    yaml_event_t ev;
    yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
    int rc = emit(w, &ev);
    for (size_t i = 0; i < n && rc == 0; i++) {
        rc = string_scalar(w, keys[i], strlen(keys[i]));
        if (rc == 0) {
            lua_pushstring(L, keys[i]);
            lua_rawget(L, idx);
            rc = value(w, lua_gettop(L), depth + 1);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    if (rc) return rc;
    yaml_mapping_end_event_initialize(&ev);
    return emit(w, &ev);
}

static int sequence(writer *w, int idx, int depth) {
    yaml_event_t ev;
    yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
    if (emit(w, &ev)) return -1;
    lua_Integer n = (lua_Integer)lua_rawlen(w->L, idx);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(w->L, idx, i);
        int rc = value(w, lua_gettop(w->L), depth + 1);
        lua_pop(w->L, 1);
        if (rc) return rc;
    }
    yaml_sequence_end_event_initialize(&ev);
    return emit(w, &ev);
}

static int value(writer *w, int idx, int depth) {
    lua_State *L = w->L;
    if (depth > MAX_DEPTH) {
        w->error = "the value is nested too deeply (a cycle?)";
        return -1;
    }
    if (!lua_checkstack(L, 4)) {
        w->error = "the value is nested too deeply";
        return -1;
    }
    switch (lua_type(L, idx)) {
    case LUA_TNIL: return scalar(w, "null", 4, YAML_PLAIN_SCALAR_STYLE, 1);
    case LUA_TLIGHTUSERDATA:
        if (lua_touserdata(L, idx) == NULL) return scalar(w, "null", 4, YAML_PLAIN_SCALAR_STYLE, 1);
        break;
    case LUA_TBOOLEAN:
        return lua_toboolean(L, idx) ? scalar(w, "true", 4, YAML_PLAIN_SCALAR_STYLE, 1)
                                     : scalar(w, "false", 5, YAML_PLAIN_SCALAR_STYLE, 1);
    case LUA_TNUMBER: return number_scalar(w, idx);
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        return string_scalar(w, s, len);
    }
    case LUA_TTABLE:
        switch (kl_lua_json_table_kind(L, idx)) {
        case '[': return sequence(w, idx, depth);
        case '{': return mapping(w, idx, depth);
        default: w->error = "a table with mixed or sparse keys has no YAML form"; return -1;
        }
    default: break;
    }
    w->error = lua_type(L, idx) == LUA_TUSERDATA ? "a view must be copied (klua.copy) before it is written as YAML"
                                                 : "this value has no YAML form";
    return -1;
}

/* yaml.encode(value) -> text */
static int l_encode(lua_State *L) {
    luaL_checkany(L, 1);
    lua_settop(L, 1);
    writer *w = lua_newuserdatauv(L, sizeof *w, 0);
    memset(w, 0, sizeof *w);
    w->L = L;
    if (luaL_newmetatable(L, WRITER_MT)) {
        lua_pushcfunction(L, writer_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    if (!yaml_emitter_initialize(&w->em)) return luaL_error(L, "cannot start the YAML emitter");
    w->started = 1;
    yaml_emitter_set_output(&w->em, on_write, &w->out);
    yaml_emitter_set_unicode(&w->em, 1);
    yaml_emitter_set_indent(&w->em, 2);
    yaml_event_t ev;
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    int rc = emit(w, &ev);
    if (rc == 0) {
        yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
        rc = emit(w, &ev);
    }
    if (rc == 0) rc = value(w, 1, 0);
    if (rc == 0) {
        yaml_document_end_event_initialize(&ev, 1);
        rc = emit(w, &ev);
    }
    if (rc == 0) {
        yaml_stream_end_event_initialize(&ev);
        rc = emit(w, &ev);
    }
    if (rc) return luaL_error(L, "cannot write YAML: %s", w->error);
    lua_pushlstring(L, w->out.buf ? w->out.buf : "", w->out.len);
    return 1;
}

void kl_lua_yaml_push_module(lua_State *L) {
    static const luaL_Reg funcs[] = {{"encode", l_encode}, {NULL, NULL}};
    luaL_newlib(L, funcs);
}
