/* buf.c - growable arrays; see buf.h. */
#include "base/buf.h"

#include <stdint.h>
#include <stdlib.h>

#include "base/xalloc.h"

size_t kl_buf_cap(size_t cap, size_t need, size_t first) {
    if (need <= cap) return cap;
    cap = cap ? cap : first ? first : 1;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    return cap;
}

void *kl_buf_grow(void *p, size_t *cap, size_t need, size_t size, size_t first) {
    if (need <= *cap) return p;
    size_t n = kl_buf_cap(*cap, need, first);
    if (size && n > SIZE_MAX / size) kl_oom(SIZE_MAX);
    p = kl_xrealloc(p, n * size);
    *cap = n;
    return p;
}

void *kl_buf_try_grow(void *p, size_t *cap, size_t need, size_t size, size_t first) {
    if (need <= *cap) return p;
    size_t n = kl_buf_cap(*cap, need, first);
    if (size && n > SIZE_MAX / size) return NULL;
    void *q = realloc(p, n * size);
    if (q) *cap = n;
    return q;
}
