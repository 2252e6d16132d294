/* store.c - an informer's cache; see store.h. */
#include "cache/store.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "base/buf.h"
#include "base/hmap.h"
#include "base/log.h"
#include "base/loop.h"
#include "base/xalloc.h"

/* Entries live in pages of PAGE_ENTRIES, numbered from 1 (0: none), so
 * that the table and the namespace index hold 4-byte numbers rather than
 * pointers and an entry costs 64 bytes with no allocation of its own (80
 * when each was malloc'd, and its slot 16 bytes rather than 8:
 * docs/architecture.md, "What a cached object costs"). A page never moves;
 * freed entries are reused, and the pages go when the store empties. */
typedef uint32_t ref;
#define PAGE_BITS 9
#define PAGE_ENTRIES ((ref)1 << PAGE_BITS)
/* ns_prev and ns_next have 31 bits. */
#define MAX_ENTRIES (((ref)1 << 31) - 1)

/* A cold entry's bytes: its identity (ns\0name\0rv\0, which the
 * entry's strings point into), then its JSON compressed against the
 * store's dictionary, a zstd frame of len bytes. The identity moves in
 * with the frame so that what a LIST's object was, its blob and the
 * identity the decoder allocated beside it, is freed whole: freeing the
 * blob alone would leave the identity pinning every page the blob had.
 *
 * Frames are laid one after the other in blocks of their own, not
 * malloc'd: in the heap each would take the start of a hole a blob left,
 * and the rest of the hole, a few KiB between two frames, would stay
 * resident until malloc_trim, whose cost grows with such holes (20 ms a
 * call at 100,000 Pods; docs/architecture.md). A block goes when its last
 * frame does, and a compaction moves the frames of a block more than half
 * of which is dead (objects written again or deleted since) to the
 * current one, so that a block that keeps a few live frames goes too. */
typedef struct frame {
    uint32_t len;
    uint32_t block; /* its block's index in the store's */
    char data[];
} frame;

typedef struct block {
    size_t cap, used; /* bytes of data */
    size_t live, live_bytes; /* frames in it, and what they take */
    _Alignas(uint32_t) char data[];
} block;

/* An entry holds what a kl_obj does, its bytes either the JSON (hot) or a
 * frame (cold). The namespace index links each namespace's entries into a
 * list through the entries themselves: two numbers an object rather than a
 * second map entry and a second copy of its key. A free entry's ns_next
 * links the free list, and its name is NULL.
 *
 * seen is the parity of the generation of the last replace() that listed
 * the entry, or of the put that stored it: one bit is enough, since after
 * each replace() every entry left has the current generation (the sweep
 * deleted the others), and puts store the current one.
 *
 * written is when the entry was last written (put, or replace() with a
 * new resourceVersion), in milliseconds of the store's clock modulo 2^32:
 * ages are differences, right across a wrap, and an entry left hot for 49
 * days (only when nothing compacts) merely looks young once. */
typedef struct entry {
    union {
        kl_blob *blob; /* hot: the JSON is blob->data[off, off+len) */
        frame *z;      /* cold: the JSON's len bytes compressed, off 0 */
    } b;
    size_t off, len;
    char *ns, *name, *rv; /* hot: one allocation at ns, as kl_obj's; cold: in b.z */
    unsigned ns_prev : 31, seen : 1;
    unsigned ns_next : 31, cold : 1;
    uint32_t written;
    unsigned kept : 1; /* compression did not pay: JSON until written again */
} entry;
_Static_assert(sizeof(entry) <= 64, "an entry costs 64 bytes");

/* Level 1: the dictionary does most of the work on objects this small
 * (level 3 shrinks the bench's Pods by 2% more for 30% more CPU and a
 * four times larger compression dictionary). */
#define LEVEL 1
/* A raw-content dictionary, the whole of some sampled objects: 64 KiB of
 * the bench's Pods compress them to 0.128x, 16 KiB to 0.134x. */
#define DICT_BYTES (64 * 1024)

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
    double (*now)(void *ud);
    void *now_ud;
    double epoch;        /* the clock's reading that written counts from */
    size_t json_bytes;   /* of every entry, hot or cold */
    /* The compaction: the dictionary, made once and kept for the store's
     * life (every cold entry needs it), the contexts, and the pass. */
    ZSTD_CDict *cdict;
    ZSTD_DDict *ddict;
    ZSTD_DCtx *dctx;     /* every read of a cold entry's */
    ZSTD_CCtx *cctx;     /* during a pass only */
    char *zbuf;          /* during a pass only: a frame being made */
    size_t zbuf_cap;
    ref cursor;          /* the pass's next entry; 0: no pass */
    double min_due;      /* the earliest due of the entries the pass left hot */
    double first_write;  /* the first write since the pass began */
    unsigned has_min_due : 1, has_first_write : 1;
    kl_store_compression_stats z;
    block **blocks;      /* NULL where one was freed */
    size_t nblocks, blocks_cap;
    size_t current;      /* the block frames are laid in, as index + 1; 0: none */
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
    s->cursor = 0; /* a pass has nothing left to visit */
    /* No frame is left either: the block they were laid in goes too, or an
     * informer whose objects all went would keep it for good. */
    if (s->current) {
        s->z.block_bytes -= sizeof(block) + s->blocks[s->current - 1]->cap;
        free(s->blocks[s->current - 1]);
        s->blocks[s->current - 1] = NULL;
        s->current = 0;
    }
}

/* Frees entry r, whose object has moved out: a compaction passing by sees
 * it free by its NULL name. */
static void entry_free(kl_store *s, ref r) {
    memset(at(s, r), 0, sizeof(entry));
    at(s, r)->ns_next = s->free;
    s->free = r;
}

/* e's identity as a kl_obj, for kl_obj_key; its bytes are not set. */
static kl_obj identity(const entry *e) { return (kl_obj){.ns = e->ns, .name = e->name, .rv = e->rv}; }

/* Keys are short; a long one (names are at most 253 bytes, namespaces 63)
 * is truncated consistently, which only a broken server could cause. */
static void key_of(const kl_obj *o, char *buf, size_t size) { kl_obj_key(o, buf, size); }

/* Whether e's key is key: built as kl_store_put builds it, so that an
 * over-long one is truncated alike on both sides. */
static int key_is(const entry *e, const char *key) {
    char buf[512];
    kl_obj id = identity(e);
    key_of(&id, buf, sizeof buf);
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

static double live_now(void *ud) {
    (void)ud;
    return kl_now();
}

static double clock_now(const kl_store *s) { return s->now(s->now_ud); }

void kl_store_set_clock(kl_store *s, double (*now)(void *ud), void *ud) {
    s->now = now;
    s->now_ud = ud;
    s->epoch = clock_now(s);
}

kl_store *kl_store_new(void) {
    kl_store *s = kl_xcalloc(1, sizeof *s);
    s->slots = kl_xcalloc(MIN_CAP, sizeof *s->slots);
    s->cap = MIN_CAP;
    kl_hash_seed(&s->keys, s);
    s->namespaces = kl_hmap_new();
    kl_store_set_clock(s, live_now, NULL);
    return s;
}

/* Milliseconds of the store's clock at t, modulo 2^32. */
static uint32_t stamp(const kl_store *s, double t) { return (uint32_t)(int64_t)((t - s->epoch) * 1000); }

static void note_changed(kl_store *s, const char *key) {
    if (s->changed) kl_hmap_put(s->changed, key, NULL);
}

static const char *ns_of(const entry *e) { return e->ns ? e->ns : ""; }

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

/* A fresh blob of the len bytes of JSON that the zstd frame src[0, n)
 * holds. A frame that does not decompress to what it was made from is
 * memory gone bad: no reader could be given anything true. */
static kl_blob *decompress(const kl_store *s, const char *src, size_t n, size_t len) {
    kl_blob *b = kl_blob_alloc(len);
    size_t got = ZSTD_decompress_usingDDict(s->dctx, b->data, len, src, n, s->ddict);
    if (ZSTD_isError(got) || got != len) {
        kl_log(KL_LOG_ERROR, "store", "a compressed cached object does not decompress (%s); aborting",
               ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
        abort();
    }
    return b;
}

/* Where cold entry e's zstd frame starts: past the identity. */
static const char *zdata(const entry *e) { return e->rv + strlen(e->rv) + 1; }

/* A fresh blob of e's JSON, decompressed from its frame. */
static kl_blob *inflate(const kl_store *s, const entry *e) { return decompress(s, zdata(e), e->b.z->len, e->len); }

/* The bytes e's frame takes in its block. */
static size_t frame_size(const entry *e) {
    size_t n = sizeof(frame) + (size_t)(e->rv + strlen(e->rv) + 1 - e->ns) + e->b.z->len;
    return (n + _Alignof(frame) - 1) & ~(_Alignof(frame) - 1);
}

/* A new block of cap bytes; its index. Frames are laid in it from now on
 * when it becomes the current one. */
static size_t block_new(kl_store *s, size_t cap, int current) {
    size_t i = 0;
    while (i < s->nblocks && s->blocks[i]) i++;
    if (i == s->nblocks) {
        if (i == UINT32_MAX) kl_oom(cap);
        s->blocks = kl_buf_grow(s->blocks, &s->blocks_cap, i + 1, sizeof *s->blocks, 16);
        s->nblocks++;
    }
    block *b = kl_xmalloc(sizeof(block) + cap);
    b->cap = cap;
    b->used = b->live = b->live_bytes = 0;
    s->blocks[i] = b;
    if (current) s->current = i + 1;
    s->z.block_bytes += sizeof(block) + cap;
    return i;
}

/* A frame of size bytes (frame_size's), laid in the current block or a
 * new one of block_bytes. A frame larger than such a block gets one of its
 * own, exactly its size, and the current block stays current: were the
 * frame's block made current, the room left in the one before would stay
 * empty until a later pass found it mostly dead, which only a write starts
 * (a 1 MiB ConfigMap among small ones would strand a block each). */
static frame *frame_alloc(kl_store *s, size_t size, size_t block_bytes) {
    size_t room = block_bytes > sizeof(block) ? block_bytes - sizeof(block) : 0;
    size_t in = s->current - 1;
    if (size > room) in = block_new(s, size, 0);
    else if (!s->current || s->blocks[in]->cap - s->blocks[in]->used < size) in = block_new(s, room, 1);
    block *b = s->blocks[in];
    frame *f = (frame *)(b->data + b->used);
    b->used += size;
    b->live++;
    b->live_bytes += size;
    f->block = (uint32_t)in;
    return f;
}

static void frame_free(kl_store *s, frame *f, size_t size) {
    size_t i = f->block;
    block *b = s->blocks[i];
    b->live_bytes -= size;
    if (--b->live) return;
    if (i + 1 == s->current) {
        b->used = 0; /* laid in afresh */
        return;
    }
    s->z.block_bytes -= sizeof(block) + b->cap;
    free(b);
    s->blocks[i] = NULL;
}

/* Frees e's frame, its identity with it. */
static void drop_frame(kl_store *s, entry *e) {
    s->z.objects--;
    s->z.bytes -= e->b.z->len;
    s->z.json_bytes -= e->len;
    frame_free(s, e->b.z, frame_size(e));
    e->b.z = NULL;
    e->cold = 0;
}

/* Frees what e holds: its bytes and its identity. */
static void discard(kl_store *s, entry *e) {
    s->json_bytes -= e->len;
    if (e->cold) {
        drop_frame(s, e);
    } else {
        kl_blob_unref(e->b.blob);
        free(e->ns);
    }
}

/* Moves e's object into *out as JSON, e's identity with it. */
static void take(kl_store *s, entry *e, kl_obj *out) {
    s->json_bytes -= e->len;
    out->off = e->off;
    out->len = e->len;
    if (e->cold) {
        out->blob = inflate(s, e);
        kl_obj_set_identity(out, e->ns, strlen(e->ns), e->name, strlen(e->name), e->rv, strlen(e->rv));
        drop_frame(s, e);
        return;
    }
    out->blob = e->b.blob;
    out->ns = e->ns;
    out->name = e->name;
    out->rv = e->rv;
}

/* *out as a reader gets e (store.h). */
static void read_into(const kl_store *s, const entry *e, kl_obj *out) {
    out->blob = e->cold ? inflate(s, e) : kl_blob_ref(e->b.blob);
    out->off = e->off;
    out->len = e->len;
    out->ns = e->ns;
    out->name = e->name;
    out->rv = e->rv;
}

/* e's object for the duration of a call: no reference of its own. */
static kl_obj borrowed(const entry *e) {
    return (kl_obj){e->b.blob, e->off, e->len, e->ns, e->name, e->rv};
}

/* Notes a write at t: a pass that began before it did not see it. */
static void note_write(kl_store *s, double t) {
    if (s->has_first_write) return;
    s->first_write = t;
    s->has_first_write = 1;
}

/* Makes *o entry e's object, written now, and zeroes *o. */
static void keep(kl_store *s, entry *e, kl_obj *o) {
    double t = clock_now(s);
    e->b.blob = o->blob;
    e->off = o->off;
    e->len = o->len;
    e->ns = o->ns;
    e->name = o->name;
    e->rv = o->rv;
    e->cold = e->kept = 0;
    e->written = stamp(s, t);
    s->json_bytes += e->len;
    note_write(s, t);
    memset(o, 0, sizeof *o);
}

static void zstd_free(kl_store *s) {
    ZSTD_freeCCtx(s->cctx);
    s->cctx = NULL;
    free(s->zbuf);
    s->zbuf = NULL;
    s->zbuf_cap = 0;
}

void kl_store_free(kl_store *s) {
    if (!s) return;
    for (size_t i = 0; i < s->cap; i++)
        if (s->slots[i].e) discard(s, at(s, s->slots[i].e));
    free_pages(s);
    free(s->slots);
    kl_hmap_free(s->namespaces);
    kl_hmap_free(s->changed);
    zstd_free(s);
    ZSTD_freeCDict(s->cdict);
    ZSTD_freeDDict(s->ddict);
    ZSTD_freeDCtx(s->dctx);
    for (size_t i = 0; i < s->nblocks; i++) free(s->blocks[i]);
    free(s->blocks);
    free(s);
}

size_t kl_store_len(const kl_store *s) { return s->len; }

void kl_store_release(kl_obj *out) {
    kl_blob_unref(out->blob);
    memset(out, 0, sizeof *out);
}

int kl_store_get(const kl_store *s, const char *key, kl_obj *out) {
    ref r = table_get(s, key);
    memset(out, 0, sizeof *out);
    if (!r) return 0;
    read_into(s, at(s, r), out);
    return 1;
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
        take(s, at(s, r), old);
    }
    entry *e = at(s, r);
    keep(s, e, o);
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
    take(s, at(s, r), old);
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
        kl_obj id = identity(e);
        key_of(&id, key, sizeof key);
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
            discard(s, e);
            keep(s, e, o);
            continue;
        }
        /* Unchanged: a cold entry stays cold, its identity compared. */
        if (e && strcmp(e->rv, o->rv) == 0) {
            e->seen = s->gen;
            kl_obj_clear(o);
            continue;
        }
        kl_obj old;
        entry *now = store_at(s, key, r, o, &old);
        kl_obj cur = borrowed(now);
        fn(ud, e ? KL_CHANGE_UPDATE : KL_CHANGE_ADD, e ? &old : NULL, &cur);
    }
    sweep(s, fn, ud);
}

int kl_store_next(const kl_store *s, size_t *cursor, kl_obj *out) {
    entry *e = table_next(s, cursor);
    memset(out, 0, sizeof *out);
    if (!e) return 0;
    read_into(s, e, out);
    return 1;
}

int kl_store_next_packed(const kl_store *s, size_t *cursor, kl_obj *out, int *packed) {
    entry *e = table_next(s, cursor);
    memset(out, 0, sizeof *out);
    *packed = 0;
    if (!e) return 0;
    if (!e->cold) {
        read_into(s, e, out);
        return 1;
    }
    out->blob = kl_blob_new(zdata(e), e->b.z->len);
    out->len = e->len;
    out->ns = e->ns;
    out->name = e->name;
    out->rv = e->rv;
    *packed = 1;
    return 1;
}

void kl_store_unpack(const kl_store *s, kl_obj *o) {
    kl_blob *b = decompress(s, o->blob->data, o->blob->len, o->len);
    kl_blob_unref(o->blob);
    o->blob = b;
    o->off = 0;
}

/* The cursor holds the next entry's number. */
int kl_store_next_in(const kl_store *s, const char *ns, size_t *cursor, kl_obj *out) {
    memset(out, 0, sizeof *out);
    if (*cursor == CURSOR_END) return 0;
    ref r = *cursor ? (ref)*cursor : ns_head(s, ns);
    if (!r) {
        *cursor = CURSOR_END;
        return 0;
    }
    entry *e = at(s, r);
    *cursor = e->ns_next ? e->ns_next : CURSOR_END;
    read_into(s, e, out);
    return 1;
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

/* ---- compaction ---- */

/* Makes the dictionary from the whole JSON of objects sampled evenly over
 * the entries, up to DICT_BYTES or a sixteenth of the store's JSON. A raw-
 * content dictionary rather than one ZDICT trains: training on 50 of the
 * bench's Pods takes 17-90 ms, one block of the loop, for 0.118x rather
 * than 0.128x (docs/architecture.md). JSON never starts as zstd's
 * dictionary magic does, so zstd takes these bytes as raw content.
 *
 * Each sample is the first stored object from its point on, up to the
 * next point: a point on a free entry samples its neighbour rather than
 * nothing, or a store of objects larger than the dictionary, sampled at
 * entry 1 alone, would make none once that entry was deleted, and so
 * never compress. The entries between points are looked at only past
 * free ones, each at most once. */
static int make_dict(kl_store *s) {
    size_t want = s->json_bytes / 16 < DICT_BYTES ? s->json_bytes / 16 : DICT_BYTES;
    size_t avg = s->json_bytes / s->len, step = s->used / (want / (avg ? avg : 1) + 1), len = 0;
    if (!step) step = 1;
    char *dict = kl_xmalloc(want ? want : 1);
    for (size_t point = 1; point <= s->used && len < want; point += step) {
        size_t r = point;
        while (r < point + step && r <= s->used && (!at(s, (ref)r)->name || at(s, (ref)r)->cold)) r++;
        if (r == point + step || r > s->used) continue;
        const entry *e = at(s, (ref)r);
        size_t n = e->len < want - len ? e->len : want - len;
        memcpy(dict + len, e->b.blob->data + e->off, n);
        len += n;
    }
    if (len) {
        /* Each keeps its copy (by reference is zstd's experimental API). */
        s->cdict = ZSTD_createCDict(dict, len, LEVEL);
        s->ddict = ZSTD_createDDict(dict, len);
        s->dctx = ZSTD_createDCtx();
        if (!s->cdict || !s->ddict || !s->dctx) kl_oom(len);
        s->z.dict_bytes = len;
    }
    free(dict);
    return len > 0;
}

/* Compresses hot entry e, unless that saves less than an eighth of its
 * JSON (a tiny object, mostly the frame's header), which each read would
 * pay for with a decompression: then it stays JSON until written again.
 * Returns the JSON bytes it went through. */
static size_t compress_entry(kl_store *s, entry *e, size_t block_bytes) {
    if (!e->ns) { /* no identity to move in with the frame (the decoder always gives one) */
        e->kept = 1;
        return 0;
    }
    const char *json = e->b.blob->data + e->off;
    size_t bound = ZSTD_compressBound(e->len);
    if (!s->cctx && !(s->cctx = ZSTD_createCCtx())) kl_oom(bound);
    if (bound > s->zbuf_cap) {
        free(s->zbuf);
        s->zbuf = kl_xmalloc(bound);
        s->zbuf_cap = bound;
    }
    size_t n = ZSTD_compress_usingCDict(s->cctx, s->zbuf, bound, json, e->len, s->cdict);
    if (ZSTD_isError(n) || sizeof(frame) + n > e->len - e->len / 8 || n > UINT32_MAX) {
        e->kept = 1;
        return e->len;
    }
    size_t idlen = (size_t)(e->rv + strlen(e->rv) + 1 - e->ns);
    size_t size = (sizeof(frame) + idlen + n + _Alignof(frame) - 1) & ~(_Alignof(frame) - 1);
    frame *z = frame_alloc(s, size, block_bytes);
    z->len = (uint32_t)n;
    memcpy(z->data, e->ns, idlen);
    memcpy(z->data + idlen, s->zbuf, n);
    kl_blob_unref(e->b.blob);
    e->name = z->data + (e->name - e->ns);
    e->rv = z->data + (e->rv - e->ns);
    free(e->ns);
    e->ns = z->data;
    e->b.z = z;
    e->off = 0;
    e->cold = 1;
    s->z.objects++;
    s->z.bytes += n;
    s->z.json_bytes += e->len;
    return e->len;
}

/* Whether e's frame lies in a block more than half dead, not the one
 * frames are laid in. */
static int sparse(const kl_store *s, const entry *e) {
    const block *b = s->blocks[e->b.z->block];
    return e->b.z->block + 1 != s->current && b->live_bytes * 2 < b->cap;
}

/* Moves e's frame into the current block; returns its size. */
static size_t move_frame(kl_store *s, entry *e, size_t block_bytes) {
    size_t size = frame_size(e);
    frame *old = e->b.z, *z = frame_alloc(s, size, block_bytes);
    uint32_t in = z->block;
    memcpy(z, old, size);
    z->block = in;
    e->name = z->data + (e->name - e->ns);
    e->rv = z->data + (e->rv - e->ns);
    e->ns = z->data;
    e->b.z = z;
    frame_free(s, old, size);
    return size;
}

static void note_due(kl_store *s, double due) {
    if (s->has_min_due && s->min_due <= due) return;
    s->min_due = due;
    s->has_min_due = 1;
}

/* Ends the pass: what it left hot and what was written since it began say
 * when the next is due. */
static int end_pass(kl_store *s, const kl_store_compaction *c, double *next_due) {
    zstd_free(s);
    s->cursor = 0;
    if (s->has_first_write) note_due(s, s->first_write + c->after);
    *next_due = s->has_min_due ? s->min_due : 0;
    return 0;
}

int kl_store_compact(kl_store *s, const kl_store_compaction *c, double *next_due) {
    double now = clock_now(s);
    /* Ages are taken modulo 2^32 ms: a longer wait than half of it could
     * not be told from a short one. */
    double after = c->after * 1000 < (double)(UINT32_MAX / 2) ? c->after * 1000 : (double)(UINT32_MAX / 2);
    uint32_t now_ms = stamp(s, now), after_ms = (uint32_t)after;
    if (!s->cursor) {
        s->cursor = 1;
        s->has_min_due = s->has_first_write = 0;
    }
    if (!s->cdict && (s->json_bytes < c->min_bytes || !s->len || !make_dict(s))) return end_pass(s, c, next_due);
    size_t bytes = 0, looked = 0;
    for (; s->cursor <= s->used; s->cursor++) {
        if (bytes >= c->slice_bytes || looked >= c->slice_entries) return 1;
        entry *e = at(s, s->cursor);
        looked++;
        if (!e->name || e->kept) continue;
        if (e->cold) {
            if (sparse(s, e)) bytes += move_frame(s, e, c->block_bytes);
            continue;
        }
        uint32_t age = now_ms - e->written;
        if (age >= after_ms) bytes += compress_entry(s, e, c->block_bytes);
        else note_due(s, now + (double)(after_ms - age) / 1000);
    }
    return end_pass(s, c, next_due);
}

void kl_store_compression(const kl_store *s, kl_store_compression_stats *out) { *out = s->z; }
