/*
 * fuzz_cbor.c - libFuzzer target for CBOR watch streams and bodies
 * (src/wire/cbor.c, and the framer's CBOR mode in src/wire/framer.c).
 *
 * Input layout:
 *   byte 0     the frame limit: max = 1 + byte * 16 (1..4081)
 *   byte 1     the chunking: reads of 1..(1 + byte % 64) bytes, their sizes
 *              drawn from a generator seeded by this byte
 *   bytes 2..  the stream (a CBOR Sequence), or one item
 *
 * What must hold:
 *   - kl_cbor_to_json on the bytes either refuses them or gives JSON that
 *     simdjson accepts, in a fresh padded blob;
 *   - the framer in CBOR mode gives the same events (frames, oversize and
 *     malformed reports) fed in one read as in those reads; each frame is
 *     JSON simdjson accepts; it holds no more than max bytes pending;
 *   - when kl_cbor_to_json accepts the bytes as one item and they fit in
 *     max, the framer gives exactly one frame, that same JSON.
 * Any difference aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "wire/cbor.h"
#include "wire/framer.h"
#include "wire/json.h"

typedef struct {
    char kind; /* 'f' frame, 'o' oversize, 'm' malformed */
    char *text;
    size_t len;
} event;

typedef struct {
    event *ev;
    size_t n, cap;
} events;

static void die(const char *what) {
    fprintf(stderr, "fuzz_cbor: %s\n", what);
    abort();
}

static void push(events *e, char kind, const char *text, size_t len) {
    e->ev = kl_buf_grow(e->ev, &e->cap, e->n + 1, sizeof *e->ev, 16);
    char *copy = malloc(len + 1);
    if (!copy) die("out of memory");
    memcpy(copy, text, len);
    copy[len] = 0;
    e->ev[e->n++] = (event){kind, copy, len};
}

static void free_events(events *e) {
    for (size_t i = 0; i < e->n; i++) free(e->ev[i].text);
    free(e->ev);
}

static void check_json(const kl_blob *b) {
    if (b->refs != 1) die("a JSON blob with other than one reference");
    for (size_t i = 0; i < KL_BLOB_PADDING; i++)
        if (b->data[b->len + i]) die("a JSON blob whose padding is not zeroed");
    kl_json_error err;
    kl_json_doc *doc = kl_json_parse(b->data, b->len, 1, &err);
    if (!doc) {
        fprintf(stderr, "fuzz_cbor: %.*s\n", (int)(b->len > 200 ? 200 : b->len), b->data);
        die("the JSON of an accepted item is not JSON");
    }
    kl_json_free(doc);
}

static void on_frame(void *ud, kl_blob *b) {
    check_json(b);
    push(ud, 'f', b->data, b->len);
    kl_blob_unref(b);
}

static void on_oversize(void *ud, size_t max) {
    char text[32];
    int n = snprintf(text, sizeof text, "%zu", max);
    push(ud, 'o', text, (size_t)n);
}

static void on_malformed(void *ud, const char *why) { push(ud, 'm', why, strlen(why)); }

/* Feeds the stream in one read (chunked 0) or in reads drawn from seed. */
static void feed(const uint8_t *data, size_t len, size_t max, int chunked, unsigned seed, events *out) {
    kl_framer f;
    kl_framer_init(&f, max, (kl_framer_callbacks){on_frame, on_oversize, on_malformed}, out);
    kl_framer_cbor(&f, 1);
    size_t i = 0;
    uint32_t state = seed;
    while (i < len) {
        size_t n;
        if (chunked) {
            state = state * 1103515245u + 12345u;
            n = 1 + (state >> 16) % (1 + seed % 64);
        } else {
            n = len - i;
        }
        if (n > len - i) n = len - i;
        if (kl_framer_feed(&f, (const char *)data + i, n) < 0) die("out of memory");
        if (kl_framer_pending(&f) > max) die("more than max bytes pending");
        i += n;
    }
    kl_framer_reset(&f);
}

static int same(const events *a, const events *b) {
    if (a->n != b->n) return 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->ev[i].kind != b->ev[i].kind || a->ev[i].len != b->ev[i].len ||
            memcmp(a->ev[i].text, b->ev[i].text, a->ev[i].len) != 0)
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t max = 1 + (size_t)data[0] * 16;
    unsigned seed = data[1];
    const uint8_t *s = data + 2;
    size_t n = size - 2;

    char err[200];
    kl_blob *whole = kl_cbor_to_json((const char *)s, n, err, sizeof err);
    if (whole) check_json(whole);

    events one = {0}, chunked = {0};
    feed(s, n, max, 0, seed, &one);
    feed(s, n, max, 1, seed, &chunked);
    if (!same(&one, &chunked)) die("the events differ with the reads");
    if (whole && n <= max &&
        (one.n != 1 || one.ev[0].kind != 'f' || one.ev[0].len != whole->len ||
         memcmp(one.ev[0].text, whole->data, whole->len) != 0))
        die("a whole item is not framed as its JSON");
    kl_blob_unref(whole);
    free_events(&one);
    free_events(&chunked);
    return 0;
}
