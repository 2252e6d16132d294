/* store.c - an informer's cache; see store.h. */
#include "cache/store.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/hmap.h"
#include "base/xalloc.h"

typedef struct entry {
    kl_obj obj;
    unsigned long seen; /* generation of the last replace() that listed it */
} entry;

struct kl_store {
    kl_hmap *map; /* key -> entry* */
    unsigned long gen;
};

kl_store *kl_store_new(void) {
    kl_store *s = kl_xcalloc(1, sizeof *s);
    s->map = kl_hmap_new();
    return s;
}

void kl_store_free(kl_store *s) {
    if (!s) return;
    size_t cur = 0;
    void *v;
    while (kl_hmap_next(s->map, &cur, NULL, &v)) {
        kl_obj_clear(&((entry *)v)->obj);
        free(v);
    }
    kl_hmap_free(s->map);
    free(s);
}

size_t kl_store_len(const kl_store *s) { return kl_hmap_len(s->map); }

/* Keys are short; a long one (names are at most 253 bytes, namespaces 63)
 * is truncated consistently, which only a broken server could cause. */
static void key_of(const kl_obj *o, char *buf, size_t size) { kl_obj_key(o, buf, size); }

const kl_obj *kl_store_get(const kl_store *s, const char *key) {
    entry *e = kl_hmap_get(s->map, key);
    return e ? &e->obj : NULL;
}

int kl_store_put(kl_store *s, kl_obj *o, kl_obj *old) {
    char key[512];
    key_of(o, key, sizeof key);
    entry *e = kl_hmap_get(s->map, key);
    if (e) {
        *old = e->obj;
        e->obj = *o;
        e->seen = s->gen;
        memset(o, 0, sizeof *o);
        return 1;
    }
    e = kl_xmalloc(sizeof *e);
    e->obj = *o;
    e->seen = s->gen;
    kl_hmap_put(s->map, key, e);
    memset(o, 0, sizeof *o);
    return 0;
}

int kl_store_delete(kl_store *s, const char *key, kl_obj *old) {
    void *v;
    if (!kl_hmap_del(s->map, key, &v)) return 0;
    *old = ((entry *)v)->obj;
    free(v);
    return 1;
}

/* Deletes every entry replace() did not see, reporting each. */
static void sweep(kl_store *s, kl_store_change_fn fn, void *ud) {
    size_t n = 0, cap = 0, cur = 0;
    char **gone = NULL;
    const char *key;
    void *v;
    while (kl_hmap_next(s->map, &cur, &key, &v)) {
        if (((entry *)v)->seen == s->gen) continue;
        gone = kl_buf_grow(gone, &cap, n + 1, sizeof *gone, 16);
        gone[n++] = kl_xstrdup(key);
    }
    for (size_t i = 0; i < n; i++) {
        kl_obj old;
        if (kl_store_delete(s, gone[i], &old)) fn(ud, KL_CHANGE_DELETE, &old, NULL);
        free(gone[i]);
    }
    free(gone);
}

void kl_store_replace(kl_store *s, kl_list *list, kl_store_change_fn fn, void *ud) {
    s->gen++;
    for (size_t i = 0; i < list->n; i++) {
        kl_obj *o = &list->items[i];
        char key[512];
        key_of(o, key, sizeof key);
        entry *e = kl_hmap_get(s->map, key);
        if (e && e->seen == s->gen) {
            /* A duplicate key within one list: the later item wins. */
            kl_obj old = e->obj;
            e->obj = *o;
            memset(o, 0, sizeof *o);
            kl_obj_clear(&old);
            continue;
        }
        if (e && strcmp(e->obj.rv, o->rv) == 0) {
            e->seen = s->gen;
            kl_obj_clear(o);
            continue;
        }
        kl_obj old;
        int r = kl_store_put(s, o, &old);
        kl_obj *now = &((entry *)kl_hmap_get(s->map, key))->obj;
        fn(ud, r ? KL_CHANGE_UPDATE : KL_CHANGE_ADD, r ? &old : NULL, now);
    }
    sweep(s, fn, ud);
}

const kl_obj *kl_store_next(const kl_store *s, size_t *cursor) {
    void *v;
    return kl_hmap_next(s->map, cursor, NULL, &v) ? &((entry *)v)->obj : NULL;
}
