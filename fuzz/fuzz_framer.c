/*
 * fuzz_framer.c - libFuzzer target for the watch framer (src/wire/framer.c).
 *
 * Input layout:
 *   byte 0     the frame limit: max = 1 + byte (1..256), so that oversize
 *              frames and skipping are common
 *   byte 1     the chunking: the stream is fed in reads of 1..(1 + byte % 64)
 *              bytes, their sizes drawn from a generator seeded by this byte
 *   bytes 2..  the stream
 *
 * Fed in one read and fed in those reads, with the scanner this CPU runs
 * best and with each other scanner it can run, the framer must emit exactly what
 * a plain byte-at-a-time model computes from the whole stream (the rules
 * are in the comment atop src/wire/framer.c): between values whitespace is
 * skipped; '{' or '[' starts a value, which ends at the bracket that brings
 * its depth back to zero, brackets inside strings and escaped bytes not
 * counting; any other byte starts a junk line, which ends before the next
 * newline and loses one trailing carriage return. A frame longer than max
 * is one oversize report instead. An unfinished last frame is held (pending)
 * when it fits in max, else reported oversize and held as 0 bytes. Every
 * frame is a fresh blob with one reference and zeroed padding.
 *
 * Independently of the model, every frame simdjson accepts as an object or
 * array must come back unchanged when those frames are framed again, written
 * back to back or with whitespace between them drawn from the input. Any
 * difference aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "wire/framer.h"
#include "wire/json.h"

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
    e->ev = kl_buf_grow(e->ev, &e->cap, e->n + 1, sizeof *e->ev, 16);
    e->ev[e->n++] = (event){data, len, oversize};
}

static void on_frame(void *ud, kl_blob *b) {
    events *e = ud;
    if (b->refs != 1) die("a frame blob does not come with exactly one reference");
    if (b->len == 0 || b->len > e->max) die("a frame is empty or longer than max");
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

static void free_events(events *e) {
    for (size_t i = 0; i < e->n; i++) free((void *)e->ev[i].data);
    free(e->ev);
}

static int is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* A frame of s[start, end), or an oversize report. */
static void model_frame(const uint8_t *s, size_t start, size_t end, size_t max, events *out) {
    if (end - start > max) push(out, NULL, 0, 1);
    else push(out, s + start, end - start, 0);
}

/* The events of the whole stream, one byte at a time; returns the bytes
 * left pending. */
static size_t model(const uint8_t *s, size_t len, size_t max, events *out) {
    enum { BETWEEN, VALUE, JUNK } state = BETWEEN;
    size_t start = 0, depth = 0;
    int in_string = 0, escaped = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = s[i];
        if (state == BETWEEN) {
            if (is_space(c)) continue;
            start = i;
            state = c == '{' || c == '[' ? VALUE : JUNK;
            depth = 0;
            in_string = escaped = 0;
        }
        if (state == JUNK) {
            if (c != '\n') continue;
            if (i - start > max) push(out, NULL, 0, 1);
            else model_frame(s, start, i - (s[i - 1] == '\r'), max, out);
            state = BETWEEN;
        } else if (escaped) {
            escaped = 0;
        } else if (c == '\\') {
            escaped = 1;
        } else if (c == '"') {
            in_string = !in_string;
        } else if (!in_string && (c == '{' || c == '[')) {
            depth++;
        } else if (!in_string && (c == '}' || c == ']') && --depth == 0) {
            model_frame(s, start, i + 1, max, out);
            state = BETWEEN;
        }
    }
    if (state == BETWEEN) return 0;
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

static void compare(const events *got, const events *want, const char *how) {
    if (got->n != want->n) {
        fprintf(stderr, "fuzz_framer: fed %s: %zu events, the model %zu\n", how, got->n, want->n);
        die("the framer emitted a different number of events than the model");
    }
    for (size_t i = 0; i < got->n; i++) {
        const event *g = &got->ev[i], *w = &want->ev[i];
        if (g->oversize != w->oversize) die("an event differs from the model's (frame vs oversize)");
        if (g->len != w->len || (g->len && memcmp(g->data, w->data, g->len)))
            die("a frame differs from the model's");
    }
}

/* Every scanner is checked wherever the CPU runs it. */
static const char *const scanners[] = {"avx512", "avx2", "portable"};

static int runs(const char *scanner) {
    kl_framer f;
    kl_framer_init(&f, 1, (kl_framer_callbacks){on_frame, on_oversize, NULL}, NULL);
    return kl_framer_use_scanner(&f, scanner) == 0;
}

/* Feeds s in reads of 1..most bytes (most 0: in one read), with the named
 * scanner or (NULL) the fastest this CPU runs; returns pending(). */
static size_t feed(const uint8_t *s, size_t len, size_t max, uint32_t seed, uint32_t most, const char *scanner,
                   events *got) {
    kl_framer f;
    kl_framer_init(&f, max, (kl_framer_callbacks){on_frame, on_oversize, NULL}, got);
    if (scanner && kl_framer_use_scanner(&f, scanner) < 0) die("kl_framer_use_scanner failed");
    for (size_t off = 0; off < len;) {
        size_t n = most ? 1 + next_rand(&seed) % most : len;
        if (n > len - off) n = len - off;
        if (kl_framer_feed(&f, (const char *)s + off, n) < 0) die("kl_framer_feed failed");
        if (kl_framer_pending(&f) > max) die("pending() exceeds max");
        off += n;
    }
    size_t pending = kl_framer_pending(&f);
    kl_framer_reset(&f);
    if (kl_framer_pending(&f) != 0) die("pending() is not 0 after reset");
    return pending;
}

static int valid_container(const event *e) {
    if (e->oversize || (e->data[0] != '{' && e->data[0] != '[')) return 0;
    kl_json_error err;
    kl_json_doc *d = kl_json_parse((const char *)e->data, e->len, 0, &err);
    kl_json_free(d);
    return d != NULL;
}

/* Frames again the valid objects and arrays among got, with separators
 * drawn from sep, and checks that exactly they come out. */
static void reframe_valid(const events *got, const uint8_t *sep, size_t nsep, uint32_t seed) {
    static const char *const spaces[] = {"", "\n", "\r\n", " ", "\t\n  ", "\n\n"};
    events valid = {0}, again = {.max = 1 << 20};
    size_t len = 0, at = 0;
    for (size_t i = 0; i < got->n; i++)
        if (valid_container(&got->ev[i])) {
            push(&valid, got->ev[i].data, got->ev[i].len, 0);
            len += got->ev[i].len + 5;
        }
    if (!valid.n) return;
    uint8_t *s = malloc(len);
    if (!s) die("out of memory");
    for (size_t i = 0; i < valid.n; i++) {
        const char *gap = spaces[(nsep ? sep[i % nsep] : 0) % 6];
        memcpy(s + at, gap, strlen(gap));
        at += strlen(gap);
        memcpy(s + at, valid.ev[i].data, valid.ev[i].len);
        at += valid.ev[i].len;
    }
    if (feed(s, at, again.max, seed, 1 + seed % 16, NULL, &again) != 0) die("a valid value was left pending");
    compare(&again, &valid, "valid values again");
    free(s);
    free(valid.ev);
    free_events(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t max = 1 + (size_t)data[0];
    const uint8_t *s = data + 2;
    size_t len = size - 2;

    events want = {.max = max}, whole = {.max = max}, split = {.max = max};
    size_t pending = model(s, len, max, &want);
    if (feed(s, len, max, 0, 0, NULL, &whole) != pending) die("pending() differs from the model's (one read)");
    compare(&whole, &want, "in one read");
    uint32_t most = 1 + data[1] % 64u;
    if (feed(s, len, max, data[1], most, NULL, &split) != pending)
        die("pending() differs from the model's (many reads)");
    compare(&split, &want, "in many reads");
    for (size_t i = 0; i < sizeof scanners / sizeof scanners[0]; i++) {
        events other = {.max = max};
        if (!runs(scanners[i])) continue;
        if (feed(s, len, max, data[1], most, scanners[i], &other) != pending)
            die("pending() differs from the model's (a named scanner)");
        compare(&other, &want, scanners[i]);
        free_events(&other);
    }
    reframe_valid(&split, s, len, data[1]);

    free(want.ev);
    free_events(&whole);
    free_events(&split);
    return 0;
}
