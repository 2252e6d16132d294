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

/* The object under key, or NULL. Valid until the store next changes. */
const kl_obj *kl_store_get(const kl_store *s, const char *key);

/* Stores *o under its key, taking over what it owns (*o is zeroed). When the
 * key held an object, that object moves into *old and 1 is returned; 0 when
 * the key is new. */
int kl_store_put(kl_store *s, kl_obj *o, kl_obj *old);

/* Removes key; its object moves into *old. 1 when present, 0 when not. */
int kl_store_delete(kl_store *s, const char *key, kl_obj *old);

/* Makes list the store's whole contents, reporting each change to fn.
 * Takes over the list's items (they are zeroed). */
void kl_store_replace(kl_store *s, kl_list *list, kl_store_change_fn fn, void *ud);

/* Iterates: *cursor = 0 first; returns NULL at the end. The store must not
 * change during an iteration. */
const kl_obj *kl_store_next(const kl_store *s, size_t *cursor);

/* The same, over the objects of namespace ns only ("" for cluster-scoped
 * ones), from an index kept on every change: no other object is visited. */
const kl_obj *kl_store_next_in(const kl_store *s, const char *ns, size_t *cursor);

/* From now on, remembers every key put or deleted, for indexes kept
 * outside the store (the Lua informers' by_index). */
void kl_store_track_changes(kl_store *s);
/* Calls fn with each key changed since tracking began or since the last
 * call (each once, in no order), and forgets them. The store may be read,
 * but not changed, from fn. Nothing happens when changes are not tracked. */
void kl_store_take_changes(kl_store *s, void (*fn)(void *ud, const char *key), void *ud);

#endif
