/* decode.c - watch frames and LIST bodies; see decode.h. */
#include "wire/decode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonesc.h"
#include "wire/cbor.h"
#include "wire/json.h"
#include "base/xalloc.h"

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (errlen) vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* A malloc'd copy of the string member key of the object at i, dflt when
 * the member is missing or not a string (dflt NULL gives NULL). */
static char *dup_member(const kl_json_tape *t, size_t i, const char *key, const char *dflt) {
    size_t n;
    const char *s = i ? kl_jt_get_string(t, i, key, &n) : NULL;
    if (!s) return dflt ? kl_xstrdup(dflt) : NULL;
    char *c = kl_xmalloc(n + 1);
    memcpy(c, s, n);
    c[n] = 0;
    return c;
}

enum { ID_NAMESPACE, ID_NAME, ID_RV, ID_FIELDS };

/* Which identity field the metadata member named k[0, n) is, or -1. */
static int identity_field(const char *k, size_t n) {
    if (n == 4 && memcmp(k, "name", 4) == 0) return ID_NAME;
    if (n == 9 && memcmp(k, "namespace", 9) == 0) return ID_NAMESPACE;
    if (n == 15 && memcmp(k, "resourceVersion", 15) == 0) return ID_RV;
    return -1;
}

/* Fills o's identity from the object at i: metadata.namespace, .name and
 * .resourceVersion, found in one walk of metadata's members rather than
 * one each (every event and listed object is read so). As kl_jt_get_string
 * reads them, the last member of a name counts, and only as a string. */
static void read_identity(const kl_json_tape *t, size_t i, kl_obj *o) {
    const char *v[ID_FIELDS] = {NULL};
    size_t n[ID_FIELDS] = {0};
    size_t md = kl_jt_get(t, i, "metadata");
    if (md && kl_jt_type(t, md) == '{') {
        for (size_t j = md + 1, end = kl_jt_close(t, md); j < end; j = kl_jt_next(t, j + 1)) {
            size_t kn;
            const char *k = kl_jt_string(t, j, &kn);
            int f = identity_field(k, kn);
            if (f < 0) continue;
            v[f] = NULL;
            n[f] = 0;
            if (kl_jt_type(t, j + 1) == '"') v[f] = kl_jt_string(t, j + 1, &n[f]);
        }
    }
    kl_obj_set_identity(o, v[ID_NAMESPACE], n[ID_NAMESPACE], v[ID_NAME], n[ID_NAME], v[ID_RV], n[ID_RV]);
}

static const char *const ev_type_names[] = {"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"};
_Static_assert(KL_EV_ADDED == 0 && KL_EV_ERROR == 4 && sizeof ev_type_names / sizeof *ev_type_names == 5,
               "one name per kl_ev_type, in its order");

const char *kl_ev_type_name(kl_ev_type type) { return ev_type_names[type]; }

static int parse_type(const char *s, size_t n, kl_ev_type *type) {
    for (size_t i = 0; i < sizeof ev_type_names / sizeof *ev_type_names; i++) {
        if (strlen(ev_type_names[i]) == n && memcmp(ev_type_names[i], s, n) == 0) {
            *type = (kl_ev_type)i;
            return 0;
        }
    }
    return -1;
}

static int initial_events_end(const kl_json_tape *t, size_t obj) {
    size_t md = kl_jt_get(t, obj, "metadata");
    size_t ann = md ? kl_jt_get(t, md, "annotations") : 0;
    size_t n;
    const char *v = ann ? kl_jt_get_string(t, ann, "k8s.io/initial-events-end", &n) : NULL;
    return v && n == 4 && memcmp(v, "true", 4) == 0;
}

/* Fills code, reason and message from the Status object at i. */
static void read_status(const kl_json_tape *t, size_t i, int *code, char **reason, char **message) {
    size_t c = kl_jt_get(t, i, "code");
    *code = c && kl_jt_type(t, c) == 'l' ? (int)kl_jt_int(t, c) : 0;
    *reason = dup_member(t, i, "reason", NULL);
    *message = dup_member(t, i, "message", NULL);
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Where the root object of b starts: after any whitespace. */
static size_t root_offset(const kl_blob *b) {
    size_t at = 0;
    while (at < b->len && b->data[at] != '{') at++;
    return at;
}

/* The byte span of the value at tape index v, a member of the root object
 * of frame. The object is usually the root's last member, found from the
 * end of the frame; otherwise its bytes are scanned. */
static void object_span(const kl_blob *frame, const kl_json_tape *t, size_t v, size_t *off, size_t *len) {
    const char *s = frame->data;
    size_t start = kl_json_raw_seek(s, frame->len, root_offset(frame), 1, v), end;
    if (kl_jt_next(t, v) == kl_jt_close(t, 1)) {
        end = frame->len;
        while (end > 0 && s[end - 1] != '}') end--; /* the root's '}' */
        end--;
        while (end > start && is_ws(s[end - 1])) end--;
    } else {
        end = kl_json_raw_skip(s, frame->len, start);
    }
    *off = start;
    *len = end - start;
}

static int decode_error_event(const kl_json_tape *t, size_t obj, kl_event *ev) {
    read_status(t, obj, &ev->code, &ev->reason, &ev->message);
    return 0;
}

static int check_kind(const kl_json_tape *t, size_t obj, const char *expect, char *err, size_t errlen) {
    size_t n;
    const char *kind = expect ? kl_jt_get_string(t, obj, "kind", &n) : NULL;
    if (!kind || (strlen(expect) == n && memcmp(kind, expect, n) == 0)) return 0;
    return fail(err, errlen, "watch event object is a %.*s, expected %s", (int)(n > 64 ? 64 : n), kind, expect);
}

static int decode_object_event(kl_blob *frame, const kl_json_tape *t, size_t obj, const char *expect_kind,
                               kl_event *ev, char *err, size_t errlen) {
    if (check_kind(t, obj, expect_kind, err, errlen) < 0) return -1;
    read_identity(t, obj, &ev->obj);
    if (ev->type != KL_EV_BOOKMARK && !ev->obj.name[0])
        return fail(err, errlen, "watch event object has no metadata.name");
    if (ev->type == KL_EV_BOOKMARK) ev->initial_events_end = initial_events_end(t, obj);
    object_span(frame, t, obj, &ev->obj.off, &ev->obj.len);
    ev->obj.blob = kl_blob_ref(frame);
    return 0;
}

/* Whether the object at i is a meta.k8s.io Table (kind and group both). */
static int is_table(const kl_json_tape *t, size_t i) {
    size_t kn = 0, an = 0;
    const char *k = kl_jt_get_string(t, i, "kind", &kn);
    const char *a = kl_jt_get_string(t, i, "apiVersion", &an);
    return k && kn == 5 && memcmp(k, "Table", 5) == 0 && a && an > 12 && memcmp(a, "meta.k8s.io/", 12) == 0;
}

/* The tape index of the object of the Table row at row, or 0 when the row
 * carries none (includeObject=None). */
static size_t row_object(const kl_json_tape *t, size_t row) {
    size_t o = kl_jt_type(t, row) == '{' ? kl_jt_get(t, row, "object") : 0;
    return o && kl_jt_type(t, o) == '{' ? o : 0;
}

/* The tape index of the one row of the Table at table, or 0 when it has
 * not exactly one. */
static size_t one_row(const kl_json_tape *t, size_t table) {
    size_t rows = kl_jt_get(t, table, "rows");
    return rows && kl_jt_type(t, rows) == '[' && kl_jt_count(t, rows) == 1 ? rows + 1 : 0;
}

/* A watch event of a Table watch carries a Table of one row (kube-apiserver
 * transforms each event's object, bookmarks included; ERROR's Status is
 * left alone): *obj becomes that row's object. */
static int unwrap_table(const kl_json_tape *t, size_t *obj, char *err, size_t errlen) {
    size_t row = one_row(t, *obj);
    if (!row) return fail(err, errlen, "watch event Table has not exactly one row");
    size_t o = row_object(t, row);
    if (!o) return fail(err, errlen, "watch event Table row has no object (includeObject=Object was not honoured)");
    *obj = o;
    return 0;
}

/* Reads the parsed frame into ev and sets *objp to the object's tape index. */
static int decode_parsed(kl_blob *frame, kl_json_doc *doc, const char *expect_kind, int rows, kl_event *ev,
                         size_t *objp, char *err, size_t errlen) {
    kl_json_tape t = kl_json_doc_tape(doc);
    if (kl_jt_type(&t, 1) != '{') return fail(err, errlen, "watch event is not a JSON object");
    size_t n;
    const char *type = kl_jt_get_string(&t, 1, "type", &n);
    if (!type) return fail(err, errlen, "watch event has no type");
    if (parse_type(type, n, &ev->type) < 0)
        return fail(err, errlen, "watch event has unknown type \"%.*s\"", (int)(n > 64 ? 64 : n), type);
    size_t obj = kl_jt_get(&t, 1, "object");
    if (!obj || kl_jt_type(&t, obj) != '{') return fail(err, errlen, "watch event has no object");
    if (ev->type == KL_EV_ERROR) return decode_error_event(&t, obj, ev);
    if (rows && is_table(&t, obj) && unwrap_table(&t, &obj, err, errlen) < 0) return -1;
    *objp = obj;
    return decode_object_event(frame, &t, obj, expect_kind, ev, err, errlen);
}

static int decode_event(kl_blob *frame, const char *expect_kind, int rows, kl_event *ev, char *err,
                        size_t errlen) {
    memset(ev, 0, sizeof *ev);
    kl_json_error jerr;
    kl_json_doc *doc = kl_json_parse(frame->data, frame->len, 1, &jerr);
    if (!doc) {
        kl_json_error_format(&jerr, "watch event", err, errlen);
        return -1;
    }
    size_t obj = 0;
    if (decode_parsed(frame, doc, expect_kind, rows, ev, &obj, err, errlen) < 0) {
        kl_json_free(doc);
        kl_event_clear(ev);
        return -1;
    }
    if (ev->type == KL_EV_ERROR) {
        kl_json_free(doc);
    } else {
        /* Events may wait in a queue before a view reads them: keep the
         * compact tape, not the parser (which goes back to the pool). */
        kl_json_doc_select(doc, obj);
        ev->parsed = kl_json_compact(doc);
    }
    return 0;
}

int kl_decode_event(kl_blob *frame, const char *expect_kind, kl_event *ev, char *err, size_t errlen) {
    return decode_event(frame, expect_kind, 0, ev, err, errlen);
}

int kl_decode_table_event(kl_blob *frame, const char *expect_kind, kl_event *ev, char *err, size_t errlen) {
    return decode_event(frame, expect_kind, 1, ev, err, errlen);
}

void kl_event_clear(kl_event *ev) {
    kl_obj_clear(&ev->obj);
    free(ev->reason);
    free(ev->message);
    kl_json_free(ev->parsed);
    memset(ev, 0, sizeof *ev);
}

/* ---- LIST ---- */

static void read_list_meta(const kl_json_tape *t, kl_list *out) {
    out->kind = dup_member(t, 1, "kind", NULL);
    out->api_version = dup_member(t, 1, "apiVersion", NULL);
    size_t md = kl_jt_get(t, 1, "metadata");
    if (md && kl_jt_type(t, md) != '{') md = 0;
    out->rv = dup_member(t, md, "resourceVersion", "");
    size_t n;
    if (md && kl_jt_get_string(t, md, "continue", &n)) out->cont = dup_member(t, md, "continue", NULL);
    size_t rem = md ? kl_jt_get(t, md, "remainingItemCount") : 0;
    out->remaining = rem && kl_jt_type(t, rem) == 'l' ? (long long)kl_jt_int(t, rem) : -1;
}

/* Whether the object at i has neither a kind nor an apiVersion (absent or
 * empty, as apimachinery reads them). */
static int is_untyped(const kl_json_tape *t, size_t i) {
    size_t kn = 0, an = 0;
    const char *k = kl_jt_get_string(t, i, "kind", &kn);
    const char *a = kl_jt_get_string(t, i, "apiVersion", &an);
    return (!k || !kn) && (!a || !an);
}

/* The length of s written as a JSON string by put_json_string. */
static size_t json_string_len(const char *s, size_t len) { return 2 + kl_jsonesc_len(s, len); }

/* Appends s as a JSON string to buf at *n. */
static void put_json_string(char *buf, size_t *n, const char *s, size_t len) {
    buf[(*n)++] = '"';
    *n += kl_jsonesc_put(buf + *n, s, len);
    buf[(*n)++] = '"';
}

void kl_obj_set_type(kl_obj *o, const char *list_kind, const char *api_version) {
    if (!list_kind || !api_version || !api_version[0]) return;
    size_t kn = strlen(list_kind), an = strlen(api_version);
    if (kn >= 4 && memcmp(list_kind + kn - 4, "List", 4) == 0) kn -= 4;
    if (!kn) return;
    const char *src = o->blob->data + o->off;
    size_t len = o->len, body = 1; /* past the object's '{' */
    while (body < len && is_ws(src[body])) body++;
    int empty = body < len && src[body] == '}';
    size_t total = 8 + json_string_len(list_kind, kn) + 14 + json_string_len(api_version, an) + !empty +
                   (len - body);
    kl_blob *b = kl_blob_alloc(total);
    size_t n = 0;
    memcpy(b->data, "{\"kind\":", 8);
    n = 8;
    put_json_string(b->data, &n, list_kind, kn);
    memcpy(b->data + n, ",\"apiVersion\":", 14);
    n += 14;
    put_json_string(b->data, &n, api_version, an);
    if (!empty) b->data[n++] = ',';
    memcpy(b->data + n, src + body, len - body);
    n += len - body;
    kl_blob_unref(o->blob);
    o->blob = b;
    o->off = 0;
    o->len = n;
}

/* Copies item k, the value at tape index i spanning body[off, end), into
 * out->items[k]. */
static int read_item(const char *body, size_t off, size_t end, const kl_json_tape *t, size_t i, kl_obj *o,
                     size_t k, char *err, size_t errlen) {
    if (kl_jt_type(t, i) != '{') return fail(err, errlen, "LIST item %zu is not an object", k + 1);
    read_identity(t, i, o);
    if (!o->name[0]) return fail(err, errlen, "LIST item %zu has no metadata.name", k + 1);
    o->blob = kl_blob_new(body + off, end - off);
    o->off = 0;
    o->len = end - off;
    return 0;
}

static int read_items(const char *body, size_t len, const kl_json_tape *t, size_t items, kl_list *out, char *err,
                      size_t errlen) {
    size_t n = kl_jt_count(t, items);
    out->items = kl_xcalloc(n ? n : 1, sizeof *out->items);
    size_t root_off = 0;
    while (root_off < len && body[root_off] != '{') root_off++;
    size_t off = kl_json_raw_seek(body, len, root_off, 1, items) + 1; /* past '[' */
    size_t i = items + 1;
    for (size_t k = 0; k < n; k++, i = kl_jt_next(t, i)) {
        off = kl_json_raw_seek(body, len, off, i, i); /* skips separators */
        size_t end = kl_json_raw_skip(body, len, off);
        out->n = k + 1;
        if (read_item(body, off, end, t, i, &out->items[k], k, err, errlen) < 0) return -1;
        if (is_untyped(t, i)) kl_obj_set_type(&out->items[k], out->kind, out->api_version);
        off = end;
    }
    return 0;
}

static int decode_list_tape(const char *body, size_t len, const kl_json_tape *t, kl_list *out, char *err,
                            size_t errlen) {
    if (kl_jt_type(t, 1) != '{') return fail(err, errlen, "LIST response is not a JSON object");
    size_t items = kl_jt_get(t, 1, "items");
    out->has_items = items != 0;
    if (items && kl_jt_type(t, items) == 'n') items = 0;
    if (items && kl_jt_type(t, items) != '[') return fail(err, errlen, "LIST response items is not an array");
    read_list_meta(t, out);
    if (!items) return 0;
    return read_items(body, len, t, items, out, err, errlen);
}

int kl_decode_list(const char *body, size_t len, kl_list *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->remaining = -1;
    kl_json_error jerr;
    kl_json_doc *doc = kl_json_parse(body, len, 0, &jerr);
    if (!doc) {
        kl_json_error_format(&jerr, "LIST response", err, errlen);
        return -1;
    }
    kl_json_tape t = kl_json_doc_tape(doc);
    int rc = decode_list_tape(body, len, &t, out, err, errlen);
    kl_json_free(doc);
    if (rc < 0) kl_list_clear(out);
    return rc;
}

static int is_kind(const char *kind, const char *want, const char *suffix) {
    size_t n = strlen(want);
    return strncmp(kind, want, n) == 0 && strcmp(kind + n, suffix) == 0;
}

int kl_list_check(const kl_list *l, const char *kind, int table, char *err, size_t errlen) {
    if (l->kind && l->kind[0] && kind && !is_kind(l->kind, kind, "List") && !(table && !strcmp(l->kind, "Table")))
        return fail(err, errlen, "the response is a %.64s, not a %sList%s", l->kind, kind,
                    table ? " or a Table" : "");
    if (!l->has_items)
        return fail(err, errlen, "the response has no %s", table ? "rows or items" : "items");
    if (!l->rv || !l->rv[0]) return fail(err, errlen, "the response has no metadata.resourceVersion");
    return 0;
}

/* One element of a LIST's items, or with row set of a Table's rows, whose
 * object becomes *o over the element's blob. */
static int decode_listed(kl_blob *b, int row, kl_obj *o, int *untyped, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    kl_json_error jerr;
    kl_json_doc *doc = kl_json_parse(b->data, b->len, 1, &jerr);
    if (!doc) {
        kl_json_error_format(&jerr, row ? "Table row" : "object", err, errlen);
        return -1;
    }
    kl_json_tape t = kl_json_doc_tape(doc);
    size_t obj = row ? row_object(&t, 1) : kl_jt_type(&t, 1) == '{' ? 1 : 0;
    int rc = 0;
    if (!obj) {
        rc = fail(err, errlen, row ? "Table row has no object (includeObject=Object was not honoured)"
                                   : "not an object");
    } else {
        read_identity(&t, obj, o);
        if (!o->name[0]) rc = fail(err, errlen, "no metadata.name");
        else if (row) object_span(b, &t, obj, &o->off, &o->len);
        else o->len = b->len;
    }
    if (rc == 0 && untyped) *untyped = is_untyped(&t, obj);
    kl_json_free(doc);
    if (rc < 0) {
        kl_obj_clear(o);
        return -1;
    }
    o->blob = kl_blob_ref(b);
    return 0;
}

int kl_decode_item(kl_blob *item, kl_obj *o, int *untyped, char *err, size_t errlen) {
    return decode_listed(item, 0, o, untyped, err, errlen);
}

int kl_decode_row(kl_blob *row, kl_obj *o, char *err, size_t errlen) {
    return decode_listed(row, 1, o, NULL, err, errlen);
}

size_t kl_decode_row_cells(const kl_blob *b, const kl_json_tape *t, size_t off) {
    if (kl_jt_type(t, 1) != '{') return 0;
    size_t row = 1;
    if (!kl_jt_get(t, 1, "cells")) {
        size_t ev = kl_jt_get(t, 1, "object");
        row = ev ? one_row(t, ev) : 0;
    }
    size_t obj = row ? row_object(t, row) : 0;
    size_t cells = obj ? kl_jt_get(t, row, "cells") : 0;
    if (!cells || kl_jt_type(t, cells) != '[') return 0;
    return kl_json_raw_seek(b->data, b->len, root_offset(b), 1, obj) == off ? cells : 0;
}

void kl_list_clear(kl_list *l) {
    for (size_t i = 0; i < l->n; i++) kl_obj_clear(&l->items[i]);
    free(l->items);
    free(l->rv);
    free(l->cont);
    free(l->kind);
    free(l->api_version);
    memset(l, 0, sizeof *l);
    l->remaining = -1;
}

/* kube-apiserver writes an error's Status in the type the request accepted:
 * CBOR, self-described (its 0xd9d9f7 prefix), for a CBOR request. */
static int decode_cbor_status(const char *body, size_t len, int *code, char **reason, char **message) {
    char err[200];
    kl_blob *json = kl_cbor_to_json(body, len, err, sizeof err);
    if (!json) return -1;
    int rc = kl_decode_status(json->data, json->len, code, reason, message);
    kl_blob_unref(json);
    return rc;
}

int kl_decode_status(const char *body, size_t len, int *code, char **reason, char **message) {
    if (len >= 3 && memcmp(body, KL_CBOR_MAGIC, 3) == 0) return decode_cbor_status(body, len, code, reason, message);
    kl_json_error jerr;
    kl_json_doc *doc = kl_json_parse(body, len, 0, &jerr);
    if (!doc) return -1;
    kl_json_tape t = kl_json_doc_tape(doc);
    size_t n;
    const char *kind = kl_jt_type(&t, 1) == '{' ? kl_jt_get_string(&t, 1, "kind", &n) : NULL;
    int rc = -1;
    if (kind && n == 6 && memcmp(kind, "Status", 6) == 0) {
        read_status(&t, 1, code, reason, message);
        rc = 0;
    }
    kl_json_free(doc);
    return rc;
}
