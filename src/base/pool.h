/*
 * pool.h - a Lua allocator's blocks kept for reuse.
 *
 * Every event makes and drops a few small Lua objects (views, strings,
 * tables), and klua.copy hundreds; glibc's per-thread cache holds seven
 * blocks of a size, so the collector's sweeps, which free them by the
 * hundred, send most frees and the next allocations through its slower
 * bins. A pool keeps up to KL_POOL_KEEP freed blocks of each 16-byte size
 * class up to KL_POOL_MAX_SMALL bytes and hands them out again: a few
 * instructions each way. Above that, up to KL_POOL_MAX_LARGE bytes, it
 * keeps KL_POOL_KEEP_LARGE blocks of each 256-byte class: the view of every
 * watch event holds its tape (4-5 KiB for a 3 KB Pod) in one block, and the
 * block taken back is the one the collector freed last, still in the
 * core's cache. It needs no block header because a Lua allocator is told
 * each block's size when it frees or resizes one. What it keeps is bounded
 * (under 13 MiB, and never more than the script once had in use) and freed
 * by kl_pool_release. Under AddressSanitizer it keeps nothing, so that a
 * use after free is still caught. json.cc keeps the compact tapes of watch
 * events in a pool of its own, for the same reasons.
 */
#ifndef KLUA_POOL_H
#define KLUA_POOL_H

#include <stddef.h>
#include <string.h>

#include "base/xalloc.h"

#define KL_POOL_MAX_SMALL 256
#define KL_POOL_MAX_LARGE 8192
#define KL_POOL_CLASSES (KL_POOL_MAX_SMALL / 16 + KL_POOL_MAX_LARGE / 256 - 1)
#ifdef KL_UNDER_ASAN
#define KL_POOL_KEEP 0
#define KL_POOL_KEEP_LARGE 0
#else
#define KL_POOL_KEEP 4096
#define KL_POOL_KEEP_LARGE 32
#endif

typedef struct kl_pool {
    void *free[KL_POOL_CLASSES]; /* per class, a list linked through the blocks' first word */
    int n[KL_POOL_CLASSES]; /* blocks in each list */
} kl_pool;

/* lua_Alloc's contract on blocks of the pool: osize is the block's size
 * (ignored when ptr is NULL); nsize 0 frees and returns NULL; NULL when
 * out of memory, ptr then unchanged. Shrinking never fails. */
void *kl_pool_realloc(kl_pool *p, void *ptr, size_t osize, size_t nsize);

/* kl_pool_realloc, with its two commonest cases inline: a new small block
 * taken from its list, and a small block given back to a list with room.
 * klua.copy of a Pod makes and the collector frees some 180 blocks, and
 * the call and the general case's tests cost more than the work. */
static inline void *kl_pool_realloc_fast(kl_pool *p, void *ptr, size_t osize, size_t nsize) {
    if (!ptr && nsize && nsize <= KL_POOL_MAX_SMALL) {
        size_t c = (nsize - 1) >> 4;
        void *b = p->free[c];
        if (b) {
            memcpy(&p->free[c], b, sizeof b);
            p->n[c]--;
            return b;
        }
    } else if (ptr && !nsize && osize && osize <= KL_POOL_MAX_SMALL) {
        size_t c = (osize - 1) >> 4;
        if (p->n[c] < KL_POOL_KEEP) {
            memcpy(ptr, &p->free[c], sizeof ptr);
            p->free[c] = ptr;
            p->n[c]++;
            return NULL;
        }
    }
    return kl_pool_realloc(p, ptr, osize, nsize);
}
/* Frees the blocks kept; the pool stays usable. */
void kl_pool_release(kl_pool *p);

#endif
