/* reflector.c - ListWatch as client-go's Reflector does it; see reflector.h. */
#include "cache/reflector.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/backoff.h"
#include "cache/listwatch_url.h"
#include "wire/cbor.h"
#include "wire/media.h"
#include "wire/framer.h"
#include "wire/list_stream.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/ring.h"
#include "base/xalloc.h"

/* What client-go's metadata informers ask for (k8s.io/client-go/metadata): a LIST as
 * PartialObjectMetadataList, a WATCH's objects as PartialObjectMetadata; kube-apiserver
 * converts them (endpoints/handlers/response.go). */
#define ACCEPT_META_LIST "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
#define ACCEPT_META "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
/* kubectl get's Accept: the Table, or the plain form from a server that cannot make one. */
#define ACCEPT_TABLE "application/json;as=Table;g=meta.k8s.io;v=v1,application/json"
#define FRAMES_HIGH 512 /* queued frames at which the socket is paused */
#define FRAMES_LOW 128  /* ...and resumed */
#define RETRY_AFTER_MAX 30.0 /* a server's Retry-After is honoured up to this */
#define WATCH_GRACE 5L /* seconds past timeoutSeconds before klua ends a watch */

/* ---- the transition table --------------------------------------------- */

/* Why the reflector changes state: one row of the table each, so a cause
 * names where it leads. */
typedef enum {
    C_START,
    C_START_WATCHLIST,
    C_LIST_OK,
    C_LIST_STALE,
    C_LIST_RV_GONE,
    C_LIST_CONTINUE_EXPIRED,
    C_LIST_NOT_FOUND,
    C_LIST_RETRY_AFTER,
    C_LIST_ERROR,
    C_WL_SYNCED,
    C_WL_REFUSED,
    C_WL_UNSERVED,
    C_WL_NO_BOOKMARK,
    C_WL_CORRUPT,
    C_WL_DEADLINE,
    C_WL_RETRY,
    C_WL_RETRY_AFTER,
    C_WL_EXPIRED,
    C_WL_EXPIRED_AT_ONCE,
    C_WATCH_END,
    C_WATCH_IDLE,
    C_WATCH_FAIL,
    C_WATCH_RETRY_AFTER,
    C_WATCH_EXPIRED,
    C_WATCH_EXPIRED_WL,
    C_WATCH_EXPIRED_AT_ONCE,
    C_WATCH_NOT_FOUND,
    C_WATCH_CORRUPT,
    C_WATCH_DRIFT,
    C_WATCH_DRIFT_WL,
    C_WATCH_RESHARD,
    C_WATCH_RESHARD_WL,
    C_WAIT_LIST,
    C_WAIT_WATCHLIST,
    C_WAIT_WATCH,
    C_COUNT
} cause;

#define IDLE KL_REFLECTOR_IDLE
#define LIST KL_REFLECTOR_LIST
#define WATCHLIST KL_REFLECTOR_WATCHLIST
#define WATCH KL_REFLECTOR_WATCH
#define BACKOFF KL_REFLECTOR_BACKOFF

static const char *const state_names[KL_REFLECTOR_NSTATES] = {
    [IDLE] = "IDLE", [LIST] = "LIST", [WATCHLIST] = "WATCHLIST", [WATCH] = "WATCH", [BACKOFF] = "BACKOFF",
};

static const kl_reflector_transition table[C_COUNT] = {
    [C_START] = {IDLE, "start", LIST, "LIST(\"0\")"},
    [C_START_WATCHLIST] = {IDLE, "start, WatchList on (the default)", WATCHLIST, "WATCH(initial events)"},
    [C_LIST_OK] = {LIST, "ok (the last page)", WATCH, "store.replace, WATCH(list rv)"},
    [C_LIST_STALE] = {LIST, "ok, at the rv whose watch got 410 at once", LIST, "LIST(\"\")"},
    [C_LIST_RV_GONE] = {LIST, "410 (HTTP or Status) / too large at rv", LIST, "LIST(\"\") at once, same paging"},
    [C_LIST_CONTINUE_EXPIRED] = {LIST, "continue expired, page >= 2", LIST, "LIST(rv) unpaged"},
    [C_LIST_NOT_FOUND] = {LIST, "404 (resource not served)", BACKOFF, "store.replace(nothing) -> LIST(\"\")"},
    [C_LIST_RETRY_AFTER] = {LIST, "429 / Retry-After", BACKOFF, "at most 30 s -> LIST(rv)"},
    [C_LIST_ERROR] = {LIST, "other error, not a list, refused", BACKOFF, "-> LIST(rv), cache kept"},
    [C_WL_SYNCED] = {WATCHLIST, "initial-events-end bookmark", WATCH, "store.replace, the same stream goes on"},
    [C_WL_REFUSED] = {WATCHLIST, "HTTP error (not 410, 429), ERROR", LIST, "LIST(rv); the next relist tries again"},
    [C_WL_UNSERVED] = {WATCHLIST, "400 / 422, by default", LIST, "LIST(rv), and LIST from then on"},
    [C_WL_NO_BOOKMARK] = {WATCHLIST, "clean end without the bookmark", LIST, "LIST(rv); by default LIST from then on"},
    [C_WL_CORRUPT] = {WATCHLIST, "oversize / malformed frame, refused", BACKOFF, "-> LIST(rv); the next relist tries again"},
    [C_WL_DEADLINE] = {WATCHLIST, "no event in --watch-list-deadline", LIST, "LIST(rv); the next relist tries again"},
    [C_WL_RETRY] = {WATCHLIST, "cut, idle, connect error, timeout, rv too large", BACKOFF, "-> WATCHLIST"},
    [C_WL_RETRY_AFTER] = {WATCHLIST, "429 / Retry-After", BACKOFF, "at most 30 s -> WATCHLIST"},
    [C_WL_EXPIRED] = {WATCHLIST, "410 after events", WATCHLIST, "WATCH(initial events)"},
    [C_WL_EXPIRED_AT_ONCE] = {WATCHLIST, "410 before any event", BACKOFF, "-> WATCHLIST"},
    [C_WATCH_END] = {WATCH, "clean end, timeoutSeconds + 5 s, cut", WATCH, "WATCH(rv)"},
    [C_WATCH_IDLE] = {WATCH, "silent past the idle limit", WATCH, "WATCH(rv)"},
    [C_WATCH_FAIL] = {WATCH, "< 1 s without events, connect error, 5xx, ERROR", BACKOFF, "-> WATCH(rv)"},
    [C_WATCH_RETRY_AFTER] = {WATCH, "429 / Retry-After", BACKOFF, "at most 30 s -> WATCH(rv)"},
    [C_WATCH_EXPIRED] = {WATCH, "410 (HTTP or ERROR) after events", LIST, "LIST(rv)"},
    [C_WATCH_EXPIRED_WL] = {WATCH, "410 after events, WatchList on", WATCHLIST, "WATCH(initial events)"},
    [C_WATCH_EXPIRED_AT_ONCE] = {WATCH, "410 before any event", BACKOFF, "-> LIST(rv) or WATCHLIST"},
    [C_WATCH_NOT_FOUND] = {WATCH, "404 (resource not served)", BACKOFF, "-> LIST(\"\") or WATCHLIST"},
    [C_WATCH_CORRUPT] = {WATCH, "oversize / malformed frame, refused", BACKOFF, "-> LIST(rv) or WATCHLIST"},
    [C_WATCH_DRIFT] = {WATCH, "cache drifted from the server (--verify-cache)", LIST, "LIST(\"\")"},
    [C_WATCH_DRIFT_WL] = {WATCH, "cache drifted, WatchList on", WATCHLIST, "WATCH(initial events)"},
    [C_WATCH_RESHARD] = {WATCH, "shard selector changed (--shards)", LIST, "LIST(\"\")"},
    [C_WATCH_RESHARD_WL] = {WATCH, "shard selector changed, WatchList on", WATCHLIST, "WATCH(initial events)"},
    [C_WAIT_LIST] = {BACKOFF, "waited", LIST, "LIST"},
    [C_WAIT_WATCHLIST] = {BACKOFF, "waited", WATCHLIST, "WATCH(initial events)"},
    [C_WAIT_WATCH] = {BACKOFF, "waited", WATCH, "WATCH(rv)"},
};

const kl_reflector_transition *kl_reflector_transitions(size_t *n) {
    *n = C_COUNT;
    return table;
}

const char *kl_reflector_state_name(kl_reflector_state s) {
    return s < KL_REFLECTOR_NSTATES ? state_names[s] : "?";
}

/* ---- the reflector ---------------------------------------------------- */

/* How a watch ended; decided once, acted on when its frames are delivered. */
typedef enum {
    END_REWATCH, /* clean end, or cut after making progress */
    END_IDLE,    /* silent past the idle limit: klua ended it */
    END_BACKOFF, /* no answer, a timeout, 5xx, a short empty watch */
    END_ERROR,   /* an ERROR event other than 410 */
    END_REFUSED, /* WATCHLIST: an HTTP error it will not retry as such */
    END_RETRY,   /* the server asked to wait (Retry-After) */
    END_RELIST,  /* 410 */
    END_CORRUPT, /* bytes that cannot be read, or an event the sink refused */
    END_GONE,    /* 404: the resource is not served (a CRD deleted) */
    END_FALLBACK /* WATCHLIST: no initial event in time */
} end_action;

/* LIST: the pages of one list. */
typedef struct list_st {
    kl_list_stream stream; /* the page being received */
    kl_list body;          /* ...and what it decoded so far */
    kl_list acc;           /* the pages before it */
    size_t acc_cap;        /* ...and the capacity of acc.items (base/buf.h) */
    char *cont;            /* the token of the page being received */
    char *bad_type;        /* its Content-Type, when not JSON (or CBOR): the body is refused */
    int page;
    int unpaged;           /* this LIST asks for no limit */
} list_st;

/* WATCH and WATCHLIST: one stream. */
typedef struct watch_st {
    uint64_t idle_timer, deadline_timer;
    int paused;        /* the transfer waits for the frame queue to drain */
    int finished;      /* the request ended; act once frames are delivered */
    int ending;        /* the stream is abandoned: drop its frames, then act */
    end_action action;
    int end_code;      /* how the request ended: 0 clean, else HTTP status or -1 */
    char end_why[600];
    char malformed[200]; /* why the CBOR item queued as a NULL frame cannot be read */
    size_t end_message; /* where in end_why the server's message begins */
    double retry_after;
    double started, last_activity;
    unsigned long events; /* events and bookmarks delivered */
    kl_list acc;          /* WATCHLIST: the initial state so far */
    size_t acc_cap;       /* ...and the capacity of acc.items (base/buf.h) */
} watch_st;

/* BACKOFF: a timer, and where it leads. */
typedef struct wait_st {
    uint64_t timer;
    cause next;
} wait_st;

/* What a transition needs from the state it leaves. */
typedef struct step {
    double wait;       /* BACKOFF: seconds */
    cause next;        /* BACKOFF: what follows */
    const char *why;   /* BACKOFF: for -v 2 */
    int keep_paging;   /* LIST: retry the paging of the list left... */
    int unpaged;       /* ...which was this */
} step;

typedef struct live_env {
    kl_loop *loop;
    kl_http *http;
} live_env;

struct kl_reflector {
    kl_reflector_env env;
    live_env live; /* env.ud for kl_reflector_new */
    kl_reflector_opts o; /* its strings point into owned */
    struct {
        char *name, *path, *kind, *label_selector, *field_selector, *shard_selector;
    } owned;
    kl_listwatch_target target;
    kl_prune *prune; /* kl_reflector_set_prune's, not owned, or NULL */
    kl_reflector_sink sink;
    void *ud;
    kl_reflector_stats stats;
    kl_reflector_state state;
    union {
        list_st list;
        watch_st watch;
        wait_st wait;
    } st;
    void *req; /* the request of LIST, WATCHLIST or WATCH */
    /* Kept across states. */
    char *rv;
    int rv_unavailable; /* the last rv got 410 on LIST, or the resource was
                         * not served (404): list from "" */
    int paginated;      /* the first LIST, at "0", came in pages: the server pages
                         * (no watch cache), so relists page too (client-go's
                         * paginatedResult) */
    char *expired_rv;   /* a watch from this rv got 410 at once; kept until a
                         * LIST completes or a WatchList syncs, across the
                         * BACKOFF and the WatchList refusal between */
    kl_backoff backoff;
    uint64_t rng;
    /* An outage: when attempts began failing, what failed, how many did. */
    double down_since;
    const char *down_what;
    unsigned long down_failures;
    char *refusal;      /* the failure in progress, when it is a 4xx that
                         * lasts until someone acts (note_failure) */
    int watched;        /* a watch of this reflector was accepted once */
    /* Frames between the socket and the sink. */
    kl_framer framer;
    kl_ring frames; /* of kl_blob *, oldest first */
    int sink_full;
    uint64_t pump_id; /* the deferred pump, or 0 */
    /* The last transitions, for the live page: a transition is rare (a
     * LIST, a watch's end), so keeping them costs nothing per event. */
    kl_reflector_record history[KL_REFLECTOR_HISTORY];
    size_t transitions; /* made so far; history[transitions % HISTORY] is next */
    double last_event_at; /* the read that carried the last watch event; 0: none yet */
    double heard_at;      /* the last sign the cache is current: a completed LIST, a
                           * watch event or a bookmark (or the start, before any) */
};

static void transition(kl_reflector *r, cause c, const step *s);
static void schedule_pump(kl_reflector *r);
static void watch_over(kl_reflector *r);

/* ---- small helpers ---------------------------------------------------- */

static double now(const kl_reflector *r) { return r->env.now(r->env.ud); }

static void cancel(kl_reflector *r, uint64_t *id) {
    if (*id) r->env.cancel(r->env.ud, *id);
    *id = 0;
}

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

static void forget_expired_rv(kl_reflector *r) {
    free(r->expired_rv);
    r->expired_rv = NULL;
}

const char *kl_reflector_rv(const kl_reflector *r) { return r->rv ? r->rv : ""; }

double kl_reflector_failing_for(const kl_reflector *r, double t) {
    return r->down_since ? t - r->down_since : 0;
}
const char *kl_reflector_refusal(const kl_reflector *r) { return r->refusal; }
const kl_reflector_stats *kl_reflector_get_stats(const kl_reflector *r) { return &r->stats; }
kl_reflector_state kl_reflector_get_state(const kl_reflector *r) { return r->state; }

double kl_reflector_last_event(const kl_reflector *r) { return r->last_event_at; }
double kl_reflector_last_heard(const kl_reflector *r) { return r->heard_at; }

int kl_reflector_relist(kl_reflector *r, const char *why) {
    if (r->state != WATCH) return 0;
    kl_log(KL_LOG_WARN, r->o.name, "%s; relisting", why);
    /* The cache missed what its watch should have brought: list the latest
     * state, as the consistent LIST that found the drift did, rather than
     * from the rv the watch reached. */
    r->rv_unavailable = 1;
    r->stats.relists += r->o.watch_list != KL_WATCH_LIST_OFF; /* a LIST counts its own */
    transition(r, r->o.watch_list ? C_WATCH_DRIFT_WL : C_WATCH_DRIFT, NULL);
    return 1;
}

int kl_reflector_reshard(kl_reflector *r, const char *selector) {
    if (r->state != WATCH) return 0;
    const char *now_sel = r->owned.shard_selector ? r->owned.shard_selector : "";
    if (!strcmp(now_sel, selector ? selector : "")) return 1;
    free(r->owned.shard_selector);
    r->owned.shard_selector = selector && selector[0] ? kl_xstrdup(selector) : NULL;
    r->target.shard_selector = r->owned.shard_selector;
    kl_log(KL_LOG_INFO, r->o.name, "shard selector now %s; relisting",
           r->owned.shard_selector ? r->owned.shard_selector : "none");
    /* Another selection: neither the rv nor the cache of the old one says
     * what the new one holds, so the latest state is listed. */
    r->rv_unavailable = 1;
    r->stats.relists += r->o.watch_list != KL_WATCH_LIST_OFF;
    transition(r, r->o.watch_list ? C_WATCH_RESHARD_WL : C_WATCH_RESHARD, NULL);
    return 1;
}

const char *kl_reflector_shard_selector(const kl_reflector *r) {
    return r->owned.shard_selector ? r->owned.shard_selector : "";
}

size_t kl_reflector_history(const kl_reflector *r, kl_reflector_record *out) {
    size_t n = r->transitions < KL_REFLECTOR_HISTORY ? r->transitions : KL_REFLECTOR_HISTORY;
    for (size_t i = 0; i < n; i++) out[i] = r->history[(r->transitions - n + i) % KL_REFLECTOR_HISTORY];
    return n;
}

static void frames_drop(kl_reflector *r) {
    kl_blob *b;
    while (kl_ring_pop(&r->frames, &b)) kl_blob_unref(b);
}

/* ---- failures --------------------------------------------------------- */

/* An attempt failed and will be retried. A failure the server will keep
 * giving until someone acts (a 4xx: a bad selector, a missing resource, a
 * permission not granted yet) is logged at error level at every attempt,
 * one backoff step apart. An outage (no answer, a timeout, 5xx, 429) is
 * logged once, when it starts; note_recovered logs its end. */
static void note_failure(kl_reflector *r, const char *what, int code, const char *why, const char *message) {
    int persistent = code >= 400 && code < 500 && code != 408 && code != 429;
    int first = !r->down_since;
    if (first) {
        r->down_since = now(r);
        r->down_what = what;
        r->down_failures = 0;
    }
    r->down_failures++;
    free(r->refusal);
    r->refusal = NULL;
    if (persistent) {
        kl_log(KL_LOG_ERROR, r->o.name, "%s failed: %s", what, why);
        r->refusal = kl_xstrdup(why);
    } else if (first) {
        kl_log(KL_LOG_WARN, r->o.name, "%s failed: %s; retrying with backoff", what, why);
    } else {
        kl_vlog(2, r->o.name, "%s failed: %s", what, why);
    }
    if (r->sink.failed) {
        kl_reflector_failure f = {what, code, message, persistent, r->watched};
        r->sink.failed(r->ud, &f);
    }
}

/* A request the failing ones were retrying got its answer. */
static void note_recovered(kl_reflector *r) {
    if (!r->down_since) return;
    kl_log(KL_LOG_INFO, r->o.name, "%s recovered after %.1f s and %lu %s", r->down_what,
           now(r) - r->down_since, r->down_failures, r->down_failures == 1 ? "retry" : "retries");
    r->down_since = 0;
    r->down_failures = 0;
    free(r->refusal);
    r->refusal = NULL;
}

/* Takes transition c, to BACKOFF, waiting a backoff step before next. */
static void backoff_then(kl_reflector *r, cause c, cause next, const char *why) {
    r->stats.errors++;
    step s = {.wait = kl_backoff_next(&r->backoff, now(r), uniform(r)), .next = next, .why = why};
    transition(r, c, &s);
}

/* A server's Retry-After is honoured but bounded, so a hostile value cannot
 * park the reflector for hours. */
static void retry_after_then(kl_reflector *r, cause c, double secs, cause next, const char *why) {
    r->stats.errors++;
    if (secs < 0) secs = kl_backoff_next(&r->backoff, now(r), uniform(r));
    if (secs > RETRY_AFTER_MAX) secs = RETRY_AFTER_MAX;
    step s = {.wait = secs, .next = next, .why = why};
    transition(r, c, &s);
}

/* The state a relist leads to after a BACKOFF. */
static cause relist_after_wait(const kl_reflector *r) { return r->o.watch_list ? C_WAIT_WATCHLIST : C_WAIT_LIST; }

/* ---- LIST ------------------------------------------------------------- */

static void append_page(kl_list *acc, size_t *cap, kl_list *page) {
    if (page->n) {
        acc->items = kl_buf_grow(acc->items, cap, acc->n + page->n, sizeof *acc->items, 256);
        memcpy(acc->items + acc->n, page->items, page->n * sizeof *acc->items);
        acc->n += page->n;
        free(page->items);
        page->items = NULL;
        page->n = 0;
    }
    free(acc->rv);
    acc->rv = page->rv;
    page->rv = NULL;
    /* The pages of one LIST are all read by one reflector with one prune. */
    acc->transformed = page->transformed;
}

static int is_too_large_rv(const kl_http_resp *resp, const char *message) {
    return resp->status == 504 || (message && strstr(message, "Too large resource version"));
}

/* One line saying why a request failed, and the code to act on: the
 * Status of a KL_HTTP_STATUS answer, else -1 and the outcome in words (a
 * timeout after a 200, say, where "HTTP 200" would mislead). Returns where
 * in buf the server's own message begins (0: the line is all klua's). */
static size_t status_words(const kl_http_resp *resp, char *buf, size_t size, int *code) {
    char *reason = NULL, *message = NULL;
    size_t off = 0;
    if (resp->outcome != KL_HTTP_STATUS) {
        *code = -1;
        snprintf(buf, size, "%s", resp->error ? resp->error : kl_http_outcome_name(resp->outcome));
        return 0;
    }
    *code = (int)resp->status;
    if (resp->body && kl_decode_status(resp->body, resp->body_len, code, &reason, &message) == 0 && message) {
        int n = snprintf(buf, size, "%ld %.100s: ", resp->status, reason ? reason : "");
        off = n > 0 && (size_t)n < size ? (size_t)n : 0;
        snprintf(buf + off, size - off, "%s", message);
    } else {
        snprintf(buf, size, "HTTP %ld", resp->status);
    }
    if (*code <= 0) *code = (int)resp->status;
    free(reason);
    free(message);
    return off;
}

/* With --serialization cbor, as KEP-4222 asks of clients: CBOR preferred,
 * JSON accepted from a server that does not serve it. A watch asks for a
 * CBOR Sequence, the type kube-apiserver answers it with (its
 * handlers/watch.go serves application/cbor-seq even to a client that asked
 * for application/cbor). */
#define ACCEPT_CBOR_LIST "application/cbor, application/json;q=0.9"
#define ACCEPT_CBOR_WATCH "application/cbor-seq, application/json;q=0.9"

/* The Accept header of a LIST or WATCH (meta: the metadata-only form of it). */
static const char *accept_of(const kl_reflector *r, const char *meta, int watch) {
    if (r->o.metadata_only) return meta;
    if (r->o.table) return ACCEPT_TABLE;
    if (r->o.cbor) return watch ? ACCEPT_CBOR_WATCH : ACCEPT_CBOR_LIST;
    return NULL;
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

static const char *list_rv(const kl_reflector *r) { return r->rv_unavailable ? "" : (r->rv ? r->rv : "0"); }

static void on_list_started(void *ud, const char *content_type);
static size_t on_list_data(void *ud, const char *p, size_t n);
static void on_list_done(void *ud, const kl_http_resp *resp);

/* Requests the LIST state's next page (its first when page is 0). */
static void request_page(kl_reflector *r) {
    list_st *l = &r->st.list;
    const char *rv = list_rv(r);
    int limit = l->unpaged ? 0 : (r->o.page_size > 0 ? r->o.page_size : 500);
    if (l->page == 0) {
        r->stats.lists++;
        if (r->rv) r->stats.relists++;
        kl_vlog(2, r->o.name, "LIST from resourceVersion \"%s\"%s", rv, l->unpaged ? ", unpaged" : "");
    }
    char *url = kl_listwatch_url_list(&r->target, limit, rv, l->page ? l->cont : NULL);
    kl_http_opts ho = {.method = "GET", .path = url, .accept = accept_of(r, ACCEPT_META_LIST, 0),
                       .timeout_ms = (long)(r->o.list_timeout * 1000)};
    kl_list_stream_init(&l->stream, &l->body, KL_FRAME_MAX_DEFAULT);
    if (r->o.table) kl_list_stream_rows(&l->stream);
    if (r->prune) kl_list_stream_prune(&l->stream, r->prune);
    r->req = r->env.start(r->env.ud, &ho,
                          (kl_http_cb){.data = on_list_data, .started = on_list_started, .done = on_list_done}, r);
    free(url);
}

static void enter_list(kl_reflector *r, const step *s) {
    list_st *l = &r->st.list;
    memset(l, 0, sizeof *l);
    /* A retry after an expired continue token or resourceVersion keeps the
     * paging of the LIST it retries, as client-go's pager does. */
    l->unpaged = s && s->keep_paging ? s->unpaged : !list_pages(r, list_rv(r));
    request_page(r);
}

static void leave_list(kl_reflector *r) {
    list_st *l = &r->st.list;
    if (r->req) r->env.abort(r->env.ud, r->req);
    r->req = NULL;
    kl_list_stream_free(&l->stream);
    kl_list_clear(&l->body);
    kl_list_clear(&l->acc);
    free(l->cont);
    free(l->bad_type);
}

static void list_complete(kl_reflector *r) {
    list_st *l = &r->st.list;
    kl_vlog(2, r->o.name, "LIST complete: %zu objects at resourceVersion %s", l->acc.n,
            l->acc.rv ? l->acc.rv : "?");
    int stale = r->expired_rv && l->acc.rv && strcmp(r->expired_rv, l->acc.rv) == 0;
    forget_expired_rv(r);
    if (stale && !r->rv_unavailable) {
        /* The state a watch from this very rv just refused with 410: a LIST
         * with a limit at rv N is etcd's snapshot exactly at N, which a new
         * watch cache (an API server restarted) no longer holds. Watching
         * from it again would end the same way, and so, through any path
         * that lists at N (a paged or unpaged relist, the LIST a refused
         * WatchList falls back to), would every cycle after: list the
         * latest state instead. client-go's relist after a LIST's 410
         * (isLastSyncResourceVersionUnavailable) does the same. */
        kl_vlog(2, r->o.name, "resourceVersion %s was listed again after its watch expired; "
                "listing the latest state", l->acc.rv);
        r->rv_unavailable = 1;
        transition(r, C_LIST_STALE, NULL);
        return;
    }
    set_rv(r, l->acc.rv);
    r->rv_unavailable = 0;
    kl_list done = l->acc;
    memset(&l->acc, 0, sizeof l->acc);
    l->acc_cap = 0;
    int rc = r->sink.replace(r->ud, &done);
    kl_list_clear(&done);
    if (rc < 0) {
        backoff_then(r, C_LIST_ERROR, C_WAIT_LIST, "the cache refused an object of the list");
        return;
    }
    if (rc) r->sink_full = 1;
    r->heard_at = now(r);
    transition(r, C_LIST_OK, NULL);
}

/* Why a body of content_type is not read, for the log and the LIST's
 * error: "response is T, not JSON...", or, without a type, where to look. */
static void media_refusal(char *out, size_t n, const char *content_type, const char *or_cbor) {
    if (content_type && content_type[0])
        snprintf(out, n, "response is %.200s, not JSON%s", content_type, or_cbor);
    else
        snprintf(out, n, "response has no Content-Type, so klua cannot tell JSON%s from anything else: "
                         "kube-apiserver names every body's type, so a proxy between klua and it "
                         "likely dropped the header",
                 or_cbor);
}

static void on_list_started(void *ud, const char *content_type) {
    kl_reflector *r = ud;
    /* Every body klua reads decodes a LIST with kl_list_stream (media.h);
     * a CBOR body is one data item, its items transcoded as they arrive. */
    const kl_media *m = kl_media_of(content_type);
    if (!m || m->decoding == KL_DECODING_NONE) r->st.list.bad_type = kl_xstrdup(content_type ? content_type : "");
    else if (m->decoding == KL_DECODING_CBOR) kl_list_stream_cbor(&r->st.list.stream);
}

/* A body of another type than JSON or CBOR is not read at all: a 300 MB protobuf
 * LIST is abandoned at its first bytes. */
static size_t on_list_data(void *ud, const char *p, size_t n) {
    kl_reflector *r = ud;
    r->stats.bytes += n;
    if (r->st.list.bad_type) return 0;
    return kl_list_stream_feed(&r->st.list.stream, p, n) < 0 ? 0 : n;
}

static void list_page_done(kl_reflector *r) {
    list_st *l = &r->st.list;
    note_recovered(r);
    kl_list page = l->body;
    memset(&l->body, 0, sizeof l->body);
    kl_vlog(2, r->o.name, "LIST page %d: %zu objects, resourceVersion %s%s", l->page, page.n,
            page.rv ? page.rv : "?", page.cont && page.cont[0] ? ", more to come" : "");
    int more = page.cont && page.cont[0] && !l->unpaged;
    if (more && l->page == 0 && !r->rv) r->paginated = 1;
    free(l->cont);
    l->cont = more ? page.cont : NULL;
    if (more) page.cont = NULL;
    append_page(&l->acc, &l->acc_cap, &page);
    kl_list_clear(&page);
    if (more) {
        l->page++;
        request_page(r);
    } else {
        list_complete(r);
    }
}

/* A LIST got 410 (or, too_large, the rv is beyond the server's): its
 * continue token or its resourceVersion expired, and the LIST is asked
 * again at once. Returns 0, leaving the state alone, when neither applies
 * (a LIST from "" that gets 410). */
static int list_expired(kl_reflector *r, int code, int too_large, const char *err) {
    list_st *l = &r->st.list;
    if (code == 410 && l->page > 0) {
        kl_vlog(2, r->o.name, "continue token expired (%s): listing again in one piece", err);
        step unpaged = {.keep_paging = 1, .unpaged = 1};
        transition(r, C_LIST_CONTINUE_EXPIRED, &unpaged);
        return 1;
    }
    if ((code == 410 || too_large) && r->rv && r->rv[0] && !r->rv_unavailable) {
        kl_vlog(2, r->o.name, "resourceVersion %s is unavailable (%s): listing the latest state",
                r->rv, err);
        r->rv_unavailable = 1;
        step same = {.keep_paging = 1, .unpaged = l->unpaged};
        transition(r, C_LIST_RV_GONE, &same);
        return 1;
    }
    return 0;
}

static void list_failed(kl_reflector *r, const kl_http_resp *resp) {
    char err[600];
    int code;
    const char *message = err + status_words(resp, err, sizeof err, &code);
    if (list_expired(r, code, is_too_large_rv(resp, err), err)) {
        /* listed again at once */
    } else if (code == 429 || resp->retry_after >= 0) {
        note_failure(r, "LIST", code, err, message);
        retry_after_then(r, C_LIST_RETRY_AFTER, resp->retry_after, C_WAIT_LIST, err);
    } else if (code == 404) {
        /* Not served (a CRD deleted): as client-go, the cache then holds
         * none of it either (deletes it missed are delivered, their final
         * state unknown) and a wait for the sync ends. Once it is back, its
         * resourceVersions start anew, so the LIST that finds it asks for
         * the latest state. */
        note_failure(r, "LIST", code, err, message);
        r->rv_unavailable = 1;
        kl_list none;
        memset(&none, 0, sizeof none);
        none.remaining = -1;
        if (r->sink.replace(r->ud, &none)) r->sink_full = 1;
        backoff_then(r, C_LIST_NOT_FOUND, C_WAIT_LIST, err);
    } else {
        note_failure(r, "LIST", code, err, message);
        backoff_then(r, C_LIST_ERROR, C_WAIT_LIST, err);
    }
}

/* A 2xx LIST whose body is not the list asked for. Read as a list, it
 * would replace the cache with nothing, and every object would reach the
 * handlers as deleted: the cache is kept, and the LIST is asked again
 * after a backoff. */
static void list_refused(kl_reflector *r, const char *err) {
    kl_log(KL_LOG_ERROR, r->o.name, "LIST failed: %s; the cache is kept", err);
    backoff_then(r, C_LIST_ERROR, C_WAIT_LIST, err);
}

/* A 2xx LIST whose body is a Status (a proxy's, or a server's that wrote
 * its error with the wrong code). client-go's REST client makes such a
 * body the request's error (Result.Into, errors.FromObject), so it acts as
 * its code would: a 410 lists again at once, from "" (or unpaged, for an
 * expired continue token); any other code backs off. */
static void list_status(kl_reflector *r, long status, int code, const char *reason, const char *message) {
    char err[600];
    snprintf(err, sizeof err, "the server answered %ld with a Status, not a list: %d %s%s%s", status, code,
             reason ? reason : "", message ? ": " : "", message ? message : "");
    kl_log(KL_LOG_ERROR, r->o.name, "LIST failed: %s; the cache is kept", err);
    if (code == 410 && list_expired(r, code, 0, err)) r->stats.errors++;
    else backoff_then(r, C_LIST_ERROR, C_WAIT_LIST, err);
}

/* A 2xx LIST read to its end: a page of the list asked for, or refused. */
static void list_answered(kl_reflector *r, long status) {
    list_st *l = &r->st.list;
    char err[600];
    int code;
    char *reason = NULL, *message = NULL;
    if (kl_list_stream_status(&l->stream, &code, &reason, &message) == 0) {
        list_status(r, status, code, reason, message);
    } else if (kl_list_check(&l->body, r->o.kind, r->o.table, err, sizeof err) < 0) {
        list_refused(r, err);
    } else {
        kl_list_stream_free(&l->stream);
        list_page_done(r);
    }
    free(reason);
    free(message);
}

static void on_list_done(void *ud, const kl_http_resp *resp) {
    kl_reflector *r = ud;
    list_st *l = &r->st.list;
    r->req = NULL;
    char err[600];
    if (l->bad_type) {
        char why[400];
        media_refusal(why, sizeof why, l->bad_type, r->o.cbor ? " or CBOR" : "");
        snprintf(err, sizeof err, "the %s", why);
        list_refused(r, err);
    } else if (l->stream.failed || (resp->outcome == KL_HTTP_OK && kl_list_stream_finish(&l->stream) < 0)) {
        snprintf(err, sizeof err, "%s", l->stream.err);
        list_refused(r, err);
    } else if (resp->outcome == KL_HTTP_OK) {
        list_answered(r, resp->status);
    } else {
        kl_list_stream_free(&l->stream);
        list_failed(r, resp);
    }
}

/* ---- WATCH and WATCHLIST ---------------------------------------------- */

static int in_watch(const kl_reflector *r) { return r->state == WATCH || r->state == WATCHLIST; }

static void on_frame(void *ud, kl_blob *b) {
    kl_reflector *r = ud;
    r->stats.frames++;
    KL_VLOG(5, r->o.name, "frame of %zu bytes", b->len);
    kl_ring_push(&r->frames, &b);
}

/* A CBOR item that cannot be read is queued as a NULL frame, so that the
 * events before it are delivered first, as a malformed JSON event is met
 * in its turn. */
static void on_malformed(void *ud, const char *why) {
    kl_reflector *r = ud;
    snprintf(r->st.watch.malformed, sizeof r->st.watch.malformed, "%s", why);
    kl_blob *none = NULL;
    kl_ring_push(&r->frames, &none);
}

static void end_watch_now(kl_reflector *r, end_action a);

static void malformed_met(kl_reflector *r) {
    r->stats.malformed++;
    kl_log(KL_LOG_ERROR, r->o.name, "watch event is not CBOR klua reads: %s; relisting", r->st.watch.malformed);
    end_watch_now(r, END_CORRUPT);
}

static void on_oversize(void *ud, size_t max) {
    kl_reflector *r = ud;
    r->stats.oversize++;
    kl_log(KL_LOG_ERROR, r->o.name, "watch event larger than %zu bytes refused; relisting", max);
    r->st.watch.ending = 1;
    r->st.watch.action = END_CORRUPT;
}

static size_t on_watch_data(void *ud, const char *p, size_t n) {
    kl_reflector *r = ud;
    watch_st *w = &r->st.watch;
    w->last_activity = now(r);
    r->stats.bytes += n;
    if (w->ending) return 0;
    if (kl_ring_len(&r->frames) >= FRAMES_HIGH) {
        w->paused = 1;
        return KL_HTTP_PAUSE;
    }
    if (kl_framer_feed(&r->framer, p, n) < 0) {
        w->ending = 1;
        w->action = END_CORRUPT;
    }
    schedule_pump(r);
    /* Returning less than n makes curl end the transfer: the stream is
     * abandoned and the end action runs once queued frames are delivered. */
    return w->ending ? 0 : n;
}

static void end_watch_now(kl_reflector *r, end_action a) {
    watch_st *w = &r->st.watch;
    w->ending = 1;
    w->action = a;
    if (r->req) {
        r->env.abort(r->env.ud, r->req);
        r->req = NULL;
        w->finished = 1;
    }
}

static void deliver_event(kl_reflector *r, kl_event *ev) {
    watch_st *w = &r->st.watch;
    w->events++;
    r->stats.events++;
    /* The time of the latest read, taken per read anyway: no clock read per event. */
    r->last_event_at = w->last_activity;
    if (r->state == WATCH) r->heard_at = w->last_activity;
    if (ev->type == KL_EV_ADDED) r->stats.added++;
    else if (ev->type == KL_EV_MODIFIED) r->stats.modified++;
    else if (ev->type == KL_EV_DELETED) r->stats.deleted++;
    /* An initial event's rv is its object's last change, not a point the
     * cache has reached: as client-go, the reflector's rv stays where it
     * was until the initial-events-end bookmark, so a fallback LIST asks
     * from there and the partial state is dropped. */
    if (r->state == WATCHLIST) {
        /* The initial state comes as ADDED events only. */
        if (ev->type == KL_EV_ADDED) {
            if (r->sink.initial && r->sink.initial(r->ud, ev) < 0) {
                end_watch_now(r, END_CORRUPT);
                return;
            }
            w->acc.transformed = r->sink.initial != NULL;
            w->acc.items = kl_buf_grow(w->acc.items, &w->acc_cap, w->acc.n + 1, sizeof *w->acc.items, 256);
            w->acc.items[w->acc.n++] = ev->obj;
            memset(&ev->obj, 0, sizeof ev->obj);
        }
        return;
    }
    set_rv(r, ev->obj.rv);
    int rc = r->sink.event(r->ud, ev);
    if (rc < 0) end_watch_now(r, END_CORRUPT);
    else if (rc) r->sink_full = 1;
}

static void initial_events_end(kl_reflector *r, const char *rv) {
    watch_st *w = &r->st.watch;
    set_rv(r, rv);
    free(w->acc.rv);
    w->acc.rv = rv ? kl_xstrdup(rv) : NULL;
    kl_vlog(2, r->o.name, "initial events end at resourceVersion %s: %zu objects", rv ? rv : "?", w->acc.n);
    kl_list done = w->acc;
    memset(&w->acc, 0, sizeof w->acc);
    w->acc_cap = 0;
    r->rv_unavailable = 0;
    forget_expired_rv(r);
    int rc = r->sink.replace(r->ud, &done);
    kl_list_clear(&done);
    if (rc < 0) {
        end_watch_now(r, END_CORRUPT);
        return;
    }
    if (rc) r->sink_full = 1;
    r->heard_at = w->last_activity;
    transition(r, C_WL_SYNCED, NULL);
}

static void handle_frame(kl_reflector *r, kl_blob *frame) {
    kl_event ev;
    char err[512];
    memset(&ev, 0, sizeof ev);
    int rc = r->o.table ? kl_decode_table_event(frame, r->o.kind, &ev, err, sizeof err)
                        : kl_decode_event(frame, r->o.kind, &ev, err, sizeof err);
    if (rc < 0) {
        r->stats.malformed++;
        kl_log(KL_LOG_ERROR, r->o.name, "%s; relisting", err);
        end_watch_now(r, END_CORRUPT);
    } else if (ev.type == KL_EV_BOOKMARK) {
        r->stats.bookmarks++;
        r->st.watch.events++;
        kl_vlog(2, r->o.name, "BOOKMARK at resourceVersion %s", ev.obj.rv ? ev.obj.rv : "");
        if (r->state == WATCH) {
            set_rv(r, ev.obj.rv);
            r->heard_at = r->st.watch.last_activity;
        } else if (ev.initial_events_end) {
            initial_events_end(r, ev.obj.rv);
        }
    } else if (ev.type == KL_EV_ERROR) {
        int gone = ev.code == 410;
        kl_vlog(2, r->o.name, "watch ERROR %d %s: %s%s", ev.code, ev.reason ? ev.reason : "",
                ev.message ? ev.message : "", gone ? "; relisting" : "");
        if (!gone) kl_log(KL_LOG_WARN, r->o.name, "watch error %d: %s", ev.code, ev.message ? ev.message : "");
        snprintf(r->st.watch.end_why, sizeof r->st.watch.end_why, "ERROR %d: %s", ev.code,
                 ev.message ? ev.message : "");
        end_watch_now(r, gone ? END_RELIST : END_ERROR);
    } else {
        char key[512];
        KL_VLOG(5, r->o.name, "decoded %s %.*s at resourceVersion %s", kl_ev_type_name(ev.type),
                (int)kl_obj_key(&ev.obj, key, sizeof key), key, ev.obj.rv);
        deliver_event(r, &ev);
    }
    kl_event_clear(&ev);
}

static void pump(kl_loop *loop, void *ud) {
    (void)loop;
    kl_reflector *r = ud;
    r->pump_id = 0;
    if (!in_watch(r)) return;
    watch_st *w = &r->st.watch;
    kl_blob *b;
    for (int n = 0; n < KL_LOOP_BATCH && !r->sink_full && kl_ring_pop(&r->frames, &b); n++) {
        if (!w->ending && b) handle_frame(r, b);
        else if (!w->ending) malformed_met(r);
        kl_blob_unref(b);
    }
    if (w->ending) frames_drop(r);
    if (w->paused && kl_ring_len(&r->frames) < FRAMES_LOW && r->req) {
        w->paused = 0;
        r->env.resume(r->env.ud, r->req);
    }
    if (kl_ring_len(&r->frames) && !r->sink_full) schedule_pump(r);
    if (!kl_ring_len(&r->frames) && w->finished) watch_over(r);
}

static void schedule_pump(kl_reflector *r) {
    if (!r->pump_id) r->pump_id = r->env.defer(r->env.ud, pump, r);
}

void kl_reflector_set_prune(kl_reflector *r, kl_prune *p) { r->prune = p; }

void kl_reflector_kick(kl_reflector *r) {
    r->sink_full = 0;
    if (in_watch(r) && (kl_ring_len(&r->frames) || r->st.watch.finished)) schedule_pump(r);
}

static double idle_limit(const kl_reflector *r) { return r->o.idle_timeout > 0 ? r->o.idle_timeout : 150; }

static void on_idle_check(kl_loop *loop, void *ud) {
    (void)loop;
    kl_reflector *r = ud;
    watch_st *w = &r->st.watch;
    w->idle_timer = 0;
    if (w->finished) return;
    double quiet = now(r) - w->last_activity;
    if (quiet < idle_limit(r) || w->paused) {
        w->idle_timer = r->env.after(r->env.ud, idle_limit(r) - (w->paused ? 0 : quiet) + 0.01, on_idle_check, r);
        return;
    }
    r->stats.idle_restarts++;
    kl_log(KL_LOG_WARN, r->o.name, "watch silent for %.0f s; restarting it", quiet);
    end_watch_now(r, END_IDLE);
    if (!kl_ring_len(&r->frames)) watch_over(r);
}

static double watch_list_deadline(const kl_reflector *r) {
    return r->o.watch_list_deadline > 0 ? r->o.watch_list_deadline : 10;
}

/* The deadline measures progress, not the whole initial state: at
 * KEP-3157's 5,000 nodes the initial-events-end bookmark comes 30-60 s
 * after the request, and a stream that delivers runs to the watch's own
 * timeout (and the idle limit). Only a stream that has delivered nothing
 * is dropped for a LIST. */
static void on_deadline(kl_loop *loop, void *ud) {
    (void)loop;
    kl_reflector *r = ud;
    r->st.watch.deadline_timer = 0;
    if (r->st.watch.events || kl_ring_len(&r->frames)) return;
    kl_log(KL_LOG_WARN, r->o.name, "no initial event within %g s of the watch-list request; listing instead",
           watch_list_deadline(r));
    end_watch_now(r, END_FALLBACK);
    frames_drop(r);
    watch_over(r);
}

/* A watch answered in another type than JSON or a CBOR Sequence (a
 * protobuf stream, a proxy's page, application/cbor, which client-go's
 * watch refuses as one item only) is refused before a byte of it is read,
 * as a malformed stream is. */
static void on_watch_started(void *ud, const char *content_type) {
    kl_reflector *r = ud;
    /* Every stream klua reads is framed by r->framer (media.h), a CBOR
     * Sequence item by item (wire/cbor.h). */
    const kl_media *m = kl_media_of(content_type);
    if (m && m->framing != KL_FRAMING_NONE) {
        kl_framer_cbor(&r->framer, m->framing == KL_FRAMING_CBOR_SEQ);
        note_recovered(r);
        r->watched = 1;
        return;
    }
    r->stats.malformed++;
    char why[400];
    media_refusal(why, sizeof why, content_type, r->o.cbor ? " or a CBOR Sequence" : "");
    kl_log(KL_LOG_ERROR, r->o.name, "the watch %s; relisting", why);
    r->st.watch.ending = 1;
    r->st.watch.action = END_CORRUPT;
}

/* Records how the request ended; the frames it delivered are handled
 * first, then watch_over decides what comes next. */
static void on_watch_done(void *ud, const kl_http_resp *resp) {
    kl_reflector *r = ud;
    watch_st *w = &r->st.watch;
    r->req = NULL;
    w->finished = 1;
    w->retry_after = resp->retry_after;
    if (resp->outcome == KL_HTTP_OK || (resp->outcome == KL_HTTP_TIMEOUT && resp->status)) {
        /* Ended by the server's timeout or, failing that, by klua's own. */
        w->end_code = 0;
    } else {
        w->end_message = status_words(resp, w->end_why, sizeof w->end_why, &w->end_code);
    }
    if (!kl_ring_len(&r->frames)) watch_over(r);
    else schedule_pump(r);
}

/* How a stream that ended by itself ended. A WatchList request refused
 * with an HTTP error that is not 410 or 429 (a server without the WatchList
 * feature answers 422, and client-go falls back to LIST on any error but a
 * refused connection or 429) is not an outage of the watch. */
static end_action classify_end(kl_reflector *r) {
    watch_st *w = &r->st.watch;
    if (w->end_code == 0) {
        if (now(r) - w->started < 1.0 && w->events == 0) {
            kl_vlog(2, r->o.name, "watch ended in under a second without events");
            return END_BACKOFF;
        }
        kl_vlog(2, r->o.name, "watch ended after %lu events", w->events);
        return END_REWATCH;
    }
    /* A stream cut after it made progress is resumed at once, as a clean
     * end is; only a watch that achieved nothing waits. */
    if (w->end_code == 410 || (w->end_code == -1 && w->events > 0)) {
        kl_vlog(2, r->o.name, "watch failed: %s", w->end_why);
        return w->end_code == 410 ? END_RELIST : END_REWATCH;
    }
    int retry = w->end_code == 429 || w->retry_after >= 0;
    if (r->state == WATCHLIST && w->end_code > 0 && !retry) return END_REFUSED;
    note_failure(r, "watch", w->end_code, w->end_why, w->end_why + w->end_message);
    if (w->end_code == 404) return END_GONE;
    if (retry) return END_RETRY;
    return END_BACKOFF;
}

/* By default (KL_WATCH_LIST_AUTO) a server that shows it does not serve
 * WatchList is listed from then on, rather than asked again at every relist
 * as client-go does: kube-apiserver 1.33 turned the feature off by default
 * (1.32 and 1.34 have it on) and answers 422 Invalid ("sendInitialEvents is
 * forbidden for watch unless the WatchList feature gate is enabled"); a
 * server older than sendInitialEvents answers 422 too (resourceVersionMatch
 * is forbidden for a plain watch), and one that ignores both parameters
 * streams its state and never the initial-events-end bookmark. */
static void watch_list_unserved(kl_reflector *r, cause c, const char *why) {
    kl_vlog(2, r->o.name, "the server does not serve WatchList (%s); listing%s", why,
           r->o.watch_list == KL_WATCH_LIST_AUTO ? " from now on (--watch-list=true tries it at every relist)"
                                                 : " instead");
    if (r->o.watch_list == KL_WATCH_LIST_AUTO) r->o.watch_list = KL_WATCH_LIST_OFF;
    transition(r, c, NULL);
}

/* A WATCHLIST ended before its initial-events-end bookmark. */
static void watch_list_over(kl_reflector *r, end_action a) {
    watch_st *w = &r->st.watch;
    int invalid = w->end_code == 400 || w->end_code == 422;
    /* Its resourceVersion expired or is beyond the server's (a server
     * restored from an older etcd): as client-go, ask for the latest state. */
    int too_large = w->end_code == 504 || strstr(w->end_why, "Too large resource version");
    if (a == END_RELIST || too_large) r->rv_unavailable = 1;
    if (too_large && a != END_RELIST) {
        backoff_then(r, C_WL_RETRY, C_WAIT_WATCHLIST, "the resourceVersion is beyond the server's");
        return;
    }
    if (a == END_REFUSED && invalid && r->o.watch_list == KL_WATCH_LIST_AUTO) {
        watch_list_unserved(r, C_WL_UNSERVED, w->end_why);
        return;
    }
    if (a == END_REWATCH && w->end_code == 0) {
        watch_list_unserved(r, C_WL_NO_BOOKMARK, "the stream ended without the initial-events-end bookmark");
        return;
    }
    switch (a) {
    case END_REFUSED:
    case END_ERROR:
    case END_GONE:
        kl_log(KL_LOG_INFO, r->o.name, "WatchList request refused (%s); listing instead", w->end_why);
        transition(r, C_WL_REFUSED, NULL);
        break;
    case END_CORRUPT:
        backoff_then(r, C_WL_CORRUPT, C_WAIT_LIST, "the watch stream could not be read");
        break;
    case END_FALLBACK:
        transition(r, C_WL_DEADLINE, NULL);
        break;
    case END_RETRY:
        retry_after_then(r, C_WL_RETRY_AFTER, w->retry_after, C_WAIT_WATCHLIST, "the server asked to retry later");
        break;
    case END_RELIST:
        r->stats.relists++;
        if (w->events) transition(r, C_WL_EXPIRED, NULL);
        else backoff_then(r, C_WL_EXPIRED_AT_ONCE, C_WAIT_WATCHLIST,
                          "the resourceVersion expired before the watch delivered anything");
        break;
    case END_REWATCH:
    case END_IDLE:
    case END_BACKOFF:
        /* The initial state was cut short: start it again, after a pause. */
        backoff_then(r, C_WL_RETRY, C_WAIT_WATCHLIST, "watch failed");
        break;
    }
}

/* A WATCH ended. A server that answers every watch with bytes klua cannot
 * read, or with 410 before anything else, would otherwise be met with a
 * tight loop of relists; as in client-go, such relists wait a backoff. */
static void watch_stream_over(kl_reflector *r, end_action a) {
    watch_st *w = &r->st.watch;
    if (a == END_RELIST || a == END_CORRUPT || a == END_GONE) r->stats.relists += r->o.watch_list;
    switch (a) {
    case END_REWATCH:
        r->stats.rewatches++;
        transition(r, C_WATCH_END, NULL);
        break;
    case END_IDLE:
        r->stats.rewatches++;
        transition(r, C_WATCH_IDLE, NULL);
        break;
    case END_BACKOFF:
    case END_ERROR:
    case END_REFUSED:
    case END_FALLBACK:
        backoff_then(r, C_WATCH_FAIL, C_WAIT_WATCH, "watch failed");
        break;
    case END_RETRY:
        retry_after_then(r, C_WATCH_RETRY_AFTER, w->retry_after, C_WAIT_WATCH, "the server asked to retry later");
        break;
    case END_CORRUPT:
        backoff_then(r, C_WATCH_CORRUPT, relist_after_wait(r), "the watch stream could not be read");
        break;
    case END_GONE:
        r->rv_unavailable = 1;
        backoff_then(r, C_WATCH_NOT_FOUND, relist_after_wait(r), "the resource is not served");
        break;
    case END_RELIST:
        if (w->events == 0) {
            forget_expired_rv(r);
            if (r->rv) r->expired_rv = kl_xstrdup(r->rv);
            backoff_then(r, C_WATCH_EXPIRED_AT_ONCE, relist_after_wait(r),
                         "the resourceVersion expired before the watch delivered anything");
        } else {
            transition(r, r->o.watch_list ? C_WATCH_EXPIRED_WL : C_WATCH_EXPIRED, NULL);
        }
        break;
    }
}

/* The stream ended and its frames are delivered (or dropped): next step. */
static void watch_over(kl_reflector *r) {
    if (!in_watch(r)) return;
    watch_st *w = &r->st.watch;
    cancel(r, &w->idle_timer);
    cancel(r, &w->deadline_timer);
    end_action a = w->ending ? w->action : classify_end(r);
    if (r->state == WATCHLIST) watch_list_over(r, a);
    else watch_stream_over(r, a);
}

static double watch_timeout(kl_reflector *r) {
    double lo = r->o.watch_timeout_min > 0 ? r->o.watch_timeout_min : 300;
    double hi = r->o.watch_timeout_max > lo ? r->o.watch_timeout_max : lo * 2;
    return lo + uniform(r) * (hi - lo);
}

static void enter_watch(kl_reflector *r) {
    watch_st *w = &r->st.watch;
    int initial = r->state == WATCHLIST;
    memset(w, 0, sizeof *w);
    r->stats.watches++;
    long timeout = (long)watch_timeout(r);
    if (initial) kl_vlog(2, r->o.name, "WATCH with initial events (timeout %ld s)", timeout);
    else kl_vlog(2, r->o.name, "WATCH from resourceVersion %s (timeout %ld s)", kl_reflector_rv(r), timeout);
    /* A watch-list asks for a state not older than the one the cache holds,
     * as client-go's (rewatchResourceVersion): the watch cache serves it
     * as soon as it is that fresh, where "" needs a consistent read. */
    const char *rv = initial && r->rv_unavailable ? "" : kl_reflector_rv(r);
    char *url = kl_listwatch_url_watch(&r->target, timeout, rv, initial);
    w->started = w->last_activity = now(r);
    /* The server ends the watch at timeoutSeconds; the same deadline, with
     * some grace, also holds on this side, so a server that trickles bytes
     * forever cannot keep a watch (and with it the cache) stale. */
    kl_http_opts ho = {.method = "GET", .path = url, .accept = accept_of(r, ACCEPT_META, 1),
                       .timeout_ms = (timeout + WATCH_GRACE) * 1000};
    r->req = r->env.start(r->env.ud, &ho,
                          (kl_http_cb){.data = on_watch_data, .started = on_watch_started, .done = on_watch_done}, r);
    free(url);
    w->idle_timer = r->env.after(r->env.ud, idle_limit(r), on_idle_check, r);
    if (initial) w->deadline_timer = r->env.after(r->env.ud, watch_list_deadline(r), on_deadline, r);
}

static void leave_watch(kl_reflector *r) {
    watch_st *w = &r->st.watch;
    cancel(r, &w->idle_timer);
    cancel(r, &w->deadline_timer);
    if (r->req) r->env.abort(r->env.ud, r->req);
    r->req = NULL;
    kl_framer_reset(&r->framer);
    frames_drop(r);
    kl_list_clear(&w->acc);
    w->acc_cap = 0;
}

/* ---- BACKOFF ---------------------------------------------------------- */

static void on_wait_over(kl_loop *loop, void *ud) {
    (void)loop;
    kl_reflector *r = ud;
    r->st.wait.timer = 0;
    transition(r, r->st.wait.next, NULL);
}

static void enter_backoff(kl_reflector *r, const step *s) {
    r->stats.backoffs++;
    r->st.wait.next = s->next;
    const char *next = s->next == C_WAIT_LIST ? "LIST" : s->next == C_WAIT_WATCHLIST ? "the watch-list" : "WATCH";
    kl_vlog(2, r->o.name, "waiting %.1f s before %s: %s", s->wait, next, s->why);
    r->st.wait.timer = r->env.after(r->env.ud, s->wait, on_wait_over, r);
}

/* ---- the one place the state changes ---------------------------------- */

static void leave(kl_reflector *r, cause c) {
    switch (r->state) {
    case LIST:
        leave_list(r);
        break;
    case WATCHLIST:
        if (c == C_WL_SYNCED) cancel(r, &r->st.watch.deadline_timer);
        else leave_watch(r);
        break;
    case WATCH:
        leave_watch(r);
        break;
    case BACKOFF:
        cancel(r, &r->st.wait.timer);
        break;
    case IDLE:
    case KL_REFLECTOR_NSTATES:
        break;
    }
}

/* Leaves the current state for table[c].to, which c must lead from; s
 * carries what the next state needs of the last (NULL: nothing). */
static void transition(kl_reflector *r, cause c, const step *s) {
    const kl_reflector_transition *t = &table[c];
    if (t->from != r->state) {
        kl_log(KL_LOG_ERROR, r->o.name, "reflector bug: \"%s\" does not lead from %s; aborting", t->when,
               state_names[r->state]);
        abort();
    }
    kl_vlog(2, r->o.name, "%s -> %s: %s", state_names[t->from], state_names[t->to], t->when);
    r->history[r->transitions++ % KL_REFLECTOR_HISTORY] = (kl_reflector_record){now(r), t};
    leave(r, c);
    r->state = t->to;
    switch (t->to) {
    case LIST:
        enter_list(r, s);
        break;
    case WATCHLIST:
        enter_watch(r);
        break;
    case WATCH:
        /* At the initial-events-end bookmark the same stream goes on. */
        if (c != C_WL_SYNCED) enter_watch(r);
        break;
    case BACKOFF:
        enter_backoff(r, s);
        break;
    case IDLE:
    case KL_REFLECTOR_NSTATES:
        break;
    }
}

/* ---- lifecycle -------------------------------------------------------- */

static double live_now(void *ud) {
    (void)ud;
    return kl_now();
}
static uint64_t live_after(void *ud, double delay, kl_loop_fn fn, void *arg) {
    return kl_loop_after(((live_env *)ud)->loop, delay, fn, arg);
}
static uint64_t live_defer(void *ud, kl_loop_fn fn, void *arg) { return kl_loop_defer(((live_env *)ud)->loop, fn, arg); }
static void live_cancel(void *ud, uint64_t id) { kl_loop_cancel(((live_env *)ud)->loop, id); }
static void *live_start(void *ud, const kl_http_opts *o, kl_http_cb cb, void *arg) {
    return kl_http_start(((live_env *)ud)->http, o, cb, arg);
}
static void live_abort(void *ud, void *req) {
    (void)ud;
    kl_http_cancel(req);
}
static void live_resume(void *ud, void *req) {
    (void)ud;
    kl_http_resume(req);
}

static char *dup_or_null(const char *s) { return s ? kl_xstrdup(s) : NULL; }

kl_reflector *kl_reflector_new_env(const kl_reflector_env *env, const kl_reflector_opts *o,
                                   kl_reflector_sink sink, void *ud) {
    kl_reflector *r = kl_xcalloc(1, sizeof *r);
    r->env = *env;
    r->o = *o;
    if (r->o.list_timeout <= 0) r->o.list_timeout = 300;
    /* kube-apiserver 1.32 and 1.33 refuse the Table form to a WatchList
     * request (watchListEndpointRestrictions, endpoints/handlers/get.go): it
     * answers 406, or whole objects without cells when the plain form is
     * acceptable too. A Table reflector lists and watches, as kubectl get -w. */
    if (r->o.table) r->o.watch_list = 0;
    r->o.name = r->owned.name = kl_xstrdup(o->name ? o->name : o->path);
    r->o.path = r->owned.path = kl_xstrdup(o->path);
    /* Metadata-only objects are PartialObjectMetadata whatever their resource. */
    r->o.kind = r->owned.kind = dup_or_null(o->metadata_only ? "PartialObjectMetadata" : o->kind);
    r->o.label_selector = r->owned.label_selector = dup_or_null(o->label_selector);
    r->o.field_selector = r->owned.field_selector = dup_or_null(o->field_selector);
    r->target = (kl_listwatch_target){r->o.path, r->o.label_selector, r->o.field_selector, r->o.table, NULL};
    r->sink = sink;
    r->ud = ud;
    r->state = IDLE;
    kl_backoff_init(&r->backoff);
    r->rng = (uint64_t)(uintptr_t)r ^ (uint64_t)(now(r) * 1e9) ^ 0x9e3779b97f4a7c15ULL;
    if (!r->rng) r->rng = 1;
    kl_ring_init(&r->frames, sizeof(kl_blob *));
    kl_framer_init(&r->framer, KL_FRAME_MAX_DEFAULT, (kl_framer_callbacks){on_frame, on_oversize, on_malformed}, r);
    return r;
}

kl_reflector *kl_reflector_new(kl_loop *loop, kl_http *http, const kl_reflector_opts *o,
                               kl_reflector_sink sink, void *ud) {
    kl_reflector_env env = {NULL, live_now, live_after, live_defer, live_cancel, live_start, live_abort, live_resume};
    kl_reflector *r = kl_reflector_new_env(&env, o, sink, ud);
    r->live = (live_env){loop, http};
    r->env.ud = &r->live;
    return r;
}

void kl_reflector_start(kl_reflector *r) {
    r->heard_at = now(r);
    transition(r, r->o.watch_list ? C_START_WATCHLIST : C_START, NULL);
}

void kl_reflector_free(kl_reflector *r) {
    if (!r) return;
    leave(r, C_COUNT);
    cancel(r, &r->pump_id);
    kl_framer_reset(&r->framer);
    frames_drop(r);
    kl_ring_free(&r->frames);
    free(r->rv);
    free(r->owned.name);
    free(r->owned.path);
    free(r->owned.kind);
    free(r->owned.label_selector);
    free(r->owned.field_selector);
    free(r->owned.shard_selector);
    free(r->expired_rv);
    free(r->refusal);
    free(r);
}
