/* loop.c - the event loop; see loop.h. */
#include "base/loop.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/heap.h"
#include "base/idmap.h"
#include "base/xalloc.h"

/* A pending timer, owned by the loop from kl_loop_after until it runs or
 * is cancelled. It knows its place in the heap, and the id map finds it by
 * id, so that cancelling one of n costs O(log n), not a scan of them all. */
typedef struct timer {
    double when;
    uint64_t id;
    kl_loop_fn fn;
    void *ud;
    size_t pos; /* its index in the heap */
} timer;

/* A descriptor besides curl's whose readiness wakes the loop. */
typedef struct watch {
    int fd;
    kl_loop_fn fn;
    void *ud;
} watch;

typedef struct deferred {
    uint64_t id;
    kl_loop_fn fn; /* NULL once cancelled or run */
    void *ud;
} deferred;

struct kl_loop {
    CURLM *multi;
    kl_loop_done_fn on_done;
    kl_heap timers;     /* of timer *, on when, then id */
    kl_idmap timer_ids; /* id -> timer *, for kl_loop_cancel */
    uint64_t next_id; /* timers and deferred work share one id space */
    deferred *work; /* deferred work queued for the next round */
    size_t nwork, capwork;
    watch watches[KL_LOOP_WATCHES];
    int nwatches;
    int stop;
    int stop_signal;      /* the signal taken, or 0 */
    kl_loop_fn on_signal; /* when set, the signal calls it instead of stopping */
    void *on_signal_ud;
};

/* The one process-wide state (loop.h): SIGINT and SIGTERM have one handler
 * per process, and it may only touch what is volatile sig_atomic_t and make
 * async-signal-safe calls. The first signal is recorded and wakes the loop
 * through a pipe (the self-pipe trick: a signal can come between the
 * loop's look at caught_signo and its poll); the count hook reads
 * caught_signo without a system call. A second signal, or any once the
 * loop has stopped, ends the process at once with the default action
 * (Redis's sigShutdownHandler), whatever runs: a __gc handler, a long C
 * call, a shutdown that is stuck. Loops made while another lives share it. */
static volatile sig_atomic_t caught_signo; /* the first signal, or 0 */
static volatile sig_atomic_t at_once;      /* a signal ends the process at once */
/* How a second signal ends the process: -1, killed by it; else _exit with
 * this status after writing second_line (kl_loop_on_second_signal). */
static volatile sig_atomic_t second_status = -1;
static char second_line[160];
static volatile sig_atomic_t second_len;
static int wake_pipe[2] = {-1, -1};
static int installs; /* loops alive, which share the handler */
static struct sigaction old_int, old_term;
static sigset_t old_mask;

static void on_signal(int sig) {
    if ((caught_signo || at_once) && second_status >= 0) {
        ssize_t n = write(STDERR_FILENO, second_line, (size_t)second_len);
        (void)n;
        _exit(second_status);
    }
    if (caught_signo || at_once) {
        /* Blocked while its handler runs, the signal raised again comes
         * as soon as the handler returns, now with its default action: the
         * process ends as killed by it, with the shell's status 128 + sig. */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    caught_signo = sig;
    int saved = errno;
    ssize_t n = write(wake_pipe[1], "", 1); /* a full pipe wakes the loop already */
    (void)n;
    errno = saved;
}

static int install_handler(void) {
    if (installs++) return 0;
    if (pipe2(wake_pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
        installs--;
        return -1;
    }
    caught_signo = at_once = 0;
    second_status = -1;
    /* Each signal is blocked while the handler runs for either, so the
     * handler never interrupts itself. */
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigprocmask(SIG_UNBLOCK, &sa.sa_mask, &old_mask);
    return 0;
}

static void uninstall_handler(void) {
    if (--installs) return;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    close(wake_pipe[0]);
    close(wake_pipe[1]);
    wake_pipe[0] = wake_pipe[1] = -1;
}

double kl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int earlier(const void *pa, const void *pb) {
    const timer *a = *(timer *const *)pa, *b = *(timer *const *)pb;
    return a->when < b->when || (a->when == b->when && a->id < b->id);
}

static void track(void *elem, size_t index) { (*(timer **)elem)->pos = index; }

kl_loop *kl_loop_new(kl_loop_done_fn on_done) {
    kl_loop *loop = calloc(1, sizeof *loop);
    if (!loop) return NULL;
    loop->multi = curl_multi_init();
    loop->on_done = on_done;
    loop->next_id = 1;
    kl_heap_init(&loop->timers, sizeof(timer *), earlier, track);
    if (!loop->multi || install_handler() < 0) {
        if (loop->multi) curl_multi_cleanup(loop->multi);
        kl_heap_free(&loop->timers);
        free(loop);
        return NULL;
    }
    return loop;
}

void kl_loop_free(kl_loop *loop) {
    if (!loop) return;
    curl_multi_cleanup(loop->multi);
    uninstall_handler();
    for (size_t i = 0; i < kl_heap_len(&loop->timers); i++)
        free(*(timer **)kl_heap_at(&loop->timers, i));
    kl_heap_free(&loop->timers);
    kl_idmap_free(&loop->timer_ids);
    free(loop->work);
    free(loop);
}

CURLM *kl_loop_multi(kl_loop *loop) { return loop->multi; }

uint64_t kl_loop_after(kl_loop *loop, double delay, kl_loop_fn fn, void *ud) {
    timer *t = kl_xmalloc(sizeof *t);
    *t = (timer){kl_now() + (delay > 0 ? delay : 0), loop->next_id++, fn, ud, 0};
    kl_heap_push(&loop->timers, &t);
    kl_idmap_put(&loop->timer_ids, t->id, t);
    return t->id;
}

void kl_loop_cancel(kl_loop *loop, uint64_t id) {
    if (!id) return;
    timer *t = kl_idmap_del(&loop->timer_ids, id);
    if (t) {
        kl_heap_remove(&loop->timers, t->pos, NULL);
        free(t);
        return;
    }
    for (size_t i = 0; i < loop->nwork; i++) {
        if (loop->work[i].id == id) {
            loop->work[i].fn = NULL;
            return;
        }
    }
}

unsigned long kl_loop_timer_compares(const kl_loop *loop) { return loop->timers.compares; }

uint64_t kl_loop_defer(kl_loop *loop, kl_loop_fn fn, void *ud) {
    loop->work = kl_buf_grow(loop->work, &loop->capwork, loop->nwork + 1, sizeof *loop->work, 16);
    loop->work[loop->nwork++] = (deferred){loop->next_id, fn, ud};
    return loop->next_id++;
}

void kl_loop_stop(kl_loop *loop) { loop->stop = 1; }

static const timer *next_timer(const kl_loop *loop) {
    return kl_heap_len(&loop->timers) ? *(timer **)kl_heap_at(&loop->timers, 0) : NULL;
}

static void run_timers(kl_loop *loop) {
    double now = kl_now();
    const timer *next;
    while ((next = next_timer(loop)) && next->when <= now && !loop->stop) {
        timer *t;
        kl_heap_remove(&loop->timers, 0, &t);
        kl_idmap_del(&loop->timer_ids, t->id);
        kl_loop_fn fn = t->fn;
        void *ud = t->ud;
        free(t);
        fn(loop, ud);
    }
}

/* Runs the work deferred so far, once; work deferred meanwhile waits for the
 * next round. An entry is cleared before it runs, so that cancelling it from
 * inside does nothing; a stop leaves the entries not reached queued, still
 * owned by whoever deferred them (and cancellable by them). */
static void run_round(kl_loop *loop) {
    size_t n = loop->nwork, i;
    for (i = 0; i < n && !loop->stop; i++) {
        deferred w = loop->work[i];
        loop->work[i].fn = NULL;
        if (w.fn) w.fn(loop, w.ud);
    }
    if (i == 0) return;
    memmove(loop->work, loop->work + i, (loop->nwork - i) * sizeof *loop->work);
    loop->nwork -= i;
}

/* Up to KL_LOOP_ROUNDS rounds: a frame decoded in one round reaches its
 * handler in the next, while its tape is still in the core's cache, and a
 * stage that keeps deferring still cannot starve the sockets. */
static void run_deferred(kl_loop *loop) {
    for (int r = 0; r < KL_LOOP_ROUNDS && loop->nwork && !loop->stop; r++) run_round(loop);
}

static void reap_transfers(kl_loop *loop) {
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(loop->multi, &left))) {
        if (msg->msg == CURLMSG_DONE) loop->on_done(loop, msg->easy_handle, msg->data.result);
    }
}

/* Takes the signal the handler caught, once: it stops the loop or calls
 * the kl_loop_on_signal function. No system call: the count hook calls
 * this every period. */
int kl_loop_poll_signal(kl_loop *loop) {
    int sig = caught_signo;
    if (!sig || loop->stop_signal) return loop->stop_signal;
    loop->stop_signal = sig;
    if (loop->on_signal) loop->on_signal(loop, loop->on_signal_ud);
    else loop->stop = 1;
    return sig;
}

/* Empties the pipe that woke the loop; what it says is in caught_signo. */
static void drain_wake_pipe(void) {
    char buf[64];
    while (read(wake_pipe[0], buf, sizeof buf) > 0) continue;
}

int kl_loop_signal(const kl_loop *loop) { return loop->stop_signal; }

void kl_loop_on_second_signal(kl_loop *loop, int status, const char *line) {
    (void)loop;
    second_status = -1; /* the handler never reads a half-written line */
    if (status < 0) return;
    snprintf(second_line, sizeof second_line, "%s\n", line);
    second_len = (sig_atomic_t)strlen(second_line);
    second_status = status;
}

void kl_loop_on_signal(kl_loop *loop, kl_loop_fn fn, void *ud) {
    loop->on_signal = fn;
    loop->on_signal_ud = ud;
}

static int wait_timeout_ms(kl_loop *loop) {
    if (loop->nwork) return 0;
    const timer *next = next_timer(loop);
    if (!next) return 1000;
    double ms = (next->when - kl_now()) * 1000.0;
    if (ms <= 0) return 0;
    return ms > 1000 ? 1000 : (int)ms + 1;
}

int kl_loop_watch(kl_loop *loop, int fd, kl_loop_fn fn, void *ud) {
    if (loop->nwatches == KL_LOOP_WATCHES) return -1;
    loop->watches[loop->nwatches++] = (watch){fd, fn, ud};
    return 0;
}

void kl_loop_unwatch(kl_loop *loop, int fd) {
    for (int i = 0; i < loop->nwatches; i++) {
        if (loop->watches[i].fd != fd) continue;
        loop->watches[i] = loop->watches[--loop->nwatches];
        return;
    }
}

/* Waits for curl's sockets, the wake-up pipe and the watched ones;
 * then calls the watchers whose descriptor is readable. A watcher may
 * unwatch itself or another, so the ready ones are collected first. */
static void wait_and_dispatch(kl_loop *loop) {
    struct curl_waitfd fds[1 + KL_LOOP_WATCHES];
    fds[0] = (struct curl_waitfd){.fd = wake_pipe[0], .events = CURL_WAIT_POLLIN};
    int n = loop->nwatches;
    for (int i = 0; i < n; i++)
        fds[1 + i] = (struct curl_waitfd){.fd = loop->watches[i].fd, .events = CURL_WAIT_POLLIN};
    curl_multi_poll(loop->multi, fds, (unsigned)(1 + n), wait_timeout_ms(loop), NULL);
    if (fds[0].revents & CURL_WAIT_POLLIN) drain_wake_pipe();
    kl_loop_poll_signal(loop);
    watch ready[KL_LOOP_WATCHES];
    int nready = 0;
    for (int i = 0; i < n; i++)
        if (fds[1 + i].revents & CURL_WAIT_POLLIN) ready[nready++] = loop->watches[i];
    for (int i = 0; i < nready; i++) {
        for (int j = 0; j < loop->nwatches; j++) {
            if (loop->watches[j].fd == ready[i].fd) {
                ready[i].fn(loop, ready[i].ud);
                break;
            }
        }
    }
}

int kl_loop_run(kl_loop *loop) {
    while (!loop->stop) {
        int running;
        kl_loop_poll_signal(loop);
        if (loop->stop) break;
        curl_multi_perform(loop->multi, &running);
        reap_transfers(loop);
        run_timers(loop);
        run_deferred(loop);
        if (loop->stop) break;
        wait_and_dispatch(loop);
    }
    /* What runs after the loop (the teardown's __gc handlers) is not
     * stopped gracefully, so the next signal ends klua at once, as killed
     * by it: there is no graceful stop left to cut short. */
    second_status = -1;
    at_once = 1;
    return loop->stop_signal;
}
