/* heap.c - a binary min-heap; see heap.h. */
#include "base/heap.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

void kl_heap_init(kl_heap *h, size_t size, int (*less)(const void *, const void *),
                  void (*moved)(void *, size_t)) {
    *h = (kl_heap){.size = size, .less = less, .moved = moved};
}

void kl_heap_free(kl_heap *h) {
    free(h->data);
    h->data = NULL;
    h->len = h->cap = 0;
}

static int before(kl_heap *h, const void *a, const void *b) {
    h->compares++;
    return h->less(a, b);
}

static void place(kl_heap *h, size_t i, const void *elem) {
    void *at = kl_heap_at(h, i);
    memmove(at, elem, h->size);
    if (h->moved) h->moved(at, i);
}

/* The slot past the last element holds the one being sifted (the heap
 * always keeps room for it), so elements move by one copy each. */
static void *hole(const kl_heap *h) { return kl_heap_at(h, h->len); }

static int sift_up(kl_heap *h, size_t i) {
    size_t start = i;
    memcpy(hole(h), kl_heap_at(h, i), h->size);
    while (i > 0 && before(h, hole(h), kl_heap_at(h, (i - 1) / 2))) {
        place(h, i, kl_heap_at(h, (i - 1) / 2));
        i = (i - 1) / 2;
    }
    place(h, i, hole(h));
    return i != start;
}

static void sift_down(kl_heap *h, size_t i) {
    memcpy(hole(h), kl_heap_at(h, i), h->size);
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->len) break;
        if (child + 1 < h->len && before(h, kl_heap_at(h, child + 1), kl_heap_at(h, child))) child++;
        if (!before(h, kl_heap_at(h, child), hole(h))) break;
        place(h, i, kl_heap_at(h, child));
        i = child;
    }
    place(h, i, hole(h));
}

static void append(kl_heap *h, const void *elem) {
    memcpy(kl_heap_at(h, h->len), elem, h->size);
    h->len++;
    sift_up(h, h->len - 1);
}

void kl_heap_push(kl_heap *h, const void *elem) {
    h->data = kl_buf_grow(h->data, &h->cap, h->len + 2, h->size, 16);
    append(h, elem);
}

void kl_heap_remove(kl_heap *h, size_t i, void *out) {
    if (out) memcpy(out, kl_heap_at(h, i), h->size);
    if (--h->len == i) return;
    place(h, i, kl_heap_at(h, h->len));
    kl_heap_fix(h, i);
}

void kl_heap_fix(kl_heap *h, size_t i) {
    if (!sift_up(h, i)) sift_down(h, i);
}
