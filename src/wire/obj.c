/* obj.c - identity and ownership of a cached object; see obj.h. */
#include "wire/obj.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

void kl_obj_clear(kl_obj *o) {
    kl_blob_unref(o->blob);
    free(o->ns);
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
