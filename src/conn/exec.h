/*
 * exec.h - client-go credential plugins (`user.exec` in a kubeconfig).
 *
 * A plugin is a command that prints an ExecCredential JSON object with a
 * bearer token or a client certificate and key, and optionally when they
 * expire. It is told about the request through the KUBERNETES_EXEC_INFO
 * environment variable, as client-go does. Running it blocks: the caller
 * caches the credential (see conn.c) so it runs rarely.
 *
 * Nothing a plugin prints on stdout ever appears in an error message; only
 * the command's name and the first line of its stderr do.
 */
#ifndef KLUA_EXEC_CRED_H
#define KLUA_EXEC_CRED_H

#include <stddef.h>
#include <time.h>

#include "conn/ydoc.h"

#define KL_EXEC_API_V1 "client.authentication.k8s.io/v1"
#define KL_EXEC_API_V1BETA1 "client.authentication.k8s.io/v1beta1"
/* Bytes of stdout accepted from a plugin; a credential is a few KiB. */
#define KL_EXEC_OUTPUT_MAX ((size_t)1 << 20)
/* A plugin still running after this long is killed; interactive logins
 * through a browser need minutes, a stuck plugin must not hang klua. */
#define KL_EXEC_TIMEOUT_MS_DEFAULT (5 * 60 * 1000)

typedef enum { KL_EXEC_NEVER, KL_EXEC_IF_AVAILABLE, KL_EXEC_ALWAYS } kl_exec_interactive;

typedef struct kl_exec_config {
    char *api_version;
    char *command;       /* as configured, a relative path made relative to the kubeconfig */
    char **args;         /* nargs strings */
    size_t nargs;
    char **env;          /* nenv "NAME=value" strings added to the plugin's environment */
    size_t nenv;
    char *install_hint;  /* or NULL */
    int provide_cluster_info;
    kl_exec_interactive interactive;
} kl_exec_config;

/* What a plugin is told about the cluster when provideClusterInfo is set. */
typedef struct kl_exec_cluster {
    const char *server;
    const char *tls_server_name;           /* or NULL */
    const char *proxy_url;                 /* or NULL */
    int insecure;
    const unsigned char *ca_data;          /* PEM bytes, or NULL */
    size_t ca_len;
} kl_exec_cluster;

typedef struct kl_exec_cred {
    char *token;            /* or NULL */
    char *cert_pem, *key_pem; /* both or neither */
    size_t cert_len, key_len;
    int has_expiry;
    time_t expiry;          /* CLOCK_REALTIME seconds */
} kl_exec_cred;

/* Fills cfg from the `exec` mapping of a kubeconfig user. who names the user
 * in errors ("user \"dev\""); dir is the kubeconfig's directory. 0, or -1
 * with err (cfg is then empty). */
int kl_exec_config_from_yaml(kl_exec_config *cfg, kl_ydoc *d, yaml_node_t *exec,
                             const char *who, const char *dir, char *err, size_t errlen);
/* A deep copy; 0 or -1 on OOM. */
int kl_exec_config_copy(kl_exec_config *dst, const kl_exec_config *src);
void kl_exec_config_clear(kl_exec_config *cfg);

/* Runs the plugin and parses its credential into out (which the caller
 * clears). cluster is NULL unless provideClusterInfo is set. timeout_ms
 * bounds the run. 0, or -1 with a one-line err naming the command. */
int kl_exec_run(const kl_exec_config *cfg, const kl_exec_cluster *cluster, int timeout_ms,
                kl_exec_cred *out, char *err, size_t errlen);
/* Wipes and frees the credential's secrets. */
void kl_exec_cred_clear(kl_exec_cred *cred);

#endif
