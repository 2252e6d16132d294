/* collector.c - which of Lua's two collectors runs the script's heap; see collector.h. */
#include "lua/collector.h"

#include <lauxlib.h>
#include <stdlib.h>

#include "base/log.h"

static const char *const mode_names[KL_GC_NMODES] = {
    [KL_GC_GENERATIONAL] = "generational",
    [KL_GC_INCREMENTAL] = "incremental",
    [KL_GC_SCRIPT] = "script",
};

static const char *const event_names[KL_GC_NEVENTS] = {
    [KL_GC_EV_LARGE] = "memory over 8 MiB",
    [KL_GC_EV_SMALL] = "memory under 2 MiB",
    [KL_GC_EV_SCRIPT] = "collectgarbage(mode)",
};
_Static_assert(KL_GC_LARGE == (size_t)8 << 20 && KL_GC_SMALL == (size_t)2 << 20, "the event names say the bounds");

#define ROW(from, ev, to, then) {KL_GC_##from, KL_GC_EV_##ev, KL_GC_##to, then}
static const kl_gc_transition table[] = {
    ROW(GENERATIONAL, LARGE, INCREMENTAL, "a major collection would visit too much at once"),
    ROW(GENERATIONAL, SCRIPT, SCRIPT, "Lua's collectgarbage makes the change"),
    ROW(INCREMENTAL, SMALL, GENERATIONAL, "one full collection, then minor ones"),
    ROW(INCREMENTAL, SCRIPT, SCRIPT, "Lua's collectgarbage makes the change"),
    ROW(SCRIPT, SCRIPT, SCRIPT, "klua changes nothing"),
};
#undef ROW

const kl_gc_transition *kl_collector_transitions(size_t *n) {
    *n = sizeof table / sizeof *table;
    return table;
}

const char *kl_collector_mode_name(kl_gc_mode m) { return m < KL_GC_NMODES ? mode_names[m] : "?"; }
const char *kl_collector_event_name(kl_gc_event e) { return e < KL_GC_NEVENTS ? event_names[e] : "?"; }

/* The bounds whose crossing asks for a check in c's mode: none once the script chose. */
static void arm(kl_collector *c) {
    c->above = c->mode == KL_GC_GENERATIONAL ? KL_GC_LARGE : SIZE_MAX;
    c->below = c->mode == KL_GC_INCREMENTAL ? KL_GC_SMALL : 0;
}

/* The one change of mode. Lua's own mode follows klua's choices; the
 * script's it makes itself, right after. */
static void advance(kl_collector *c, kl_gc_event e) {
    const kl_gc_transition *t = NULL;
    for (size_t i = 0; i < sizeof table / sizeof *table && !t; i++)
        if (table[i].from == c->mode && table[i].event == e) t = &table[i];
    if (!t) {
        kl_log(KL_LOG_ERROR, "lua", "collector bug: \"%s\" does not lead from %s; aborting",
               event_names[e], mode_names[c->mode]);
        abort();
    }
    if (t->to != t->from)
        kl_vlog(2, "lua", "collector %s -> %s: %s (%.1f MiB)", mode_names[t->from], mode_names[t->to],
                event_names[e], (double)*c->used / (1 << 20));
    c->mode = t->to;
    if (c->pending) kl_loop_cancel(c->loop, c->pending);
    c->pending = 0;
    arm(c);
    /* The incremental steps: a word allocated buys 25 words of work, in
     * steps of 1 KB (2^10 bytes), so that a step stays well under a
     * millisecond (docs/benchmarks.md, "Latency"). */
    if (t->to == KL_GC_INCREMENTAL) lua_gc(c->L, LUA_GCINC, 0, 25, 10);
    else if (t->to == KL_GC_GENERATIONAL) lua_gc(c->L, LUA_GCGEN, 0, 0);
}

/* Deferred: the allocator crossed a bound, and no Lua code runs now. */
static void check(kl_loop *loop, void *ud) {
    (void)loop;
    kl_collector *c = ud;
    c->pending = 0;
    if (c->mode == KL_GC_GENERATIONAL && *c->used > KL_GC_LARGE) advance(c, KL_GC_EV_LARGE);
    else if (c->mode == KL_GC_INCREMENTAL && *c->used < KL_GC_SMALL) advance(c, KL_GC_EV_SMALL);
    else arm(c);
}

void kl_collector_crossed(kl_collector *c) {
    if (!c->loop || c->pending) return;
    c->pending = kl_loop_defer(c->loop, check, c);
    if (!c->pending) return; /* no memory for it: the next change asks again */
    /* Disarmed until the check has run: one check however many changes. */
    c->above = SIZE_MAX;
    c->below = 0;
}

void kl_collector_init(kl_collector *c, lua_State *L, kl_loop *loop, const size_t *used) {
    *c = (kl_collector){.L = L, .loop = loop, .used = used, .mode = KL_GC_GENERATIONAL};
    lua_gc(L, LUA_GCGEN, 0, 0);
    arm(c);
}

void kl_collector_close(kl_collector *c) {
    if (c->pending) kl_loop_cancel(c->loop, c->pending);
    c->pending = 0;
    c->loop = NULL;
    c->above = SIZE_MAX;
    c->below = 0;
}

/* The options of Lua 5.4's collectgarbage, checked here so that a wrong
 * one is named as the script called it; the integers they take, checked
 * likewise. */
static const char *const options[] = {"stop", "restart", "collect", "count", "step", "setpause",
                                      "setstepmul", "isrunning", "generational", "incremental", NULL};
static const struct {
    int integers; /* optional integers after the option */
    int chooses;  /* picks a collector */
} option_args[] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}, {1, 0}, {1, 0}, {1, 0}, {0, 0}, {2, 1}, {3, 1}};

/* collectgarbage(opt, ...): Lua's own, after a choice of collector is
 * handed to the script. Upvalues: Lua's collectgarbage, the collector. */
static int l_collectgarbage(lua_State *L) {
    int o = luaL_checkoption(L, 1, "collect", options);
    for (int i = 0; i < option_args[o].integers; i++) luaL_optinteger(L, 2 + i, 0);
    if (option_args[o].chooses) advance(lua_touserdata(L, lua_upvalueindex(2)), KL_GC_EV_SCRIPT);
    int n = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, n, LUA_MULTRET);
    return lua_gettop(L);
}

void kl_collector_open(kl_collector *c, lua_State *L) {
    lua_getglobal(L, "collectgarbage");
    lua_pushlightuserdata(L, c);
    lua_pushcclosure(L, l_collectgarbage, 2);
    lua_setglobal(L, "collectgarbage");
}
