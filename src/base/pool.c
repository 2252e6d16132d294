/* pool.c - a Lua allocator's small blocks kept for reuse; see pool.h. */
#include "base/pool.h"

#include <stdlib.h>
#include <string.h>

/* The class of a small size (1..KL_POOL_MAX_SMALL): its blocks hold
 * (class + 1) * 16 bytes. */
static size_t class_of(size_t n) { return (n - 1) >> 4; }

static void *take(kl_pool *p, size_t c) {
    void *b = p->free[c];
    if (!b) return malloc((c + 1) << 4);
    memcpy(&p->free[c], b, sizeof b);
    p->n[c]--;
    return b;
}

static void give(kl_pool *p, size_t c, void *b) {
    if (p->n[c] >= KL_POOL_KEEP) {
        free(b);
        return;
    }
    memcpy(b, &p->free[c], sizeof b);
    p->free[c] = b;
    p->n[c]++;
}

void *kl_pool_realloc(kl_pool *p, void *ptr, size_t osize, size_t nsize) {
    int small_old = ptr && osize <= KL_POOL_MAX_SMALL, small_new = nsize && nsize <= KL_POOL_MAX_SMALL;
    if (nsize == 0) {
        if (small_old) give(p, class_of(osize), ptr);
        else free(ptr);
        return NULL;
    }
    if (!ptr) return small_new ? take(p, class_of(nsize)) : malloc(nsize);
    if (small_old && small_new && class_of(osize) == class_of(nsize)) return ptr;
    if (!small_old && !small_new) return realloc(ptr, nsize);
    void *b = small_new ? take(p, class_of(nsize)) : malloc(nsize);
    if (!b) return nsize < osize ? ptr : NULL; /* a larger block serves as the smaller one */
    memcpy(b, ptr, osize < nsize ? osize : nsize);
    if (small_old) give(p, class_of(osize), ptr);
    else free(ptr);
    return b;
}

void kl_pool_release(kl_pool *p) {
    for (size_t c = 0; c < KL_POOL_CLASSES; c++) {
        while (p->free[c]) {
            void *b = p->free[c];
            memcpy(&p->free[c], b, sizeof b);
            free(b);
        }
        p->n[c] = 0;
    }
}
