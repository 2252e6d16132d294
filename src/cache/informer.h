/*
 * informer.h - one resource's reflector and store, and the ordered queue of
 * notifications (add, update, delete) waiting for the script's handlers.
 *
 * The store is updated as soon as the reflector delivers; notifications
 * then wait in a bounded queue. When the queue is full the reflector
 * pauses, and with it the socket: slow handlers slow the stream down
 * instead of growing memory.
 */
#ifndef KLUA_INFORMER_H
#define KLUA_INFORMER_H

#include <stdint.h>

#include "cache/reflector.h"
#include "cache/store.h"
#include "wire/prune.h"

typedef struct kl_notif {
    kl_change type;
    kl_obj old;  /* UPDATE: the previous object */
    kl_obj cur;  /* ADD, UPDATE: the new object; DELETE: the deleted one */
    int unknown; /* DELETE: missed while relisting; cur is the last state seen */
    int initial; /* ADD: part of the first list */
    void *parsed; /* the watch event's parsed form of cur, or NULL; owned */
    uint64_t seq; /* 1, 2, ...: the order notifications were queued in */
    int only;     /* a replayed ADD for this add handler (1-based) alone, or 0 */
    int packed;   /* queued: cur (and old, its bytes) compressed until popped (kl_store_next_packed) */
} kl_notif;

typedef struct kl_informer kl_informer;

/* Called when notifications are waiting after the queue was empty. */
typedef void (*kl_informer_ready_fn)(void *ud, kl_informer *inf);

kl_informer *kl_informer_new(kl_loop *loop, kl_http *http, const kl_reflector_opts *o,
                             kl_informer_ready_fn ready, void *ud);
void kl_informer_start(kl_informer *inf);
void kl_informer_free(kl_informer *inf);

/* Takes the oldest notification into *n (the caller clears it with
 * kl_notif_clear). 1 when one was taken, 0 when the queue is empty. */
int kl_informer_pop(kl_informer *inf, kl_notif *n);
size_t kl_informer_pending(const kl_informer *inf);
void kl_notif_clear(kl_notif *n);

/* Drops p's members from every object before it is cached or handed to a
 * handler: the transform below, with kl_prune_obj; the informer owns p (NULL
 * sets nothing). Call before start. */
void kl_informer_set_prune(kl_informer *inf, kl_prune *p);

/* A cache transform of the layer above (a script's function): given each
 * listed and watched object (deleted ones too) before it is cached, with
 * the watch event's parsed form of it or NULL, it returns 0 when o is to be
 * cached as it is, 1 when it replaced o's blob (off 0, identity unchanged),
 * -1 when it refused the object, having logged why, or KL_TRANSFORM_STOPPED
 * when klua's shutdown cut it short: the object is refused all the same, but
 * that is no failure of the transform, to count or to log. */
#define KL_TRANSFORM_STOPPED (-2)
typedef int (*kl_informer_transform_fn)(void *ud, kl_obj *o, void *parsed);

/* Runs fn on every object before it is cached or handed to a handler. An
 * object it refuses is not cached: its LIST or watch is dropped and the
 * reflector relists after a backoff, as after a malformed event, so no
 * change is lost (kl_informer_transform_errors counts them). The informer
 * owns ud and frees it with free_ud. Call before start, instead of
 * kl_informer_set_prune. */
void kl_informer_set_transform(kl_informer *inf, kl_informer_transform_fn fn,
                               void (*free_ud)(void *ud), void *ud);
/* Objects the transform refused so far. */
unsigned long kl_informer_transform_errors(const kl_informer *inf);
/* The transform is running: the informer's reflector is inside its sink,
 * so the informer must not be freed now. */
int kl_informer_transforming(const kl_informer *inf);

kl_store *kl_informer_store(kl_informer *inf);
/* The first LIST has been stored and all its notifications taken. */
int kl_informer_synced(const kl_informer *inf);
/* Compresses the store's objects left unwritten for c->after (store.h,
 * kl_store_compact) from now on, a slice at a time on the loop, while no
 * notification is queued. Off until called; once on, it stays on. */
void kl_informer_set_compaction(kl_informer *inf, const kl_store_compaction *c);

typedef struct kl_informer_compaction_stats {
    const char *state;    /* "off", "idle" (nothing left to compress), "timed", "waiting", "slicing",
                           * "yielding" (between two slices) */
    double seconds;       /* the loop thread's CPU time in slices */
    double max_trim;      /* the longest trim of the heap after a slice, seconds */
    unsigned long slices, passes;
} kl_informer_compaction_stats;
void kl_informer_compaction(const kl_informer *inf, kl_informer_compaction_stats *out);

/* Queues an update (old = new) for every cached object, as client-go's
 * periodic resync does. */
void kl_informer_resync(kl_informer *inf);
/* The seq of the last notification queued (0 before the first): a handler
 * added now takes the notifications after it. */
uint64_t kl_informer_seq(const kl_informer *inf);
/* Queues an ADD of every cached object for add handler `handler` alone, as
 * client-go replays its cache to a handler added to a running informer.
 * The cache already holds what the queued notifications say, so the
 * replay, queued after them, is all that handler needs of the past. */
void kl_informer_replay(kl_informer *inf, int handler);
const kl_reflector_stats *kl_informer_stats(const kl_informer *inf);
/* Its reflector's state and last transitions (kl_reflector_history). */
kl_reflector_state kl_informer_state(const kl_informer *inf);
size_t kl_informer_history(const kl_informer *inf, kl_reflector_record *out);
double kl_informer_last_event(const kl_informer *inf);
/* See kl_reflector_last_heard and kl_reflector_relist. */
double kl_informer_last_heard(const kl_informer *inf);
int kl_informer_relist(kl_informer *inf, const char *why);
/* See kl_reflector_reshard and kl_reflector_shard_selector. */
int kl_informer_reshard(kl_informer *inf, const char *selector);
const char *kl_informer_shard_selector(const kl_informer *inf);
const char *kl_informer_rv(const kl_informer *inf);
/* See kl_reflector_failing_for. */
double kl_informer_failing_for(const kl_informer *inf, double now);
/* See kl_reflector_refusal. */
const char *kl_informer_refusal(const kl_informer *inf);

/* Called with each failed LIST or WATCH its reflector will retry
 * (kl_reflector_sink.failed), inside the reflector: fn must not free the
 * informer. */
typedef void (*kl_informer_failed_fn)(void *ud, const kl_reflector_failure *f);
void kl_informer_on_failure(kl_informer *inf, kl_informer_failed_fn fn, void *ud);

#endif
