/* media.c - the media types klua reads; see media.h. */
#include "wire/media.h"

#include <string.h>
#include <strings.h>

/* A type gets a row here once its framer or decoder exists. KEP-4222's
 * CBOR comes as one data item for a LIST or a GET, and as a CBOR Sequence
 * for a watch; client-go refuses a watch answered with one item. */
static const kl_media readers[] = {
    {"application/json", KL_FRAMING_JSON_VALUES, KL_DECODING_JSON},
    {"application/cbor", KL_FRAMING_NONE, KL_DECODING_CBOR},
    {"application/cbor-seq", KL_FRAMING_CBOR_SEQ, KL_DECODING_NONE},
};

const kl_media *kl_media_of(const char *content_type) {
    if (!content_type) return NULL;
    const char *ct = content_type + strspn(content_type, " \t");
    size_t n = strcspn(ct, "; \t");
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++) {
        if (strlen(readers[i].type) == n && strncasecmp(ct, readers[i].type, n) == 0) return &readers[i];
    }
    return NULL;
}
