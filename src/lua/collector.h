/*
 * collector.h - which of Lua's two collectors runs the script's heap.
 *
 * Most of what a handler makes dies when its call returns: the views of
 * its objects, the strings it reads, the keys it enqueues. Lua's
 * generational collector finds that garbage in minor collections, which
 * visit the young objects and the old ones written to since; the
 * incremental collector marks the whole live heap on every cycle, and the
 * debt each view counts (view.c) starts a cycle every few dozen events.
 * But a generational major collection visits the whole heap at once,
 * about 1 ms a MiB, where the incremental one works in small steps. So
 * klua runs the generational collector while the Lua state's memory is
 * under KL_GC_LARGE, the incremental one, in small steps, from there
 * until it falls under KL_GC_SMALL again, and leaves the
 * choice to a script that makes one (collectgarbage('incremental') or
 * 'generational'): from then on klua changes nothing.
 *
 * The mode is a state machine, changed by one function along this table,
 * which is kl_collector_transitions() printed (spec/unit/collector_spec.lua
 * compares the two, and docs/architecture.md's); it aborts on a change
 * the table does not declare, and narrates each at -v 2:
 *
 * MODES
 * generational memory over 8 MiB         -> incremental  a major collection would visit too much at once
 *              collectgarbage(mode)      -> script       Lua's collectgarbage makes the change
 * incremental  memory under 2 MiB        -> generational one full collection, then minor ones
 *              collectgarbage(mode)      -> script       Lua's collectgarbage makes the change
 * script       collectgarbage(mode)      -> script       klua changes nothing
 * END MODES
 *
 * The memory is the Lua state's allocator's count, parsed forms of views
 * included, which it reports after each change through
 * kl_collector_note: two compares until a bound is crossed. The change
 * itself is deferred to the loop, where no Lua code runs, and made if the
 * memory is still past the bound.
 */
#ifndef KLUA_COLLECTOR_H
#define KLUA_COLLECTOR_H

#include <lua.h>
#include <stddef.h>
#include <stdint.h>

#include "base/loop.h"

#define KL_GC_LARGE ((size_t)8 << 20)
#define KL_GC_SMALL ((size_t)2 << 20)

typedef enum {
    KL_GC_GENERATIONAL, /* klua's choice under KL_GC_LARGE */
    KL_GC_INCREMENTAL,  /* klua's choice over it, until under KL_GC_SMALL */
    KL_GC_SCRIPT,       /* the script chose; klua changes nothing */
    KL_GC_NMODES
} kl_gc_mode;

typedef enum {
    KL_GC_EV_LARGE,  /* the memory passed KL_GC_LARGE */
    KL_GC_EV_SMALL,  /* the memory fell under KL_GC_SMALL */
    KL_GC_EV_SCRIPT, /* collectgarbage('incremental' or 'generational') */
    KL_GC_NEVENTS
} kl_gc_event;

typedef struct kl_gc_transition {
    kl_gc_mode from;
    kl_gc_event event;
    kl_gc_mode to;
    const char *then; /* what follows, for the table's readers */
} kl_gc_transition;

/* Embedded in its owner (the runtime); read by kl_collector_note inline. */
typedef struct kl_collector {
    lua_State *L;
    kl_loop *loop;        /* NULL once closed */
    const size_t *used;   /* the Lua state's memory, kept by its allocator */
    kl_gc_mode mode;
    size_t above, below;  /* the bounds whose crossing asks for a check */
    uint64_t pending;     /* the deferred check, or 0 */
} kl_collector;

/* Starts L's collector in generational mode; used is the allocator's
 * count of L's memory. */
void kl_collector_init(kl_collector *c, lua_State *L, kl_loop *loop, const size_t *used);
/* Replaces L's global collectgarbage with one that, for 'incremental' and
 * 'generational', first hands the choice to the script. */
void kl_collector_open(kl_collector *c, lua_State *L);
/* Cancels a pending check; nothing changes after. */
void kl_collector_close(kl_collector *c);
/* The allocator's call after its count changed. */
void kl_collector_crossed(kl_collector *c);
static inline void kl_collector_note(kl_collector *c, size_t used) {
    if (used > c->above || used < c->below) kl_collector_crossed(c);
}
/* "generational", "incremental" or "script" (klua.stats().collector). */
const char *kl_collector_mode_name(kl_gc_mode m);
const char *kl_collector_event_name(kl_gc_event e);
const kl_gc_transition *kl_collector_transitions(size_t *n);

#endif
