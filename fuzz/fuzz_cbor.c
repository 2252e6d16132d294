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
 *     max, the framer gives exactly one frame, that same JSON;
 *   - read as a CBOR LIST body (kl_list_stream_cbor, items of at most max
 *     bytes), the stream accepts or refuses the bytes alike in one read
 *     and in those reads, with the same items and list metadata;
 *   - when kl_cbor_to_json accepts the bytes and the JSON LIST reader
 *     accepts that JSON, the CBOR LIST reader (no item limit) accepts the
 *     bytes with the same items, bytes and list metadata.
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
#include "wire/list_stream.h"

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

/* The body through the streaming LIST reader, in one read (seed 0) or in
 * reads drawn from seed; CBOR or JSON. 0, or -1 with out cleared. */
static int stream_list(const char *data, size_t len, size_t max_item, int cbor, unsigned seed, kl_list *out) {
    kl_list_stream s;
    kl_list_stream_init(&s, out, max_item);
    if (cbor) kl_list_stream_cbor(&s);
    uint32_t state = seed;
    int rc = 0;
    for (size_t i = 0; i < len && rc == 0;) {
        size_t n = len - i;
        if (seed) {
            state = state * 1103515245u + 12345u;
            n = 1 + (state >> 16) % (1 + seed % 64);
            if (n > len - i) n = len - i;
        }
        rc = kl_list_stream_feed(&s, data + i, n);
        i += n;
    }
    if (rc == 0) rc = kl_list_stream_finish(&s);
    kl_list_stream_free(&s);
    if (rc < 0) kl_list_clear(out);
    return rc;
}

static int same_str(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

static void same_list(const kl_list *a, const kl_list *b, const char *what) {
    int same = a->n == b->n && same_str(a->rv, b->rv) && same_str(a->cont, b->cont) &&
               same_str(a->kind, b->kind) && same_str(a->api_version, b->api_version) &&
               a->remaining == b->remaining && a->has_items == b->has_items;
    for (size_t i = 0; same && i < a->n; i++) {
        const kl_obj *x = &a->items[i], *y = &b->items[i];
        same = same_str(x->ns, y->ns) && same_str(x->name, y->name) && same_str(x->rv, y->rv) && x->len == y->len &&
               memcmp(x->blob->data + x->off, y->blob->data + y->off, x->len) == 0;
    }
    if (!same) die(what);
}

static void check_list(const uint8_t *s, size_t n, size_t max, unsigned seed, const kl_blob *whole) {
    kl_list one, split;
    int rc1 = stream_list((const char *)s, n, max, 1, 0, &one);
    int rc2 = stream_list((const char *)s, n, max, 1, seed | 1, &split);
    if (rc1 != rc2) die("the CBOR LIST reader accepts the body in one read or in several, not both");
    if (rc1 == 0) same_list(&one, &split, "the CBOR LIST reader gives another list with the reads");
    kl_list_clear(&one);
    kl_list_clear(&split);
    kl_list json;
    if (!whole || stream_list(whole->data, whole->len, (size_t)16 << 20, 0, 0, &json) < 0) return;
    kl_list cbor;
    if (stream_list((const char *)s, n, (size_t)16 << 20, 1, seed | 1, &cbor) < 0)
        die("the CBOR LIST reader refuses a body whose JSON the JSON reader accepts");
    same_list(&json, &cbor, "the CBOR LIST reader gives another list than the JSON reader of its JSON");
    kl_list_clear(&json);
    kl_list_clear(&cbor);
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
    check_list(s, n, max, seed, whole);
    kl_blob_unref(whole);
    free_events(&one);
    free_events(&chunked);
    return 0;
}
