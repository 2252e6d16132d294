/*
 * lua_endpoint.c - serves klua.internal.endpoint's and klua.internal.ui's
 * answers over HTTP on the loop.
 *
 * A request is answered synchronously on the loop's thread, between two
 * turns of it: the module's handle runs as a protected call on the main
 * Lua thread, outside any task (it only reads counters, never waits). A
 * loop stuck in a handler answers nothing, which is how /healthz fails.
 */
#include "lua/lua_endpoint.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/loop.h"
#include "conn/serve.h"
#include "base/xalloc.h"

typedef struct endpoint {
    kl_rt *rt;
    const char *module;
    kl_serve *serve;
    uint64_t tick;
    struct endpoint *next;
} endpoint;

/* The runtime's part KL_RT_ENDPOINTS: at most three servers. */
typedef struct endpoints {
    kl_rt *rt;
    endpoint *list;
} endpoints;

/* The content type of a module's answer, as a string of ours: the server
 * sends the reply after the Lua stack that held the module's is gone. */
static const char *content_type(const char *asked) {
    if (!asked) return "text/plain; charset=utf-8";
    if (!strncmp(asked, "text/plain; version", 19)) return "text/plain; version=0.0.4; charset=utf-8";
    if (!strncmp(asked, "text/html", 9)) return "text/html; charset=utf-8";
    if (!strncmp(asked, "application/json", 16)) return "application/json";
    return "text/plain; charset=utf-8";
}

/* require(module).handle(path) -> status, content type, body. */
static void answer(void *ud, const char *path, kl_serve_reply *reply) {
    endpoint *e = ud;
    lua_State *L = kl_rt_lua(e->rt);
    int top = lua_gettop(L);
    lua_getglobal(L, "require");
    lua_pushstring(L, e->module);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK) {
        lua_getfield(L, -1, "handle"); /* stack: ..., module, handle */
        lua_pushstring(L, path);
        if (lua_pcall(L, 1, 3, 0) == LUA_OK) {
            reply->status = (unsigned)luaL_optinteger(L, -3, 500);
            size_t len;
            const char *body = lua_tolstring(L, -1, &len);
            reply->content_type = content_type(lua_isstring(L, -2) ? lua_tostring(L, -2) : NULL);
            if (body) {
                reply->body = kl_xmalloc(len ? len : 1);
                memcpy(reply->body, body, len);
                reply->len = len;
            }
            lua_settop(L, top);
            return;
        }
    }
    kl_log(KL_LOG_ERROR, "endpoint", "%s failed: %s", path, lua_tostring(L, -1));
    lua_settop(L, top);
    static const char failed[] = "klua could not answer this request: see its log\n";
    reply->status = 500;
    reply->body = kl_xstrdup(failed);
    reply->len = sizeof failed - 1;
}

static void on_ready(kl_loop *loop, void *ud) {
    (void)loop;
    kl_serve_run(((endpoint *)ud)->serve, kl_now());
}

/* Connections past their deadlines are ended when the server runs: once a
 * second is enough for deadlines of seconds. */
static void on_tick(kl_loop *loop, void *ud) {
    endpoint *e = ud;
    kl_serve_run(e->serve, kl_now());
    e->tick = kl_loop_after(loop, 1.0, on_tick, e);
}

int kl_lua_endpoint_open(kl_rt *rt, kl_endpoint_kind kind, const char *addr, char *err, size_t errlen) {
    static const char *const modules[] = {[KL_ENDPOINT_PROBES] = "klua.internal.endpoint",
                                          [KL_ENDPOINT_UI] = "klua.internal.ui"};
    static const char *const paths[] = {[KL_ENDPOINT_PROBES] = "/metrics, /healthz and /readyz",
                                        [KL_ENDPOINT_UI] = "the live page /ui/ and /ui/state"};
    char local[300];
    if (kind == KL_ENDPOINT_UI && addr[0] == ':') {
        snprintf(local, sizeof local, "127.0.0.1%s", addr);
        addr = local;
    }
    endpoints *all = kl_rt_state(rt, KL_RT_ENDPOINTS);
    endpoint *e = kl_xcalloc(1, sizeof *e);
    e->rt = rt;
    e->module = modules[kind];
    e->serve = kl_serve_start(addr, answer, e, err, errlen);
    if (!e->serve) {
        free(e);
        return -1;
    }
    if (kl_loop_watch(kl_rt_loop(rt), kl_serve_fd(e->serve), on_ready, e) < 0) {
        snprintf(err, errlen, "%s: too many endpoints", addr);
        kl_serve_free(e->serve);
        free(e);
        return -1;
    }
    e->tick = kl_loop_after(kl_rt_loop(rt), 1.0, on_tick, e);
    e->next = all->list;
    all->list = e;
    kl_log(KL_LOG_INFO, "endpoint", "serving %s on %s (port %u)", paths[kind], addr, kl_serve_port(e->serve));
    return 0;
}

/* Stops every server: they call into Lua, so they go first. */
static void endpoints_close(void *state) {
    endpoints *all = state;
    kl_loop *loop = kl_rt_loop(all->rt);
    while (all->list) {
        endpoint *e = all->list;
        all->list = e->next;
        kl_loop_unwatch(loop, kl_serve_fd(e->serve));
        kl_loop_cancel(loop, e->tick);
        kl_serve_free(e->serve);
        free(e);
    }
}

void kl_lua_endpoint_init(kl_rt *rt) {
    static const kl_rt_hooks hooks = {.close = endpoints_close, .free = free};
    endpoints *all = kl_xcalloc(1, sizeof *all);
    all->rt = rt;
    kl_rt_register(rt, KL_RT_ENDPOINTS, &hooks, all);
}
