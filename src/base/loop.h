/*
 * loop.h - the one event loop: libcurl's multi handle, timers, deferred
 * work and termination signals, all on one thread (Redis's ae.c is the
 * model). Lua runs on this thread only; nothing here blocks except the
 * wait for the next socket event, timer or signal (see Signals below).
 */
#ifndef KLUA_LOOP_H
#define KLUA_LOOP_H

#include <curl/curl.h>
#include <stdint.h>

typedef struct kl_loop kl_loop;
typedef void (*kl_loop_fn)(kl_loop *loop, void *ud);
/* Called for each transfer that finished; the callee removes and frees it. */
typedef void (*kl_loop_done_fn)(kl_loop *loop, CURL *easy, CURLcode result);

kl_loop *kl_loop_new(kl_loop_done_fn on_transfer_done);
void kl_loop_free(kl_loop *loop);
CURLM *kl_loop_multi(kl_loop *loop);

/* Seconds on a monotonic clock that also counts the time the machine was
 * suspended (CLOCK_BOOTTIME): a Lease's validity is judged by it, and a
 * replica whose VM was suspended past its lease must see it lapsed. */
double kl_now(void);

/* Runs fn once, delay seconds from now. Returns an id > 0 for kl_loop_cancel. */
uint64_t kl_loop_after(kl_loop *loop, double delay, kl_loop_fn fn, void *ud);

/* Runs fn in the next round of deferred work, before the loop waits again.
 * Deferred work is how stages hand work to each other without re-entering
 * one another. An iteration runs up to KL_LOOP_ROUNDS rounds, each the work
 * deferred by the one before; what is deferred after the last waits for the
 * next iteration, after the sockets and timers. A stage that hands on work a
 * batch at a time does KL_LOOP_ROUNDS batches an iteration.
 * Returns an id > 0 for kl_loop_cancel (out of memory aborts, see xalloc.h). */
#define KL_LOOP_ROUNDS 32
/* What a stage that hands on work a batch at a time takes a round: the
 * frames a reflector decodes, the notifications an informer dispatches.
 * One size for both, so that the frames decoded in one round reach their
 * handlers in the next while their tapes are still in the core's cache;
 * KL_LOOP_ROUNDS of them an iteration (256) still let the sockets be
 * served. */
#define KL_LOOP_BATCH 8
uint64_t kl_loop_defer(kl_loop *loop, kl_loop_fn fn, void *ud);

/* Cancels a timer or deferred work that has not run yet; 0, unknown ids and
 * work that already ran are ignored. Whoever schedules work with ud
 * pointing at itself cancels it when it is freed. */
void kl_loop_cancel(kl_loop *loop, uint64_t id);
/* How many comparisons of two timers the loop has made: for specs that
 * check that scheduling or cancelling one of n costs O(log n). */
unsigned long kl_loop_timer_compares(const kl_loop *loop);

/* At most this many descriptors are watched besides curl's: an endpoint's
 * one each, and the two pipes of a running exec plugin. */
#define KL_LOOP_WATCHES 8
/* Calls fn on the loop whenever fd is readable or hung up (a server's
 * listening or epoll descriptor, a pipe). Returns 0, or -1 when
 * KL_LOOP_WATCHES are watched. */
int kl_loop_watch(kl_loop *loop, int fd, kl_loop_fn fn, void *ud);
/* Stops watching fd; unknown descriptors are ignored. */
void kl_loop_unwatch(kl_loop *loop, int fd);

/* Signals. klua owns SIGINT and SIGTERM while a loop lives: kl_loop_new
 * installs one process-wide handler (the one global state, shared by the
 * loops of a process) and kl_loop_free puts the old one back. The first
 * signal is a request: the handler records it and wakes the loop through a
 * pipe, and the loop takes it (kl_loop_poll_signal) on waking or from code
 * that runs long without returning to it (the count hook). A second signal
 * ends the process at once from the handler, whatever runs then: with the
 * default action (status 128 + its number), or as kl_loop_on_second_signal
 * says; any signal once kl_loop_run has returned ends it with the default
 * action. */

/* Runs until kl_loop_stop or SIGINT/SIGTERM; once stopped it stays stopped.
 * Returns 0, or the signal taken. With kl_loop_on_signal, the signal does
 * not stop the loop but calls that function. */
int kl_loop_run(kl_loop *loop);
void kl_loop_stop(kl_loop *loop);
/* Takes a SIGINT/SIGTERM that came and was not taken yet, stopping the loop
 * (or calling the kl_loop_on_signal function); no system call, for code
 * that runs long without returning to the loop. Returns the signal taken,
 * or 0. */
int kl_loop_poll_signal(kl_loop *loop);
/* The signal taken, or 0. */
int kl_loop_signal(const kl_loop *loop);
/* A graceful stop: fn runs for the signal instead of stopping the loop. It
 * may run inside kl_loop_poll_signal, in the middle of script code, so it
 * may only schedule work (kl_loop_after, kl_loop_defer) or stop the loop. */
void kl_loop_on_signal(kl_loop *loop, kl_loop_fn fn, void *ud);
/* A second signal while the loop runs then writes line to stderr and exits
 * with status rather than dying of the signal (controller-runtime's manager
 * exits 1 on its second signal); status -1 (line unused) makes it kill the
 * process again, and so does any signal once kl_loop_run has returned.
 * Its owner (the runtime's phase) sets it as the run goes on. */
void kl_loop_on_second_signal(kl_loop *loop, int status, const char *line);

#endif
