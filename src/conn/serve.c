/*
 * serve.c - the metrics and probe endpoint on klua's loop.
 *
 * libmicrohttpd runs in its external epoll mode: no thread of its own, one
 * epoll descriptor for the loop to wait on. klua makes the listening socket
 * itself so that a bad address or a port in use is reported with the
 * system's reason before anything else starts.
 *
 * A kubelet probe must be answered within its timeout (1 s by default)
 * even while slow clients hold connections open without finishing a
 * request (slowloris). libmicrohttpd's own timeout only counts idleness,
 * which a client dripping a byte at a time resets, and a full connection
 * table leaves newcomers waiting in the kernel's backlog. So klua notes
 * when each connection began waiting for a request (its start, or its
 * last answer) and ends it (a shutdown: libmicrohttpd then closes it)
 * once it has waited REQUEST_DEADLINE; and once more than SLOTS are
 * open, each newcomer ends the connection that has waited longest. A
 * probe, which sends its request at once, always finds a slot.
 */
#include "conn/serve.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SLOTS 64
/* libmicrohttpd's own limit: room for newcomers while the connections they
 * evicted close. */
#define CONNECTION_LIMIT (SLOTS + 16)
#define REQUEST_DEADLINE 5.0 /* seconds from the connection, or its last answer */
#define IDLE_TIMEOUT 10u     /* seconds without a byte: a client that stops reading */

/* An open connection: waiting for a request's headers since waiting_since,
 * or being answered. */
typedef struct conn {
    struct MHD_Connection *c;
    double waiting_since; /* < 0 while a request is answered */
    int ended;            /* shut down; libmicrohttpd has yet to close it */
    struct conn *prev, *next;
} conn;

struct kl_serve {
    struct MHD_Daemon *daemon;
    int listen_fd;
    unsigned port;
    kl_serve_fn fn;
    void *ud;
    double now; /* the clock of the kl_serve_run under way */
    conn *conns; /* open connections */
    unsigned nconns;
};

int kl_serve_parse_address(const char *addr, char *host, size_t hostlen, unsigned *port,
                           char *err, size_t errlen) {
    const char *colon = strrchr(addr, ':');
    if (!colon) {
        snprintf(err, errlen, "\"%s\" has no port: give HOST:PORT or :PORT, e.g. :8080", addr);
        return -1;
    }
    const char *h = addr;
    size_t n = (size_t)(colon - addr);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    } else if (memchr(h, ':', n)) {
        snprintf(err, errlen, "\"%s\": write an IPv6 address in brackets, e.g. [::1]:8080", addr);
        return -1;
    }
    if (n >= hostlen) {
        snprintf(err, errlen, "\"%s\": the host is too long", addr);
        return -1;
    }
    memcpy(host, h, n);
    host[n] = '\0';
    char *end;
    errno = 0;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || errno || p > 65535) {
        snprintf(err, errlen, "\"%s\": the port must be a number from 0 to 65535", addr);
        return -1;
    }
    *port = (unsigned)p;
    return 0;
}

/* A listening socket on host:port (every interface for an empty host),
 * or -1 with the reason in err. */
static int listen_on(const char *addr, const char *host, unsigned port, char *err, size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    char service[8];
    snprintf(service, sizeof service, "%u", port);
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(*host ? host : NULL, service, &hints, &res);
    if (rc) {
        snprintf(err, errlen, "%s: %s", addr, gai_strerror(rc));
        return -1;
    }
    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 64)) {
            saved = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "%s: %s%s", addr, strerror(saved),
                 saved == EADDRINUSE ? " (another process listens there: choose another port)" : "");
    }
    return fd;
}

static unsigned bound_port(int fd) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len)) return 0;
    if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return 0;
}

static enum MHD_Result reply_with(struct MHD_Connection *c, unsigned status, const char *type,
                                  const char *body, size_t len) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

/* Ends a connection: its next read sees the end, and libmicrohttpd closes it. */
static void end_conn(conn *k) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(k->c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info) shutdown(info->connect_fd, SHUT_RDWR);
    k->ended = 1;
}

/* The connection that has waited longest for its request, other than but. */
static conn *longest_waiting(kl_serve *s, const conn *but) {
    conn *oldest = NULL;
    for (conn *k = s->conns; k; k = k->next)
        if (k != but && !k->ended && k->waiting_since >= 0 &&
            (!oldest || k->waiting_since < oldest->waiting_since))
            oldest = k;
    return oldest;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **context,
                          enum MHD_ConnectionNotificationCode code) {
    kl_serve *s = cls;
    conn *k = *context;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (!k) return;
        if (k->prev) k->prev->next = k->next;
        else s->conns = k->next;
        if (k->next) k->next->prev = k->prev;
        s->nconns--;
        free(k);
        return;
    }
    k = calloc(1, sizeof *k);
    if (!k) return; /* untracked: libmicrohttpd's idle timeout still ends it */
    *k = (conn){.c = c, .waiting_since = s->now, .next = s->conns};
    if (s->conns) s->conns->prev = k;
    s->conns = k;
    *context = k;
    if (++s->nconns > SLOTS) {
        conn *oldest = longest_waiting(s, k);
        if (oldest) end_conn(oldest);
    }
}

/* An answer was sent (or the request failed): the connection waits again. */
static void on_completed(void *cls, struct MHD_Connection *c, void **req,
                         enum MHD_RequestTerminationCode code) {
    (void)req;
    (void)code;
    conn *k = conn_of(c);
    if (k) k->waiting_since = ((kl_serve *)cls)->now;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_len, void **req) {
    (void)version;
    (void)upload;
    (void)req;
    kl_serve *s = cls;
    conn *k = conn_of(c);
    if (k) k->waiting_since = -1;
    if (*upload_len) {
        *upload_len = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        static const char only[] = "only GET is served here\n";
        return reply_with(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", only,
                          sizeof only - 1);
    }
    kl_serve_reply r = {404, "text/plain; charset=utf-8", NULL, 0};
    s->fn(s->ud, url, &r);
    enum MHD_Result ok = reply_with(c, r.status, r.content_type, r.body ? r.body : "", r.len);
    free(r.body);
    return ok;
}

kl_serve *kl_serve_start(const char *addr, kl_serve_fn fn, void *ud, char *err, size_t errlen) {
    char host[256];
    unsigned port;
    if (kl_serve_parse_address(addr, host, sizeof host, &port, err, errlen)) return NULL;
    int fd = listen_on(addr, host, port, err, errlen);
    if (fd < 0) return NULL;
    kl_serve *s = calloc(1, sizeof *s);
    if (!s) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->listen_fd = fd;
    s->port = bound_port(fd);
    s->fn = fn;
    s->ud = ud;
    s->daemon = MHD_start_daemon(
        MHD_USE_EPOLL, 0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_CONNECTION_TIMEOUT, IDLE_TIMEOUT, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)CONNECTION_LIMIT, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    if (!s->daemon) {
        snprintf(err, errlen, "%s: the HTTP server did not start", addr);
        close(fd);
        free(s);
        return NULL;
    }
    return s;
}

void kl_serve_free(kl_serve *s) {
    if (!s) return;
    MHD_stop_daemon(s->daemon);
    close(s->listen_fd);
    free(s);
}

int kl_serve_fd(const kl_serve *s) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    return info ? info->epoll_fd : -1;
}

long kl_serve_timeout_ms(kl_serve *s) {
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(s->daemon, &ms) != MHD_YES) return -1;
    return ms > 60000 ? 60000 : (long)ms;
}

/* Ends the connections whose request is overdue. */
static void end_overdue(kl_serve *s) {
    for (conn *k = s->conns; k; k = k->next)
        if (!k->ended && k->waiting_since >= 0 && s->now - k->waiting_since > REQUEST_DEADLINE)
            end_conn(k);
}

void kl_serve_run(kl_serve *s, double now) {
    s->now = now;
    MHD_run(s->daemon);
    end_overdue(s);
}

unsigned kl_serve_port(const kl_serve *s) { return s->port; }
