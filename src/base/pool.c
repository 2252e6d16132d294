/* pool.c - a Lua allocator's blocks kept for reuse; see pool.h. */
#include "base/pool.h"

#include <stdlib.h>
#include <string.h>

#define SMALL (KL_POOL_MAX_SMALL / 16) /* the 16-byte classes; the 256-byte ones follow */

/* The class of a size of 1..KL_POOL_MAX_LARGE bytes. */
static size_t class_of(size_t n) { return n <= KL_POOL_MAX_SMALL ? (n - 1) >> 4 : SMALL + ((n - 1) >> 8) - 1; }
/* The bytes a block of class c holds. */
static size_t class_bytes(size_t c) { return c < SMALL ? (c + 1) << 4 : (c - SMALL + 2) << 8; }

static void *take(kl_pool *p, size_t c) {
    void *b = p->free[c];
    if (!b) return malloc(class_bytes(c));
    memcpy(&p->free[c], b, sizeof b);
    p->n[c]--;
    return b;
}

static void give(kl_pool *p, size_t c, void *b) {
    if (p->n[c] >= (c < SMALL ? KL_POOL_KEEP : KL_POOL_KEEP_LARGE)) {
        free(b);
        return;
    }
    memcpy(b, &p->free[c], sizeof b);
    p->free[c] = b;
    p->n[c]++;
}

void *kl_pool_realloc(kl_pool *p, void *ptr, size_t osize, size_t nsize) {
    int pooled_old = ptr && osize <= KL_POOL_MAX_LARGE, pooled_new = nsize && nsize <= KL_POOL_MAX_LARGE;
    if (nsize == 0) {
        if (pooled_old) give(p, class_of(osize), ptr);
        else free(ptr);
        return NULL;
    }
    if (!ptr) return pooled_new ? take(p, class_of(nsize)) : malloc(nsize);
    if (pooled_old && pooled_new && class_of(osize) == class_of(nsize)) return ptr;
    if (!pooled_old && !pooled_new) return realloc(ptr, nsize);
    void *b = pooled_new ? take(p, class_of(nsize)) : malloc(nsize);
    if (!b) return nsize < osize ? ptr : NULL; /* a larger block serves as the smaller one */
    memcpy(b, ptr, osize < nsize ? osize : nsize);
    if (pooled_old) give(p, class_of(osize), ptr);
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
