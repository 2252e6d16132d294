/*
 * reflector.h - keeps one resource's local copy current: client-go's
 * Reflector, as a state machine on the event loop.
 *
 *   LIST(rv)  ok                         -> sink.replace, WATCH(list rv)
 *             ok at the rv whose watch got
 *             410 at once                -> LIST("")
 *             410 / too large at rv      -> LIST("")
 *             continue expired, page >=2 -> LIST(rv) unpaged
 *             404                        -> sink.replace(empty),
 *                                           BACKOFF -> LIST("")
 *             429 / Retry-After          -> wait -> LIST(rv)
 *             other error                -> BACKOFF -> LIST(rv)
 *   WATCH(rv) event                      -> sink.event, rv = event rv
 *             BOOKMARK                   -> rv = bookmark rv (no event)
 *             clean end, or cut after
 *             delivering events          -> WATCH(rv)
 *             end < 1 s without events,
 *             connect error, 5xx         -> BACKOFF -> WATCH(rv)
 *             429 / Retry-After          -> wait -> WATCH(rv)
 *             410 (status or ERROR)      -> LIST(rv)
 *             404                        -> BACKOFF -> LIST("")
 *             silent past the idle limit,
 *             or past timeoutSeconds     -> WATCH(rv)
 *             oversize / malformed frame -> LIST(rv)
 *   BACKOFF   uniform in [d, 2d); d = 0.8 s doubling to 30 s, reset after
 *             2 minutes without a failure.
 *
 * The first LIST asks for resourceVersion "0" (any, from the watch cache).
 * A relist at another rv asks for no limit unless page_size was set or the
 * first LIST came in pages (client-go's rule: kube-apiserver serves a
 * limit at rv N from etcd, exactly at N). In WatchList mode the LIST is
 * replaced by a WATCH with sendInitialEvents that ends its initial state
 * with a bookmark; the initial events leave rv alone, and if that bookmark
 * does not come in time the reflector drops them and falls back to LIST
 * for good.
 *
 * Frames wait in a bounded queue between the socket and the sink; when the
 * sink reports it is full, the queue stops draining and, once the queue is
 * full too, the socket is paused. The reflector never gives up.
 */
#ifndef KLUA_REFLECTOR_H
#define KLUA_REFLECTOR_H

#include "wire/decode.h"
#include "conn/http.h"
#include "base/loop.h"

typedef struct kl_reflector kl_reflector;

/* Where the reflector's results go. Each call takes ownership of its
 * argument's contents and returns 0, or 1 when the consumer is full: the
 * reflector then pauses until kl_reflector_kick. */
typedef struct kl_reflector_sink {
    /* A complete LIST (or WatchList initial state): the new full contents. */
    int (*replace)(void *ud, kl_list *list);
    /* One ADDED, MODIFIED or DELETED watch event. */
    int (*event)(void *ud, kl_event *ev);
} kl_reflector_sink;

typedef struct kl_reflector_opts {
    const char *name;       /* for logs, e.g. "pods" or "pods -n team-a" */
    const char *path;       /* collection path, e.g. /api/v1/namespaces/x/pods */
    const char *kind;       /* expected kind of the objects, e.g. "Pod" */
    const char *label_selector, *field_selector; /* or NULL */
    int page_size;          /* LIST limit, on every LIST; 0 = 500, and none on
                             * relists at a resourceVersion */
    double idle_timeout;    /* a watch silent this long is restarted; 0 = 150 s */
    double watch_timeout_min, watch_timeout_max; /* 0 = [300, 600) */
    int watch_list;         /* use sendInitialEvents instead of LIST */
    double watch_list_deadline; /* 0 = 10 s */
    double list_timeout;    /* seconds a LIST may take; 0 = 300 s */
} kl_reflector_opts;

typedef struct kl_reflector_stats {
    unsigned long lists, relists, watches, rewatches, events, bookmarks;
    unsigned long added, modified, deleted; /* events by type */
    unsigned long errors, backoffs, idle_restarts, oversize, malformed;
} kl_reflector_stats;

kl_reflector *kl_reflector_new(kl_loop *loop, kl_http *http, const kl_reflector_opts *o,
                               kl_reflector_sink sink, void *ud);
void kl_reflector_start(kl_reflector *r);
void kl_reflector_free(kl_reflector *r);
/* The sink has room again. */
void kl_reflector_kick(kl_reflector *r);
/* Last resourceVersion seen (list, event or bookmark); "" before any. */
const char *kl_reflector_rv(const kl_reflector *r);
/* Seconds since its lists or watches began failing without an answer
 * since, at `now`; 0 while they succeed. */
double kl_reflector_failing_for(const kl_reflector *r, double now);
const kl_reflector_stats *kl_reflector_get_stats(const kl_reflector *r);

#endif
