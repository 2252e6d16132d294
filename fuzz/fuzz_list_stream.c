/*
 * fuzz_list_stream.c - libFuzzer target for the streaming LIST decoder
 * (src/wire/list_stream.c).
 *
 * The input is a LIST response body. It is decoded whole by kl_decode_list
 * and streamed through kl_list_stream_feed/finish twice: in one read, and
 * in reads of 1..64 bytes drawn from a generator seeded by the input's
 * length. Whenever kl_decode_list accepts the body, the stream must accept
 * it too, however it is split, and give the same items (identity and
 * bytes), resourceVersion, continue token and remaining count; a refusal
 * must say why. Read as a Table too (kl_list_stream_rows), the body gives
 * the same answer in one read as in small ones. Anything else aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/decode.h"
#include "wire/list_stream.h"

static void die(const char *what) {
    fprintf(stderr, "fuzz_list_stream: %s\n", what);
    abort();
}

static uint32_t next_rand(uint32_t *state) {
    *state = *state * 1103515245u + 12345u;
    return *state >> 16;
}

/* Feeds the body to the streaming decoder in reads of 1..most bytes (all
 * at once when most is 0), as a Table too with rows. 0 with out filled, or
 * -1 with out empty. */
static int stream_list(const uint8_t *data, size_t size, uint32_t most, int rows, kl_list *out) {
    kl_list_stream s;
    kl_list_stream_init(&s, out, (size_t)16 << 20);
    if (rows) kl_list_stream_rows(&s);
    uint32_t state = (uint32_t)size;
    int rc = 0;
    for (size_t off = 0; off < size && rc == 0;) {
        size_t n = most ? 1 + next_rand(&state) % most : size;
        if (n > size - off) n = size - off;
        rc = kl_list_stream_feed(&s, (const char *)data + off, n);
        off += n;
    }
    if (rc == 0) rc = kl_list_stream_finish(&s);
    if (rc < 0 && !s.err[0]) die("the streaming LIST decoder failed without a message");
    kl_list_stream_free(&s);
    if (rc < 0) kl_list_clear(out);
    return rc;
}

static int same_str(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

static void same_list(const kl_list *a, const kl_list *b) {
    if (a->n != b->n) die("the streaming LIST decoder gives a different number of items");
    if (!same_str(a->rv, b->rv) || !same_str(a->cont, b->cont) || a->remaining != b->remaining)
        die("the streaming LIST decoder gives different list metadata");
    for (size_t i = 0; i < a->n; i++) {
        const kl_obj *x = &a->items[i], *y = &b->items[i];
        if (!same_str(x->ns, y->ns) || !same_str(x->name, y->name) || !same_str(x->rv, y->rv) || x->len != y->len ||
            memcmp(x->blob->data + x->off, y->blob->data + y->off, x->len) != 0)
            die("the streaming LIST decoder gives a different item");
    }
}

static void decode_list_stream(const uint8_t *data, size_t size) {
    kl_list whole, streamed;
    char err[256];
    int rc = kl_decode_list((const char *)data, size, &whole, err, sizeof err);
    for (uint32_t most = 0; most <= 64; most += 64) {
        int src = stream_list(data, size, most, 0, &streamed);
        if (rc == 0 && src < 0) die("the streaming LIST decoder refuses a list kl_decode_list accepts");
        if (rc == 0) same_list(&whole, &streamed);
        kl_list_clear(&streamed);
    }
    kl_list_clear(&whole);
    kl_list one, split;
    int rc1 = stream_list(data, size, 0, 1, &one), rc2 = stream_list(data, size, 64, 1, &split);
    if (rc1 != rc2) die("the streaming Table decoder's answer depends on how the body is split");
    if (rc1 == 0) same_list(&one, &split);
    kl_list_clear(&one);
    kl_list_clear(&split);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    decode_list_stream(data, size);
    return 0;
}
