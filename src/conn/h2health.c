/* h2health.c - the HTTP/2 connection health check; see h2health.h. */
#include "conn/h2health.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/xalloc.h"

#define READ_IDLE_DEFAULT 30
#define PING_TIMEOUT_DEFAULT 15
/* Longer than curl keeps a connection no transfer uses (118 s). */
#define FORGET_UNUSED_S 120.0

typedef struct h2conn {
    kl_h2conn_id id;
    double last_read;  /* or when first seen */
    double last_used;  /* the last judgement that found a transfer on it */
    double probe_sent; /* 0: no probe is waited for */
    int users;         /* transfers seen on it since the last judgement */
    int h2;
} h2conn;

struct kl_h2health {
    kl_h2health_opts o;
    h2conn *conns;
    size_t n, cap;
};

/* client-go's strconv.Atoi: an optional sign and decimal digits. */
static int env_seconds(const char *name, int dflt) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || errno || v < INT_MIN || v > INT_MAX || isspace((unsigned char)s[0])) {
        kl_log(KL_LOG_WARN, "http", "illegal %s (\"%s\"): not a whole number of seconds; the default %d is used",
               name, s, dflt);
        return dflt;
    }
    return (int)v;
}

kl_h2health_opts kl_h2health_env(void) {
    kl_h2health_opts o;
    o.read_idle = env_seconds("HTTP2_READ_IDLE_TIMEOUT_SECONDS", READ_IDLE_DEFAULT);
    o.ping_timeout = env_seconds("HTTP2_PING_TIMEOUT_SECONDS", PING_TIMEOUT_DEFAULT);
    return o;
}

kl_h2health *kl_h2health_new(const kl_h2health_opts *o) {
    if (o->read_idle <= 0) return NULL;
    kl_h2health *hh = kl_xcalloc(1, sizeof *hh);
    hh->o = *o;
    /* x/net/http2 takes a PingTimeout of zero for its default. */
    if (hh->o.ping_timeout <= 0) hh->o.ping_timeout = PING_TIMEOUT_DEFAULT;
    return hh;
}

void kl_h2health_free(kl_h2health *hh) {
    if (!hh) return;
    free(hh->conns);
    free(hh);
}

/* Often enough that a verdict comes at most a quarter of either time late,
 * and at least once a second. */
double kl_h2health_interval(const kl_h2health *hh) {
    double t = hh->o.read_idle < hh->o.ping_timeout ? hh->o.read_idle : hh->o.ping_timeout;
    return t / 4 < 1 ? t / 4 : 1;
}

double kl_h2health_ping_timeout(const kl_h2health *hh) { return hh->o.ping_timeout; }

static int same(const kl_h2conn_id *a, const kl_h2conn_id *b) {
    return a->local_port == b->local_port && a->peer_port == b->peer_port && !strcmp(a->peer_ip, b->peer_ip);
}

static h2conn *find_or_add(kl_h2health *hh, const kl_h2conn_id *id, double now) {
    for (size_t i = 0; i < hh->n; i++)
        if (same(&hh->conns[i].id, id)) return &hh->conns[i];
    hh->conns = kl_buf_grow(hh->conns, &hh->cap, hh->n + 1, sizeof *hh->conns, 4);
    h2conn *c = memset(&hh->conns[hh->n++], 0, sizeof *c);
    c->id = *id;
    c->last_read = c->last_used = now;
    return c;
}

void kl_h2health_saw(kl_h2health *hh, const kl_h2conn_id *id, int read, int h2, double now) {
    h2conn *c = find_or_add(hh, id, now);
    c->users++;
    if (read) c->last_read = now;
    if (h2) c->h2 = 1;
}

/* 1 when the connection is to be forgotten. */
static int judge_one(kl_h2health *hh, h2conn *c, double now, kl_h2health_fn fn, void *ud) {
    int used = c->users > 0;
    c->users = 0;
    if (!used) {
        c->probe_sent = 0;
        return now - c->last_used > FORGET_UNUSED_S;
    }
    c->last_used = now;
    if (!c->h2) return 0;
    if (c->probe_sent && c->last_read > c->probe_sent) c->probe_sent = 0;
    if (c->probe_sent) {
        if (now - c->probe_sent < hh->o.ping_timeout) return 0;
        fn(ud, &c->id, KL_H2_DEAD, now - c->last_read);
        return 1;
    }
    if (now - c->last_read >= hh->o.read_idle) {
        c->probe_sent = now;
        fn(ud, &c->id, KL_H2_PROBE, now - c->last_read);
    }
    return 0;
}

void kl_h2health_judge(kl_h2health *hh, double now, kl_h2health_fn fn, void *ud) {
    size_t kept = 0;
    for (size_t i = 0; i < hh->n; i++)
        if (!judge_one(hh, &hh->conns[i], now, fn, ud)) hh->conns[kept++] = hh->conns[i];
    hh->n = kept;
}

/* The port and address of a socket name, or -1 for a socket not on IP. */
static long name_port(const struct sockaddr_storage *ss, char *ip, size_t iplen) {
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        if (ip && !inet_ntop(AF_INET, &a->sin_addr, ip, (socklen_t)iplen)) return -1;
        return ntohs(a->sin_port);
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        if (ip && !inet_ntop(AF_INET6, &a->sin6_addr, ip, (socklen_t)iplen)) return -1;
        return ntohs(a->sin6_port);
    }
    return -1;
}

/* Its local port and peer make a connection unique among the sockets of a
 * process. */
static int is_connection(int fd, const kl_h2conn_id *id) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char ip[INET6_ADDRSTRLEN];
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0 || name_port(&ss, NULL, 0) != id->local_port)
        return 0;
    len = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0) return 0;
    return name_port(&ss, ip, sizeof ip) == id->peer_port && !strcmp(ip, id->peer_ip);
}

int kl_h2health_shutdown(const kl_h2conn_id *id) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int rc = -1;
    struct dirent *e;
    while (rc < 0 && (e = readdir(d))) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd == dirfd(d) || !is_connection((int)fd, id)) continue;
        rc = shutdown((int)fd, SHUT_RDWR);
    }
    closedir(d);
    return rc;
}
