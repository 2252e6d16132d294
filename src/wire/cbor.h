/*
 * cbor.h - CBOR data items (RFC 8949) as kube-apiserver serves them, and
 * their JSON text.
 *
 * KEP-4222 lets kube-apiserver answer in CBOR (application/cbor; a watch
 * as a CBOR Sequence, RFC 8742 application/cbor-seq, one event a data
 * item). CBOR is self-describing and self-delimiting like JSON, so klua
 * keeps its pipeline: the framer finds where each item ends (kl_cbor_scan)
 * and each item is transcoded to the JSON text the decoder, the store and
 * the views already read (kl_cbor_to_json). docs/architecture.md says why a
 * transcoder rather than a second tape.
 *
 * What the transcoder accepts is what apimachinery's CBOR encoder writes
 * (runtime/serializer/cbor/internal/modes/encode.go) and JSON can hold:
 *   - maps whose keys are strings, arrays, integers, floats (half, single
 *     and double; NaN and infinities refused, as the encoder refuses them),
 *     true, false, null;
 *   - byte strings as strings: the encoder writes every Go string as a
 *     byte string (String: StringToByteString), so a byte string is text,
 *     its invalid UTF-8 bytes each becoming U+FFFD as Go's encoding/json
 *     writes them; text strings must be valid UTF-8 (RFC 8949 3.1);
 *   - tag 55799 (self-described CBOR, the 0xd9d9f7 prefix of every item the
 *     encoder writes) anywhere, as a no-op; tags 21, 22 and 23 (expected
 *     conversion to base64url, base64 and base16, RFC 8949 3.4.5.2) on a
 *     byte string, as its encoded text: the encoder marks a Go []byte with
 *     tag 22, whose JSON is its base64.
 *   - indefinite-length strings, arrays and maps (RFC 8949 3.2.2), which the
 *     encoder never writes (IndefLength: IndefLengthForbidden) but its
 *     decoder reads (modes/decode.go: IndefLengthAllowed), so another
 *     encoder may send them.
 * Refused, naming what was met: other tags, simple values other than
 * true/false/null (undefined among them), integers below -2^63, map keys
 * that are not strings, a string chunk of another type. Duplicate map keys, which the
 * apiserver's decoder refuses, pass through: the JSON decoder keeps the
 * last, as for JSON.
 */
#ifndef KLUA_CBOR_H
#define KLUA_CBOR_H

#include <stddef.h>
#include <stdint.h>

#include "base/blob.h"

/* The prefix of self-described CBOR (tag 55799): never the start of JSON. */
#define KL_CBOR_MAGIC "\xd9\xd9\xf7"

/* Nesting deeper than this is refused, as simdjson refuses deeper JSON. */
#define KL_CBOR_MAX_DEPTH 1024
#define KL_CBOR_MAX_OPEN KL_CBOR_MAX_DEPTH

/* Where one data item ends, across reads. */
typedef struct kl_cbor_scan {
    uint64_t items;   /* data items still to read in the innermost open
                       * indefinite-length item (or in the whole), the
                       * current one included; 0 inside an open one means
                       * its next element or its break comes next */
    uint64_t skip;    /* payload bytes of a string still to pass */
    unsigned char hdr[9];
    unsigned hlen, hneed; /* header bytes read, and its full length */
    unsigned open;    /* indefinite-length items open */
    uint64_t outer[KL_CBOR_MAX_OPEN]; /* items of each enclosing level, saved
                                       * as an indefinite-length item opens */
    const char *bad;  /* why the bytes are not a data item klua reads */
} kl_cbor_scan;

/* Starts scanning a new data item. */
void kl_cbor_scan_start(kl_cbor_scan *s);
/* Consumes up to n bytes of the item; returns how many. *done: 1 when they
 * end it, 0 when it goes on, -1 when they cannot be one (s->bad says why;
 * the bytes up to the offending header are counted). */
size_t kl_cbor_scan_feed(kl_cbor_scan *s, const char *p, size_t n, int *done);

/* The JSON text of the one data item in p[0..n) as a new blob; NULL with
 * err ("CBOR tag 1 has no JSON form at byte 12", ...) when it is not one
 * klua reads (see above) or has bytes after it. */
kl_blob *kl_cbor_to_json(const char *p, size_t n, char *err, size_t errlen);

#endif
