/* obj.c - identity and ownership of a cached object; see obj.h. */
#include "wire/obj.h"

#include <stdio.h>
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

size_t kl_obj_key(const kl_obj *o, char *buf, size_t size) {
    int n = (o->ns && o->ns[0]) ? snprintf(buf, size, "%s/%s", o->ns, o->name)
                                : snprintf(buf, size, "%s", o->name);
    return n < 0 ? 0 : (size_t)n;
}
