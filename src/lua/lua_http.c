/* lua_http.c - API requests for scripts, over conn/http.c; see lua_http.h. */
#include "lua/lua_http.h"

#include <lauxlib.h>

#include "lua/task.h"
#include "wire/media.h"

static void on_request_done(void *ud, const kl_http_resp *resp) {
    kl_task *t = ud;
    lua_State *co = kl_task_thread(t);
    /* stack of the task: ..., then core.request's results */
    if (resp->outcome != KL_HTTP_OK && resp->outcome != KL_HTTP_STATUS) {
        lua_pushnil(co);
        lua_pushstring(co, kl_http_outcome_name(resp->outcome));
        if (resp->outcome == KL_HTTP_TOO_LARGE)
            lua_pushfstring(co, "%s: ask for less at a time (api.list's limit option), or raise "
                                "--memory-limit, which bounds one response too",
                            resp->error);
        else
            lua_pushstring(co, resp->error ? resp->error : "request failed");
        kl_task_resume(t, 3);
        return;
    }
    lua_pushinteger(co, resp->status);
    lua_pushlstring(co, resp->body ? resp->body : "", resp->body_len);
    if (resp->retry_after >= 0) lua_pushnumber(co, resp->retry_after);
    else lua_pushnil(co);
    /* klua.api asks for JSON and reads nothing else. */
    const kl_media *m = kl_media_of(resp->content_type);
    if (m && m->decoding == KL_DECODING_JSON) lua_pushnil(co);
    else lua_pushstring(co, resp->content_type ? resp->content_type : "");
    if (resp->nwarnings) {
        lua_createtable(co, (int)resp->nwarnings, 0);
        for (size_t i = 0; i < resp->nwarnings; i++) {
            lua_pushstring(co, resp->warnings[i]);
            lua_rawseti(co, -2, (lua_Integer)i + 1);
        }
    } else {
        lua_pushnil(co);
    }
    kl_task_resume(t, 5);
}

/* core.request's results for a request its task's deadline ended. */
static int push_deadline_exceeded(lua_State *L, const char *why, const char *what) {
    lua_pushnil(L);
    lua_pushliteral(L, "DeadlineExceeded");
    lua_pushfstring(L, "%s: %s", why, what);
    return 3;
}

/* The task's deadline passed while its request was running: the request
 * is aborted (its answer, should one have come, is never read). */
static void cancel_request(kl_task *t, void *ud, uint64_t id) {
    (void)id;
    kl_http_cancel(ud);
    kl_task_resume(t, push_deadline_exceeded(kl_task_thread(t), kl_task_expired(t), "the request was cancelled"));
}

/* core.request(method, path [, body [, content_type [, accept [, send_by]]]])
 * -> status, body, retry_after, not_json, warnings when the server
 * answered (any status; not_json: the answer's Content-Type when it is not
 * JSON, "" when it has none, else nil; warnings: the texts of its Warning headers, or nil), | nil, outcome, message when it did not (outcome:
 * kl_http_outcome_name; "TooLate" when core.now() had reached send_by
 * before it could leave; "DeadlineExceeded" when the task's deadline had
 * passed, or passed meanwhile: the request is cancelled). Yields until the
 * request has ended. */
static int l_request(lua_State *L) {
    kl_task *t = kl_task_check_wait(L, "an API call");
    kl_rt *rt = kl_rt_of(L);
    double timeout = kl_rt_options(rt)->request_timeout;
    size_t blen = 0;
    kl_http_opts o = {
        .method = luaL_checkstring(L, 1),
        .path = luaL_checkstring(L, 2),
        .body = luaL_optlstring(L, 3, NULL, &blen),
        .content_type = luaL_optstring(L, 4, NULL),
        .accept = luaL_optstring(L, 5, NULL),
        .timeout_ms = timeout > 0 ? (long)(timeout * 1000) : 60000,
        /* The body becomes a string of the Lua state, and then its tables:
         * one over the state's limit could never be decoded there. */
        .max_body = kl_rt_options(rt)->memory_limit,
        .send_by = luaL_optnumber(L, 6, 0),
    };
    o.body_len = blen;
    luaL_argcheck(L, o.path[0] == '/', 2, "path must start with '/'");
    const char *why = kl_task_expired(t);
    if (why) return push_deadline_exceeded(L, why, "not sent");
    kl_http_req *req = kl_http_start(kl_rt_http(rt), &o, (kl_http_cb){.done = on_request_done}, t);
    kl_task_suspend(t);
    kl_task_on_cancel(t, cancel_request, req, 0);
    return lua_yield(L, 0);
}

/* core.http_metrics() -> {host =, warnings = n, requests = {{method, code, n}, ...},
 * durations = {{verb, {count =, sum =, buckets = {{le, n}, ...}}}, ...}}:
 * the HTTP layer's client-go request metrics (conn/http.h). */
static int l_http_metrics(lua_State *L) {
    kl_http *h = kl_rt_http(kl_rt_of(L));
    size_t n;
    lua_createtable(L, 0, 4);
    lua_pushstring(L, kl_http_host(h));
    lua_setfield(L, -2, "host");
    lua_pushinteger(L, (lua_Integer)kl_http_warnings_total(h));
    lua_setfield(L, -2, "warnings");
    const kl_http_count *c = kl_http_counts(h, &n);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 3, 0);
        lua_pushstring(L, c[i].method);
        lua_rawseti(L, -2, 1);
        lua_pushstring(L, c[i].code);
        lua_rawseti(L, -2, 2);
        lua_pushinteger(L, (lua_Integer)c[i].n);
        lua_rawseti(L, -2, 3);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "requests");
    const kl_http_latency *l = kl_http_latencies(h, &n);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 2, 0);
        lua_pushstring(L, l[i].verb);
        lua_rawseti(L, -2, 1);
        lua_createtable(L, 0, 3);
        lua_pushinteger(L, (lua_Integer)l[i].n);
        lua_setfield(L, -2, "count");
        lua_pushnumber(L, l[i].sum);
        lua_setfield(L, -2, "sum");
        lua_createtable(L, KL_HTTP_BUCKETS, 0);
        for (int b = 0; b < KL_HTTP_BUCKETS; b++) {
            lua_createtable(L, 2, 0);
            lua_pushnumber(L, kl_http_buckets[b]);
            lua_rawseti(L, -2, 1);
            lua_pushinteger(L, (lua_Integer)l[i].le[b]);
            lua_rawseti(L, -2, 2);
            lua_rawseti(L, -2, b + 1);
        }
        lua_setfield(L, -2, "buckets");
        lua_rawseti(L, -2, 2);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "durations");
    return 1;
}

void kl_lua_http_open(lua_State *L) {
    static const luaL_Reg fns[] = {{"request", l_request}, {"http_metrics", l_http_metrics}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
