/* prune.c - dropping named members from objects before they are cached; see prune.h. */
#include "wire/prune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/xalloc.h"

/* The paths as a trie: a node per member name; terminal nodes are removed. */
typedef struct node {
    char *name;
    size_t len;
    int terminal;
    struct node *kids;
    size_t nkids, cap_kids;
} node;

struct kl_prune {
    node root;
    char *scratch; /* where a rewrite is written before it is copied out exactly */
    size_t scratch_cap;
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
    for (size_t i = 0; i < n; i++) add_path(&p->root, paths[i]);
    return p;
}

void kl_prune_free(kl_prune *p) {
    if (!p) return;
    free_node(&p->root);
    free(p->scratch);
    free(p);
}

/* The scanner below runs on bytes the decoder has already accepted as JSON,
 * but still checks every bound: a malformed object gives BAD, never a read
 * past end. */

static size_t ws(const char *s, size_t i, size_t end) {
    while (i < end && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
    return i;
}

/* s[i] is '"': the index after the closing quote. */
static size_t skip_string(const char *s, size_t i, size_t end) {
    for (i++; i < end; i++) {
        if (s[i] == '\\') i++;
        else if (s[i] == '"') return i + 1;
    }
    return BAD;
}

/* The index after the value starting at s[i]. */
static size_t skip_value(const char *s, size_t i, size_t end) {
    if (i >= end) return BAD;
    if (s[i] == '"') return skip_string(s, i, end);
    if (s[i] != '{' && s[i] != '[') {
        while (i < end && !strchr(",}] \t\r\n", s[i])) i++;
        return i;
    }
    size_t depth = 0;
    while (i < end) {
        char c = s[i];
        if (c == '"') {
            i = skip_string(s, i, end);
            if (i == BAD) return BAD;
            continue;
        }
        if (c == '{' || c == '[') depth++;
        else if ((c == '}' || c == ']') && --depth == 0) return i + 1;
        i++;
    }
    return BAD;
}

/* One member of an object: key [k0, k1) with its quotes, value [v0, v1). */
typedef struct {
    size_t k0, k1, v0, v1;
} member;

/* Reads the member at s[i] (after '{' or ','); returns the index of the
 * ',' or '}' that follows it, or BAD. */
static size_t read_member(const char *s, size_t i, size_t end, member *m) {
    i = ws(s, i, end);
    if (i >= end || s[i] != '"') return BAD;
    m->k0 = i;
    m->k1 = skip_string(s, i, end);
    if (m->k1 == BAD) return BAD;
    i = ws(s, m->k1, end);
    if (i >= end || s[i] != ':') return BAD;
    m->v0 = ws(s, i + 1, end);
    m->v1 = skip_value(s, m->v0, end);
    if (m->v1 == BAD) return BAD;
    i = ws(s, m->v1, end);
    return i < end && (s[i] == ',' || s[i] == '}') ? i : BAD;
}

static const node *match(const node *n, const char *s, const member *m) {
    return find(n, s + m->k0 + 1, m->k1 - m->k0 - 2);
}

/* Calls visit for each member of the object at s[i]; stops early when
 * visit returns nonzero and returns that. Returns -1 if s[i] is not an
 * object or is malformed. */
typedef int (*visit_fn)(void *ud, const member *m);

static int each_member(const char *s, size_t i, size_t end, visit_fn visit, void *ud) {
    i = ws(s, i, end);
    if (i >= end || s[i] != '{') return -1;
    size_t j = ws(s, i + 1, end);
    if (j < end && s[j] == '}') return 0;
    for (;;) {
        member m;
        j = read_member(s, i + 1, end, &m);
        if (j == BAD) return -1;
        int rc = visit(ud, &m);
        if (rc) return rc;
        if (s[j] == '}') return 0;
        i = j;
    }
}

typedef struct {
    const node *n;
    const char *s;
    char *out; /* emit: where the next byte goes */
    int first;
} walk;

static int find_visit(void *ud, const member *m) {
    walk *w = ud;
    const node *k = match(w->n, w->s, m);
    if (!k) return 0;
    if (k->terminal) return 1;
    walk sub = {.n = k, .s = w->s};
    return w->s[m->v0] == '{' ? (each_member(w->s, m->v0, m->v1, find_visit, &sub) == 1) : 0;
}

static void put(walk *w, const char *p, size_t n) {
    memcpy(w->out, p, n);
    w->out += n;
}

static int emit_object(walk *w, const node *n, size_t i, size_t end);

static int emit_visit(void *ud, const member *m) {
    walk *w = ud;
    const node *k = match(w->n, w->s, m);
    if (k && k->terminal) return 0;
    if (!w->first) put(w, ",", 1);
    w->first = 0;
    if (!k || w->s[m->v0] != '{') {
        put(w, w->s + m->k0, m->v1 - m->k0);
        return 0;
    }
    put(w, w->s + m->k0, m->k1 - m->k0);
    put(w, ":", 1);
    return emit_object(w, k, m->v0, m->v1) < 0 ? -1 : 0;
}

/* Writes the object at s[i] without n's terminal members, recursing into
 * the members n names further down. */
static int emit_object(walk *w, const node *n, size_t i, size_t end) {
    walk sub = {.n = n, .s = w->s, .out = w->out, .first = 1};
    put(&sub, "{", 1);
    if (each_member(w->s, i, end, emit_visit, &sub) < 0) return -1;
    put(&sub, "}", 1);
    w->out = sub.out;
    return 0;
}

int kl_prune_obj(kl_prune *p, kl_obj *o) {
    const char *s = o->blob->data + o->off;
    walk w = {.n = &p->root, .s = s};
    int found = each_member(s, 0, o->len, find_visit, &w);
    if (found <= 0) return found;
    /* The rewrite is never longer than the original. It goes into the
     * prune's scratch first and then into a blob of its exact size: saving
     * the dropped bytes is the point, and a blob cut short in place would
     * leave holes the allocator cannot reuse for the next object. */
    p->scratch = kl_buf_grow(p->scratch, &p->scratch_cap, o->len, 1, 4096);
    w.out = p->scratch;
    if (emit_object(&w, &p->root, 0, o->len) < 0) return -1;
    size_t len = (size_t)(w.out - p->scratch);
    kl_blob_unref(o->blob);
    o->blob = kl_blob_new(p->scratch, len);
    o->off = 0;
    o->len = len;
    return 1;
}
