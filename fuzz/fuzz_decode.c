/*
 * fuzz_decode.c - libFuzzer target for the decoders (src/wire/decode.c, and
 * through them src/wire/json.cc).
 *
 * The input is one watch frame or response body. It goes through
 * kl_decode_event (with no expected kind and with "Pod"),
 * kl_decode_table_event, kl_decode_list, kl_decode_item, kl_decode_row and
 * kl_decode_status (fuzz_list_stream covers the streaming LIST decoder). Failures are fine; a success must keep the
 * decoders' promises, which the rest of klua relies on:
 *   - an event's object span lies inside the frame, is valid JSON for an
 *     object on its own, and says exactly what the parsed tape kept for the
 *     view says (the store keeps the span, views read the tape);
 *   - every object event has a name, an ERROR event has neither object nor
 *     tape, and a failed decode leaves the event empty;
 *   - every LIST item's bytes are a JSON object with a name;
 *   - a lone item decodes as the whole of its blob, with a name;
 *   - a Table row's object is a JSON object inside the row, with a name;
 *   - the frame's references are back to the caller's alone.
 * Any broken promise aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/decode.h"
#include "wire/json.h"

static void die(const char *what) {
    fprintf(stderr, "fuzz_decode: %s\n", what);
    abort();
}

/* 1 when the values at a[i] and b[j] are the same JSON value. */
static int same_value(const kl_json_tape *a, size_t i, const kl_json_tape *b, size_t j) {
    char type = kl_jt_type(a, i);
    if (type != kl_jt_type(b, j)) return 0;
    size_t n, m;
    switch (type) {
    case '{':
    case '[':
        if (kl_jt_count(a, i) != kl_jt_count(b, j)) return 0;
        for (size_t x = i + 1, y = j + 1; x < kl_jt_close(a, i); x = kl_jt_next(a, x), y = kl_jt_next(b, y))
            if (!same_value(a, x, b, y)) return 0;
        return 1;
    case '"': {
        const char *s = kl_jt_string(a, i, &n), *t = kl_jt_string(b, j, &m);
        return n == m && memcmp(s, t, n) == 0;
    }
    case 'l':
    case 'u':
    case 'd': return a->words[i + 1] == b->words[j + 1];
    default: return 1;
    }
}

/* Parses text[0..len) on its own; dies unless it is a JSON object. */
static kl_json_doc *parse_object(const char *text, size_t len, const char *what) {
    kl_json_error jerr;
    kl_json_doc *d = kl_json_parse(text, len, 0, &jerr);
    if (!d) die(what);
    kl_json_tape t = kl_json_doc_tape(d);
    if (kl_jt_type(&t, 1) != '{') die(what);
    return d;
}

static void check_object_event(const kl_blob *frame, const kl_event *ev) {
    if (ev->obj.blob != frame) die("an event's object is not in its frame");
    if (ev->obj.off > frame->len || ev->obj.len > frame->len - ev->obj.off)
        die("an event's object span runs past its frame");
    if (!ev->obj.ns || !ev->obj.name || !ev->obj.rv) die("an event lacks its identity strings");
    if (ev->type != KL_EV_BOOKMARK && !ev->obj.name[0]) die("an object event has no name");
    if (!ev->parsed) die("an object event has no parsed tape");
    kl_json_doc *span = parse_object(frame->data + ev->obj.off, ev->obj.len,
                                     "an event's object span is not a JSON object on its own");
    kl_json_tape a = kl_json_doc_tape(span), b = kl_json_doc_tape(ev->parsed);
    size_t sel = kl_json_doc_selected(ev->parsed);
    if (sel == 0 || sel >= b.nwords || !same_value(&a, 1, &b, sel))
        die("an event's object span and its parsed tape disagree");
    kl_json_free(span);
}

/* table: as an event of a Table watch (kl_decode_table_event). */
static void decode_event(const uint8_t *data, size_t size, const char *kind, int table) {
    kl_blob *frame = kl_blob_new((const char *)data, size);
    if (!frame) die("out of memory");
    kl_event ev;
    char err[256] = "";
    int rc = table ? kl_decode_table_event(frame, kind, &ev, err, sizeof err)
                   : kl_decode_event(frame, kind, &ev, err, sizeof err);
    if (rc < 0) {
        if (!err[0]) die("a failed decode gives no message");
        if (ev.obj.blob || ev.parsed || ev.reason || ev.message) die("a failed decode leaves the event filled");
    } else if (ev.type == KL_EV_ERROR) {
        if (ev.obj.blob || ev.parsed) die("an ERROR event carries an object");
    } else {
        check_object_event(frame, &ev);
    }
    kl_event_clear(&ev);
    if (frame->refs != 1) die("the decoder kept a reference on the frame");
    kl_blob_unref(frame);
}

static void decode_list(const uint8_t *data, size_t size) {
    kl_list list;
    char err[256] = "";
    if (kl_decode_list((const char *)data, size, &list, err, sizeof err) < 0) {
        if (!err[0]) die("a failed LIST decode gives no message");
        if (list.items || list.n || list.rv || list.cont) die("a failed LIST decode leaves the list filled");
        return;
    }
    if (!list.rv) die("a LIST has no resourceVersion string");
    for (size_t i = 0; i < list.n; i++) {
        const kl_obj *o = &list.items[i];
        if (!o->blob || o->blob->refs != 1 || o->off + o->len > o->blob->len) die("a LIST item has a bad blob");
        if (!o->name || !o->name[0] || !o->ns || !o->rv) die("a LIST item lacks its identity");
        kl_json_free(parse_object(o->blob->data + o->off, o->len, "a LIST item is not a JSON object on its own"));
    }
    kl_list_clear(&list);
}

/* A decoder of one object out of a blob of its own, and what it promises of
 * the object it decoded. */
typedef struct {
    int (*decode)(kl_blob *b, kl_obj *o, char *err, size_t errlen);
    void (*check)(const kl_blob *b, const kl_obj *o);
} one_object;

/* Beyond what each promises of its object, every such decoder fails with a
 * message and keeps nothing, and hands the blob's one reference back. */
static void decode_one(const uint8_t *data, size_t size, const one_object *d) {
    kl_blob *b = kl_blob_new((const char *)data, size);
    if (!b) die("out of memory");
    kl_obj o;
    char err[256] = "";
    if (d->decode(b, &o, err, sizeof err) == 0) {
        d->check(b, &o);
        kl_obj_clear(&o);
    } else if (!err[0] || o.blob) {
        die("a failed decode of one object gives no message or keeps the blob");
    }
    if (b->refs != 1) die("the decoder of one object kept a reference");
    kl_blob_unref(b);
}

static int decode_item(kl_blob *b, kl_obj *o, char *err, size_t errlen) {
    return kl_decode_item(b, o, NULL, err, errlen);
}

static void check_item(const kl_blob *b, const kl_obj *o) {
    if (o->blob != b || o->off != 0 || o->len != b->len || !o->name || !o->name[0])
        die("a decoded item is not its whole blob with a name");
}

static void check_row(const kl_blob *b, const kl_obj *o) {
    if (o->blob != b || o->off > b->len || o->len > b->len - o->off || !o->name || !o->name[0])
        die("a decoded row's object is not inside its blob with a name");
    kl_json_free(parse_object(b->data + o->off, o->len, "a row's object is not a JSON object on its own"));
}

static void decode_status(const uint8_t *data, size_t size) {
    int code = -7; /* no Status has it: shows whether a failed decode wrote code */
    char *reason = NULL, *message = NULL;
    if (kl_decode_status((const char *)data, size, &code, &reason, &message) < 0) {
        if (code != -7 || reason || message) die("a failed Status decode touched its outputs");
        return;
    }
    free(reason);
    free(message);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    decode_event(data, size, NULL, 0);
    decode_event(data, size, "Pod", 0);
    decode_event(data, size, "Pod", 1);
    decode_list(data, size);
    static const one_object item = {decode_item, check_item}, row = {kl_decode_row, check_row};
    decode_one(data, size, &item);
    decode_one(data, size, &row);
    decode_status(data, size);
    return 0;
}
