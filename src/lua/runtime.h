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
    int shards;                     /* --shards: 0 = none (docs/scale.md) */
} kl_ctl_opts;

typedef struct kl_rt_opts {
    kl_conn_opts conn;
    kl_ctl_opts ctl;
    long instruction_budget; /* per resume of a task; 0 = unlimited */
    size_t memory_limit;     /* bytes for the Lua state, and for one klua.api response
                              * (KL_HTTP_BODY_MAX when 0); 0 = unlimited */
    double idle_timeout;     /* watch idle limit, seconds; 0 = default */
    double watch_timeout_min, watch_timeout_max; /* 0 = [300, 600) */
    int watch_list;          /* informers use WatchList (sendInitialEvents) */
    double watch_list_deadline; /* seconds for its initial state; 0 = 10 */
    int page_size;           /* LIST limit; 0 = 500 */
    double request_timeout;  /* seconds for a LIST or an API call; 0 = 300 and 60 */
} kl_rt_opts;

/* The parts of a runtime: each is one file of src/lua/ that owns its state
 * behind its own header and registers it, with its hooks, when the runtime
 * is made (kl_rt_new, in this order). No part reads another's state: parts
 * call the runtime, and the runtime calls them through their hooks. */
typedef enum kl_rt_part {
    KL_RT_TASKS,     /* task.c: the coroutines, their pool, the run state */
    KL_RT_CORE,      /* lua_klua.c: klua.core's timers */
    KL_RT_INFORMERS, /* lua_informer.c: informers and their dispatch */
    KL_RT_QUEUES,    /* lua_queue.c: work queues */
    KL_RT_ENDPOINTS, /* lua_endpoint.c: the metrics and probe servers */
    KL_RT_NPARTS
} kl_rt_part;

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
    /* The script's main chunk has returned: handlers may now be called. */
    void (*started)(void *state);
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
 * with its arguments, then runs the loop until the script has nothing left
 * to wait for, calls klua.stop, or SIGINT/SIGTERM arrives (a second one
 * ends the process, see loop.h). Returns the exit
 * code: 1 if the main chunk failed, else the code given to klua.stop (0 by
 * default), a signal included. */
int kl_rt_run(kl_rt *rt, const char *path, const char *chunk, int argc, char **argv);
/* The signal that stopped the run, or 0. */
int kl_rt_stop_signal(const kl_rt *rt);
kl_rt *kl_rt_of(lua_State *L);
/* Stops the loop when the script's main chunk has returned and every part
 * is idle. */
void kl_rt_check_idle(kl_rt *rt);
/* Makes the first signal start the Lua function under the one on top of
 * rt's stack (the start, then the describe function) instead of stopping
 * the loop; see the graceful stop in runtime.c. [-2, +0] */
void kl_rt_graceful(kl_rt *rt, lua_State *L);
/* For the count hook, once a signal came: whether the graceful stop has
 * been cut short (its deadline passed: then it cuts it short now), so that
 * whatever runs must stop. */
int kl_rt_shutdown_overdue(kl_rt *rt);
/* Whether the first signal starts a graceful stop (kl_rt_graceful was called). */
int kl_rt_graceful_set(const kl_rt *rt);

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
/* Whether kl_rt_free has begun: nothing new may be made. */
int kl_rt_closing(const kl_rt *rt);
/* Whether the script's main chunk has returned. */
int kl_rt_started(const kl_rt *rt);
/* klua.stop(code): the run ends with code once the current callback returns. */
void kl_rt_exit(kl_rt *rt, int code);
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
