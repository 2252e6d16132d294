/*
 * hmap.h - a hash map from C strings to pointers.
 *
 * Built for the hot paths of the host: the object cache (one entry per
 * cached object, 100,000 and more) and the work queue (one entry per key).
 * Open addressing with linear probing keeps lookups to one or two cache
 * lines; deletion shifts the following entries back instead of leaving
 * tombstones, so a map under steady insert/delete churn never degrades.
 * The table doubles past 3/4 full and halves below 1/8 full.
 *
 * Each map hashes with its own random seed, so keys chosen by whoever
 * creates cluster objects cannot be crafted to collide.
 *
 * The map owns a copy of every key and frees it when the key is removed;
 * values are opaque to it and remain the caller's to own.
 */
#ifndef KLUA_HMAP_H
#define KLUA_HMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct kl_hmap kl_hmap;

/* The map's keyed string hash, for tables of its kind kept elsewhere (the
 * store's, whose keys are its objects' own identities rather than copies). */
typedef struct kl_hash_keys {
    uint64_t k0, k1, k2;
} kl_hash_keys;
/* Draws fresh random keys. */
void kl_hash_seed(kl_hash_keys *k, const void *salt);
uint64_t kl_hash(const kl_hash_keys *k, const char *s, size_t n);

/* An empty map. */
kl_hmap *kl_hmap_new(void);
/* Frees the map and its key copies; values are untouched. NULL is ignored. */
void kl_hmap_free(kl_hmap *m);

size_t kl_hmap_len(const kl_hmap *m);

/* Maps key to value, copying key when it is new. Returns 1 when key was
 * added, 0 when the value of a present key was replaced. */
int kl_hmap_put(kl_hmap *m, const char *key, void *value);

/* The value stored under key, or NULL when key is absent. */
void *kl_hmap_get(const kl_hmap *m, const char *key);

/* Whether key is present. When it is, *stored_key receives the map's own
 * copy of the key (valid until the key is removed or the map freed) and
 * *value its value; either out-pointer may be NULL. */
int kl_hmap_lookup(const kl_hmap *m, const char *key, const char **stored_key, void **value);

/* Removes key. Returns 1 and stores its value in *value (when value is not
 * NULL), or returns 0 when key is absent. */
int kl_hmap_del(kl_hmap *m, const char *key, void **value);

/* Iterates: set *cursor to 0, then call until it returns 0; each call that
 * returns 1 stores one entry's key and value (either out-pointer may be
 * NULL). Order is unspecified. Adding or removing keys during an iteration
 * invalidates it; replacing a present key's value does not. */
int kl_hmap_next(const kl_hmap *m, size_t *cursor, const char **key, void **value);

#endif
