/* xalloc.c - host allocations that abort when out of memory; see xalloc.h. */
#include "base/xalloc.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

static long fail_countdown = -1;

void kl_xalloc_fail_after(long n) { fail_countdown = n < 0 ? -1 : n; }

/* Whether the spec hook says this allocation fails. */
static int injected_failure(void) {
    if (fail_countdown < 0) return 0;
    return fail_countdown-- == 0;
}

void kl_oom(size_t n) {
    /* stderr is unbuffered: logging needs no allocation. */
    kl_log(KL_LOG_ERROR, "klua", "out of memory allocating %zu bytes; aborting", n);
    abort();
}

void kl_heap_trim(void) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

void *kl_xmalloc(size_t n) {
    void *p = injected_failure() ? NULL : malloc(n ? n : 1);
    if (!p) kl_oom(n);
    return p;
}

void *kl_xcalloc(size_t count, size_t size) {
    if (size && count > (size_t)-1 / size) kl_oom((size_t)-1);
    void *p = injected_failure() ? NULL : calloc(count ? count : 1, size ? size : 1);
    if (!p) kl_oom(count * size);
    return p;
}

void *kl_xrealloc(void *p, size_t n) {
    void *q = injected_failure() ? NULL : realloc(p, n ? n : 1);
    if (!q) kl_oom(n);
    return q;
}

char *kl_xstrndup(const char *s, size_t n) {
    size_t len = strnlen(s, n);
    char *c = kl_xmalloc(len + 1);
    memcpy(c, s, len);
    c[len] = '\0';
    return c;
}

char *kl_xstrdup(const char *s) { return kl_xstrndup(s, (size_t)-1); }
