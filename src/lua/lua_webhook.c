/*
 * lua_webhook.c - serves klua.internal.webhook over HTTPS on the loop.
 *
 * Each POST runs `require('klua.internal.webhook').serve(id, path, review,
 * deadline)` as a task of its own, so a webhook has the instruction budget
 * and the memory cap of any handler and may wait (an API call) without
 * holding the loop; the task answers through core.webhook_reply. Whatever
 * the task does, the call is answered by its deadline: a timer asks the
 * module to answer for it (expired), and a task that ends without having
 * answered (stopped by the budget, out of memory) is answered for too
 * (failed). The first answer of a call wins; later ones find it gone.
 *
 * The certificate pair is read again when tls.crt or tls.key changes (its
 * device, inode, size or modification time: a kubelet updates a mounted
 * Secret by swapping a symbolic link, so the files are new ones), looked
 * at once a second; a pair that does not load is logged
 * once and the old one served on (conn/serve.c says how the swap keeps
 * the open connections).
 */
#include "lua/lua_webhook.h"

#include <errno.h>
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/blob.h"
#include "base/log.h"
#include "base/loop.h"
#include "base/xalloc.h"
#include "conn/serve.h"
#include "lua/task.h"
#include "lua/view.h"
#include "wire/obj.h"

/* kube-apiserver's bodies are bounded by its own 3 MiB request limit
 * (apiserver's DefaultMaxRequestSizeBytes) plus the review's envelope:
 * an update carries the object twice. */
#define BODY_MAX (8u << 20)
/* The API server's default timeoutSeconds (admissionregistration/v1), for
 * a call without a timeout parameter. */
#define DEFAULT_TIMEOUT 10.0
#define MAX_TIMEOUT 30.0
#define MODULE "klua.internal.webhook"

typedef struct webhooks webhooks;

/* A call being answered: its task, and the timer of its deadline. */
typedef struct call {
    webhooks *w;
    uint64_t id;
    uint64_t timer;
    struct call *prev, *next;
} call;

/* What identifies a file's content without reading it. */
typedef struct stamp {
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} stamp;

/* The runtime's part KL_RT_WEBHOOKS. */
struct webhooks {
    kl_rt *rt;
    kl_serve *serve;
    char *cert_dir;
    stamp loaded[2]; /* tls.crt, tls.key as served */
    stamp tried[2];  /* as last refused, so that it is logged once */
    uint64_t tick;
    uint64_t again; /* the run libmicrohttpd asked for sooner than the tick */
    call *calls;
};

static const char *const files[2] = {"tls.crt", "tls.key"};

int kl_lua_webhook_parse_duration(const char *s, double *seconds) {
    static const struct {
        const char *unit;
        double secs;
    } units[] = {{"ns", 1e-9}, {"us", 1e-6}, {"\xc2\xb5s", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}};
    double total = 0;
    if (!s || !*s) return -1;
    while (*s) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || end == s || v < 0 || *s == '+' || *s == '-') return -1;
        size_t best = 0, k = 0;
        for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
            size_t n = strlen(units[i].unit);
            if (!strncmp(end, units[i].unit, n) && n > best) best = n, k = i;
        }
        if (!best) return -1;
        total += v * units[k].secs;
        s = end + best;
    }
    *seconds = total;
    return 0;
}

static int stamp_of(const char *dir, const char *file, stamp *st) {
    char path[1024];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (stat(path, &sb) < 0) return -1;
    *st = (stamp){sb.st_dev, sb.st_ino, sb.st_size, sb.st_mtim};
    return 0;
}

static int stamp_eq(const stamp *a, const stamp *b) {
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* Reads dir/file whole into *out (NUL-terminated, to free) with the
 * stamp of the file read (a rename between a stat and the open would
 * pair the new content with the old stamp), or returns -1 with the reason
 * in err. */
static int read_file(const char *dir, const char *file, char **out, stamp *st, char *err, size_t errlen) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) < 0) {
        snprintf(err, errlen, "cannot read %.400s: %s", path, strerror(errno));
        if (f) fclose(f);
        return -1;
    }
    *st = (stamp){sb.st_dev, sb.st_ino, sb.st_size, sb.st_mtim};
    size_t cap = 8192, len = 0;
    char *buf = kl_xmalloc(cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len - 1 == 0) buf = kl_xrealloc(buf, cap *= 2);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad || len == 0) {
        snprintf(err, errlen, "cannot read %.400s: %s", path, bad ? strerror(errno) : "it is empty");
        free(buf);
        return -1;
    }
    buf[len] = '\0';
    *out = buf;
    return 0;
}

/* The pair of w's directory with the stamps it was read at. */
static int read_pair(webhooks *w, char *pem[2], stamp st[2], char *err, size_t errlen) {
    pem[0] = pem[1] = NULL;
    for (int i = 0; i < 2; i++) {
        if (read_file(w->cert_dir, files[i], &pem[i], &st[i], err, errlen) == 0) continue;
        free(pem[0]);
        free(pem[1]);
        return -1;
    }
    return 0;
}

/* Whether the files' stamps are still st: a pair read while it was being
 * replaced (a kubelet's ..data swap between reading tls.crt and tls.key)
 * is read again at the next tick rather than refused. */
static int unchanged(const webhooks *w, const stamp st[2]) {
    stamp now[2];
    return stamp_of(w->cert_dir, files[0], &now[0]) == 0 && stamp_of(w->cert_dir, files[1], &now[1]) == 0 &&
           stamp_eq(&now[0], &st[0]) && stamp_eq(&now[1], &st[1]);
}

/* Serves the files' pair if they changed since it was loaded. */
static void reload(webhooks *w) {
    stamp now[2];
    if (stamp_of(w->cert_dir, files[0], &now[0]) < 0 || stamp_of(w->cert_dir, files[1], &now[1]) < 0) return;
    if (stamp_eq(&now[0], &w->loaded[0]) && stamp_eq(&now[1], &w->loaded[1])) return;
    if (stamp_eq(&now[0], &w->tried[0]) && stamp_eq(&now[1], &w->tried[1])) return;
    char *pem[2], err[512] = "";
    if (read_pair(w, pem, now, err, sizeof err) == 0) {
        if (kl_serve_set_certificate(w->serve, pem[0], pem[1], err, sizeof err) == 0) {
            memcpy(w->loaded, now, sizeof now);
            kl_log(KL_LOG_INFO, "webhook", "serving the new certificate of %s", w->cert_dir);
        }
        free(pem[0]);
        free(pem[1]);
    }
    if (err[0] && unchanged(w, now)) {
        memcpy(w->tried, now, sizeof now);
        kl_log(KL_LOG_ERROR, "webhook", "%s: %s; the certificate served so far is kept", w->cert_dir, err);
    }
}

/* Calls require(MODULE)[fn](id, why) on the main thread, outside any task:
 * the module's answer for a call its task could not give. */
static void answer_for(webhooks *w, const char *fn, uint64_t id, const char *why) {
    lua_State *L = kl_rt_lua(w->rt);
    int top = lua_gettop(L);
    lua_getglobal(L, "require");
    lua_pushliteral(L, MODULE);
    if (lua_pcall(L, 1, 1, 0) == LUA_OK) {
        lua_getfield(L, -1, fn);
        lua_pushinteger(L, (lua_Integer)id);
        lua_pushstring(L, why);
        if (lua_pcall(L, 2, 0, 0) == LUA_OK) {
            lua_settop(L, top);
            return;
        }
    }
    kl_log(KL_LOG_ERROR, "webhook", "cannot answer a webhook call: %s", lua_tostring(L, -1));
    lua_settop(L, top);
}

static void reply_text(webhooks *w, uint64_t id, unsigned status, const char *text);

static void call_free(call *c) {
    webhooks *w = c->w;
    if (c->prev) c->prev->next = c->next;
    else w->calls = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->timer) kl_loop_cancel(kl_rt_loop(w->rt), c->timer);
    free(c);
}

static void on_deadline(kl_loop *loop, void *ud) {
    (void)loop;
    call *c = ud;
    c->timer = 0;
    answer_for(c->w, "expired", c->id, "its deadline passed");
    /* Whatever the module could do (out of memory, say), the call is
     * answered by its deadline: this finds it answered, or answers it. */
    reply_text(c->w, c->id, 500, "klua: the call was not answered in time\n");
}

static void on_done(void *ud, kl_task *t, kl_task_end end) {
    (void)t;
    call *c = ud;
    if (!kl_rt_closing(c->w->rt) && end != KL_TASK_RETURNED)
        answer_for(c->w, "failed", c->id,
                   end == KL_TASK_OVER_BUDGET ? "it ran past --instruction-budget"
                   : end == KL_TASK_STOPPED   ? "klua is stopping"
                                              : "it failed (see klua's log)");
    call_free(c);
}

static void on_again(kl_loop *loop, void *ud);

/* Answers call id. libmicrohttpd sends the answer of a suspended
 * connection on its next run, which nothing would bring before the tick,
 * up to a second later: past the API server's timeout for a call answered
 * at its deadline. So the server runs again as soon as the loop turns. */
static int answer_call(webhooks *w, uint64_t id, kl_serve_reply *r) {
    if (kl_serve_answer(w->serve, id, r) < 0) return -1;
    kl_loop *loop = kl_rt_loop(w->rt);
    if (w->again) kl_loop_cancel(loop, w->again);
    w->again = kl_loop_after(loop, 0, on_again, w);
    return 0;
}

static void reply_text(webhooks *w, uint64_t id, unsigned status, const char *text) {
    kl_serve_reply r = {status, "text/plain; charset=utf-8", kl_xstrdup(text), strlen(text)};
    answer_call(w, id, &r);
}

/* A POST (kl_serve_post_fn): the review as a view, to the module's serve. */
static void on_post(void *ud, uint64_t id, const char *path, const char *timeout, const char *body, size_t len) {
    webhooks *w = ud;
    if (kl_rt_ended(w->rt)) {
        reply_text(w, id, 503, "klua is stopping\n");
        return;
    }
    double secs;
    if (kl_lua_webhook_parse_duration(timeout, &secs) < 0 || secs <= 0) secs = DEFAULT_TIMEOUT;
    if (secs > MAX_TIMEOUT) secs = MAX_TIMEOUT;
    /* Answered before the API server gives up: a tenth of the time, at
     * least 0.2 s and at most 1 s, for the answer to travel. */
    double margin = secs / 10 < 0.2 ? 0.2 : secs / 10 > 1 ? 1 : secs / 10;
    double deadline = secs - margin;
    lua_State *L = kl_rt_lua(w->rt);
    int top = lua_gettop(L);
    lua_getglobal(L, "require");
    lua_pushliteral(L, MODULE);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        kl_log(KL_LOG_ERROR, "webhook", "%s", lua_tostring(L, -1));
        lua_settop(L, top);
        reply_text(w, id, 500, "klua could not answer this request: see its log\n");
        return;
    }
    lua_getfield(L, -1, "serve");
    lua_remove(L, -2);
    lua_pushinteger(L, (lua_Integer)id);
    lua_pushstring(L, path);
    kl_obj o = {.blob = kl_blob_new(body, len), .off = 0, .len = len};
    kl_obj_set_identity(&o, NULL, 0, NULL, 0, NULL, 0);
    kl_view_push(L, &o, NULL);
    kl_obj_clear(&o);
    lua_pushnumber(L, deadline);
    call *c = kl_xcalloc(1, sizeof *c);
    *c = (call){.w = w, .id = id, .next = w->calls};
    if (w->calls) w->calls->prev = c;
    w->calls = c;
    c->timer = kl_loop_after(kl_rt_loop(w->rt), deadline, on_deadline, c);
    char name[200];
    snprintf(name, sizeof name, "webhook %.180s", path);
    kl_task_spawn(w->rt, NULL, name, 4, on_done, c);
}

/* A GET: the paths are the script's, and only POST is theirs. */
static void on_get(void *ud, const char *path, kl_serve_reply *reply) {
    (void)ud;
    (void)path;
    static const char text[] = "klua's webhooks answer POSTs of AdmissionReview and ConversionReview\n";
    reply->status = 405;
    reply->body = kl_xstrdup(text);
    reply->len = sizeof text - 1;
}

static void serve(webhooks *w);

static void on_again(kl_loop *loop, void *ud) {
    (void)loop;
    webhooks *w = ud;
    w->again = 0;
    serve(w);
}

/* Runs the server, and again as soon as libmicrohttpd asks: its sockets
 * are edge-triggered, and a body bigger than a connection's buffer is
 * read a buffer at a time, each after the last one was handed over,
 * without the socket becoming readable anew. */
static void serve(webhooks *w) {
    kl_serve_run(w->serve, kl_now());
    long ms = kl_serve_timeout_ms(w->serve);
    if (ms >= 0 && ms < 1000 && !w->again) w->again = kl_loop_after(kl_rt_loop(w->rt), (double)ms / 1000, on_again, w);
}

static void on_ready(kl_loop *loop, void *ud) {
    (void)loop;
    serve(ud);
}

static void on_tick(kl_loop *loop, void *ud) {
    webhooks *w = ud;
    reload(w);
    serve(w);
    w->tick = kl_loop_after(loop, 1.0, on_tick, w);
}

int kl_lua_webhook_open(kl_rt *rt, const char *addr, const char *cert_dir, char *err, size_t errlen) {
    webhooks *w = kl_rt_state(rt, KL_RT_WEBHOOKS);
    w->cert_dir = kl_xstrdup(cert_dir ? cert_dir : KL_WEBHOOK_CERT_DIR);
    char *pem[2], why[512] = "";
    if (read_pair(w, pem, w->loaded, why, sizeof why) < 0) {
        snprintf(err, errlen, "%s (--webhook-cert-dir names the directory of tls.crt and tls.key; docs/webhooks.md)",
                 why);
        return -1;
    }
    kl_serve_opts o = {.cert_pem = pem[0], .key_pem = pem[1], .post = on_post, .body_max = BODY_MAX};
    w->serve = kl_serve_start_with(addr, &o, on_get, w, err, errlen);
    free(pem[0]);
    free(pem[1]);
    if (!w->serve) return -1;
    if (kl_loop_watch(kl_rt_loop(rt), kl_serve_fd(w->serve), on_ready, w) < 0) {
        snprintf(err, errlen, "%s: too many servers", addr);
        kl_serve_free(w->serve);
        w->serve = NULL;
        return -1;
    }
    w->tick = kl_loop_after(kl_rt_loop(rt), 1.0, on_tick, w);
    kl_log(KL_LOG_INFO, "webhook", "serving webhooks over HTTPS on %s (port %u), the certificate of %s", addr,
           kl_serve_port(w->serve), w->cert_dir);
    return 0;
}

/* core.webhook_reply(id, status, body [, content_type]): answers call id;
 * false when it was answered already or its client is gone. */
static int l_reply(lua_State *L) {
    webhooks *w = kl_rt_state(kl_rt_of(L), KL_RT_WEBHOOKS);
    lua_Integer id = luaL_checkinteger(L, 1);
    lua_Integer status = luaL_checkinteger(L, 2);
    size_t len;
    const char *body = luaL_checklstring(L, 3, &len);
    const char *type = luaL_optstring(L, 4, "application/json");
    if (!w->serve) {
        lua_pushboolean(L, 0);
        return 1;
    }
    kl_serve_reply r = {(unsigned)status, strncmp(type, "text/", 5) ? "application/json" : "text/plain; charset=utf-8",
                        kl_xmalloc(len ? len : 1), len};
    memcpy(r.body, body, len);
    lua_pushboolean(L, answer_call(w, (uint64_t)id, &r) == 0);
    return 1;
}

/* core.webhook_serving(): whether --webhook-bind-address serves webhooks. */
static int l_serving(lua_State *L) {
    webhooks *w = kl_rt_state(kl_rt_of(L), KL_RT_WEBHOOKS);
    lua_pushboolean(L, w->serve != NULL);
    return 1;
}

static void webhooks_open(void *state, lua_State *L) {
    (void)state;
    static const luaL_Reg fns[] = {{"webhook_reply", l_reply}, {"webhook_serving", l_serving}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}

/* The server keeps the run going: the API server may call at any time. */
static int webhooks_idle(void *state) { return ((webhooks *)state)->serve == NULL; }

/* Stops the server (it calls into Lua); the calls whose tasks still wait
 * are freed with the part, since their tasks may yet end before the
 * tasks' own teardown. */
static void webhooks_close(void *state) {
    webhooks *w = state;
    if (!w->serve) return;
    kl_loop *loop = kl_rt_loop(w->rt);
    kl_loop_unwatch(loop, kl_serve_fd(w->serve));
    kl_loop_cancel(loop, w->tick);
    if (w->again) kl_loop_cancel(loop, w->again);
    for (call *c = w->calls; c; c = c->next) {
        kl_loop_cancel(loop, c->timer);
        c->timer = 0;
    }
    kl_serve_free(w->serve);
    w->serve = NULL;
}

static void webhooks_free(void *state) {
    webhooks *w = state;
    while (w->calls) call_free(w->calls);
    free(w->cert_dir);
    free(w);
}

void kl_lua_webhook_init(kl_rt *rt) {
    static const kl_rt_hooks hooks = {
        .open = webhooks_open, .idle = webhooks_idle, .close = webhooks_close, .free = webhooks_free};
    webhooks *w = kl_xcalloc(1, sizeof *w);
    w->rt = rt;
    kl_rt_register(rt, KL_RT_WEBHOOKS, &hooks, w);
}
