/* ring.c - a growable circular FIFO; see ring.h. */
#include "base/ring.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/xalloc.h"

#define RING_FIRST 64
/* An array past this size is handed back when its ring empties: a burst
 * (an informer's notifications of a 100,000-object list) must not keep its
 * peak for the life of the process. Below it, the array stays for the next
 * push; the steady queues (KL_LOOP_BATCH frames, an informer held at 1,024
 * notifications) never reach it. */
#define RING_KEEP_BYTES (256 << 10)

void kl_ring_init(kl_ring *r, size_t elem) {
    memset(r, 0, sizeof *r);
    r->elem = elem;
}

void kl_ring_free(kl_ring *r) {
    free(r->buf);
    kl_ring_init(r, r->elem);
}

static unsigned char *slot(const kl_ring *r, size_t i) { return r->buf + ((r->head + i) % r->cap) * r->elem; }

/* Doubles the array, unwrapping its elements to start at index 0 (so not
 * kl_buf_grow, whose realloc would keep them wrapped). */
static void grow(kl_ring *r) {
    size_t cap = kl_buf_cap(r->cap, r->cap + 1, RING_FIRST);
    unsigned char *buf = kl_xmalloc(cap * r->elem);
    for (size_t i = 0; i < r->n; i++) memcpy(buf + i * r->elem, slot(r, i), r->elem);
    free(r->buf);
    r->buf = buf;
    r->head = 0;
    r->cap = cap;
}

void kl_ring_push(kl_ring *r, const void *e) {
    if (r->n == r->cap) grow(r);
    memcpy(slot(r, r->n), e, r->elem);
    r->n++;
}

int kl_ring_pop(kl_ring *r, void *e) {
    if (!r->n) return 0;
    memcpy(e, slot(r, 0), r->elem);
    r->head = (r->head + 1) % r->cap;
    r->n--;
    if (!r->n && r->cap * r->elem > RING_KEEP_BYTES) kl_ring_free(r);
    return 1;
}
