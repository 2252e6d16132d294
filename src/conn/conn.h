/*
 * conn.h - the connection to the API server, resolved as kubectl does.
 *
 * Where the configuration comes from, in kubectl's order:
 *   1. --kubeconfig FILE: only that file, which must exist;
 *   2. else $KUBECONFIG, a ':'-separated list merged by client-go's rules
 *      (see kubeconfig.h); files that do not exist are skipped;
 *   3. else $HOME/.kube/config.
 * When none of those files exists (or they define nothing), --server alone
 * makes a connection; otherwise, inside a pod (KUBERNETES_SERVICE_HOST and
 * KUBERNETES_SERVICE_PORT set and the service-account token readable), the
 * in-cluster configuration is used. --context picks a context instead of the
 * current-context; --server, --token, --insecure-skip-tls-verify, --as,
 * --as-group and --as-uid override what the kubeconfig says, and
 * --disable-compression adds to the cluster's disable-compression.
 *
 * Impersonation (the user's as, as-uid, as-groups, as-user-extra) sends
 * client-go's Impersonate-* headers with every request: kube-apiserver then
 * authorizes the request as that user, once the credential's own user has
 * the `impersonate` verb on them (apiserver's impersonation filter).
 *
 * Secrets (tokens, passwords, keys, plugin output) never appear in an error
 * message or a log line. Bearer tokens and basic auth are only sent over
 * https:// unless allow_insecure_credentials is set.
 *
 * One kl_conn serves any number of requests on the loop's thread:
 * kl_conn_prepare may refresh credentials it caches, and never blocks.
 */
#ifndef KLUA_CONFIG_H
#define KLUA_CONFIG_H

#include <curl/curl.h>
#include <stddef.h>

#include "base/loop.h"

typedef struct kl_conn kl_conn;

typedef struct kl_conn_opts {
    const char *kubeconfig;         /* --kubeconfig, or NULL */
    const char *context;            /* --context, or NULL */
    const char *server;             /* --server, or NULL */
    const char *token;              /* --token, or NULL */
    int insecure_skip_tls_verify;   /* --insecure-skip-tls-verify */
    int allow_insecure_credentials; /* --allow-insecure-credentials */
    /* kubectl's impersonation flags, each replacing the kubeconfig user's
     * field of the same meaning (as, as-uid, as-groups) when given. */
    const char *as;               /* --as, or NULL */
    const char *as_uid;           /* --as-uid, or NULL */
    const char *const *as_groups; /* --as-group, n_as_groups of them */
    size_t n_as_groups;
    int disable_compression;      /* --disable-compression, or the cluster's disable-compression */
} kl_conn_opts;

/* Resolves the connection as kubectl would. NULL with a one-line message in err. */
kl_conn *kl_conn_load(const kl_conn_opts *opts, char *err, size_t errlen);
void kl_conn_free(kl_conn *c);

const char *kl_conn_server(const kl_conn *c);    /* base URL, no trailing slash */
const char *kl_conn_namespace(const kl_conn *c); /* context namespace, "default" when unset */
const char *kl_conn_context(const kl_conn *c);   /* context name, or "" for flags-only / in-cluster */
/* 0 when responses must not be compressed (disable-compression): the
 * request then offers no Accept-Encoding, as client-go's transport. */
int kl_conn_compression(const kl_conn *c);

/* A request that waits for the credential an exec plugin is fetching. */
typedef struct kl_conn_waiter kl_conn_waiter;
struct kl_conn_waiter {
    /* Called from the loop once the plugin's run ended: err is NULL when the
     * request should call kl_conn_prepare again, which then uses the
     * credential just fetched; else why the request cannot be sent. */
    void (*ready)(kl_conn_waiter *w, const char *err);
    /* The connection's while it waits; zeroed before the first prepare. */
    kl_conn_waiter *prev, *next;
    unsigned long run;
    int fresh; /* woken with a credential: use it even if already expired */
};

/* kl_conn_prepare's answer when the request must wait for w->ready. */
#define KL_CONN_PENDING 1

/* Prepares an easy handle for one request to this server: TLS (CA, verify,
 * server name), proxy, client certificate, auth (Authorization header
 * appended to *headers) and impersonation (Impersonate-* headers, likewise - the caller owns the list and frees it after the
 * request). May re-read a token file when due. When an exec credential is
 * needed (none yet, expired, or rejected by a 401), it starts the plugin on
 * the loop, or joins the run already going (one run at a time, as in
 * client-go), queues w (the request's own, required) and returns
 * KL_CONN_PENDING without touching the handle; w->ready comes later. The handle must be new or curl_easy_reset,
 * and c must outlive the transfer. 0, KL_CONN_PENDING, or -1 with err. */
int kl_conn_prepare(kl_conn *c, CURL *easy, struct curl_slist **headers, kl_conn_waiter *w,
                    char *err, size_t errlen);
/* A waiting request that gives up (cancelled, timed out): w is dequeued and
 * w->ready never called. Ignored when w does not wait. */
void kl_conn_forget(kl_conn *c, kl_conn_waiter *w);

/* The loop exec plugins run on, until kl_conn_detach, which kills a plugin
 * still running (its whole process group): klua's shutdown, once no request
 * waits any more. kl_conn_free detaches too; the loop must outlive the
 * attachment. */
void kl_conn_attach(kl_conn *c, kl_loop *loop);
void kl_conn_detach(kl_conn *c);

/* Tell the connection that a request prepared with it got 401. Returns 1 if
 * retrying is worthwhile (credential refreshed: exec plugin to be re-run,
 * token file re-read and changed), 0 otherwise.
 * An exec credential is marked stale, so the plugin runs again once at the
 * next kl_conn_prepare however many requests got the 401. If the rejected
 * credential was itself fetched because of a 401, the answer is 0: retrying
 * at once would loop, and the caller's backoff paces the next attempt. */
int kl_conn_unauthorized(kl_conn *c);

/* What the connection uses, without any secret; strings live as long as c. */
typedef struct kl_conn_info {
    const char *source;          /* "kubeconfig", "in-cluster" or "flags" */
    const char *auth;            /* "token", "token-file", "basic", "exec", "client-cert" or "none" */
    const char *ca;              /* "file", "data" or "none" (the system's CAs) */
    const char *client_cert;     /* "file", "data" or "none" */
    int insecure;                /* certificate verification is off */
    const char *tls_server_name; /* or NULL */
    const char *proxy;           /* proxy-url with any user:password hidden, or NULL */
    const char *as;              /* the user impersonated, or NULL */
} kl_conn_info;

void kl_conn_describe(const kl_conn *c, kl_conn_info *out);

/* How kl_conn_load_with reaches its surroundings, so that the specs can run
 * it hermetically. Zeroed fields mean the defaults of kl_conn_load. */
typedef struct kl_conn_hooks {
    /* Looks up an environment variable (HOME, KUBECONFIG, KUBERNETES_SERVICE_*,
     * KLUA_SERVICEACCOUNT_DIR, POD_NAMESPACE) during the load only; NULL means
     * getenv. Exec plugins still inherit the real process environment. */
    const char *(*getenv)(void *ud, const char *name);
    void *ud;
    int exec_timeout_ms; /* how long an exec plugin may run; 0: five minutes */
} kl_conn_hooks;

kl_conn *kl_conn_load_with(const kl_conn_opts *opts, const kl_conn_hooks *hooks, char *err,
                           size_t errlen);

/* Moves the connection's clocks forward as if seconds had passed, so specs
 * reach token-file re-reads and credential expiry without waiting. */
void kl_conn_advance_clock(kl_conn *c, long seconds);

#endif
