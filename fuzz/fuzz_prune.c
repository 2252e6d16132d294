/*
 * fuzz_prune.c - libFuzzer target for the cache's member pruning
 * (src/wire/prune.c).
 *
 * The input is one object's JSON. It is pruned of metadata.managedFields,
 * status.conditions and a.b.c. Whenever the decoder accepts the input as an
 * object, it must accept the pruned bytes too, with the same identity, and
 * pruning them again must find nothing left to drop; pruning never grows
 * the object. Whatever the input, pruning it as it is copied out
 * (kl_prune_copy, as a LIST item is) gives the bytes pruning its blob
 * gives, and nothing exactly when that finds nothing to drop or no object.
 * Anything else aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/decode.h"
#include "wire/prune.h"

static const char *const PATHS[] = {"metadata.managedFields", "status.conditions", "a.b.c"};

static void die(const char *what) {
    fprintf(stderr, "fuzz_prune: %s\n", what);
    abort();
}

static int same(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : "") == 0; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    kl_prune *p = kl_prune_new(PATHS, sizeof PATHS / sizeof *PATHS, err, sizeof err);
    if (!p) die(err);
    kl_blob *in = kl_blob_new((const char *)data, size);
    kl_blob *copied = kl_prune_copy(p, in->data, size);
    kl_obj whole = {.blob = kl_blob_ref(in), .len = size};
    int whole_rc = kl_prune_obj(p, &whole);
    if ((whole_rc == 1) != (copied != NULL)) die("pruning a copy and pruning a blob disagree on what to drop");
    if (copied && (copied->len != whole.len || memcmp(copied->data, whole.blob->data + whole.off, whole.len) != 0))
        die("pruning a copy and pruning a blob give different bytes");
    kl_blob_unref(copied);
    kl_obj_clear(&whole);
    kl_obj before = {0}, pruned = {0}, after = {0};
    if (kl_decode_item(in, &before, NULL, err, sizeof err) == 0) {
        pruned = (kl_obj){.blob = kl_blob_ref(in), .len = size};
        int rc = kl_prune_obj(p, &pruned);
        if (rc < 0) die("an object the decoder accepts is refused by the pruner");
        if (pruned.len > size) die("pruning made the object longer");
        if (kl_decode_item(pruned.blob, &after, NULL, err, sizeof err) < 0)
            die("the pruned object no longer decodes");
        if (!same(before.ns, after.ns) || !same(before.name, after.name) || !same(before.rv, after.rv))
            die("pruning changed the object's identity");
        if (rc == 1 && kl_prune_obj(p, &pruned) != 0) die("a pruned object still holds a pruned path");
        kl_obj_clear(&after);
        kl_obj_clear(&pruned);
        kl_obj_clear(&before);
    }
    kl_blob_unref(in);
    kl_prune_free(p);
    return 0;
}
