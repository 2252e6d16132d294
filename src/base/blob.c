/* blob.c - reference-counted immutable byte buffers; see blob.h. */
#include "base/blob.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

kl_blob *kl_blob_alloc(size_t len) {
    if (len > (size_t)-1 - sizeof(kl_blob) - KL_BLOB_PADDING) kl_oom(len);
    kl_blob *b = kl_xmalloc(sizeof(kl_blob) + len + KL_BLOB_PADDING);
    b->refs = 1;
    b->len = len;
    memset(b->data + len, 0, KL_BLOB_PADDING);
    return b;
}

kl_blob *kl_blob_new(const char *data, size_t len) {
    kl_blob *b = kl_blob_alloc(len);
    if (len) memcpy(b->data, data, len);
    return b;
}

kl_blob *kl_blob_ref(kl_blob *b) {
    b->refs++;
    return b;
}

void kl_blob_unref(kl_blob *b) {
    if (b && --b->refs == 0) free(b);
}
