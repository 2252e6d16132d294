/* lua_transform.c - a script's function as a cache transform; see lua_transform.h. */
#include "lua/lua_transform.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "lua/lua_json.h"
#include "lua/task.h"
#include "lua/view.h"
#include "wire/json.h"

struct kl_lua_transform {
    kl_rt *rt;
    int fn_ref;     /* the function, in the registry */
    char name[200]; /* "transform of pods": the task's name, in its errors */
};

/* One object through the function: what its task is given and leaves. */
typedef struct call {
    const kl_lua_transform *t;
    const kl_obj *o;
    void *parsed;  /* the watch event's parsed form of o, or NULL */
    kl_blob *out;  /* the bytes to cache instead, when a table came back */
    int ok;        /* the task ended without an error */
} call;

/* What the cache keys on and a view needs to know the object's type:
 * {parent, member}, parent NULL for a member of the object itself. */
static const char *const kept[][2] = {
    {NULL, "kind"},         {NULL, "apiVersion"},           {"metadata", "name"},
    {"metadata", "namespace"}, {"metadata", "resourceVersion"}, {"metadata", "uid"},
};

/* The string obj[parent][key] (obj[key] when parent is NULL) of the object
 * at tape index at, or NULL. */
static const char *member(const kl_json_tape *t, size_t at, const char *parent, const char *key,
                          size_t *len) {
    if (parent && !(at = kl_jt_get(t, at, parent))) return NULL;
    return kl_jt_get_string(t, at, key, len);
}

/* Raises unless the object at now[1] has the members of kept as the
 * original at was[wat] has them. [-0, +0, e] */
static void check_kept(lua_State *L, const kl_json_tape *was, size_t wat,
                       const kl_json_tape *now) {
    if (kl_jt_type(now, 1) != '{')
        luaL_error(L, "returned an array where the object to cache was expected: return obj, "
                      "changed or not, or a table to cache in its place");
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) {
        const char *parent = kept[i][0], *key = kept[i][1];
        size_t an = 0, bn = 0;
        const char *a = member(was, wat, parent, key, &an);
        const char *b = member(now, 1, parent, key, &bn);
        if ((!a && !b) || (a && b && an == bn && memcmp(a, b, an) == 0)) continue;
        lua_pushfstring(L, "%s%s%s", parent ? parent : "", parent ? "." : "", key);
        const char *field = lua_tostring(L, -1);
        const char *why = "the cache keys on kind, apiVersion and metadata's name, namespace, "
                          "resourceVersion and uid: leave them as they are";
        if (!b) luaL_error(L, "removed %s (\"%s\"): %s", field, a, why);
        if (!a) luaL_error(L, "added %s (\"%s\"): %s", field, b, why);
        luaL_error(L, "changed %s from \"%s\" to \"%s\": %s", field, a, b, why);
    }
}

/* The registry's key of klua.get, for kept_as_given. */
static const char GET_KEY = 'g';

/* Pushes klua.get, made the first time. [-0, +1, e] */
static void push_get(lua_State *L) {
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &GET_KEY) == LUA_TFUNCTION) return;
    lua_pop(L, 1);
    lua_newtable(L);
    kl_view_set_functions(L);
    lua_getfield(L, -1, "get");
    lua_remove(L, -2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &GET_KEY);
}

/* Replaces the container on top with its member key read raw, or with nil
 * when it is not a table. [-1, +1] */
static void raw_step(lua_State *L, const char *key) {
    if (lua_type(L, -1) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_pushnil(L);
        return;
    }
    lua_pushstring(L, key);
    lua_rawget(L, -2);
    lua_remove(L, -2);
}

/* Whether the table at idx has the kept members as the view at 1 has them:
 * the same strings, or both absent. It answers from the values at hand
 * where check_kept parses both JSON texts, so it only says yes: a member
 * kept in any other form (a view, a number, a metadata that is not a
 * table) answers 0, and check_kept has the last word. The view's members
 * are read with klua.get, on its tape: through its __index, metadata's
 * four made a view of metadata each, a sixth of the function's time
 * besides the copy. [-0, +0, e] */
static int kept_as_given(lua_State *L, int idx) {
    int top = lua_gettop(L), same = 1;
    for (size_t i = 0; same && i < sizeof kept / sizeof *kept; i++) {
        const char *parent = kept[i][0], *key = kept[i][1];
        push_get(L);
        lua_pushvalue(L, 1);
        if (parent) lua_pushstring(L, parent);
        lua_pushstring(L, key);
        lua_call(L, parent ? 3 : 2, 1); /* stack: ..., was */
        lua_pushvalue(L, idx);
        if (parent) raw_step(L, parent);
        raw_step(L, key); /* stack: ..., was, now */
        int was = lua_type(L, -2), now = lua_type(L, -1);
        same = (was == LUA_TNIL && now == LUA_TNIL) ||
               (was == LUA_TSTRING && now == LUA_TSTRING && lua_rawequal(L, -2, -1));
        lua_settop(L, top);
    }
    return same;
}

/* The task's function: calls the script's with an editable view of the
 * object and checks what it returns; the JSON of a table, or of the view
 * edited, goes into c->out. The call is lua_call, not lua_callk, so that
 * the function cannot wait: the task always ends before kl_task_spawn
 * returns. [-1, +0, e] */
static int run(lua_State *L) {
    call *c = lua_touserdata(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->t->fn_ref); /* stack: call, fn */
    kl_view_push_editable(L, c->o, c->parsed);       /* stack: call, fn, view */
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, c); /* for apply to seal, should the function fail */
    lua_pushvalue(L, -1);
    lua_replace(L, 1);   /* stack: view, fn, view */
    lua_call(L, 1, 1);   /* stack: view, result */
    kl_view_seal(L, 1);
    int given = lua_rawequal(L, 1, 2);
    if (given && !kl_view_edited(L, 1)) return 0;
    size_t n;
    if (!lua_istable(L, 2) && !kl_view_test(L, 2))
        return luaL_error(L, "returned %s where the object to cache was expected: return obj, "
                             "changed or not, or a table to cache in its place",
                          luaL_typename(L, 2));
    const char *text = kl_lua_json_encode_text(L, 2, &n); /* stack: view, result, buffer */
    /* Copied out before anything else runs: the buffer is the next encode's
     * (a finalizer's, in a collection the checks below may cause). apply
     * frees it if they raise. */
    c->out = kl_blob_new(text, n);
    const char *s = c->out->data;
    /* A table that keeps what the cache keys on as it came (the usual
     * klua.copy(obj), changed) needs neither JSON text parsed to say so;
     * but kept_as_given reads the object given as edited, so not after a
     * write to it. The object given, edited, needs its JSON parsed only
     * when a write went to what the cache keys on. */
    if (given ? !kl_view_edits_touch(L, 1, kept, sizeof kept / sizeof *kept)
              : n && s[0] == '{' && lua_istable(L, 2) && !kl_view_edited(L, 1) && kept_as_given(L, 2))
        return 0;
    kl_json_error err;
    kl_json_doc **now = kl_lua_json_push_guard(L);
    if (!(*now = kl_json_parse(s, n, 1, &err))) return luaL_error(L, "its JSON: %s", err.message);
    kl_json_doc **was = kl_lua_json_push_guard(L);
    const kl_json_doc *orig = c->parsed;
    if (!orig) {
        *was = kl_json_parse(c->o->blob->data + c->o->off, c->o->len, 1, &err);
        if (!*was) return luaL_error(L, "the object given is not JSON: %s", err.message);
        orig = *was;
    }
    kl_json_tape wt = kl_json_doc_tape(orig), nt = kl_json_doc_tape(*now);
    check_kept(L, &wt, kl_json_doc_selected(orig), &nt);
    kl_json_free(*was);
    *was = NULL;
    kl_json_free(*now);
    *now = NULL;
    return 0;
}

static void on_done(void *ud, kl_task *t, kl_task_end end) {
    (void)t;
    ((call *)ud)->ok = end == KL_TASK_RETURNED;
}

/* The informer's transform (kl_informer_transform_fn). */
static int apply(void *ud, kl_obj *o, void *parsed) {
    kl_lua_transform *t = ud;
    lua_State *L = kl_rt_lua(t->rt);
    call c = {.t = t, .o = o, .parsed = parsed};
    lua_pushcfunction(L, run);
    lua_pushlightuserdata(L, &c);
    kl_task_spawn(t->rt, NULL, t->name, 1, on_done, &c);
    /* A function that failed left its object taking writes, which a script
     * that kept it could go on making. Neither call allocates. */
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &c) != LUA_TNIL) kl_view_seal(L, -1);
    lua_pop(L, 1);
    lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &c);
    if (!c.ok) {
        kl_blob_unref(c.out);
        /* A signal that came while it ran stopped it (the task logged that):
         * the informer is going away, and will not relist. */
        return kl_loop_signal(kl_rt_loop(t->rt)) ? KL_TRANSFORM_STOPPED : -1;
    }
    if (!c.out) return 0;
    kl_blob_unref(o->blob);
    o->blob = c.out;
    o->off = 0;
    o->len = c.out->len;
    return 1;
}

static void transform_free(void *ud) {
    kl_lua_transform *t = ud;
    luaL_unref(kl_rt_lua(t->rt), LUA_REGISTRYINDEX, t->fn_ref);
    free(t);
}

kl_lua_transform *kl_lua_transform_opt(lua_State *L, int idx, const char *informer) {
    int type = lua_getfield(L, idx, "transform"); /* stack: ..., transform */
    if (type == LUA_TNIL) {
        lua_pop(L, 1);
        return NULL;
    }
    if (type != LUA_TFUNCTION)
        luaL_error(L, "transform must be a function(obj) returning the object to cache, not a %s",
                   luaL_typename(L, -1));
    int fn_ref = luaL_ref(L, LUA_REGISTRYINDEX); /* stack: ...; the one call here that can raise */
    kl_lua_transform *t = kl_xcalloc(1, sizeof *t);
    t->rt = kl_rt_of(L);
    t->fn_ref = fn_ref;
    snprintf(t->name, sizeof t->name, "transform of %s", informer);
    return t;
}

void kl_lua_transform_attach(kl_lua_transform *t, kl_informer *inf) {
    kl_informer_set_transform(inf, apply, transform_free, t);
}
