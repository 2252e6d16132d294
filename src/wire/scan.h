/*
 * scan.h - finds where a JSON object or array ends, 64 bytes at a time.
 *
 * The framer splits a watch body into its events with it, and the LIST
 * splitter finds each element of "items" with it: both need the byte that
 * closes a value that may span many reads, and both see mostly bytes inside
 * strings. The scanner tracks strings, escapes and bracket depth across
 * calls; see scan.c for how, and the rules it encodes.
 */
#ifndef KLUA_SCAN_H
#define KLUA_SCAN_H

#include <stddef.h>

struct kl_scan;
typedef size_t kl_scan_fn(struct kl_scan *s, const char *p, size_t n, int *done);

typedef struct kl_scan {
    size_t depth;  /* brackets open in the current value */
    int in_string; /* the value's last scanned byte is inside a string */
    int escaped;   /* the value's next byte is escaped by a backslash */
    kl_scan_fn *fn; /* the fastest this CPU runs */
} kl_scan;

/* Picks the fastest scanner this CPU runs. */
void kl_scan_init(kl_scan *s);
/* Makes s scan with the named scanner instead, so that tests cover each:
 * "avx512", "avx2" (x86-64 only) or "portable". Returns 0, or -1 when this
 * build or CPU has no such scanner. */
int kl_scan_use(kl_scan *s, const char *name);

/* A new value starts at the next byte scanned, its opening bracket. */
static inline void kl_scan_start(kl_scan *s) {
    s->depth = 0;
    s->in_string = 0;
    s->escaped = 0;
}

/* Scans n bytes of the current value; returns how many belong to it and
 * sets *done when the last of them closes it (else all n do). */
static inline size_t kl_scan_value(kl_scan *s, const char *p, size_t n, int *done) { return s->fn(s, p, n, done); }

#endif
