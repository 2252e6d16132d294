/*
 * lua_informer.c - informers as the script sees them, and the dispatch of
 * their notifications to handlers.
 *
 * Each informer delivers its notifications in order. Each handler call runs
 * as a task; while one is suspended (waiting on the API), the informer's
 * later notifications wait too, as client-go's listeners do. Handlers of one
 * notification share the same read-only views.
 */
#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/informer.h"
#include "base/log.h"
#include "lua/lua_klua.h"
#include "lua/task.h"
#include "lua/view.h"
#include "base/xalloc.h"

#define INFORMER_MT "klua.informer"
#define DISPATCH_BATCH 256 /* notifications per loop iteration */

static const char *const event_names[] = {"add", "update", "delete", NULL};
_Static_assert(KL_CHANGE_ADD == 0 && KL_CHANGE_UPDATE == 1 && KL_CHANGE_DELETE == 2 &&
                   sizeof event_names / sizeof *event_names == KL_CHANGE_DELETE + 2,
               "one event name per kl_change, in its order, then NULL");

struct lua_informer {
    kl_rt *rt;
    kl_informer *inf;
    lua_informer *next; /* the runtime's list, in the order made, newest first */
    int ud_ref; /* the script's handle, kept for the runtime's lifetime */
    char name[160];
    /* Per event type: the handlers, and for each the seq of the first
     * notification it takes (0 for handlers added before dispatch began). */
    uint64_t *since[3];
    int nhandlers[3], cap[3];
    kl_notif cur; /* the notification being dispatched */
    int has_cur, hidx, views_made;
    int busy;      /* a handler of cur is suspended */
    int in_call;   /* inside kl_task_spawn */
    uint64_t drain_id; /* the deferred drain, or 0 */
    int was_synced;
    double resync;
    uint64_t resync_timer;
};

typedef struct box {
    lua_informer *li; /* NULL once the runtime has closed it */
} box;

static lua_informer *check_informer(lua_State *L, int idx) {
    box *b = luaL_checkudata(L, idx, INFORMER_MT);
    if (!b->li) luaL_error(L, "this informer is closed: klua is shutting down");
    return b->li;
}

/* ---- dispatch --------------------------------------------------------- */

static void drain(kl_loop *loop, void *ud);

static void schedule_drain(lua_informer *li) {
    if (!li->drain_id) li->drain_id = kl_loop_defer(li->rt->loop, drain, li);
}

static void on_ready(void *ud, kl_informer *inf) {
    (void)inf;
    schedule_drain(ud);
}

static void on_handler_done(void *ud, kl_task *t, int ok) {
    (void)t;
    (void)ok;
    lua_informer *li = ud;
    li->busy = 0;
    if (!li->in_call) schedule_drain(li);
}

/* Pushes the informer's state table (uservalue 2): [1] cur view, [2] old view. */
static void push_state(lua_State *L, lua_informer *li) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, li->ud_ref);
    lua_getiuservalue(L, -1, 2);
    lua_remove(L, -2);
}

static void make_views(lua_informer *li) {
    lua_State *L = li->rt->L;
    push_state(L, li);
    kl_view_push(L, &li->cur.cur, li->cur.parsed);
    lua_rawseti(L, -2, 1);
    if (li->cur.type == KL_CHANGE_UPDATE) {
        kl_view_push(L, &li->cur.old, NULL);
        lua_rawseti(L, -2, 2);
    }
    lua_pop(L, 1);
    li->views_made = 1;
}

static void finish_notification(lua_informer *li) {
    kl_notif_clear(&li->cur);
    li->has_cur = 0;
    if (li->views_made) {
        lua_State *L = li->rt->L;
        push_state(L, li);
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
 * notification to each handler added before it was queued. */
static int next_handler(const lua_informer *li) {
    int type = (int)li->cur.type;
    if (li->cur.only) return li->hidx < li->cur.only ? li->cur.only : 0;
    int h = li->hidx + 1;
    return h <= li->nhandlers[type] && li->since[type][h - 1] <= li->cur.seq ? h : 0;
}

/* Calls handler h of the current notification as a task. */
static void call_handler(lua_informer *li, int h) {
    lua_State *L = li->rt->L;
    int type = (int)li->cur.type;
    if (!li->views_made) make_views(li);
    li->hidx = h;
    lua_rawgeti(L, LUA_REGISTRYINDEX, li->ud_ref);
    lua_getiuservalue(L, -1, 1);
    lua_getfield(L, -1, event_names[type]);
    lua_rawgeti(L, -1, h);
    lua_replace(L, -4);
    lua_pop(L, 2);
    push_state(L, li);
    lua_rawgeti(L, -1, 1);
    if (type == KL_CHANGE_UPDATE) {
        lua_rawgeti(L, -2, 2);
        lua_insert(L, -2); /* update(old, new) */
    } else {
        lua_pushboolean(L, type == KL_CHANGE_ADD ? li->cur.initial || li->cur.only : li->cur.unknown);
    }
    lua_remove(L, -3);
    char name[200];
    snprintf(name, sizeof name, "%s handler of %s", event_names[type], li->name);
    li->busy = 1;
    li->in_call = 1;
    if (!kl_task_spawn(li->rt, NULL, name, 2, on_handler_done, li)) li->busy = 0;
    li->in_call = 0;
}

static void check_synced(lua_informer *li) {
    if (li->was_synced || li->has_cur || !kl_informer_synced(li->inf)) return;
    li->was_synced = 1;
    kl_vlog(2, li->name, "synced: %zu objects cached", kl_store_len(kl_informer_store(li->inf)));
    kl_klua_check_synced(li->rt, NULL);
}

/* Delivers up to a batch of notifications. Nothing is delivered while the
 * script's main chunk runs: it may still be registering handlers (and
 * waiting on discovery meanwhile), and every handler registered at load
 * time must see every notification, the initial list included. A stop
 * (klua.stop or a signal) ends the batch before the next handler call. */
static void drain(kl_loop *loop, void *ud) {
    lua_informer *li = ud;
    li->drain_id = 0;
    if (!li->rt->main_done) return;
    for (int n = 0; !li->busy && !kl_loop_stopping(loop);) {
        if (!li->has_cur) {
            if (n == DISPATCH_BATCH || !kl_informer_pop(li->inf, &li->cur)) break;
            li->has_cur = 1;
            li->hidx = 0;
            n++;
        }
        int h = next_handler(li);
        if (h) call_handler(li, h);
        else finish_notification(li);
    }
    if (!li->busy && (li->has_cur || kl_informer_pending(li->inf))) schedule_drain(li);
    check_synced(li);
}

void kl_informers_start_dispatch(kl_rt *rt) {
    for (lua_informer *li = rt->informers; li; li = li->next) schedule_drain(li);
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
    if (li->nhandlers[type] == li->cap[type]) {
        int cap = li->cap[type] ? li->cap[type] * 2 : 4;
        li->since[type] = kl_xrealloc(li->since[type], (size_t)cap * sizeof *li->since[type]);
        li->cap[type] = cap;
    }
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
    int type = -1;
    for (int i = 0; event_names[i]; i++)
        if (strcmp(ev, event_names[i]) == 0) type = i;
    if (type < 0) return luaL_error(L, "unknown event \"%s\": use \"add\", \"update\" or \"delete\"", ev);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    int late = li->rt->main_done;
    int h = add_handler(li, type, late ? kl_informer_seq(li->inf) : 0);
    lua_getiuservalue(L, 1, 1);
    lua_getfield(L, -1, ev);
    lua_pushvalue(L, 3);
    lua_rawseti(L, -2, h);
    lua_settop(L, 1);
    if (late && type == KL_CHANGE_ADD) kl_informer_replay(li->inf, h);
    return 1;
}

/* inf:get(key) -> the cached object under "namespace/name" (or "name" for
 * cluster-scoped resources) as a read-only view, or nil. */
static int l_get(lua_State *L) {
    lua_informer *li = check_informer(L, 1);
    const kl_obj *o = kl_store_get(kl_informer_store(li->inf), luaL_checkstring(L, 2));
    if (o) kl_view_push(L, o, NULL);
    else lua_pushnil(L);
    return 1;
}

/* inf:list([namespace]) -> the cached objects (those in namespace when
 * given), as an array of read-only views. The namespace is compared with
 * each object's decoded identity, so no object is parsed to filter it. */
static int l_list(lua_State *L) {
    lua_informer *li = check_informer(L, 1);
    const char *ns = luaL_optstring(L, 2, NULL);
    kl_store *s = kl_informer_store(li->inf);
    lua_createtable(L, ns ? 0 : (int)kl_store_len(s), 0);
    size_t cur = 0;
    lua_Integer i = 0;
    const kl_obj *o;
    while ((o = kl_store_next(s, &cur))) {
        if (ns && strcmp(ns, o->ns ? o->ns : "") != 0) continue;
        kl_view_push(L, o, NULL);
        lua_rawseti(L, -2, ++i);
    }
    return 1;
}

/* inf:synced() -> true once the first list is cached and handed to handlers. */
static int l_synced(lua_State *L) {
    lua_informer *li = check_informer(L, 1);
    lua_pushboolean(L, li->was_synced);
    return 1;
}

/* inf:stats() -> the reflector's counters and the cache size. */
static int l_stats(lua_State *L) {
    lua_informer *li = check_informer(L, 1);
    const kl_reflector_stats *s = kl_informer_stats(li->inf);
    lua_createtable(L, 0, 17);
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
#undef FIELD
    lua_pushinteger(L, (lua_Integer)kl_store_len(kl_informer_store(li->inf)));
    lua_setfield(L, -2, "cached");
    lua_pushinteger(L, (lua_Integer)kl_informer_pending(li->inf));
    lua_setfield(L, -2, "pending");
    lua_pushstring(L, kl_informer_rv(li->inf));
    lua_setfield(L, -2, "resource_version");
    lua_pushnumber(L, kl_informer_failing_for(li->inf, kl_now()));
    lua_setfield(L, -2, "failing_for");
    return 1;
}

static int l_tostring(lua_State *L) {
    box *b = luaL_checkudata(L, 1, INFORMER_MT);
    lua_pushfstring(L, "informer(%s)", b->li ? b->li->name : "closed");
    return 1;
}

/* ---- creation --------------------------------------------------------- */

/* The string field of the table at idx, or NULL when absent. The value
 * stays pushed so that the string lives until the caller returns: a number
 * converted by lua_tolstring exists only in that stack slot. [-0, +1, e] */
static const char *opt_string(lua_State *L, int idx, const char *field) {
    int t = lua_getfield(L, idx, field);
    if (t == LUA_TNIL) return NULL;
    if (t != LUA_TSTRING && t != LUA_TNUMBER)
        luaL_error(L, "informer option %s must be a string, not a %s", field, lua_typename(L, t));
    return lua_tostring(L, -1);
}

static double opt_number(lua_State *L, int idx, const char *field) {
    lua_getfield(L, idx, field);
    double v = lua_isnil(L, -1) ? 0 : (double)luaL_checknumber(L, -1);
    lua_pop(L, 1);
    return v;
}

/* core.informer{name=, path=, kind=, label_selector=, field_selector=,
 * resync=} -> informer handle, already started. */
static int l_informer(lua_State *L) {
    kl_rt *rt = kl_rt_of(L);
    luaL_checktype(L, 1, LUA_TTABLE);
    kl_reflector_opts o = {
        .name = opt_string(L, 1, "name"),
        .path = opt_string(L, 1, "path"),
        .kind = opt_string(L, 1, "kind"),
        .label_selector = opt_string(L, 1, "label_selector"),
        .field_selector = opt_string(L, 1, "field_selector"),
        .page_size = rt->opts.page_size,
        .idle_timeout = rt->opts.idle_timeout,
        .watch_timeout_min = rt->opts.watch_timeout_min,
        .watch_timeout_max = rt->opts.watch_timeout_max,
        .watch_list = rt->opts.watch_list,
        .watch_list_deadline = rt->opts.watch_list_deadline,
        .list_timeout = rt->opts.request_timeout,
    };
    double resync = opt_number(L, 1, "resync");
    if (!o.path) return luaL_error(L, "informer needs a path");
    if (rt->closing) return luaL_error(L, "cannot start an informer: klua is shutting down");
    lua_informer *li = kl_xcalloc(1, sizeof *li);
    li->rt = rt;
    snprintf(li->name, sizeof li->name, "%s", o.name ? o.name : o.path);
    li->inf = kl_informer_new(rt->loop, rt->http, &o, on_ready, li);
    box *b = lua_newuserdatauv(L, sizeof *b, 2);
    b->li = li;
    luaL_setmetatable(L, INFORMER_MT);
    lua_createtable(L, 0, 3);
    for (int i = 0; event_names[i]; i++) {
        lua_newtable(L);
        lua_setfield(L, -2, event_names[i]);
    }
    lua_setiuservalue(L, -2, 1);
    lua_createtable(L, 2, 0);
    lua_setiuservalue(L, -2, 2);
    lua_pushvalue(L, -1);
    li->ud_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    li->next = rt->informers;
    rt->informers = li;
    if (resync > 0) {
        li->resync = resync;
        li->resync_timer = kl_loop_after(rt->loop, resync, on_resync, li);
    }
    kl_informer_start(li->inf);
    return 1;
}

int kl_informers_synced(kl_rt *rt) {
    for (lua_informer *li = rt->informers; li; li = li->next)
        if (!li->was_synced) return 0;
    return 1;
}

void kl_informers_close(kl_rt *rt) {
    while (rt->informers) {
        lua_informer *li = rt->informers;
        rt->informers = li->next;
        kl_loop_cancel(rt->loop, li->resync_timer);
        kl_loop_cancel(rt->loop, li->drain_id);
        if (li->has_cur) kl_notif_clear(&li->cur);
        for (int i = 0; i < 3; i++) free(li->since[i]);
        kl_informer_free(li->inf);
        li->inf = NULL;
        lua_rawgeti(rt->L, LUA_REGISTRYINDEX, li->ud_ref);
        ((box *)lua_touserdata(rt->L, -1))->li = NULL;
        lua_pop(rt->L, 1);
        luaL_unref(rt->L, LUA_REGISTRYINDEX, li->ud_ref);
        free(li);
    }
}

void kl_informer_open(lua_State *L) {
    static const luaL_Reg methods[] = {{"on", l_on},         {"get", l_get},
                                       {"list", l_list},     {"synced", l_synced},
                                       {"stats", l_stats},   {"__tostring", l_tostring},
                                       {NULL, NULL}};
    if (luaL_newmetatable(L, INFORMER_MT)) {
        luaL_setfuncs(L, methods, 0);
        lua_pushvalue(L, -1);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    lua_pushcfunction(L, l_informer);
    lua_setfield(L, -2, "informer");
}
