/* conn.c - resolving and using the API server connection; see conn.h. */
#include "conn/conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/buf.h"
#include "conn/tls.h"
#include "conn/cfg.h"
#include "conn/exec.h"
#include "conn/kubeconfig.h"
#include "base/log.h"

#define TOKEN_FILE_MAX ((size_t)1 << 20)
#define CA_FILE_MAX ((size_t)16 << 20)
/* client-go's cached file token source re-reads this often. */
#define TOKEN_REREAD_S 60
#define SERVICEACCOUNT_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

typedef enum { AUTH_NONE, AUTH_TOKEN, AUTH_TOKEN_FILE, AUTH_BASIC, AUTH_EXEC } auth_kind;
typedef enum { SRC_KUBECONFIG, SRC_IN_CLUSTER, SRC_FLAGS } source_kind;

struct kl_conn {
    source_kind source;
    char *server, *namespace, *context;

    int insecure;
    char *ca_file;
    unsigned char *ca_data;
    size_t ca_len;
    char *tls_server_name;
    char *proxy_url, *proxy_shown;
    char *cert_file, *key_file;
    unsigned char *cert_data, *key_data;
    size_t cert_len, key_len;

    auth_kind auth;
    char *token; /* static, or as last read from token_file */
    char *token_file;
    long long token_read_at; /* monotonic seconds */
    char *username, *password;
    kl_exec_config exec;
    kl_exec_cred cred;
    int have_cred;      /* cred holds a plugin's credential */
    int cred_stale;     /* a 401 rejected it: run the plugin at the next prepare */
    int cred_after_401; /* cred was fetched because of a 401 */
    kl_loop *loop;      /* where plugins run (kl_conn_attach) */
    kl_exec_run *run;   /* the plugin's run in progress, or NULL */
    unsigned long runs; /* runs started: a waiter holds the number of its own */
    int run_for_401;    /* the run in progress was started by a 401 */
    kl_conn_waiter *first, *last; /* requests waiting, in the order they came */

    char **impersonate; /* the Impersonate-* header lines, sent with every request */
    size_t nimpersonate;
    char *as;           /* the user impersonated, for kl_conn_describe */
    int compression;

    int allow_insecure_credentials;
    int exec_timeout_ms;
    long clock_offset;
};

/* ---- clocks -------------------------------------------------------------- */

static long long mono_now(const kl_conn *c) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec + c->clock_offset;
}

static time_t real_now(const kl_conn *c) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + c->clock_offset;
}

void kl_conn_advance_clock(kl_conn *c, long seconds) { c->clock_offset += seconds; }

/* ---- where the configuration comes from ---------------------------------- */

static const char *env_get(const kl_conn_hooks *h, const char *name) {
    const char *v = h && h->getenv ? h->getenv(h->ud, name) : getenv(name);
    return v && *v ? v : NULL;
}

typedef struct {
    char **paths;
    size_t n, cap;
    char *missing; /* why no file was found, for the "no configuration" error */
} sources;

static void sources_free(sources *s) {
    for (size_t i = 0; i < s->n; i++) free(s->paths[i]);
    free(s->paths);
    free(s->missing);
}

static int add_path(sources *s, const char *p, size_t len) {
    char **grown = kl_buf_try_grow(s->paths, &s->cap, s->n + 1, sizeof *grown, 4);
    if (!grown) return -1;
    s->paths = grown;
    if (!(s->paths[s->n] = strndup(p, len))) return -1;
    s->n++;
    return 0;
}

static int kubeconfig_list(sources *s, const char *list) {
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ":");
        if (len && add_path(s, p, len) < 0) return -1;
        p += len + (p[len] == ':');
    }
    s->missing = kl_cfg_format("none of the files in KUBECONFIG (%s) exists", list);
    return s->missing ? 0 : -1;
}

static int home_kubeconfig(sources *s, const char *home) {
    char *p = kl_cfg_format("%s/.kube/config", home);
    int rc = p ? add_path(s, p, strlen(p)) : -1;
    if (rc == 0 && !(s->missing = kl_cfg_format("%s does not exist", p))) rc = -1;
    free(p);
    return rc;
}

/* 0, or -1 on OOM. */
static int kubeconfig_sources(const kl_conn_opts *o, const kl_conn_hooks *h, sources *s) {
    const char *list = env_get(h, "KUBECONFIG"), *home = env_get(h, "HOME");
    if (o->kubeconfig) return add_path(s, o->kubeconfig, strlen(o->kubeconfig));
    if (list) return kubeconfig_list(s, list);
    if (home) return home_kubeconfig(s, home);
    s->missing = strdup("$HOME is not set, so there is no ~/.kube/config");
    return s->missing ? 0 : -1;
}

typedef struct {
    char *server, *ca_file, *token_file, *namespace;
    char *why_not; /* when not in a cluster: which part is missing */
} in_cluster;

static void in_cluster_free(in_cluster *ic) {
    free(ic->server);
    free(ic->ca_file);
    free(ic->token_file);
    free(ic->namespace);
    free(ic->why_not);
}

static int in_cluster_namespace(const kl_conn_hooks *h, const char *dir, in_cluster *ic) {
    const char *pod_ns = env_get(h, "POD_NAMESPACE");
    if (pod_ns) return (ic->namespace = strdup(pod_ns)) ? 0 : -1;
    char *path = kl_cfg_path_join(dir, "namespace");
    size_t len;
    char *ns = path ? kl_cfg_read_file(path, 4096, &len) : NULL;
    free(path);
    if (ns && *kl_cfg_trim(ns)) ic->namespace = ns;
    else free(ns);
    return 0;
}

/* 1 when running in a pod (ic filled), 0 when not (ic->why_not set), -1 on OOM. */
static int in_cluster_detect(const kl_conn_hooks *h, in_cluster *ic) {
    const char *host = env_get(h, "KUBERNETES_SERVICE_HOST");
    const char *port = env_get(h, "KUBERNETES_SERVICE_PORT");
    const char *dir = env_get(h, "KLUA_SERVICEACCOUNT_DIR");
    dir = dir ? dir : SERVICEACCOUNT_DIR;
    if (!host || !port)
        return (ic->why_not = strdup("KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is unset"))
                   ? 0 : -1;
    if (!(ic->token_file = kl_cfg_path_join(dir, "token"))) return -1;
    if (kl_cfg_check_readable(ic->token_file) < 0)
        return (ic->why_not = kl_cfg_format("the service-account token %s is unreadable: %s",
                                            ic->token_file, strerror(errno))) ? 0 : -1;
    int v6 = strchr(host, ':') != NULL;
    if (!(ic->server = kl_cfg_format("https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port)))
        return -1;
    /* Like client-go, a missing CA file leaves the system's CAs in charge. */
    if (!(ic->ca_file = kl_cfg_path_join(dir, "ca.crt"))) return -1;
    if (kl_cfg_check_readable(ic->ca_file) < 0) {
        free(ic->ca_file);
        ic->ca_file = NULL;
    }
    return in_cluster_namespace(h, dir, ic) < 0 ? -1 : 1;
}

/* ---- the plan: every setting before it is checked and copied ------------- */

typedef struct {
    source_kind source;
    const char *context, *namespace;
    char cluster_who[200], user_who[200]; /* "cluster \"c\"" for messages */
    const char *server, *ca_file, *ca_data, *tls_server_name, *proxy_url;
    int insecure;
    const char *cert_file, *cert_data, *key_file, *key_data;
    const char *token, *token_file, *username, *password;
    const kl_exec_config *exec;
    const char *auth_provider, *exec_error;
    const char *as, *as_uid;
    const char *const *as_groups;
    size_t n_as_groups;
    const kl_kc_extra *as_extra;
    size_t n_as_extra;
    int disable_compression;
} plan;

static void plan_cluster(plan *p, const kl_kc_cluster *cl) {
    snprintf(p->cluster_who, sizeof p->cluster_who, "cluster \"%.150s\"", cl->head.name);
    p->server = cl->server;
    p->ca_file = cl->ca_file;
    p->ca_data = cl->ca_data;
    p->tls_server_name = cl->tls_server_name;
    p->proxy_url = cl->proxy_url;
    p->insecure = cl->insecure;
    p->disable_compression = cl->disable_compression;
}

static void plan_user(plan *p, const kl_kc_user *u) {
    snprintf(p->user_who, sizeof p->user_who, "user \"%.150s\"", u->head.name);
    p->cert_file = u->cert_file;
    p->cert_data = u->cert_data;
    p->key_file = u->key_file;
    p->key_data = u->key_data;
    p->token = u->token;
    p->token_file = u->token_file;
    p->username = u->username;
    p->password = u->password;
    p->exec = u->has_exec ? &u->exec : NULL;
    p->auth_provider = u->auth_provider;
    p->exec_error = u->exec_error;
    p->as = u->as.user;
    p->as_uid = u->as.uid;
    p->as_groups = (const char *const *)u->as.groups;
    p->n_as_groups = u->as.ngroups;
    p->as_extra = u->as.extra;
    p->n_as_extra = u->as.nextra;
}

/* Appends word to the list in buf ("a, b"), or counts it in *more once the
 * list is full, so that a long list leaves room for the rest of a message. */
static void append_name(char *buf, size_t len, const char *word, size_t *more) {
    size_t used = strlen(buf);
    if (*more || used + strlen(word) + 2 >= len) {
        (*more)++;
        return;
    }
    snprintf(buf + used, len - used, "%s%s", used ? ", " : "", word);
}

static void end_names(char *buf, size_t len, size_t more) {
    size_t used = strlen(buf);
    if (more) snprintf(buf + used, len - used, " and %zu more", more);
}

/* A context that no file defines: which files were read, which contexts
 * they define, and how to choose one. */
static int no_such_context(const kl_conn_opts *o, const kl_kubeconfig *kc, const sources *src, const char *name,
                           char *err, size_t errlen) {
    char files[200] = "", names[200] = "";
    size_t more = 0;
    for (size_t i = 0; i < kc->files_found; i++) append_name(files, sizeof files, src->paths[kc->found[i]], &more);
    end_names(files, sizeof files, more);
    more = 0;
    for (size_t i = 0; i < kc->ncontexts; i++) append_name(names, sizeof names, kc->contexts[i].head.name, &more);
    end_names(names, sizeof names, more);
    return kl_cfg_fail(err, errlen, "%s \"%s\" not found in %s (%s%s); choose one with --context or set "
                       "current-context", o->context ? "context" : "current-context", name, files,
                       kc->ncontexts ? "contexts: " : "no contexts", names);
}

static int from_kubeconfig(plan *p, const kl_conn_opts *o, const kl_kubeconfig *kc, const sources *src, char *err,
                           size_t errlen) {
    const char *name = o->context ? o->context : kc->current_context;
    if (!name && o->server) {
        p->source = SRC_FLAGS;
        return 0;
    }
    if (!name) return kl_cfg_fail(err, errlen, "kubeconfig has no current-context; pass --context NAME");
    const kl_kc_context *ctx = kl_kubeconfig_context(kc, name);
    if (!ctx) return no_such_context(o, kc, src, name, err, errlen);
    p->source = SRC_KUBECONFIG;
    p->context = name;
    p->namespace = ctx->namespace;
    const kl_kc_cluster *cl = kl_kubeconfig_cluster(kc, ctx->cluster);
    if (ctx->cluster && !cl)
        return kl_cfg_fail(err, errlen, "context \"%s\" refers to cluster \"%s\", which is not in kubeconfig",
                           name, ctx->cluster);
    const kl_kc_user *u = kl_kubeconfig_user(kc, ctx->user);
    if (ctx->user && !u)
        return kl_cfg_fail(err, errlen, "context \"%s\" refers to user \"%s\", which is not in kubeconfig",
                           name, ctx->user);
    if (cl) plan_cluster(p, cl);
    if (u) plan_user(p, u);
    return 0;
}

static void from_in_cluster(plan *p, const in_cluster *ic) {
    p->source = SRC_IN_CLUSTER;
    snprintf(p->cluster_who, sizeof p->cluster_who, "in-cluster config");
    snprintf(p->user_who, sizeof p->user_who, "in-cluster config");
    p->server = ic->server;
    p->ca_file = ic->ca_file;
    p->token_file = ic->token_file;
    p->namespace = ic->namespace;
}

typedef struct {
    sources src;
    kl_kubeconfig kc;
    in_cluster ic;
} load_state;

static int choose(plan *p, const kl_conn_opts *o, const kl_conn_hooks *h, load_state *ls,
                  char *err, size_t errlen) {
    if (o->kubeconfig && ls->kc.files_found == 0)
        return kl_cfg_fail(err, errlen, "kubeconfig %s (from --kubeconfig) does not exist", o->kubeconfig);
    if (ls->kc.files_found && !kl_kubeconfig_empty(&ls->kc))
        return from_kubeconfig(p, o, &ls->kc, &ls->src, err, errlen);
    const char *missing = ls->kc.files_found || !ls->src.missing ? "the kubeconfig is empty" : ls->src.missing;
    if (o->context)
        return kl_cfg_fail(err, errlen, "context \"%s\" not found in kubeconfig: %s", o->context, missing);
    if (o->server) {
        p->source = SRC_FLAGS;
        return 0;
    }
    int rc = in_cluster_detect(h, &ls->ic);
    if (rc < 0) return kl_cfg_fail(err, errlen, "out of memory");
    if (rc == 0)
        return kl_cfg_fail(err, errlen,
                           "no configuration: %s, and not running in a cluster (%s); pass "
                           "--kubeconfig or --server, or set KUBECONFIG", missing, ls->ic.why_not);
    from_in_cluster(p, &ls->ic);
    return 0;
}

/* client-go's override rules: --server drops the kubeconfig's
 * tls-server-name, --insecure-skip-tls-verify drops its CA, --token
 * replaces the user's other credentials (a client certificate stays), and
 * each of --as, --as-uid and --as-group replaces its own field only
 * (clientcmd's getUserIdentificationPartialConfig). */
static void apply_overrides(plan *p, const kl_conn_opts *o) {
    if (o->server) {
        p->server = o->server;
        p->tls_server_name = NULL;
        snprintf(p->cluster_who, sizeof p->cluster_who, "--server");
    }
    if (o->insecure_skip_tls_verify) {
        p->insecure = 1;
        p->ca_file = p->ca_data = NULL;
    }
    if (o->token) {
        p->token = o->token;
        p->token_file = p->username = p->password = NULL;
        p->exec = NULL;
        p->auth_provider = p->exec_error = NULL;
        snprintf(p->user_who, sizeof p->user_who, "--token");
    }
    if (o->as) p->as = o->as;
    if (o->as_uid) p->as_uid = o->as_uid;
    if (o->n_as_groups) {
        p->as_groups = o->as_groups;
        p->n_as_groups = o->n_as_groups;
    }
    p->disable_compression |= o->disable_compression;
}

/* ---- checking and copying the plan into the connection ------------------- */

static int oom(char *err, size_t errlen) { return kl_cfg_fail(err, errlen, "out of memory"); }

static int copy_str(char **dst, const char *src, char *err, size_t errlen) {
    if (!src) return 0;
    return (*dst = strdup(src)) ? 0 : oom(err, errlen);
}

static int normalize_server(kl_conn *c, const char *in, char *err, size_t errlen) {
    /* A bare host:port means https, as in client-go. */
    char *s = strstr(in, "://") ? strdup(in) : kl_cfg_format("https://%s", in);
    if (!s) return oom(err, errlen);
    c->server = s;
    size_t skip = !strncasecmp(s, "https://", 8) ? 8 : !strncasecmp(s, "http://", 7) ? 7 : 0;
    if (!skip || !s[skip] || s[skip] == '/' || kl_cfg_has_control(s) || strchr(s, ' '))
        return kl_cfg_fail(err, errlen, "server \"%s\" is not an http:// or https:// URL", in);
    size_t len = strlen(s);
    while (len > skip && s[len - 1] == '/') s[--len] = '\0';
    return 0;
}

static int build_server(kl_conn *c, const plan *p, char *err, size_t errlen) {
    if (p->server) return normalize_server(c, p->server, err, errlen);
    if (!*p->cluster_who)
        return kl_cfg_fail(err, errlen, "context \"%s\" names no cluster; add one or pass --server",
                           p->context ? p->context : "");
    return kl_cfg_fail(err, errlen, "%s has no server; set one or pass --server", p->cluster_who);
}

static int decode(unsigned char **out, size_t *len, const char *b64, const char *who,
                  const char *field, char *err, size_t errlen) {
    if (!b64) return 0;
    *out = kl_cfg_base64_decode(b64, len);
    if (*out) return 0;
    if (errno == ENOMEM) return oom(err, errlen);
    return kl_cfg_fail(err, errlen, "%s: %s is not valid base64", who, field);
}

static int readable(char **dst, const char *path, const char *who, const char *field, char *err,
                    size_t errlen) {
    if (!path) return 0;
    if (kl_cfg_check_readable(path) < 0)
        return kl_cfg_fail(err, errlen, "%s: %s %s: %s", who, field, path, strerror(errno));
    return copy_str(dst, path, err, errlen);
}

/* Hides the user:password of a proxy URL. */
static char *redact_userinfo(const char *url) {
    const char *auth = strstr(url, "://");
    auth = auth ? auth + 3 : url;
    size_t alen = strcspn(auth, "/?#");
    const char *at = memrchr(auth, '@', alen);
    if (!at) return strdup(url);
    return kl_cfg_format("%.*s<redacted>%s", (int)(auth - url), url, at);
}

static int build_tls(kl_conn *c, const plan *p, char *err, size_t errlen) {
    const char *who = p->cluster_who;
    if (p->insecure && (p->ca_file || p->ca_data))
        return kl_cfg_fail(err, errlen,
                           "%s sets both insecure-skip-tls-verify and a certificate authority; "
                           "remove one", who);
    c->insecure = p->insecure;
    /* As in client-go, -data wins over the file when both are given. */
    if (p->ca_data) {
        if (decode(&c->ca_data, &c->ca_len, p->ca_data, who, "certificate-authority-data", err, errlen) < 0)
            return -1;
    } else if (readable(&c->ca_file, p->ca_file, who, "certificate-authority", err, errlen) < 0) {
        return -1;
    }
    if (copy_str(&c->tls_server_name, p->tls_server_name, err, errlen) < 0 ||
        copy_str(&c->proxy_url, p->proxy_url, err, errlen) < 0)
        return -1;
    if (c->proxy_url && !(c->proxy_shown = redact_userinfo(c->proxy_url))) return oom(err, errlen);
    return 0;
}

static int build_client_cert(kl_conn *c, const plan *p, char *err, size_t errlen) {
    const char *who = p->user_who;
    int cert = p->cert_data || p->cert_file, key = p->key_data || p->key_file;
    if (cert != key)
        return kl_cfg_fail(err, errlen, "%s has a client %s but no client %s", who,
                           cert ? "certificate" : "key", cert ? "key" : "certificate");
    if (p->cert_data ? decode(&c->cert_data, &c->cert_len, p->cert_data, who, "client-certificate-data", err, errlen)
                     : readable(&c->cert_file, p->cert_file, who, "client-certificate", err, errlen))
        return -1;
    if (p->key_data ? decode(&c->key_data, &c->key_len, p->key_data, who, "client-key-data", err, errlen)
                    : readable(&c->key_file, p->key_file, who, "client-key", err, errlen))
        return -1;
    return 0;
}

/* Reads, trims and checks a token file; NULL with err. */
static char *read_token(const char *path, const char *who, char *err, size_t errlen) {
    size_t len;
    char *t = kl_cfg_read_regular(path, TOKEN_FILE_MAX, &len);
    if (!t) {
        kl_cfg_fail(err, errlen, "%s: token file %s: %s", who, path, kl_cfg_read_error(errno));
        return NULL;
    }
    kl_cfg_trim(t);
    const char *problem = !*t ? "is empty" : kl_cfg_has_control(t) ? "contains control characters" : NULL;
    if (problem) {
        kl_cfg_fail(err, errlen, "%s: token file %s %s", who, path, problem);
        kl_cfg_free_secret(t, len);
        return NULL;
    }
    return t;
}

static int build_token(kl_conn *c, const plan *p, char *err, size_t errlen) {
    /* client-go prefers the file: it is what rotation keeps current. */
    if (p->token_file) {
        c->auth = AUTH_TOKEN_FILE;
        if (copy_str(&c->token_file, p->token_file, err, errlen) < 0) return -1;
        if (!(c->token = read_token(c->token_file, p->user_who, err, errlen))) return -1;
        c->token_read_at = mono_now(c);
        return 0;
    }
    c->auth = AUTH_TOKEN;
    if (kl_cfg_has_control(p->token))
        return kl_cfg_fail(err, errlen, "%s: the token contains control characters", p->user_who);
    return copy_str(&c->token, p->token, err, errlen);
}

static int build_auth(kl_conn *c, const plan *p, char *err, size_t errlen) {
    const char *who = p->user_who;
    if (p->auth_provider)
        return kl_cfg_fail(err, errlen,
                           "%s uses auth-provider \"%s\", which klua does not support; use an "
                           "exec credential plugin instead", who, p->auth_provider);
    if (p->exec_error) return kl_cfg_fail(err, errlen, "%s", p->exec_error);
    int token = p->token || p->token_file, basic = p->username || p->password;
    if (token && basic)
        return kl_cfg_fail(err, errlen, "%s sets both a token and a username/password; keep one", who);
    if (token) return build_token(c, p, err, errlen);
    if (basic) {
        c->auth = AUTH_BASIC;
        if (copy_str(&c->username, p->username ? p->username : "", err, errlen) < 0) return -1;
        return copy_str(&c->password, p->password ? p->password : "", err, errlen);
    }
    if (p->exec) {
        c->auth = AUTH_EXEC;
        return kl_exec_config_copy(&c->exec, p->exec) < 0 ? oom(err, errlen) : 0;
    }
    c->auth = AUTH_NONE;
    return 0;
}

/* The bytes of a header name that travel as they are: RFC 7230's token
 * characters, '%' excepted (client-go's legalHeaderByte). */
static int header_token_byte(unsigned char b) {
    return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') ||
           (b && strchr("!#$&'*+-.^_`|~", b));
}

/* "Impersonate-Extra-" and the key, every other byte percent-encoded as
 * client-go's headerKeyEscape does, so that kube-apiserver's
 * url.PathUnescape gives the key back ("acme.com/project" ->
 * "acme.com%2Fproject"). */
static char *extra_header(const char *key, const char *value) {
    size_t n = strlen(key);
    char *name = malloc(3 * n + 1), *w = name;
    if (!name) return NULL;
    for (const unsigned char *k = (const unsigned char *)key; *k; k++)
        w += header_token_byte(*k) ? sprintf(w, "%c", *k) : sprintf(w, "%%%02X", *k);
    char *line = kl_cfg_format("Impersonate-Extra-%s: %s", name, value);
    free(name);
    return line;
}

static int add_impersonate(kl_conn *c, char *line, char *err, size_t errlen) {
    char **grown = line ? realloc(c->impersonate, (c->nimpersonate + 1) * sizeof *grown) : NULL;
    if (!grown) {
        free(line);
        return oom(err, errlen);
    }
    c->impersonate = grown;
    c->impersonate[c->nimpersonate++] = line;
    return 0;
}

/* A value that would end its header line early is refused: it could add
 * headers of its own. */
static int header_safe(const char *v, const char *what, char *err, size_t errlen) {
    if (!kl_cfg_has_control(v)) return 0;
    return kl_cfg_fail(err, errlen, "%s contains control characters", what);
}

static int build_impersonation(kl_conn *c, const plan *p, char *err, size_t errlen) {
    /* kube-apiserver refuses groups, a uid or extras for no user
     * ("requested ... without impersonating a user"): say so here. */
    if (!p->as && (p->as_uid || p->n_as_groups || p->n_as_extra))
        return kl_cfg_fail(err, errlen, "%s%sas-uid, as-groups and as-user-extra (--as-uid, --as-group) "
                           "need a user to impersonate: set as, or pass --as", p->user_who,
                           *p->user_who ? ": " : "");
    if (!p->as) return 0;
    if (header_safe(p->as, "the user to impersonate (as, --as)", err, errlen) < 0 ||
        (p->as_uid && header_safe(p->as_uid, "as-uid (--as-uid)", err, errlen) < 0) ||
        copy_str(&c->as, p->as, err, errlen) < 0 ||
        add_impersonate(c, kl_cfg_format("Impersonate-User: %s", p->as), err, errlen) < 0 ||
        (p->as_uid && add_impersonate(c, kl_cfg_format("Impersonate-Uid: %s", p->as_uid), err, errlen) < 0))
        return -1;
    for (size_t i = 0; i < p->n_as_groups; i++)
        if (header_safe(p->as_groups[i], "a group to impersonate (as-groups, --as-group)", err, errlen) < 0 ||
            add_impersonate(c, kl_cfg_format("Impersonate-Group: %s", p->as_groups[i]), err, errlen) < 0)
            return -1;
    for (size_t i = 0; i < p->n_as_extra; i++)
        if (header_safe(p->as_extra[i].value, "a value of as-user-extra", err, errlen) < 0 ||
            add_impersonate(c, extra_header(p->as_extra[i].key, p->as_extra[i].value), err, errlen) < 0)
            return -1;
    return 0;
}

static int build(kl_conn *c, const plan *p, char *err, size_t errlen) {
    c->source = p->source;
    c->compression = !p->disable_compression;
    if (build_server(c, p, err, errlen) < 0 || build_tls(c, p, err, errlen) < 0 ||
        build_client_cert(c, p, err, errlen) < 0 || build_auth(c, p, err, errlen) < 0 ||
        build_impersonation(c, p, err, errlen) < 0)
        return -1;
    if (copy_str(&c->context, p->source == SRC_KUBECONFIG ? p->context : "", err, errlen) < 0) return -1;
    return copy_str(&c->namespace, p->namespace ? p->namespace : "default", err, errlen);
}

kl_conn *kl_conn_load_with(const kl_conn_opts *opts, const kl_conn_hooks *hooks, char *err,
                           size_t errlen) {
    kl_conn *c = calloc(1, sizeof *c);
    if (!c) {
        oom(err, errlen);
        return NULL;
    }
    c->allow_insecure_credentials = opts->allow_insecure_credentials;
    c->exec_timeout_ms = hooks && hooks->exec_timeout_ms > 0 ? hooks->exec_timeout_ms
                                                             : KL_EXEC_TIMEOUT_MS_DEFAULT;
    load_state ls;
    memset(&ls, 0, sizeof ls);
    plan p;
    memset(&p, 0, sizeof p);
    int rc = kubeconfig_sources(opts, hooks, &ls.src) < 0 ? oom(err, errlen) : 0;
    if (rc == 0) rc = kl_kubeconfig_load(&ls.kc, ls.src.paths, ls.src.n, err, errlen);
    if (rc == 0) rc = choose(&p, opts, hooks, &ls, err, errlen);
    if (rc == 0) {
        apply_overrides(&p, opts);
        rc = build(c, &p, err, errlen);
    }
    kl_kubeconfig_free(&ls.kc);
    sources_free(&ls.src);
    in_cluster_free(&ls.ic);
    if (rc < 0) {
        kl_conn_free(c);
        return NULL;
    }
    return c;
}

kl_conn *kl_conn_load(const kl_conn_opts *opts, char *err, size_t errlen) {
    return kl_conn_load_with(opts, NULL, err, errlen);
}

void kl_conn_free(kl_conn *c) {
    if (!c) return;
    free(c->server);
    free(c->namespace);
    free(c->context);
    free(c->ca_file);
    free(c->ca_data);
    free(c->tls_server_name);
    kl_cfg_free_secret_str(c->proxy_url);
    free(c->proxy_shown);
    free(c->cert_file);
    free(c->key_file);
    free(c->cert_data);
    kl_cfg_free_secret(c->key_data, c->key_len);
    kl_cfg_free_secret_str(c->token);
    free(c->token_file);
    free(c->username);
    kl_cfg_free_secret_str(c->password);
    for (size_t i = 0; i < c->nimpersonate; i++) free(c->impersonate[i]);
    free(c->impersonate);
    free(c->as);
    kl_conn_detach(c);
    kl_exec_config_clear(&c->exec);
    kl_exec_cred_clear(&c->cred);
    free(c);
}

const char *kl_conn_server(const kl_conn *c) { return c->server; }
const char *kl_conn_namespace(const kl_conn *c) { return c->namespace; }
const char *kl_conn_context(const kl_conn *c) { return c->context; }
int kl_conn_compression(const kl_conn *c) { return c->compression; }

void kl_conn_describe(const kl_conn *c, kl_conn_info *out) {
    static const char *const sources_names[] = {"kubeconfig", "in-cluster", "flags"};
    static const char *const auth_names[] = {"none", "token", "token-file", "basic", "exec"};
    int cert = c->cert_file || c->cert_data;
    out->source = sources_names[c->source];
    out->auth = c->auth == AUTH_NONE && cert ? "client-cert" : auth_names[c->auth];
    out->ca = c->ca_data ? "data" : c->ca_file ? "file" : "none";
    out->client_cert = c->cert_data ? "data" : c->cert_file ? "file" : "none";
    out->insecure = c->insecure;
    out->tls_server_name = c->tls_server_name;
    out->proxy = c->proxy_shown;
    out->as = c->as;
}

/* ---- refreshing credentials ---------------------------------------------- */

/* Re-reads the token file: 1 when the token changed. A failed read keeps
 * the previous token, as client-go does, and is retried on the next turn. */
static int reread_token(kl_conn *c) {
    char err[512];
    c->token_read_at = mono_now(c);
    char *t = read_token(c->token_file, "re-reading", err, sizeof err);
    if (!t) {
        kl_log(KL_LOG_WARN, "config", "%s; keeping the previous token", err);
        return 0;
    }
    int changed = strcmp(t, c->token) != 0;
    kl_cfg_free_secret_str(c->token);
    c->token = t;
    return changed;
}

/* ---- exec credentials ---------------------------------------------------- */

void kl_conn_attach(kl_conn *c, kl_loop *loop) { c->loop = loop; }

void kl_conn_detach(kl_conn *c) {
    kl_exec_cancel(c->run);
    c->run = NULL;
    c->loop = NULL;
}

static void enqueue(kl_conn *c, kl_conn_waiter *w) {
    w->run = c->runs;
    w->fresh = 0;
    w->next = NULL;
    w->prev = c->last;
    if (c->last) c->last->next = w;
    else c->first = w;
    c->last = w;
}

static void dequeue(kl_conn *c, kl_conn_waiter *w) {
    if (w->prev) w->prev->next = w->next;
    else c->first = w->next;
    if (w->next) w->next->prev = w->prev;
    else c->last = w->prev;
    w->prev = w->next = NULL;
}

void kl_conn_forget(kl_conn *c, kl_conn_waiter *w) {
    if (w->prev || w->next || c->first == w) dequeue(c, w);
}

/* Wakes the requests that waited for run number `run`, first come first.
 * One may start the next run and wait for that, or cancel another: so the
 * queue is walked afresh each time, not copied. */
static void wake(kl_conn *c, unsigned long run, const char *err) {
    kl_conn_waiter *w;
    while ((w = c->first) && w->run == run) {
        dequeue(c, w);
        w->fresh = !err;
        w->ready(w, err);
    }
}

static void plugin_done(void *ud, kl_exec_cred *cred, const char *err) {
    kl_conn *c = ud;
    c->run = NULL;
    if (cred) {
        kl_exec_cred_clear(&c->cred);
        c->cred = *cred;
        c->have_cred = 1;
        c->cred_after_401 = c->run_for_401;
        c->cred_stale = 0;
    }
    wake(c, c->runs, err);
}

static int start_plugin(kl_conn *c, char *err, size_t errlen) {
    if (!c->loop) return kl_cfg_fail(err, errlen, "exec plugin \"%s\": no event loop to run it on", c->exec.command);
    kl_exec_cluster cl = {c->server, c->tls_server_name, c->proxy_url, c->insecure, c->ca_data, c->ca_len};
    char *ca_read = NULL;
    if (c->exec.provide_cluster_info && !c->ca_data && c->ca_file) {
        size_t len;
        if (!(ca_read = kl_cfg_read_regular(c->ca_file, CA_FILE_MAX, &len)))
            return kl_cfg_fail(err, errlen, "certificate-authority %s: %s", c->ca_file,
                               kl_cfg_read_error(errno));
        cl.ca_data = (unsigned char *)ca_read;
        cl.ca_len = len;
    }
    c->run = kl_exec_start(c->loop, &c->exec, c->exec.provide_cluster_info ? &cl : NULL,
                           c->exec_timeout_ms, plugin_done, c, err, errlen);
    free(ca_read);
    if (!c->run) return -1;
    c->runs++;
    c->run_for_401 = c->cred_stale;
    return 0;
}

/* 0 when the credential in hand serves w's request, KL_CONN_PENDING when w
 * waits for the plugin, -1 with err when it cannot be started. */
static int exec_cred(kl_conn *c, kl_conn_waiter *w, char *err, size_t errlen) {
    int fresh = w->fresh;
    w->fresh = 0;
    int expired = c->have_cred && c->cred.has_expiry && real_now(c) >= c->cred.expiry;
    if (c->have_cred && !c->cred_stale && (!expired || fresh)) return 0;
    if (!c->run && start_plugin(c, err, errlen) < 0) return -1;
    enqueue(c, w);
    return KL_CONN_PENDING;
}

int kl_conn_unauthorized(kl_conn *c) {
    switch (c->auth) {
    case AUTH_TOKEN_FILE:
        return reread_token(c);
    case AUTH_EXEC:
        if (!c->have_cred) return 0;
        c->cred_stale = 1;
        return !c->cred_after_401;
    default:
        return 0;
    }
}

/* ---- preparing a request ------------------------------------------------- */

static int checked(CURLcode rc, const char *option, char *err, size_t errlen) {
    if (rc == CURLE_OK) return 0;
    return kl_cfg_fail(err, errlen, "libcurl refused %s: %s", option, curl_easy_strerror(rc));
}

#define SETOPT(easy, option, value, err, errlen) \
    checked(curl_easy_setopt((easy), (option), (value)), #option, (err), (errlen))

static int need_blobs(const char *what, char *err, size_t errlen) {
    if (kl_tls_blobs_supported()) return 0;
    return kl_cfg_fail(err, errlen,
                       "this libcurl (%s) cannot take a %s from memory; give it as a file path",
                       curl_version_info(CURLVERSION_NOW)->ssl_version, what);
}

/* A configured CA is the only one trusted, as in client-go: libcurl's
 * default bundle and directory are switched off. */
static int prepare_ca(kl_conn *c, CURL *e, char *err, size_t errlen) {
    if (c->ca_data) {
        struct curl_blob b = {c->ca_data, c->ca_len, CURL_BLOB_COPY};
        if (need_blobs("certificate authority", err, errlen) ||
            SETOPT(e, CURLOPT_CAINFO_BLOB, &b, err, errlen) ||
            SETOPT(e, CURLOPT_CAINFO, (char *)NULL, err, errlen))
            return -1;
    } else if (c->ca_file) {
        if (SETOPT(e, CURLOPT_CAINFO, c->ca_file, err, errlen)) return -1;
    } else {
        return 0;
    }
    return SETOPT(e, CURLOPT_CAPATH, (char *)NULL, err, errlen);
}

static int prepare_client_cert(kl_conn *c, CURL *e, char *err, size_t errlen) {
    const void *cert = c->cert_data, *key = c->key_data;
    size_t cert_len = c->cert_len, key_len = c->key_len;
    if (c->auth == AUTH_EXEC && c->cred.cert_pem) {
        cert = c->cred.cert_pem, cert_len = c->cred.cert_len;
        key = c->cred.key_pem, key_len = c->cred.key_len;
    }
    if (!cert && !c->cert_file) return 0;
    if (SETOPT(e, CURLOPT_SSLCERTTYPE, "PEM", err, errlen) ||
        SETOPT(e, CURLOPT_SSLKEYTYPE, "PEM", err, errlen))
        return -1;
    if (cert) {
        struct curl_blob cb = {(void *)cert, cert_len, CURL_BLOB_COPY};
        struct curl_blob kb = {(void *)key, key_len, CURL_BLOB_COPY};
        return need_blobs("client certificate", err, errlen) ||
               SETOPT(e, CURLOPT_SSLCERT_BLOB, &cb, err, errlen) ||
               SETOPT(e, CURLOPT_SSLKEY_BLOB, &kb, err, errlen) ? -1 : 0;
    }
    return SETOPT(e, CURLOPT_SSLCERT, c->cert_file, err, errlen) ||
           SETOPT(e, CURLOPT_SSLKEY, c->key_file, err, errlen) ? -1 : 0;
}

static int prepare_tls(kl_conn *c, CURL *e, char *err, size_t errlen) {
    long verify = !c->insecure;
    if (SETOPT(e, CURLOPT_SSL_VERIFYPEER, verify, err, errlen) ||
        SETOPT(e, CURLOPT_SSL_VERIFYHOST, verify ? 2L : 0L, err, errlen) ||
        (verify && prepare_ca(c, e, err, errlen) < 0))
        return -1;
    if (c->tls_server_name &&
        kl_tls_set_server_name(e, c->tls_server_name, (int)verify, err, errlen) < 0)
        return -1;
    return prepare_client_cert(c, e, err, errlen);
}

static int add_bearer(struct curl_slist **headers, const char *token, char *err, size_t errlen) {
    static const char prefix[] = "Authorization: Bearer ";
    size_t n = sizeof prefix + strlen(token);
    char *h = malloc(n);
    if (!h) return oom(err, errlen);
    snprintf(h, n, "%s%s", prefix, token);
    struct curl_slist *l = curl_slist_append(*headers, h);
    kl_cfg_free_secret(h, n);
    if (!l) return oom(err, errlen);
    *headers = l;
    return 0;
}

static int prepare_auth(kl_conn *c, CURL *e, struct curl_slist **headers, char *err, size_t errlen) {
    switch (c->auth) {
    case AUTH_TOKEN:
    case AUTH_TOKEN_FILE:
        return add_bearer(headers, c->token, err, errlen);
    case AUTH_BASIC:
        return SETOPT(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC, err, errlen) ||
               SETOPT(e, CURLOPT_USERNAME, c->username, err, errlen) ||
               SETOPT(e, CURLOPT_PASSWORD, c->password, err, errlen) ? -1 : 0;
    case AUTH_EXEC:
        return c->cred.token ? add_bearer(headers, c->cred.token, err, errlen) : 0;
    default:
        return 0;
    }
}

int kl_conn_prepare(kl_conn *c, CURL *easy, struct curl_slist **headers, kl_conn_waiter *w,
                    char *err, size_t errlen) {
    int https = !strncasecmp(c->server, "https://", 8);
    if (c->auth != AUTH_NONE && !https && !c->allow_insecure_credentials)
        return kl_cfg_fail(err, errlen,
                           "refusing to send credentials to %s over plain http; use an https:// "
                           "server, or pass --allow-insecure-credentials if the network is trusted",
                           c->server);
    if (c->auth == AUTH_EXEC) {
        int rc = exec_cred(c, w, err, errlen);
        if (rc != 0) return rc;
    }
    if (c->auth == AUTH_TOKEN_FILE && mono_now(c) - c->token_read_at >= TOKEN_REREAD_S) reread_token(c);
    if (https && prepare_tls(c, easy, err, errlen) < 0) return -1;
    if (c->proxy_url && SETOPT(easy, CURLOPT_PROXY, c->proxy_url, err, errlen)) return -1;
    if (prepare_auth(c, easy, headers, err, errlen)) return -1;
    for (size_t i = 0; i < c->nimpersonate; i++) {
        struct curl_slist *l = curl_slist_append(*headers, c->impersonate[i]);
        if (!l) return oom(err, errlen);
        *headers = l;
    }
    return 0;
}
