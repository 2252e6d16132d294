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
 * probe, which sends its request at once, always finds a slot. A POST's
 * body must have come by that deadline too.
 *
 * A POST (a webhook's call) is answered when its handler is done, which
 * may be later than the call that hands it over: the connection is
 * suspended meanwhile (libmicrohttpd's suspend and resume), and the other
 * connections are served as before.
 *
 * A new certificate pair takes effect without closing anything: a new
 * daemon is started on the same listening socket with the new pair, and
 * the old one stops accepting (MHD_quiesce_daemon) but serves the
 * connections it has until they close. The two daemons' epoll descriptors
 * wait in one of klua's own, the one the loop watches. GnuTLS's
 * certificate callback (MHD_OPTION_HTTPS_CERT_CALLBACK) could swap the
 * pair inside one daemon, but only through GnuTLS's own types: a second
 * daemon needs nothing libmicrohttpd does not already offer.
 */
#include "conn/serve.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define SLOTS 64
/* libmicrohttpd's own limit: room for newcomers while the connections they
 * evicted close. */
#define CONNECTION_LIMIT (SLOTS + 16)
#define REQUEST_DEADLINE 5.0 /* seconds from the connection, or its last answer, to its
                              * request's headers (and a POST's whole body) */
#define IDLE_TIMEOUT 10u     /* seconds without a byte: a client that stops reading */
/* TLS 1.2 and 1.3 only, as controller-runtime's webhook server
 * (pkg/webhook/server.go sets tls.Config.MinVersion to TLS 1.2). */
#define TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

/* One libmicrohttpd daemon and the certificate pair it serves (kept for
 * as long as it runs). */
typedef struct daemon_slot {
    struct MHD_Daemon *d;
    char *cert, *key;
} daemon_slot;

/* An open connection: waiting for a request's headers since waiting_since,
 * or being answered. */
typedef struct conn {
    struct MHD_Connection *c;
    struct MHD_Daemon *d; /* the daemon that accepted it */
    double waiting_since; /* < 0 while a request is answered */
    int ended;            /* shut down; libmicrohttpd has yet to close it */
    struct conn *prev, *next;
} conn;

/* A POST's lifecycle: one state at a time, changed only by post_step
 * along this table (it aborts on any other change):
 *
 *   READING    a piece of the body    -> READING    kept
 *              a piece past body_max  -> DROPPING   the body is dropped, the rest read and ignored
 *              the end of the body    -> WAITING    handed to the POST handler; suspended unless answered
 *   DROPPING   a piece of the body    -> DROPPING   ignored
 *              the end of the body    -> ANSWERED   413
 *   WAITING    kl_serve_answer        -> ANSWERED   resumed, if it was suspended
 *              the daemon stops       -> ANSWERED   503
 *   ANSWERED   the answer is sent     -> ANSWERED   (on_completed frees it)
 */
typedef enum { READING, DROPPING, WAITING, ANSWERED } post_state;
typedef enum { EV_PIECE, EV_TOO_LARGE, EV_END, EV_ANSWER, EV_STOP } post_event;

static const struct {
    post_state from;
    post_event ev;
    post_state to;
} post_table[] = {
    {READING, EV_PIECE, READING},     {READING, EV_TOO_LARGE, DROPPING}, {READING, EV_END, WAITING},
    {DROPPING, EV_PIECE, DROPPING},   {DROPPING, EV_END, ANSWERED},      {WAITING, EV_ANSWER, ANSWERED},
    {WAITING, EV_STOP, ANSWERED},
};

/* A POST: its body as it arrives, then its answer. */
typedef struct pending {
    uint64_t id;
    struct MHD_Connection *c;
    post_state state;
    char *body; /* READING */
    size_t len, cap;
    int suspended;        /* WAITING, libmicrohttpd waiting for kl_serve_answer */
    kl_serve_reply reply; /* ANSWERED */
    struct pending *prev, *next;
} pending;

/* The one place a POST changes state. */
static void post_step(pending *p, post_event ev) {
    for (size_t i = 0; i < sizeof post_table / sizeof *post_table; i++) {
        if (post_table[i].from == p->state && post_table[i].ev == ev) {
            p->state = post_table[i].to;
            return;
        }
    }
    fprintf(stderr, "klua: bug: a POST in state %d got event %d\n", (int)p->state, (int)ev);
    abort();
}

struct kl_serve {
    daemon_slot cur; /* accepts the new connections */
    daemon_slot old; /* replaced by kl_serve_set_certificate, until its connections close */
    int epfd;        /* waits on both daemons' epoll descriptors */
    int listen_fd;
    unsigned port;
    kl_serve_fn fn;
    void *ud;
    kl_serve_post_fn post;
    size_t body_max;
    double now; /* the clock of the kl_serve_run under way */
    conn *conns; /* open connections */
    unsigned nconns;
    pending *pending; /* POSTs being read or answered */
    uint64_t next_id;
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
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_DAEMON);
    *k = (conn){.c = c, .d = info ? info->daemon : NULL, .waiting_since = s->now, .next = s->conns};
    if (s->conns) s->conns->prev = k;
    s->conns = k;
    *context = k;
    if (++s->nconns > SLOTS) {
        conn *oldest = longest_waiting(s, k);
        if (oldest) end_conn(oldest);
    }
}

static void pending_free(kl_serve *s, pending *p) {
    if (p->prev) p->prev->next = p->next;
    else s->pending = p->next;
    if (p->next) p->next->prev = p->prev;
    free(p->body);
    free(p->reply.body);
    free(p);
}

/* An answer was sent (or the request failed): the connection waits again,
 * and a POST's answer is forgotten. */
static void on_completed(void *cls, struct MHD_Connection *c, void **req,
                         enum MHD_RequestTerminationCode code) {
    (void)code;
    kl_serve *s = cls;
    conn *k = conn_of(c);
    if (k) k->waiting_since = s->now;
    if (*req) pending_free(s, *req);
    *req = NULL;
}

static enum MHD_Result refuse(struct MHD_Connection *c, unsigned status, const char *text) {
    return reply_with(c, status, "text/plain; charset=utf-8", text, strlen(text));
}

/* Holds the answer of a POST (its body taken over). */
static void post_answer(pending *p, post_event ev, kl_serve_reply *reply) {
    post_step(p, ev);
    free(p->body);
    p->body = NULL;
    p->len = p->cap = 0;
    p->reply = *reply;
    reply->body = NULL;
}

/* Keeps a piece of a POST's body; 0, or -1 out of memory. */
static int post_keep(kl_serve *s, pending *p, const char *upload, size_t n) {
    if (p->state == DROPPING) {
        post_step(p, EV_PIECE);
        return 0;
    }
    if (p->len + n > s->body_max) {
        post_step(p, EV_TOO_LARGE);
        free(p->body);
        p->body = NULL;
        p->len = p->cap = 0;
        return 0;
    }
    if (p->len + n > p->cap) {
        size_t cap = p->cap ? p->cap : 16384;
        while (cap < p->len + n) cap *= 2;
        char *body = realloc(p->body, cap);
        if (!body) return -1;
        p->body = body;
        p->cap = cap;
    }
    memcpy(p->body + p->len, upload, n);
    p->len += n;
    post_step(p, EV_PIECE);
    return 0;
}

/* The end of a POST's body: handed to the handler (which may answer at
 * once), or answered 413. */
static void post_end(kl_serve *s, pending *p, const char *url) {
    if (p->state == DROPPING) {
        static const char text[] = "the request body is too large\n";
        kl_serve_reply r = {MHD_HTTP_CONTENT_TOO_LARGE, "text/plain; charset=utf-8", strdup(text), sizeof text - 1};
        if (!r.body) r.len = 0;
        post_answer(p, EV_END, &r);
        return;
    }
    post_step(p, EV_END);
    const char *timeout = MHD_lookup_connection_value(p->c, MHD_GET_ARGUMENT_KIND, "timeout");
    s->post(s->ud, p->id, url, timeout, p->body ? p->body : "", p->len);
}

/* One more piece of a POST body, or its end: the body goes to the handler,
 * whose answer is sent now or once it comes (the connection suspended). */
static enum MHD_Result on_post(kl_serve *s, struct MHD_Connection *c, conn *k, const char *url,
                               const char *upload, size_t *upload_len, pending **req) {
    pending *p = *req;
    if (!p) {
        if (!(p = calloc(1, sizeof *p))) return MHD_NO;
        *p = (pending){.id = ++s->next_id, .c = c, .state = READING, .next = s->pending};
        if (s->pending) s->pending->prev = p;
        s->pending = p;
        *req = p;
        return MHD_YES;
    }
    if (*upload_len) {
        size_t n = *upload_len;
        *upload_len = 0;
        return post_keep(s, p, upload, n) < 0 ? MHD_NO : MHD_YES;
    }
    if (p->state == READING || p->state == DROPPING) {
        if (k) k->waiting_since = -1;
        post_end(s, p, url);
    }
    if (p->state == WAITING) {
        p->suspended = 1;
        MHD_suspend_connection(c);
        return MHD_YES;
    }
    return reply_with(c, p->reply.status, p->reply.content_type, p->reply.body ? p->reply.body : "",
                      p->reply.len);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_len, void **req) {
    (void)version;
    kl_serve *s = cls;
    conn *k = conn_of(c);
    if (s->post && !strcmp(method, "POST")) return on_post(s, c, k, url, upload, upload_len, (pending **)req);
    if (k) k->waiting_since = -1;
    if (*upload_len) {
        *upload_len = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return refuse(c, MHD_HTTP_METHOD_NOT_ALLOWED, s->post ? "only GET and POST are served here\n"
                                                             : "only GET is served here\n");
    kl_serve_reply r = {404, "text/plain; charset=utf-8", NULL, 0};
    s->fn(s->ud, url, &r);
    enum MHD_Result ok = reply_with(c, r.status, r.content_type, r.body ? r.body : "", r.len);
    free(r.body);
    return ok;
}

/* Answers a WAITING POST (ev: EV_ANSWER or EV_STOP), resuming it when
 * libmicrohttpd waits for it. */
static void post_resume(pending *p, post_event ev, kl_serve_reply *reply) {
    post_answer(p, ev, reply);
    if (p->suspended) {
        p->suspended = 0;
        MHD_resume_connection(p->c);
    }
}

int kl_serve_answer(kl_serve *s, uint64_t id, kl_serve_reply *reply) {
    pending *p = s->pending;
    while (p && p->id != id) p = p->next;
    if (!p || p->state != WAITING) {
        free(reply->body);
        reply->body = NULL;
        return -1;
    }
    post_resume(p, EV_ANSWER, reply);
    return 0;
}

static void slot_free(daemon_slot *d) {
    free(d->cert);
    free(d->key);
    *d = (daemon_slot){0};
}

/* Stops d accepting: its copy of the listening socket is closed (the
 * socket stays open through s's own descriptor). Once per daemon:
 * libmicrohttpd (0.9.75) answers a second call with the same descriptor
 * number, which by then may be a connection accepted since. */
static void quiesce(struct MHD_Daemon *d) {
    MHD_socket fd = MHD_quiesce_daemon(d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

/* Starts a daemon on s's listening socket, serving HTTPS with the pair
 * when cert is given (the slot keeps copies of it). Each daemon gets a
 * descriptor of its own for the socket: libmicrohttpd closes the one it
 * was given when it fails to start (a pair it refuses), which must not
 * close the socket the daemon already serving listens on. */
static int slot_start(kl_serve *s, daemon_slot *d, const char *cert, const char *key) {
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
    if (cert) {
        flags |= MHD_USE_TLS;
        d->cert = strdup(cert);
        d->key = strdup(key);
        if (!d->cert || !d->key) {
            slot_free(d);
            return -1;
        }
    }
    struct MHD_OptionItem tls[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, d->cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, d->key},
        {MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)TLS_PRIORITIES},
        {MHD_OPTION_END, 0, NULL},
    };
    int fd = fcntl(s->listen_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        slot_free(d);
        return -1;
    }
    d->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_CONNECTION_TIMEOUT, IDLE_TIMEOUT, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)CONNECTION_LIMIT, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            cert ? MHD_OPTION_ARRAY : MHD_OPTION_END, tls, MHD_OPTION_END);
    if (!d->d) {
        slot_free(d);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d->d, MHD_DAEMON_INFO_EPOLL_FD);
    struct epoll_event ev = {.events = EPOLLIN};
    if (!info || epoll_ctl(s->epfd, EPOLL_CTL_ADD, info->epoll_fd, &ev) < 0) {
        MHD_stop_daemon(d->d);
        slot_free(d);
        return -1;
    }
    return 0;
}

/* Stops a daemon: the POSTs it still holds are answered 503 first (a
 * suspended connection must be resumed before its daemon stops).
 * libmicrohttpd closes the daemon's copy of the listening socket unless
 * it was quiesced (klua closed it then); s's own stays open. */
static void slot_stop(kl_serve *s, daemon_slot *d) {
    if (!d->d) return;
    int resumed = 0;
    for (pending *p = s->pending; p; p = p->next) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(p->c, MHD_CONNECTION_INFO_DAEMON);
        if (!info || info->daemon != d->d || p->state != WAITING) continue;
        static const char gone[] = "klua is stopping\n";
        kl_serve_reply r = {503, "text/plain; charset=utf-8", strdup(gone), sizeof gone - 1};
        if (!r.body) r.len = 0;
        post_resume(p, EV_STOP, &r);
        resumed = 1;
    }
    if (resumed) MHD_run(d->d);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d->d, MHD_DAEMON_INFO_EPOLL_FD);
    if (info) epoll_ctl(s->epfd, EPOLL_CTL_DEL, info->epoll_fd, NULL);
    MHD_stop_daemon(d->d);
    slot_free(d);
}

kl_serve *kl_serve_start_with(const char *addr, const kl_serve_opts *o, kl_serve_fn fn, void *ud,
                              char *err, size_t errlen) {
    char host[256];
    unsigned port;
    if (kl_serve_parse_address(addr, host, sizeof host, &port, err, errlen)) return NULL;
    int fd = listen_on(addr, host, port, err, errlen);
    if (fd < 0) return NULL;
    kl_serve *s = calloc(1, sizeof *s);
    if (!s || (s->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
        close(fd);
        free(s);
        snprintf(err, errlen, "%s: %s", addr, s ? strerror(errno) : "out of memory");
        return NULL;
    }
    s->listen_fd = fd;
    s->port = bound_port(fd);
    s->fn = fn;
    s->ud = ud;
    s->post = o ? o->post : NULL;
    s->body_max = o ? o->body_max : 0;
    int tls = o && o->cert_pem && o->key_pem;
    if (slot_start(s, &s->cur, tls ? o->cert_pem : NULL, tls ? o->key_pem : NULL) < 0) {
        snprintf(err, errlen, tls ? "%s: the HTTPS server did not start: is tls.key the key of tls.crt, "
                                    "both in PEM?"
                                  : "%s: the HTTP server did not start",
                 addr);
        close(s->epfd);
        close(fd);
        free(s);
        return NULL;
    }
    return s;
}

kl_serve *kl_serve_start(const char *addr, kl_serve_fn fn, void *ud, char *err, size_t errlen) {
    return kl_serve_start_with(addr, NULL, fn, ud, err, errlen);
}

int kl_serve_set_certificate(kl_serve *s, const char *cert_pem, const char *key_pem, char *err,
                             size_t errlen) {
    daemon_slot next = {0};
    if (slot_start(s, &next, cert_pem, key_pem) < 0) {
        snprintf(err, errlen, "the new certificate pair was refused: is tls.key the key of tls.crt, both in PEM?");
        return -1;
    }
    slot_stop(s, &s->old); /* a pair replaced twice in a row: its connections go now */
    quiesce(s->cur.d);
    s->old = s->cur;
    s->cur = next;
    return 0;
}

void kl_serve_free(kl_serve *s) {
    if (!s) return;
    slot_stop(s, &s->old);
    slot_stop(s, &s->cur);
    close(s->listen_fd);
    close(s->epfd);
    free(s);
}

int kl_serve_fd(const kl_serve *s) { return s->epfd; }

static long slot_timeout_ms(const daemon_slot *d) {
    MHD_UNSIGNED_LONG_LONG ms;
    if (!d->d || MHD_get_timeout(d->d, &ms) != MHD_YES) return -1;
    return ms > 60000 ? 60000 : (long)ms;
}

long kl_serve_timeout_ms(kl_serve *s) {
    long a = slot_timeout_ms(&s->cur), b = slot_timeout_ms(&s->old);
    return a < 0 ? b : b < 0 ? a : a < b ? a : b;
}

/* Ends the connections whose request is overdue. */
static void end_overdue(kl_serve *s) {
    for (conn *k = s->conns; k; k = k->next)
        if (!k->ended && k->waiting_since >= 0 && s->now - k->waiting_since > REQUEST_DEADLINE)
            end_conn(k);
}

/* Stops the replaced daemon once its last connection has closed. */
static void retire_old(kl_serve *s) {
    if (!s->old.d) return;
    for (conn *k = s->conns; k; k = k->next)
        if (k->d == s->old.d) return;
    slot_stop(s, &s->old);
}

void kl_serve_run(kl_serve *s, double now) {
    s->now = now;
    MHD_run(s->cur.d);
    if (s->old.d) MHD_run(s->old.d);
    end_overdue(s);
    retire_old(s);
}

unsigned kl_serve_port(const kl_serve *s) { return s->port; }
