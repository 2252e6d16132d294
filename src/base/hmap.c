/* hmap.c - string-keyed open-addressing hash map; see hmap.h. */
#include "base/hmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/xalloc.h"

#define MIN_CAP 16

typedef struct slot {
    uint64_t hash; /* kept so that growing never rehashes a key */
    char *key;     /* NULL marks an empty slot */
    void *value;
} slot;

struct kl_hmap {
    slot *slots;
    size_t cap; /* a power of two */
    size_t len;
    kl_hash_keys keys; /* derived from the map's seed */
};

/* 64x64->128 multiply folded to 64 bits: every input bit reaches the output. */
static inline uint64_t fold_mul(uint64_t a, uint64_t b) {
    unsigned __int128 r = (unsigned __int128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

static inline uint64_t load64(const char *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Loads the last n < 16 bytes zero-padded into two words. */
static void load_tail(const char *p, size_t n, uint64_t *a, uint64_t *b) {
    char buf[16] = {0};
    memcpy(buf, p, n);
    *a = load64(buf);
    *b = load64(buf + 8);
}

/* Keyed hash: each 16-byte block is multiplied with the running state after
 * both halves are masked by secret keys, so colliding inputs cannot be
 * chosen without knowing the seed. */
uint64_t kl_hash(const kl_hash_keys *k, const char *s, size_t n) {
    uint64_t h = k->k2 ^ n;
    size_t left = n;
    for (; left >= 16; left -= 16, s += 16) h = fold_mul(load64(s) ^ k->k0, load64(s + 8) ^ k->k1 ^ h);
    uint64_t a, b;
    load_tail(s, left, &a, &b);
    h = fold_mul(a ^ k->k0, b ^ k->k1 ^ h);
    return fold_mul(h ^ k->k2, (uint64_t)n ^ k->k0);
}

static uint64_t hash_key(const kl_hmap *m, const char *s, size_t n) { return kl_hash(&m->keys, s, n); }

static uint64_t random_seed(const void *salt) {
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) == (ssize_t)sizeof seed) return seed;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)(uintptr_t)salt ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec;
}

void kl_hash_seed(kl_hash_keys *k, const void *salt) {
    uint64_t s = random_seed(salt);
    /* Odd constants from the digits of pi spread one seed into three keys. */
    k->k0 = fold_mul(s ^ 0x243f6a8885a308d3u, 0x13198a2e03707345u) | 1;
    k->k1 = fold_mul(s ^ 0xa4093822299f31d1u, 0x082efa98ec4e6c89u) | 1;
    k->k2 = fold_mul(s ^ 0x452821e638d01377u, 0xbe5466cf34e90c6du) | 1;
}

kl_hmap *kl_hmap_new(void) {
    kl_hmap *m = kl_xcalloc(1, sizeof *m);
    m->slots = kl_xcalloc(MIN_CAP, sizeof *m->slots);
    m->cap = MIN_CAP;
    kl_hash_seed(&m->keys, m);
    return m;
}

void kl_hmap_free(kl_hmap *m) {
    if (!m) return;
    for (size_t i = 0; i < m->cap; i++) free(m->slots[i].key);
    free(m->slots);
    free(m);
}

size_t kl_hmap_len(const kl_hmap *m) { return m->len; }

/* The slot holding key, or the empty slot where it would go. */
static slot *probe(const kl_hmap *m, const char *key, uint64_t h) {
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        slot *s = &m->slots[i];
        if (!s->key || (s->hash == h && strcmp(s->key, key) == 0)) return s;
    }
}

/* Moves every entry into a table of new_cap slots. */
static void resize(kl_hmap *m, size_t new_cap) {
    slot *fresh = kl_xcalloc(new_cap, sizeof *fresh);
    size_t mask = new_cap - 1;
    for (size_t i = 0; i < m->cap; i++) {
        slot *s = &m->slots[i];
        if (!s->key) continue;
        size_t j = s->hash & mask;
        while (fresh[j].key) j = (j + 1) & mask;
        fresh[j] = *s;
    }
    free(m->slots);
    m->slots = fresh;
    m->cap = new_cap;
}

static int over_full(size_t len, size_t cap) { return len * 4 > cap * 3; }

int kl_hmap_put(kl_hmap *m, const char *key, void *value) {
    size_t n = strlen(key);
    uint64_t h = hash_key(m, key, n);
    slot *s = probe(m, key, h);
    if (s->key) {
        s->value = value;
        return 0;
    }
    char *copy = kl_xmalloc(n + 1);
    memcpy(copy, key, n + 1);
    if (over_full(m->len + 1, m->cap)) {
        resize(m, m->cap * 2);
        s = probe(m, key, h);
    }
    *s = (slot){h, copy, value};
    m->len++;
    return 1;
}

int kl_hmap_lookup(const kl_hmap *m, const char *key, const char **stored_key, void **value) {
    slot *s = probe(m, key, hash_key(m, key, strlen(key)));
    if (!s->key) return 0;
    if (stored_key) *stored_key = s->key;
    if (value) *value = s->value;
    return 1;
}

void *kl_hmap_get(const kl_hmap *m, const char *key) {
    void *value = NULL;
    kl_hmap_lookup(m, key, NULL, &value);
    return value;
}

/* Empties slot i and pulls back each following entry of its probe run that
 * may sit earlier, so that lookups never meet a hole inside a run. */
static void remove_at(kl_hmap *m, size_t i) {
    size_t mask = m->cap - 1;
    for (size_t j = (i + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
        size_t home = m->slots[j].hash & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i] = (slot){0, NULL, NULL};
}

static void maybe_shrink(kl_hmap *m) {
    if (m->cap <= MIN_CAP || m->len * 8 >= m->cap) return;
    size_t cap = MIN_CAP;
    while (over_full(m->len * 2, cap)) cap *= 2;
    resize(m, cap);
}

int kl_hmap_del(kl_hmap *m, const char *key, void **value) {
    slot *s = probe(m, key, hash_key(m, key, strlen(key)));
    if (!s->key) return 0;
    if (value) *value = s->value;
    free(s->key);
    remove_at(m, (size_t)(s - m->slots));
    m->len--;
    maybe_shrink(m);
    return 1;
}

int kl_hmap_next(const kl_hmap *m, size_t *cursor, const char **key, void **value) {
    for (size_t i = *cursor; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        if (key) *key = m->slots[i].key;
        if (value) *value = m->slots[i].value;
        *cursor = i + 1;
        return 1;
    }
    *cursor = m->cap;
    return 0;
}
