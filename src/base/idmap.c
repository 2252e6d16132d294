/* idmap.c - a hash map from 64-bit ids to pointers; see idmap.h. */
#include "base/idmap.h"

#include <stdlib.h>

#include "base/xalloc.h"

#define MIN_CAP 16

void kl_idmap_init(kl_idmap *m) { *m = (kl_idmap){0}; }

void kl_idmap_free(kl_idmap *m) {
    free(m->slots);
    kl_idmap_init(m);
}

/* Fibonacci hashing: consecutive ids land far apart. */
static size_t home(const kl_idmap *m, uint64_t id) {
    return (size_t)((id * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (m->cap - 1);
}

static size_t find(const kl_idmap *m, uint64_t id) {
    size_t i = home(m, id);
    while (m->slots[i].id && m->slots[i].id != id) i = (i + 1) & (m->cap - 1);
    return i;
}

static void resize(kl_idmap *m, size_t cap) {
    kl_idmap old = *m;
    m->slots = kl_xcalloc(cap, sizeof *m->slots);
    m->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
        if (old.slots[i].id) m->slots[find(m, old.slots[i].id)] = old.slots[i];
    free(old.slots);
}

void kl_idmap_put(kl_idmap *m, uint64_t id, void *value) {
    if ((m->len + 1) * 4 > m->cap * 3) resize(m, m->cap ? m->cap * 2 : MIN_CAP);
    m->slots[find(m, id)] = (kl_idmap_entry){id, value};
    m->len++;
}

/* Empties slot i and moves back the entries after it that would no longer
 * be found past the gap. */
static void shift_back(kl_idmap *m, size_t i) {
    size_t mask = m->cap - 1;
    for (size_t j = (i + 1) & mask; m->slots[j].id; j = (j + 1) & mask) {
        size_t h = home(m, m->slots[j].id);
        /* j's entry may fill the gap unless its home lies in (i, j]. */
        if (((j - h) & mask) >= ((j - i) & mask)) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i] = (kl_idmap_entry){0};
}

void *kl_idmap_del(kl_idmap *m, uint64_t id) {
    if (!m->len || !id) return NULL;
    size_t i = find(m, id);
    void *value = m->slots[i].value;
    if (!m->slots[i].id) return NULL;
    shift_back(m, i);
    m->len--;
    if (m->cap > MIN_CAP && m->len * 8 < m->cap) resize(m, m->cap / 2);
    return value;
}
