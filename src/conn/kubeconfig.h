/*
 * kubeconfig.h - loading and merging kubeconfig files as client-go does.
 *
 * Files are read in order and merged: for clusters, users and contexts the
 * first file to define a name wins (the whole entry, fields are not mixed),
 * and the first file with a current-context sets it. Within one file a later
 * entry with the same name replaces an earlier one. Relative paths in a file
 * (certificate-authority, client-certificate, client-key, tokenFile, and an
 * exec command containing a slash) are resolved against that file's
 * directory. Values are kept as written; base64 fields are decoded, and
 * files checked, only for the entries a connection actually uses.
 */
#ifndef KLUA_KUBECONFIG_H
#define KLUA_KUBECONFIG_H

#include <stddef.h>

#include "conn/exec.h"

/* Largest kubeconfig file accepted. */
#define KL_KUBECONFIG_MAX ((size_t)16 << 20)

/* The first member of every entry, for merging by name. */
typedef struct kl_kc_named {
    char *name;
    size_t file; /* index of the file that defined it */
} kl_kc_named;

typedef struct kl_kc_cluster {
    kl_kc_named head;
    char *server;
    char *ca_file; /* certificate-authority, resolved */
    char *ca_data; /* certificate-authority-data, base64 as written */
    char *tls_server_name;
    char *proxy_url;
    int insecure;
    int disable_compression;
} kl_kc_cluster;

/* One value of as-user-extra: a key may have several. */
typedef struct kl_kc_extra {
    char *key, *value;
} kl_kc_extra;

/* Who the user acts as (kubectl --as and friends), as written. */
typedef struct kl_kc_impersonate {
    char *user;    /* as */
    char *uid;     /* as-uid */
    char **groups; /* as-groups */
    size_t ngroups;
    kl_kc_extra *extra; /* as-user-extra, flattened */
    size_t nextra;
} kl_kc_impersonate;

typedef struct kl_kc_user {
    kl_kc_named head;
    char *token;
    char *token_file;             /* resolved */
    char *cert_file, *key_file;   /* resolved */
    char *cert_data, *key_data;   /* base64 as written */
    char *username, *password;
    int has_exec;
    kl_exec_config exec;
    char *exec_error;             /* why exec is unusable; reported only if the user is chosen */
    char *auth_provider;          /* name of a legacy auth-provider, or NULL */
    kl_kc_impersonate as;
} kl_kc_user;

typedef struct kl_kc_context {
    kl_kc_named head;
    char *cluster, *user, *namespace;
} kl_kc_context;

typedef struct kl_kubeconfig {
    kl_kc_cluster *clusters;
    kl_kc_user *users;
    kl_kc_context *contexts;
    size_t nclusters, nusers, ncontexts;
    size_t cap_clusters, cap_users, cap_contexts; /* base/buf.h */
    char *current_context;
    size_t files_found; /* files of the list that existed */
    size_t *found;      /* their indices in the list, for messages */
} kl_kubeconfig;

/* Loads and merges paths[0..n) into kc (zeroed first). A file that does not
 * exist is skipped; any other problem with a file fails the load. 0, or -1
 * with a one-line err naming the file (and the line, for YAML errors). kc
 * must be freed either way. */
int kl_kubeconfig_load(kl_kubeconfig *kc, char *const *paths, size_t n, char *err, size_t errlen);
void kl_kubeconfig_free(kl_kubeconfig *kc);

/* 1 when the merged files define nothing at all. */
int kl_kubeconfig_empty(const kl_kubeconfig *kc);
/* Entries by name, or NULL. */
const kl_kc_cluster *kl_kubeconfig_cluster(const kl_kubeconfig *kc, const char *name);
const kl_kc_user *kl_kubeconfig_user(const kl_kubeconfig *kc, const char *name);
const kl_kc_context *kl_kubeconfig_context(const kl_kubeconfig *kc, const char *name);

#endif
