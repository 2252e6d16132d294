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
 * created itself), so nothing here is global.
 */
#ifndef KLUA_RUNTIME_H
#define KLUA_RUNTIME_H

#include <lua.h>

#include "conn/conn.h"
#include "conn/http.h"
#include "base/loop.h"

typedef struct kl_task kl_task;

/* What running a controller for real adds (docs/deploy.md): leader
 * election and the metrics and probe endpoint. Strings point into argv. */
typedef struct kl_ctl_opts {
    int leader_elect;
    const char *election_id;        /* the Lease's name; NULL = the script's name */
    const char *election_namespace; /* NULL = in-cluster namespace, else the context's */
    double lease_duration, renew_deadline, retry_period; /* seconds; 0 = 15, 10, 2 */
    const char *metrics_addr;       /* --metrics-bind-address; NULL or "0" = off */
    const char *probe_addr;         /* --health-probe-bind-address; NULL or "0" = off */
    const char *script;             /* klua run's script path, for the Lease's default name */
    double graceful_shutdown_timeout; /* seconds a graceful stop may take; 0 = 30 */
} kl_ctl_opts;

typedef struct kl_rt_opts {
    kl_conn_opts conn;
    kl_ctl_opts ctl;
    long instruction_budget; /* per resume of a task; 0 = unlimited */
    size_t memory_limit;     /* bytes for the Lua state; 0 = unlimited */
    double idle_timeout;     /* watch idle limit, seconds; 0 = default */
    double watch_timeout_min, watch_timeout_max; /* 0 = [300, 600) */
    int watch_list;          /* informers use WatchList (sendInitialEvents) */
    double watch_list_deadline; /* seconds for its initial state; 0 = 10 */
    int page_size;           /* LIST limit; 0 = 500 */
    double request_timeout;  /* seconds for a LIST or an API call; 0 = 300 and 60 */
} kl_rt_opts;

/* Why every further instruction of the running task fails. */
enum { KL_STOPPED_BY_BUDGET = 1, KL_STOPPED_BY_SIGNAL };

/* What runs now: the innermost task being resumed. Saved and restored
 * around every resume (task.c), so that a task started from inside another
 * one leaves the outer one's state as it found it. */
typedef struct kl_run_state {
    kl_task *task;      /* NULL while no task runs */
    long used;          /* instructions run since the resume */
    int stopped;        /* 0 or KL_STOPPED_BY_*: every instruction fails */
    int enforce_memory; /* the memory limit binds only while script code runs */
    unsigned signals;   /* signals that had come when the resume began */
} kl_run_state;

/* How a graceful stop was cut short. */
enum { KL_SHUTDOWN_TIMED_OUT = 1, KL_SHUTDOWN_SIGNALLED };

/* A graceful stop (controller-runtime's): with start_ref set, the first
 * SIGINT/SIGTERM does not stop the loop but starts that Lua function as a
 * task (lua/klua/shutdown.lua), which ends the run with klua.stop when the
 * reconciles in flight, the on_shutdown hooks and the Lease's release are
 * done; a second signal or the timeout cuts it short. */
typedef struct kl_rt_shutdown {
    int start_ref;    /* function(signal name), or LUA_NOREF: no graceful stop */
    int describe_ref; /* function() -> what still runs, for the report */
    double deadline;  /* kl_now() past which the stop is cut short; 0 before the signal */
    uint64_t timer;
    int cut_short;    /* 0 or KL_SHUTDOWN_* */
} kl_rt_shutdown;

typedef struct kl_rt_timer kl_rt_timer;
typedef struct kl_endpoint kl_endpoint;
typedef struct lua_informer lua_informer;
typedef struct lua_queue lua_queue;

typedef struct kl_rt {
    lua_State *L;
    kl_loop *loop;
    kl_conn *conn;
    kl_http *http;
    kl_rt_opts opts;
    size_t mem_used;
    kl_run_state cur;
    kl_task *tasks; /* every task alive, for the final clean-up */
    kl_task **pool; /* finished tasks kept for reuse with their threads */
    size_t npool, cappool;
    size_t suspended;        /* tasks waiting on I/O or a timer */
    unsigned long task_errors;
    kl_rt_timer *timers;     /* klua.after / klua.every, live ones */
    lua_Integer timer_serial;
    lua_informer *informers; /* every informer the script made */
    lua_queue *queues;       /* every work queue the script made */
    kl_endpoint *endpoints;  /* the metrics and probe servers, at most two */
    int on_synced_ref;       /* table of callbacks waiting for sync, or LUA_NOREF */
    kl_rt_shutdown shutdown;
    int exit_code;
    int script_failed;
    int main_done;
    int running; /* inside kl_rt_run */
    int closing; /* kl_rt_free has begun: nothing new may be made */
    char script_name[64];
} kl_rt;

/* A runtime connected as opts says. NULL with a message in err. */
kl_rt *kl_rt_new(const kl_rt_opts *opts, char *err, size_t errlen);
void kl_rt_free(kl_rt *rt);
/* Loads and starts a script (path, or chunk text when chunk is not NULL)
 * with its arguments, then runs the loop until the script has nothing left
 * to wait for, calls klua.stop, or SIGINT/SIGTERM arrives. Returns the exit
 * code: 1 if the main chunk failed, else the code given to klua.stop (0 by
 * default), a signal included. */
int kl_rt_run(kl_rt *rt, const char *path, const char *chunk, int argc, char **argv);
/* The signal that stopped the run, or 0. */
int kl_rt_stop_signal(const kl_rt *rt);
kl_rt *kl_rt_of(lua_State *L);
/* Stops the loop when no task runs and nothing is left that could run
 * script code again. */
void kl_rt_check_idle(kl_rt *rt);
/* Makes the first signal start the Lua function under the one on top of
 * rt's stack (the start, then the describe function) instead of stopping
 * the loop; see kl_rt_shutdown. [-2, +0] */
void kl_rt_graceful(kl_rt *rt, lua_State *L);
/* For the count hook, once a signal came: whether the graceful stop has
 * been cut short (a second signal, or its deadline passed: then it cuts it
 * short now), so that whatever runs must stop. */
int kl_rt_shutdown_overdue(kl_rt *rt);

#endif
