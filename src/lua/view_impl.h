/*
 * view_impl.h - what view.c and view_edit.c share: a view's types and the
 * steps both take on them. view.h is the interface; only those two files
 * include this one.
 */
#ifndef KLUA_VIEW_IMPL_H
#define KLUA_VIEW_IMPL_H

#include <lua.h>
#include <stddef.h>

#include "base/blob.h"
#include "lua/view.h"
#include "wire/json.h"

/*
 * One object's bytes and, once parsed, its tape, shared by all views of
 * the object. It lives in the root view's userdata (a root), which the
 * other views keep alive as their user value. The tape is a block of its
 * own from the Lua state's allocator (so that it counts towards
 * --memory-limit and klua.stats().lua_memory) but outside the collector's
 * sight: a dead root, which its __gc keeps for one more cycle, would
 * otherwise carry its tape into the heap size that sets the next cycle's
 * threshold, and with a pause over 200 dead views' tapes would raise each
 * threshold more than the last, the heap growing without bound. The
 * collector is paced by the tape as debt instead (see account_view).
 */
typedef struct vdoc {
    kl_blob *blob;    /* one reference, dropped by __gc; NULL once dropped */
    size_t off, len;  /* the root value's JSON is blob->data[off, off+len) */
    size_t root;      /* tape index of the root value; 0 until parsed */
    kl_json_tape t;   /* t.words: the tape's block, freed by __gc */
    size_t tape_size; /* the size of that block; 0 until parsed */
    size_t walked_array, walked_k, walked_at; /* the last walk of an array: its
                                               * element walked_k (1-based) of the
                                               * array at tape index walked_array
                                               * is at tape index walked_at */
    int edit;         /* EDIT_NONE, or a view that takes writes: see view_edit.c */
    int edited;       /* some write was recorded, in the root's user value 1 */
} vdoc;

enum { EDIT_NONE, EDIT_OPEN, EDIT_SEALED };

/* A view: one value inside a vdoc; user value 1 is its root, for all but
 * the root view itself. */
typedef struct view {
    vdoc *doc;
    size_t at;               /* tape index of the value; 0 for the root */
    size_t cursor, cursor_at; /* array element `cursor` (1-based) is at tape index cursor_at */
    size_t raw_off, raw_len; /* the value's bytes in the blob, once found (raw_len > 0) */
    int is_root;
} view;

/* ---- view.c ---- */

/* Pushes the userdata holding the vdoc of the view v at vi. [-0, +1] */
void kl_view_root_push(lua_State *L, int vi, const view *v);
/* The tape index of the view v, parsing its object on first use. [-0, +0, e] */
size_t kl_view_at(lua_State *L, view *v);
/* The tape index of element k (1-based) of the array at tape index at of
 * v's tape, or 0. A walk starts where the last one stopped when it can:
 * from own's cursor (the array is v's own), or from where the last walk of
 * that array in v's object stopped, so that walking an array in order is
 * linear, also through a new view of it for each element
 * (obj.items[i] for i = 1, n). */
size_t kl_view_element(view *v, size_t at, lua_Integer k, int own);
/* Pushes the value at tape index i (0: nil) of the view at vi: a view
 * (metatable at mt) for an object or array, the plain value otherwise.
 * [-0, +1] */
void kl_view_member_push(lua_State *L, int vi, int mt, const view *v, size_t i);
/* The bytes of the view's value within its blob. */
const char *kl_view_bytes(view *v, size_t *len);

/* ---- view_edit.c: the edits of a view that takes writes ---- */

/* Pushes view[key] (key at ki) as the edits of the view v (at vi), whose
 * value is at tape index at, say it is, and returns 1; returns 0, pushing
 * nothing, when they say nothing of it. [-0, +(0|1), e] */
int kl_view_edit_read(lua_State *L, int vi, const view *v, size_t at, int ki);
/* Records view[key] = value, the stack being view, key, value: v's object
 * takes writes (EDIT_OPEN). [-0, +0, e] */
void kl_view_edit_write(lua_State *L, view *v);
/* Whether the edits of v (at vi) changed the length of its array at tape
 * index at, the length then in *n. [-0, +0] */
int kl_view_edit_len(lua_State *L, int vi, const view *v, size_t at, lua_Integer *n);
/* Pushes pairs's iterator over the container at tape index at of v (at
 * vi; the view metatable at mt), when it has edits of its own, and returns
 * 1; else returns 0, pushing nothing. [-0, +(0|1), e] */
int kl_view_edit_pairs(lua_State *L, int vi, view *v, size_t at, int mt);
/* kl_view_edits_touch for v (at vi), an object at tape index at. [-0, +0, e] */
int kl_view_edit_touches(lua_State *L, int vi, const view *v, size_t at, const char *const members[][2],
                         size_t n);
/* Writes through w the JSON of v (at vi), whose object was written to:
 * its bytes, with the containers written to rewritten. [-0, +0, e] */
void kl_view_edit_json(lua_State *L, int vi, view *v, const kl_view_writer *w);

#endif
