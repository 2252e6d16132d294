/*
 * lua_klua.c - klua.core itself: the run's lifecycle (stop, the graceful
 * stop's steps, the phase), its settings, and the opening of the table the
 * bindings fill; see lua_klua.h.
 */
#include "lua/lua_klua.h"

#include <lauxlib.h>
#include <string.h>

#include "lua/lua_http.h"
#include "lua/lua_json.h"
#include "lua/lua_log.h"
#include "lua/lua_procstat.h"
#include "lua/lua_yaml.h"
#include "lua/object.h"
#include "lua/task.h"
#include "lua/view.h"

/* core.stop([code]): ends the run once the current callback returns; no
 * further script code starts. klua run exits with code (default 0). */
static int l_stop(lua_State *L) {
    kl_rt_advance(kl_rt_of(L), KL_RT_EV_STOP, (int)luaL_optinteger(L, 1, 0));
    return 0;
}

/* core.phase() -> the runtime's phase: "LOADING", "RUNNING", "DRAINING",
 * ... (runtime.h). */
static int l_phase(lua_State *L) {
    lua_pushstring(L, kl_rt_phase_name(kl_rt_current(kl_rt_of(L))));
    return 1;
}

/* core.advance(step): the graceful shutdown's own steps, "drained" (the
 * reconciles in flight ended: DRAINING -> HOOKS) and "hooks ran" (HOOKS ->
 * RELEASING); raises for a step the phase table does not declare now. */
static int l_advance(lua_State *L) {
    static const char *const steps[] = {"drained", "hooks ran", NULL};
    static const kl_rt_event events[] = {KL_RT_EV_DRAINED, KL_RT_EV_HOOKS_RAN};
    kl_rt_event e = events[luaL_checkoption(L, 1, NULL, steps)];
    kl_rt *rt = kl_rt_of(L);
    if (!kl_rt_can(rt, e))
        return luaL_error(L, "the runtime does not go on \"%s\" from %s", kl_rt_event_name(e),
                          kl_rt_phase_name(kl_rt_current(rt)));
    kl_rt_advance(rt, e, 0);
    return 0;
}

/* core.graceful_shutdown(start, describe): the first SIGINT/SIGTERM runs
 * start(signal name) as a task instead of stopping; describe() names what
 * still runs should the stop be cut short (kl_rt_graceful). */
static int l_graceful_shutdown(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    kl_rt *rt = kl_rt_of(L);
    if (kl_rt_graceful_set(rt)) return luaL_error(L, "the graceful shutdown is already set");
    lua_settop(L, 2);
    kl_rt_graceful(rt, L);
    return 0;
}

/* core.reconciling(on): marks the calling task as running a reconcile,
 * which a graceful stop lets finish. */
static int l_reconciling(lua_State *L) {
    kl_task *t = kl_task_current(L);
    if (!t) return luaL_error(L, "core.reconciling must be called from a task");
    kl_task_set_reconciling(t, lua_toboolean(L, 1));
    return 0;
}

/* core.namespace() -> the namespace of the kubeconfig context. */
static int l_namespace(lua_State *L) {
    lua_pushstring(L, kl_conn_namespace(kl_rt_conn(kl_rt_of(L))));
    return 1;
}

/* core.on_synced(fn): fn runs once every informer has synced. */
static int l_on_synced(lua_State *L) {
    luaL_checktype(L, 1, LUA_TFUNCTION);
    kl_rt_on_synced(L, 1);
    return 0;
}

/* core.stats() -> {task_errors=, budget_stops=, lua_memory=, collector=, suspended=}. */
static int l_stats(lua_State *L) {
    kl_rt *rt = kl_rt_of(L);
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, (lua_Integer)kl_task_errors(rt));
    lua_setfield(L, -2, "task_errors");
    lua_pushinteger(L, (lua_Integer)kl_task_budget_stops(rt));
    lua_setfield(L, -2, "budget_stops");
    lua_pushinteger(L, (lua_Integer)kl_rt_memory(rt));
    lua_setfield(L, -2, "lua_memory");
    lua_pushstring(L, kl_rt_collector(rt));
    lua_setfield(L, -2, "collector");
    lua_pushinteger(L, (lua_Integer)kl_task_suspended(rt));
    lua_setfield(L, -2, "suspended");
    return 1;
}

static void set_string(lua_State *L, const char *key, const char *v) {
    if (!v) return;
    lua_pushstring(L, v);
    lua_setfield(L, -2, key);
}

static void set_number(lua_State *L, const char *key, double v) {
    if (v <= 0) return;
    lua_pushnumber(L, v);
    lua_setfield(L, -2, key);
}

/* core.controller_options() -> what --leader-elect and its flags asked:
 * {leader_elect, election_id, election_namespace, lease_duration,
 * renew_deadline, retry_period, script} (unset flags absent), and
 * graceful_shutdown_timeout (seconds, 30 unless set), shards,
 * readyz_max_staleness and verify_cache (seconds) when set, and dry_run,
 * once and server_sharding (booleans). */
static int l_controller_options(lua_State *L) {
    const kl_ctl_opts *o = &kl_rt_options(kl_rt_of(L))->ctl;
    lua_createtable(L, 0, 14);
    lua_pushboolean(L, o->leader_elect);
    lua_setfield(L, -2, "leader_elect");
    set_string(L, "election_id", o->election_id);
    set_string(L, "election_namespace", o->election_namespace);
    set_number(L, "lease_duration", o->lease_duration);
    set_number(L, "renew_deadline", o->renew_deadline);
    set_number(L, "retry_period", o->retry_period);
    lua_pushnumber(L, o->graceful_shutdown_timeout > 0 ? o->graceful_shutdown_timeout : 30);
    lua_setfield(L, -2, "graceful_shutdown_timeout");
    set_number(L, "readyz_max_staleness", o->readyz_max_staleness);
    set_number(L, "verify_cache", o->verify_cache);
    if (o->shards) {
        lua_pushinteger(L, o->shards);
        lua_setfield(L, -2, "shards");
    }
    lua_pushboolean(L, o->dry_run);
    lua_setfield(L, -2, "dry_run");
    lua_pushboolean(L, o->once);
    lua_setfield(L, -2, "once");
    lua_pushboolean(L, o->server_sharding);
    lua_setfield(L, -2, "server_sharding");
    if (o->script) {
        const char *base = strrchr(o->script, '/');
        set_string(L, "script", base ? base + 1 : o->script);
    }
    return 1;
}

/* Adds klua.core's own functions (the run's lifecycle and settings),
 * those of the bindings without a state of their own (requests, the log,
 * the process's figures), the view and object functions, klua.json and
 * klua.core.yaml. */
static void core_open(void *state, lua_State *L) {
    (void)state;
    static const luaL_Reg fns[] = {
        {"stop", l_stop},           {"phase", l_phase},
        {"advance", l_advance},     {"graceful_shutdown", l_graceful_shutdown},
        {"reconciling", l_reconciling}, {"on_synced", l_on_synced},
        {"stats", l_stats},         {"namespace", l_namespace},
        {"controller_options", l_controller_options}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0); /* stack: core */
    lua_createtable(L, 0, 3); /* stack: core, lease_defaults */
    lua_pushinteger(L, KL_LEASE_DURATION);
    lua_setfield(L, -2, "lease_duration");
    lua_pushinteger(L, KL_RENEW_DEADLINE);
    lua_setfield(L, -2, "renew_deadline");
    lua_pushinteger(L, KL_RETRY_PERIOD);
    lua_setfield(L, -2, "retry_period");
    lua_setfield(L, -2, "lease_defaults");
    /* Whether informers list through WatchList (--watch-list): klua watch
     * then needs no LIST of its own for a format without the Table. */
    lua_pushboolean(L, kl_rt_options(kl_rt_of(L))->watch_list);
    lua_setfield(L, -2, "watch_list");
    kl_lua_http_open(L);
    kl_lua_log_open(L);
    kl_lua_procstat_open(L);
    kl_object_set_functions(L);
    kl_view_set_functions(L);
    kl_lua_json_push_module(L); /* stack: core, json */
    lua_setfield(L, -2, "json");
    kl_lua_yaml_push_module(L); /* stack: core, yaml */
    lua_setfield(L, -2, "yaml");
}

void kl_lua_klua_init(kl_rt *rt) {
    static const kl_rt_hooks hooks = {.open = core_open};
    kl_rt_register(rt, KL_RT_CORE, &hooks, NULL);
}
