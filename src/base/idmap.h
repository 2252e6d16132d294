/*
 * idmap.h - a hash map from 64-bit ids to pointers.
 *
 * For owners that hand out ids and must find what an id names again in
 * O(1): the loop's timers, which a caller cancels by id. Open addressing
 * with linear probing; deletion shifts the following entries back, so
 * churn leaves no tombstones. The table doubles past 3/4 full and halves
 * below 1/8 full. Ids come from the owner's own counter, never from
 * outside, so a multiplicative hash spreads them well enough.
 */
#ifndef KLUA_IDMAP_H
#define KLUA_IDMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct kl_idmap_entry {
    uint64_t id; /* 0: empty */
    void *value;
} kl_idmap_entry;

typedef struct kl_idmap {
    kl_idmap_entry *slots;
    size_t len, cap; /* cap is 0 or a power of two */
} kl_idmap;

/* An empty map (all zeroes is one too). */
void kl_idmap_init(kl_idmap *m);
void kl_idmap_free(kl_idmap *m);
static inline size_t kl_idmap_len(const kl_idmap *m) { return m->len; }
/* Maps id (> 0, not yet present) to value. Aborts when out of memory (xalloc.h). */
void kl_idmap_put(kl_idmap *m, uint64_t id, void *value);
/* Removes id; its value, or NULL when it was absent. */
void *kl_idmap_del(kl_idmap *m, uint64_t id);

#endif
