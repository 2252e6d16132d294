/*
 * ring.h - a growable FIFO of fixed-size elements, stored in one circular
 * array: pushing at the tail and popping at the head never move the other
 * elements, and the array doubles when full (out of memory aborts, see
 * xalloc.h). The reflector's frames and an informer's notifications wait
 * in one.
 */
#ifndef KLUA_RING_H
#define KLUA_RING_H

#include <stddef.h>

typedef struct kl_ring {
    unsigned char *buf;
    size_t elem;  /* bytes per element */
    size_t head;  /* index of the oldest element */
    size_t n;     /* elements held */
    size_t cap;   /* elements the array has room for */
} kl_ring;

/* An empty ring of elements elem bytes long; it allocates on first push. */
void kl_ring_init(kl_ring *r, size_t elem);
/* Frees the array; the elements still held are the caller's to clear first. */
void kl_ring_free(kl_ring *r);
/* Copies *e in at the tail. */
void kl_ring_push(kl_ring *r, const void *e);
/* Copies the head element into *e and removes it: 1, or 0 when empty. The
 * pop that empties a ring whose array grew past 256 KiB frees the array. */
int kl_ring_pop(kl_ring *r, void *e);
static inline size_t kl_ring_len(const kl_ring *r) { return r->n; }
/* Elements the array has room for now (0 when it has none). */
static inline size_t kl_ring_cap(const kl_ring *r) { return r->cap; }
/* The head element, left in place (valid until the next push), or NULL. */
static inline const void *kl_ring_peek(const kl_ring *r) { return r->n ? r->buf + r->head * r->elem : NULL; }

#endif
