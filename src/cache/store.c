/* store.c - an informer's cache; see store.h. */
#include "cache/store.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/hmap.h"
#include "base/xalloc.h"

/* Entries live in pages of PAGE_ENTRIES, numbered from 1 (0: none), so
 * that the table and the namespace index hold 4-byte numbers rather than
 * pointers and an entry costs 56 bytes with no allocation of its own (80
 * when each was malloc'd, and its slot 16 bytes rather than 8:
 * docs/architecture.md, "What a cached object costs"). A page never moves;
 * freed entries are reused, and the pages go when the store empties. */
typedef uint32_t ref;
#define PAGE_BITS 9
#define PAGE_ENTRIES ((ref)1 << PAGE_BITS)
/* ns_prev has 31 bits. */
#define MAX_ENTRIES (((ref)1 << 31) - 1)

/* The namespace index links each namespace's entries into a list through the
 * entries themselves: two numbers an object rather than a second map entry
 * and a second copy of its key. A free entry's ns_next links the free list.
 *
 * seen is the parity of the generation of the last replace() that listed
 * the entry, or of the put that stored it: one bit is enough, since after
 * each replace() every entry left has the current generation (the sweep
 * deleted the others), and puts store the current one. */
typedef struct entry {
    kl_obj obj;
    unsigned ns_prev : 31, seen : 1;
    ref ns_next;
} entry;
_Static_assert(sizeof(entry) <= 56, "an entry costs 56 bytes");

/* kl_store_next_in's cursor once the list is done (0 is its start). */
#define CURSOR_END SIZE_MAX

/* The table from key to entry holds no key: an entry's identity is its key
 * ("ns/name"), so a slot is 32 bits of the key's hash and the entry's
 * number. Open addressing with linear probing and backward-shift deletion,
 * as kl_hmap's, but filled to 7/8 rather than 3/4 before it doubles: eight
 * slots share a cache line and a probe compares hashes only, so a longer
 * run costs little, and 100,000 objects fit 131,072 slots rather than
 * 262,144. */
typedef struct slot {
    uint32_t hash;
    ref e; /* 0: empty */
} slot;

#define MIN_CAP 16

struct kl_store {
    slot *slots;
    size_t cap, len;     /* cap a power of two */
    entry **pages;
    size_t npages, pages_cap;
    ref used;            /* entries ever handed out, 1..used; the rest of the pages is unused */
    ref free;            /* the first free entry, 0 when none */
    kl_hash_keys keys;
    kl_hmap *namespaces; /* namespace -> the first entry of its list, as (void *)ref */
    kl_hmap *changed;    /* keys changed since the last take_changes; NULL until tracked */
    unsigned gen : 1;    /* the parity of the generation of the last replace() */
};

static entry *at(const kl_store *s, ref r) { return &s->pages[(r - 1) >> PAGE_BITS][(r - 1) & (PAGE_ENTRIES - 1)]; }

/* A new entry, its contents zero. */
static ref entry_new(kl_store *s) {
    ref r = s->free;
    if (r) {
        s->free = at(s, r)->ns_next;
    } else {
        if (s->used == MAX_ENTRIES) kl_oom(sizeof(entry));
        r = ++s->used;
        size_t page = (r - 1) >> PAGE_BITS;
        if (page == s->npages) {
            s->pages = kl_buf_grow(s->pages, &s->pages_cap, s->npages + 1, sizeof *s->pages, 16);
            s->pages[s->npages++] = kl_xmalloc(PAGE_ENTRIES * sizeof(entry));
        }
    }
    memset(at(s, r), 0, sizeof(entry));
    return r;
}

static void free_pages(kl_store *s) {
    for (size_t i = 0; i < s->npages; i++) free(s->pages[i]);
    free(s->pages);
    s->pages = NULL;
    s->npages = s->pages_cap = 0;
    s->used = s->free = 0;
}

/* Frees entry r, whose object has moved out. */
static void entry_free(kl_store *s, ref r) {
    at(s, r)->ns_next = s->free;
    s->free = r;
}

/* Whether e's key is key: built as kl_store_put builds it, so that an
 * over-long one is truncated alike on both sides. */
static int key_is(const entry *e, const char *key) {
    char buf[512];
    kl_obj_key(&e->obj, buf, sizeof buf);
    return strcmp(buf, key) == 0;
}

static uint32_t hash_of(const kl_store *s, const char *key) {
    return (uint32_t)kl_hash(&s->keys, key, strlen(key));
}

/* The slot holding key, or the empty slot where it would go. */
static slot *probe(const kl_store *s, const char *key, uint32_t h) {
    size_t mask = s->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        slot *sl = &s->slots[i];
        if (!sl->e || (sl->hash == h && key_is(at(s, sl->e), key))) return sl;
    }
}

static void resize(kl_store *s, size_t cap) {
    slot *fresh = kl_xcalloc(cap, sizeof *fresh);
    size_t mask = cap - 1;
    for (size_t i = 0; i < s->cap; i++) {
        if (!s->slots[i].e) continue;
        size_t j = s->slots[i].hash & mask;
        while (fresh[j].e) j = (j + 1) & mask;
        fresh[j] = s->slots[i];
    }
    free(s->slots);
    s->slots = fresh;
    s->cap = cap;
}

static ref table_get(const kl_store *s, const char *key) { return probe(s, key, hash_of(s, key))->e; }

/* Adds r under key, which is absent. */
static void table_add(kl_store *s, const char *key, ref r) {
    uint32_t h = hash_of(s, key);
    if ((s->len + 1) * 8 > s->cap * 7) resize(s, s->cap * 2);
    *probe(s, key, h) = (slot){h, r};
    s->len++;
}

/* Removes key's slot; its entry, or 0 when absent. Following entries of
 * the probe run move back so that lookups never meet a hole inside it. */
static ref table_del(kl_store *s, const char *key) {
    slot *sl = probe(s, key, hash_of(s, key));
    ref r = sl->e;
    if (!r) return 0;
    size_t mask = s->cap - 1, i = (size_t)(sl - s->slots);
    for (size_t j = (i + 1) & mask; s->slots[j].e; j = (j + 1) & mask) {
        size_t home = s->slots[j].hash & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            s->slots[i] = s->slots[j];
            i = j;
        }
    }
    s->slots[i] = (slot){0, 0};
    s->len--;
    if (s->cap > MIN_CAP && s->len * 8 < s->cap) {
        size_t cap = MIN_CAP;
        while ((s->len * 2) * 8 > cap * 7) cap *= 2;
        resize(s, cap);
    }
    return r;
}

/* The next entry from slot *cursor on, or NULL at the end. */
static entry *table_next(const kl_store *s, size_t *cursor) {
    for (size_t i = *cursor; i < s->cap; i++) {
        if (!s->slots[i].e) continue;
        *cursor = i + 1;
        return at(s, s->slots[i].e);
    }
    *cursor = s->cap;
    return NULL;
}

kl_store *kl_store_new(void) {
    kl_store *s = kl_xcalloc(1, sizeof *s);
    s->slots = kl_xcalloc(MIN_CAP, sizeof *s->slots);
    s->cap = MIN_CAP;
    kl_hash_seed(&s->keys, s);
    s->namespaces = kl_hmap_new();
    return s;
}

static void note_changed(kl_store *s, const char *key) {
    if (s->changed) kl_hmap_put(s->changed, key, NULL);
}

static const char *ns_of(const entry *e) { return e->obj.ns ? e->obj.ns : ""; }

static ref ns_head(const kl_store *s, const char *ns) { return (ref)(uintptr_t)kl_hmap_get(s->namespaces, ns); }

static void set_ns_head(kl_store *s, const char *ns, ref r) { kl_hmap_put(s->namespaces, ns, (void *)(uintptr_t)r); }

static void index_add(kl_store *s, ref r) {
    entry *e = at(s, r);
    ref head = ns_head(s, ns_of(e));
    e->ns_prev = 0;
    e->ns_next = head;
    if (head) at(s, head)->ns_prev = r;
    set_ns_head(s, ns_of(e), r);
}

static void index_del(kl_store *s, ref r) {
    entry *e = at(s, r);
    if (e->ns_next) at(s, e->ns_next)->ns_prev = e->ns_prev;
    if (e->ns_prev) at(s, e->ns_prev)->ns_next = e->ns_next;
    else if (e->ns_next) set_ns_head(s, ns_of(e), e->ns_next);
    else kl_hmap_del(s->namespaces, ns_of(e), NULL);
}

void kl_store_free(kl_store *s) {
    if (!s) return;
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i].e) kl_obj_clear(&at(s, s->slots[i].e)->obj);
    free_pages(s);
    free(s->slots);
    kl_hmap_free(s->namespaces);
    kl_hmap_free(s->changed);
    free(s);
}

size_t kl_store_len(const kl_store *s) { return s->len; }

/* Keys are short; a long one (names are at most 253 bytes, namespaces 63)
 * is truncated consistently, which only a broken server could cause. */
static void key_of(const kl_obj *o, char *buf, size_t size) { kl_obj_key(o, buf, size); }

const kl_obj *kl_store_get(const kl_store *s, const char *key) {
    ref r = table_get(s, key);
    return r ? &at(s, r)->obj : NULL;
}

/* Makes *o entry e's object and zeroes *o. */
static void keep(entry *e, kl_obj *o) {
    e->obj = *o;
    memset(o, 0, sizeof *o);
}

/* Stores *o under key, whose entry is r (0 when the key is new), moving
 * the object it held into *old; returns the entry that holds *o now. */
static entry *store_at(kl_store *s, const char *key, ref r, kl_obj *o, kl_obj *old) {
    note_changed(s, key);
    int added = !r;
    if (added) {
        r = entry_new(s);
        table_add(s, key, r);
    } else {
        /* The key names the namespace, so the entry stays in its index. */
        *old = at(s, r)->obj;
    }
    entry *e = at(s, r);
    keep(e, o);
    e->seen = s->gen;
    if (added) index_add(s, r);
    return e;
}

int kl_store_put(kl_store *s, kl_obj *o, kl_obj *old) {
    char key[512];
    key_of(o, key, sizeof key);
    ref r = table_get(s, key);
    store_at(s, key, r, o, old);
    return r != 0;
}

int kl_store_delete(kl_store *s, const char *key, kl_obj *old) {
    ref r = table_del(s, key);
    if (!r) return 0;
    note_changed(s, key);
    index_del(s, r);
    *old = at(s, r)->obj;
    entry_free(s, r);
    if (!s->len) free_pages(s);
    return 1;
}

/* Deletes every entry replace() did not see, reporting each. */
static void sweep(kl_store *s, kl_store_change_fn fn, void *ud) {
    size_t n = 0, cap = 0, cur = 0;
    char **gone = NULL;
    entry *e;
    while ((e = table_next(s, &cur))) {
        if (e->seen == s->gen) continue;
        char key[512];
        key_of(&e->obj, key, sizeof key);
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
    s->gen ^= 1;
    for (size_t i = 0; i < list->n; i++) {
        kl_obj *o = &list->items[i];
        char key[512];
        key_of(o, key, sizeof key);
        ref r = table_get(s, key);
        entry *e = r ? at(s, r) : NULL;
        if (e && e->seen == s->gen) {
            /* A duplicate key within one list: the later item wins. */
            note_changed(s, key);
            kl_obj old = e->obj;
            keep(e, o);
            kl_obj_clear(&old);
            continue;
        }
        if (e && strcmp(e->obj.rv, o->rv) == 0) {
            e->seen = s->gen;
            kl_obj_clear(o);
            continue;
        }
        kl_obj old;
        entry *now = store_at(s, key, r, o, &old);
        fn(ud, e ? KL_CHANGE_UPDATE : KL_CHANGE_ADD, e ? &old : NULL, &now->obj);
    }
    sweep(s, fn, ud);
}

const kl_obj *kl_store_next(const kl_store *s, size_t *cursor) {
    entry *e = table_next(s, cursor);
    return e ? &e->obj : NULL;
}

/* The cursor holds the next entry's number. */
const kl_obj *kl_store_next_in(const kl_store *s, const char *ns, size_t *cursor) {
    if (*cursor == CURSOR_END) return NULL;
    ref r = *cursor ? (ref)*cursor : ns_head(s, ns);
    if (!r) {
        *cursor = CURSOR_END;
        return NULL;
    }
    entry *e = at(s, r);
    *cursor = e->ns_next ? e->ns_next : CURSOR_END;
    return &e->obj;
}

void kl_store_track_changes(kl_store *s) {
    if (!s->changed) s->changed = kl_hmap_new();
}

void kl_store_take_changes(kl_store *s, void (*fn)(void *ud, const char *key), void *ud) {
    if (!s->changed) return;
    kl_hmap *changed = s->changed;
    s->changed = kl_hmap_new();
    size_t cur = 0;
    const char *key;
    while (kl_hmap_next(changed, &cur, &key, NULL)) fn(ud, key);
    kl_hmap_free(changed);
}
