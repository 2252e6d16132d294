/* obj.c - identity and ownership of a cached object; see obj.h. */
#include "wire/obj.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

/* Whether o's identity lives in its blob's padding (kl_obj_settle). */
static int settled(const kl_obj *o) {
    if (!o->blob || !o->ns) return 0;
    uintptr_t at = (uintptr_t)o->ns, end = (uintptr_t)(o->blob->data + o->blob->len);
    return at > end && at < end + KL_BLOB_PADDING;
}

void kl_obj_clear(kl_obj *o) {
    if (!settled(o)) free(o->ns);
    kl_blob_unref(o->blob);
    memset(o, 0, sizeof *o);
}

void kl_obj_set_identity(kl_obj *o, const char *ns, size_t nsn, const char *name, size_t namen,
                         const char *rv, size_t rvn) {
    o->ns = kl_xmalloc(nsn + namen + rvn + 3);
    o->name = o->ns + nsn + 1;
    o->rv = o->name + namen + 1;
    if (nsn) memcpy(o->ns, ns, nsn);
    if (namen) memcpy(o->name, name, namen);
    if (rvn) memcpy(o->rv, rv, rvn);
    o->ns[nsn] = o->name[namen] = o->rv[rvn] = 0;
}

void kl_obj_settle(kl_obj *o) {
    kl_blob *b = o->blob;
    if (!b || !o->ns || b->refs != 1 || settled(o)) return;
    size_t name = (size_t)(o->name - o->ns), rv = (size_t)(o->rv - o->ns), n = rv + strlen(o->rv) + 1;
    /* The byte at b->len stays the NUL that ends the bytes. */
    if (n > KL_BLOB_PADDING - 1) return;
    char *at = b->data + b->len + 1;
    memcpy(at, o->ns, n);
    free(o->ns);
    o->ns = at;
    o->name = at + name;
    o->rv = at + rv;
}

/* Appends n bytes of s to buf at *at, as many as fit before its NUL. */
static void put(char *buf, size_t size, size_t *at, const char *s, size_t n) {
    if (*at + n >= size) n = size - 1 - *at;
    memcpy(buf + *at, s, n);
    *at += n;
}

/* By hand rather than with snprintf, which costs as much as the rest of a
 * store update: it runs for every event. */
size_t kl_obj_key(const kl_obj *o, char *buf, size_t size) {
    size_t nsn = o->ns ? strlen(o->ns) : 0, namen = strlen(o->name), at = 0;
    if (!size) return nsn ? nsn + 1 + namen : namen;
    if (nsn) {
        put(buf, size, &at, o->ns, nsn);
        put(buf, size, &at, "/", 1);
    }
    put(buf, size, &at, o->name, namen);
    buf[at] = 0;
    return nsn ? nsn + 1 + namen : namen;
}
