/* obj.c - identity and ownership of a cached object; see obj.h. */
#include "obj.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kl_obj_clear(kl_obj *o) {
    kl_blob_unref(o->blob);
    free(o->ns);
    free(o->name);
    free(o->rv);
    memset(o, 0, sizeof *o);
}

int kl_obj_copy(kl_obj *dst, const kl_obj *src) {
    memset(dst, 0, sizeof *dst);
    dst->ns = strdup(src->ns ? src->ns : "");
    dst->name = strdup(src->name ? src->name : "");
    dst->rv = strdup(src->rv ? src->rv : "");
    if (!dst->ns || !dst->name || !dst->rv) {
        kl_obj_clear(dst);
        return -1;
    }
    dst->blob = src->blob ? kl_blob_ref(src->blob) : NULL;
    dst->off = src->off;
    dst->len = src->len;
    return 0;
}

size_t kl_obj_key(const kl_obj *o, char *buf, size_t size) {
    int n = (o->ns && o->ns[0]) ? snprintf(buf, size, "%s/%s", o->ns, o->name)
                                : snprintf(buf, size, "%s", o->name);
    return n < 0 ? 0 : (size_t)n;
}
