/*
 * decode.h - watch frames into events, LIST bodies into items.
 *
 * One parse per frame: the decoder reads the event's type and the object's
 * identity from the parsed tape, and finds the byte span of the object
 * inside the frame, so the store keeps the frame itself as the object's
 * storage. The parsed tape travels with the event (parsed) so that a view
 * handed to a handler does not parse the object again.
 */
#ifndef KLUA_DECODE_H
#define KLUA_DECODE_H

#include <stddef.h>

#include "wire/json.h"
#include "wire/obj.h"

typedef enum { KL_EV_ADDED, KL_EV_MODIFIED, KL_EV_DELETED, KL_EV_BOOKMARK, KL_EV_ERROR } kl_ev_type;

typedef struct kl_event {
    kl_ev_type type;
    /* ADDED/MODIFIED/DELETED: the object (blob = the frame; off/len = the
     * "object" value's span). BOOKMARK: the same, with ns/name "" when the
     * bookmark carries none. ERROR: empty (blob NULL). */
    kl_obj obj;
    int initial_events_end; /* BOOKMARK with annotation k8s.io/initial-events-end: "true" */
    int code;               /* ERROR: Status.code (0 if absent) */
    char *reason;           /* ERROR: Status.reason (may be NULL) */
    char *message;          /* ERROR: Status.message (may be NULL) */
    /* The parsed frame for kl_view_push: a compact kl_json_doc (about
     * twice the frame's size; the parser itself is already back in its
     * pool) with the object selected. Owned by the event, freed with
     * kl_json_free; NULL for ERROR. */
    void *parsed;
} kl_event;

/*
 * Decodes one watch frame. Takes its own reference on frame (the caller
 * keeps theirs). expect_kind: if non-NULL, an object whose "kind" is present
 * and differs is an error (ERROR events carry a Status and are not checked).
 * Returns 0, or -1 with a one-line message in err, such as
 *   watch event is not valid JSON at byte 123: expected ',' or '}' after an object member
 *   watch event has unknown type "FOO"
 *   watch event has no object
 *   watch event object is a Secret, expected Pod
 *   watch event object has no metadata.name
 * On error ev is left empty.
 */
int kl_decode_event(kl_blob *frame, const char *expect_kind, kl_event *ev, char *err, size_t errlen);
/* The same for a watch that asked for the Table form: an object that is a
 * meta.k8s.io Table must hold one row with its object (includeObject=Object),
 * which becomes the event's object (its span inside the frame, so the blob
 * holds the row's cells too: see kl_decode_row); any other object is
 * decoded as kl_decode_event does, since a server that cannot make a Table
 * answers with the object itself. */
int kl_decode_table_event(kl_blob *frame, const char *expect_kind, kl_event *ev, char *err, size_t errlen);
/* Releases what ev owns and zeroes it. */
void kl_event_clear(kl_event *ev);
/* "ADDED", "MODIFIED", ...: the type as the watch event's JSON spells it. */
const char *kl_ev_type_name(kl_ev_type type);

typedef struct kl_list {
    kl_obj *items; /* each item in its own new blob (copied out of the body),
                    * typed (see kl_obj_set_type) */
    size_t n;
    char *kind;              /* the list's kind, e.g. "PodList"; NULL when absent */
    char *api_version;       /* the list's apiVersion; NULL when absent */
    char *rv;                /* metadata.resourceVersion ("" when absent) */
    char *cont;              /* metadata.continue, NULL when absent */
    long long remaining;     /* metadata.remainingItemCount, -1 when absent */
    int has_items;           /* the body has an items member (null included),
                              * or the rows of a Table (kl_list_stream_rows) */
    int transformed;         /* every item went through its reader's transform
                              * as it came: a prune as it was decoded
                              * (kl_list_stream_prune), or a watch-list's
                              * sink (kl_reflector_sink's initial) */
} kl_list;

/* Decodes one object (a LIST item) held alone in item: o becomes an owner
 * of item with its identity; *untyped (if non-NULL) says whether the
 * object has neither a kind nor an apiVersion. Returns 0, or -1 with err
 * and o left empty. */
int kl_decode_item(kl_blob *item, kl_obj *o, int *untyped, char *err, size_t errlen);

/* Decodes one Table row ({"cells": [...], "object": {...}}) held alone in
 * row: o becomes an owner of row, its span the row's object (the cache
 * holds the object; the row around it stays in the blob for the printer).
 * Returns 0, or -1 with err and o left empty. */
int kl_decode_row(kl_blob *row, kl_obj *o, char *err, size_t errlen);

/* The tape index of the cells of the Table row whose object lies at byte
 * off of b, parsed whole as t: b is the row itself (a Table LIST's row,
 * kl_decode_row) or a Table watch event of one row (kl_decode_table_event);
 * 0 when it is neither. */
size_t kl_decode_row_cells(const kl_blob *b, const kl_json_tape *t, size_t off);

/* kube-apiserver writes the items of built-in lists without kind and
 * apiVersion (watch events carry them). As apimachinery's UnstructuredList
 * does, an item with neither takes the list's kind without its "List"
 * suffix and the list's apiVersion: o's blob is replaced by a copy whose
 * JSON starts with those two members. Nothing is done when the list has no
 * kind or no apiVersion. */
void kl_obj_set_type(kl_obj *o, const char *list_kind, const char *api_version);

/* Decodes a LIST response body (e.g. a PodList). Every item needs a
 * metadata.name; untyped items are typed from the list. Returns 0, or -1
 * with err and out left empty. */
int kl_decode_list(const char *body, size_t len, kl_list *out, char *err, size_t errlen);
/* Releases what l owns and zeroes it. */
void kl_list_clear(kl_list *l);

/* Whether a decoded LIST body is the list asked for, since the reflector
 * replaces its cache with it: a body of another kind (kind: the objects'
 * kind, e.g. "Pod", for a "PodList"; NULL: any; with table a meta.k8s.io
 * "Table" too), without items, or without metadata.resourceVersion (a
 * proxy's {}, say) would otherwise read as an empty list and delete every
 * cached object. A body without a kind passes, as client-go's typed decoder
 * takes the kind it decodes into. Returns 0, or -1 with err saying what is
 * wrong. A Status is not a list either: the caller reads it first
 * (kl_decode_status). */
int kl_list_check(const kl_list *l, const char *kind, int table, char *err, size_t errlen);

/* Decodes a metav1.Status body (for non-2xx responses): fills code (0 when
 * absent), reason and message (malloc'd, NULL when absent). A body that
 * starts with self-described CBOR's prefix is read as CBOR. Returns 0, or -1
 * when the body is not a Status, in which case the caller uses the HTTP
 * status and the outputs are untouched. */
int kl_decode_status(const char *body, size_t len, int *code, char **reason, char **message);

#endif
