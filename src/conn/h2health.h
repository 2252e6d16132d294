/*
 * h2health.h - whether each HTTP/2 connection to the API server is still
 * alive: client-go's connection health check, on libcurl.
 *
 * client-go (apimachinery's util/net/http.go) sets x/net/http2's
 * ReadIdleTimeout to 30 s and PingTimeout to 15 s, from the environment
 * variables HTTP2_READ_IDLE_TIMEOUT_SECONDS and HTTP2_PING_TIMEOUT_SECONDS
 * (whole seconds; a read-idle of 0 or less turns the check off): a
 * connection that read no frame for ReadIdleTimeout is sent a PING, and is
 * closed when no answer comes in PingTimeout. Every stream on it then fails
 * and a watch resumes from its resourceVersion on a new connection. Without
 * that, a connection whose peer stopped forwarding without closing (a proxy,
 * a load balancer, a NAT that lost its entry) holds its watches forever: the
 * kernel's keepalives only reach the nearest TCP peer.
 *
 * libcurl 7.88 can neither send a PING on demand nor report its answer, so
 * the probe is a request (GET /version, which kube-apiserver's
 * system:public-info-viewer role lets anyone read), and any byte read on
 * any stream of the connection counts as its answer. curl multiplexes a new
 * request onto the oldest connection to the server with room for another
 * stream, which is the silent one unless it is at its stream limit: then
 * the probe goes elsewhere and the silent connection, still silent
 * PingTimeout later, is closed all the same. (Watches with bookmarks keep a
 * healthy connection that full from being silent that long.)
 *
 * This module keeps the table of connections and decides; the HTTP client
 * (http.c) reports what each transfer read, sends the probes and closes
 * what is dead. A connection is known by its local port and its peer, as
 * libcurl 7.88 tells no socket of a connection that streams share.
 */
#ifndef KLUA_H2HEALTH_H
#define KLUA_H2HEALTH_H

#include <stddef.h>

typedef struct kl_h2health kl_h2health;

typedef struct kl_h2conn_id {
    long local_port, peer_port;
    char peer_ip[64];
} kl_h2conn_id;

typedef struct kl_h2health_opts {
    double read_idle;    /* seconds without a read before a probe; <= 0: no check */
    double ping_timeout; /* seconds a probe may go unanswered; <= 0: 15 */
} kl_h2health_opts;

/* client-go's settings from the environment: a value that is not a whole
 * number is warned about and the default kept, as client-go does. */
kl_h2health_opts kl_h2health_env(void);

/* NULL when the check is off. */
kl_h2health *kl_h2health_new(const kl_h2health_opts *o);
void kl_h2health_free(kl_h2health *hh);
/* How often kl_h2health_judge should run. */
double kl_h2health_interval(const kl_h2health *hh);
/* How long a probe may go unanswered, in seconds. */
double kl_h2health_ping_timeout(const kl_h2health *hh);

/* A transfer runs on connection id at now; read: it read bytes since it was
 * last reported; h2: its response came over HTTP/2. */
void kl_h2health_saw(kl_h2health *hh, const kl_h2conn_id *id, int read, int h2, double now);

typedef enum kl_h2_verdict {
    KL_H2_PROBE, /* silent for the read-idle time: send a probe */
    KL_H2_DEAD   /* the probe went unanswered: close the connection */
} kl_h2_verdict;
typedef void (*kl_h2health_fn)(void *ud, const kl_h2conn_id *id, kl_h2_verdict v, double silent);

/* Judges every connection seen since the last judgement, calling fn for
 * those to probe or close (silent: seconds since its last read). A dead
 * connection is forgotten; so is one no transfer used for two minutes, by
 * when curl has closed it (CURLOPT_MAXAGE_CONN, 118 s). One that no
 * transfer uses keeps its silence but is not probed, and the probe it was
 * waiting for is forgotten: a transfer placed on it later sends a new one.
 * fn may start requests but must not call back into hh. */
void kl_h2health_judge(kl_h2health *hh, double now, kl_h2health_fn fn, void *ud);

/* Shuts down the socket of connection id in both directions, without
 * closing it (curl still owns it): curl reads its end and fails every
 * stream on it. 0, or -1 when no socket of this process is that
 * connection. */
int kl_h2health_shutdown(const kl_h2conn_id *id);

#endif
