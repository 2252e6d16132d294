/* queue.c - rate-limited, delaying work queue; see queue.h. */
#include "cache/queue.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "base/heap.h"
#include "base/hmap.h"
#include "base/xalloc.h"

#define NOT_WAITING SIZE_MAX /* heap_pos of a key not delayed */
#define NOT_QUEUED SIZE_MAX  /* ready_pos of a key not queued */

/* Everything the queue knows about one key. It lives while the key is
 * queued, processing, delayed or has requeues to remember. */
typedef struct item {
    const char *key;                 /* the index's copy */
    struct item *run_prev, *run_next; /* processing list, oldest first */
    size_t ready_pos;                /* NOT_QUEUED unless queued */
    uint64_t order;                  /* orders queued keys of one priority */
    int prio;                        /* while dirty: the highest priority it was added at */
    size_t heap_pos;                 /* NOT_WAITING unless delayed */
    double ready_at;                 /* due time while delayed */
    uint64_t seq;                    /* orders delayed keys due at the same time */
    int due_prio;                    /* while delayed: the priority it will be added at */
    double added_at;                 /* when it last became dirty */
    double started_at;               /* when get() handed it out */
    int requeues;
    bool dirty;                      /* needs processing: queued, or re-added while processing */
    bool processing;
} item;

struct kl_queue {
    kl_queue_opts opts;
    kl_hmap *items; /* key -> item */
    kl_heap ready;  /* of item *, on (prio descending, order) */
    uint64_t order;
    item *run_head, *run_tail;
    size_t processing;
    kl_heap delayed; /* of item *, on (ready_at, seq) */
    uint64_t seq;
    double tokens, last_take; /* the overall bucket */
    bool bucket_started;
    size_t failing;
    bool shutting_down;
    uint64_t adds, retries;
    kl_queue_dist wait, work;
};

/* controller-runtime's workqueue histograms (pkg/internal/metrics/workqueue.go,
 * v0.20): prometheus.ExponentialBuckets(10e-9, 10, 12). It multiplies by 10
 * bound after bound, so two bounds come out a hair below 1e-5 and 1e-4; the
 * same doubles here give the same `le` labels. */
static const double bucket_bounds[KL_QUEUE_BUCKETS - 1] = {
    1e-08, 1e-07, 1e-06, 9.999999999999999e-06, 9.999999999999999e-05, 0.001,
    0.01,  0.1,   1,     10,                    100,                   1000};

double kl_queue_bucket_bound(int i) {
    if (i < 0) return 0;
    return i < KL_QUEUE_BUCKETS - 1 ? bucket_bounds[i] : INFINITY;
}

static void dist_observe(kl_queue_dist *d, double seconds) {
    if (!(seconds >= 0)) seconds = 0;
    d->count++;
    d->sum += seconds;
    if (seconds > d->max) d->max = seconds;
    int i = 0;
    while (i < KL_QUEUE_BUCKETS - 1 && seconds > bucket_bounds[i]) i++;
    d->buckets[i]++;
}

/* The delayed keys' order, and how each knows its place in the heap. */
static int due_before(const void *pa, const void *pb) {
    const item *a = *(item *const *)pa, *b = *(item *const *)pb;
    return a->ready_at < b->ready_at || (a->ready_at == b->ready_at && a->seq < b->seq);
}

static void track(void *elem, size_t index) { (*(item **)elem)->heap_pos = index; }

/* The queued keys' order: by priority, then FIFO. */
static int goes_first(const void *pa, const void *pb) {
    const item *a = *(item *const *)pa, *b = *(item *const *)pb;
    return a->prio > b->prio || (a->prio == b->prio && a->order < b->order);
}

static void track_ready(void *elem, size_t index) { (*(item **)elem)->ready_pos = index; }

static kl_queue_opts resolve_opts(const kl_queue_opts *in) {
    kl_queue_opts o = in ? *in : (kl_queue_opts){0};
    if (!(o.base_delay > 0)) o.base_delay = 0.005;
    if (!(o.max_delay > 0)) o.max_delay = 1000;
    if (!(o.qps > 0)) o.qps = 10;
    if (o.burst <= 0) o.burst = 100;
    return o;
}

kl_queue *kl_queue_new(const kl_queue_opts *opts) {
    kl_queue *q = kl_xcalloc(1, sizeof *q);
    q->items = kl_hmap_new();
    q->opts = resolve_opts(opts);
    kl_heap_init(&q->delayed, sizeof(item *), due_before, track);
    kl_heap_init(&q->ready, sizeof(item *), goes_first, track_ready);
    return q;
}

void kl_queue_free(kl_queue *q) {
    if (!q) return;
    size_t cursor = 0;
    void *it;
    while (kl_hmap_next(q->items, &cursor, NULL, &it)) free(it);
    kl_hmap_free(q->items);
    kl_heap_free(&q->delayed);
    kl_heap_free(&q->ready);
    free(q);
}

/* ---- per-key records ---- */

static item *find(const kl_queue *q, const char *key) { return kl_hmap_get(q->items, key); }

static item *find_or_create(kl_queue *q, const char *key) {
    item *it = find(q, key);
    if (it) return it;
    it = kl_xcalloc(1, sizeof *it);
    it->heap_pos = NOT_WAITING;
    it->ready_pos = NOT_QUEUED;
    kl_hmap_put(q->items, key, it);
    kl_hmap_lookup(q->items, key, &it->key, NULL);
    return it;
}

/* Drops the record of a key the queue no longer needs to remember. */
static void release_if_idle(kl_queue *q, item *it) {
    if (it->dirty || it->processing || it->heap_pos != NOT_WAITING || it->requeues) return;
    kl_hmap_del(q->items, it->key, NULL);
    free(it);
}

/* ---- the queued keys and the processing list ---- */

/* Queues it behind the keys of its priority queued before. */
static void push_back(kl_queue *q, item *it) {
    it->order = q->order++;
    kl_heap_push(&q->ready, &it);
}

static item *pop_front(kl_queue *q) {
    item *it;
    kl_heap_remove(&q->ready, 0, &it);
    it->ready_pos = NOT_QUEUED;
    return it;
}

static void run_link(kl_queue *q, item *it) {
    it->run_prev = q->run_tail;
    it->run_next = NULL;
    if (q->run_tail) q->run_tail->run_next = it;
    else q->run_head = it;
    q->run_tail = it;
    q->processing++;
}

static void run_unlink(kl_queue *q, item *it) {
    if (it->run_prev) it->run_prev->run_next = it->run_next;
    else q->run_head = it->run_next;
    if (it->run_next) it->run_next->run_prev = it->run_prev;
    else q->run_tail = it->run_prev;
    it->run_prev = it->run_next = NULL;
    q->processing--;
}

/* client-go's Add on a known record: a dirty key is not added twice, and a
  * key being processed waits for done() to be queued. An add of higher
  * priority raises a dirty key's, as controller-runtime's AddWithOpts does,
  * and it keeps its place among the keys of that priority. Returns 1 when
  * the key was not dirty (the add counts), else 0. */
static int mark_dirty(kl_queue *q, item *it, int prio, double at) {
    if (it->dirty) {
        if (prio <= it->prio) return 0;
        it->prio = prio;
        if (it->ready_pos != NOT_QUEUED) kl_heap_fix(&q->ready, it->ready_pos);
        return 0;
    }
    it->dirty = true;
    it->prio = prio;
    it->added_at = at;
    q->adds++;
    if (!it->processing) push_back(q, it);
    return 1;
}

int kl_queue_add(kl_queue *q, const char *key, int prio, double now) {
    return !q->shutting_down && mark_dirty(q, find_or_create(q, key), prio, now);
}

/* ---- delayed adds: a binary min-heap that knows each item's position ---- */

static item *heap_pop(kl_queue *q) {
    item *top;
    kl_heap_remove(&q->delayed, 0, &top);
    top->heap_pos = NOT_WAITING;
    return top;
}

static item *heap_top(const kl_queue *q) { return *(item **)kl_heap_at(&q->delayed, 0); }

/* Schedules it at `ready`, keeping an earlier pending time as client-go
 * does, and the higher priority as controller-runtime does. */
static void schedule(kl_queue *q, item *it, double ready, int prio) {
    if (it->heap_pos != NOT_WAITING) {
        if (prio > it->due_prio) it->due_prio = prio;
        if (ready < it->ready_at) {
            it->ready_at = ready;
            it->seq = q->seq++;
            kl_heap_fix(&q->delayed, it->heap_pos);
        }
        return;
    }
    it->ready_at = ready;
    it->seq = q->seq++;
    it->due_prio = prio;
    kl_heap_push(&q->delayed, &it);
}

static void add_after_item(kl_queue *q, item *it, double delay, int prio, double now) {
    q->retries++;
    if (delay > 0) schedule(q, it, now + delay, prio);
    else mark_dirty(q, it, prio, now);
}

void kl_queue_add_after(kl_queue *q, const char *key, double delay, int prio, double now) {
    if (!q->shutting_down) add_after_item(q, find_or_create(q, key), delay, prio, now);
}

size_t kl_queue_advance(kl_queue *q, double now) {
    size_t moved = 0;
    while (kl_heap_len(&q->delayed) > 0 && heap_top(q)->ready_at <= now) {
        item *it = heap_pop(q);
        /* It has waited since it fell due, however late the loop came. */
        mark_dirty(q, it, it->due_prio, it->ready_at);
        moved++;
    }
    return moved;
}

double kl_queue_next_ready(const kl_queue *q) {
    return kl_heap_len(&q->delayed) ? heap_top(q)->ready_at : -1;
}

/* ---- rate limiting: per-key exponential backoff and the overall bucket ---- */

static double backoff(kl_queue *q, item *it) {
    int exp = it->requeues;
    if (it->requeues == 0) q->failing++;
    if (it->requeues < INT_MAX) it->requeues++;
    /* 2^1100 is past the double range: the cap applies long before. */
    double d = ldexp(q->opts.base_delay, exp < 1100 ? exp : 1100);
    return d < q->opts.max_delay ? d : q->opts.max_delay;
}

/* Reserves one token now; returns how long until that token exists. Tokens
 * refill at qps up to burst and may go negative: each reservation beyond the
 * burst waits 1/qps longer than the previous one. */
static double bucket_delay(kl_queue *q, double now) {
    if (isinf(q->opts.qps)) return 0;
    if (!q->bucket_started) {
        q->tokens = q->opts.burst;
        q->last_take = now;
        q->bucket_started = true;
    }
    if (now > q->last_take) {
        q->tokens += (now - q->last_take) * q->opts.qps;
        if (q->tokens > q->opts.burst) q->tokens = q->opts.burst;
        q->last_take = now;
    }
    q->tokens -= 1;
    return q->tokens < 0 ? -q->tokens / q->opts.qps : 0;
}

double kl_queue_add_rate_limited(kl_queue *q, const char *key, int prio, double now) {
    if (q->shutting_down) return 0;
    item *it = find_or_create(q, key);
    double per_key = backoff(q, it);
    double overall = bucket_delay(q, now);
    double delay = per_key > overall ? per_key : overall;
    add_after_item(q, it, delay, prio, now);
    return delay;
}

void kl_queue_forget(kl_queue *q, const char *key) {
    item *it = find(q, key);
    if (!it || !it->requeues) return;
    it->requeues = 0;
    q->failing--;
    release_if_idle(q, it);
}

int kl_queue_num_requeues(const kl_queue *q, const char *key) {
    item *it = find(q, key);
    return it ? it->requeues : 0;
}

/* ---- processing ---- */

const char *kl_queue_get(kl_queue *q, double now, int *shut_down, int *prio) {
    kl_queue_advance(q, now);
    size_t queued = kl_heap_len(&q->ready);
    if (shut_down) *shut_down = q->shutting_down && !queued && !q->processing;
    if (!queued) return NULL;
    item *it = pop_front(q);
    if (prio) *prio = it->prio;
    it->dirty = false;
    it->processing = true;
    it->started_at = now;
    run_link(q, it);
    dist_observe(&q->wait, now - it->added_at);
    return it->key;
}

void kl_queue_done(kl_queue *q, const char *key, double now) {
    item *it = find(q, key);
    if (!it || !it->processing) return;
    run_unlink(q, it);
    it->processing = false;
    dist_observe(&q->work, now - it->started_at);
    if (it->dirty) push_back(q, it);
    else release_if_idle(q, it);
}

size_t kl_queue_len(const kl_queue *q) { return kl_heap_len(&q->ready); }

void kl_queue_shutdown(kl_queue *q) {
    q->shutting_down = true;
    while (kl_heap_len(&q->delayed) > 0) release_if_idle(q, heap_pop(q));
}

int kl_queue_shutting_down(const kl_queue *q) { return q->shutting_down; }

void kl_queue_get_stats(const kl_queue *q, double now, kl_queue_stats *out) {
    *out = (kl_queue_stats){
        .depth = kl_heap_len(&q->ready),
        .processing = q->processing,
        .waiting = kl_heap_len(&q->delayed),
        .failing = q->failing,
        .adds = q->adds,
        .retries = q->retries,
        .wait = q->wait,
        .work = q->work,
    };
    /* Not only the first: keys of a lower priority wait behind, and a key
     * re-added while processing joins the queue at done(), behind keys added
     * after it. A walk of the queue, when stats are asked for (the metrics,
     * the live page), costs the hot path nothing. */
    for (size_t i = 0; i < kl_heap_len(&q->ready); i++) {
        const item *it = *(item *const *)kl_heap_at(&q->ready, i);
        if (now - it->added_at > out->oldest) out->oldest = now - it->added_at;
    }
    for (const item *it = q->run_head; it; it = it->run_next) {
        double ran = now - it->started_at;
        if (ran < 0) continue;
        out->unfinished += ran;
        if (ran > out->longest) out->longest = ran;
    }
}
