/* prune.c - dropping named members from objects before they are cached; see prune.h. */
#include "wire/prune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/xalloc.h"
#include "wire/scan.h"

/* The paths as a trie: a node per member name; terminal nodes are removed. */
typedef struct node {
    char *name;
    size_t len;
    int terminal;
    struct node *kids;
    size_t nkids, cap_kids;
} node;

/* A byte range [from, to) of the object to leave out. */
typedef struct {
    size_t from, to;
} cut;

struct kl_prune {
    node root;
    cut *cuts; /* of the object being pruned, in order; reused */
    size_t ncuts, cap_cuts;
    kl_scan scan; /* skips the objects and arrays no path goes into */
    char *name;   /* a member name written with escapes, unescaped; reused */
    size_t name_cap;
};

#define BAD ((size_t)-1)

static const char *const KEPT[] = {"kind", "apiVersion", "metadata", "metadata.name",
                                   "metadata.namespace", "metadata.resourceVersion",
                                   "metadata.uid"};

static void free_node(node *n) {
    for (size_t i = 0; i < n->nkids; i++) free_node(&n->kids[i]);
    free(n->kids);
    free(n->name);
}

static const node *find(const node *n, const char *name, size_t len) {
    for (size_t i = 0; i < n->nkids; i++)
        if (n->kids[i].len == len && memcmp(n->kids[i].name, name, len) == 0) return &n->kids[i];
    return NULL;
}

/* n's child of that name, added if missing. */
static node *child(node *n, const char *name, size_t len) {
    const node *found = find(n, name, len);
    if (found) return &n->kids[found - n->kids];
    n->kids = kl_buf_grow(n->kids, &n->cap_kids, n->nkids + 1, sizeof *n->kids, 4);
    node *k = &n->kids[n->nkids++];
    *k = (node){.name = kl_xstrndup(name, len), .len = len};
    return k;
}

static int check_path(const char *path, char *err, size_t errlen) {
    for (size_t i = 0; i < sizeof KEPT / sizeof *KEPT; i++) {
        if (strcmp(path, KEPT[i]) == 0) {
            snprintf(err, errlen, "path \"%s\" cannot be dropped: the cache keys on it", path);
            return -1;
        }
    }
    const char *p = path;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len == 0) {
            snprintf(err, errlen, "path \"%s\" has an empty member name", path);
            return -1;
        }
        if (!dot) return 0;
        p = dot + 1;
    }
}

/* Adds path to the trie. A path under one already removed adds nothing. */
static void add_path(node *root, const char *path) {
    node *n = root;
    for (const char *p = path;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        n = child(n, p, len);
        if (n->terminal) return;
        if (!dot) break;
        p = dot + 1;
    }
    n->terminal = 1;
    for (size_t i = 0; i < n->nkids; i++) free_node(&n->kids[i]);
    free(n->kids);
    n->kids = NULL;
    n->nkids = 0;
}

kl_prune *kl_prune_new(const char *const *paths, size_t n, char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++)
        if (check_path(paths[i], err, errlen) < 0) return NULL;
    kl_prune *p = kl_xcalloc(1, sizeof *p);
    kl_scan_init(&p->scan);
    for (size_t i = 0; i < n; i++) add_path(&p->root, paths[i]);
    return p;
}

void kl_prune_free(kl_prune *p) {
    if (!p) return;
    free_node(&p->root);
    free(p->cuts);
    free(p->name);
    free(p);
}

/* The scanner below runs on bytes the decoder has already accepted as JSON,
 * but still checks every bound: a malformed object gives BAD, never a read
 * past end. It visits every member of an object a path goes through (a
 * name may repeat, and each copy goes) but only skips over the rest, and
 * notes the byte ranges to cut; the result is the original with those
 * ranges left out, copied once into a blob of its exact size. */

/* Bytes that end a scalar (a number, true, false, null). */
static const unsigned char ENDS[256] = {[','] = 1, ['}'] = 1, [']'] = 1, [' '] = 1,
                                        ['\t'] = 1, ['\r'] = 1, ['\n'] = 1};

static size_t ws(const char *s, size_t i, size_t end) {
    while (i < end && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

/* Bytes that end a run of a string's plain bytes. */
static const unsigned char QUOTE[256] = {['"'] = 1, ['\\'] = 1};

/* s[i] is '"': the index after the closing quote. Most strings are short:
 * a loop beats memchr's call until a long one (an annotation of
 * last-applied-configuration), which memchr finds the end of. */
static size_t skip_string(const char *s, size_t i, size_t end) {
    size_t stop = i + 1 + 32 < end ? i + 1 + 32 : end;
    for (i++; i < stop; i++) {
        if (!QUOTE[(unsigned char)s[i]]) continue;
        if (s[i] == '"') return i + 1;
        i++; /* the escaped byte */
    }
    for (size_t from = i; from < end;) {
        const char *q = memchr(s + from, '"', end - from);
        if (!q) return BAD;
        size_t j = (size_t)(q - s), k = j;
        while (s[k - 1] == '\\') k--;
        if ((j - k) % 2 == 0) return j + 1;
        from = j + 1;
    }
    return BAD;
}

/* The index after the value starting at s[i]: an object or array as the
 * framer finds one's end, 64 bytes at a time. */
static size_t skip_value(kl_prune *p, const char *s, size_t i, size_t end) {
    if (i >= end) return BAD;
    if (s[i] == '"') return skip_string(s, i, end);
    if (s[i] != '{' && s[i] != '[') {
        while (i < end && !ENDS[(unsigned char)s[i]]) i++;
        return i;
    }
    int done = 0;
    kl_scan_start(&p->scan);
    size_t n = kl_scan_value(&p->scan, s + i, end - i, &done);
    return done ? i + n : BAD;
}

static void add_cut(kl_prune *p, size_t from, size_t to) {
    p->cuts = kl_buf_grow(p->cuts, &p->cap_cuts, p->ncuts + 1, sizeof *p->cuts, 16);
    p->cuts[p->ncuts++] = (cut){from, to};
}

/* The value of the 4 hex digits at s, or -1. */
static long hex4(const char *s) {
    long v = 0;
    for (int d = 0; d < 4; d++) {
        char h = s[d];
        int x = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (x < 0) return -1;
        v = v * 16 + x;
    }
    return v;
}

/* Writes code point v as UTF-8; returns its length. */
static size_t put_utf8(char *out, unsigned long v) {
    if (v < 0x80) {
        out[0] = (char)v;
        return 1;
    }
    if (v < 0x800) {
        out[0] = (char)(0xc0 | v >> 6);
        out[1] = (char)(0x80 | (v & 0x3f));
        return 2;
    }
    if (v < 0x10000) {
        out[0] = (char)(0xe0 | v >> 12);
        out[1] = (char)(0x80 | (v >> 6 & 0x3f));
        out[2] = (char)(0x80 | (v & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | v >> 18);
    out[1] = (char)(0x80 | (v >> 12 & 0x3f));
    out[2] = (char)(0x80 | (v >> 6 & 0x3f));
    out[3] = (char)(0x80 | (v & 0x3f));
    return 4;
}

/* The byte a two-character escape \c stands for, or 0. */
static char unescape_simple(char c) {
    switch (c) {
    case '"':
    case '\\':
    case '/': return c;
    case 'b': return '\b';
    case 'f': return '\f';
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    default: return 0;
    }
}

/* The member name s[0, n) (between its quotes) as the string it spells, in
 * *len bytes: a path names that string, and Go's encoder writes <, > and &
 * as \u003c, \u003e and \u0026. s itself when it holds no escape; NULL
 * for an escape JSON does not have. Never longer than s. */
static const char *member_name(kl_prune *p, const char *s, size_t n, size_t *len) {
    if (!memchr(s, '\\', n)) {
        *len = n;
        return s;
    }
    p->name = kl_buf_grow(p->name, &p->name_cap, n, 1, 64);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\') {
            p->name[k++] = s[i];
            continue;
        }
        if (++i >= n) return NULL;
        if (s[i] != 'u') {
            char c = unescape_simple(s[i]);
            if (!c) return NULL;
            p->name[k++] = c;
            continue;
        }
        long v = i + 4 < n ? hex4(s + i + 1) : -1, lo;
        if (v < 0) return NULL;
        i += 4;
        if (v >= 0xd800 && v < 0xdc00 && i + 6 < n && s[i + 1] == '\\' && s[i + 2] == 'u' &&
            (lo = hex4(s + i + 3)) >= 0xdc00 && lo < 0xe000) {
            v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
            i += 6;
        }
        k += put_utf8(p->name + k, (unsigned long)v);
    }
    *len = k;
    return p->name;
}

/* Notes the cuts that drop n's terminal members from the object at s[i]
 * ('{'), recursing into the members n names further down; the index after
 * the object, or BAD. A dropped member goes with the comma before it, or,
 * when no member before it stays, with the comma after it. */
static size_t cut_object(kl_prune *p, const node *n, const char *s, size_t i, size_t end) {
    size_t j = ws(s, i + 1, end);
    if (j < end && s[j] == '}') return j + 1;
    int kept = 0;
    for (;;) { /* s[i] is the '{' or ',' before a member */
        size_t k0 = ws(s, i + 1, end);
        if (k0 >= end || s[k0] != '"') return BAD;
        size_t k1 = skip_string(s, k0, end);
        if (k1 == BAD) return BAD;
        j = ws(s, k1, end);
        if (j >= end || s[j] != ':') return BAD;
        size_t v0 = ws(s, j + 1, end);
        size_t nlen;
        const char *name = member_name(p, s + k0 + 1, k1 - k0 - 2, &nlen);
        const node *k = name ? find(n, name, nlen) : NULL;
        size_t v1 = k && !k->terminal && v0 < end && s[v0] == '{' ? cut_object(p, k, s, v0, end)
                                                                   : skip_value(p, s, v0, end);
        if (v1 == BAD) return BAD;
        size_t after = ws(s, v1, end);
        if (after >= end || (s[after] != ',' && s[after] != '}')) return BAD;
        if (k && k->terminal) add_cut(p, kept ? i : k0, kept || s[after] == '}' ? v1 : after + 1);
        else kept = 1;
        if (s[after] == '}') return after + 1;
        i = after;
    }
}

/* Notes the cuts of the object s[0, n): 1 when there are some, 0 when
 * there are none, -1 when s is not an object. */
static int plan(kl_prune *p, const char *s, size_t n) {
    size_t i = ws(s, 0, n);
    if (i >= n || s[i] != '{') return -1;
    p->ncuts = 0;
    if (cut_object(p, &p->root, s, i, n) == BAD) return -1;
    return p->ncuts > 0;
}

/* s[0, n) without the cuts plan noted, in a blob of the exact size, not
 * the old one cut short in place: saving the dropped bytes is the point,
 * and a shortened blob would leave holes the allocator cannot reuse for
 * the next object. */
static kl_blob *cut_copy(const kl_prune *p, const char *s, size_t n) {
    size_t len = n;
    for (size_t c = 0; c < p->ncuts; c++) len -= p->cuts[c].to - p->cuts[c].from;
    kl_blob *b = kl_blob_alloc(len);
    char *out = b->data;
    size_t from = 0;
    for (size_t c = 0; c < p->ncuts; c++) {
        memcpy(out, s + from, p->cuts[c].from - from);
        out += p->cuts[c].from - from;
        from = p->cuts[c].to;
    }
    memcpy(out, s + from, n - from);
    return b;
}

int kl_prune_obj(kl_prune *p, kl_obj *o) {
    const char *s = o->blob->data + o->off;
    int rc = plan(p, s, o->len);
    if (rc <= 0) return rc;
    kl_blob *b = cut_copy(p, s, o->len);
    kl_blob_unref(o->blob);
    o->blob = b;
    o->off = 0;
    o->len = b->len;
    return 1;
}

kl_blob *kl_prune_copy(kl_prune *p, const char *s, size_t n) {
    return plan(p, s, n) == 1 ? cut_copy(p, s, n) : NULL;
}
