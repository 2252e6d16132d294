/* list_stream.c - LIST responses decoded item by item; see list_stream.h. */
#include "wire/list_stream.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/xalloc.h"
#include "wire/cbor.h"

void kl_list_stream_init(kl_list_stream *s, kl_list *out, size_t max_item) {
    memset(s, 0, sizeof *s);
    memset(out, 0, sizeof *out);
    out->remaining = -1;
    s->out = out;
    s->max_item = max_item;
    kl_scan_init(&s->scan);
}

void kl_list_stream_prune(kl_list_stream *s, kl_prune *p) {
    s->prune = p;
    s->out->transformed = p != NULL;
}

void kl_list_stream_rows(kl_list_stream *s) { s->rows = 1; }

void kl_list_stream_free(kl_list_stream *s) {
    free(s->scratch);
    free(s->env);
    free(s->untyped);
    s->scratch = NULL;
    s->env = NULL;
    s->untyped = NULL;
}

static int fail(kl_list_stream *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(kl_list_stream *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    s->failed = 1;
    return -1;
}

static int env_add(kl_list_stream *s, const char *p, size_t n) {
    if (!n) return 0;
    if (s->envlen + n > KL_LIST_ENVELOPE_MAX)
        return fail(s, "LIST response has more than %zu bytes outside its items", KL_LIST_ENVELOPE_MAX);
    s->env = kl_buf_grow(s->env, &s->envcap, s->envlen + n + 1, 1, 1024);
    memcpy(s->env + s->envlen, p, n);
    s->envlen += n;
    return 0;
}

/* Keeps the start of an element that continues in the next read. */
static int item_add(kl_list_stream *s, const char *p, size_t n) {
    if (s->scratch_len + n > s->max_item)
        return fail(s, "LIST item %zu is larger than %zu bytes", s->out->n + 1, s->max_item);
    s->scratch = kl_buf_grow(s->scratch, &s->scratch_cap, s->scratch_len + n, 1, 16384);
    memcpy(s->scratch + s->scratch_len, p, n);
    s->scratch_len += n;
    return 0;
}

/* Decodes an element held alone in b (whose reference this takes) and
 * appends it to the list; pruned: b was pruned already as it was copied. */
static int item_blob(kl_list_stream *s, kl_blob *b, int pruned) {
    kl_list *l = s->out;
    l->items = kl_buf_grow(l->items, &s->items_cap, l->n + 1, sizeof *l->items, 64);
    s->untyped = kl_buf_grow(s->untyped, &s->untyped_cap, l->n + 1, 1, 64);
    char err[200];
    kl_obj *o = &l->items[l->n];
    int untyped = 0;
    int rc = s->in_rows ? kl_decode_row(b, o, err, sizeof err) : kl_decode_item(b, o, &untyped, err, sizeof err);
    kl_blob_unref(b);
    if (rc < 0) return fail(s, "LIST item %zu: %s", l->n + 1, err);
    if (s->prune && !pruned) kl_prune_obj(s->prune, o);
    s->untyped[l->n++] = (unsigned char)untyped;
    return 0;
}

/* The element ends with p[0, n): decode it and append it to the list. */
static int item_end(kl_list_stream *s, const char *p, size_t n) {
    size_t len = s->scratch_len + n;
    if (len > s->max_item) return fail(s, "LIST item %zu is larger than %zu bytes", s->out->n + 1, s->max_item);
    /* An item is pruned before it is parsed, so its dropped members are
     * never parsed: within one read, as it is copied out of it; spanning
     * reads, once joined, so that what a LIST gives does not hang on where
     * its reads split it (a malformed dropped member is passed over either
     * way). A Table row, whose object is a member of it, once decoded. */
    int early = s->prune && !s->in_rows;
    kl_blob *b = early && !s->scratch_len ? kl_prune_copy(s->prune, p, n) : NULL;
    if (!b) {
        b = kl_blob_alloc(len);
        if (s->scratch_len) memcpy(b->data, s->scratch, s->scratch_len);
        memcpy(b->data + s->scratch_len, p, n);
        kl_blob *cut = early && s->scratch_len ? kl_prune_copy(s->prune, b->data, len) : NULL;
        if (cut) {
            kl_blob_unref(b);
            b = cut;
        }
    }
    s->scratch_len = 0;
    /* Early, a NULL copy means the item holds nothing to drop. */
    return item_blob(s, b, early);
}

/* Whether a member name, as written (escapes included), reads want
 * (at most 5 bytes). */
static int names_member(const char *raw, size_t n, const char *want) {
    char name[5];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = raw[i];
        if (c == '\\') {
            /* Only \u00XX can spell a letter; every other escape cannot. */
            if (i + 5 >= n + 1 || raw[i + 1] != 'u') return 0;
            unsigned v = 0;
            for (int d = 2; d < 6; d++) {
                char h = raw[i + d];
                v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0'
                                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                        : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 999);
            }
            if (v > 0x7f) return 0;
            c = (char)v;
            i += 5;
        }
        if (k == sizeof name) return 0;
        name[k++] = c;
    }
    return k == strlen(want) && memcmp(name, want, k) == 0;
}

/* The member whose name was just read, at depth 1, is the items (or a
 * Table's rows): the first of the two names met is the one read, and a
 * later member of that name replaces it, items read so far dropped, as Go's
 * decoder keeps the last of duplicate keys (json.h). */
static void items_member(kl_list_stream *s) {
    int rows = s->rows && names_member(s->key, s->keylen, "rows");
    if (!rows && !names_member(s->key, s->keylen, "items")) return;
    if (s->items_seen && rows != s->in_rows) return;
    kl_list *l = s->out;
    for (size_t i = 0; i < l->n; i++) kl_obj_clear(&l->items[i]);
    l->n = 0;
    s->in_rows = rows;
    s->key_is_items = s->items_seen = 1;
}

/* Follows one byte outside strings; returns -1 on a structural error. */
static int structure(kl_list_stream *s, char c) {
    switch (c) {
    case '"':
        s->in_string = 1;
        if (s->depth == 1 && s->expect_key) {
            s->reading_key = 1;
            s->keylen = 0;
        }
        break;
    case '{':
    case '[':
        if (s->depth == 1 && c == '[' && s->key_is_items) s->in_items = s->items_seen = 1;
        s->key_is_items = 0;
        if (++s->depth == 1) s->expect_key = 1;
        if (s->depth > 1000000) return fail(s, "LIST response nests too deep");
        break;
    case '}':
    case ']':
        if (s->depth == 2 && s->in_items && c == ']') s->in_items = 0;
        if (--s->depth < 0) return fail(s, "LIST response is not valid JSON");
        break;
    case ',':
        if (s->depth == 1) s->expect_key = 1;
        break;
    case ':':
        if (s->depth == 1) {
            s->expect_key = 0;
            s->key_is_items = 0;
            if (s->keylen <= sizeof s->key) items_member(s);
        }
        break;
    default:
        break;
    }
    return 0;
}

static void string_byte(kl_list_stream *s, char c) {
    if (s->escape) {
        s->escape = 0;
    } else if (c == '\\') {
        s->escape = 1;
    } else if (c == '"') {
        s->in_string = 0;
        s->reading_key = 0;
        return;
    }
    if (s->reading_key) {
        if (s->keylen < sizeof s->key) s->key[s->keylen] = c;
        s->keylen++;
    }
}

/* ---- CBOR --------------------------------------------------------------
 * The body is one map (after any tag 55799). The reader follows it member
 * by member: each name, each value and each element of the items is one
 * data item whose end kl_cbor_scan finds across reads; the headers of the
 * map and of the items' array, which say how many members or elements come
 * (or that a break ends them), are read here. */

enum {
    CB_TOP,   /* the map's header, after any tag 55799 */
    CB_NAME,  /* a member's name, or the map's end */
    CB_VALUE, /* a member's value, the items aside */
    CB_ITEMS, /* the header of the items' array, after any tag 55799 */
    CB_ELEM,  /* an element of the items, or their end */
    CB_DONE,  /* the map ended: nothing may follow */
};

#define CB_BREAK 0xff
#define CB_SELF_DESCRIBED 55799

void kl_list_stream_cbor(kl_list_stream *s) {
    s->cbor = 1;
    s->cb.state = CB_TOP;
    s->cb.first = 1;
}

/* Keeps the start of a data item that continues in the next read. */
static int cb_keep(kl_list_stream *s, const char *p, size_t n) {
    if (s->cb.state == CB_ELEM) return item_add(s, p, n);
    if (s->scratch_len + n > KL_LIST_ENVELOPE_MAX)
        return fail(s, "LIST response has more than %zu bytes outside its items", KL_LIST_ENVELOPE_MAX);
    s->scratch = kl_buf_grow(s->scratch, &s->scratch_cap, s->scratch_len + n, 1, 16384);
    memcpy(s->scratch + s->scratch_len, p, n);
    s->scratch_len += n;
    return 0;
}

/* One byte of a header of the map or of the items' array: 1 once it is
 * whole (an indefinite length's is one byte), else 0. */
static int cb_header_byte(kl_list_stream *s, unsigned char c) {
    if (s->cb.hlen == 0) {
        unsigned ai = c & 31;
        s->cb.hneed = ai >= 24 && ai <= 27 ? 1 + (1u << (ai - 24)) : 1;
    }
    s->cb.hdr[s->cb.hlen++] = c;
    return s->cb.hlen == s->cb.hneed;
}

/* A whole header of the map or of the items' array. */
typedef struct {
    unsigned major;
    uint64_t arg;
    int indefinite;
    int reserved; /* an additional information of 28-30, which no item has */
} cb_head;

/* Reads the whole header into h, then forgets it: 1 when it is the
 * self-described tag, which may stand before the map or the array and is
 * passed over, else 0. */
static int cb_take_header(kl_list_stream *s, cb_head *h) {
    unsigned ai = s->cb.hdr[0] & 31;
    h->major = s->cb.hdr[0] >> 5;
    h->indefinite = ai == 31;
    h->reserved = ai >= 28 && ai <= 30;
    h->arg = ai < 24 ? ai : 0;
    for (unsigned k = 1; k < s->cb.hneed; k++) h->arg = h->arg << 8 | s->cb.hdr[k];
    s->cb.hlen = 0;
    return h->major == 6 && h->arg == CB_SELF_DESCRIBED && !h->indefinite;
}

static void cb_end_map(kl_list_stream *s) {
    s->cb.state = CB_DONE;
    env_add(s, "}", 1);
}

/* A member was read whole. */
static void cb_member_end(kl_list_stream *s) {
    s->cb.state = CB_NAME;
    if (!s->cb.map_open && --s->cb.members == 0) cb_end_map(s);
}

static void cb_collect(kl_list_stream *s) {
    s->cb.collecting = 1;
    s->scratch_len = 0;
    kl_cbor_scan_start(&s->cb.scan);
}

/* The JSON text of a whole data item, or NULL with the stream failed. */
static kl_blob *cb_json(kl_list_stream *s, const char *p, size_t n) {
    char err[200];
    kl_blob *json = kl_cbor_to_json(p, n, err, sizeof err);
    if (json) return json;
    if (s->cb.state == CB_ELEM) fail(s, "LIST item %zu is not CBOR klua reads: %s", s->out->n + 1, err);
    else if (s->cb.state == CB_NAME) fail(s, "LIST response has a member name that is not CBOR klua reads: %s", err);
    else fail(s, "LIST response's member %s is not CBOR klua reads: %s", s->cb.name, err);
    return NULL;
}

static int cb_is(const kl_blob *json, const char *quoted) {
    return json->len == strlen(quoted) && memcmp(json->data, quoted, json->len) == 0;
}

/* A member's name: written to the envelope; the items (or a Table's rows)
 * are chosen as the JSON reader chooses them (items_member). */
static int cb_name(kl_list_stream *s, kl_blob *json) {
    if (json->data[0] != '"') return fail(s, "LIST response has a member whose name is not a string");
    snprintf(s->cb.name, sizeof s->cb.name, "%.*s", (int)json->len, json->data);
    int rc = env_add(s, ",", s->cb.first ? 0 : 1) < 0 || env_add(s, json->data, json->len) < 0 ||
             env_add(s, ":", 1) < 0 ? -1 : 0;
    s->cb.first = 0;
    int rows = s->rows && cb_is(json, "\"rows\"");
    s->cb.state = CB_VALUE;
    if (rc == 0 && (rows || cb_is(json, "\"items\"")) && !(s->items_seen && rows != s->in_rows)) {
        kl_list *l = s->out;
        for (size_t i = 0; i < l->n; i++) kl_obj_clear(&l->items[i]);
        l->n = 0;
        s->in_rows = rows;
        s->items_seen = 1;
        s->cb.state = CB_ITEMS;
    }
    return rc;
}

static int cb_elem(kl_list_stream *s, kl_blob *json) {
    if (json->len > s->max_item) {
        kl_blob_unref(json);
        return fail(s, "LIST item %zu is larger than %zu bytes", s->out->n + 1, s->max_item);
    }
    if (item_blob(s, json, 0) < 0) return -1;
    if (!s->cb.items_open && --s->cb.elems == 0) cb_member_end(s);
    return 0;
}

/* A data item ends with p[0, n) (its start kept in scratch if it came
 * in earlier reads). */
static int cb_item_done(kl_list_stream *s, const char *p, size_t n) {
    s->cb.collecting = 0;
    if (s->scratch_len) {
        if (cb_keep(s, p, n) < 0) return -1;
        p = s->scratch;
        n = s->scratch_len;
    }
    if (s->cb.state == CB_ELEM && n > s->max_item)
        return fail(s, "LIST item %zu is larger than %zu bytes", s->out->n + 1, s->max_item);
    kl_blob *json = cb_json(s, p, n);
    s->scratch_len = 0;
    if (!json) return -1;
    if (s->cb.state == CB_ELEM) return cb_elem(s, json);
    int rc;
    if (s->cb.state == CB_NAME) {
        rc = cb_name(s, json);
    } else {
        rc = env_add(s, json->data, json->len);
        if (rc == 0) cb_member_end(s);
    }
    kl_blob_unref(json);
    return rc;
}

/* The items' value is not an array (null, say): read whole as any other
 * value, from the header bytes already read. */
static int cb_items_other(kl_list_stream *s) {
    s->cb.state = CB_VALUE;
    cb_collect(s);
    int done;
    kl_cbor_scan_feed(&s->cb.scan, (const char *)s->cb.hdr, s->cb.hlen, &done);
    if (done < 0) return fail(s, "LIST response's member %s is not CBOR klua reads: %s", s->cb.name, s->cb.scan.bad);
    if (cb_keep(s, (const char *)s->cb.hdr, s->cb.hlen) < 0) return -1;
    s->cb.hlen = 0;
    return done ? cb_item_done(s, "", 0) : 0;
}

static int cb_top(kl_list_stream *s) {
    cb_head h;
    if (cb_take_header(s, &h)) return 0;
    if (h.major != 5 || h.reserved)
        return fail(s, "LIST response is CBOR but not a map (its first byte is 0x%02x)", s->cb.hdr[0]);
    s->cb.map_open = h.indefinite;
    s->cb.members = h.arg;
    s->cb.state = CB_NAME;
    if (env_add(s, "{", 1) < 0) return -1;
    if (!h.indefinite && h.arg == 0) cb_end_map(s);
    return 0;
}

static int cb_items(kl_list_stream *s) {
    unsigned hlen = s->cb.hlen;
    cb_head h;
    if (cb_take_header(s, &h)) return 0;
    if (h.major != 4 || h.reserved) {
        /* not an array: the scanner and the transcoder read it, or name
         * what they refuse */
        s->cb.hlen = hlen;
        return cb_items_other(s);
    }
    s->cb.items_open = h.indefinite;
    s->cb.elems = h.arg;
    s->cb.state = CB_ELEM;
    if (env_add(s, "[]", 2) < 0) return -1;
    if (!h.indefinite && h.arg == 0) cb_member_end(s);
    return 0;
}

/* One byte between data items: a header's, or a break. */
static int cb_byte(kl_list_stream *s, unsigned char c) {
    switch (s->cb.state) {
    case CB_TOP: return cb_header_byte(s, c) ? cb_top(s) : 0;
    case CB_ITEMS: return cb_header_byte(s, c) ? cb_items(s) : 0;
    case CB_NAME: /* a break, as cb_starts_item said */
        cb_end_map(s);
        return 0;
    case CB_ELEM:
        cb_member_end(s);
        return 0;
    default: return fail(s, "LIST response has bytes after its CBOR map");
    }
}

/* Whether c starts a data item read whole: a name, a value, an element. */
static int cb_starts_item(const kl_list_stream *s, unsigned char c) {
    if (s->cb.state == CB_VALUE) return 1;
    if (s->cb.state == CB_NAME) return !(s->cb.map_open && c == CB_BREAK);
    if (s->cb.state == CB_ELEM) return !(s->cb.items_open && c == CB_BREAK);
    return 0;
}

static int cb_feed(kl_list_stream *s, const char *p, size_t n) {
    size_t start = 0; /* where the data item being read starts in p */
    size_t i = 0;
    while (i < n) {
        if (s->cb.collecting) {
            int done;
            i += kl_cbor_scan_feed(&s->cb.scan, p + i, n - i, &done);
            if (done < 0) {
                s->cb.collecting = 0; /* the error names the item, as cb_json's */
                return fail(s, "LIST response is not CBOR klua reads: %s", s->cb.scan.bad);
            }
            if (!done) break;
            if (cb_item_done(s, p + start, i - start) < 0 || s->failed) return -1;
            continue;
        }
        unsigned char c = (unsigned char)p[i];
        if (cb_starts_item(s, c)) {
            cb_collect(s);
            start = i;
            continue;
        }
        if (cb_byte(s, c) < 0 || s->failed) return -1;
        start = ++i;
    }
    return s->cb.collecting ? cb_keep(s, p + start, n - start) : 0;
}

/* What a body that ended before its map's end lacks. */
static int cb_ended_early(kl_list_stream *s) {
    const char *what = s->in_rows ? "rows" : "items";
    switch (s->cb.state) {
    case CB_TOP:
        return fail(s, s->cb.hlen ? "LIST response ended early: in the header of its CBOR map"
                                  : "LIST response ended early: it has no CBOR map");
    case CB_NAME:
        if (s->cb.collecting) return fail(s, "LIST response ended early: in the name of a member of its map");
        if (s->cb.map_open) return fail(s, "LIST response ended early: before the break that ends its map");
        return fail(s, "LIST response ended early: %llu more members of its map to come",
                    (unsigned long long)s->cb.members);
    case CB_VALUE: return fail(s, "LIST response ended early: in the value of its member %s", s->cb.name);
    case CB_ITEMS: return fail(s, "LIST response ended early: in the header of its %s", what);
    default:
        if (s->cb.collecting)
            return fail(s, "LIST response ended early: in item %zu of its %s", s->out->n + 1, what);
        if (s->cb.items_open)
            return fail(s, "LIST response ended early: after item %zu, before the break that ends its %s",
                        s->out->n, what);
        return fail(s, "LIST response ended early: after item %zu, %llu more of its %s to come", s->out->n,
                    (unsigned long long)s->cb.elems, what);
    }
}

int kl_list_stream_feed(kl_list_stream *s, const char *p, size_t n) {
    if (s->failed) return -1;
    if (s->cbor) return cb_feed(s, p, n);
    size_t start = 0; /* first byte of p not yet copied where it belongs */
    size_t i = 0;
    while (i < n) {
        if (s->collecting) {
            /* Inside an element: the scanner finds the bracket that closes it. */
            int done;
            i += kl_scan_value(&s->scan, p + i, n - i, &done);
            if (!done) break;
            if (item_end(s, p + start, i - start) < 0) return -1;
            s->collecting = 0;
            start = i;
            continue;
        }
        if (s->in_string) {
            if (!s->reading_key && !s->escape) {
                /* Most bytes are inside strings: skip to what matters. */
                while (i < n && p[i] != '"' && p[i] != '\\') i++;
                if (i == n) break;
            }
            string_byte(s, p[i++]);
            continue;
        }
        char c = p[i];
        if (s->in_items && s->depth == 2) {
            /* Between elements: separators stay out of the envelope. */
            if (c == '{') {
                if (env_add(s, p + start, i - start) < 0) return -1;
                start = i;
                s->collecting = 1;
                kl_scan_start(&s->scan);
                continue;
            }
            if (c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t') {
                if (env_add(s, p + start, i - start) < 0) return -1;
                start = ++i;
                continue;
            }
            if (c != ']') return fail(s, "LIST item %zu is not an object", s->out->n + 1);
        }
        if (structure(s, c) < 0) return -1;
        i++;
    }
    return s->collecting ? item_add(s, p + start, n - start) : env_add(s, p + start, n - start);
}

int kl_list_stream_finish(kl_list_stream *s) {
    if (s->failed) return -1;
    if (s->cbor && s->cb.state != CB_DONE) return cb_ended_early(s);
    if (s->collecting || s->depth != 0) return fail(s, "LIST response ended early");
    kl_list meta;
    char err[200];
    if (kl_decode_list(s->env ? s->env : "", s->envlen, &meta, err, sizeof err) < 0)
        return fail(s, "%s", err);
    kl_list *l = s->out;
    l->rv = meta.rv;
    l->cont = meta.cont;
    l->kind = meta.kind;
    l->api_version = meta.api_version;
    l->remaining = meta.remaining;
    l->has_items = s->items_seen;
    meta.rv = meta.cont = meta.kind = meta.api_version = NULL;
    kl_list_clear(&meta);
    for (size_t i = 0; i < l->n; i++)
        if (s->untyped[i]) kl_obj_set_type(&l->items[i], l->kind, l->api_version);
    return 0;
}

int kl_list_stream_status(const kl_list_stream *s, int *code, char **reason, char **message) {
    return s->env ? kl_decode_status(s->env, s->envlen, code, reason, message) : -1;
}
