/*
 * cbor.c - CBOR items: where they end, and their JSON text; see cbor.h.
 */
#include "wire/cbor.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/jsonesc.h"
#include "base/utf8.h"
#include "base/xalloc.h"

enum { MT_UINT, MT_NINT, MT_BYTES, MT_TEXT, MT_ARRAY, MT_MAP, MT_TAG, MT_SIMPLE };

#define MAX_DEPTH KL_CBOR_MAX_DEPTH

/* Bytes after the initial byte of a header whose additional information is
 * ai; -1 for the reserved values and for 31 (an indefinite length, or a
 * break), which the callers read themselves. */
static int arg_bytes(unsigned ai) {
    if (ai < 24) return 0;
    if (ai <= 27) return 1 << (ai - 24);
    return -1;
}

/* Whether an initial byte opens an indefinite-length string, array or map:
 * apimachinery's encoder never writes one (IndefLength: IndefLengthForbidden),
 * but its decoder reads them (modes/decode.go: IndefLength: IndefLengthAllowed),
 * as RFC 8949 3.2.2 allows. */
static int opens_indefinite(unsigned char initial) {
    unsigned mt = initial >> 5;
    return (initial & 31) == 31 && mt >= MT_BYTES && mt <= MT_MAP;
}

#define BREAK 0xff

/* Why an initial byte whose argument has no length (arg_bytes -1) and
 * opens nothing is refused. */
static const char *bad_header(unsigned char initial) {
    if ((initial & 31) != 31) return "a reserved additional information value (28-30)";
    return initial == BREAK ? "a break (0xff) outside an indefinite-length item"
                            : "an indefinite length on an integer or a tag";
}

static uint64_t arg_value(const unsigned char *h, int extra) {
    if (extra == 0) return h[0] & 31;
    uint64_t v = 0;
    for (int i = 1; i <= extra; i++) v = v << 8 | h[i];
    return v;
}

/* ---- where an item ends ------------------------------------------------ */

void kl_cbor_scan_start(kl_cbor_scan *s) {
    /* open says how much of outer is in use: the rest is not cleared */
    s->items = 1;
    s->skip = 0;
    s->hlen = s->hneed = 0;
    s->open = 0;
    s->bad = NULL;
}

/* A whole header in s->hdr: counts the item, and what it holds. 0, or -1
 * with s->bad. */
static int header_done(kl_cbor_scan *s) {
    unsigned mt = s->hdr[0] >> 5;
    uint64_t v = arg_value(s->hdr, (int)s->hneed - 1);
    s->items--;
    s->hlen = 0;
    if (mt == MT_BYTES || mt == MT_TEXT) s->skip = v;
    else if (mt == MT_TAG) s->items++;
    else if (mt == MT_ARRAY || mt == MT_MAP) {
        uint64_t add = mt == MT_MAP ? 2 * v : v;
        if ((mt == MT_MAP && v > UINT64_MAX / 2) || add > UINT64_MAX - s->items) {
            s->bad = "a length larger than any item";
            return -1;
        }
        s->items += add;
    }
    return 0;
}

/* The first byte of a header: a break, an indefinite-length item opened,
 * or the start of a header of 1 + extra bytes. 0, or -1 with s->bad. */
static int header_start(kl_cbor_scan *s, unsigned char c) {
    if (s->items == 0) {
        /* Directly inside an indefinite-length item: a break closes it,
         * anything else is its next element (or chunk). */
        if (c == BREAK) {
            s->items = s->outer[--s->open];
            return 1;
        }
        s->items = 1;
    }
    if (opens_indefinite(c)) {
        if (s->open == KL_CBOR_MAX_OPEN) {
            s->bad = "indefinite-length items nested too deep";
            return -1;
        }
        s->outer[s->open++] = s->items - 1;
        s->items = 0;
        return 1;
    }
    int extra = arg_bytes(c & 31);
    if (extra < 0) {
        s->bad = bad_header(c);
        return -1;
    }
    s->hneed = 1 + (unsigned)extra;
    return 0;
}

size_t kl_cbor_scan_feed(kl_cbor_scan *s, const char *p, size_t n, int *done) {
    const unsigned char *u = (const unsigned char *)p;
    size_t i = 0;
    *done = 0;
    while (i < n) {
        if (s->skip) {
            size_t k = n - i < s->skip ? n - i : (size_t)s->skip;
            i += k;
            s->skip -= k;
        } else {
            int whole = 0;
            if (s->hlen == 0 && (whole = header_start(s, u[i])) < 0) {
                *done = -1;
                return i;
            }
            if (whole) {
                i++;
            } else {
                s->hdr[s->hlen++] = u[i++];
                if (s->hlen == s->hneed && header_done(s) < 0) {
                    *done = -1;
                    return i;
                }
            }
        }
        if (s->items == 0 && s->open == 0 && s->skip == 0 && s->hlen == 0) {
            *done = 1;
            return i;
        }
    }
    return i;
}

/* ---- JSON text --------------------------------------------------------- */

typedef struct out {
    kl_blob *b;
    size_t cap;
    const unsigned char *start, *p, *end; /* the item being read */
    const unsigned char *at; /* the header read last: where an error is */
    int depth;
    char *err;
    size_t errlen;
} out;

static int fail(out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->err, o->errlen, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < o->errlen)
        snprintf(o->err + n, o->errlen - (size_t)n, " at byte %zu", (size_t)(o->at - o->start));
    return -1;
}

static char *room(out *o, size_t n) {
    size_t need = o->b->len + n;
    if (need > o->cap) {
        o->cap = kl_buf_cap(o->cap, need, 256);
        o->b = kl_xrealloc(o->b, sizeof(kl_blob) + o->cap + KL_BLOB_PADDING);
    }
    return o->b->data + o->b->len;
}

static void put(out *o, const char *s, size_t n) {
    memcpy(room(o, n), s, n);
    o->b->len += n;
}

static void putc_(out *o, char c) { put(o, &c, 1); }

/* Reads a header: its major type, argument and the additional information
 * (31, with no argument, for an indefinite-length string, array or map). */
static int header(out *o, unsigned *mt, uint64_t *v, unsigned *ai) {
    o->at = o->p;
    if (o->p >= o->end) return fail(o, "CBOR item ends early");
    *mt = o->p[0] >> 5;
    *ai = o->p[0] & 31;
    if (opens_indefinite(o->p[0])) {
        *v = 0;
        o->p++;
        return 0;
    }
    int extra = arg_bytes(*ai);
    if (extra < 0) return fail(o, "CBOR item has %s", bad_header(o->p[0]));
    if ((size_t)(o->end - o->p) < 1 + (size_t)extra) return fail(o, "CBOR item ends early");
    *v = arg_value(o->p, extra);
    o->p += 1 + extra;
    return 0;
}

/* Whether the next byte is the break that ends an indefinite-length item
 * (and passes it). */
static int at_break(out *o) {
    if (o->p < o->end && *o->p == BREAK) {
        o->p++;
        return 1;
    }
    return 0;
}

static void put_u64(out *o, const char *sign, uint64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%s%llu", sign, (unsigned long long)v);
    put(o, tmp, (size_t)n);
}

/* A JSON string of s[0..n): text (must be UTF-8) or a byte string (whose
 * invalid bytes each become U+FFFD). */
static int put_string(out *o, const unsigned char *s, size_t n, int text) {
    putc_(o, '"');
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (run < n && s[run] >= 0x20 && s[run] < 0x80 && s[run] != '"' && s[run] != '\\') run++;
        put(o, (const char *)s + i, run - i);
        i = run;
        if (i == n) break;
        if (s[i] < 0x80) {
            char esc[KL_JSONESC_MAX];
            put(o, esc, kl_jsonesc_char(s[i], esc));
            i++;
            continue;
        }
        size_t len = kl_utf8_len(s + i, n - i);
        if (len) put(o, (const char *)s + i, len);
        else if (text) return fail(o, "CBOR text string is not valid UTF-8");
        else put(o, "\xef\xbf\xbd", 3);
        i += len ? len : 1;
    }
    putc_(o, '"');
    return 0;
}

/* The JSON string of bytes in the encoding a tag 21, 22 or 23 expects. */
static void put_encoded(out *o, const unsigned char *s, size_t n, uint64_t tag) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    static const char hex[] = "0123456789abcdef";
    putc_(o, '"');
    if (tag == 23) {
        char *d = room(o, 2 * n);
        for (size_t i = 0; i < n; i++) d[2 * i] = hex[s[i] >> 4], d[2 * i + 1] = hex[s[i] & 15];
        o->b->len += 2 * n;
    } else {
        const char *a = tag == 22 ? b64 : b64url;
        char *d = room(o, (n + 2) / 3 * 4), *d0 = d;
        size_t i = 0;
        for (; i + 3 <= n; i += 3) {
            uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
            *d++ = a[v >> 18], *d++ = a[v >> 12 & 63], *d++ = a[v >> 6 & 63], *d++ = a[v & 63];
        }
        if (i < n) {
            uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
            *d++ = a[v >> 18], *d++ = a[v >> 12 & 63];
            if (i + 1 < n) *d++ = a[v >> 6 & 63];
            else if (tag == 22) *d++ = '=';
            if (tag == 22) *d++ = '=';
        }
        o->b->len += (size_t)(d - d0);
    }
    putc_(o, '"');
}

static double half_to_double(uint16_t h) {
    int e = h >> 10 & 31;
    double m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return h & 0x8000 ? -v : v;
}

/* A finite double as Go's encoding/json writes a float64: the fewest
 * digits, correctly rounded, that read back the same (Go's shortest form
 * but for rare ties, which read back the same too), in plain notation
 * unless the exponent is below -6 or 21 and up; so an integral value has
 * no fraction and reads back as the integer the JSON form holds. */
static void put_double(out *o, double x) {
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    /* e is [-]d[.ddd]e[+-]XX */
    const char *s = e;
    int neg = *s == '-';
    if (neg) s++;
    char digits[20];
    size_t nd = 0;
    for (; *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    int exp = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char buf[64];
    size_t k = 0;
    if (neg) buf[k++] = '-';
    if (exp < -6 || exp >= 21) {
        buf[k++] = digits[0];
        if (nd > 1) buf[k++] = '.', memcpy(buf + k, digits + 1, nd - 1), k += nd - 1;
        k += (size_t)snprintf(buf + k, sizeof buf - k, "e%c%d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        buf[k++] = '0', buf[k++] = '.';
        for (int z = -1; z > exp; z--) buf[k++] = '0';
        memcpy(buf + k, digits, nd), k += nd;
    } else {
        for (int i = 0; i <= exp || (size_t)i < nd; i++) {
            if (i == exp + 1) buf[k++] = '.';
            buf[k++] = (size_t)i < nd ? digits[i] : '0';
        }
    }
    put(o, buf, k);
}

static int item(out *o);

static int simple(out *o, unsigned ai, uint64_t v) {
    double x;
    if (ai == 25) x = half_to_double((uint16_t)v);
    else if (ai == 26) {
        uint32_t u = (uint32_t)v;
        float f;
        memcpy(&f, &u, sizeof f);
        x = f;
    } else if (ai == 27) memcpy(&x, &v, sizeof x);
    else if (v == 20 || v == 21) {
        put(o, v == 21 ? "true" : "false", v == 21 ? 4 : 5);
        return 0;
    } else if (v == 22) {
        put(o, "null", 4);
        return 0;
    } else {
        return fail(o, v == 23 ? "CBOR undefined has no JSON form" : "CBOR simple value %llu has no JSON form",
                    (unsigned long long)v);
    }
    if (!isfinite(x)) return fail(o, "CBOR float %s has no JSON form", isnan(x) ? "NaN" : "infinity");
    put_double(o, x);
    return 0;
}

/* The bytes of a string of major type mt whose header was read: in place
 * for a definite length; an indefinite-length one's definite chunks of the
 * same type (RFC 8949 3.2.3) joined in *joined, which the caller frees. */
static int string_of(out *o, unsigned mt, unsigned ai, uint64_t v, const unsigned char **s, size_t *len,
                     unsigned char **joined) {
    *joined = NULL;
    if (ai != 31) {
        if ((uint64_t)(o->end - o->p) < v) return fail(o, "CBOR string ends early");
        *s = o->p;
        *len = (size_t)v;
        o->p += v;
        return 0;
    }
    size_t n = 0, cap = 0;
    while (!at_break(o)) {
        unsigned cmt, cai;
        uint64_t cv;
        const unsigned char *c;
        size_t clen;
        unsigned char *none;
        if (header(o, &cmt, &cv, &cai) < 0) goto bad;
        if (cmt != mt || cai == 31) {
            fail(o, "CBOR indefinite-length string has a chunk that is not a definite string of its type");
            goto bad;
        }
        if (string_of(o, cmt, cai, cv, &c, &clen, &none) < 0) goto bad;
        *joined = kl_buf_grow(*joined, &cap, n + clen + 1, 1, 64);
        memcpy(*joined + n, c, clen);
        n += clen;
    }
    *s = *joined ? *joined : o->p;
    *len = n;
    return 0;
bad:
    free(*joined);
    *joined = NULL;
    return -1;
}

/* A string item as a JSON string: text (UTF-8) or bytes. */
static int string_item(out *o, unsigned mt, unsigned ai, uint64_t v) {
    const unsigned char *s = NULL;
    unsigned char *joined;
    size_t len;
    if (string_of(o, mt, ai, v, &s, &len, &joined) < 0) return -1;
    int rc = put_string(o, s, len, mt == MT_TEXT);
    free(joined);
    return rc;
}

static int tagged(out *o, uint64_t tag) {
    if (tag == 55799) return item(o);
    if (tag < 21 || tag > 23) return fail(o, "CBOR tag %llu has no JSON form", (unsigned long long)tag);
    unsigned mt, ai;
    uint64_t v;
    const unsigned char *s = NULL;
    unsigned char *joined;
    size_t len;
    if (header(o, &mt, &v, &ai) < 0) return -1;
    if (mt != MT_BYTES) return fail(o, "CBOR tag %llu on something other than a byte string", (unsigned long long)tag);
    if (string_of(o, mt, ai, v, &s, &len, &joined) < 0) return -1;
    put_encoded(o, s, len, tag);
    free(joined);
    return 0;
}

/* An array or a map of n members, or until a break when indefinite. */
static int container(out *o, unsigned mt, uint64_t n, int indefinite) {
    int map = mt == MT_MAP;
    putc_(o, map ? '{' : '[');
    for (uint64_t i = 0; indefinite ? !at_break(o) : i < n; i++) {
        if (i) putc_(o, ',');
        if (map) {
            unsigned kmt, ai;
            uint64_t v;
            if (header(o, &kmt, &v, &ai) < 0) return -1;
            if (kmt != MT_BYTES && kmt != MT_TEXT) return fail(o, "CBOR map key is not a string");
            if (string_item(o, kmt, ai, v) < 0) return -1;
            putc_(o, ':');
        }
        if (item(o) < 0) return -1;
    }
    putc_(o, map ? '}' : ']');
    return 0;
}

static int item(out *o) {
    unsigned mt, ai;
    uint64_t v;
    if (++o->depth > MAX_DEPTH) return fail(o, "CBOR item nests deeper than %d", MAX_DEPTH);
    if (header(o, &mt, &v, &ai) < 0) return -1;
    int rc = 0;
    switch (mt) {
    case MT_UINT: put_u64(o, "", v); break;
    case MT_NINT:
        if (v > (uint64_t)INT64_MAX) return fail(o, "CBOR integer below -2^63 has no JSON form klua reads");
        put_u64(o, "-", v + 1);
        break;
    case MT_BYTES:
    case MT_TEXT: rc = string_item(o, mt, ai, v); break;
    case MT_ARRAY:
    case MT_MAP:
        /* each element takes a byte at least: a count past the end is short */
        if (v > (uint64_t)(o->end - o->p)) return fail(o, "CBOR item ends early");
        rc = container(o, mt, v, ai == 31);
        break;
    case MT_TAG: rc = tagged(o, v); break;
    default: rc = simple(o, ai, v); break;
    }
    o->depth--;
    return rc;
}

kl_blob *kl_cbor_to_json(const char *p, size_t n, char *err, size_t errlen) {
    out o = {.start = (const unsigned char *)p, .p = (const unsigned char *)p, .at = (const unsigned char *)p,
             .end = (const unsigned char *)p + n, .err = err, .errlen = errlen};
    o.cap = n + n / 2 + 64;
    o.b = kl_xmalloc(sizeof(kl_blob) + o.cap + KL_BLOB_PADDING);
    o.b->refs = 1;
    o.b->len = 0;
    int rc = item(&o);
    if (rc == 0 && o.p != o.end) {
        o.at = o.p;
        rc = fail(&o, "CBOR item is followed by more bytes");
    }
    if (rc < 0) {
        free(o.b);
        return NULL;
    }
    /* The first guess at the JSON's size was generous: a blob the cache
     * may keep for long does not keep the slack. */
    if (o.cap - o.b->len > o.b->len / 8 + 64) o.b = kl_xrealloc(o.b, sizeof(kl_blob) + o.b->len + KL_BLOB_PADDING);
    memset(o.b->data + o.b->len, 0, KL_BLOB_PADDING);
    return o.b;
}
