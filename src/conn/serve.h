/*
 * serve.h - a small HTTP endpoint on klua's loop (metrics and probes),
 * served by libmicrohttpd without threads of its own: its epoll descriptor
 * joins the loop's wait, and kl_serve_run answers whatever is ready. Only
 * GET and HEAD are answered; a handler fills in a status and a body.
 */
#ifndef KLUA_SERVE_H
#define KLUA_SERVE_H

#include <stddef.h>

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

/* Parses a bind address as controller-runtime takes one: ":8080" (every
 * interface), "127.0.0.1:8080", "[::1]:8080", "localhost:8080". Fills
 * host (empty for every interface) and port; returns 0, or -1 with a
 * message in err. */
int kl_serve_parse_address(const char *addr, char *host, size_t hostlen, unsigned *port,
                           char *err, size_t errlen);

/* Listens on addr and answers through fn. Returns NULL with a message in
 * err (the address in use, not parsable, not local...). */
kl_serve *kl_serve_start(const char *addr, kl_serve_fn fn, void *ud, char *err, size_t errlen);
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
