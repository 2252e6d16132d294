/*
 * json.h - JSON parsing for the object pipeline: a C interface over simdjson.
 *
 * A document is parsed once into simdjson's DOM "tape": one array of 64-bit
 * words holding the values in document order, plus a buffer of unescaped
 * strings. Everything above this file (the event decoder, the lazy Lua views,
 * klua.json) navigates that tape directly with the inline readers below, so
 * reading one field of a parsed object costs a few word reads and no
 * allocation. docs/json.md records the measurements behind this choice.
 *
 * Tape words (simdjson's format, stable across its 3.x releases): the top
 * byte is a type tag, the low 56 bits a payload.
 *   'r'      root; tape[0]'s payload is the number of words in the tape
 *   '{' '['  payload bits 0-31: index one past the matching '}' / ']',
 *            bits 32-55: element count, saturated at 0xFFFFFF
 *   '}' ']'  payload: index of the matching '{' / '['
 *   '"'      payload: offset in the string buffer of a 32-bit length, the
 *            bytes, and a NUL (strings may also contain NULs)
 *   'l' 'u' 'd'  int64 / uint64 above INT64_MAX / double, value in the next word
 *   't' 'f' 'n'  true, false, null
 * The value of a document is at index 1. An object's members follow its '{'
 * as key string, value, key string, value, ...
 *
 * Parsing also accepts integers beyond 64 bits (they become doubles, as in
 * Lua) and reports errors with the byte offset where the JSON goes wrong.
 * Raw spans: the tape does not record where a value sat in the text, so
 * kl_json_raw_seek and kl_json_raw_skip recover it from the text itself.
 */
#ifndef KLUA_JSON_H
#define KLUA_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Nesting deeper than this is refused (simdjson's default limit). */
#define KL_JSON_MAX_DEPTH 1024

/* Where and why a text is not valid JSON. */
typedef struct kl_json_error {
    long long offset; /* byte where the text goes wrong (from 0), or -1 when unknown */
    char message[96]; /* e.g. "expected ':' after an object key" */
} kl_json_error;

/* A parsed tape, read through the kl_jt_ functions below. */
typedef struct kl_json_tape {
    const uint64_t *words; /* words[0] is the root word; the value is at 1 */
    const uint8_t *strings;
    size_t nwords;         /* words in use, both root words included */
} kl_json_tape;

/* A parsed document. Parsing uses a per-thread pool of parsers, so that
 * steady parsing does not allocate; a parsed document holds its parser until
 * kl_json_free, or until kl_json_compact swaps it for a copy of its tape. */
typedef struct kl_json_doc kl_json_doc;

/*
 * Parses text[0..len). padded promises that KL_BLOB_PADDING bytes after the
 * text are readable (blobs are); otherwise the text is copied first.
 * Returns a document, or NULL with *err filled.
 */
kl_json_doc *kl_json_parse(const char *text, size_t len, int padded, kl_json_error *err);
/* Frees d, returning its parser to the pool. NULL is ignored. */
void kl_json_free(kl_json_doc *d);
/* A parser holds buffers sized for the largest text it has parsed (about 17
 * times a Pod's JSON); the part of the tape a document uses is about 2
 * times. Returns a document holding only a copy of that part, with the same
 * selection, and frees d (its parser goes back to the pool); a document
 * that is already compact is returned as it is. For documents kept beyond
 * the moment they were parsed. */
kl_json_doc *kl_json_compact(kl_json_doc *d);
/* d's tape; valid until kl_json_free(d). */
kl_json_tape kl_json_doc_tape(const kl_json_doc *d);
/* Bytes of d's string buffer in use (counted on first call). */
size_t kl_json_doc_strings_size(kl_json_doc *d);
/* Bytes of memory d holds: its compact copy, or its parser's buffers (an
 * estimate from the parser's capacity). */
size_t kl_json_doc_memory(const kl_json_doc *d);
/* The tape index of the value a consumer of d should see: 1, the whole
 * document, unless kl_json_doc_select chose a value inside it (the decoder
 * selects a watch event's "object"). */
size_t kl_json_doc_selected(const kl_json_doc *d);
void kl_json_doc_select(kl_json_doc *d, size_t index);

/* Writes "<what> is not valid JSON at byte N: <message>" into buf. */
void kl_json_error_format(const kl_json_error *e, const char *what, char *buf, size_t size);

/*
 * Raw spans over the text a tape was parsed from, which must be valid JSON.
 * kl_json_raw_seek: given that the value at tape index from starts at byte
 * off, returns the byte where the value at tape index to (>= from) starts.
 * kl_json_raw_skip: returns the byte just past the value starting at off.
 * Both cost time linear in the bytes they pass over.
 */
size_t kl_json_raw_seek(const char *text, size_t len, size_t off, size_t from, size_t to);
size_t kl_json_raw_skip(const char *text, size_t len, size_t off);

/* ---- reading a tape ---- */

#define KL_JT_PAYLOAD 0x00ffffffffffffffULL

/* The type tag of the value at i: one of { [ " l u d t f n. */
static inline char kl_jt_type(const kl_json_tape *t, size_t i) { return (char)(t->words[i] >> 56); }

/* The index just past the value at i. */
static inline size_t kl_jt_next(const kl_json_tape *t, size_t i) {
    uint64_t w = t->words[i];
    switch ((char)(w >> 56)) {
    case '{':
    case '[': return (size_t)(uint32_t)w;
    case 'l':
    case 'u':
    case 'd': return i + 2;
    default: return i + 1;
    }
}

/* The index of the '}' or ']' closing the container at i. */
static inline size_t kl_jt_close(const kl_json_tape *t, size_t i) { return (size_t)(uint32_t)t->words[i] - 1; }

/* The string at i (a '"' word), with its length; it is also NUL-terminated. */
static inline const char *kl_jt_string(const kl_json_tape *t, size_t i, size_t *len) {
    const uint8_t *p = t->strings + (t->words[i] & KL_JT_PAYLOAD);
    uint32_t n;
    memcpy(&n, p, sizeof n);
    *len = n;
    return (const char *)p + sizeof n;
}

static inline int64_t kl_jt_int(const kl_json_tape *t, size_t i) { return (int64_t)t->words[i + 1]; }
static inline uint64_t kl_jt_uint(const kl_json_tape *t, size_t i) { return t->words[i + 1]; }
static inline double kl_jt_double(const kl_json_tape *t, size_t i) {
    double d;
    memcpy(&d, &t->words[i + 1], sizeof d);
    return d;
}

/* Elements of the container at i (members of an object). */
static inline size_t kl_jt_count(const kl_json_tape *t, size_t i) {
    size_t n = (size_t)((t->words[i] >> 32) & 0xffffff);
    if (n < 0xffffff) return n;
    int object = kl_jt_type(t, i) == '{';
    n = 0;
    for (size_t j = i + 1, end = kl_jt_close(t, i); j < end; j = kl_jt_next(t, j + object)) n++;
    return n;
}

/* The index of the value of member key in the object at i, or 0 when the
 * object has no such member (or i is not an object). Of duplicate keys the
 * last wins, as in Go's encoding/json and sigs.k8s.io/json, apimachinery's
 * decoder (duplicates are only a strict-mode warning there): a watch event
 * {"type":"ADDED","type":"DELETED"} is a DELETED, as client-go reads it. */
static inline size_t kl_jt_find(const kl_json_tape *t, size_t i, const char *key, size_t keylen) {
    if (kl_jt_type(t, i) != '{') return 0;
    size_t found = 0;
    for (size_t j = i + 1, end = kl_jt_close(t, i); j < end; j = kl_jt_next(t, j + 1)) {
        size_t n;
        const char *k = kl_jt_string(t, j, &n);
        if (n == keylen && memcmp(k, key, n) == 0) found = j + 1;
    }
    return found;
}

/* kl_jt_find with a NUL-terminated key. */
static inline size_t kl_jt_get(const kl_json_tape *t, size_t i, const char *key) {
    return kl_jt_find(t, i, key, strlen(key));
}

/* The string value of member key of the object at i, or NULL when it is
 * missing or not a string. */
static inline const char *kl_jt_get_string(const kl_json_tape *t, size_t i, const char *key, size_t *len) {
    size_t v = kl_jt_get(t, i, key);
    if (!v || kl_jt_type(t, v) != '"') return NULL;
    return kl_jt_string(t, v, len);
}

#ifdef __cplusplus
}
#endif

#endif
