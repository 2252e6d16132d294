/*
 * framer.c - framing a watch body by its JSON values; see framer.h.
 *
 * Why a block scanner: finding where a value ends means looking at every
 * byte, since a newline proves nothing ('{"a":1}{"b":2}' is one line, a
 * pretty-printed event is many) and a bracket inside a string does not
 * count. A byte-at-a-time state machine runs at about a byte a cycle, well
 * behind the memchr the newline framer used. Instead each 64-byte block is
 * turned into bit masks of its quotes, backslashes, opening and closing
 * brackets (SSE2 compares, 16 bytes at a time); the escaped bytes follow
 * from the backslashes (rare outside annotations), the bytes inside strings
 * from a prefix XOR of the unescaped quotes, and the depth from popcounts of
 * the brackets outside strings. Only a block in which the depth could reach
 * zero is walked bracket by bracket. So the cost per byte is a few vector
 * operations whether the events come one a line, back to back or indented;
 * docs/benchmarks.md has the measurement against the newline framer.
 *
 * The rules the masks encode, which fuzz/fuzz_framer.c checks against a
 * byte-at-a-time model: within a value, a backslash escapes the next byte
 * (a backslash outside a string is invalid JSON, which the decoder refuses
 * anyway), an escaped byte is never structural, an unescaped quote opens or
 * closes a string, and outside strings '{' and '[' open, '}' and ']' close.
 * Brackets are counted, not matched: '{]' is a frame the decoder refuses.
 */
#include "framer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

enum { BETWEEN, IN_VALUE, IN_JUNK };

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
    f->state = BETWEEN;
    f->skipping = 0;
}

size_t kl_framer_pending(const kl_framer *f) { return f->partial ? f->partial->len : 0; }

/* ---- the value scanner -------------------------------------------------- */

typedef struct {
    uint64_t quote, backslash, open, close; /* bit i: byte i of the block */
} block_bits;

/* '[' and '{' differ only in bit 0x20, as do ']' and '}'. */
#ifdef __SSE2__
static block_bits classify(const unsigned char *p) {
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    const __m128i open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}'), fold = _mm_set1_epi8(0x20);
    block_bits b = {0, 0, 0, 0};
    for (int k = 0; k < 64; k += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + k));
        __m128i folded = _mm_or_si128(v, fold);
        b.quote |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)) << k;
        b.backslash |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, backslash)) << k;
        b.open |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(folded, open)) << k;
        b.close |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(folded, close)) << k;
    }
    return b;
}
#else
static block_bits classify(const unsigned char *p) {
    block_bits b = {0, 0, 0, 0};
    for (int k = 0; k < 64; k++) {
        uint64_t bit = (uint64_t)1 << k;
        unsigned char folded = p[k] | 0x20;
        if (p[k] == '"') b.quote |= bit;
        if (p[k] == '\\') b.backslash |= bit;
        if (folded == '{') b.open |= bit;
        if (folded == '}') b.close |= bit;
    }
    return b;
}
#endif

/* The bytes escaped by a backslash that is not itself escaped; *carry says
 * that byte 0 is escaped on entry, and that byte 64 is on return. */
static uint64_t escaped_bits(uint64_t backslash, int *carry) {
    uint64_t escaped = (uint64_t)*carry;
    backslash &= ~escaped;
    *carry = 0;
    while (backslash) {
        uint64_t bit = backslash & (0 - backslash), next = bit << 1;
        if (!next) *carry = 1;
        escaped |= next;
        backslash &= ~(bit | next);
    }
    return escaped;
}

/* Bit i: the parity of the set bits 0..i. */
static uint64_t prefix_xor(uint64_t x) {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

/* Applies a block's brackets to *depth; returns the position of the one that
 * brings it to zero, or 64. */
static unsigned close_position(size_t *depth, uint64_t open, uint64_t close) {
    size_t closes = (size_t)__builtin_popcountll(close);
    if (closes < *depth) {
        *depth += (size_t)__builtin_popcountll(open);
        *depth -= closes;
        return 64;
    }
    for (uint64_t all = open | close; all; all &= all - 1) {
        uint64_t bit = all & (0 - all);
        if (open & bit) {
            ++*depth;
        } else if (--*depth == 0) {
            return (unsigned)__builtin_ctzll(all);
        }
    }
    return 64;
}

/* Scans n bytes of the current value, carrying its state in f; returns how
 * many belong to it and sets *done when the last of them closes it. */
static size_t scan_value(kl_framer *f, const char *p, size_t n, int *done) {
    for (size_t off = 0; off < n; off += 64) {
        size_t k = n - off < 64 ? n - off : 64;
        block_bits b;
        if (k == 64) {
            b = classify((const unsigned char *)p + off);
        } else {
            unsigned char tail[64] = {0};
            memcpy(tail, p + off, k);
            b = classify(tail);
        }
        uint64_t escaped = escaped_bits(b.backslash, &f->escaped);
        uint64_t strings = prefix_xor(b.quote & ~escaped) ^ (0 - (uint64_t)f->in_string);
        uint64_t plain = ~(strings | escaped);
        unsigned end = close_position(&f->depth, b.open & plain, b.close & plain);
        if (end < k) {
            *done = 1;
            return off + end + 1;
        }
        f->in_string = (int)((strings >> (k - 1)) & 1);
        if (k < 64) f->escaped = (int)((escaped >> k) & 1);
    }
    *done = 0;
    return n;
}

/* ---- frames ----------------------------------------------------------- */

static void emit(kl_framer *f, kl_blob *b) {
    if (b->data[b->len - 1] == '\r') b->len--; /* a junk line's CRLF */
    memset(b->data + b->len, 0, KL_BLOB_PADDING);
    f->cb.frame(f->ud, b);
}

/* Appends n bytes to the unfinished frame, growing it geometrically. */
static int append(kl_framer *f, const char *p, size_t n) {
    size_t have = kl_framer_pending(f);
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

/* Takes the next n bytes of the current frame; done: they end it. */
static int take(kl_framer *f, const char *p, size_t n, int done) {
    if (!f->skipping && kl_framer_pending(f) + n > f->max) {
        free(f->partial);
        f->partial = NULL;
        f->cap = 0;
        f->skipping = 1;
        if (f->cb.oversize) f->cb.oversize(f->ud, f->max);
    }
    if (done) f->state = BETWEEN;
    if (f->skipping) {
        f->skipping = !done;
        return 0;
    }
    if (!done) return append(f, p, n);
    if (!f->partial) {
        kl_blob *b = kl_blob_new(p, n);
        if (!b) return -1;
        emit(f, b);
        return 0;
    }
    if (append(f, p, n) < 0) return -1;
    kl_blob *b = f->partial, *shrunk = realloc(b, sizeof(kl_blob) + b->len + KL_BLOB_PADDING);
    f->partial = NULL;
    f->cap = 0;
    emit(f, shrunk ? shrunk : b);
    return 0;
}

/* Skips whitespace between values; returns the bytes skipped, and moves to
 * the value or junk line that starts after them. */
static size_t between(kl_framer *f, const char *p, size_t n) {
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\n' || p[i] == '\r' || p[i] == '\t')) i++;
    if (i == n) return n;
    if ((p[i] | 0x20) == '{') {
        f->state = IN_VALUE;
        f->depth = 0;
        f->in_string = 0;
        f->escaped = 0;
    } else {
        f->state = IN_JUNK;
    }
    return i;
}

int kl_framer_feed(kl_framer *f, const char *data, size_t len) {
    while (len > 0) {
        size_t used, n;
        int done;
        if (f->state == BETWEEN) {
            used = between(f, data, len);
        } else {
            if (f->state == IN_VALUE) {
                used = n = scan_value(f, data, len, &done);
            } else {
                const char *nl = memchr(data, '\n', len);
                n = nl ? (size_t)(nl - data) : len;
                used = nl ? n + 1 : n;
                done = nl != NULL;
            }
            if (take(f, data, n, done) < 0) return -1;
        }
        data += used;
        len -= used;
    }
    return 0;
}
