/*
 * exec.h - client-go credential plugins (`user.exec` in a kubeconfig).
 *
 * A plugin is a command that prints an ExecCredential JSON object with a
 * bearer token or a client certificate and key, and optionally when they
 * expire. It is told about the request through the KUBERNETES_EXEC_INFO
 * environment variable, as client-go does. It runs on the event loop without
 * blocking it: its output is read as it comes, a deadline kills it, and the
 * caller (conn.c) caches the credential so it runs rarely.
 *
 * Nothing a plugin prints on stdout ever appears in an error message; only
 * the command's name and the first line of its stderr do.
 */
#ifndef KLUA_EXEC_CRED_H
#define KLUA_EXEC_CRED_H

#include <stddef.h>
#include <time.h>

#include "base/loop.h"
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

typedef struct kl_exec_run kl_exec_run;
/* How a run ended: cred (whose contents the callee takes and clears), or
 * NULL and a one-line err naming the command. The run is freed already. */
typedef void (*kl_exec_done_fn)(void *ud, kl_exec_cred *cred, const char *err);

/* Starts the plugin on loop; done is called from the loop once it exited
 * and its credential is parsed, or it failed. cluster is NULL unless
 * provideClusterInfo is set; cfg must outlive the run. The plugin gets
 * stdin, stdout and stderr and no other descriptor, and (unless it runs
 * interactively, on klua's terminal) a process group of its own, which is
 * killed with SIGKILL when timeout_ms pass or on kl_exec_cancel. It ends
 * when it exits: a child it leaves behind holding its stdout is not waited
 * for. Returns the run, or NULL with err when it could not start. */
kl_exec_run *kl_exec_start(kl_loop *loop, const kl_exec_config *cfg, const kl_exec_cluster *cluster,
                           int timeout_ms, kl_exec_done_fn done, void *ud, char *err, size_t errlen);
/* Kills a run that has not ended (and reaps it) and frees it; done is not
 * called. NULL is ignored. */
void kl_exec_cancel(kl_exec_run *run);
/* Wipes and frees the credential's secrets. */
void kl_exec_cred_clear(kl_exec_cred *cred);

#endif
