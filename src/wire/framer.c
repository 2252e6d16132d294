/*
 * framer.c - framing a watch body by its JSON values or CBOR items; see
 * framer.h.
 *
 * The value scanner that finds where each frame ends is scan.c's, or
 * cbor.c's for CBOR.
 */
#include "wire/framer.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

enum { BETWEEN, IN_VALUE, IN_JUNK, BROKEN };

void kl_framer_init(kl_framer *f, size_t max, kl_framer_callbacks cb, void *ud) {
    memset(f, 0, sizeof *f);
    f->max = max;
    f->cb = cb;
    f->ud = ud;
    kl_scan_init(&f->scan);
}

int kl_framer_use_scanner(kl_framer *f, const char *name) { return kl_scan_use(&f->scan, name); }

void kl_framer_cbor(kl_framer *f, int on) { f->cbor = on; }

void kl_framer_reset(kl_framer *f) {
    free(f->partial);
    f->partial = NULL;
    f->cap = 0;
    f->state = BETWEEN;
    f->skipping = 0;
}

size_t kl_framer_pending(const kl_framer *f) { return f->partial ? f->partial->len : 0; }

/* ---- frames ----------------------------------------------------------- */

/* Nothing more is framed: the stream cannot be read on. */
static void broken(kl_framer *f, const char *why) {
    free(f->partial);
    f->partial = NULL;
    f->cap = 0;
    f->skipping = 0;
    f->state = BROKEN;
    if (f->cb.malformed) f->cb.malformed(f->ud, why);
}

/* A CBOR item goes on as its JSON text. */
static void emit_cbor(kl_framer *f, kl_blob *b) {
    char err[200];
    kl_blob *json = kl_cbor_to_json(b->data, b->len, err, sizeof err);
    kl_blob_unref(b);
    if (json) f->cb.frame(f->ud, json);
    else broken(f, err);
}

static void emit(kl_framer *f, kl_blob *b) {
    if (f->cbor) {
        emit_cbor(f, b);
        return;
    }
    if (b->data[b->len - 1] == '\r') b->len--; /* a junk line's CRLF */
    memset(b->data + b->len, 0, KL_BLOB_PADDING);
    f->cb.frame(f->ud, b);
}

/* Appends n bytes to the unfinished frame, growing it geometrically: by
 * kl_buf_cap, but not kl_buf_grow, as the block is a blob (its header, its
 * bytes and the parser's padding) capped at the frame limit. */
static int append(kl_framer *f, const char *p, size_t n) {
    size_t have = kl_framer_pending(f);
    if (have + n > f->cap) {
        size_t cap = kl_buf_cap(f->cap, have + n, 4096);
        if (cap > f->max) cap = f->max;
        kl_blob *b = realloc(f->partial, sizeof(kl_blob) + cap + KL_BLOB_PADDING);
        if (!b) return -1;
        if (!f->partial) {
            b->refs = 1;
            b->len = 0;
        }
        f->partial = b;
        f->cap = cap;
    }
    memcpy(f->partial->data + have, p, n);
    f->partial->len = have + n;
    return 0;
}

/* Takes the next n bytes of the current frame; done: they end it. */
static int take(kl_framer *f, const char *p, size_t n, int done) {
    if (!f->skipping && kl_framer_pending(f) + n > f->max) {
        free(f->partial);
        f->partial = NULL;
        f->cap = 0;
        f->skipping = 1;
        if (f->cb.oversize) f->cb.oversize(f->ud, f->max);
    }
    if (done) f->state = BETWEEN;
    if (f->skipping) {
        f->skipping = !done;
        return 0;
    }
    if (!done) return append(f, p, n);
    if (!f->partial) {
        kl_blob *b = kl_blob_new(p, n);
        if (!b) return -1;
        emit(f, b);
        return 0;
    }
    if (append(f, p, n) < 0) return -1;
    kl_blob *b = f->partial, *shrunk = realloc(b, sizeof(kl_blob) + b->len + KL_BLOB_PADDING);
    f->partial = NULL;
    f->cap = 0;
    emit(f, shrunk ? shrunk : b);
    return 0;
}

/* Skips whitespace between values; returns the bytes skipped, and moves to
 * the value or junk line that starts after them. */
static size_t between(kl_framer *f, const char *p, size_t n) {
    if (f->cbor) {
        f->state = IN_VALUE;
        kl_cbor_scan_start(&f->cscan);
        return 0;
    }
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\n' || p[i] == '\r' || p[i] == '\t')) i++;
    if (i == n) return n;
    if ((p[i] | 0x20) == '{') {
        f->state = IN_VALUE;
        kl_scan_start(&f->scan);
    } else {
        f->state = IN_JUNK;
    }
    return i;
}

int kl_framer_feed(kl_framer *f, const char *data, size_t len) {
    while (len > 0) {
        size_t used, n;
        int done;
        if (f->state == BROKEN) return 0;
        if (f->state == BETWEEN) {
            used = between(f, data, len);
        } else {
            if (f->state == IN_VALUE && f->cbor) {
                used = n = kl_cbor_scan_feed(&f->cscan, data, len, &done);
                if (done < 0) {
                    /* the bytes before the bad header count towards the
                     * limit, as they would have in smaller reads */
                    if (n && take(f, data, n, 0) < 0) return -1;
                    broken(f, f->cscan.bad);
                    return 0;
                }
            } else if (f->state == IN_VALUE) {
                used = n = kl_scan_value(&f->scan, data, len, &done);
            } else {
                const char *nl = memchr(data, '\n', len);
                n = nl ? (size_t)(nl - data) : len;
                used = nl ? n + 1 : n;
                done = nl != NULL;
            }
            if (take(f, data, n, done) < 0) return -1;
        }
        data += used;
        len -= used;
    }
    return 0;
}
