/*
 * heap.h - a binary min-heap of fixed-size elements, held by value.
 *
 * The owner gives the element size and its order (a strict weak order:
 * ties broken by a sequence number make the pop order independent of the
 * heap's shape). An owner that must find an element again (to move it
 * earlier, or to take it out before it is due) gives a moved callback,
 * which is told each element's index whenever it changes, as the work
 * queue keeps it in its delayed key's record. Used for the loop's timers
 * and the work queue's delayed keys.
 */
#ifndef KLUA_HEAP_H
#define KLUA_HEAP_H

#include <stddef.h>

typedef struct kl_heap {
    unsigned char *data;
    size_t len, cap, size;
    int (*less)(const void *a, const void *b);
    void (*moved)(void *elem, size_t index); /* may be NULL */
    unsigned long compares; /* calls of less so far: what the heap's work cost */
} kl_heap;

/* An empty heap of elements of size bytes. */
void kl_heap_init(kl_heap *h, size_t size, int (*less)(const void *, const void *),
                  void (*moved)(void *, size_t));
void kl_heap_free(kl_heap *h);
static inline size_t kl_heap_len(const kl_heap *h) { return h->len; }
/* The element at index i (0 is the least), valid until the heap changes. */
static inline void *kl_heap_at(const kl_heap *h, size_t i) { return h->data + i * h->size; }
/* Adds a copy of elem. Aborts when out of memory (xalloc.h). */
void kl_heap_push(kl_heap *h, const void *elem);
/* Takes out the element at index i, copying it to out (may be NULL). */
void kl_heap_remove(kl_heap *h, size_t i, void *out);
/* Restores the order after the key of the element at index i changed. */
void kl_heap_fix(kl_heap *h, size_t i);

#endif
