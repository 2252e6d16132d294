/*
 * media.h - which reader a response body gets, chosen by its Content-Type:
 * the one place that maps a media type to how a watch stream is cut into
 * frames and how a body is decoded. LIST, WATCH and klua.api responses all
 * ask here; a type with no entry is refused, naming it.
 */
#ifndef KLUA_MEDIA_H
#define KLUA_MEDIA_H

/* How a watch stream of the type is cut into events. */
typedef enum kl_media_framing {
    KL_FRAMING_NONE,        /* not a stream: a watch answered so is refused */
    KL_FRAMING_JSON_VALUES, /* one JSON value after another (kl_framer) */
    KL_FRAMING_CBOR_SEQ,    /* an RFC 8742 CBOR Sequence (kl_framer's CBOR mode),
                             * each item transcoded to JSON (wire/cbor.h) */
} kl_media_framing;

/* How a body of the type (a LIST, a klua.api answer) is decoded. */
typedef enum kl_media_decoding {
    KL_DECODING_NONE, /* not a body: a LIST or an API answer so is refused */
    KL_DECODING_JSON, /* kl_list_stream, kl_decode_*, lua_json */
    KL_DECODING_CBOR, /* one CBOR data item, transcoded to JSON (kl_list_stream_cbor) */
} kl_media_decoding;

typedef struct kl_media {
    const char *type; /* the media type, lower case, without parameters */
    kl_media_framing framing;
    kl_media_decoding decoding;
} kl_media;

/* The reader of a response whose Content-Type is content_type, or NULL for
 * a type klua does not read (a protobuf, YAML, an HTML page from a proxy:
 * client-go has no decoder for those either, runtime.NegotiateError). The
 * type is compared without its parameters (charset, stream=watch, as=Table,
 * which say what the JSON holds, not how to read it), in any case. A
 * response without a Content-Type (NULL, or empty) is not read either:
 * kube-apiserver names the type of every body it writes, so a body without
 * one came from something else, a proxy most likely, and klua does not
 * guess what it holds (client-go does, reading it as the type it asked
 * for). */
const kl_media *kl_media_of(const char *content_type);

#endif
