/*
 * framer.h - splits a watch body into its JSON values.
 *
 * A watch body arrives in reads of any size: a frame may span many reads and
 * one read may hold many frames. kube-apiserver writes one event per line,
 * but client-go does not rely on that: apimachinery's JSON frame reader is a
 * json.Decoder that frames by the values themselves, so events written back
 * to back with no newline, or pretty-printed over many lines, decode the
 * same. The framer does the same: a frame is one top-level object or array,
 * from its opening bracket to the bracket that closes it, found by tracking
 * strings, escapes and nesting depth across reads; whitespace between values
 * is skipped. Each whole frame is handed on as a blob, copied exactly once
 * out of the reads.
 *
 * A byte between values that cannot start an object or an array (a text
 * error page, a bare number or string) makes json.Decoder fail and the watch
 * end. Here the bytes from it to the end of its line are handed on as one
 * frame, which the decoder refuses as a malformed event, so the reflector
 * relists with backoff just as it does for any malformed event.
 *
 * A frame longer than the limit is refused: the framer reports it and
 * discards its bytes without buffering them, so a hostile server cannot grow
 * memory, scanning on to the end of the value (or of the junk line) it was
 * in; framing resumes after it.
 *
 * A CBOR watch (kl_framer_cbor) is a CBOR Sequence (RFC 8742): data items
 * back to back, with nothing between them. The framer finds where each
 * ends (cbor.h's scanner) and hands on its JSON text (kl_cbor_to_json),
 * so that what follows reads one format. Bytes that are not a data item
 * klua reads are reported (malformed) and the rest of the stream dropped:
 * with no newlines, nothing marks where a next item could start.
 */
#ifndef KLUA_FRAMER_H
#define KLUA_FRAMER_H

#include <stddef.h>

#include "base/blob.h"
#include "wire/cbor.h"
#include "wire/scan.h"

#define KL_FRAME_MAX_DEFAULT ((size_t)16 << 20)

typedef struct kl_framer_callbacks {
    /* A whole frame; the callee takes the reference. */
    void (*frame)(void *ud, kl_blob *frame);
    /* A frame passed max bytes; its remaining bytes are being skipped. */
    void (*oversize)(void *ud, size_t max);
    /* CBOR: bytes that are not a data item klua reads (why says what);
     * nothing more is framed until kl_framer_reset. */
    void (*malformed)(void *ud, const char *why);
} kl_framer_callbacks;

typedef struct kl_framer {
    size_t max;
    kl_framer_callbacks cb;
    void *ud;
    kl_blob *partial; /* bytes of an unfinished frame; len counts them */
    size_t cap;       /* bytes partial can hold before it must grow */
    int state;        /* between values, in a value, or in a junk line */
    int skipping;     /* inside an oversize frame, discarding to its end */
    kl_scan scan;     /* where the current value ends */
    int cbor;         /* frames are CBOR data items (kl_framer_cbor) */
    kl_cbor_scan cscan; /* ...and where the current one ends */
} kl_framer;

void kl_framer_init(kl_framer *f, size_t max, kl_framer_callbacks cb, void *ud);
/* Makes f scan with the named scanner instead of the fastest this CPU runs,
 * so that tests cover each: "avx512", "avx2" (x86-64 only) or "portable".
 * Returns 0, or -1 when this build or CPU has no such scanner. Call it
 * right after init. */
int kl_framer_use_scanner(kl_framer *f, const char *name);
/* Reads the stream as a CBOR Sequence (on) or JSON values (0, the
 * default) from the next byte on; call it between streams, after reset. */
void kl_framer_cbor(kl_framer *f, int on);
/* Frees the unfinished frame, if any, and starts over between values. */
void kl_framer_reset(kl_framer *f);
/* Consumes data; returns 0, or -1 when out of memory. */
int kl_framer_feed(kl_framer *f, const char *data, size_t len);
/* Bytes of an unfinished frame held (0 while skipping). */
size_t kl_framer_pending(const kl_framer *f);

#endif
