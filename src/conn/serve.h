/*
 * serve.h - a small HTTP endpoint on klua's loop (metrics and probes, the
 * live page, admission and conversion webhooks), served by libmicrohttpd
 * without threads of its own: its epoll descriptor joins the loop's wait,
 * and kl_serve_run answers whatever is ready. GET and HEAD are answered
 * at once, a handler filling in a status and a body; a server made with a
 * POST handler reads POST bodies and answers them whenever the handler's
 * kl_serve_answer comes, while other requests go on. HTTPS when given a
 * certificate, whose pair can be replaced while the server runs.
 */
#ifndef KLUA_SERVE_H
#define KLUA_SERVE_H

#include <stddef.h>
#include <stdint.h>

typedef struct kl_serve kl_serve;

/* What a handler answers: status, content type and body (copied by the
 * server after the handler returns; `body` is the handler's to free). */
typedef struct {
    unsigned status;
    const char *content_type;
    char *body;
    size_t len;
} kl_serve_reply;

/* Answers a GET for path (without the query). */
typedef void (*kl_serve_fn)(void *ud, const char *path, kl_serve_reply *reply);

/* Receives a POST for path (without the query) with its whole body (valid
 * during the call only) and the value of its query parameter `timeout`
 * (NULL without one). The answer comes through kl_serve_answer with id,
 * during the call or later. */
typedef void (*kl_serve_post_fn)(void *ud, uint64_t id, const char *path, const char *timeout,
                                 const char *body, size_t len);

/* How a server is made beyond its address and GET handler. */
typedef struct kl_serve_opts {
    const char *cert_pem, *key_pem; /* HTTPS (TLS 1.2 and 1.3 only) when both are set */
    kl_serve_post_fn post;          /* NULL: POST is refused with 405 */
    size_t body_max;                /* a longer POST body is answered 413 */
} kl_serve_opts;

/* Parses a bind address as controller-runtime takes one: ":8080" (every
 * interface), "127.0.0.1:8080", "[::1]:8080", "localhost:8080". Fills
 * host (empty for every interface) and port; returns 0, or -1 with a
 * message in err. */
int kl_serve_parse_address(const char *addr, char *host, size_t hostlen, unsigned *port,
                           char *err, size_t errlen);

/* Listens on addr and answers through fn. Returns NULL with a message in
 * err (the address in use, not parsable, not local...). */
kl_serve *kl_serve_start(const char *addr, kl_serve_fn fn, void *ud, char *err, size_t errlen);
/* As kl_serve_start, with the options of o. */
kl_serve *kl_serve_start_with(const char *addr, const kl_serve_opts *o, kl_serve_fn fn, void *ud,
                              char *err, size_t errlen);
/* Answers the POST id (the reply's body is taken over). Returns 0, or -1
 * when that request is no longer there (answered already, or its client
 * gone): the reply is dropped. */
int kl_serve_answer(kl_serve *s, uint64_t id, kl_serve_reply *reply);
/* Serves HTTPS with a new certificate and key (PEM) from now on: new
 * connections are accepted by a server made with them, while the
 * connections open go on with the old pair until they close. Returns 0, or
 * -1 with the reason in err (the pair unreadable or not matching), the old
 * pair still served. */
int kl_serve_set_certificate(kl_serve *s, const char *cert_pem, const char *key_pem, char *err,
                             size_t errlen);
void kl_serve_free(kl_serve *s);

/* The descriptor to wait on for readability, and the longest wait in
 * milliseconds before kl_serve_run must be called anyway (-1: no limit). */
int kl_serve_fd(const kl_serve *s);
long kl_serve_timeout_ms(kl_serve *s);
/* Answers every request that is ready, without blocking, and ends the
 * connections that have waited past their deadline for a request; now is
 * the time in seconds (kl_now). Call it at least once a second. */
void kl_serve_run(kl_serve *s, double now);
/* The port it listens on (the one chosen, for port 0). */
unsigned kl_serve_port(const kl_serve *s);

#endif
