// json.cc - parsing through simdjson's DOM, error offsets, raw spans; see json.h.
//
// The only C++ in klua: everything here is reached through the C functions
// of json.h, and no exception leaves them.
#include "wire/json.h"

extern "C" {
#include "base/pool.h"
#include "base/utf8.h"
#include "base/xalloc.h"
}

#include <simdjson.h>

#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "base/blob.h"

static_assert(KL_BLOB_PADDING >= simdjson::SIMDJSON_PADDING, "blobs must be padded for simdjson");

struct parser_slot;

// A parsed document: the tape of a pooled parser (slot set), or a compact
// copy of the part of the tape in use, allocated with its words and strings
// right after this struct (slot NULL).
struct kl_json_doc {
    parser_slot *slot;
    kl_json_tape tape;
    size_t nstrings; // bytes of the string buffer in use; SIZE_MAX until counted
    size_t selected;
};

struct parser_slot {
    simdjson::dom::parser parser;
    // A padded copy of text that did not come padded, kept for reuse.
    std::unique_ptr<char[]> copy;
    size_t copy_cap = 0;
    kl_json_doc doc{};
};

namespace {

// Idle parsers of this thread. Reusing one saves its buffers' allocation on
// every event (about a tenth of the parse time, docs/json.md). Any caller
// may take any parser, so the pool is a cache, not state two runtimes share
// in any visible way. Parsers grown by a huge document are freed instead of
// kept, so one big LIST page does not pin its buffers forever.
constexpr size_t kPoolMax = 4;
constexpr size_t kPoolCapacityMax = 256 * 1024;

struct pool {
    std::vector<parser_slot *> idle;
    ~pool() {
        for (parser_slot *p : idle) delete p;
    }
};
thread_local pool parsers;

// Compact copies freed lately, for the next compaction: an event's copy (a
// 3 KB Pod's is 4-5 KiB) lives from its decode to its dispatch, a round or
// a few later, so every event would malloc and free one, too big for
// glibc's per-thread cache. The Lua allocator's pool (pool.h) keeps such
// blocks, by size class, and hands back the one freed last, still in the
// core's cache; a copy's size is known again when it is freed.
struct compact_pool {
    kl_pool pool{};
    ~compact_pool() { kl_pool_release(&pool); }
};
thread_local compact_pool compacts;

kl_json_doc *compact_alloc(size_t bytes) {
    void *c = kl_pool_realloc(&compacts.pool, nullptr, 0, bytes);
    if (!c) kl_oom(bytes);
    return static_cast<kl_json_doc *>(c);
}

void compact_free(kl_json_doc *c) { kl_pool_realloc(&compacts.pool, c, kl_json_doc_memory(c), 0); }

parser_slot *take_slot() {
    if (!parsers.idle.empty()) {
        parser_slot *p = parsers.idle.back();
        parsers.idle.pop_back();
        return p;
    }
    return new (std::nothrow) parser_slot();
}

void release_slot(parser_slot *p) {
    try {
        if (parsers.idle.size() < kPoolMax && p->parser.capacity() <= kPoolCapacityMax) {
            if (p->copy_cap > kPoolCapacityMax) {
                p->copy.reset();
                p->copy_cap = 0;
            }
            parsers.idle.push_back(p);
            return;
        }
    } catch (...) {
    }
    delete p;
}

// The tape index of t's last string, or 0: every word looked at.
size_t scan_last_string(const kl_json_tape *t) {
    size_t last = 0;
    for (size_t i = 1; i < t->nwords; i++) {
        char type = kl_jt_type(t, i);
        if (type == '"') last = i;
        else if (type == 'l' || type == 'u' || type == 'd') i++;
    }
    return last;
}

// The tape index of t's last string, or 0, walking only down the last
// member of each container: an object's last key follows every string
// before it, so only the earlier elements of an array can hide the answer
// when nothing after them is a string. Then the whole tape is scanned.
size_t last_string(const kl_json_tape *t) {
    size_t last = 0;
    int skipped = 0; // array elements passed over since last was set
    for (size_t i = 1;;) {
        char type = kl_jt_type(t, i);
        if (type == '"') return i;
        if (type != '{' && type != '[') break;
        int object = type == '{';
        size_t value = 0, n = 0;
        for (size_t j = i + 1, end = kl_jt_close(t, i); j < end; j = kl_jt_next(t, value), n++) {
            if (object) last = j;
            value = j + object;
        }
        if (object && n) skipped = 0;
        else if (n > 1) skipped = 1;
        if (!value) break;
        i = value;
    }
    return skipped ? scan_last_string(t) : last;
}

// Bytes of t's string buffer in use: up to the end of its last string,
// since strings are stored in tape order.
size_t strings_size(const kl_json_tape *t) {
    size_t last = last_string(t);
    if (!last) return 0;
    size_t n;
    const char *s = kl_jt_string(t, last, &n);
    return (size_t)(s - (const char *)t->strings) + n + 1;
}

// The document a successful parse left in p.
kl_json_doc *slot_doc(parser_slot *p) {
    kl_json_doc *d = &p->doc;
    d->slot = p;
    d->tape.words = p->parser.doc.tape.get();
    d->tape.strings = p->parser.doc.string_buf.get();
    d->tape.nwords = (size_t)(d->tape.words[0] & KL_JT_PAYLOAD);
    d->nstrings = SIZE_MAX;
    d->selected = 1;
    return d;
}

void set_error(kl_json_error *err, long long offset, const char *message) {
    err->offset = offset;
    snprintf(err->message, sizeof err->message, "%s", message);
}

// ---- a validator that says where the text goes wrong ----
//
// simdjson reports what is wrong but not where, so a failed parse is
// checked again by this small recursive-descent validator, which also finds
// the integers too big for 64 bits that simdjson refuses.

struct checker {
    const unsigned char *start, *p, *end;
    const char *message = nullptr;
    const unsigned char *at = nullptr;
    bool big_integer = false;

    bool fail(const unsigned char *where, const char *why) {
        at = where;
        message = why;
        return false;
    }
    void skip_ws() {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    }
    bool literal(const char *word) {
        size_t n = strlen(word);
        if ((size_t)(end - p) < n || memcmp(p, word, n) != 0) return fail(p, "invalid literal");
        p += n;
        return true;
    }
    bool hex4(unsigned *out) {
        if (end - p < 4) return fail(p, "truncated \\u escape");
        unsigned v = 0;
        for (int i = 0; i < 4; i++) {
            unsigned char c = p[i];
            unsigned d = c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : 16;
            if (d == 16) return fail(p + i, "invalid hex digit in \\u escape");
            v = v * 16 + d;
        }
        p += 4;
        *out = v;
        return true;
    }
    bool escape() {
        const unsigned char *at_escape = p;
        p++;  // the backslash
        if (p >= end) return fail(p, "unterminated string");
        unsigned char c = *p++;
        if (c != 'u') {
            if (c && strchr("\"\\/bfnrt", c)) return true;
            return fail(at_escape, "invalid escape in string");
        }
        unsigned u;
        if (!hex4(&u)) return false;
        if (u >= 0xdc00 && u <= 0xdfff) return fail(at_escape, "unpaired surrogate in \\u escape");
        if (u < 0xd800 || u > 0xdbff) return true;
        if (end - p < 2 || p[0] != '\\' || p[1] != 'u') return fail(at_escape, "unpaired surrogate in \\u escape");
        p += 2;
        if (!hex4(&u)) return false;
        if (u < 0xdc00 || u > 0xdfff) return fail(at_escape, "unpaired surrogate in \\u escape");
        return true;
    }
    bool utf8() {
        // The closing quote must still follow: a sequence that ends the
        // text is as invalid as a cut one.
        size_t n = kl_utf8_len(p, (size_t)(end - p) - 1);
        if (!n) return fail(p, "invalid UTF-8");
        p += n;
        return true;
    }
    bool string() {
        const unsigned char *open = p++;
        for (;;) {
            if (p >= end) return fail(open, "unterminated string");
            unsigned char c = *p;
            if (c == '"') {
                p++;
                return true;
            }
            if (c == '\\') {
                if (!escape()) return false;
            } else if (c < 0x20) {
                return fail(p, "control character in string (must be escaped)");
            } else if (c >= 0x80) {
                if (!utf8()) return false;
            } else {
                p++;
            }
        }
    }
    static bool digit(unsigned char c) { return c >= '0' && c <= '9'; }
    bool number() {
        const unsigned char *s = p;
        if (*p == '-') p++;
        if (p >= end || !digit(*p)) return fail(s, "invalid number");
        if (*p == '0') p++;
        else
            while (p < end && digit(*p)) p++;
        bool integer = true;
        if (p < end && *p == '.') {
            integer = false;
            p++;
            if (p >= end || !digit(*p)) return fail(s, "invalid number");
            while (p < end && digit(*p)) p++;
        }
        if (p < end && (*p == 'e' || *p == 'E')) {
            integer = false;
            p++;
            if (p < end && (*p == '+' || *p == '-')) p++;
            if (p >= end || !digit(*p)) return fail(s, "invalid number");
            while (p < end && digit(*p)) p++;
        }
        std::string text(reinterpret_cast<const char *>(s), (size_t)(p - s));
        errno = 0;
        double v = strtod(text.c_str(), nullptr);
        if (errno == ERANGE && std::isinf(v)) return fail(s, "number out of range");
        if (integer && !fits_64_bits(text)) big_integer = true;
        return true;
    }
    static bool fits_64_bits(const std::string &t) {
        bool neg = t[0] == '-';
        std::string digits = t.substr(neg ? 1 : 0);
        const char *limit = neg ? "9223372036854775808" : "18446744073709551615";
        size_t n = strlen(limit);
        return digits.size() < n || (digits.size() == n && digits <= limit);
    }
    bool value(int depth) {
        skip_ws();
        if (p >= end) return fail(p, "unexpected end of input");
        switch (*p) {
        case '{': return object(depth + 1);
        case '[': return array(depth + 1);
        case '"': return string();
        case 't': return literal("true");
        case 'f': return literal("false");
        case 'n': return literal("null");
        default:
            if (*p == '-' || digit(*p)) return number();
            return fail(p, "expected a value");
        }
    }
    /* Steps over c when it comes next. */
    bool eat(unsigned char c) {
        if (p >= end || *p != c) return false;
        p++;
        return true;
    }
    /* An object's members or an array's elements: each item(), comma
     * separated, up to close. */
    template <typename Item> bool items(int depth, unsigned char close, const char *after, Item item) {
        if (depth > KL_JSON_MAX_DEPTH) return fail(p, "nested too deeply");
        p++;
        skip_ws();
        if (eat(close)) return true;
        for (;;) {
            if (!item()) return false;
            skip_ws();
            if (eat(',')) continue;
            if (eat(close)) return true;
            return fail(p, after);
        }
    }
    bool member(int depth) {
        skip_ws();
        if (p >= end) return fail(p, "unexpected end of input");
        if (*p != '"') return fail(p, "expected a string key");
        if (!string()) return false;
        skip_ws();
        if (!eat(':')) return fail(p, "expected ':' after an object key");
        return value(depth);
    }
    bool object(int depth) {
        return items(depth, '}', "expected ',' or '}' after an object member", [&] { return member(depth); });
    }
    bool array(int depth) {
        return items(depth, ']', "expected ',' or ']' after an array element", [&] { return value(depth); });
    }
    bool document() {
        if (!value(0)) return false;
        skip_ws();
        if (p < end) return fail(p, "unexpected data after the JSON value");
        return true;
    }
};

// ---- raw scanning of text already known to be valid ----

size_t skip_string(const char *s, size_t len, size_t off) {
    size_t p = off + 1;
    for (;;) {
        const char *q = static_cast<const char *>(memchr(s + p, '"', len - p));
        if (!q) return len;
        size_t at = (size_t)(q - s), bs = 0;
        while (at - bs > off && s[at - bs - 1] == '\\') bs++;
        if (bs % 2 == 0) return at + 1;
        p = at + 1;
    }
}

bool number_char(char c) {
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

bool is_separator(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ',' || c == ':'; }

size_t skip_scalar(const char *s, size_t len, size_t off) {
    switch (s[off]) {
    case '"': return skip_string(s, len, off);
    case 't':
    case 'n': return off + 4;
    case 'f': return off + 5;
    default:
        while (off < len && number_char(s[off])) off++;
        return off;
    }
}

// Rewrites the integers beyond 64 bits of valid text as exponent numbers,
// which simdjson reads as doubles: -123456789012345678901 becomes
// -1.23456789012345678901e20. Tokens keep their order, so the tape of the
// rewritten text still matches the original text for raw spans.
std::string widen_big_integers(const char *s, size_t len) {
    std::string out;
    out.reserve(len + 64);
    size_t i = 0;
    while (i < len) {
        char c = s[i];
        if (c == '"') {
            size_t e = skip_string(s, len, i);
            out.append(s + i, e - i);
            i = e;
            continue;
        }
        if (c != '-' && !(c >= '0' && c <= '9')) {
            out.push_back(c);
            i++;
            continue;
        }
        size_t e = skip_scalar(s, len, i);
        std::string num(s + i, e - i);
        i = e;
        if (num.find_first_of(".eE") != std::string::npos || checker::fits_64_bits(num)) {
            out += num;
            continue;
        }
        size_t first = num[0] == '-' ? 1 : 0;
        out.append(num, 0, first + 1);
        out += '.';
        out.append(num, first + 1, std::string::npos);
        out += 'e';
        out += std::to_string(num.size() - first - 1);
    }
    return out;
}

const char *padded_text(parser_slot *p, const char *text, size_t len) {
    size_t need = len + simdjson::SIMDJSON_PADDING;
    if (p->copy_cap < need) {
        p->copy.reset(new (std::nothrow) char[need]);
        if (!p->copy) kl_oom(need);
        p->copy_cap = need;
    }
    memcpy(p->copy.get(), text, len);
    memset(p->copy.get() + len, 0, simdjson::SIMDJSON_PADDING);
    return p->copy.get();
}

simdjson::error_code parse_text(parser_slot *p, const char *text, size_t len, bool padded) {
    if (!padded) text = padded_text(p, text, len);
    return p->parser.parse(reinterpret_cast<const uint8_t *>(text), len, false).error();
}

// A failed parse: finds where the text goes wrong, or parses it again with
// its big integers widened when that was the only problem.
kl_json_doc *parse_failed(parser_slot *p, const char *text, size_t len, simdjson::error_code code,
                          kl_json_error *err) {
    const unsigned char *u = reinterpret_cast<const unsigned char *>(text);
    checker c{u, u, u + len};
    if (!c.document()) {
        set_error(err, (long long)(c.at - u), c.message);
    } else if (c.big_integer) {
        std::string wide = widen_big_integers(text, len);
        code = parse_text(p, wide.data(), wide.size(), false);
        if (code == simdjson::SUCCESS) return slot_doc(p);
        set_error(err, -1, simdjson::error_message(code));
    } else {
        set_error(err, -1, simdjson::error_message(code));
    }
    release_slot(p);
    return nullptr;
}

}  // namespace

extern "C" {

kl_json_doc *kl_json_parse(const char *text, size_t len, int padded, kl_json_error *err) {
    try {
        parser_slot *p = take_slot();
        if (!p) kl_oom(sizeof(parser_slot));
        simdjson::error_code code = parse_text(p, text, len, padded != 0);
        if (code == simdjson::SUCCESS) return slot_doc(p);
        if (code == simdjson::MEMALLOC) kl_oom(len);
        if (code == simdjson::CAPACITY) {
            set_error(err, -1, "document too large");
            release_slot(p);
            return nullptr;
        }
        return parse_failed(p, text, len, code, err);
    } catch (...) {
        /* Only std::string's growth (widening big integers) can throw. */
        kl_oom(len);
    }
}

void kl_json_free(kl_json_doc *d) {
    if (!d) return;
    if (d->slot) release_slot(d->slot);
    else compact_free(d);
}

kl_json_doc *kl_json_compact(kl_json_doc *d) {
    if (!d->slot) return d;
    size_t nwords = d->tape.nwords, nstrings = kl_json_doc_strings_size(d);
    kl_json_doc *c = compact_alloc(sizeof *c + nwords * sizeof(uint64_t) + nstrings);
    uint64_t *words = reinterpret_cast<uint64_t *>(c + 1);
    memcpy(words, d->tape.words, nwords * sizeof(uint64_t));
    memcpy(words + nwords, d->tape.strings, nstrings);
    c->slot = nullptr;
    c->tape.words = words;
    c->tape.strings = reinterpret_cast<const uint8_t *>(words + nwords);
    c->tape.nwords = nwords;
    c->nstrings = nstrings;
    c->selected = d->selected;
    kl_json_free(d);
    return c;
}

kl_json_tape kl_json_doc_tape(const kl_json_doc *d) { return d->tape; }

size_t kl_json_doc_strings_size(kl_json_doc *d) {
    if (d->nstrings == SIZE_MAX) d->nstrings = strings_size(&d->tape);
    return d->nstrings;
}

size_t kl_json_doc_memory(const kl_json_doc *d) {
    if (!d->slot) return sizeof *d + d->tape.nwords * sizeof(uint64_t) + d->nstrings;
    // What simdjson 3.0 allocates per byte of capacity: 8 of tape, 4 of
    // structural indexes, 5/3 of string buffer.
    size_t cap = d->slot->parser.capacity();
    return sizeof *d->slot + cap * 8 + cap * 4 + cap * 5 / 3 + d->slot->copy_cap;
}

size_t kl_json_doc_selected(const kl_json_doc *d) { return d->selected; }

void kl_json_doc_select(kl_json_doc *d, size_t index) { d->selected = index; }

void kl_json_error_format(const kl_json_error *e, const char *what, char *buf, size_t size) {
    if (e->offset >= 0) snprintf(buf, size, "%s is not valid JSON at byte %lld: %s", what, e->offset, e->message);
    else snprintf(buf, size, "%s is not valid JSON: %s", what, e->message);
}

size_t kl_json_raw_seek(const char *text, size_t len, size_t off, size_t from, size_t to) {
    for (size_t i = from;;) {
        while (off < len && is_separator(text[off])) off++;
        if (i >= to || off >= len) return off;
        char c = text[off];
        if (c == '{' || c == '[' || c == '}' || c == ']') {
            off++;
            i++;
        } else {
            i += (c == '-' || (c >= '0' && c <= '9')) ? 2 : 1;
            off = skip_scalar(text, len, off);
        }
    }
}

size_t kl_json_raw_skip(const char *text, size_t len, size_t off) {
    if (off >= len) return len;
    if (text[off] != '{' && text[off] != '[') return skip_scalar(text, len, off);
    size_t depth = 0;
    while (off < len) {
        char c = text[off];
        if (c == '"') {
            off = skip_string(text, len, off);
            continue;
        }
        if (c == '{' || c == '[') depth++;
        else if ((c == '}' || c == ']') && --depth == 0) return off + 1;
        off++;
    }
    return len;
}

}  // extern "C"
