/* reflector.c - ListWatch as client-go's Reflector does it; see reflector.h. */
#include "cache/reflector.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/framer.h"
#include "wire/list_stream.h"
#include "base/log.h"
#include "base/xalloc.h"

#define FRAMES_HIGH 512 /* queued frames at which the socket is paused */
#define FRAMES_LOW 128  /* ...and resumed */
#define PUMP_BATCH 256  /* frames per loop iteration, so sockets stay served */
#define BACKOFF_BASE 0.8
#define BACKOFF_CAP 30.0
#define BACKOFF_RESET 120.0
#define WATCH_GRACE 5L /* seconds past timeoutSeconds before klua ends a watch */

typedef enum { IDLE, LISTING, WATCHING, WAITING } phase;

/* What to do once a watch has ended and its queued frames are delivered. */
typedef enum {
    END_REWATCH, /* clean end or idle restart: watch again at once */
    END_BACKOFF, /* an error: wait, then watch again */
    END_RETRY,   /* the server asked to wait (Retry-After) */
    END_RELIST,  /* 410: LIST(rv), at once if the watch made progress */
    END_CORRUPT, /* bytes that cannot be read: wait, then LIST(rv) */
    END_GONE,    /* 404: the resource is not served (a CRD deleted): wait, LIST("") */
    END_FALLBACK /* WatchList gave no initial-events-end in time: LIST */
} end_action;

struct kl_reflector {
    kl_loop *loop;
    kl_http *http;
    kl_reflector_opts o; /* its strings point into owned */
    struct {
        char *name, *path, *kind, *label_selector, *field_selector;
    } owned;
    kl_reflector_sink sink;
    void *ud;
    kl_reflector_stats stats;
    phase phase;
    char *rv;
    int rv_unavailable; /* the last rv got 410 on LIST, or the resource was
                         * not served (404): list from "" */
    int paginated;      /* the first LIST, at "0", came in pages: the server pages
                         * (no watch cache), so relists page too (client-go's
                         * paginatedResult) */
    int watch_after_list; /* the current watch starts at the rv a LIST returned */
    char *expired_list_rv; /* ...and that rv got 410 before anything else */
    kl_http_req *req;
    uint64_t timer, idle_timer, deadline_timer;
    uint64_t rng;
    double backoff, last_failure, retry_after;
    /* An outage: when attempts began failing, what failed, how many did. */
    double down_since;
    const char *down_what;
    unsigned long down_failures;
    /* LIST */
    kl_list_stream stream; /* the page being received */
    kl_list body;          /* ...and what it decoded so far */
    kl_list acc;
    char *cont;
    int page;
    int unpaged;     /* this LIST asks for no limit */
    int keep_pager;  /* the next LIST retries this one: same paging */
    /* WATCH */
    kl_framer framer;
    kl_blob **frames; /* FIFO ring of undelivered frames */
    size_t fhead, nframes, fcap;
    int paused, sink_full;
    uint64_t pump_id; /* the deferred pump, or 0 */
    int finished; /* the request ended; act once frames are delivered */
    int ending;   /* the stream is abandoned: drop its frames, then act */
    end_action action;
    int end_code;  /* how the request ended: 0 clean, else HTTP status or -1 */
    char end_why[600];
    double watch_started, last_activity;
    unsigned long watch_events;
    int initial; /* WatchList: collecting the initial state into acc */
    int wait_for_watch; /* what WAITING leads to: WATCH, or else LIST */
};

static void start_list(kl_reflector *r);
static void start_watch(kl_reflector *r);
static void schedule_pump(kl_reflector *r);

/* ---- small helpers ---------------------------------------------------- */

static double uniform(kl_reflector *r) {
    r->rng ^= r->rng << 13;
    r->rng ^= r->rng >> 7;
    r->rng ^= r->rng << 17;
    return (double)(r->rng >> 11) / (double)(1ULL << 53);
}

static void set_rv(kl_reflector *r, const char *rv) {
    if (!rv || !rv[0] || (r->rv && strcmp(r->rv, rv) == 0)) return;
    free(r->rv);
    r->rv = kl_xstrdup(rv);
}

const char *kl_reflector_rv(const kl_reflector *r) { return r->rv ? r->rv : ""; }

double kl_reflector_failing_for(const kl_reflector *r, double now) {
    return r->down_since ? now - r->down_since : 0;
}
const kl_reflector_stats *kl_reflector_get_stats(const kl_reflector *r) { return &r->stats; }

typedef struct sbuf {
    char *s;
    size_t len, cap;
} sbuf;

static void sb_add(sbuf *b, const char *p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n + 1) cap *= 2;
        b->s = kl_xrealloc(b->s, cap);
        b->cap = cap;
    }
    memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* Appends "&name=value" (or "?name=value" first) with value percent-encoded. */
static void sb_param(sbuf *b, const char *name, const char *value) {
    static const char hex[] = "0123456789ABCDEF";
    sb_str(b, strchr(b->s ? b->s : "", '?') ? "&" : "?");
    sb_str(b, name);
    sb_str(b, "=");
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_' || *p == '.' || *p == '~') {
            sb_add(b, (const char *)p, 1);
        } else {
            char enc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            sb_add(b, enc, 3);
        }
    }
}

static void sb_selectors(sbuf *b, const kl_reflector_opts *o) {
    if (o->label_selector && o->label_selector[0]) sb_param(b, "labelSelector", o->label_selector);
    if (o->field_selector && o->field_selector[0]) sb_param(b, "fieldSelector", o->field_selector);
}

static void cancel_timers(kl_reflector *r) {
    kl_loop_cancel(r->loop, r->timer);
    kl_loop_cancel(r->loop, r->idle_timer);
    kl_loop_cancel(r->loop, r->deadline_timer);
    r->timer = r->idle_timer = r->deadline_timer = 0;
}

/* ---- backoff ---------------------------------------------------------- */

static double next_backoff(kl_reflector *r) {
    double now = kl_now();
    if (r->last_failure > 0 && now - r->last_failure > BACKOFF_RESET) r->backoff = 0;
    r->backoff = r->backoff > 0 ? r->backoff * 2 : BACKOFF_BASE;
    if (r->backoff > BACKOFF_CAP) r->backoff = BACKOFF_CAP;
    r->last_failure = now;
    return r->backoff * (1.0 + uniform(r));
}

static void on_wait_over(kl_loop *loop, void *ud) {
    (void)loop;
    kl_reflector *r = ud;
    r->timer = 0;
    if (r->phase != WAITING) return;
    if (r->wait_for_watch) start_watch(r);
    else start_list(r);
}

/* Waits before the next attempt; next_watch says whether it will WATCH or
 * LIST again. why is one line for -v 2. */
static void wait_then(kl_reflector *r, double secs, int next_watch, const char *why) {
    r->phase = WAITING;
    r->stats.backoffs++;
    r->wait_for_watch = next_watch;
    r->page = 0;
    kl_vlog(2, r->o.name, "waiting %.1f s before %s: %s", secs, next_watch ? "WATCH" : "LIST", why);
    r->timer = kl_loop_after(r->loop, secs, on_wait_over, r);
}

/* An attempt failed and will be retried. A failure the server will keep
 * giving until someone acts (a 4xx: a bad selector, a missing resource, a
 * permission not granted yet) is logged at error level at every attempt,
 * one backoff step apart. An outage (no answer, a timeout, 5xx, 429) is
 * logged once, when it starts; note_recovered logs its end. */
static void note_failure(kl_reflector *r, const char *what, int code, const char *why) {
    int persistent = code >= 400 && code < 500 && code != 408 && code != 429;
    int first = !r->down_since;
    if (first) {
        r->down_since = kl_now();
        r->down_what = what;
        r->down_failures = 0;
    }
    r->down_failures++;
    if (persistent) kl_log(KL_LOG_ERROR, r->o.name, "%s failed: %s", what, why);
    else if (first) kl_log(KL_LOG_WARN, r->o.name, "%s failed: %s; retrying with backoff", what, why);
    else kl_vlog(2, r->o.name, "%s failed: %s", what, why);
}

/* A request the failing ones were retrying got its answer. */
static void note_recovered(kl_reflector *r) {
    if (!r->down_since) return;
    kl_log(KL_LOG_INFO, r->o.name, "%s recovered after %.1f s and %lu %s", r->down_what,
           kl_now() - r->down_since, r->down_failures, r->down_failures == 1 ? "retry" : "retries");
    r->down_since = 0;
    r->down_failures = 0;
}

static void backoff_then(kl_reflector *r, int next_watch, const char *why) {
    r->stats.errors++;
    wait_then(r, next_backoff(r), next_watch, why);
}

/* A server's Retry-After is honoured but bounded, so a hostile value cannot
 * park the reflector for hours. */
static void retry_after_then(kl_reflector *r, double secs, int next_watch, const char *why) {
    r->stats.errors++;
    if (secs < 0) secs = next_backoff(r);
    if (secs > BACKOFF_CAP) secs = BACKOFF_CAP;
    wait_then(r, secs, next_watch, why);
}

/* ---- LIST ------------------------------------------------------------- */

static void append_page(kl_list *acc, kl_list *page) {
    if (page->n) {
        acc->items = kl_xrealloc(acc->items, (acc->n + page->n) * sizeof *acc->items);
        memcpy(acc->items + acc->n, page->items, page->n * sizeof *acc->items);
        acc->n += page->n;
        free(page->items);
        page->items = NULL;
        page->n = 0;
    }
    free(acc->rv);
    acc->rv = page->rv;
    page->rv = NULL;
}

static int is_too_large_rv(const kl_http_resp *resp, const char *message) {
    return resp->status == 504 || (message && strstr(message, "Too large resource version"));
}

/* One line saying why a request failed, and the code to act on: the
 * Status of a KL_HTTP_STATUS answer, else -1 and the outcome in words (a
 * timeout after a 200, say, where "HTTP 200" would mislead). */
static void status_words(const kl_http_resp *resp, char *buf, size_t size, int *code) {
    char *reason = NULL, *message = NULL;
    if (resp->outcome != KL_HTTP_STATUS) {
        *code = -1;
        snprintf(buf, size, "%s", resp->error ? resp->error : kl_http_outcome_name(resp->outcome));
        return;
    }
    *code = (int)resp->status;
    if (resp->body && kl_decode_status(resp->body, resp->body_len, code, &reason, &message) == 0 && message)
        snprintf(buf, size, "%ld %s: %s", resp->status, reason ? reason : "", message);
    else
        snprintf(buf, size, "HTTP %ld", resp->status);
    if (*code <= 0) *code = (int)resp->status;
    free(reason);
    free(message);
}

static void list_complete(kl_reflector *r) {
    kl_vlog(2, r->o.name, "LIST complete: %zu objects at resourceVersion %s", r->acc.n,
            r->acc.rv ? r->acc.rv : "?");
    int stale = r->expired_list_rv && r->acc.rv && strcmp(r->expired_list_rv, r->acc.rv) == 0;
    free(r->expired_list_rv);
    r->expired_list_rv = NULL;
    if (stale && !r->rv_unavailable) {
        /* The state a watch from this very rv just refused with 410 (a paged
         * LIST is etcd's snapshot at the rv asked for, which a new watch
         * cache may no longer hold): watching from it again would end the
         * same way, so list the latest state instead. */
        kl_vlog(2, r->o.name, "resourceVersion %s was listed again after its watch expired; "
                "listing the latest state", r->acc.rv);
        kl_list_clear(&r->acc);
        r->page = 0;
        free(r->cont);
        r->cont = NULL;
        r->rv_unavailable = 1;
        start_list(r);
        return;
    }
    set_rv(r, r->acc.rv);
    r->rv_unavailable = 0;
    r->page = 0;
    free(r->cont);
    r->cont = NULL;
    kl_list done = r->acc;
    memset(&r->acc, 0, sizeof r->acc);
    if (r->sink.replace(r->ud, &done)) r->sink_full = 1;
    kl_list_clear(&done);
    start_watch(r);
    r->watch_after_list = 1;
}

static size_t on_list_data(void *ud, const char *p, size_t n) {
    kl_reflector *r = ud;
    return kl_list_stream_feed(&r->stream, p, n) < 0 ? 0 : n;
}

static void on_list_done(void *ud, const kl_http_resp *resp) {
    kl_reflector *r = ud;
    r->req = NULL;
    char err[600];
    if (r->stream.failed || (resp->outcome == KL_HTTP_OK && kl_list_stream_finish(&r->stream) < 0)) {
        snprintf(err, sizeof err, "%s", r->stream.err);
        kl_list_stream_free(&r->stream);
        kl_list_clear(&r->body);
        kl_list_clear(&r->acc);
        kl_log(KL_LOG_WARN, r->o.name, "LIST failed: %s", err);
        backoff_then(r, 0, err);
        return;
    }
    kl_list_stream_free(&r->stream);
    if (resp->outcome == KL_HTTP_OK) {
        note_recovered(r);
        kl_list page = r->body;
        memset(&r->body, 0, sizeof r->body);
        kl_vlog(2, r->o.name, "LIST page %d: %zu objects, resourceVersion %s%s", r->page, page.n,
                page.rv ? page.rv : "?", page.cont && page.cont[0] ? ", more to come" : "");
        int more = page.cont && page.cont[0] && !r->unpaged;
        if (more && r->page == 0 && !r->rv) r->paginated = 1;
        free(r->cont);
        r->cont = more ? page.cont : NULL;
        if (more) page.cont = NULL;
        append_page(&r->acc, &page);
        kl_list_clear(&page);
        if (more) {
            r->page++;
            start_list(r);
        } else {
            list_complete(r);
        }
        return;
    }
    int code;
    status_words(resp, err, sizeof err, &code);
    kl_list_clear(&r->body);
    kl_list_clear(&r->acc);
    int paging = r->cont != NULL;
    free(r->cont);
    r->cont = NULL;
    r->page = 0;
    if (code == 410 && paging) {
        kl_vlog(2, r->o.name, "continue token expired (%s): listing again in one piece", err);
        r->unpaged = 1;
        r->keep_pager = 1;
        start_list(r);
    } else if ((code == 410 || is_too_large_rv(resp, err)) && r->rv && r->rv[0] && !r->rv_unavailable) {
        kl_vlog(2, r->o.name, "resourceVersion %s is unavailable (%s): listing the latest state",
                r->rv, err);
        r->rv_unavailable = 1;
        r->keep_pager = 1;
        start_list(r);
    } else if (code == 429 || resp->retry_after >= 0) {
        note_failure(r, "LIST", code, err);
        retry_after_then(r, resp->retry_after, 0, err);
    } else if (code == 404) {
        /* Not served (a CRD deleted): as client-go, the cache then holds
         * none of it either (deletes it missed are delivered, their final
         * state unknown) and a wait for the sync ends. Once it is back, its
         * resourceVersions start anew, so the LIST that finds it asks for
         * the latest state. */
        note_failure(r, "LIST", code, err);
        r->rv_unavailable = 1;
        kl_list none;
        memset(&none, 0, sizeof none);
        none.remaining = -1;
        if (r->sink.replace(r->ud, &none)) r->sink_full = 1;
        backoff_then(r, 0, err);
    } else {
        note_failure(r, "LIST", code, err);
        backoff_then(r, 0, err);
    }
}

/* Whether a LIST from rv asks for pages, as client-go's reflector decides:
 * always with an explicit page size, or when the first LIST came in pages;
 * otherwise not at a resourceVersion other than "" and "0". kube-apiserver
 * serves a LIST with a limit at resourceVersion N from etcd as the exact
 * snapshot at N, and one without a limit from the watch cache, not older
 * than N: after an API server restart the new watch cache no longer holds
 * N, etcd still does, and a paged relist would return the old state, whose
 * watch gets 410 again. */
static int list_pages(const kl_reflector *r, const char *rv) {
    if (r->o.page_size > 0 || r->paginated) return 1;
    return !rv[0] || strcmp(rv, "0") == 0;
}

static void start_list(kl_reflector *r) {
    r->phase = LISTING;
    r->initial = 0;
    sbuf b = {0};
    sb_str(&b, r->o.path);
    const char *rv = r->rv_unavailable ? "" : (r->rv ? r->rv : "0");
    /* A retry after an expired continue token or resourceVersion keeps the
     * paging of the LIST it retries, as client-go's pager does. */
    if (r->page == 0 && !r->keep_pager) r->unpaged = !list_pages(r, rv);
    r->keep_pager = 0;
    char limit[24];
    snprintf(limit, sizeof limit, "%d", r->o.page_size > 0 ? r->o.page_size : 500);
    if (!r->unpaged) sb_param(&b, "limit", limit);
    if (r->page == 0) {
        r->stats.lists++;
        if (r->rv) r->stats.relists++;
        sb_param(&b, "resourceVersion", rv);
        kl_vlog(2, r->o.name, "LIST from resourceVersion \"%s\"%s", rv, r->unpaged ? ", unpaged" : "");
    } else {
        sb_param(&b, "continue", r->cont);
    }
    sb_selectors(&b, &r->o);
    kl_http_opts ho = {.method = "GET", .path = b.s, .timeout_ms = (long)(r->o.list_timeout * 1000)};
    kl_list_stream_init(&r->stream, &r->body, KL_FRAME_MAX_DEFAULT);
    r->req = kl_http_start(r->http, &ho, (kl_http_cb){.data = on_list_data, .done = on_list_done}, r);
    free(b.s);
}

/* ---- WATCH ------------------------------------------------------------ */

static void frames_push(kl_reflector *r, kl_blob *b) {
    if (r->nframes == r->fcap) {
        size_t cap = r->fcap ? r->fcap * 2 : 64;
        kl_blob **f = kl_xmalloc(cap * sizeof *f);
        for (size_t i = 0; i < r->nframes; i++) f[i] = r->frames[(r->fhead + i) % r->fcap];
        free(r->frames);
        r->frames = f;
        r->fhead = 0;
        r->fcap = cap;
    }
    r->frames[(r->fhead + r->nframes++) % r->fcap] = b;
}

static kl_blob *frames_pop(kl_reflector *r) {
    kl_blob *b = r->frames[r->fhead];
    r->fhead = (r->fhead + 1) % r->fcap;
    r->nframes--;
    return b;
}

static void frames_drop(kl_reflector *r) {
    while (r->nframes) kl_blob_unref(frames_pop(r));
}

static void on_frame(void *ud, kl_blob *b) { frames_push(ud, b); }

static void on_oversize(void *ud, size_t max) {
    kl_reflector *r = ud;
    r->stats.oversize++;
    kl_log(KL_LOG_ERROR, r->o.name, "watch event larger than %zu bytes refused; relisting", max);
    r->ending = 1;
    r->action = END_CORRUPT;
}

static size_t on_watch_data(void *ud, const char *p, size_t n) {
    kl_reflector *r = ud;
    r->last_activity = kl_now();
    if (r->ending) return 0;
    if (r->nframes >= FRAMES_HIGH) {
        r->paused = 1;
        return KL_HTTP_PAUSE;
    }
    if (kl_framer_feed(&r->framer, p, n) < 0) {
        r->ending = 1;
        r->action = END_CORRUPT;
    }
    schedule_pump(r);
    /* Returning less than n makes curl end the transfer: the stream is
     * abandoned and the end action runs once queued frames are delivered. */
    return r->ending ? 0 : n;
}

static void end_watch_now(kl_reflector *r, end_action a) {
    r->ending = 1;
    r->action = a;
    if (r->req) {
        kl_http_cancel(r->req);
        r->req = NULL;
        r->finished = 1;
    }
}

static void deliver_event(kl_reflector *r, kl_event *ev) {
    r->watch_events++;
    r->stats.events++;
    if (ev->type == KL_EV_ADDED) r->stats.added++;
    else if (ev->type == KL_EV_MODIFIED) r->stats.modified++;
    else if (ev->type == KL_EV_DELETED) r->stats.deleted++;
    /* An initial event's rv is its object's last change, not a point the
     * cache has reached: as client-go, the reflector's rv stays where it
     * was until the initial-events-end bookmark, so a fallback LIST asks
     * from there and the partial state is dropped. */
    if (r->initial) {
        /* The initial state comes as ADDED events only. */
        if (ev->type == KL_EV_ADDED) {
            r->acc.items = kl_xrealloc(r->acc.items, (r->acc.n + 1) * sizeof *r->acc.items);
            r->acc.items[r->acc.n++] = ev->obj;
            memset(&ev->obj, 0, sizeof ev->obj);
        }
        return;
    }
    set_rv(r, ev->obj.rv);
    if (r->sink.event(r->ud, ev)) r->sink_full = 1;
}

static void initial_events_end(kl_reflector *r, const char *rv) {
    kl_loop_cancel(r->loop, r->deadline_timer);
    r->deadline_timer = 0;
    r->initial = 0;
    set_rv(r, rv);
    free(r->acc.rv);
    r->acc.rv = rv ? kl_xstrdup(rv) : NULL;
    kl_vlog(2, r->o.name, "initial events end at resourceVersion %s: %zu objects", rv ? rv : "?", r->acc.n);
    kl_list done = r->acc;
    memset(&r->acc, 0, sizeof r->acc);
    r->rv_unavailable = 0;
    if (r->sink.replace(r->ud, &done)) r->sink_full = 1;
    kl_list_clear(&done);
}

static void handle_frame(kl_reflector *r, kl_blob *frame) {
    kl_event ev;
    char err[512];
    memset(&ev, 0, sizeof ev);
    if (kl_decode_event(frame, r->o.kind, &ev, err, sizeof err) < 0) {
        r->stats.malformed++;
        kl_log(KL_LOG_ERROR, r->o.name, "%s; relisting", err);
        end_watch_now(r, END_CORRUPT);
    } else if (ev.type == KL_EV_BOOKMARK) {
        r->stats.bookmarks++;
        r->watch_events++;
        kl_vlog(2, r->o.name, "BOOKMARK at resourceVersion %s", ev.obj.rv ? ev.obj.rv : "");
        if (!r->initial) set_rv(r, ev.obj.rv);
        else if (ev.initial_events_end) initial_events_end(r, ev.obj.rv);
    } else if (ev.type == KL_EV_ERROR) {
        int gone = ev.code == 410;
        kl_vlog(2, r->o.name, "watch ERROR %d %s: %s%s", ev.code, ev.reason ? ev.reason : "",
                ev.message ? ev.message : "", gone ? "; relisting" : "");
        if (!gone) kl_log(KL_LOG_WARN, r->o.name, "watch error %d: %s", ev.code, ev.message ? ev.message : "");
        end_watch_now(r, gone ? END_RELIST : END_BACKOFF);
    } else {
        deliver_event(r, &ev);
    }
    kl_event_clear(&ev);
}

static void after_watch(kl_reflector *r);

static void pump(kl_loop *loop, void *ud) {
    (void)loop;
    kl_reflector *r = ud;
    r->pump_id = 0;
    for (int n = 0; n < PUMP_BATCH && r->nframes && !r->sink_full; n++) {
        kl_blob *b = frames_pop(r);
        if (!r->ending) handle_frame(r, b);
        kl_blob_unref(b);
    }
    if (r->ending) frames_drop(r);
    if (r->paused && r->nframes < FRAMES_LOW && r->req) {
        r->paused = 0;
        kl_http_resume(r->req);
    }
    if (r->nframes && !r->sink_full) schedule_pump(r);
    if (!r->nframes && r->finished) after_watch(r);
}

static void schedule_pump(kl_reflector *r) {
    if (!r->pump_id) r->pump_id = kl_loop_defer(r->loop, pump, r);
}

void kl_reflector_kick(kl_reflector *r) {
    r->sink_full = 0;
    if (r->nframes || r->finished) schedule_pump(r);
}

static void on_idle_check(kl_loop *loop, void *ud) {
    (void)loop;
    kl_reflector *r = ud;
    r->idle_timer = 0;
    if (r->phase != WATCHING || r->finished) return;
    double idle = r->o.idle_timeout > 0 ? r->o.idle_timeout : 150;
    double quiet = kl_now() - r->last_activity;
    if (quiet < idle || r->paused) {
        r->idle_timer = kl_loop_after(r->loop, idle - (r->paused ? 0 : quiet) + 0.01, on_idle_check, r);
        return;
    }
    r->stats.idle_restarts++;
    kl_log(KL_LOG_WARN, r->o.name, "watch silent for %.0f s; restarting it", quiet);
    end_watch_now(r, END_REWATCH);
    if (!r->nframes) after_watch(r);
}

static void on_deadline(kl_loop *loop, void *ud) {
    (void)loop;
    kl_reflector *r = ud;
    r->deadline_timer = 0;
    if (!r->initial) return;
    kl_log(KL_LOG_WARN, r->o.name,
           "no initial-events-end bookmark within %.0f s; falling back to LIST for good",
           r->o.watch_list_deadline > 0 ? r->o.watch_list_deadline : 10);
    r->o.watch_list = 0;
    r->initial = 0;
    kl_list_clear(&r->acc);
    end_watch_now(r, END_FALLBACK);
    frames_drop(r);
    after_watch(r);
}

static void on_watch_started(void *ud) { note_recovered(ud); }

/* Records how the request ended; the frames it delivered are handled
 * first, then after_watch decides what comes next. */
static void on_watch_done(void *ud, const kl_http_resp *resp) {
    kl_reflector *r = ud;
    r->req = NULL;
    r->finished = 1;
    r->retry_after = resp->retry_after;
    if (resp->outcome == KL_HTTP_OK || (resp->outcome == KL_HTTP_TIMEOUT && resp->status)) {
        /* Ended by the server's timeout or, failing that, by klua's own. */
        r->end_code = 0;
    } else {
        status_words(resp, r->end_why, sizeof r->end_why, &r->end_code);
    }
    if (!r->nframes) after_watch(r);
    else schedule_pump(r);
}

/* The next step after a stream that ended by itself. */
static end_action classify_end(kl_reflector *r) {
    if (r->end_code == 0) {
        if (kl_now() - r->watch_started < 1.0 && r->watch_events == 0) {
            kl_vlog(2, r->o.name, "watch ended in under a second without events");
            return END_BACKOFF;
        }
        kl_vlog(2, r->o.name, "watch ended after %lu events", r->watch_events);
        return END_REWATCH;
    }
    /* A stream cut after it made progress is resumed at once, as a clean
     * end is; only a watch that achieved nothing waits. */
    if (r->end_code == 410 || (r->end_code == -1 && r->watch_events > 0)) {
        kl_vlog(2, r->o.name, "watch failed: %s", r->end_why);
        return r->end_code == 410 ? END_RELIST : END_REWATCH;
    }
    note_failure(r, "watch", r->end_code, r->end_why);
    if (r->end_code == 404) return END_GONE;
    if (r->end_code == 429 || r->retry_after >= 0) return END_RETRY;
    return END_BACKOFF;
}

/* Starts the LIST (or, with --watch-list, the initial-events WATCH) that
 * follows a stream klua stopped trusting. A server that answers every
 * watch with bytes klua cannot read, or with 410 before anything else,
 * would otherwise be met with a tight loop of relists; as in client-go,
 * such relists wait a backoff first. */
static void relist(kl_reflector *r, end_action why) {
    r->page = 0;
    r->stats.relists += r->o.watch_list;
    r->initial = r->o.watch_list;
    if (why == END_CORRUPT) {
        backoff_then(r, r->o.watch_list, "the watch stream could not be read");
    } else if (why == END_GONE) {
        r->rv_unavailable = 1;
        backoff_then(r, r->o.watch_list, "the resource is not served");
    } else if (why == END_RELIST && r->watch_events == 0) {
        backoff_then(r, r->o.watch_list, "the resourceVersion expired before the watch delivered anything");
    } else if (r->o.watch_list) {
        start_watch(r);
    } else {
        start_list(r);
    }
}

static void after_watch(kl_reflector *r) {
    if (r->phase != WATCHING) return;
    kl_loop_cancel(r->loop, r->idle_timer);
    kl_loop_cancel(r->loop, r->deadline_timer);
    r->idle_timer = r->deadline_timer = 0;
    if (!r->ending) r->action = classify_end(r);
    int after_list = r->watch_after_list;
    r->watch_after_list = 0;
    free(r->expired_list_rv);
    r->expired_list_rv = NULL;
    if (r->action == END_RELIST && r->watch_events == 0 && after_list && r->rv)
        r->expired_list_rv = strdup(r->rv);
    kl_framer_reset(&r->framer);
    frames_drop(r);
    r->finished = 0;
    r->ending = 0;
    r->paused = 0;
    if (r->initial) {
        /* The initial state was cut short: start it again, after a pause. */
        kl_list_clear(&r->acc);
        if (r->action == END_REWATCH) r->action = END_BACKOFF;
    }
    switch (r->action) {
    case END_REWATCH:
        r->stats.rewatches++;
        start_watch(r);
        break;
    case END_BACKOFF:
        backoff_then(r, 1, "watch failed");
        break;
    case END_RETRY:
        retry_after_then(r, r->retry_after, 1, "the server asked to retry later");
        break;
    case END_RELIST:
    case END_CORRUPT:
    case END_GONE:
    case END_FALLBACK:
        relist(r, r->action);
        break;
    }
}

static double watch_timeout(kl_reflector *r) {
    double lo = r->o.watch_timeout_min > 0 ? r->o.watch_timeout_min : 300;
    double hi = r->o.watch_timeout_max > lo ? r->o.watch_timeout_max : lo * 2;
    return lo + uniform(r) * (hi - lo);
}

static void start_watch(kl_reflector *r) {
    r->phase = WATCHING;
    r->finished = r->ending = r->paused = 0;
    r->watch_events = 0;
    r->stats.watches++;
    long timeout = (long)watch_timeout(r);
    char t[24];
    snprintf(t, sizeof t, "%ld", timeout);
    sbuf b = {0};
    sb_str(&b, r->o.path);
    sb_param(&b, "watch", "true");
    sb_param(&b, "allowWatchBookmarks", "true");
    sb_param(&b, "timeoutSeconds", t);
    if (r->initial) {
        sb_param(&b, "sendInitialEvents", "true");
        sb_param(&b, "resourceVersionMatch", "NotOlderThan");
        sb_param(&b, "resourceVersion", "");
        kl_vlog(2, r->o.name, "WATCH with initial events (timeout %ld s)", timeout);
    } else {
        sb_param(&b, "resourceVersion", kl_reflector_rv(r));
        kl_vlog(2, r->o.name, "WATCH from resourceVersion %s (timeout %ld s)", kl_reflector_rv(r), timeout);
    }
    sb_selectors(&b, &r->o);
    r->watch_started = r->last_activity = kl_now();
    /* The server ends the watch at timeoutSeconds; the same deadline, with
     * some grace, also holds on this side, so a server that trickles bytes
     * forever cannot keep a watch (and with it the cache) stale. */
    kl_http_opts ho = {.method = "GET", .path = b.s, .timeout_ms = (timeout + WATCH_GRACE) * 1000};
    r->req = kl_http_start(r->http, &ho,
                           (kl_http_cb){.data = on_watch_data, .started = on_watch_started, .done = on_watch_done}, r);
    free(b.s);
    double idle = r->o.idle_timeout > 0 ? r->o.idle_timeout : 150;
    r->idle_timer = kl_loop_after(r->loop, idle, on_idle_check, r);
    if (r->initial) {
        double d = r->o.watch_list_deadline > 0 ? r->o.watch_list_deadline : 10;
        r->deadline_timer = kl_loop_after(r->loop, d, on_deadline, r);
    }
}

/* ---- lifecycle -------------------------------------------------------- */

static char *dup_or_null(const char *s) { return s ? kl_xstrdup(s) : NULL; }

kl_reflector *kl_reflector_new(kl_loop *loop, kl_http *http, const kl_reflector_opts *o,
                               kl_reflector_sink sink, void *ud) {
    kl_reflector *r = kl_xcalloc(1, sizeof *r);
    r->loop = loop;
    r->http = http;
    r->o = *o;
    if (r->o.list_timeout <= 0) r->o.list_timeout = 300;
    r->o.name = r->owned.name = kl_xstrdup(o->name ? o->name : o->path);
    r->o.path = r->owned.path = kl_xstrdup(o->path);
    r->o.kind = r->owned.kind = dup_or_null(o->kind);
    r->o.label_selector = r->owned.label_selector = dup_or_null(o->label_selector);
    r->o.field_selector = r->owned.field_selector = dup_or_null(o->field_selector);
    r->sink = sink;
    r->ud = ud;
    r->rng = (uint64_t)(uintptr_t)r ^ (uint64_t)(kl_now() * 1e9) ^ 0x9e3779b97f4a7c15ULL;
    if (!r->rng) r->rng = 1;
    kl_framer_init(&r->framer, KL_FRAME_MAX_DEFAULT, (kl_framer_callbacks){on_frame, on_oversize}, r);
    return r;
}

void kl_reflector_start(kl_reflector *r) {
    r->initial = r->o.watch_list;
    if (r->o.watch_list) start_watch(r);
    else start_list(r);
}

void kl_reflector_free(kl_reflector *r) {
    if (!r) return;
    cancel_timers(r);
    kl_loop_cancel(r->loop, r->pump_id);
    kl_http_cancel(r->req);
    kl_framer_reset(&r->framer);
    frames_drop(r);
    free(r->frames);
    kl_list_stream_free(&r->stream);
    kl_list_clear(&r->body);
    kl_list_clear(&r->acc);
    free(r->cont);
    free(r->rv);
    free(r->owned.name);
    free(r->owned.path);
    free(r->owned.kind);
    free(r->owned.label_selector);
    free(r->owned.field_selector);
    free(r->expired_list_rv);
    free(r);
}
