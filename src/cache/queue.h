/*
 * queue.h - the controller work queue: client-go's rate-limited, delaying
 * work queue (util/workqueue) for a single-threaded event loop.
 *
 * Keys are strings ("ns/name"). The guarantees a controller relies on:
 *   - a key waiting in the queue is there once, however often it is added;
 *   - a key is never handed out twice at once: adding a key that is being
 *     processed marks it, and done() puts it back at the end of the queue;
 *   - keys come out by priority, highest first, and within a priority in
 *     the order they were queued (FIFO).
 * Priorities are controller-runtime's (pkg/controller/priorityqueue, v0.20):
 * ints, 0 for a normal add, KL_QUEUE_LOW (its handler.LowPriority) for the
 * adds of an initial list or a resync, so that a change made meanwhile is
 * not queued behind every key of the cache; a key added again while queued
 * keeps the higher of the two priorities, and its place among the keys of
 * that priority. On top of that, add_after() delays an add, and add_rate_limited() delays
 * it by the larger of a per-key exponential backoff and an overall token
 * bucket, as client-go's DefaultControllerRateLimiter does.
 *
 * Nothing here blocks or reads a clock: every call that needs the time takes
 * `now`, monotonic seconds, and next_ready() tells the loop when to come back.
 * The queue therefore runs on a fake clock in the specs as on the real one.
 * Adds and gets are O(log queued), delayed adds O(log delayed).
 */
#ifndef KLUA_QUEUE_H
#define KLUA_QUEUE_H

#include <stddef.h>
#include <stdint.h>

typedef struct kl_queue kl_queue;

/* controller-runtime's priorities: 0 unless a caller says otherwise, and
 * handler.LowPriority for what is enqueued only because it is cached. */
#define KL_QUEUE_NORMAL 0
#define KL_QUEUE_LOW (-100)

/* Zero (or negative) fields take client-go's defaults, shown in brackets. */
typedef struct kl_queue_opts {
    double base_delay; /* seconds before the first rate-limited retry [0.005] */
    double max_delay;  /* cap of the per-key backoff, seconds [1000] */
    double qps;        /* overall retry rate; INFINITY turns the bucket off [10] */
    int burst;         /* retries the bucket allows at once [100] */
} kl_queue_opts;

/* Durations are summarised in this many histogram buckets. Bucket i counts
 * observations above the bound of bucket i-1 and at most its own bound;
 * the bounds are those of the workqueue_*_duration_seconds histograms. */
#define KL_QUEUE_BUCKETS 13

typedef struct kl_queue_dist {
    uint64_t count;
    double sum, max; /* seconds */
    uint64_t buckets[KL_QUEUE_BUCKETS];
} kl_queue_dist;

typedef struct kl_queue_stats {
    size_t depth;      /* keys queued and ready for get() */
    size_t processing; /* keys handed out by get() and not yet done() */
    size_t waiting;    /* delayed keys not yet due */
    size_t failing;    /* keys with a non-zero requeue count */
    uint64_t adds;     /* adds that queued a key; duplicates are not counted */
    uint64_t retries;  /* delayed adds: add_after() and add_rate_limited() */
    double unfinished; /* seconds the keys now processing have run, summed */
    double longest;    /* seconds the longest-running key has run */
    double oldest;     /* seconds the longest-queued key has waited for get() */
    kl_queue_dist wait;      /* from add (or due time) to get */
    kl_queue_dist work;      /* from get to done */
} kl_queue_stats;

/* A queue configured by opts (NULL: all defaults). Out of memory aborts
 * here as in every host allocation (base/xalloc.h). */
kl_queue *kl_queue_new(const kl_queue_opts *opts);
/* Frees the queue and every key it holds. NULL is ignored. */
void kl_queue_free(kl_queue *q);

/* Queues key at priority prio unless it is queued already, in which case
 * it keeps the higher priority; when key is being processed it is queued
 * again at done(). Ignored after shutdown. Returns 1 when this add counted
 * (stats' adds), 0 for a duplicate of a key still waiting (a priority
 * raised included) or after shutdown. */
int kl_queue_add(kl_queue *q, const char *key, int prio, double now);
/* Adds key at prio once `delay` seconds have passed (at once when delay <=
 * 0). When key already has a pending delayed add, the earlier of the two
 * ready times and the higher priority are kept. Ignored after shutdown. */
void kl_queue_add_after(kl_queue *q, const char *key, double delay, int prio, double now);
/* Adds key at prio after the larger of its own backoff, base_delay *
 * 2^requeues capped at max_delay, and the wait for a token from the overall
 * bucket (one is reserved now). Counts one requeue of key. Returns that
 * delay in seconds (0 after shutdown, when it is ignored). */
double kl_queue_add_rate_limited(kl_queue *q, const char *key, int prio, double now);
/* Resets key's requeue count: call it when key was processed successfully.
 * It does not cancel a pending delayed add. */
void kl_queue_forget(kl_queue *q, const char *key);
/* How many rate-limited adds key has had since it was last forgotten. */
int kl_queue_num_requeues(const kl_queue *q, const char *key);

/* Moves the delayed keys that are due at `now` into the queue, earliest
 * first; returns how many became due. get() does this itself. */
size_t kl_queue_advance(kl_queue *q, double now);
/* The next key to process, now marked as processing, or NULL when none is
 * ready: the oldest of the highest priority. The string stays valid until
 * done() for it; *prio (when not NULL) is set to the priority it was queued
 * at. *shut_down (when not NULL) is set to 1 once the queue is shut down
 * and drained: nothing queued and nothing processing, so no done() can
 * queue a key again. Else 0. */
const char *kl_queue_get(kl_queue *q, double now, int *shut_down, int *prio);
/* Ends the processing of key; if key was added meanwhile it is queued again
 * at the back. A key not being processed is ignored. */
void kl_queue_done(kl_queue *q, const char *key, double now);

/* The earliest time a delayed key becomes due, or -1 when none waits. */
double kl_queue_next_ready(const kl_queue *q);
/* Keys queued and ready for get(): neither delayed nor being processed. */
size_t kl_queue_len(const kl_queue *q);

/* Stops accepting adds and drops the delayed ones; get() hands out what is
 * queued, and what done() queues again, and then reports the shutdown. */
void kl_queue_shutdown(kl_queue *q);
int kl_queue_shutting_down(const kl_queue *q);

/* The upper bound of histogram bucket i, in seconds: about 1e-8 * 10^i,
 * and infinity for the last bucket. */
double kl_queue_bucket_bound(int i);
/* Fills *out; `now` dates the unfinished and longest processing times. */
void kl_queue_get_stats(const kl_queue *q, double now, kl_queue_stats *out);

#endif
