/*
 * reflector.h - keeps one resource's local copy current: client-go's
 * Reflector, as a state machine on the event loop.
 *
 * Its states carry their own data (a LIST its pages, a WATCH its stream,
 * BACKOFF its timer and what follows it), and one function moves between
 * them, along this table, which is kl_reflector_transitions() printed
 * (spec/unit/reflector_spec.lua compares the two, and docs/architecture.md's):
 *
 * TRANSITIONS
 * IDLE       start                                            -> LIST       LIST("0")
 *            start, WatchList on (the default)                -> WATCHLIST  WATCH(initial events)
 * LIST       ok (the last page)                               -> WATCH      store.replace, WATCH(list rv)
 *            ok, at the rv whose watch got 410 at once        -> LIST       LIST("")
 *            410 (HTTP or Status) / too large at rv           -> LIST       LIST("") at once, same paging
 *            continue expired, page >= 2                      -> LIST       LIST(rv) unpaged
 *            404 (resource not served)                        -> BACKOFF    store.replace(nothing) -> LIST("")
 *            429 / Retry-After                                -> BACKOFF    at most 30 s -> LIST(rv)
 *            other error, not a list, refused                 -> BACKOFF    -> LIST(rv), cache kept
 * WATCHLIST  initial-events-end bookmark                      -> WATCH      store.replace, the same stream goes on
 *            HTTP error (not 410, 429), ERROR                 -> LIST       LIST(rv); the next relist tries again
 *            400 / 422, by default                            -> LIST       LIST(rv), and LIST from then on
 *            clean end without the bookmark                   -> LIST       LIST(rv); by default LIST from then on
 *            oversize / malformed frame, refused              -> BACKOFF    -> LIST(rv); the next relist tries again
 *            no event in --watch-list-deadline                -> LIST       LIST(rv); the next relist tries again
 *            cut, idle, connect error, timeout, rv too large  -> BACKOFF    -> WATCHLIST
 *            429 / Retry-After                                -> BACKOFF    at most 30 s -> WATCHLIST
 *            410 after events                                 -> WATCHLIST  WATCH(initial events)
 *            410 before any event                             -> BACKOFF    -> WATCHLIST
 * WATCH      clean end, timeoutSeconds + 5 s, cut             -> WATCH      WATCH(rv)
 *            silent past the idle limit                       -> WATCH      WATCH(rv)
 *            < 1 s without events, connect error, 5xx, ERROR  -> BACKOFF    -> WATCH(rv)
 *            429 / Retry-After                                -> BACKOFF    at most 30 s -> WATCH(rv)
 *            410 (HTTP or ERROR) after events                 -> LIST       LIST(rv)
 *            410 after events, WatchList on                   -> WATCHLIST  WATCH(initial events)
 *            410 before any event                             -> BACKOFF    -> LIST(rv) or WATCHLIST
 *            404 (resource not served)                        -> BACKOFF    -> LIST("") or WATCHLIST
 *            oversize / malformed frame, refused              -> BACKOFF    -> LIST(rv) or WATCHLIST
 *            cache drifted from the server (--verify-cache)   -> LIST       LIST("")
 *            cache drifted, WatchList on                      -> WATCHLIST  WATCH(initial events)
 *            shard selector changed (--shards)                -> LIST       LIST("")
 *            shard selector changed, WatchList on             -> WATCHLIST  WATCH(initial events)
 * BACKOFF    waited                                           -> LIST       LIST
 *            waited                                           -> WATCHLIST  WATCH(initial events)
 *            waited                                           -> WATCH      WATCH(rv)
 * END TRANSITIONS
 *
 * In WATCH an event goes to sink.event and moves rv; a BOOKMARK moves rv
 * (no event). In WATCHLIST the events are collected until the bookmark,
 * rv left alone. BACKOFF waits uniform in [d, 2d); d = 0.8 s doubling to
 * 30 s, reset after 2 minutes without a failure (cache/backoff.h).
 *
 * The first LIST asks for resourceVersion "0" (any, from the watch cache).
 * A relist at another rv asks for no limit unless page_size was set or the
 * first LIST came in pages (client-go's rule: kube-apiserver serves a
 * limit at rv N from etcd, exactly at N).
 *
 * Frames wait in a bounded queue between the socket and the sink; when the
 * sink reports it is full, the queue stops draining and, once the queue is
 * full too, the socket is paused. The reflector never gives up.
 */
#ifndef KLUA_REFLECTOR_H
#define KLUA_REFLECTOR_H

#include "wire/decode.h"
#include "wire/prune.h"
#include "conn/http.h"
#include "base/loop.h"

typedef struct kl_reflector kl_reflector;

/* A LIST or WATCH that failed and will be retried after a backoff: not a
 * 410 (which relists), nor a WatchList the server refused (which falls
 * back to LIST). Its strings live for the call. */
typedef struct kl_reflector_failure {
    const char *request; /* "LIST" or "watch" */
    int code;            /* the Status code, or -1 for no answer */
    const char *message; /* the server's message, or what happened instead */
    int persistent;      /* a 4xx the server gives until someone acts (a
                          * permission not granted, a selector it refuses) */
    int watched;         /* a watch of this reflector was accepted before */
} kl_reflector_failure;

/* Where the reflector's results go. Each call takes ownership of its
 * argument's contents and returns 0, 1 when the consumer is full (the
 * reflector then pauses until kl_reflector_kick), or -1 when it refused
 * them (an object its cache transform failed on): the LIST or the watch is
 * then dropped, "refused" in the table, and a relist follows a backoff. */
typedef struct kl_reflector_sink {
    /* A complete LIST (or WatchList initial state): the new full contents. */
    int (*replace)(void *ud, kl_list *list);
    /* One ADDED, MODIFIED or DELETED watch event. */
    int (*event)(void *ud, kl_event *ev);
    /* A failure, told before the backoff; NULL: not told. */
    void (*failed)(void *ud, const kl_reflector_failure *f);
    /* An initial event of a watch-list, before its object is kept for the
     * state that replace gets (marked transformed): the sink may change
     * the object while the event's parsed form is at hand. Returns 0, or
     * < 0 to refuse it, which ends the watch as a refused event does.
     * NULL: kept as it came. */
    int (*initial)(void *ud, kl_event *ev);
} kl_reflector_sink;

/* Whether a relist streams the initial state (a WATCH with sendInitialEvents,
 * KEP-3157) instead of a LIST. */
typedef enum kl_watch_list_mode {
    KL_WATCH_LIST_OFF,  /* LIST, then WATCH */
    KL_WATCH_LIST_ON,   /* at every relist; a refused one lists that once (client-go) */
    KL_WATCH_LIST_AUTO, /* as ON until the server shows that it does not serve it
                         * (400 or 422, or a stream that ends without the
                         * initial-events-end bookmark): LIST from then on */
} kl_watch_list_mode;

typedef struct kl_reflector_opts {
    const char *name;       /* for logs, e.g. "pods" or "pods -n team-a" */
    const char *path;       /* collection path, e.g. /api/v1/namespaces/x/pods */
    const char *kind;       /* expected kind of the objects, e.g. "Pod" */
    const char *label_selector, *field_selector; /* or NULL */
    int page_size;          /* LIST limit, on every LIST; 0 = 500, and none on
                             * relists at a resourceVersion */
    double idle_timeout;    /* a watch silent this long is restarted; 0 = 150 s */
    double watch_timeout_min, watch_timeout_max; /* 0 = [300, 600) */
    kl_watch_list_mode watch_list; /* not with table, which servers refuse it */
    double watch_list_deadline; /* 0 = 10 s */
    double list_timeout;    /* seconds a LIST may take; 0 = 300 s */
    int metadata_only;      /* ask for PartialObjectMetadata(List): names, labels,
                             * owners and the rest of metadata, not the objects */
    int cbor;               /* ask for CBOR (KEP-4222), JSON accepted too; not
                             * with metadata_only or table, which stay JSON */
    int table;              /* ask for the Table form with whole objects, as
                             * kubectl get does (includeObject=Object): each
                             * object's blob holds its Table row, cells and
                             * all, around it (kl_decode_row) */
} kl_reflector_opts;

/* What the reflector needs from outside: the time, timers, deferred work
 * and requests. kl_reflector_new takes them from the loop and the HTTP
 * client; the specs drive a fake clock and answer requests themselves.
 * Timer and deferred callbacks get a NULL loop. */
typedef struct kl_reflector_env {
    void *ud;
    double (*now)(void *ud);
    uint64_t (*after)(void *ud, double delay, kl_loop_fn fn, void *arg);
    uint64_t (*defer)(void *ud, kl_loop_fn fn, void *arg);
    void (*cancel)(void *ud, uint64_t id); /* of after or defer; 0 is ignored */
    /* As kl_http_start, kl_http_cancel and kl_http_resume. */
    void *(*start)(void *ud, const kl_http_opts *o, kl_http_cb cb, void *arg);
    void (*abort)(void *ud, void *req);
    void (*resume)(void *ud, void *req);
} kl_reflector_env;

typedef enum kl_reflector_state {
    KL_REFLECTOR_IDLE,      /* made, not started */
    KL_REFLECTOR_LIST,      /* a LIST, page by page */
    KL_REFLECTOR_WATCHLIST, /* a WATCH with initial events, before their end */
    KL_REFLECTOR_WATCH,     /* a WATCH from rv */
    KL_REFLECTOR_BACKOFF,   /* waiting before the next request */
    KL_REFLECTOR_NSTATES
} kl_reflector_state;

/* One row of the transition table. */
typedef struct kl_reflector_transition {
    kl_reflector_state from;
    const char *when; /* what happened */
    kl_reflector_state to;
    const char *then; /* what the reflector does */
} kl_reflector_transition;

/* Every transition the reflector can make, *n rows; it makes no other. */
const kl_reflector_transition *kl_reflector_transitions(size_t *n);
const char *kl_reflector_state_name(kl_reflector_state s);

typedef struct kl_reflector_stats {
    unsigned long lists, relists, watches, rewatches, events, bookmarks;
    unsigned long added, modified, deleted; /* events by type */
    unsigned long errors, backoffs, idle_restarts, oversize, malformed;
    unsigned long frames;     /* of watch streams, from the framer */
    unsigned long long bytes; /* of LIST and WATCH bodies, counted per read */
} kl_reflector_stats;

/* A transition made, and when (the env's clock). */
typedef struct kl_reflector_record {
    double at;
    const kl_reflector_transition *t;
} kl_reflector_record;

/* How many of its last transitions a reflector keeps for the live page. */
#define KL_REFLECTOR_HISTORY 16

kl_reflector *kl_reflector_new(kl_loop *loop, kl_http *http, const kl_reflector_opts *o,
                               kl_reflector_sink sink, void *ud);
/* The same on an environment of the caller's; env is copied. */
kl_reflector *kl_reflector_new_env(const kl_reflector_env *env, const kl_reflector_opts *o,
                                   kl_reflector_sink sink, void *ud);
void kl_reflector_start(kl_reflector *r);
void kl_reflector_free(kl_reflector *r);
/* The sink has room again. */
void kl_reflector_kick(kl_reflector *r);
/* Drops p's members from each LIST item as it is decoded
 * (kl_list_stream_prune): the sink's replace gets the items pruned. p stays
 * the caller's and must outlive r. Watch events are not pruned here. Call
 * before start. */
void kl_reflector_set_prune(kl_reflector *r, kl_prune *p);
/* Last resourceVersion seen (list, event or bookmark); "" before any. */
const char *kl_reflector_rv(const kl_reflector *r);
/* Seconds since its lists or watches began failing without an answer
 * since, at `now`; 0 while they succeed. */
double kl_reflector_failing_for(const kl_reflector *r, double now);
/* Why its lists or watches are refused, while the failure in progress is
 * a persistent one (kl_reflector_failure.persistent); else NULL. */
const char *kl_reflector_refusal(const kl_reflector *r);
const kl_reflector_stats *kl_reflector_get_stats(const kl_reflector *r);
kl_reflector_state kl_reflector_get_state(const kl_reflector *r);
/* When the read that carried its last watch event came (the env's clock);
 * 0 before any. */
double kl_reflector_last_event(const kl_reflector *r);
/* When it last had a sign its cache is current (the env's clock): a
 * completed LIST or WatchList, a watch event or a bookmark; before any,
 * when it started. A watch that stalls without ending stops moving it. */
double kl_reflector_last_heard(const kl_reflector *r);
/* The cache was found to differ from the server (an event missed): lists
 * the latest state again, through the table's drift transition. Only from
 * WATCH; returns 0 and does nothing in any other state (a LIST under way
 * brings the latest state anyway). why is logged. */
int kl_reflector_relist(kl_reflector *r, const char *why);

/* Lists and watches only what selector (KEP-5866's shardSelector; "" or
 * NULL: everything) selects from now on, through a relist of the latest
 * state, as kl_reflector_relist. Only in WATCH, so that no LIST or WatchList
 * under way completes with the old selection: returns 0 elsewhere (try
 * again later), 1 once the selector is the one asked for. */
int kl_reflector_reshard(kl_reflector *r, const char *selector);
/* The shard selector the reflector's requests carry, or "". */
const char *kl_reflector_shard_selector(const kl_reflector *r);
/* Its last transitions (at most KL_REFLECTOR_HISTORY), oldest first, into
 * out; returns how many. */
size_t kl_reflector_history(const kl_reflector *r, kl_reflector_record *out);

#endif
