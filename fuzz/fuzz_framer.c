/*
 * fuzz_framer.c - libFuzzer target for the NDJSON framer (src/framer.c).
 *
 * Input layout:
 *   byte 0     the frame limit: max = 1 + byte (1..256), so that oversize
 *              frames and skipping are common
 *   byte 1     the chunking: the stream is fed in reads of 1..(1 + byte % 64)
 *              bytes, their sizes drawn from a generator seeded by this byte
 *   bytes 2..  the stream
 *
 * Whatever the chunking, the framer must emit exactly what a plain model
 * computes from the whole stream at once: every complete line longer than
 * max is one oversize report; every other line that is not blank (only
 * spaces, tabs and carriage returns) is a frame, without its newline and
 * one trailing carriage return. An unfinished last line is held (pending)
 * when it fits in max, else reported oversize and held as 0 bytes. Every
 * frame is a fresh blob with one reference and zeroed padding. Any
 * difference aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "framer.h"

/* One event: a frame's bytes, or an oversize report (oversize set). */
typedef struct {
    const uint8_t *data; /* model: points into the input; framer: a copy */
    size_t len;
    int oversize;
} event;

typedef struct {
    event *ev;
    size_t n, cap;
    size_t max;
} events;

static void die(const char *what) {
    fprintf(stderr, "fuzz_framer: %s\n", what);
    abort();
}

static void push(events *e, const uint8_t *data, size_t len, int oversize) {
    if (e->n == e->cap) {
        e->cap = e->cap ? e->cap * 2 : 16;
        e->ev = realloc(e->ev, e->cap * sizeof *e->ev);
        if (!e->ev) die("out of memory");
    }
    e->ev[e->n++] = (event){data, len, oversize};
}

static void on_frame(void *ud, kl_blob *b) {
    events *e = ud;
    if (b->refs != 1) die("a frame blob does not come with exactly one reference");
    if (b->len == 0 || b->len > e->max) die("a frame is empty or longer than max");
    if (memchr(b->data, '\n', b->len)) die("a frame contains a newline");
    for (size_t i = 0; i < KL_BLOB_PADDING; i++)
        if (b->data[b->len + i]) die("a frame's padding is not zeroed");
    uint8_t *copy = malloc(b->len);
    if (!copy) die("out of memory");
    memcpy(copy, b->data, b->len);
    push(e, copy, b->len, 0);
    kl_blob_unref(b);
}

static void on_oversize(void *ud, size_t max) {
    events *e = ud;
    if (max != e->max) die("an oversize report names the wrong limit");
    push(e, NULL, 0, 1);
}

static int blank(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return 0;
    return 1;
}

/* The events of the whole stream; returns the bytes left pending. */
static size_t model(const uint8_t *s, size_t len, size_t max, events *out) {
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '\n') continue;
        size_t n = i - start;
        if (n > max) push(out, NULL, 0, 1);
        else if (!blank(s + start, n)) push(out, s + start, n - (s[i - 1] == '\r'), 0);
        start = i + 1;
    }
    size_t rest = len - start;
    if (rest <= max) return rest;
    push(out, NULL, 0, 1);
    return 0;
}

/* A small generator for the read sizes: deterministic per input. */
static uint32_t next_rand(uint32_t *state) {
    *state = *state * 1103515245u + 12345u;
    return *state >> 16;
}

static void compare(const events *got, const events *want) {
    if (got->n != want->n) die("the framer emitted a different number of events than the model");
    for (size_t i = 0; i < got->n; i++) {
        const event *g = &got->ev[i], *w = &want->ev[i];
        if (g->oversize != w->oversize) die("an event differs from the model's (frame vs oversize)");
        if (g->len != w->len || (g->len && memcmp(g->data, w->data, g->len)))
            die("a frame differs from the model's");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t max = 1 + (size_t)data[0];
    uint32_t state = data[1], most = 1 + data[1] % 64u;
    const uint8_t *s = data + 2;
    size_t len = size - 2;

    events got = {.max = max}, want = {.max = max};
    kl_framer f;
    kl_framer_init(&f, max, (kl_framer_callbacks){on_frame, on_oversize}, &got);
    for (size_t off = 0; off < len;) {
        size_t n = 1 + next_rand(&state) % most;
        if (n > len - off) n = len - off;
        if (kl_framer_feed(&f, (const char *)s + off, n) < 0) die("kl_framer_feed failed");
        if (kl_framer_pending(&f) > max) die("pending() exceeds max");
        off += n;
    }
    size_t pending = model(s, len, max, &want);
    compare(&got, &want);
    if (kl_framer_pending(&f) != pending) die("pending() differs from the model's unfinished line");
    kl_framer_reset(&f);
    if (kl_framer_pending(&f) != 0) die("pending() is not 0 after reset");

    for (size_t i = 0; i < got.n; i++) free((void *)got.ev[i].data);
    free(got.ev);
    free(want.ev);
    return 0;
}
