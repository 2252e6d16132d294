/*
 * framer.h - splits a byte stream into newline-delimited frames.
 *
 * A watch body arrives in reads of any size: a frame may span many reads and
 * one read may hold many frames. Each whole frame is handed on as a blob,
 * copied exactly once out of the reads. A frame longer than the limit is
 * refused: the framer reports it and discards its bytes up to the next
 * newline without buffering them, so a hostile server cannot grow memory.
 */
#ifndef KLUA_FRAMER_H
#define KLUA_FRAMER_H

#include <stddef.h>

#include "blob.h"

#define KL_FRAME_MAX_DEFAULT ((size_t)16 << 20)

typedef struct kl_framer_callbacks {
    /* A whole frame without its newline; the callee takes the reference. */
    void (*frame)(void *ud, kl_blob *frame);
    /* A frame passed max bytes; its remaining bytes are being skipped. */
    void (*oversize)(void *ud, size_t max);
} kl_framer_callbacks;

typedef struct kl_framer {
    size_t max;
    kl_framer_callbacks cb;
    void *ud;
    kl_blob *partial; /* bytes of an unfinished frame; len counts them */
    size_t cap;       /* bytes partial can hold before it must grow */
    int skipping;     /* inside an oversize frame, discarding to newline */
} kl_framer;

void kl_framer_init(kl_framer *f, size_t max, kl_framer_callbacks cb, void *ud);
/* Frees the unfinished frame, if any. */
void kl_framer_reset(kl_framer *f);
/* Consumes data; returns 0, or -1 when out of memory. */
int kl_framer_feed(kl_framer *f, const char *data, size_t len);
/* Bytes of an unfinished frame held (0 while skipping). */
size_t kl_framer_pending(const kl_framer *f);

#endif
