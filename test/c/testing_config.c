/*
 * testing_config.c - `klua_testing.load_config{...}` for the specs.
 *
 *   conn, err = testing.load_config{kubeconfig=, context=, server=, token=,
 *       insecure=, allow_insecure_credentials=, as=, as_uid=, as_groups=,
 *       disable_compression=, env=, exec_timeout_ms=}
 *
 * resolves a connection. With `env` (a table), environment lookups see only
 * that table, so a spec controls HOME, KUBECONFIG and the in-cluster
 * variables without touching the real environment. The result reads like a
 * table of what the connection uses - conn.server, .namespace, .context,
 * .source, .auth, .ca, .client_cert, .insecure, .tls_server_name, .proxy,
 * .as, .disable_compression (only when set) - never a secret, and has methods:
 *   conn:describe()          those fields as a plain table
 *   conn:prepare()           the header lines kl_conn_prepare adds, or nil, err
 *   conn:request(url)        prepares a handle and performs a blocking GET:
 *                            {status=, body=}, or nil, err
 *   conn:unauthorized()      kl_conn_unauthorized as a boolean
 *   conn:advance_clock(s)    kl_conn_advance_clock
 * prepare and request run an event loop of their own while an exec plugin
 * fetches the credential. The spec module shows real header values: the
 * specs' tokens are fake.
 *
 *   texts = testing.parse_warnings(value)  kl_http_parse_warnings on one
 *                                          Warning header's value
 */
#include <curl/curl.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/loop.h"
#include "conn/conn.h"
#include "conn/http.h"
#include "testing.h"

#define CONN_MT "klua_testing.conn"

typedef struct {
    kl_conn *c;
} test_conn;

static kl_conn *check_conn(lua_State *L) {
    test_conn *t = luaL_checkudata(L, 1, CONN_MT);
    if (!t->c) luaL_error(L, "connection already freed");
    return t->c;
}

/* Looks name up in the env table at ud's stack index. The string stays
 * alive in that table for the whole load. */
typedef struct {
    lua_State *L;
    int env;
} env_lookup;

static const char *lookup_env(void *ud, const char *name) {
    env_lookup *e = ud;
    lua_getfield(e->L, e->env, name);
    const char *v = lua_type(e->L, -1) == LUA_TSTRING ? lua_tostring(e->L, -1) : NULL;
    lua_pop(e->L, 1);
    return v;
}

static const char *opt_string(lua_State *L, const char *key) {
    lua_getfield(L, 1, key);
    const char *s = lua_tostring(L, -1); /* kept alive by the options table */
    lua_pop(L, 1);
    return s;
}

static int opt_bool(lua_State *L, const char *key) {
    lua_getfield(L, 1, key);
    int b = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return b;
}

/* Pushes the description table of c. */
static void push_description(lua_State *L, const kl_conn *c) {
    kl_conn_info info;
    kl_conn_describe(c, &info);
    lua_createtable(L, 0, 10);
    kl_testing_set_string(L, "server", kl_conn_server(c));
    kl_testing_set_string(L, "namespace", kl_conn_namespace(c));
    kl_testing_set_string(L, "context", kl_conn_context(c));
    kl_testing_set_string(L, "source", info.source);
    kl_testing_set_string(L, "auth", info.auth);
    kl_testing_set_string(L, "ca", info.ca);
    kl_testing_set_string(L, "client_cert", info.client_cert);
    kl_testing_set_string(L, "tls_server_name", info.tls_server_name);
    kl_testing_set_string(L, "proxy", info.proxy);
    kl_testing_set_string(L, "as", info.as);
    if (!kl_conn_compression(c)) {
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "disable_compression");
    }
    lua_pushboolean(L, info.insecure);
    lua_setfield(L, -2, "insecure");
}

static int t_load(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    kl_conn_opts o = {
        .kubeconfig = opt_string(L, "kubeconfig"),
        .context = opt_string(L, "context"),
        .server = opt_string(L, "server"),
        .token = opt_string(L, "token"),
        .insecure_skip_tls_verify = opt_bool(L, "insecure"),
        .allow_insecure_credentials = opt_bool(L, "allow_insecure_credentials"),
        .as = opt_string(L, "as"),
        .as_uid = opt_string(L, "as_uid"),
        .disable_compression = opt_bool(L, "disable_compression"),
    };
    /* as_groups = {...}: kept alive by the options table. */
    const char *groups[8];
    lua_getfield(L, 1, "as_groups");
    if (!lua_isnil(L, -1)) {
        luaL_checktype(L, -1, LUA_TTABLE);
        lua_Integer n = luaL_len(L, -1);
        luaL_argcheck(L, n <= 8, 1, "at most 8 as_groups");
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            groups[i - 1] = luaL_checkstring(L, -1);
            lua_pop(L, 1);
        }
        o.as_groups = groups;
        o.n_as_groups = (size_t)n;
    }
    lua_pop(L, 1);
    lua_getfield(L, 1, "exec_timeout_ms");
    kl_conn_hooks hooks = {.exec_timeout_ms = (int)luaL_optinteger(L, -1, 0)};
    lua_getfield(L, 1, "env");
    env_lookup lookup = {L, lua_gettop(L)};
    if (!lua_isnil(L, -1)) {
        luaL_checktype(L, -1, LUA_TTABLE);
        hooks.getenv = lookup_env;
        hooks.ud = &lookup;
    }
    test_conn *t = lua_newuserdatauv(L, sizeof *t, 1);
    t->c = NULL;
    luaL_setmetatable(L, CONN_MT);
    char err[1024];
    if (!(t->c = kl_conn_load_with(&o, &hooks, err, sizeof err))) {
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    push_description(L, t->c);
    lua_setiuservalue(L, -2, 1);
    return 1;
}

/* __index: a method, else a field of the description. */
static int t_index(lua_State *L) {
    luaL_checkudata(L, 1, CONN_MT);
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
    lua_getiuservalue(L, 1, 1);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

static int t_describe(lua_State *L) {
    push_description(L, check_conn(L));
    return 1;
}

/* A request of the spec's, waiting for the credential on a loop of its own. */
typedef struct {
    kl_conn_waiter w; /* first: the callback gets this */
    kl_loop *loop;
    int woken;
    char err[1024]; /* why the credential did not come, or "" */
} spec_wait;

static void spec_ready(kl_conn_waiter *w, const char *err) {
    spec_wait *s = (spec_wait *)w;
    s->woken = 1;
    snprintf(s->err, sizeof s->err, "%s", err ? err : "");
    kl_loop_stop(s->loop);
}

static void no_transfers(kl_loop *loop, CURL *easy, CURLcode result) {
    (void)loop, (void)easy, (void)result;
}

/* kl_conn_prepare, running a loop until a credential it waits for came. */
static int prepare(kl_conn *c, CURL *e, struct curl_slist **headers, char *err, size_t errlen) {
    spec_wait s = {.w = {.ready = spec_ready}, .loop = kl_loop_new(no_transfers)};
    if (!s.loop) {
        snprintf(err, errlen, "kl_loop_new failed");
        return -1;
    }
    kl_conn_attach(c, s.loop);
    int rc = kl_conn_prepare(c, e, headers, &s.w, err, errlen);
    if (rc == KL_CONN_PENDING) {
        kl_loop_run(s.loop);
        if (!s.woken) kl_conn_forget(c, &s.w);
        const char *failed = !s.woken ? "interrupted by a signal" : *s.err ? s.err : NULL;
        if (failed) snprintf(err, errlen, "%s", failed);
        rc = failed ? -1 : kl_conn_prepare(c, e, headers, &s.w, err, errlen);
    }
    kl_conn_detach(c);
    kl_loop_free(s.loop);
    return rc;
}

static int t_prepare(lua_State *L) {
    kl_conn *c = check_conn(L);
    CURL *e = curl_easy_init();
    if (!e) return luaL_error(L, "curl_easy_init failed");
    struct curl_slist *headers = NULL;
    char err[1024];
    int rc = prepare(c, e, &headers, err, sizeof err);
    curl_easy_cleanup(e);
    if (rc < 0) {
        curl_slist_free_all(headers);
        lua_pushnil(L);
        lua_pushstring(L, err);
        return 2;
    }
    lua_newtable(L);
    lua_Integer i = 0;
    for (struct curl_slist *h = headers; h; h = h->next) {
        lua_pushstring(L, h->data);
        lua_rawseti(L, -2, ++i);
    }
    curl_slist_free_all(headers);
    return 1;
}

typedef struct {
    char *data;
    size_t len, cap;
} body_buf;

static size_t on_body(char *ptr, size_t size, size_t n, void *ud) {
    body_buf *b = ud;
    char *grown = kl_buf_try_grow(b->data, &b->cap, b->len + size * n + 1, 1, 4096);
    if (!grown) return 0;
    memcpy(grown + b->len, ptr, size * n);
    b->data = grown;
    b->len += size * n;
    return size * n;
}

static void perform(lua_State *L, CURL *e, const char *url, struct curl_slist *headers) {
    body_buf body = {NULL, 0, 0};
    char detail[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, detail);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 20000L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(e);
    if (rc != CURLE_OK) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: %s", curl_easy_strerror(rc), detail);
    } else {
        long status = 0;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        lua_createtable(L, 0, 2);
        lua_pushinteger(L, status);
        lua_setfield(L, -2, "status");
        lua_pushlstring(L, body.data ? body.data : "", body.len);
        lua_setfield(L, -2, "body");
        lua_pushnil(L);
    }
    free(body.data);
}

static int t_request(lua_State *L) {
    kl_conn *c = check_conn(L);
    const char *url = luaL_checkstring(L, 2);
    CURL *e = curl_easy_init();
    if (!e) return luaL_error(L, "curl_easy_init failed");
    struct curl_slist *headers = NULL;
    char err[1024];
    if (prepare(c, e, &headers, err, sizeof err) < 0) {
        lua_pushnil(L);
        lua_pushstring(L, err);
    } else {
        perform(L, e, url, headers);
    }
    curl_easy_cleanup(e);
    curl_slist_free_all(headers);
    return 2;
}

static int t_unauthorized(lua_State *L) {
    lua_pushboolean(L, kl_conn_unauthorized(check_conn(L)));
    return 1;
}

static int t_advance_clock(lua_State *L) {
    kl_conn_advance_clock(check_conn(L), (long)luaL_checkinteger(L, 2));
    return 0;
}

static int t_gc(lua_State *L) {
    test_conn *t = luaL_checkudata(L, 1, CONN_MT);
    kl_conn_free(t->c);
    t->c = NULL;
    return 0;
}

static void push_warning(void *ud, const char *text) {
    lua_State *L = ud;
    lua_pushstring(L, text);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
}

static int t_parse_warnings(lua_State *L) {
    size_t len;
    const char *v = luaL_checklstring(L, 1, &len);
    lua_newtable(L);
    kl_http_parse_warnings(v, len, push_warning, L);
    return 1;
}

void kl_testing_open_config(lua_State *L) {
    static const luaL_Reg methods[] = {{"describe", t_describe},
                                       {"prepare", t_prepare},
                                       {"request", t_request},
                                       {"unauthorized", t_unauthorized},
                                       {"advance_clock", t_advance_clock},
                                       {NULL, NULL}};
    if (luaL_newmetatable(L, CONN_MT)) {
        luaL_newlib(L, methods);
        lua_pushcclosure(L, t_index, 1);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, t_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    static const luaL_Reg funcs[] = {{"load_config", t_load}, {"parse_warnings", t_parse_warnings}, {NULL, NULL}};
    luaL_setfuncs(L, funcs, 0);
}
