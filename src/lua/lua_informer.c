/*
 * lua_informer.c - informers as the script sees them, and the dispatch of
 * their notifications to handlers.
 *
 * Each informer delivers its notifications in order. Each handler call runs
 * as a task; while one is suspended (waiting on the API), the informer's
 * later notifications wait too, as client-go's listeners do. Handlers of one
 * notification share the same read-only views.
 */
#include "lua/lua_informer.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/loop.h"
#include "cache/informer.h"
#include "wire/prune.h"
#include "base/log.h"
#include "lua/lua_transform.h"
#include "lua/object.h"
#include "lua/opt.h"
#include "lua/task.h"
#include "lua/view.h"
#include "base/xalloc.h"

#define INFORMER_MT "klua.informer"

static const char *const event_names[] = {"add", "update", "delete", NULL};
_Static_assert(KL_CHANGE_ADD == 0 && KL_CHANGE_UPDATE == 1 && KL_CHANGE_DELETE == 2 &&
                   sizeof event_names / sizeof *event_names == KL_CHANGE_DELETE + 2,
               "one event name per kl_change, in its order, then NULL");
/* lua_informer.calls: after the event types, the error handlers' calls. */
enum { ERROR_CALLS = KL_CHANGE_DELETE + 1, NCALLS };

typedef struct lua_informer lua_informer;

/* What the dispatch does with notifications, as the runtime's phase says
 * (informers_phase). */
typedef enum {
    D_WAIT,    /* the main chunk runs: handlers are still being registered */
    D_CALL,    /* RUNNING and DRAINING: each handler is called */
    D_CONSUME, /* from HOOKS on: consumed, no handler starts */
    D_OFF      /* the run has ended: nothing more */
} dispatch_mode;

/* The runtime's part KL_RT_INFORMERS. */
typedef struct informers {
    kl_rt *rt;
    lua_informer *list;     /* every informer the script made, newest first */
    lua_informer *stopping; /* stopped from a handler still running */
    dispatch_mode mode;
} informers;

struct lua_informer {
    kl_rt *rt;
    kl_informer *inf;
    lua_informer *next; /* informers' list */
    int ud_ref; /* the script's handle, kept for the runtime's lifetime */
    char name[160];
    char task_names[3][200]; /* per event type: its handlers' task name */
    /* Per event type: the handlers, and for each the seq of the first
     * notification it takes (0 for handlers added before dispatch began). */
    uint64_t *since[3];
    int nhandlers[3];
    size_t cap[3];
    kl_notif cur; /* the notification being dispatched */
    int has_cur, hidx, views_made;
    int busy;      /* a handler of cur is suspended */
    int in_call;   /* inside kl_task_spawn */
    int reading;   /* inside inf:get() or inf:list() (read_cache) */
    /* The blobs of the reads whose views are being made (push_read), for
     * read_cache to let go of should the making raise. */
    kl_blob **parked;
    size_t nparked, parked_cap;
    uint64_t drain_id; /* the deferred drain, or 0 */
    int was_synced;
    int stopped;   /* inf:stop() came while a handler of it ran, or a read: freed when it ends */
    double resync;
    uint64_t resync_timer;
    /* The last failure of its reflector, until its error handlers have it. */
    struct {
        int pending, code, persistent, watched;
        char verb[8], message[600];
    } failure;
    uint64_t failure_id; /* the deferred tell_failure, or 0 */
    char error_task_name[200];
    /* Handler calls started per event type, then of error handlers; and
     * the add, update and delete calls that failed, of which the
     * instruction budget stopped budget_stops. An error handler's task
     * may outlive the informer, so its end is not counted here. */
    unsigned long calls[NCALLS], handler_errors, budget_stops;
};

/* Why inf:stop() closed a handle; tostring tells it from KL_OBJECT_SHUTDOWN
 * by address. */
static const char STOPPED[] = "is stopped (inf:stop() was called)";

/* The script's handle: its state the informer, closed by inf:stop() or by
 * the runtime; user value 2 the handlers by event type, 3 the views of the
 * notification being dispatched when more than one handler takes it
 * (push_shared_args). The runtime keeps the handle of every informer it
 * runs (ud_ref) until it closes it: a handle collected with its state
 * still set is one whose core.informer call raised before the informer
 * was registered, and its __gc frees it. */
typedef struct box {
    kl_object o;
    char name[160]; /* li->name, for tostring once li is gone */
} box;

static lua_informer *check_informer(lua_State *L, int idx) { return kl_object_check(L, idx, INFORMER_MT); }

static void unlink_informer(lua_informer **list, lua_informer *li) {
    for (lua_informer **p = list; *p; p = &(*p)->next) {
        if (*p == li) {
            *p = li->next;
            return;
        }
    }
}

/* Frees li and what it owns: its watch, its cache, its handlers. The
 * handle stays, closed; li must be out of the runtime's lists already. */
static void free_informer(lua_informer *li) {
    lua_State *L = kl_rt_lua(li->rt);
    kl_loop_cancel(kl_rt_loop(li->rt), li->resync_timer);
    kl_loop_cancel(kl_rt_loop(li->rt), li->drain_id);
    kl_loop_cancel(kl_rt_loop(li->rt), li->failure_id);
    if (li->has_cur) kl_notif_clear(&li->cur);
    for (int i = 0; i < 3; i++) free(li->since[i]);
    free(li->parked);
    kl_informer_free(li->inf);
    li->inf = NULL;
    lua_rawgeti(L, LUA_REGISTRYINDEX, li->ud_ref); /* stack: handle */
    box *b = lua_touserdata(L, -1);
    if (b->o.state) kl_object_close(&b->o, KL_OBJECT_SHUTDOWN);
    lua_pop(L, 1);
    luaL_unref(L, LUA_REGISTRYINDEX, li->ud_ref);
    free(li);
}

/* A stopped informer that nothing holds any more (a handler, a drain, a
 * read of its cache) leaves the runtime's list of those stopping, and goes. */
static void free_stopped(lua_informer *li) {
    unlink_informer(&((informers *)kl_rt_state(li->rt, KL_RT_INFORMERS))->stopping, li);
    free_informer(li);
}

static int l_gc(lua_State *L) {
    box *b = luaL_checkudata(L, 1, INFORMER_MT);
    lua_informer *li = b->o.state;
    if (!li) return 0;
    kl_informer_free(li->inf);
    free(li);
    return 0;
}

/* ---- dispatch --------------------------------------------------------- */

static void drain(kl_loop *loop, void *ud);

static void schedule_drain(lua_informer *li) {
    if (!li->drain_id) li->drain_id = kl_loop_defer(kl_rt_loop(li->rt), drain, li);
}

static void on_ready(void *ud, kl_informer *inf) {
    (void)inf;
    schedule_drain(ud);
}

static void on_handler_done(void *ud, kl_task *t, kl_task_end end) {
    (void)t;
    lua_informer *li = ud;
    li->busy = 0;
    li->handler_errors += end == KL_TASK_FAILED || end == KL_TASK_OVER_BUDGET;
    li->budget_stops += end == KL_TASK_OVER_BUDGET;
    if (li->in_call) return; /* drain, which spawned it, goes on (or frees li) */
    if (li->stopped) {
        free_stopped(li);
    } else {
        schedule_drain(li);
    }
}

/* Pushes the informer's state table (user value 3): [1] cur view, [2] old view. */
static void push_state(lua_State *L, lua_informer *li) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, li->ud_ref); /* stack: ..., handle */
    lua_getiuservalue(L, -1, 3);                   /* stack: ..., handle, state */
    lua_remove(L, -2);                             /* stack: ..., state */
}

/* Puts the current notification's views in the state table at index state. */
static void make_views(lua_State *L, lua_informer *li, int state) {
    kl_view_push(L, &li->cur.cur, li->cur.parsed); /* stack: ..., view */
    lua_rawseti(L, state, 1);                       /* state[1] = view */
    if (li->cur.type == KL_CHANGE_UPDATE) {
        kl_view_push(L, &li->cur.old, NULL);
        lua_rawseti(L, state, 2); /* state[2] = old view */
    }
    li->views_made = 1;
}

static void finish_notification(lua_informer *li) {
    kl_notif_clear(&li->cur);
    li->has_cur = 0;
    if (li->views_made) {
        lua_State *L = kl_rt_lua(li->rt);
        push_state(L, li); /* stack: state; its views go, for the collector */
        lua_pushnil(L);
        lua_rawseti(L, -2, 1);
        lua_pushnil(L);
        lua_rawseti(L, -2, 2);
        lua_pop(L, 1);
        li->views_made = 0;
    }
}

/* The next handler (1-based) to call for the current notification, or 0:
 * a replayed ADD goes to the handler it was queued for alone; any other
 * notification to each handler added before it was queued; none once the
 * shutdown has stopped handlers. */
static int next_handler(const lua_informer *li, dispatch_mode mode) {
    if (mode != D_CALL) return 0;
    int type = (int)li->cur.type;
    if (li->cur.only) return li->hidx < li->cur.only ? li->cur.only : 0;
    int h = li->hidx + 1;
    return h <= li->nhandlers[type] && li->since[type][h - 1] <= li->cur.seq ? h : 0;
}

/* -v 3: which handler the current notification goes to, and why. */
static void narrate_call(const lua_informer *li, int h) {
    static const char *const why[] = {" (in the initial list)", " (replayed to a handler added late)",
                                      " (its final state unknown: missed while relisting)"};
    const kl_notif *n = &li->cur;
    char key[512] = "?";
    if (n->cur.name) kl_obj_key(&n->cur, key, sizeof key);
    kl_vlog(3, li->name, "%s handler %d of %d: %s at resourceVersion %s%s", event_names[n->type], h,
            li->nhandlers[n->type], key, n->cur.rv ? n->cur.rv : "?",
            n->only ? why[1] : n->type == KL_CHANGE_ADD && n->initial ? why[0] : n->unknown ? why[2] : "");
}

/* Pushes handler h of the current notification's type; the handle is at hi. */
static void push_handler(lua_State *L, int hi, int type, int h) {
    lua_getiuservalue(L, hi, 2);            /* stack: ..., handlers */
    lua_getfield(L, -1, event_names[type]); /* stack: ..., handlers, of_type */
    lua_rawgeti(L, -1, h);                  /* stack: ..., handlers, of_type, fn */
    lua_replace(L, -3);                     /* stack: ..., fn, of_type */
    lua_pop(L, 1);                          /* stack: ..., fn */
}

/* Pushes the second argument of an add or a delete handler:
 * in_initial_list or final_state_unknown. */
static void push_flag(lua_State *L, const lua_informer *li, int type) {
    lua_pushboolean(L, type == KL_CHANGE_ADD ? li->cur.initial || li->cur.only : li->cur.unknown);
}

/* Pushes the current notification's two arguments, update(old, new) or
 * add/delete(obj, flag), with views made for this call alone. */
static void push_args(lua_State *L, const lua_informer *li, int type) {
    kl_view_push(L, &li->cur.cur, li->cur.parsed); /* stack: ..., view */
    if (type == KL_CHANGE_UPDATE) {
        kl_view_push(L, &li->cur.old, NULL);
        lua_insert(L, -2); /* stack: ..., old, view */
    } else {
        push_flag(L, li, type);
    }
}

/* push_args, with the views kept in the state table of the handle at hi,
 * made there by the notification's first handler call and found by the
 * next, so that every handler gets the same views. */
static void push_shared_args(lua_State *L, lua_informer *li, int type, int hi) {
    lua_getiuservalue(L, hi, 3); /* stack: ..., state */
    int state = lua_gettop(L);
    if (!li->views_made) make_views(L, li, state);
    if (type == KL_CHANGE_UPDATE) lua_rawgeti(L, state, 2); /* stack: ..., state, old */
    lua_rawgeti(L, state, 1);                               /* stack: ..., state, [old,] view */
    if (type != KL_CHANGE_UPDATE) push_flag(L, li, type);
    lua_remove(L, state); /* stack: ..., arg1, arg2 */
}

/* Calls handler h of the current notification as a task. */
static void call_handler(lua_informer *li, int h) {
    lua_State *L = kl_rt_lua(li->rt);
    int type = (int)li->cur.type;
    if (kl_log_v >= 3) narrate_call(li, h);
    li->hidx = h;
    /* Making the views may run the collector, whose finalizers may stop
     * the informer: as in a handler, li stays until drain sees it stopped. */
    li->in_call = 1;
    /* The handle's handlers and state taken from one lookup of it, and the
     * views made in place: each registry and user value access is an API
     * call, and there are several an event. A notification that goes to
     * no handler after this one (most have one) keeps its views nowhere
     * but in the call: the state table holds them only for the next. */
    lua_rawgeti(L, LUA_REGISTRYINDEX, li->ud_ref); /* stack: handle */
    push_handler(L, lua_gettop(L), type, h);        /* stack: handle, fn */
    if (li->views_made || next_handler(li, D_CALL)) push_shared_args(L, li, type, lua_gettop(L) - 1);
    else push_args(L, li, type); /* stack: handle, fn, arg1, arg2 */
    if (li->stopped) {
        lua_pop(L, 4);
        li->in_call = 0;
        return;
    }
    lua_remove(L, -4); /* stack: fn, arg1, arg2 */
    li->busy = 1;
    li->calls[type]++;
    if (!kl_task_spawn(li->rt, NULL, li->task_names[type], 2, on_handler_done, li)) li->busy = 0;
    li->in_call = 0;
}

static void check_synced(lua_informer *li) {
    if (li->was_synced || li->has_cur || !kl_informer_synced(li->inf)) return;
    li->was_synced = 1;
    kl_vlog(2, li->name, "synced: %zu objects cached", kl_store_len(kl_informer_store(li->inf)));
    kl_rt_check_synced(li->rt, NULL);
}

/* Delivers up to a batch of notifications. Nothing is delivered while the
 * script's main chunk runs: it may still be registering handlers (and
 * waiting on discovery meanwhile), and every handler registered at load
 * time must see every notification, the initial list included. A stop
 * (klua.stop or a signal) ends the batch before the next handler call. */
static void drain(kl_loop *loop, void *ud) {
    (void)loop;
    lua_informer *li = ud;
    const informers *all = kl_rt_state(li->rt, KL_RT_INFORMERS);
    li->drain_id = 0;
    if (all->mode == D_WAIT) return;
    for (int n = 0; !li->busy && all->mode != D_OFF;) {
        if (!li->has_cur) {
            if (n == KL_LOOP_BATCH || !kl_informer_pop(li->inf, &li->cur)) break;
            li->has_cur = 1;
            li->hidx = 0;
            n++;
        }
        int h = next_handler(li, all->mode);
        if (h) call_handler(li, h);
        else finish_notification(li);
        if (li->stopped) {
            /* The handler stopped its own informer: li goes now, or when
             * the handler, still waiting, ends. */
            if (!li->busy) {
                free_stopped(li);
            }
            return;
        }
    }
    if (!li->busy && (li->has_cur || kl_informer_pending(li->inf))) schedule_drain(li);
    check_synced(li);
}

/* ---- failures --------------------------------------------------------- */

static void push_failure(lua_State *L, const lua_informer *li) {
    lua_createtable(L, 0, 5);
    lua_pushstring(L, li->failure.verb);
    lua_setfield(L, -2, "verb");
    lua_pushinteger(L, li->failure.code);
    lua_setfield(L, -2, "code");
    lua_pushstring(L, li->failure.message);
    lua_setfield(L, -2, "message");
    lua_pushboolean(L, li->failure.persistent);
    lua_setfield(L, -2, "persistent");
    lua_pushboolean(L, li->failure.watched);
    lua_setfield(L, -2, "watched");
}

/* Hands the pending failure to each error handler, as its own task, while
 * handlers are called (RUNNING: the main chunk may still be adding them
 * before, and none is called from the shutdown's hooks on). */
static void tell_failure(kl_loop *loop, void *ud) {
    lua_informer *li = ud;
    li->failure_id = 0;
    (void)loop;
    if (((informers *)kl_rt_state(li->rt, KL_RT_INFORMERS))->mode != D_CALL) return;
    li->failure.pending = 0;
    lua_State *L = kl_rt_lua(li->rt);
    lua_rawgeti(L, LUA_REGISTRYINDEX, li->ud_ref); /* stack: handle */
    lua_getiuservalue(L, -1, 2);                   /* stack: handle, handlers */
    lua_getfield(L, -1, "error");                  /* stack: handle, handlers, errors */
    lua_Integer n = luaL_len(L, -1);
    /* push_failure's table may run finalizers, which may stop li too. */
    li->in_call = 1;
    for (lua_Integer h = 1; h <= n && !li->stopped; h++) {
        lua_rawgeti(L, -1, h); /* stack: ..., errors, fn */
        push_failure(L, li);
        if (li->stopped) {
            lua_pop(L, 2);
            break;
        }
        li->calls[ERROR_CALLS]++;
        kl_task_spawn(li->rt, NULL, li->error_task_name, 1, NULL, NULL);
    }
    li->in_call = 0;
    lua_pop(L, 3);
    /* A handler stopped the informer: it goes now, or when the
     * notification handler it waits for ends. */
    if (li->stopped && !li->busy) {
        free_stopped(li);
    }
}

/* The reflector failed and will retry: its error handlers are told, out
 * of the reflector's call. A failure not told yet gives way to a newer. */
static void on_failure(void *ud, const kl_reflector_failure *f) {
    lua_informer *li = ud;
    li->failure.pending = 1;
    li->failure.code = f->code;
    li->failure.persistent = f->persistent;
    li->failure.watched = f->watched;
    snprintf(li->failure.verb, sizeof li->failure.verb, "%s", strcmp(f->request, "LIST") == 0 ? "list" : "watch");
    snprintf(li->failure.message, sizeof li->failure.message, "%s", f->message);
    if (!li->failure_id) li->failure_id = kl_loop_defer(kl_rt_loop(li->rt), tell_failure, li);
}

/* Dispatch begins once the main chunk has returned (RUNNING: a script cut
 * short while it loaded never gets there), consumes from HOOKS on, as
 * controller-runtime stops its caches after its controllers, and ends
 * with the run. */
static void informers_phase(void *state, const kl_rt_transition *t) {
    informers *all = state;
    switch (t->to) {
    case KL_RT_RUNNING:
        all->mode = D_CALL;
        for (lua_informer *li = all->list; li; li = li->next) {
            schedule_drain(li);
            if (li->failure.pending && !li->failure_id)
                li->failure_id = kl_loop_defer(kl_rt_loop(li->rt), tell_failure, li);
        }
        break;
    case KL_RT_SHUTDOWN_HOOKS:
        if (all->mode == D_CALL) all->mode = D_CONSUME;
        break;
    case KL_RT_STOPPED:
    case KL_RT_CUT_SHORT:
    case KL_RT_CLOSED:
        all->mode = D_OFF;
        break;
    default:
        break;
    }
}

static void on_resync(kl_loop *loop, void *ud) {
    lua_informer *li = ud;
    li->resync_timer = kl_loop_after(loop, li->resync, on_resync, li);
    if (li->was_synced) kl_informer_resync(li->inf);
}

/* ---- methods ---------------------------------------------------------- */

/* Appends a handler of type that takes the notifications after seq `after`;
 * returns its 1-based index. */
static int add_handler(lua_informer *li, int type, uint64_t after) {
    li->since[type] = kl_buf_grow(li->since[type], &li->cap[type], (size_t)li->nhandlers[type] + 1,
                                  sizeof *li->since[type], 4);
    li->since[type][li->nhandlers[type]] = after + 1;
    return ++li->nhandlers[type];
}

/* inf:on(event, fn) -> inf. event is "add" (fn(obj, in_initial_list)),
 * "update" (fn(old, new)) or "delete" (fn(obj, final_state_unknown)).
 * A handler added once the script's main chunk has returned, when earlier
 * notifications may have been handed out already, takes the changes from
 * now on; an add handler first gets every cached object, with
 * in_initial_list true, as client-go does for a handler added late. */
static int l_on(lua_State *L) {
    lua_informer *li = check_informer(L, 1);
    const char *ev = luaL_checkstring(L, 2);
    if (strcmp(ev, "error") == 0) {
        luaL_checktype(L, 3, LUA_TFUNCTION);
        lua_getiuservalue(L, 1, 2); /* stack: inf, event, fn, handlers */
        lua_getfield(L, -1, ev);    /* stack: inf, event, fn, handlers, errors */
        lua_pushvalue(L, 3);
        lua_rawseti(L, -2, luaL_len(L, -2) + 1);
        lua_settop(L, 1);
        return 1;
    }
    int type = -1;
    for (int i = 0; event_names[i]; i++)
        if (strcmp(ev, event_names[i]) == 0) type = i;
    if (type < 0) return luaL_error(L, "unknown event \"%s\": use \"add\", \"update\", \"delete\" or \"error\"", ev);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    int late = ((const informers *)kl_rt_state(li->rt, KL_RT_INFORMERS))->mode != D_WAIT;
    int h = add_handler(li, type, late ? kl_informer_seq(li->inf) : 0);
    lua_getiuservalue(L, 1, 2); /* stack: inf, event, fn, handlers */
    lua_getfield(L, -1, ev);    /* stack: inf, event, fn, handlers, of_type */
    lua_pushvalue(L, 3);
    lua_rawseti(L, -2, h); /* of_type[h] = fn */
    lua_settop(L, 1);      /* stack: inf, returned for chaining */
    if (late && type == KL_CHANGE_ADD) kl_informer_replay(li->inf, h);
    return 1;
}

/* Runs read, a reader of the cache, on the arguments, protected: making a
 * view may run the collector, whose finalizers run any of the script's
 * code, inf:stop() included, and the cache read must outlive it. The
 * informer stopped meanwhile goes once the read is done. */
static int read_cache(lua_State *L, lua_CFunction read) {
    lua_informer *li = check_informer(L, 1);
    lua_pushcfunction(L, read);
    lua_insert(L, 1); /* stack: read, args... */
    size_t parked = li->nparked;
    li->reading++;
    int rc = lua_pcall(L, lua_gettop(L) - 1, 1, 0);
    li->reading--;
    while (li->nparked > parked) kl_blob_unref(li->parked[--li->nparked]);
    if (li->stopped && !li->busy && !li->in_call && !li->reading) {
        free_stopped(li);
    }
    if (rc != LUA_OK) return lua_error(L);
    return 1;
}

/* Pushes a view of o, which the store read, and lets the read go: the
 * view holds its own reference to the bytes. Until then the read is
 * parked, for read_cache to let go of should making the view raise (out
 * of memory under --memory-limit). */
static void push_read(lua_State *L, lua_informer *li, kl_obj *o) {
    li->parked = kl_buf_grow(li->parked, &li->parked_cap, li->nparked + 1, sizeof *li->parked, 4);
    li->parked[li->nparked++] = o->blob;
    kl_view_push(L, o, NULL);
    li->nparked--;
    kl_store_release(o);
}

static int read_get(lua_State *L) {
    lua_informer *li = check_informer(L, 1);
    kl_obj o;
    if (kl_store_get(kl_informer_store(li->inf), luaL_checkstring(L, 2), &o)) push_read(L, li, &o);
    else lua_pushnil(L);
    return 1;
}

/* inf:get(key) -> the cached object under "namespace/name" (or "name" for
 * cluster-scoped resources) as a read-only view, or nil. */
static int l_get(lua_State *L) {
    luaL_checkstring(L, 2); /* raised here, naming get */
    return read_cache(L, read_get);
}

static int read_list(lua_State *L) {
    lua_informer *li = check_informer(L, 1);
    const char *ns = luaL_optstring(L, 2, NULL);
    kl_store *s = kl_informer_store(li->inf);
    lua_createtable(L, ns ? 0 : (int)kl_store_len(s), 0);
    size_t cur = 0;
    lua_Integer i = 0;
    kl_obj o;
    while (ns ? kl_store_next_in(s, ns, &cur, &o) : kl_store_next(s, &cur, &o)) {
        push_read(L, li, &o);
        lua_rawseti(L, -2, ++i); /* stack: list */
    }
    return 1;
}

/* inf:list([namespace]) -> the cached objects (those in namespace when
 * given, from the store's namespace index), as an array of read-only views. */
static int l_list(lua_State *L) {
    luaL_optstring(L, 2, NULL); /* raised here, naming list */
    return read_cache(L, read_list);
}

/* inf:track_changes(): from now on the store remembers the keys it
 * changes, for inf:changes(). */
static int l_track_changes(lua_State *L) {
    kl_store_track_changes(kl_informer_store(check_informer(L, 1)->inf));
    return 0;
}

static void push_key(void *ud, const char *key) {
    lua_State *L = ud; /* stack: keys */
    lua_pushstring(L, key);
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
}

/* inf:changes() -> the keys put or deleted since the last call (each once),
 * which the store then forgets. */
static int l_changes(lua_State *L) {
    lua_informer *li = check_informer(L, 1);
    lua_newtable(L);
    kl_store_take_changes(kl_informer_store(li->inf), push_key, L);
    return 1;
}

/* core.informer_fns.check(inf): raises when inf is closed, for the
 * methods of init.lua that reach no other C function. */
static int l_check(lua_State *L) {
    check_informer(L, 1);
    return 0;
}

/* inf:synced() -> true once the first list is cached and handed to handlers. */
static int l_synced(lua_State *L) {
    lua_informer *li = check_informer(L, 1);
    lua_pushboolean(L, li->was_synced);
    return 1;
}

/* core.informer_fns.resource_version(inf) -> the resourceVersion its watch
 * has reached (its last event, bookmark or LIST), "" before the first. */
static int l_resource_version(lua_State *L) {
    lua_pushstring(L, kl_informer_rv(check_informer(L, 1)->inf));
    return 1;
}

/* core.informer_fns.relist(inf, why) -> true when its reflector, in WATCH,
 * lists the latest state again (kl_informer_relist), else false. */
static int l_relist(lua_State *L) {
    lua_informer *li = check_informer(L, 1);
    lua_pushboolean(L, kl_informer_relist(li->inf, luaL_checkstring(L, 2)));
    return 1;
}

/* core.informer_fns.reshard(inf, selector) -> true once its requests carry
 * shardSelector selector ("" none), through a relist when it changed
 * (kl_informer_reshard); false while it lists (asked again later). */
static int l_reshard(lua_State *L) {
    lua_informer *li = check_informer(L, 1);
    lua_pushboolean(L, kl_informer_reshard(li->inf, luaL_checkstring(L, 2)));
    return 1;
}

/* core.informer_fns.shard_selector(inf) -> the shardSelector its requests
 * carry, "" for none. */
static int l_shard_selector(lua_State *L) {
    lua_pushstring(L, kl_informer_shard_selector(check_informer(L, 1)->inf));
    return 1;
}

/* inf:stats() -> the reflector's counters and the cache size. */
static int l_stats(lua_State *L) {
    lua_informer *li = check_informer(L, 1);
    const kl_reflector_stats *s = kl_informer_stats(li->inf);
    lua_createtable(L, 0, 30);
#define FIELD(f)                                 \
    lua_pushinteger(L, (lua_Integer)s->f);       \
    lua_setfield(L, -2, #f)
    FIELD(lists);
    FIELD(relists);
    FIELD(watches);
    FIELD(rewatches);
    FIELD(events);
    FIELD(added);
    FIELD(modified);
    FIELD(deleted);
    FIELD(bookmarks);
    FIELD(errors);
    FIELD(backoffs);
    FIELD(idle_restarts);
    FIELD(oversize);
    FIELD(malformed);
    FIELD(bytes);
    FIELD(frames);
#undef FIELD
    static const char *const calls[NCALLS] = {"add_calls", "update_calls", "delete_calls", "error_calls"};
    for (int i = 0; i < NCALLS; i++) {
        lua_pushinteger(L, (lua_Integer)li->calls[i]);
        lua_setfield(L, -2, calls[i]);
    }
    lua_pushinteger(L, (lua_Integer)li->handler_errors);
    lua_setfield(L, -2, "handler_errors");
    lua_pushinteger(L, (lua_Integer)li->budget_stops);
    lua_setfield(L, -2, "handler_budget_stops");
    lua_pushstring(L, kl_reflector_state_name(kl_informer_state(li->inf)));
    lua_setfield(L, -2, "state");
    lua_pushinteger(L, (lua_Integer)kl_informer_transform_errors(li->inf));
    lua_setfield(L, -2, "transform_errors");
    lua_pushinteger(L, (lua_Integer)kl_store_len(kl_informer_store(li->inf)));
    lua_setfield(L, -2, "cached");
    lua_pushinteger(L, (lua_Integer)kl_informer_pending(li->inf));
    lua_setfield(L, -2, "pending");
    kl_store_compression_stats z;
    kl_store_compression(kl_informer_store(li->inf), &z);
    lua_pushinteger(L, (lua_Integer)z.objects);
    lua_setfield(L, -2, "compressed");
    lua_pushinteger(L, (lua_Integer)z.bytes);
    lua_setfield(L, -2, "compressed_bytes");
    lua_pushinteger(L, (lua_Integer)z.json_bytes);
    lua_setfield(L, -2, "compressed_json_bytes");
    kl_informer_compaction_stats zc;
    kl_informer_compaction(li->inf, &zc);
    lua_pushstring(L, zc.state);
    lua_setfield(L, -2, "compaction");
    lua_pushnumber(L, zc.seconds);
    lua_setfield(L, -2, "compaction_seconds");
    lua_pushinteger(L, (lua_Integer)zc.passes);
    lua_setfield(L, -2, "compaction_passes");
    lua_pushinteger(L, (lua_Integer)kl_informer_seq(li->inf));
    lua_setfield(L, -2, "notifications");
    lua_pushstring(L, kl_informer_rv(li->inf));
    lua_setfield(L, -2, "resource_version");
    lua_pushnumber(L, kl_informer_failing_for(li->inf, kl_now()));
    lua_setfield(L, -2, "failing_for");
    lua_pushstring(L, kl_informer_refusal(li->inf)); /* nil when NULL */
    lua_setfield(L, -2, "refused");
    lua_pushnumber(L, kl_now() - kl_informer_last_heard(li->inf));
    lua_setfield(L, -2, "staleness");
    double last = kl_informer_last_event(li->inf);
    if (last > 0) {
        lua_pushnumber(L, kl_now() - last);
        lua_setfield(L, -2, "last_event_age");
    }
    return 1;
}

void kl_lua_push_history(lua_State *L, const kl_reflector_record *rec, size_t n, double now) {
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        lua_createtable(L, 0, 5);
        lua_pushnumber(L, now - rec[i].at);
        lua_setfield(L, -2, "age");
        lua_pushstring(L, kl_reflector_state_name(rec[i].t->from));
        lua_setfield(L, -2, "from");
        lua_pushstring(L, kl_reflector_state_name(rec[i].t->to));
        lua_setfield(L, -2, "to");
        lua_pushstring(L, rec[i].t->when);
        lua_setfield(L, -2, "cause");
        lua_pushstring(L, rec[i].t->then);
        lua_setfield(L, -2, "action");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* core.informer_fns.history(inf) -> kl_lua_push_history's table, for the live page. */
static int l_history(lua_State *L) {
    lua_informer *li = check_informer(L, 1);
    kl_reflector_record rec[KL_REFLECTOR_HISTORY];
    size_t n = kl_informer_history(li->inf, rec);
    kl_lua_push_history(L, rec, n, kl_now());
    return 1;
}

/* tostring(inf) -> "informer(pods -n default)", with ", stopped" or
 * ", closed" once it is. */
static int l_tostring(lua_State *L) {
    box *b = luaL_checkudata(L, 1, INFORMER_MT);
    const char *how = b->o.state ? "" : b->o.closed == STOPPED ? ", stopped" : ", closed";
    lua_pushfstring(L, "informer(%s%s)", b->name, how);
    return 1;
}

/* ---- creation --------------------------------------------------------- */

#define MAX_DROP 32

/* The prune of the informer option drop (a list of dotted paths), or NULL
 * without one; raises for a path kl_prune_new refuses. [-0, +0, e] */
static kl_prune *opt_prune(lua_State *L, int idx) {
    if (lua_getfield(L, idx, "drop") == LUA_TNIL) {
        lua_pop(L, 1);
        return NULL;
    }
    luaL_argexpected(L, lua_istable(L, -1), idx, "drop as a list of paths");
    const char *paths[MAX_DROP];
    size_t n = (size_t)luaL_len(L, -1);
    if (n > MAX_DROP) luaL_error(L, "drop takes at most %d paths", MAX_DROP);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1); /* stack: drop, path */
        if (lua_type(L, -1) != LUA_TSTRING) luaL_error(L, "drop[%d] must be a path such as \"metadata.managedFields\"", (int)i + 1);
        paths[i] = lua_tostring(L, -1);
        lua_pop(L, 1); /* the string stays alive in the drop table */
    }
    char err[256];
    kl_prune *p = kl_prune_new(paths, n, err, sizeof err);
    lua_pop(L, 1);
    if (!p) luaL_error(L, "%s", err);
    return p;
}

/* core.table_cells(view) -> the cells of the Table row the object came in,
 * or nil (see kl_view_push_cells). */
static int l_table_cells(lua_State *L) {
    kl_view_push_cells(L, 1);
    return 1;
}

/* core.informer{name=, path=, kind=, label_selector=, field_selector=,
 * resync=, drop=, transform=, metadata_only=, table=} -> informer handle,
 * already started. A transform function (lua/lua_transform.h) takes the
 * place of drop. table: list and watch the Table form (kubectl get's
 * columns) with whole objects; core.table_cells reads a row's cells. */
static int l_informer(lua_State *L) {
    kl_rt *rt = kl_rt_of(L);
    const kl_rt_opts *ro = kl_rt_options(rt);
    informers *all = kl_rt_state(rt, KL_RT_INFORMERS);
    luaL_checktype(L, 1, LUA_TTABLE);
    kl_reflector_opts o = {
        .name = kl_opt_string(L, 1, "name", "informer"),
        .path = kl_opt_string(L, 1, "path", "informer"),
        .kind = kl_opt_string(L, 1, "kind", "informer"),
        .label_selector = kl_opt_string(L, 1, "label_selector", "informer"),
        .field_selector = kl_opt_string(L, 1, "field_selector", "informer"),
        .page_size = ro->page_size,
        .idle_timeout = ro->idle_timeout,
        .watch_timeout_min = ro->watch_timeout_min,
        .watch_timeout_max = ro->watch_timeout_max,
        .watch_list = ro->watch_list,
        .watch_list_deadline = ro->watch_list_deadline,
        .list_timeout = ro->request_timeout,
        .cbor = ro->cbor,
        .metadata_only = kl_opt_boolean(L, 1, "metadata_only", "informer"),
        .table = kl_opt_boolean(L, 1, "table", "informer"),
    };
    double resync = kl_opt_number(L, 1, "resync");
    if (!o.path) return luaL_error(L, "informer needs a path");
    if (kl_rt_closing(rt)) return luaL_error(L, "cannot start an informer: klua is shutting down");
    /* As liolib opens a file: the handle first, then each C part made and
     * handed to it (or its informer) with nothing that can raise between,
     * so that a call that raises (a bad drop path, out of memory under
     * --memory-limit) leaves only garbage for the collector. */
    box *b = kl_object_new(L, INFORMER_MT, sizeof *b, 2, NULL); /* stack: ..., handle */
    kl_lua_transform *transform = kl_lua_transform_opt(L, 1, o.name ? o.name : o.path);
    kl_prune *prune = transform ? NULL : opt_prune(L, 1);
    lua_informer *li = kl_xcalloc(1, sizeof *li);
    li->rt = rt;
    snprintf(li->name, sizeof li->name, "%s", o.name ? o.name : o.path);
    for (int i = 0; event_names[i]; i++)
        snprintf(li->task_names[i], sizeof li->task_names[i], "%s handler of %s", event_names[i], li->name);
    snprintf(li->error_task_name, sizeof li->error_task_name, "error handler of %s", li->name);
    li->inf = kl_informer_new(kl_rt_loop(rt), kl_rt_http(rt), &o, on_ready, li);
    kl_informer_on_failure(li->inf, on_failure, li);
    kl_informer_set_prune(li->inf, prune);
    if (transform) kl_lua_transform_attach(transform, li->inf);
    b->o.state = li;
    snprintf(b->name, sizeof b->name, "%s", li->name);
    lua_createtable(L, 0, 4); /* stack: ..., handle, handlers */
    for (int i = 0; event_names[i]; i++) {
        lua_newtable(L);
        lua_setfield(L, -2, event_names[i]);
    }
    lua_newtable(L);
    lua_setfield(L, -2, "error");
    lua_setiuservalue(L, -2, 2);
    lua_createtable(L, 2, 0); /* stack: ..., handle, state */
    lua_setiuservalue(L, -2, 3);
    lua_pushvalue(L, -1); /* stack: ..., handle, handle */
    li->ud_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    li->next = all->list;
    all->list = li;
    if (resync > 0) {
        li->resync = resync;
        li->resync_timer = kl_loop_after(kl_rt_loop(rt), resync, on_resync, li);
    }
    if (ro->cache_compression) {
        kl_store_compaction c = KL_STORE_COMPACTION;
        if (ro->cache_compression_after > 0) c.after = ro->cache_compression_after;
        kl_informer_set_compaction(li->inf, &c);
    }
    kl_informer_start(li->inf);
    return 1;
}

static int informers_synced(void *state) {
    for (lua_informer *li = ((informers *)state)->list; li; li = li->next)
        if (!li->was_synced) return 0;
    return 1;
}

static int informers_idle(void *state) { return !((informers *)state)->list; }

/* Frees every informer with its requests; the handles stay, closed. */
static void informers_close(void *state) {
    informers *all = state;
    for (lua_informer **list = &all->list; list; list = list == &all->list ? &all->stopping : NULL) {
        while (*list) {
            lua_informer *li = *list;
            *list = li->next;
            free_informer(li);
        }
    }
}

/* inf:stop(): ends the informer's watch and frees its cache and handlers;
 * its handle is closed from then on. From one of its own handlers the
 * handler finishes first (the views it holds stay readable). Stopping a
 * stopped informer does nothing; one that klua closed raises, as every
 * other method does. */
static int l_stop(lua_State *L) {
    box *b = luaL_checkudata(L, 1, INFORMER_MT);
    lua_informer *li = b->o.state;
    if (!li) {
        if (b->o.closed != STOPPED) kl_object_check(L, 1, INFORMER_MT); /* raises: klua closed it */
        return 0;
    }
    if (kl_informer_transforming(li->inf))
        return luaL_error(L, "inf:stop() cannot be called from the informer's own transform: "
                             "stop it from a handler or a timer");
    kl_rt *rt = li->rt;
    informers *all = kl_rt_state(rt, KL_RT_INFORMERS);
    unlink_informer(&all->list, li);
    kl_object_close(&b->o, STOPPED);
    kl_loop_cancel(kl_rt_loop(rt), li->resync_timer);
    li->resync_timer = 0;
    if (li->busy || li->in_call || li->reading) {
        li->stopped = 1;
        li->next = all->stopping;
        all->stopping = li;
    } else {
        free_informer(li);
    }
    kl_rt_check_idle(rt);
    return 0;
}

static void informers_open(void *state, lua_State *L) {
    (void)state;
    /* The methods scripts call as they are; init.lua adds the rest, over
     * core.informer_fns. */
    static const luaL_Reg methods[] = {{"get", l_get}, {"synced", l_synced}, {NULL, NULL}};
    static const luaL_Reg meta[] = {{"__tostring", l_tostring}, {"__gc", l_gc}, {NULL, NULL}};
    static const luaL_Reg fns[] = {{"on", l_on},
                                   {"list", l_list},
                                   {"stats", l_stats},
                                   {"history", l_history},
                                   {"stop", l_stop},
                                   {"track_changes", l_track_changes},
                                   {"changes", l_changes},
                                   {"check", l_check},
                                   {"resource_version", l_resource_version},
                                   {"relist", l_relist},
                                   {"reshard", l_reshard},
                                   {"shard_selector", l_shard_selector},
                                   {NULL, NULL}};
    kl_object_class(L, INFORMER_MT, methods, meta);
    luaL_newlib(L, fns); /* stack: core, fns */
    lua_setfield(L, -2, "informer_fns");
    lua_pushcfunction(L, l_informer);
    lua_setfield(L, -2, "informer");
    lua_pushcfunction(L, l_table_cells);
    lua_setfield(L, -2, "table_cells");
}

void kl_lua_informer_init(kl_rt *rt) {
    static const kl_rt_hooks hooks = {.open = informers_open,
                                      .idle = informers_idle,
                                      .synced = informers_synced,
                                      .phase = informers_phase,
                                      .close = informers_close,
                                      .free = free};
    informers *all = kl_xcalloc(1, sizeof *all);
    all->rt = rt;
    kl_rt_register(rt, KL_RT_INFORMERS, &hooks, all);
}
