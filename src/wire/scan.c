/*
 * scan.c - the value scanner; see scan.h.
 *
 * Why a block scanner: finding where a value ends means looking at every
 * byte, since a newline proves nothing ('{"a":1}{"b":2}' is one line, a
 * pretty-printed event is many) and a bracket inside a string does not
 * count. Even checking that a line memchr found is exactly one value takes
 * that scan (the depth, counted outside strings, must first reach zero at
 * the line's end), so newline-delimited streams get no cheaper path than a
 * fast scan. A byte-at-a-time state machine runs at about a byte a cycle, far
 * behind the memchr the newline framer used. Instead each 64-byte block is
 * turned into bit masks of its quotes, backslashes, opening and closing
 * brackets (vector compares: AVX-512 or AVX2 where the CPU has them, else
 * SSE2); the escaped bytes follow from the backslashes by carry arithmetic
 * (skipped in the many blocks without any), the bytes inside strings from a
 * prefix XOR of the unescaped quotes, and the depth from counts of the
 * brackets outside strings. Only a block in which the depth could reach
 * zero is walked bracket by bracket. So the cost per byte is a few vector
 * operations whether the events come one a line, back to back or indented;
 * docs/benchmarks.md has the measurement against the newline framer.
 *
 * The rules the masks encode, which fuzz/fuzz_framer.c and fuzz/fuzz_list_stream.c
 * check against a byte-at-a-time model: within a value, a backslash escapes the next byte
 * (a backslash outside a string is invalid JSON, which the decoder refuses
 * anyway), an escaped byte is never structural, an unescaped quote opens or
 * closes a string, and outside strings '{' and '[' open, '}' and ']' close.
 * Brackets are counted, not matched: '{]' is a frame the decoder refuses.
 */
#include "wire/scan.h"

#include <stdint.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

typedef struct {
    uint64_t quote, backslash, open, close; /* bit i: byte i of the block */
} block_bits;

/* '[' and '{' differ only in bit 0x20, as do ']' and '}'. */
#ifdef __SSE2__
static inline block_bits classify_base(const unsigned char *p) {
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
static inline block_bits classify_base(const unsigned char *p) {
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

/* Bit i: the parity of the set bits 0..i. */
static inline uint64_t prefix_xor_base(uint64_t x) {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

/* x86-64's baseline has no popcount instruction, and the library call the
 * builtin becomes there costs more than the rest of the scan. */
static inline size_t bit_count_base(uint64_t x) {
    x -= (x >> 1) & 0x5555555555555555u;
    x = (x & 0x3333333333333333u) + ((x >> 2) & 0x3333333333333333u);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fu;
    return (size_t)((x * 0x0101010101010101u) >> 56);
}

/*
 * The quotes and brackets escaped by a backslash; *carry says that byte 0 is
 * escaped on entry, and that byte 64 is on return. A byte is escaped when
 * the run of backslashes before it has odd length. Adding a run's first bit
 * to the run carries through it to the byte after it, so (b + starts) & ~b
 * marks the byte after each run; the run's length is odd when that byte's
 * position differs in parity from the run's start, so runs starting at even
 * and at odd positions are added separately. A run still going at byte 63
 * overflows the addition instead. (Escaped backslashes are not marked: they
 * are neither quotes nor brackets.)
 */
static inline uint64_t escaped_bits(uint64_t backslash, uint64_t *carry) {
    const uint64_t even = 0x5555555555555555u;
    if (!(backslash | *carry)) return 0;
    uint64_t b = backslash & ~*carry, starts = b & ~(b << 1), even_ends, odd_ends;
    even_ends = (b + (starts & even)) & ~b;
    int out = __builtin_add_overflow(b, starts & ~even, &odd_ends);
    odd_ends &= ~b;
    uint64_t escaped = *carry | (even_ends & ~even) | (odd_ends & even);
    *carry = (uint64_t)out;
    return escaped;
}

/* Applies a block's brackets to *depth; returns the position of the one that
 * brings it to zero, or 64. */
static inline __attribute__((always_inline)) unsigned close_position(size_t *depth, uint64_t open, uint64_t close,
                                                                     size_t (*bit_count)(uint64_t)) {
    size_t closes = bit_count(close);
    if (closes >= *depth && *depth > 0) {
        /* An empty "{}" or "[]" takes the depth back to where it was, so
         * once the value is open (depth above zero on entry, and the zero
         * sought the first) it cannot be the zero sought: managedFields'
         * fieldsV1 is full of them, and fewer blocks are walked without
         * them. */
        uint64_t pairs = open & (close >> 1);
        open &= ~pairs;
        close &= ~(pairs << 1);
        closes = bit_count(close);
    }
    if (closes < *depth) {
        *depth += bit_count(open);
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

/* One block of the current value: its escaped bytes, and the bytes inside
 * strings (*strings, *escaped); applies its brackets to *depth and returns
 * the position of the one that closes the value, or 64. */
static inline __attribute__((always_inline)) unsigned scan_block(const unsigned char *block, size_t *depth,
                                                                 uint64_t in_string, uint64_t *carry,
                                                                 uint64_t *strings, uint64_t *escaped,
                                                                 block_bits (*classify)(const unsigned char *),
                                                                 uint64_t (*prefix_xor)(uint64_t),
                                                                 size_t (*bit_count)(uint64_t)) {
    block_bits b = classify(block);
    *escaped = escaped_bits(b.backslash, carry);
    *strings = prefix_xor(b.quote & ~*escaped) ^ in_string;
    uint64_t plain = ~(*strings | *escaped);
    return close_position(depth, b.open & plain, b.close & plain, bit_count);
}

/* Scans n bytes of the current value, carrying its state in s; returns how
 * many belong to it and sets *done when the last of them closes it. Inlined
 * into each scanner below with its own primitives. Whole blocks are read in
 * place, in a loop with nothing to check of a block's length; the last,
 * shorter one is copied out and padded with zeros, which are nothing to the
 * masks. */
static inline __attribute__((always_inline)) size_t scan_blocks(kl_scan *s, const char *p, size_t n, int *done,
                                                                block_bits (*classify)(const unsigned char *),
                                                                uint64_t (*prefix_xor)(uint64_t),
                                                                size_t (*bit_count)(uint64_t)) {
    size_t depth = s->depth, off = 0;
    uint64_t in_string = 0 - (uint64_t)s->in_string, carry = (uint64_t)s->escaped, strings, escaped;
    for (; n - off >= 64; off += 64) {
        unsigned end = scan_block((const unsigned char *)p + off, &depth, in_string, &carry, &strings, &escaped,
                                  classify, prefix_xor, bit_count);
        if (end < 64) {
            *done = 1;
            return off + end + 1;
        }
        in_string = 0 - (strings >> 63);
    }
    if (off < n) {
        size_t k = n - off;
        unsigned char tail[64];
        memset(tail, 0, sizeof tail);
        memcpy(tail, p + off, k);
        unsigned end = scan_block(tail, &depth, in_string, &carry, &strings, &escaped, classify, prefix_xor, bit_count);
        if (end < k) {
            *done = 1;
            return off + end + 1;
        }
        in_string = 0 - ((strings >> (k - 1)) & 1);
        carry = (escaped >> k) & 1;
    }
    s->depth = depth;
    s->in_string = (int)(in_string & 1);
    s->escaped = (int)carry;
    *done = 0;
    return n;
}

static size_t scan_base(kl_scan *s, const char *p, size_t n, int *done) {
    return scan_blocks(s, p, n, done, classify_base, prefix_xor_base, bit_count_base);
}

/* Where the CPU has them (checked at run time, since klua is built for the
 * x86-64 baseline), AVX2 classifies a block in half the instructions and
 * AVX-512 in a quarter, a carry-less multiply by all ones is the prefix XOR,
 * and POPCNT counts. */
#if defined(__x86_64__) && defined(__GNUC__)
#define KL_AVX2 __attribute__((target("avx2,pclmul,popcnt")))
#define KL_AVX512 __attribute__((target("avx512f,avx512bw,avx2,pclmul,popcnt")))

/* One half-block's mask of the bytes equal to c. */
static inline KL_AVX2 uint64_t eq_avx2(__m256i v, char c) {
    return (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(c)));
}

/* The two halves written out rather than looped over: GCC kept the loop and
 * the four masks in memory, a quarter of the scanner's instructions. */
static inline KL_AVX2 block_bits classify_avx2(const unsigned char *p) {
    const __m256i fold = _mm256_set1_epi8(0x20);
    __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m256i hi = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
    __m256i lo_folded = _mm256_or_si256(lo, fold), hi_folded = _mm256_or_si256(hi, fold);
    block_bits b;
    b.quote = eq_avx2(lo, '"') | eq_avx2(hi, '"') << 32;
    b.backslash = eq_avx2(lo, '\\') | eq_avx2(hi, '\\') << 32;
    b.open = eq_avx2(lo_folded, '{') | eq_avx2(hi_folded, '{') << 32;
    b.close = eq_avx2(lo_folded, '}') | eq_avx2(hi_folded, '}') << 32;
    return b;
}

static inline KL_AVX512 block_bits classify_avx512(const unsigned char *p) {
    __m512i v = _mm512_loadu_si512((const void *)p), folded = _mm512_or_si512(v, _mm512_set1_epi8(0x20));
    block_bits b;
    b.quote = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('"'));
    b.backslash = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8('\\'));
    b.open = _mm512_cmpeq_epi8_mask(folded, _mm512_set1_epi8('{'));
    b.close = _mm512_cmpeq_epi8_mask(folded, _mm512_set1_epi8('}'));
    return b;
}

static inline KL_AVX2 uint64_t prefix_xor_clmul(uint64_t x) {
    __m128i ones = _mm_set1_epi8(-1), v = _mm_set_epi64x(0, (long long)x);
    return (uint64_t)_mm_cvtsi128_si64(_mm_clmulepi64_si128(v, ones, 0));
}

static inline KL_AVX2 size_t bit_count_popcnt(uint64_t x) { return (size_t)__builtin_popcountll(x); }

static KL_AVX2 size_t scan_avx2(kl_scan *s, const char *p, size_t n, int *done) {
    return scan_blocks(s, p, n, done, classify_avx2, prefix_xor_clmul, bit_count_popcnt);
}

static KL_AVX512 size_t scan_avx512(kl_scan *s, const char *p, size_t n, int *done) {
    return scan_blocks(s, p, n, done, classify_avx512, prefix_xor_clmul, bit_count_popcnt);
}

static int runs_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("popcnt");
}

static int runs_avx512(void) {
    return runs_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}
#endif

static int runs_always(void) { return 1; }

/* Fastest first. */
static const struct {
    const char *name;
    kl_scan_fn *scan;
    int (*runs)(void);
} scanners[] = {
#if defined(__x86_64__) && defined(__GNUC__)
    {"avx512", scan_avx512, runs_avx512},
    {"avx2", scan_avx2, runs_avx2},
#endif
    {"portable", scan_base, runs_always},
};

int kl_scan_use(kl_scan *s, const char *name) {
    for (size_t i = 0; i < sizeof scanners / sizeof scanners[0]; i++) {
        if (strcmp(scanners[i].name, name) != 0) continue;
        if (!scanners[i].runs()) return -1;
        s->fn = scanners[i].scan;
        return 0;
    }
    return -1;
}

void kl_scan_init(kl_scan *s) {
    size_t i = 0;
    while (!scanners[i].runs()) i++;
    kl_scan_start(s);
    s->fn = scanners[i].scan;
}
