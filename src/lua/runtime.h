/*
 * runtime.h - one klua runtime: the Lua state, the event loop, the HTTP
 * client and connection, and the tasks (coroutines) that run script code.
 *
 * Every piece of script code runs as a task: the main chunk, each handler
 * call, each timer callback, each reconcile. A task that calls the API
 * yields; the loop resumes it when the response arrives (lua-nginx-module's
 * model), so no script code ever blocks the loop.
 *
 * The runtime is found from any lua_State through the allocator's userdata,
 * and a task from its thread's extra space (NULL for threads the script
 * created itself), so nothing here is global. The runtime itself owns the
 * Lua state, the loop, the connection, the HTTP client, the script's
 * lifetime and the sync barrier; the rest belongs to its parts
 * (kl_rt_part), each behind its own header.
 */
#ifndef KLUA_RUNTIME_H
#define KLUA_RUNTIME_H

#include <lua.h>

#include "base/loop.h"
#include "conn/conn.h"
#include "conn/http.h"
#include "cache/reflector.h"

/* client-go's leader election timings by default, in seconds, as
 * controller-runtime's manager sets them: the one place klua keeps them
 * (the flags' help, their check, and klua.core.lease_defaults for
 * lua/klua/leader.lua). Integers, so that the help can spell them. */
#define KL_LEASE_DURATION 15
#define KL_RENEW_DEADLINE 10
#define KL_RETRY_PERIOD 2

/* What running a controller for real adds (docs/deploy.md): leader
 * election and the metrics and probe endpoint. Strings point into argv. */
typedef struct kl_ctl_opts {
    int leader_elect;
    const char *election_id;        /* the Lease's name; NULL = the script's name */
    const char *election_namespace; /* NULL = in-cluster namespace, else the context's */
    double lease_duration, renew_deadline, retry_period; /* seconds; 0 = KL_LEASE_DURATION, ... */
    const char *metrics_addr;       /* --metrics-bind-address; NULL or "0" = off */
    const char *probe_addr;         /* --health-probe-bind-address; NULL or "0" = off */
    const char *ui_addr;            /* --ui-bind-address: the live page; NULL = off */
    const char *webhook_addr;       /* --webhook-bind-address; NULL = off */
    const char *webhook_cert_dir;   /* --webhook-cert-dir; NULL = KL_WEBHOOK_CERT_DIR */
    const char *script;             /* klua run's script path, for the Lease's default name */
    double graceful_shutdown_timeout; /* seconds a graceful stop may take; 0 = 30 */
    int shards;                     /* --shards: 0 = none (docs/scale.md) */
    int server_sharding;            /* --server-side-sharding: ask a server that shards
                                     * lists (KEP-5866) for the held shards only; 1 unless =false */
    double readyz_max_staleness;    /* seconds an informer may hear nothing before
                                     * /readyz turns 503; 0 = no bound */
    double verify_cache;            /* seconds between checks of the caches against a
                                     * consistent LIST; 0 = none */
    int dry_run;                    /* --dry-run: every klua.api write sent with dryRun=All */
    int once;                       /* --once: reconcile each key of the initial sync once, then exit */
} kl_ctl_opts;

typedef struct kl_rt_opts {
    kl_conn_opts conn;
    kl_ctl_opts ctl;
    long instruction_budget; /* per resume of a task; 0 = unlimited */
    size_t memory_limit;     /* bytes for the Lua state, and for one klua.api response
                              * (KL_HTTP_BODY_MAX when 0); 0 = unlimited */
    double idle_timeout;     /* watch idle limit, seconds; 0 = default */
    double watch_timeout_min, watch_timeout_max; /* 0 = [300, 600) */
    kl_watch_list_mode watch_list; /* informers' WatchList (sendInitialEvents); zero: off */
    double watch_list_deadline; /* seconds for its initial state; 0 = 10 */
    int page_size;           /* LIST limit; 0 = 500 */
    int cbor;                /* --serialization cbor: informers ask for CBOR */
    double request_timeout;  /* seconds for a LIST or an API call; 0 = 300 and 60 */
    int cache_compression;   /* --cache-compression: compress cached objects left unwritten;
                              * 1 unless =false */
    double cache_compression_after; /* seconds unwritten before; 0 = KL_STORE_COMPACTION's */
} kl_rt_opts;

/* The parts of a runtime: each is one file of src/lua/ that owns its state
 * behind its own header and registers it, with its hooks, when the runtime
 * is made (kl_rt_new, in this order). No part reads another's state: parts
 * call the runtime, and the runtime calls them through their hooks. */
typedef enum kl_rt_part {
    KL_RT_TASKS,     /* task.c: the coroutines, their pool, the run state */
    KL_RT_CORE,      /* lua_klua.c: klua.core's own functions */
    KL_RT_TIMERS,    /* lua_loop.c: klua.after and klua.every's timers */
    KL_RT_INFORMERS, /* lua_informer.c: informers and their dispatch */
    KL_RT_QUEUES,    /* lua_queue.c: work queues */
    KL_RT_ENDPOINTS, /* lua_endpoint.c: the metrics and probe servers */
    KL_RT_WEBHOOKS,  /* lua_webhook.c: the webhook server */
    KL_RT_NPARTS
} kl_rt_part;

/* The runtime's lifecycle: one phase at a time, each carrying its own data
 * (DRAINING, HOOKS and RELEASING the graceful stop's deadline and timer,
 * STOPPED the exit code), changed by one function along this table, which
 * is kl_rt_transitions() printed (spec/unit/runtime_phases_spec.lua
 * compares the two, and docs/architecture.md's); it aborts on a
 * transition the table does not declare, and narrates each at -v 2:
 *
 * PHASES
 * NEW        kl_rt_run                             -> LOADING    the main chunk runs; informers list, handlers wait
 *            SIGINT/SIGTERM                        -> STOPPED    the script never starts; exit 0
 *            kl_rt_free                            -> CLOSED     the script did not load, or never ran
 * LOADING    the main chunk ended                  -> RUNNING    handlers, timers and klua.on_synced start
 *            the main chunk failed                 -> STOPPED    exit 1
 *            klua.stop(code)                       -> STOPPED    exit code
 *            SIGINT/SIGTERM                        -> STOPPED    every task stops (klua watch); exit 0
 *            SIGINT/SIGTERM, a graceful stop set   -> DRAINING   the shutdown starts, within its deadline
 * RUNNING    nothing left to run                   -> STOPPED    exit 0
 *            klua.stop(code)                       -> STOPPED    exit code
 *            SIGINT/SIGTERM                        -> STOPPED    every task stops (klua watch); exit 0
 *            SIGINT/SIGTERM, a graceful stop set   -> DRAINING   the shutdown starts, within its deadline
 * DRAINING   the main chunk ended                  -> DRAINING   no handler starts for a script not loaded
 *            the reconciles in flight ended        -> HOOKS      no handler starts; the on_shutdown hooks run
 *            klua.stop(code)                       -> STOPPED    exit code
 *            the deadline passed                   -> CUT_SHORT  every task stops; exit 1
 * HOOKS      the main chunk ended                  -> HOOKS
 *            the hooks ran                         -> RELEASING  the Lease and the shards are released
 *            klua.stop(code)                       -> STOPPED    exit code
 *            the deadline passed                   -> CUT_SHORT  every task stops; exit 1
 * RELEASING  the main chunk ended                  -> RELEASING
 *            klua.stop(code)                       -> STOPPED    exit code (the shutdown's own: 0)
 *            the deadline passed                   -> CUT_SHORT  every task stops; exit 1
 * STOPPED    the main chunk ended                  -> STOPPED
 *            the main chunk failed                 -> STOPPED    exit 1
 *            klua.stop(code)                       -> STOPPED    exit code
 *            SIGINT/SIGTERM                        -> STOPPED    every task stops
 *            kl_rt_free                            -> CLOSED     teardown; nothing new may be made
 * CUT_SHORT  the main chunk ended                  -> CUT_SHORT
 *            klua.stop(code)                       -> CUT_SHORT  exit 1 all the same
 *            kl_rt_free                            -> CLOSED     teardown; nothing new may be made
 * CLOSED     klua.stop(code)                       -> CLOSED     a __gc handler's: the run is over
 * END PHASES
 *
 * No script code starts in STOPPED, CUT_SHORT and CLOSED, so the loop
 * stops on entering the first two. The phase owns the signal policy: a
 * first SIGINT/SIGTERM is an event of the table, and a second one exits 1
 * with a line (loop.h, as controller-runtime's second signal) from the
 * phases in which a graceful stop is set or under way, and kills the
 * process in the others.
 */
typedef enum kl_rt_phase {
    KL_RT_NEW,            /* made; kl_rt_run not called */
    KL_RT_LOADING,        /* the main chunk runs */
    KL_RT_RUNNING,        /* the main chunk returned: handlers, timers */
    KL_RT_DRAINING,       /* graceful stop: the reconciles in flight finish */
    KL_RT_SHUTDOWN_HOOKS, /* graceful stop: the klua.on_shutdown hooks run */
    KL_RT_RELEASING,      /* graceful stop: the Lease is released */
    KL_RT_STOPPED,        /* the run ends with its exit code */
    KL_RT_CUT_SHORT,      /* the graceful stop outlasted its deadline */
    KL_RT_CLOSED,         /* kl_rt_free has begun */
    KL_RT_NPHASES
} kl_rt_phase;

typedef enum kl_rt_event {
    KL_RT_EV_RUN,
    KL_RT_EV_MAIN_ENDED,  /* returned, or stopped by a signal */
    KL_RT_EV_MAIN_FAILED,
    KL_RT_EV_STOP,
    KL_RT_EV_IDLE,
    KL_RT_EV_SIGNAL,
    KL_RT_EV_SIGNAL_GRACEFUL,
    KL_RT_EV_DRAINED,
    KL_RT_EV_HOOKS_RAN,
    KL_RT_EV_DEADLINE,
    KL_RT_EV_CLOSE,
    KL_RT_NEVENTS
} kl_rt_event;

/* One row of the table. */
typedef struct kl_rt_transition {
    kl_rt_phase from;
    kl_rt_event event;
    kl_rt_phase to;
    const char *then; /* what the runtime does */
} kl_rt_transition;

/* Every transition the runtime can make, *n rows; it makes no other. */
const kl_rt_transition *kl_rt_transitions(size_t *n);
const char *kl_rt_phase_name(kl_rt_phase p);
/* What happened, as the table prints it. */
const char *kl_rt_event_name(kl_rt_event e);

/* What the runtime asks of a part; any hook may be NULL. */
typedef struct kl_rt_hooks {
    /* Adds the part's functions to the klua.core table on top of L, when
     * the script first requires it. [-0, +0, e] */
    void (*open)(void *state, lua_State *L);
    /* Whether nothing of the part can start script code again (NULL: it
     * never keeps the script running). */
    int (*idle)(void *state);
    /* Whether the part has what klua.on_synced waits for (NULL: it has). */
    int (*synced)(void *state);
    /* The runtime made transition t (kl_rt_transitions; t->to is the phase
     * now). It may run inside the count hook, in the middle of script
     * code (a signal taken there): it may only change the part's own state
     * and schedule work on the loop. */
    void (*phase)(void *state, const kl_rt_transition *t);
    /* Closes what script code could reach, before lua_close, in
     * kl_rt_free's order: the part's handles then raise "closed". */
    void (*close)(void *state);
    /* Frees the state itself, after lua_close (NULL: close freed it). */
    void (*free)(void *state);
} kl_rt_hooks;

typedef struct kl_rt kl_rt;

/* A runtime connected as opts says. NULL with a message in err. */
kl_rt *kl_rt_new(const kl_rt_opts *opts, char *err, size_t errlen);
void kl_rt_free(kl_rt *rt);
/* Loads and starts a script (path, or chunk text when chunk is not NULL)
 * with its arguments, then runs the loop until the run reaches STOPPED or
 * CUT_SHORT (the table above). Returns the exit code: 1 if the script did
 * not load, else STOPPED's code, or 1 when the graceful stop was cut short
 * (after an error line naming what it still waited for). */
int kl_rt_run(kl_rt *rt, const char *path, const char *chunk, int argc, char **argv);
/* The signal that stopped the run, or 0. */
int kl_rt_stop_signal(const kl_rt *rt);
kl_rt *kl_rt_of(lua_State *L);
/* The phase now. */
kl_rt_phase kl_rt_current(const kl_rt *rt);
/* Whether no script code starts any more: STOPPED, CUT_SHORT, CLOSED. */
int kl_rt_ended(const kl_rt *rt);
/* Whether kl_rt_free has begun (CLOSED): nothing new may be made. */
int kl_rt_closing(const kl_rt *rt);
/* Whether the runtime can make the transition of event e now (for the
 * steps script code asks for: the table refuses the others). */
int kl_rt_can(const kl_rt *rt, kl_rt_event e);
/* Makes the transition of e, which the table must declare from the phase
 * now (else klua aborts: a bug). code is klua.stop's exit code. */
void kl_rt_advance(kl_rt *rt, kl_rt_event e, int code);
/* RUNNING ends once every part is idle (nothing left to run). */
void kl_rt_check_idle(kl_rt *rt);
/* Makes the first signal start the Lua function under the one on top of
 * rt's stack (the start, then the describe function): the graceful stop
 * of klua run (DRAINING). [-2, +0] */
void kl_rt_graceful(kl_rt *rt, lua_State *L);
/* Whether kl_rt_graceful was called. */
int kl_rt_graceful_set(const kl_rt *rt);
/* During a graceful stop, cuts it short if its deadline has passed: for
 * the count hook, when a reconcile spins and the deadline's timer cannot
 * run. */
void kl_rt_check_deadline(kl_rt *rt);

/* Called once by each part as kl_rt_new makes it; hooks (static) and
 * state stay the part's. */
void kl_rt_register(kl_rt *rt, kl_rt_part part, const kl_rt_hooks *hooks, void *state);
/* The state a part registered, for that part's own functions. */
void *kl_rt_state(const kl_rt *rt, kl_rt_part part);

lua_State *kl_rt_lua(const kl_rt *rt);
kl_loop *kl_rt_loop(const kl_rt *rt);
kl_conn *kl_rt_conn(const kl_rt *rt);
kl_http *kl_rt_http(const kl_rt *rt);
const kl_rt_opts *kl_rt_options(const kl_rt *rt);
/* The script's file name, for the log. */
const char *kl_rt_script_name(const kl_rt *rt);
/* Bytes the Lua state holds. */
size_t kl_rt_memory(const kl_rt *rt);
/* Which collector runs the Lua state: collector.h's mode name. */
const char *kl_rt_collector(const kl_rt *rt);
/* Whether --memory-limit binds: only while script code runs (task.c says
 * when), so the host's own pushes never fail outside a protected call. */
void kl_rt_bind_memory(kl_rt *rt, int on);

/* The sync barrier, in one place: klua.on_synced(fn) queues the function
 * at idx, run as a task once the main chunk has returned and every part is
 * synced (at once when both hold already). [-0, +0, e] */
void kl_rt_on_synced(lua_State *L, int idx);
/* Runs the queued on_synced functions if the barrier is passed; a part
 * calls it when it may have become synced. from is the thread of the C
 * function asking (NULL from the loop). */
void kl_rt_check_synced(kl_rt *rt, lua_State *from);

#endif
