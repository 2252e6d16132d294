/*
 * list_stream.h - decodes a LIST response as it arrives, one item at a time.
 *
 * A LIST at resourceVersion 0 is served in one piece, hundreds of MB for a
 * large cluster. Buffering it and parsing it whole would hold the body, its
 * parse and the item copies at once; instead the splitter follows the JSON
 * structure of the envelope byte by byte, finds where each element ends
 * with the framer's block scanner (scan.h), copies each element of the top-level "items"
 * array into its own blob (once when the element lies within one read, as
 * most do; twice when it spans reads) and decodes it alone, and keeps the rest of
 * the body (kind, metadata) as a small envelope decoded at the end. Memory
 * stays at the size of the cache being built. A CBOR body is read the same
 * way, item by item (kl_list_stream_cbor).
 */
#ifndef KLUA_LIST_STREAM_H
#define KLUA_LIST_STREAM_H

#include <stddef.h>

#include "wire/cbor.h"
#include "wire/decode.h"
#include "wire/prune.h"
#include "wire/scan.h"

#define KL_LIST_ENVELOPE_MAX ((size_t)1 << 20)

typedef struct kl_list_stream {
    kl_list *out;  /* items are appended here */
    size_t items_cap; /* room in out->items */
    size_t max_item;
    int depth, in_string, escape;
    int expect_key;     /* at depth 1, the next string is a member name */
    int key_is_items;   /* the member whose value comes next is "items"
                         * (or "rows", with rows set) */
    int items_seen;     /* an "items" member was met: a later one replaces it,
                         * as Go's decoder keeps the last of duplicate keys */
    int rows;           /* a Table's "rows" are read as items too (kl_list_stream_rows) */
    int in_rows;        /* the array being read is a Table's rows */
    int in_items;       /* inside the top-level items array */
    int reading_key;
    char key[64];       /* raw member name: enough for "items" however escaped */
    size_t keylen;
    int collecting;     /* inside an element */
    kl_scan scan;       /* where the element ends */
    char *scratch;      /* the part of an element that came in earlier reads */
    size_t scratch_len, scratch_cap;
    char *env;          /* the body without the items' elements */
    size_t envlen, envcap;
    unsigned char *untyped; /* per item: it has no kind and no apiVersion; the
                             * list's own may come after its items, so they
                             * are filled in at the end */
    size_t untyped_cap;
    int cbor;           /* the body is CBOR (kl_list_stream_cbor): read as below */
    struct {
        int state;      /* where in the body's map (list_stream.c) */
        int map_open;   /* the map has an indefinite length: a break ends it */
        uint64_t members; /* else its members still to read */
        int items_open; /* the same for the items array */
        uint64_t elems;
        unsigned char hdr[9]; /* a header of the map or the items array, */
        unsigned hlen, hneed; /* read apart to know what comes */
        int collecting; /* inside a data item (a name, a value, an item) */
        kl_cbor_scan scan; /* where it ends */
        int first;      /* no member written to env yet */
        char name[64];  /* the member being read (for an error), as JSON */
    } cb;
    kl_prune *prune;    /* kl_list_stream_prune's, not owned, or NULL */
    int failed;
    char err[256];
} kl_list_stream;

/* Starts decoding into out (zeroed here). max_item bounds one item's size. */
void kl_list_stream_init(kl_list_stream *s, kl_list *out, size_t max_item);
/* Reads the body as a Table too (a LIST that asked for the Table form):
 * the elements of its "rows" are Table rows decoded with kl_decode_row,
 * and a plain list's "items" (a server that cannot make a Table) are read
 * as ever; whichever of the two members comes first is read. Call after
 * kl_list_stream_init, before any byte. */
void kl_list_stream_rows(kl_list_stream *s);
/* Reads the body as CBOR (a response of Content-Type application/cbor, one
 * data item): its map is followed header by header, each element of its
 * items array is copied out as it completes (in place when it lies within
 * one read), transcoded to JSON (kl_cbor_to_json) and decoded alone, and
 * every other member is transcoded into the envelope as the JSON path
 * keeps it, so a CBOR LIST holds no more than a JSON one. Definite and
 * indefinite lengths, the self-described tag 55799 before the map or the
 * items, and members in any order are read. Call before any byte. */
void kl_list_stream_cbor(kl_list_stream *s);
/* Drops p's members from each item as it is copied out of the reads
 * (kl_prune_copy), before it is parsed, so that no unpruned item of a large
 * LIST is held until its end (and the allocator's pages touched twice), and
 * the dropped bytes are never parsed however the reads split the body; a
 * Table row's object once it is decoded (kl_prune_obj). p stays the
 * caller's. Call before any byte. */
void kl_list_stream_prune(kl_list_stream *s, kl_prune *p);
/* Consumes bytes; 0, or -1 with s->err set (the stream is then dead). */
int kl_list_stream_feed(kl_list_stream *s, const char *p, size_t n);
/* Ends the body: decodes the envelope into out's rv, continue, remaining
 * count, kind and apiVersion, and types the untyped items from the list
 * (kl_obj_set_type). 0, or -1 with s->err set. */
int kl_list_stream_finish(kl_list_stream *s);
/* Whether the body, once finished, was a metav1.Status (a server or proxy
 * that answered 200 with one, which has no items to split off): 0 with its
 * code, reason and message as kl_decode_status gives them, or -1. */
int kl_list_stream_status(const kl_list_stream *s, int *code, char **reason, char **message);
/* Frees the stream's buffers (not out). */
void kl_list_stream_free(kl_list_stream *s);

#endif
