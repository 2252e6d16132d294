/*
 * testing_reflector.c - `klua_testing.reflector(opts)` and
 * `klua_testing.reflector_transitions()` for the specs.
 *
 * reflector(opts) runs a reflector on a fake environment: a clock that
 * moves only when the spec calls r:advance(seconds), and requests the spec
 * answers itself. Deferred work runs before each method returns, as the
 * loop would run it before waiting again. What the reflector hands its
 * sink is kept as lines ("replace 2 at 17", "ADDED default/a 18") for
 * r:take().
 */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "cache/reflector.h"
#include "lua/lua_informer.h"
#include "base/xalloc.h"
#include "testing.h"

#define REFLECTOR_MT "klua_testing.reflector"
#define MAX_WORK 64
#define MAX_REQS 256

typedef struct work {
    uint64_t id;
    double due; /* timers; deferred work has none */
    kl_loop_fn fn;
    void *arg;
} work;

typedef struct fake_req {
    char *path;
    long timeout_ms;
    kl_http_cb cb;
    void *arg;
    int open, started, aborted, paused;
} fake_req;

typedef struct fake {
    kl_reflector *r;
    double now;
    uint64_t next_id;
    work timers[MAX_WORK], defers[MAX_WORK];
    int ntimers, ndefers;
    fake_req reqs[MAX_REQS];
    int nreqs;
    char *log;
    size_t loglen, logcap;
    char failure[700]; /* the last failure told, or "" */
} fake;

/* ---- the environment ---- */

static double f_now(void *ud) { return ((fake *)ud)->now; }

static uint64_t add_work(fake *f, work *list, int *n, double due, kl_loop_fn fn, void *arg) {
    if (*n == MAX_WORK) abort();
    list[(*n)++] = (work){++f->next_id, due, fn, arg};
    return f->next_id;
}

static uint64_t f_after(void *ud, double delay, kl_loop_fn fn, void *arg) {
    fake *f = ud;
    return add_work(f, f->timers, &f->ntimers, f->now + delay, fn, arg);
}

static uint64_t f_defer(void *ud, kl_loop_fn fn, void *arg) {
    fake *f = ud;
    return add_work(f, f->defers, &f->ndefers, 0, fn, arg);
}

static int drop_work(work *list, int *n, uint64_t id) {
    for (int i = 0; i < *n; i++) {
        if (list[i].id != id) continue;
        memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
        (*n)--;
        return 1;
    }
    return 0;
}

static void f_cancel(void *ud, uint64_t id) {
    fake *f = ud;
    if (!drop_work(f->timers, &f->ntimers, id)) drop_work(f->defers, &f->ndefers, id);
}

static void *f_start(void *ud, const kl_http_opts *o, kl_http_cb cb, void *arg) {
    fake *f = ud;
    if (f->nreqs == MAX_REQS) abort();
    fake_req *q = &f->reqs[f->nreqs++];
    *q = (fake_req){kl_xstrdup(o->path), o->timeout_ms, cb, arg, 1, 0, 0, 0};
    return q;
}

static void f_abort(void *ud, void *req) {
    (void)ud;
    fake_req *q = req;
    q->open = 0;
    q->aborted = 1;
}

static void f_resume(void *ud, void *req) {
    (void)ud;
    ((fake_req *)req)->paused = 0;
}

static void run_deferred(fake *f) {
    while (f->ndefers) {
        work w = f->defers[0];
        drop_work(f->defers, &f->ndefers, w.id);
        w.fn(NULL, w.arg);
    }
}

/* ---- the sink ---- */

static void log_line(fake *f, const char *line) {
    size_t n = strlen(line);
    f->log = kl_buf_grow(f->log, &f->logcap, f->loglen + n + 2, 1, 256);
    memcpy(f->log + f->loglen, line, n);
    f->loglen += n;
    f->log[f->loglen++] = '\n';
    f->log[f->loglen] = '\0';
}

static int sink_replace(void *ud, kl_list *list) {
    char line[256];
    snprintf(line, sizeof line, "replace %zu at %s", list->n, list->rv ? list->rv : "");
    log_line(ud, line);
    return 0;
}

static int sink_event(void *ud, kl_event *ev) {
    static const char *const types[] = {[KL_EV_ADDED] = "ADDED", [KL_EV_MODIFIED] = "MODIFIED",
                                        [KL_EV_DELETED] = "DELETED"};
    char line[512];
    snprintf(line, sizeof line, "%s %s/%s %s", ev->type <= KL_EV_DELETED ? types[ev->type] : "?",
             ev->obj.ns ? ev->obj.ns : "", ev->obj.name ? ev->obj.name : "", ev->obj.rv ? ev->obj.rv : "");
    log_line(ud, line);
    return 0;
}

static void sink_failed(void *ud, const kl_reflector_failure *f) {
    fake *fk = ud;
    snprintf(fk->failure, sizeof fk->failure, "%s %d%s%s: %s", f->request, f->code,
             f->persistent ? " persistent" : "", f->watched ? " watched" : "", f->message);
}

/* ---- methods ---- */

static fake *check_fake(lua_State *L) {
    fake *f = luaL_checkudata(L, 1, REFLECTOR_MT);
    luaL_argcheck(L, f->r != NULL, 1, "reflector already freed");
    return f;
}

static fake_req *check_req(lua_State *L, fake *f, int arg) {
    lua_Integer i = luaL_checkinteger(L, arg);
    luaL_argcheck(L, i >= 1 && i <= f->nreqs, arg, "no such request");
    fake_req *q = &f->reqs[i - 1];
    luaL_argcheck(L, q->open, arg, "that request is no longer open");
    return q;
}

/* r:start() */
static int r_start(lua_State *L) {
    fake *f = check_fake(L);
    kl_reflector_start(f->r);
    run_deferred(f);
    return 0;
}

/* r:advance(seconds): moves the clock, running each timer as it falls due. */
static int r_advance(lua_State *L) {
    fake *f = check_fake(L);
    double until = f->now + luaL_checknumber(L, 2);
    for (;;) {
        int first = -1;
        for (int i = 0; i < f->ntimers; i++)
            if (f->timers[i].due <= until && (first < 0 || f->timers[i].due < f->timers[first].due)) first = i;
        if (first < 0) break;
        work w = f->timers[first];
        drop_work(f->timers, &f->ntimers, w.id);
        if (w.due > f->now) f->now = w.due;
        w.fn(NULL, w.arg);
        run_deferred(f);
    }
    f->now = until;
    return 0;
}

/* r:now() -> the fake clock */
static int r_now(lua_State *L) {
    lua_pushnumber(L, check_fake(L)->now);
    return 1;
}

/* r:next_timer() -> seconds until the earliest timer, or nil */
static int r_next_timer(lua_State *L) {
    fake *f = check_fake(L);
    if (!f->ntimers) return 0;
    double due = f->timers[0].due;
    for (int i = 1; i < f->ntimers; i++)
        if (f->timers[i].due < due) due = f->timers[i].due;
    lua_pushnumber(L, due - f->now);
    return 1;
}

/* r:state() -> "LIST", "WATCH", ... */
static int r_state(lua_State *L) {
    lua_pushstring(L, kl_reflector_state_name(kl_reflector_get_state(check_fake(L)->r)));
    return 1;
}

/* r:rv() -> the reflector's resourceVersion */
static int r_rv(lua_State *L) {
    lua_pushstring(L, kl_reflector_rv(check_fake(L)->r));
    return 1;
}

/* r:request() -> id, path, timeout_ms of the newest open request, or nil */
static int r_request(lua_State *L) {
    fake *f = check_fake(L);
    for (int i = f->nreqs - 1; i >= 0; i--) {
        if (!f->reqs[i].open) continue;
        lua_pushinteger(L, i + 1);
        lua_pushstring(L, f->reqs[i].path);
        lua_pushinteger(L, f->reqs[i].timeout_ms);
        return 3;
    }
    return 0;
}

/* r:requests() -> how many requests were started */
static int r_requests(lua_State *L) {
    lua_pushinteger(L, check_fake(L)->nreqs);
    return 1;
}

/* r:aborted(id) -> whether the reflector cancelled that request */
static int r_aborted(lua_State *L) {
    fake *f = check_fake(L);
    lua_Integer i = luaL_checkinteger(L, 2);
    luaL_argcheck(L, i >= 1 && i <= f->nreqs, 2, "no such request");
    lua_pushboolean(L, f->reqs[i - 1].aborted);
    return 1;
}

static void finish(fake *f, fake_req *q, const kl_http_resp *resp) {
    q->open = 0;
    q->cb.done(q->arg, resp);
    run_deferred(f);
}

/* The response's headers arrived, once, with a Content-Type. */
static void headers(fake_req *q, const char *content_type) {
    if (q->started) return;
    q->started = 1;
    if (q->cb.started) q->cb.started(q->arg, content_type);
}

/* r:feed(id, bytes [, content_type]): a streamed body's bytes (its headers
 * first, once, with content_type, "application/json" unless given). */
static int r_feed(lua_State *L) {
    fake *f = check_fake(L);
    fake_req *q = check_req(L, f, 2);
    size_t n;
    const char *p = luaL_checklstring(L, 3, &n);
    headers(q, luaL_optstring(L, 4, "application/json"));
    size_t took = q->cb.data(q->arg, p, n);
    run_deferred(f);
    if (took == KL_HTTP_PAUSE) {
        q->paused = 1;
        luaL_error(L, "the reflector paused the transfer; these specs do not resume it");
    }
    if (took < n && q->open) {
        kl_http_resp resp = {KL_HTTP_ABANDONED, 200, "abandoned", NULL, 0, -1, NULL, NULL, 0};
        finish(f, q, &resp);
    }
    return 0;
}

static const char *const outcomes[] = {"OK", "Status", "TransportError", "Timeout", "TooLarge",
                                       "ConfigError", "Abandoned", NULL};
static const kl_http_outcome outcome_values[] = {KL_HTTP_OK, KL_HTTP_STATUS, KL_HTTP_TRANSPORT,
                                                 KL_HTTP_TIMEOUT, KL_HTTP_TOO_LARGE, KL_HTTP_CONFIG,
                                                 KL_HTTP_ABANDONED};

/* r:finish(id, {outcome = "OK", status = 200, body = "...", retry_after = s,
 * content_type = "application/json"}) ends a request: a body given to an
 * OK buffered request (a LIST) goes through its data callback first, after
 * its headers; any other body is the buffered answer. */
static int r_finish(lua_State *L) {
    fake *f = check_fake(L);
    fake_req *q = check_req(L, f, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_getfield(L, 3, "outcome");
    int o = luaL_checkoption(L, -1, "OK", outcomes);
    lua_getfield(L, 3, "status");
    long status = (long)luaL_optinteger(L, -1, o == 0 ? 200 : 0);
    lua_getfield(L, 3, "body");
    size_t blen = 0;
    const char *body = luaL_optlstring(L, -1, NULL, &blen);
    lua_getfield(L, 3, "retry_after");
    double retry_after = luaL_optnumber(L, -1, -1);
    lua_getfield(L, 3, "content_type");
    const char *content_type = luaL_optstring(L, -1, "application/json");
    kl_http_resp resp = {outcome_values[o], status, o > 1 ? outcomes[o] : NULL, NULL, 0, retry_after, content_type, NULL, 0};
    if (o == 0) headers(q, content_type);
    if (body && o == 0) {
        if (q->cb.data(q->arg, body, blen) < blen) {
            resp.outcome = KL_HTTP_ABANDONED;
            resp.error = "abandoned";
        }
    } else if (body) {
        resp.body = body;
        resp.body_len = blen;
    }
    finish(f, q, &resp);
    lua_pop(L, 5);
    return 0;
}

/* r:take() -> the sink's lines since the last take */
static int r_take(lua_State *L) {
    fake *f = check_fake(L);
    lua_newtable(L);
    int n = 0;
    for (char *p = f->log, *nl; p && (nl = strchr(p, '\n')); p = nl + 1) {
        lua_pushlstring(L, p, (size_t)(nl - p));
        lua_rawseti(L, -2, ++n);
    }
    free(f->log);
    f->log = NULL;
    f->loglen = f->logcap = 0;
    return 1;
}

/* r:failure() -> the last failure the sink was told of ("watch 403
 * persistent watched: message"), or nil; then forgets it */
static int r_failure(lua_State *L) {
    fake *f = check_fake(L);
    if (f->failure[0]) lua_pushstring(L, f->failure);
    else lua_pushnil(L);
    f->failure[0] = '\0';
    return 1;
}

/* r:refusal() -> kl_reflector_refusal, or nil */
static int r_refusal(lua_State *L) {
    const char *why = kl_reflector_refusal(check_fake(L)->r);
    if (why) lua_pushstring(L, why);
    else lua_pushnil(L);
    return 1;
}

/* r:staleness() -> seconds on the fake clock since its last sign of
 * being current (kl_reflector_last_heard) */
static int r_staleness(lua_State *L) {
    fake *f = check_fake(L);
    lua_pushnumber(L, f->now - kl_reflector_last_heard(f->r));
    return 1;
}

/* r:relist(why) -> whether kl_reflector_relist relisted */
static int r_relist(lua_State *L) {
    fake *f = check_fake(L);
    lua_pushboolean(L, kl_reflector_relist(f->r, luaL_checkstring(L, 2)));
    return 1;
}

/* r:reshard(selector) -> kl_reflector_reshard's answer */
static int r_reshard(lua_State *L) {
    fake *f = check_fake(L);
    lua_pushboolean(L, kl_reflector_reshard(f->r, luaL_checkstring(L, 2)));
    return 1;
}

/* r:stats() -> the reflector's counters */
static int r_stats(lua_State *L) {
    const kl_reflector_stats *s = kl_reflector_get_stats(check_fake(L)->r);
    lua_newtable(L);
#define FIELD(x) (lua_pushinteger(L, (lua_Integer)s->x), lua_setfield(L, -2, #x))
    FIELD(lists);
    FIELD(relists);
    FIELD(watches);
    FIELD(rewatches);
    FIELD(events);
    FIELD(bookmarks);
    FIELD(errors);
    FIELD(backoffs);
    FIELD(idle_restarts);
    FIELD(malformed);
    FIELD(frames);
    FIELD(bytes);
#undef FIELD
    return 1;
}

/* r:history() -> kl_lua_push_history's table, ages as of the fake clock */
static int r_history(lua_State *L) {
    fake *f = check_fake(L);
    kl_reflector_record rec[KL_REFLECTOR_HISTORY];
    size_t n = kl_reflector_history(f->r, rec);
    kl_lua_push_history(L, rec, n, f->now);
    return 1;
}

static void free_fake(fake *f) {
    kl_reflector_free(f->r);
    f->r = NULL;
    for (int i = 0; i < f->nreqs; i++) free(f->reqs[i].path);
    f->nreqs = 0;
    free(f->log);
    f->log = NULL;
}

/* r:free() */
static int r_free(lua_State *L) {
    fake *f = luaL_checkudata(L, 1, REFLECTOR_MT);
    if (f->r) free_fake(f);
    return 0;
}

/* reflector{path=, kind=, watch_list= (true or "auto"), table=, cbor=, page_size=, idle_timeout=,
 * watch_timeout_min=, watch_timeout_max=, watch_list_deadline=} */
static int reflector_new(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "path");
    lua_getfield(L, 1, "kind");
    lua_getfield(L, 1, "watch_list");
    lua_getfield(L, 1, "table");
    int table = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 1, "cbor");
    int cbor = lua_toboolean(L, -1);
    lua_pop(L, 1);
    kl_reflector_opts o = {
        .name = "spec",
        .path = luaL_optstring(L, -3, "/api/v1/configmaps"),
        .kind = luaL_optstring(L, -2, "ConfigMap"),
        .watch_list = lua_type(L, -1) == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "auto") ? KL_WATCH_LIST_AUTO
                      : lua_toboolean(L, -1)                                                 ? KL_WATCH_LIST_ON
                                                                                             : KL_WATCH_LIST_OFF,
        .page_size = (int)kl_testing_opt_number(L, "page_size"),
        .idle_timeout = kl_testing_opt_number(L, "idle_timeout"),
        .watch_timeout_min = kl_testing_opt_number(L, "watch_timeout_min"),
        .watch_timeout_max = kl_testing_opt_number(L, "watch_timeout_max"),
        .watch_list_deadline = kl_testing_opt_number(L, "watch_list_deadline"),
        .table = table,
        .cbor = cbor,
    };
    fake *f = lua_newuserdatauv(L, sizeof *f, 0);
    memset(f, 0, sizeof *f);
    f->now = 1000;
    luaL_setmetatable(L, REFLECTOR_MT);
    kl_reflector_env env = {f, f_now, f_after, f_defer, f_cancel, f_start, f_abort, f_resume};
    f->r = kl_reflector_new_env(&env, &o, (kl_reflector_sink){sink_replace, sink_event, sink_failed, NULL}, f);
    return 1;
}

/* reflector_transitions() -> { {from=, when=, to=, ['then']=}, ... } */
static int reflector_transitions(lua_State *L) {
    size_t n;
    const kl_reflector_transition *t = kl_reflector_transitions(&n);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++)
        kl_testing_add_transition(L, kl_reflector_state_name(t[i].from), "when", t[i].when,
                                  kl_reflector_state_name(t[i].to), t[i].then);
    return 1;
}

void kl_testing_open_reflector(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"start", r_start},       {"advance", r_advance}, {"now", r_now},
        {"next_timer", r_next_timer}, {"state", r_state}, {"rv", r_rv},
        {"request", r_request},   {"requests", r_requests}, {"aborted", r_aborted},
        {"feed", r_feed},         {"finish", r_finish},   {"take", r_take},
        {"stats", r_stats},       {"free", r_free},       {"failure", r_failure},
        {"refusal", r_refusal},   {"history", r_history}, {"staleness", r_staleness},
        {"relist", r_relist},     {"reshard", r_reshard},     {NULL, NULL},
    };
    luaL_newmetatable(L, REFLECTOR_MT);
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, r_free);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    static const luaL_Reg funcs[] = {
        {"reflector", reflector_new}, {"reflector_transitions", reflector_transitions}, {NULL, NULL}};
    luaL_setfuncs(L, funcs, 0);
}
