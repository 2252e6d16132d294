/*
 * http.h - one HTTP request to the API server, on the event loop.
 *
 * A request either buffers its whole body (LIST, GET, writes) or streams a
 * 2xx body to a callback (WATCH), which may pause the transfer until the
 * consumer catches up: that is how a slow handler slows the socket read
 * instead of growing a queue. Non-2xx bodies are always buffered (bounded)
 * so the caller can decode the Status. Retrying is not done here; only a
 * 401 is retried once, when the connection says a fresher credential exists.
 */
#ifndef KLUA_HTTP_H
#define KLUA_HTTP_H

#include <curl/curl.h>
#include <stddef.h>

#include "conn/conn.h"
#include "base/loop.h"

#define KL_HTTP_PAUSE CURL_WRITEFUNC_PAUSE

typedef struct kl_http kl_http;
typedef struct kl_http_req kl_http_req;

/* How a request ended, decided once here so that every caller reads a
 * transport failure the same way: never as a response with a bad body. */
typedef enum kl_http_outcome {
    KL_HTTP_OK,            /* a 2xx response, its body complete */
    KL_HTTP_STATUS,        /* a non-2xx response; the body holds its Status */
    KL_HTTP_TRANSPORT,     /* no response, or one broken off (connection, TLS, DNS) */
    KL_HTTP_TIMEOUT,       /* the request's deadline passed, before or after headers */
    KL_HTTP_TOO_LARGE,     /* a buffered 2xx body over its limit (max_body) */
    KL_HTTP_CONFIG,        /* not sent: the connection could not be prepared
                            * (credentials, TLS files, plain-http refusal) */
    KL_HTTP_ABANDONED,     /* the data callback stopped a streamed body */
    KL_HTTP_TOO_LATE       /* not sent: its send_by time had passed when it was to leave */
} kl_http_outcome;

/* The outcome's name, as scripts see it in err.reason: "OK", "Status",
 * "TransportError", "Timeout", "TooLarge", "ConfigError", "Abandoned",
 * "TooLate". */
const char *kl_http_outcome_name(kl_http_outcome o);

typedef struct kl_http_resp {
    kl_http_outcome outcome;
    long status;       /* HTTP status, 0 when none arrived */
    const char *error; /* what went wrong in words, NULL for OK and STATUS */
    const char *body;  /* buffered body (NUL-terminated), or NULL */
    size_t body_len;
    double retry_after; /* seconds from a Retry-After header, -1 if none */
    const char *content_type; /* the Content-Type header, NULL if none */
    /* The texts of the response's warnings (kl_http_parse_warnings), in
     * the order they came, repeats included. */
    const char *const *warnings;
    size_t nwarnings;
} kl_http_resp;

/* Reads one Warning header's value as client-go does (apimachinery's
 * util/net ParseWarningHeaders, RFC 7234 section 5.5): comma-separated
 * `code agent "text" ["date"]`, the text a quoted-string whose backslash
 * escapes are undone. Calls fn with each warning of code 299 and a text
 * (the only ones client-go's WarningHandlers act on), until the first one
 * it cannot read, where it stops, as client-go drops the rest of that
 * header. */
void kl_http_parse_warnings(const char *value, size_t len, void (*fn)(void *ud, const char *text), void *ud);

/* Every server warning is counted; the first of each distinct text is
 * given to the sink (kl_http_on_warning), else logged as a warning. After
 * KL_HTTP_WARNINGS_DISTINCT distinct texts, new ones are counted and
 * logged at -v 2 only: a server that makes up a new text per request must
 * not grow the table for good. */
#define KL_HTTP_WARNINGS_DISTINCT 256
typedef void (*kl_http_warning_sink)(void *ud, const char *text);
void kl_http_on_warning(kl_http *h, kl_http_warning_sink sink, void *ud);
/* Warnings received so far, repeats included. */
unsigned long kl_http_warnings_total(const kl_http *h);

typedef struct kl_http_cb {
    /* A streamed 2xx body's bytes: return n, or KL_HTTP_PAUSE to get the same
     * bytes again after kl_http_resume. NULL buffers the body instead. */
    size_t (*data)(void *ud, const char *p, size_t n);
    /* The headers of a 2xx response arrived, before any of its body, with
     * its Content-Type (NULL if none); may be NULL. For a watch, the
     * moment the server is known to answer. It must not cancel the
     * request (the data callback may refuse the body). */
    void (*started)(void *ud, const char *content_type);
    /* The request ended; it is freed when this returns. */
    void (*done)(void *ud, const kl_http_resp *resp);
} kl_http_cb;

/* What a buffered 2xx body may hold unless the caller says otherwise,
 * counted as it arrives, after gzip is undone: a 1 MB gzip body can
 * inflate to a gigabyte. One object is at most KL_FRAME_MAX_DEFAULT
 * (16 MiB) in a watch or a streamed LIST; this leaves room for a page of
 * api.list (500 objects by default). */
#define KL_HTTP_BODY_MAX ((size_t)64 << 20)

typedef struct kl_http_opts {
    const char *method;       /* "GET" when NULL */
    const char *path;         /* path and query, starting with '/' */
    const char *body;         /* request body or NULL */
    size_t body_len;
    const char *content_type; /* of the request body */
    const char *accept;       /* the Accept header; NULL = application/json */
    long timeout_ms;          /* whole request; 0 = none (watches) */
    size_t max_body;          /* a buffered 2xx body's limit; 0 = KL_HTTP_BODY_MAX */
    /* kl_now() from which the request must not be sent; 0 = none. Checked
     * as curl is about to send it (also after waiting for a connection,
     * and again for a 401 retry), not when it is started: a write fenced
     * by a Lease must not leave late, whatever delayed it, a pause of the
     * whole process included. */
    double send_by;
} kl_http_opts;

/* client-go's request metrics (component-base's restclient adapters):
 * rest_client_requests_total{code,method,host}, counted where each request
 * ends, code being the HTTP status or "<error>" when none came; and
 * rest_client_request_duration_seconds{verb,host} over these buckets, for
 * requests with a deadline (a watch lasts as long as the server keeps it
 * open, and client-go observes no latency for one). */
#define KL_HTTP_BUCKETS 12
extern const double kl_http_buckets[KL_HTTP_BUCKETS];
typedef struct kl_http_count {
    char method[8];
    char code[8];
    unsigned long n;
} kl_http_count;
typedef struct kl_http_latency {
    char verb[8];
    unsigned long le[KL_HTTP_BUCKETS]; /* cumulative: observations <= kl_http_buckets[i] */
    unsigned long n;
    double sum;
} kl_http_latency;
/* The counters so far; *n is set to their number. Valid until the next
 * request ends. */
const kl_http_count *kl_http_counts(const kl_http *h, size_t *n);
const kl_http_latency *kl_http_latencies(const kl_http *h, size_t *n);
/* The host label: the server's host and port, as client-go's url.Host. */
const char *kl_http_host(const kl_http *h);

kl_http *kl_http_new(kl_loop *loop, kl_conn *conn);
void kl_http_free(kl_http *h); /* cancels every request still running */
/* The loop's transfer-done callback for handles started here. */
void kl_http_transfer_done(kl_loop *loop, CURL *easy, CURLcode result);

/* Starts a request, copying what o points to. It asks for a compressed
 * answer (Accept-Encoding with every coding libcurl has) unless the
 * connection says not to (kl_conn_compression). A request that fails, even
 * at once, reports through cb.done, never before this returns. */
kl_http_req *kl_http_start(kl_http *h, const kl_http_opts *o, kl_http_cb cb, void *ud);
/* Aborts a request; cb.done is not called. */
void kl_http_cancel(kl_http_req *r);
/* Resumes a request whose data callback paused it. */
void kl_http_resume(kl_http_req *r);

#endif
