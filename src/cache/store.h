/*
 * store.h - one informer's cache: key ("ns/name" or "name") -> object.
 *
 * Objects stay as their JSON bytes (see obj.h). replace() installs the
 * result of a LIST and reports exactly what changed against the previous
 * contents: new keys as adds, keys whose resourceVersion moved as updates,
 * and keys that vanished as deletes, so that a relist after a gap still
 * tells every handler about every change it missed. An index by
 * namespace is kept with every change, so listing one namespace visits
 * only its objects.
 *
 * Objects left unwritten for a while may be compressed (kl_store_compact,
 * driven by the informer on the loop's idle time), against a dictionary
 * the store makes from its own objects: docs/architecture.md, "What a
 * cached object costs". Readers never see that form: what they read is
 * JSON bytes of their own, decompressed when need be.
 */
#ifndef KLUA_STORE_H
#define KLUA_STORE_H

#include "wire/decode.h"
#include "wire/obj.h"

typedef struct kl_store kl_store;

typedef enum { KL_CHANGE_ADD, KL_CHANGE_UPDATE, KL_CHANGE_DELETE } kl_change;

/* One change found by replace(). old is handed over: the callee owns it
 * (NULL on add). new_obj is the stored object, borrowed for the call (NULL
 * on delete). */
typedef void (*kl_store_change_fn)(void *ud, kl_change change, kl_obj *old, kl_obj *new_obj);

kl_store *kl_store_new(void);
void kl_store_free(kl_store *s);
size_t kl_store_len(const kl_store *s);

/* Readers get a stored object as a kl_obj of their own bytes: out->blob
 * is a reference they own (the stored blob, or a fresh one decompressed
 * from the stored form, padded as any), out->ns, name and rv are the
 * store's, valid until it next changes or compacts (kl_store_compact
 * moves an identity into a frame, and frames between blocks): copy them
 * to keep them longer. kl_store_release drops it; never kl_obj_clear,
 * which would free the store's identity. */
void kl_store_release(kl_obj *out);

/* The object under key into *out: 1, or 0 when absent (*out zeroed). */
int kl_store_get(const kl_store *s, const char *key, kl_obj *out);

/* Stores *o under its key, taking over what it owns (*o is zeroed). When the
 * key held an object, that object moves into *old and 1 is returned; 0 when
 * the key is new. */
int kl_store_put(kl_store *s, kl_obj *o, kl_obj *old);

/* Removes key; its object moves into *old. 1 when present, 0 when not. */
int kl_store_delete(kl_store *s, const char *key, kl_obj *old);

/* Makes list the store's whole contents, reporting each change to fn.
 * Takes over the list's items (they are zeroed). */
void kl_store_replace(kl_store *s, kl_list *list, kl_store_change_fn fn, void *ud);

/* Iterates: *cursor = 0 first; each object read into *out as by
 * kl_store_get; 0 at the end. The store must not change during an
 * iteration. */
int kl_store_next(const kl_store *s, size_t *cursor, kl_obj *out);

/* The same, over the objects of namespace ns only ("" for cluster-scoped
 * ones), from an index kept on every change: no other object is visited. */
int kl_store_next_in(const kl_store *s, const char *ns, size_t *cursor, kl_obj *out);

/* kl_store_next for a queue that holds every object at once (a resync's,
 * a late handler's replay): a compressed object comes as a copy of its
 * zstd frame, a sixth of its JSON or less, and *packed is set; out->len
 * is its JSON's length. kl_store_unpack makes it JSON when its turn
 * comes, against the store's dictionary, which lasts as long as the store:
 * decompressed all at once, the queue would hold the whole cache's JSON
 * again, as though nothing were compressed. */
int kl_store_next_packed(const kl_store *s, size_t *cursor, kl_obj *out, int *packed);
void kl_store_unpack(const kl_store *s, kl_obj *o);

/* From now on, remembers every key put or deleted, for indexes kept
 * outside the store (the Lua informers' by_index). */
void kl_store_track_changes(kl_store *s);
/* Calls fn with each key changed since tracking began or since the last
 * call (each once, in no order), and forgets them. The store may be read,
 * but not changed, from fn. Nothing happens when changes are not tracked. */
void kl_store_take_changes(kl_store *s, void (*fn)(void *ud, const char *key), void *ud);

/* ---- compression of the objects left unwritten ---- */

/* The store's clock, seconds (kl_now unless set): each put and replace
 * stamps the entries it writes with it, and a compaction compares. */
void kl_store_set_clock(kl_store *s, double (*now)(void *ud), void *ud);

/* What a compaction does (KL_STORE_COMPACTION has the defaults). */
typedef struct kl_store_compaction {
    double after;         /* seconds an entry stays unwritten before it is compressed */
    size_t slice_bytes;   /* JSON one slice compresses or frames it moves, at most (past it, no next object) */
    size_t slice_entries; /* entries one slice looks at, at most */
    size_t min_bytes;     /* JSON the store must hold before its dictionary is made */
    size_t block_bytes;   /* of each block compressed objects are laid in */
} kl_store_compaction;

/* 5 s: an object written is often written again within seconds (a Pod's
 * status, as its containers start; a Deployment's rollout), and each such
 * write would otherwise cost a decompression of the old object. 256 KiB
 * of the bench's Pods take ~0.6 ms to compress at level 1 (more on a
 * loaded core, hence not more), and looking at 8,192 entries, ~0.1 ms.
 * Below 1 MiB of JSON the dictionary and the compression contexts
 * (~250 KiB) would cost more than they save. Blocks of 256 KiB lie past
 * the heap's mmap threshold: a block freed leaves the process at once.
 * docs/architecture.md. */
#define KL_STORE_COMPACTION ((kl_store_compaction){5.0, 256 * 1024, 8192, 1024 * 1024, 256 * 1024})

/* Does one slice of the compaction: from where the last slice stopped,
 * compresses the entries unwritten for c->after, making the dictionary
 * first when there is none, and moves compressed ones out of blocks
 * mostly dead. Returns 1 when the pass over the store goes on
 * (call again), 0 when it ended: then *next_due is when the earliest entry
 * left as JSON comes due, on the store's clock, or 0 when none is left
 * (a later write makes one). */
int kl_store_compact(kl_store *s, const kl_store_compaction *c, double *next_due);

typedef struct kl_store_compression_stats {
    size_t objects;    /* stored compressed */
    size_t bytes;      /* their compressed bytes */
    size_t json_bytes; /* their JSON's */
    size_t dict_bytes; /* the dictionary's, 0 until made */
    size_t block_bytes; /* of the blocks the compressed objects are laid in */
} kl_store_compression_stats;
void kl_store_compression(const kl_store *s, kl_store_compression_stats *out);

#endif
