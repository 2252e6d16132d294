/* framer.c - newline-delimited framing with a size limit; see framer.h. */
#include "framer.h"

#include <stdlib.h>
#include <string.h>

void kl_framer_init(kl_framer *f, size_t max, kl_framer_callbacks cb, void *ud) {
    memset(f, 0, sizeof *f);
    f->max = max;
    f->cb = cb;
    f->ud = ud;
}

void kl_framer_reset(kl_framer *f) {
    free(f->partial);
    f->partial = NULL;
    f->cap = 0;
    f->skipping = 0;
}

size_t kl_framer_pending(const kl_framer *f) { return f->partial ? f->partial->len : 0; }

static int is_blank(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return 0;
    return 1;
}

static void emit(kl_framer *f, kl_blob *b) {
    if (b->len && b->data[b->len - 1] == '\r') b->len--;
    memset(b->data + b->len, 0, KL_BLOB_PADDING);
    f->cb.frame(f->ud, b);
}

static void start_skipping(kl_framer *f) {
    kl_framer_reset(f);
    f->skipping = 1;
    if (f->cb.oversize) f->cb.oversize(f->ud, f->max);
}

/* Appends n bytes to the unfinished frame, growing it geometrically. */
static int append(kl_framer *f, const char *p, size_t n) {
    size_t have = f->partial ? f->partial->len : 0;
    if (have + n > f->cap) {
        size_t cap = f->cap ? f->cap : 4096;
        while (cap < have + n) cap *= 2;
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

/* Finishes the unfinished frame with its last n bytes. */
static int finish_partial(kl_framer *f, const char *p, size_t n) {
    if (append(f, p, n) < 0) return -1;
    kl_blob *b = f->partial;
    f->partial = NULL;
    f->cap = 0;
    if (is_blank(b->data, b->len)) {
        free(b);
        return 0;
    }
    kl_blob *shrunk = realloc(b, sizeof(kl_blob) + b->len + KL_BLOB_PADDING);
    emit(f, shrunk ? shrunk : b);
    return 0;
}

int kl_framer_feed(kl_framer *f, const char *data, size_t len) {
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        size_t n = nl ? (size_t)(nl - data) : len;
        size_t have = kl_framer_pending(f);
        if (f->skipping) {
            if (nl) f->skipping = 0;
        } else if (have + n > f->max) {
            start_skipping(f);
            if (nl) f->skipping = 0;
        } else if (!nl) {
            if (append(f, data, n) < 0) return -1;
        } else if (have) {
            if (finish_partial(f, data, n) < 0) return -1;
        } else if (!is_blank(data, n)) {
            kl_blob *b = kl_blob_new(data, n);
            if (!b) return -1;
            emit(f, b);
        }
        if (!nl) break;
        data += n + 1;
        len -= n + 1;
    }
    return 0;
}
