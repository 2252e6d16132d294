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
    s->out->pruned = p != NULL;
}

void kl_list_stream_rows(kl_list_stream *s) { s->rows = 1; }

void kl_list_stream_free(kl_list_stream *s) {
    free(s->scratch);
    free(s->env);
    free(s->untyped);
    free(s->raw);
    s->raw = NULL;
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

/* The element ends with p[0, n): decode it and append it to the list. */
static int item_end(kl_list_stream *s, const char *p, size_t n) {
    size_t len = s->scratch_len + n;
    if (len > s->max_item) return fail(s, "LIST item %zu is larger than %zu bytes", s->out->n + 1, s->max_item);
    /* An item within one read is pruned as it is copied out of it, and
     * parsed pruned; one that spans reads, or a Table row (whose object is
     * a member of it), once it is decoded. */
    int early = s->prune && !s->scratch_len && !s->in_rows;
    kl_blob *b = early ? kl_prune_copy(s->prune, p, n) : NULL;
    if (!b) {
        b = kl_blob_alloc(len);
        if (s->scratch_len) memcpy(b->data, s->scratch, s->scratch_len);
        memcpy(b->data + s->scratch_len, p, n);
    }
    s->scratch_len = 0;
    kl_list *l = s->out;
    l->items = kl_buf_grow(l->items, &s->items_cap, l->n + 1, sizeof *l->items, 64);
    s->untyped = kl_buf_grow(s->untyped, &s->untyped_cap, l->n + 1, 1, 64);
    char err[200];
    kl_obj *o = &l->items[l->n];
    int untyped = 0;
    int rc = s->in_rows ? kl_decode_row(b, o, err, sizeof err) : kl_decode_item(b, o, &untyped, err, sizeof err);
    kl_blob_unref(b);
    if (rc < 0) return fail(s, "LIST item %zu: %s", l->n + 1, err);
    if (s->prune && !early) kl_prune_obj(s->prune, o);
    s->untyped[l->n++] = (unsigned char)untyped;
    return 0;
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

void kl_list_stream_cbor(kl_list_stream *s) { s->cbor = 1; }

/* A CBOR body is kept whole, then read as its JSON text. */
static int cbor_keep(kl_list_stream *s, const char *p, size_t n) {
    s->raw = kl_buf_grow(s->raw, &s->raw_cap, s->raw_len + n, 1, 65536);
    memcpy(s->raw + s->raw_len, p, n);
    s->raw_len += n;
    return 0;
}

static int cbor_body(kl_list_stream *s) {
    char err[200];
    kl_blob *json = kl_cbor_to_json(s->raw ? s->raw : "", s->raw_len, err, sizeof err);
    free(s->raw);
    s->raw = NULL;
    s->raw_len = s->raw_cap = 0;
    s->cbor = 0;
    if (!json) return fail(s, "LIST response is not CBOR klua reads: %s", err);
    int rc = kl_list_stream_feed(s, json->data, json->len);
    kl_blob_unref(json);
    return rc;
}

int kl_list_stream_feed(kl_list_stream *s, const char *p, size_t n) {
    if (s->failed) return -1;
    if (s->cbor) return cbor_keep(s, p, n);
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
    if (s->cbor && cbor_body(s) < 0) return -1;
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
