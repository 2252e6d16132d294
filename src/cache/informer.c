/* informer.c - reflector + store + notification queue; see informer.h. */
#include "cache/informer.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wire/json.h"
#include "base/log.h"
#include "base/ring.h"
#include "base/xalloc.h"

#define QUEUE_HIGH 1024 /* notifications at which the reflector is held */
#define QUEUE_LOW 256   /* ...and released */
/* The compaction trims the heap each time it has compressed this much
 * JSON: the blobs it freed lie between objects still cached, where free()
 * alone hands nothing back to the system. */
#define TRIM_AFTER (4u << 20)

/* The compaction of the store's objects left unwritten (store.h), on the
 * loop's idle time: a slice at a time, deferred, and only while no
 * notification waits for the handlers. Between two slices the loop polls
 * its sockets, so that an event waits for one slice at most: deferred work
 * runs in rounds with no poll between them (loop.c), and slices deferred
 * one from another kept a frame that arrived meanwhile unread for up to 32
 * of them. Its states and the one table of their transitions: */
typedef enum { Z_OFF, Z_IDLE, Z_TIMED, Z_WAITING, Z_SLICING, Z_YIELDING, Z_NSTATES } zstate;
typedef enum {
    ZC_ON, ZC_WRITTEN, ZC_DUE, ZC_DUE_BUSY, ZC_EMPTIED, ZC_BUSY, ZC_MORE, ZC_POLLED, ZC_LATER, ZC_DONE, ZC_COUNT
} zcause;
static const char *const zstate_names[Z_NSTATES] = {"off", "idle", "timed", "waiting", "slicing", "yielding"};
static const struct ztransition {
    zstate from;
    const char *when;
    zstate to;
    const char *then;
} ztable[ZC_COUNT] = {
    [ZC_ON] = {Z_OFF, "compression on", Z_IDLE, "wait for a write"},
    [ZC_WRITTEN] = {Z_IDLE, "an object written", Z_TIMED, "a timer for when it comes due"},
    [ZC_DUE] = {Z_TIMED, "due, nothing queued", Z_SLICING, "a slice deferred"},
    [ZC_DUE_BUSY] = {Z_TIMED, "due, notifications queued", Z_WAITING, "wait for the queue to empty"},
    [ZC_EMPTIED] = {Z_WAITING, "the queue emptied", Z_SLICING, "a slice deferred"},
    [ZC_BUSY] = {Z_SLICING, "notifications queued", Z_WAITING, "wait for the queue to empty"},
    [ZC_MORE] = {Z_SLICING, "a slice done, the pass goes on", Z_YIELDING, "a timer of 0 s: the loop polls first"},
    [ZC_POLLED] = {Z_YIELDING, "the loop has polled its sockets", Z_SLICING, "a slice deferred, after the frames read"},
    [ZC_LATER] = {Z_SLICING, "the pass done, objects not yet due", Z_TIMED, "a timer for the first"},
    [ZC_DONE] = {Z_SLICING, "the pass done, every object compressed", Z_IDLE, "wait for a write"},
};

struct kl_informer {
    kl_reflector *reflector;
    kl_store *store;
    kl_informer_ready_fn ready;
    void *ud;
    kl_ring q;             /* of kl_notif, oldest first */
    int held;              /* told the reflector it is full */
    int listed;            /* the first LIST has been stored */
    int trim_due;          /* the first LIST's notifications are queued: trim once they are handled */
    size_t initial_left;   /* notifications of the first list not yet taken */
    uint64_t seq;          /* of the last notification queued */
    kl_informer_transform_fn transform; /* a prune or the layer above's, or NULL */
    void (*transform_free)(void *ud);
    void *transform_ud;
    unsigned long transform_errors;
    int transforming;      /* inside the transform: the informer cannot be freed */
    char *name;            /* for logs, as the reflector's */
    kl_informer_failed_fn failed; /* the layer above's, or NULL */
    void *failed_ud;
    kl_loop *loop;
    zstate z;
    kl_store_compaction compaction;
    uint64_t z_timer, z_slice; /* the compaction's timer (its due time or its yield) or deferred slice, or 0 */
    size_t z_untrimmed;        /* JSON compressed since the heap was last trimmed */
    size_t z_pass;             /* JSON compressed by the pass under way */
    kl_informer_compaction_stats zstats;
};

void kl_notif_clear(kl_notif *n) {
    kl_json_free(n->parsed);
    kl_obj_clear(&n->old);
    kl_obj_clear(&n->cur);
    memset(n, 0, sizeof *n);
}

/* Only the bytes matter to handlers: identity strings stay in the store,
 * but for -v 3, which names the object of each handler call. */
static void share_bytes(kl_obj *dst, const kl_obj *src) {
    memset(dst, 0, sizeof *dst);
    dst->blob = src->blob ? kl_blob_ref(src->blob) : NULL;
    dst->off = src->off;
    dst->len = src->len;
    if (kl_log_v >= 3 && src->name)
        kl_obj_set_identity(dst, src->ns, strlen(src->ns), src->name, strlen(src->name), src->rv, strlen(src->rv));
}

static void push(kl_informer *inf, kl_notif *n) {
    n->seq = ++inf->seq;
    kl_ring_push(&inf->q, n);
    if (kl_ring_len(&inf->q) == 1) inf->ready(inf->ud, inf);
}

static void on_change(void *ud, kl_change change, kl_obj *old, kl_obj *now) {
    kl_informer *inf = ud;
    kl_notif n;
    memset(&n, 0, sizeof n);
    n.type = change;
    if (change == KL_CHANGE_DELETE) {
        n.cur = *old;
        n.unknown = 1;
    } else {
        if (old) n.old = *old;
        share_bytes(&n.cur, now);
        n.initial = !inf->listed;
    }
    push(inf, &n);
    if (n.initial) inf->initial_left++;
}

static int full(kl_informer *inf) {
    if (kl_ring_len(&inf->q) >= QUEUE_HIGH) inf->held = 1;
    return inf->held;
}

static void z_transition(kl_informer *inf, zcause c, double due);

static void on_z_due(kl_loop *loop, void *ud) {
    (void)loop;
    kl_informer *inf = ud;
    inf->z_timer = 0;
    z_transition(inf, kl_ring_len(&inf->q) ? ZC_DUE_BUSY : ZC_DUE, 0);
}

/* The loop has polled since the last slice: the next is deferred behind
 * the decoding of what it read, so that it finds their notifications. */
static void on_z_polled(kl_loop *loop, void *ud) {
    (void)loop;
    kl_informer *inf = ud;
    inf->z_timer = 0;
    z_transition(inf, ZC_POLLED, 0);
}

static double thread_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Trims the heap a few MiB at a time, not once at the end of a pass:
 * malloc_trim hands back the pages of every free chunk in one call, and
 * the 300 MB that 100,000 of the bench's Pods free would block the loop
 * for tens of ms. 4 MiB at a time it takes 0.7 ms in the median
 * (docs/benchmarks.md): what the blobs and the identities between them
 * leave merges into few free chunks, the frames lying in blocks of their
 * own (store.c). */
static void trim(kl_informer *inf) {
    double t = kl_now();
    kl_heap_trim();
    t = kl_now() - t;
    if (t > inf->zstats.max_trim) inf->zstats.max_trim = t;
    kl_vlog(4, inf->name, "compaction: %zu KiB of JSON compressed; the heap trimmed in %.2f ms",
            inf->z_untrimmed >> 10, t * 1000);
    inf->z_untrimmed = 0;
}

static void on_z_slice(kl_loop *loop, void *ud) {
    (void)loop;
    kl_informer *inf = ud;
    inf->z_slice = 0;
    if (kl_ring_len(&inf->q)) {
        z_transition(inf, ZC_BUSY, 0);
        return;
    }
    double due = 0, cpu = thread_cpu();
    kl_store_compression_stats before, after;
    kl_store_compression(inf->store, &before);
    int more = kl_store_compact(inf->store, &inf->compaction, &due);
    kl_store_compression(inf->store, &after);
    if (after.json_bytes > before.json_bytes) {
        inf->z_untrimmed += after.json_bytes - before.json_bytes;
        inf->z_pass += after.json_bytes - before.json_bytes;
    }
    if (inf->z_untrimmed >= TRIM_AFTER || (!more && inf->z_untrimmed)) trim(inf);
    inf->zstats.seconds += thread_cpu() - cpu;
    inf->zstats.slices++;
    if (!more) {
        inf->zstats.passes++;
        /* -v 2 tells of the passes that compressed much (after a sync), not
         * of those each few seconds of a steady stream of events makes. */
        kl_vlog(inf->z_pass >= TRIM_AFTER ? 2 : 4, inf->name, "compaction: %zu objects compressed, %zu KiB of JSON in %zu KiB; %.2f s of CPU in "
                "%lu slices so far, the longest trim of the heap %.1f ms", after.objects, after.json_bytes >> 10,
                after.bytes >> 10, inf->zstats.seconds, inf->zstats.slices, inf->zstats.max_trim * 1000);
        inf->z_pass = 0;
    }
    z_transition(inf, more ? ZC_MORE : due > 0 ? ZC_LATER : ZC_DONE, due);
}

/* Leaves the compaction's state for ztable[c].to, which c must lead from;
 * due: when the next pass is due, for ZC_LATER. */
static void z_transition(kl_informer *inf, zcause c, double due) {
    const struct ztransition *t = &ztable[c];
    if (t->from != inf->z) {
        kl_log(KL_LOG_ERROR, inf->name, "compaction bug: \"%s\" does not lead from %s; aborting", t->when,
               zstate_names[inf->z]);
        abort();
    }
    if (c != ZC_MORE && c != ZC_POLLED)
        kl_vlog(4, inf->name, "compaction %s -> %s: %s", zstate_names[t->from], zstate_names[t->to], t->when);
    inf->z = t->to;
    if (t->to == Z_SLICING) {
        inf->z_slice = kl_loop_defer(inf->loop, on_z_slice, inf);
    } else if (t->to == Z_YIELDING) {
        inf->z_timer = kl_loop_after(inf->loop, 0, on_z_polled, inf);
    } else if (t->to == Z_TIMED) {
        /* Under steady writes objects come due one after another: a pass
         * each would look at the whole store each time (at 1,000 writes a
         * second, one pass a millisecond, and every event waiting behind
         * one). The next pass comes a fifth of `after` later at the soonest,
         * for all that came due meanwhile. */
        double wait = c == ZC_WRITTEN ? inf->compaction.after : due - kl_now();
        if (c == ZC_LATER && wait < inf->compaction.after / 5) wait = inf->compaction.after / 5;
        inf->z_timer = kl_loop_after(inf->loop, wait > 0 ? wait : 0, on_z_due, inf);
    }
}

/* The store was written: an idle compaction has something to wait for. */
static void written(kl_informer *inf) {
    if (inf->z == Z_IDLE) z_transition(inf, ZC_WRITTEN, 0);
}

/* Transforms o as the informer's transform says; 0, or -1 when the
 * transform refused it (counted and logged). A rewritten object's parsed
 * tape (*parsed, when given) describes the old bytes: it goes, and a view
 * of the object parses the new ones. */
static int transform(kl_informer *inf, kl_obj *o, void **parsed) {
    if (!inf->transform) return 0;
    inf->transforming = 1;
    int rc = inf->transform(inf->transform_ud, o, parsed ? *parsed : NULL);
    inf->transforming = 0;
    if (rc == 1 && parsed) {
        kl_json_free(*parsed);
        *parsed = NULL;
    }
    if (rc >= 0) return 0;
    if (rc == KL_TRANSFORM_STOPPED) return -1;
    char key[512];
    kl_obj_key(o, key, sizeof key);
    inf->transform_errors++;
    kl_log(KL_LOG_ERROR, inf->name, "the transform failed on %s, which is not cached: relisting "
           "after a backoff", key);
    return -1;
}

static int sink_replace(void *ud, kl_list *list) {
    kl_informer *inf = ud;
    /* A LIST's items were pruned as they arrived, a watch-list's went
     * through sink_initial; those of a LIST of another transform not yet. */
    for (size_t i = 0; inf->transform && !list->transformed && i < list->n; i++)
        if (transform(inf, &list->items[i], NULL) < 0) return -1;
    kl_store_replace(inf->store, list, on_change, inf);
    written(inf);
    inf->trim_due = !inf->listed && kl_ring_len(&inf->q);
    inf->listed = 1;
    /* An empty list queues nothing, yet the dispatcher must see the sync. */
    if (!kl_ring_len(&inf->q)) inf->ready(inf->ud, inf);
    return full(inf);
}

static int sink_event(void *ud, kl_event *ev) {
    kl_informer *inf = ud;
    kl_notif n;
    memset(&n, 0, sizeof n);
    if (transform(inf, &ev->obj, &ev->parsed) < 0) return -1;
    if (ev->type == KL_EV_DELETED) {
        char key[512];
        kl_obj_key(&ev->obj, key, sizeof key);
        kl_obj gone;
        if (kl_store_delete(inf->store, key, &gone)) kl_obj_clear(&gone);
        written(inf); /* a compressed object gone may leave its block mostly dead */
        n.type = KL_CHANGE_DELETE;
        share_bytes(&n.cur, &ev->obj);
    } else {
        kl_obj shared;
        share_bytes(&shared, &ev->obj);
        int had = kl_store_put(inf->store, &ev->obj, &n.old);
        n.type = had ? KL_CHANGE_UPDATE : KL_CHANGE_ADD;
        n.cur = shared;
        written(inf);
    }
    n.parsed = ev->parsed;
    ev->parsed = NULL;
    push(inf, &n);
    return full(inf);
}

/* A watch-list's initial event is transformed as it comes, with its parsed
 * form, which a view of the object given to a Lua transform then need not
 * parse again; and the state kept until the initial-events-end bookmark
 * is the transformed one. */
static int sink_initial(void *ud, kl_event *ev) { return transform(ud, &ev->obj, &ev->parsed); }

static void sink_failed(void *ud, const kl_reflector_failure *f) {
    kl_informer *inf = ud;
    if (inf->failed) inf->failed(inf->failed_ud, f);
}

kl_informer *kl_informer_new(kl_loop *loop, kl_http *http, const kl_reflector_opts *o,
                             kl_informer_ready_fn ready, void *ud) {
    kl_informer *inf = kl_xcalloc(1, sizeof *inf);
    inf->ready = ready;
    inf->ud = ud;
    inf->loop = loop;
    kl_ring_init(&inf->q, sizeof(kl_notif));
    inf->store = kl_store_new();
    inf->name = kl_xstrdup(o->name ? o->name : o->path);
    inf->reflector = kl_reflector_new(loop, http, o, (kl_reflector_sink){sink_replace, sink_event, sink_failed, sink_initial}, inf);
    return inf;
}

void kl_informer_start(kl_informer *inf) { kl_reflector_start(inf->reflector); }

void kl_informer_free(kl_informer *inf) {
    if (!inf) return;
    kl_reflector_free(inf->reflector);
    inf->reflector = NULL;
    inf->held = 0;
    /* Torn down rather than left: no transition, nothing more scheduled. */
    kl_loop_cancel(inf->loop, inf->z_timer);
    kl_loop_cancel(inf->loop, inf->z_slice);
    inf->z = Z_OFF;
    kl_notif n;
    while (kl_ring_pop(&inf->q, &n)) kl_notif_clear(&n); /* as they are: none is handled */
    kl_ring_free(&inf->q);
    kl_store_free(inf->store);
    if (inf->transform_free) inf->transform_free(inf->transform_ud);
    free(inf->name);
    free(inf);
}

/* kl_prune_obj as a transform: bytes that are not a JSON object stay as
 * they are, for a view of them to report. */
static int prune_transform(void *ud, kl_obj *o, void *parsed) {
    (void)parsed;
    return kl_prune_obj(ud, o) == 1;
}

static void prune_free(void *ud) { kl_prune_free(ud); }

void kl_informer_set_prune(kl_informer *inf, kl_prune *p) {
    if (!p) return;
    kl_informer_set_transform(inf, prune_transform, prune_free, p);
    kl_reflector_set_prune(inf->reflector, p);
}

void kl_informer_set_transform(kl_informer *inf, kl_informer_transform_fn fn,
                               void (*free_ud)(void *ud), void *ud) {
    if (inf->transform_free) inf->transform_free(inf->transform_ud);
    kl_reflector_set_prune(inf->reflector, NULL);
    inf->transform = fn;
    inf->transform_free = free_ud;
    inf->transform_ud = ud;
}

unsigned long kl_informer_transform_errors(const kl_informer *inf) { return inf->transform_errors; }
int kl_informer_transforming(const kl_informer *inf) { return inf->transforming; }

/* A resync's or a replay's object queued compressed becomes JSON as its
 * turn comes (queue_cache). */
static void unpack(kl_informer *inf, kl_notif *n) {
    if (!n->packed) return;
    kl_store_unpack(inf->store, &n->cur);
    if (n->old.blob) {
        kl_blob_unref(n->old.blob);
        n->old.blob = kl_blob_ref(n->cur.blob);
        n->old.off = n->cur.off;
    }
    n->packed = 0;
}

int kl_informer_pop(kl_informer *inf, kl_notif *n) {
    int grown = kl_ring_cap(&inf->q) > 0;
    if (!kl_ring_pop(&inf->q, n)) return 0;
    unpack(inf, n);
    /* The ring hands back an array a burst grew (a list's notifications,
     * one per object): the list's own arrays are gone by now too. Only
     * after the first list is the heap trimmed: malloc_trim walks every
     * free chunk of the heap, and a relist leaves one between most cached
     * objects (its unchanged items are freed as they are matched), so that
     * each later trim, after a relist's or a resync's burst, would block
     * the loop for 0.15-0.26 s at 1,000,000 objects (docs/benchmarks.md)
     * against 0.3 ms after the first list. */
    if (!kl_ring_len(&inf->q) && inf->trim_due) {
        inf->trim_due = 0;
        if (grown && !kl_ring_cap(&inf->q)) {
            kl_heap_trim();
            kl_vlog(2, inf->name, "the initial list handled: its freed memory handed back");
        }
    }
    /* The next notification's blobs are asked for from memory while this
     * one is handled: an update's old object was cached long before, and
     * its blob's header is cold by the time its view takes a reference. */
    const kl_notif *next = kl_ring_peek(&inf->q);
    if (next) {
        __builtin_prefetch(next->old.blob);
        __builtin_prefetch(next->cur.blob);
    }
    if (n->initial && inf->initial_left) inf->initial_left--;
    if (inf->held && kl_ring_len(&inf->q) <= QUEUE_LOW) {
        inf->held = 0;
        kl_reflector_kick(inf->reflector);
    }
    if (!kl_ring_len(&inf->q) && inf->z == Z_WAITING) z_transition(inf, ZC_EMPTIED, 0);
    return 1;
}

size_t kl_informer_pending(const kl_informer *inf) { return kl_ring_len(&inf->q); }
kl_store *kl_informer_store(kl_informer *inf) { return inf->store; }
int kl_informer_synced(const kl_informer *inf) { return inf->listed && inf->initial_left == 0; }
const kl_reflector_stats *kl_informer_stats(const kl_informer *inf) {
    return kl_reflector_get_stats(inf->reflector);
}
const char *kl_informer_rv(const kl_informer *inf) { return kl_reflector_rv(inf->reflector); }
kl_reflector_state kl_informer_state(const kl_informer *inf) { return kl_reflector_get_state(inf->reflector); }
double kl_informer_last_event(const kl_informer *inf) { return kl_reflector_last_event(inf->reflector); }
double kl_informer_last_heard(const kl_informer *inf) { return kl_reflector_last_heard(inf->reflector); }
int kl_informer_relist(kl_informer *inf, const char *why) { return kl_reflector_relist(inf->reflector, why); }
int kl_informer_reshard(kl_informer *inf, const char *selector) {
    return kl_reflector_reshard(inf->reflector, selector);
}
const char *kl_informer_shard_selector(const kl_informer *inf) {
    return kl_reflector_shard_selector(inf->reflector);
}
size_t kl_informer_history(const kl_informer *inf, kl_reflector_record *out) {
    return kl_reflector_history(inf->reflector, out);
}

double kl_informer_failing_for(const kl_informer *inf, double now) {
    return kl_reflector_failing_for(inf->reflector, now);
}

const char *kl_informer_refusal(const kl_informer *inf) { return kl_reflector_refusal(inf->reflector); }

void kl_informer_on_failure(kl_informer *inf, kl_informer_failed_fn fn, void *ud) {
    inf->failed = fn;
    inf->failed_ud = ud;
}

uint64_t kl_informer_seq(const kl_informer *inf) { return inf->seq; }

/* Queues a notification of type for every cached object: an ADD for add
 * handler `only` alone, or an UPDATE with old = new for every handler.
 * Compressed objects are queued as they are stored, each made JSON when
 * popped: decompressed here, the queue would hold the whole cache's JSON
 * at once, and a process sized for the compressed cache would run out of
 * memory at each resync. */
static void queue_cache(kl_informer *inf, kl_change type, int only) {
    size_t cur = 0;
    kl_obj o;
    int packed;
    while (kl_store_next_packed(inf->store, &cur, &o, &packed)) {
        kl_notif n;
        memset(&n, 0, sizeof n);
        n.type = type;
        n.only = only;
        n.packed = packed;
        if (type == KL_CHANGE_UPDATE) share_bytes(&n.old, &o);
        share_bytes(&n.cur, &o);
        kl_store_release(&o);
        push(inf, &n);
    }
}

void kl_informer_replay(kl_informer *inf, int handler) { queue_cache(inf, KL_CHANGE_ADD, handler); }

void kl_informer_resync(kl_informer *inf) { queue_cache(inf, KL_CHANGE_UPDATE, 0); }

void kl_informer_set_compaction(kl_informer *inf, const kl_store_compaction *c) {
    if (inf->z != Z_OFF) return;
    inf->compaction = *c;
    z_transition(inf, ZC_ON, 0);
    /* A store written before: its objects are due as they would be. */
    if (kl_store_len(inf->store)) written(inf);
}

void kl_informer_compaction(const kl_informer *inf, kl_informer_compaction_stats *out) {
    *out = inf->zstats;
    out->state = zstate_names[inf->z];
}
