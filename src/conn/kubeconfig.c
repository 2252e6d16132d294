/* kubeconfig.c - loading and merging kubeconfig files; see kubeconfig.h. */
#include "conn/kubeconfig.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "conn/cfg.h"
#include "conn/ydoc.h"

/* What one file is being read with: its document, directory and name. */
typedef struct {
    kl_ydoc d;
    const char *path;
    char *dir;
    size_t index;
    char *err;
    size_t errlen;
} kc_file;

/* A list of entries that each start with a kl_kc_named. */
typedef struct {
    void **items;
    size_t *n, *cap;
    size_t size;
    void (*clear)(void *entry);
} kc_list;

static int type_error(kc_file *f, yaml_node_t *n, const char *what, const char *want) {
    return kl_cfg_fail(f->err, f->errlen, "kubeconfig %s line %zu: %s must be %s", f->path,
                       kl_ydoc_line(n), what, want);
}

static int oom(kc_file *f) { return kl_cfg_fail(f->err, f->errlen, "out of memory"); }

/* Copies the string at key (NULL when absent or empty). */
static int get_str(kc_file *f, yaml_node_t *map, const char *key, const char *who, char **out) {
    yaml_node_t *n = kl_ydoc_get(&f->d, map, key);
    const char *s = kl_ydoc_scalar(n);
    if (n && !s) {
        char what[256];
        snprintf(what, sizeof what, "%s%s%s", who, *who ? ": " : "", key);
        return type_error(f, n, what, "a string");
    }
    if (!s || !*s) return 0;
    return (*out = strdup(s)) ? 0 : oom(f);
}

/* get_str for a path, resolved against the file's directory. */
static int get_path(kc_file *f, yaml_node_t *map, const char *key, const char *who, char **out) {
    char *raw = NULL;
    if (get_str(f, map, key, who, &raw) < 0) return -1;
    if (!raw) return 0;
    *out = kl_cfg_path_join(f->dir, raw);
    free(raw);
    return *out ? 0 : oom(f);
}

static int get_bool(kc_file *f, yaml_node_t *map, const char *key, const char *who, int *out) {
    yaml_node_t *n = kl_ydoc_get(&f->d, map, key);
    if (!n) return 0;
    if ((*out = kl_ydoc_bool(n)) < 0) {
        char what[256];
        snprintf(what, sizeof what, "%s: %s", who, key);
        return type_error(f, n, what, "true or false");
    }
    return 0;
}

/* A string member of a cluster or user: the key it is read from and how. */
typedef struct {
    const char *key;
    size_t at; /* its offset in the entry */
    enum { KC_TEXT, KC_PATH, KC_SECRET } kind; /* a path is resolved; a secret wiped when freed */
} kc_string;

/* The member's type is checked: _Generic has no case for another than char *. */
#define KC_STRING(key, type, member, kind) {key, _Generic(((type *)0)->member, char *: offsetof(type, member)), kind}
static const kc_string cluster_strings[] = {
    KC_STRING("server", kl_kc_cluster, server, KC_TEXT),
    KC_STRING("certificate-authority", kl_kc_cluster, ca_file, KC_PATH),
    KC_STRING("certificate-authority-data", kl_kc_cluster, ca_data, KC_TEXT),
    KC_STRING("tls-server-name", kl_kc_cluster, tls_server_name, KC_TEXT),
    KC_STRING("proxy-url", kl_kc_cluster, proxy_url, KC_TEXT),
};
static const kc_string user_strings[] = {
    KC_STRING("token", kl_kc_user, token, KC_SECRET),
    KC_STRING("tokenFile", kl_kc_user, token_file, KC_PATH),
    KC_STRING("client-certificate", kl_kc_user, cert_file, KC_PATH),
    KC_STRING("client-key", kl_kc_user, key_file, KC_PATH),
    KC_STRING("client-certificate-data", kl_kc_user, cert_data, KC_TEXT),
    KC_STRING("client-key-data", kl_kc_user, key_data, KC_SECRET),
    KC_STRING("username", kl_kc_user, username, KC_TEXT),
    KC_STRING("password", kl_kc_user, password, KC_SECRET),
};
#define NSTRINGS(table) (sizeof table / sizeof table[0])

static char **string_at(void *entry, const kc_string *s) { return (char **)(void *)((char *)entry + s->at); }

static int read_strings(kc_file *f, yaml_node_t *m, const char *who, void *entry, const kc_string *table,
                          size_t n) {
    for (size_t i = 0; i < n; i++) {
        const kc_string *s = &table[i];
        int rc = s->kind == KC_PATH ? get_path(f, m, s->key, who, string_at(entry, s))
                                    : get_str(f, m, s->key, who, string_at(entry, s));
        if (rc < 0) return -1;
    }
    return 0;
}

static void clear_strings(void *entry, const kc_string *table, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char *v = *string_at(entry, &table[i]);
        if (table[i].kind == KC_SECRET) kl_cfg_free_secret_str(v);
        else free(v);
    }
}

static void clear_cluster(void *p) {
    kl_kc_cluster *c = p;
    free(c->head.name);
    clear_strings(c, cluster_strings, NSTRINGS(cluster_strings));
    memset(c, 0, sizeof *c);
}

static void clear_impersonate(kl_kc_impersonate *as) {
    free(as->user);
    free(as->uid);
    for (size_t i = 0; i < as->ngroups; i++) free(as->groups[i]);
    free(as->groups);
    for (size_t i = 0; i < as->nextra; i++) {
        free(as->extra[i].key);
        free(as->extra[i].value);
    }
    free(as->extra);
}

static void clear_user(void *p) {
    kl_kc_user *u = p;
    clear_impersonate(&u->as);
    free(u->head.name);
    clear_strings(u, user_strings, NSTRINGS(user_strings));
    kl_exec_config_clear(&u->exec);
    free(u->exec_error);
    free(u->auth_provider);
    memset(u, 0, sizeof *u);
}

static void clear_context(void *p) {
    kl_kc_context *c = p;
    free(c->head.name);
    free(c->cluster);
    free(c->user);
    free(c->namespace);
    memset(c, 0, sizeof *c);
}

static int parse_cluster(kc_file *f, yaml_node_t *m, const char *who, void *out) {
    kl_kc_cluster *c = out;
    if (read_strings(f, m, who, c, cluster_strings, NSTRINGS(cluster_strings)) < 0 ||
        get_bool(f, m, "disable-compression", who, &c->disable_compression) < 0)
        return -1;
    return get_bool(f, m, "insecure-skip-tls-verify", who, &c->insecure);
}

/* A list of strings under key (as-groups), each copied. */
static int get_strings(kc_file *f, yaml_node_t *map, const char *key, const char *who, char ***out,
                       size_t *n) {
    yaml_node_t *seq = kl_ydoc_get(&f->d, map, key);
    if (!seq) return 0;
    char what[256];
    snprintf(what, sizeof what, "%s: %s", who, key);
    if (seq->type != YAML_SEQUENCE_NODE) return type_error(f, seq, what, "a list of strings");
    size_t len = kl_ydoc_len(seq);
    if (!(*out = calloc(len ? len : 1, sizeof **out))) return oom(f);
    for (size_t i = 0; i < len; i++) {
        yaml_node_t *item = kl_ydoc_item(&f->d, seq, i);
        const char *s = kl_ydoc_scalar(item);
        if (!s) return type_error(f, item ? item : seq, what, "a list of strings");
        if (!((*out)[(*n)++] = strdup(s))) return oom(f);
    }
    return 0;
}

static int add_extra(kc_file *f, kl_kc_impersonate *as, const char *key, const char *value) {
    kl_kc_extra *grown = realloc(as->extra, (as->nextra + 1) * sizeof *grown);
    if (!grown) return oom(f);
    as->extra = grown;
    kl_kc_extra *e = &as->extra[as->nextra];
    e->key = strdup(key);
    e->value = strdup(value);
    as->nextra++;
    return e->key && e->value ? 0 : oom(f);
}

/* as-user-extra: a map from a key to a list of values. */
static int get_extra(kc_file *f, yaml_node_t *map, const char *who, kl_kc_impersonate *as) {
    yaml_node_t *m = kl_ydoc_get(&f->d, map, "as-user-extra");
    if (!m) return 0;
    char what[256];
    snprintf(what, sizeof what, "%s: as-user-extra", who);
    if (m->type != YAML_MAPPING_NODE) return type_error(f, m, what, "a map of lists of strings");
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        const char *key = kl_ydoc_scalar(yaml_document_get_node(&f->d.doc, p->key));
        yaml_node_t *values = yaml_document_get_node(&f->d.doc, p->value);
        if (!key || !values || values->type != YAML_SEQUENCE_NODE)
            return type_error(f, values ? values : m, what, "a map of lists of strings");
        for (size_t i = 0; i < kl_ydoc_len(values); i++) {
            const char *v = kl_ydoc_scalar(kl_ydoc_item(&f->d, values, i));
            if (!v) return type_error(f, values, what, "a map of lists of strings");
            if (add_extra(f, as, key, v) < 0) return -1;
        }
    }
    return 0;
}

static int parse_user_extras(kc_file *f, yaml_node_t *m, const char *who, kl_kc_user *u) {
    if (get_str(f, m, "as", who, &u->as.user) < 0 || get_str(f, m, "as-uid", who, &u->as.uid) < 0 ||
        get_strings(f, m, "as-groups", who, &u->as.groups, &u->as.ngroups) < 0 ||
        get_extra(f, m, who, &u->as) < 0)
        return -1;
    yaml_node_t *ap = kl_ydoc_get(&f->d, m, "auth-provider");
    if (ap) {
        const char *name = kl_ydoc_scalar(kl_ydoc_get(&f->d, ap, "name"));
        if (!(u->auth_provider = strdup(name ? name : "(unnamed)"))) return oom(f);
    }
    yaml_node_t *exec = kl_ydoc_get(&f->d, m, "exec");
    if (!exec) return 0;
    u->has_exec = 1;
    char ctx[300], why[512];
    snprintf(ctx, sizeof ctx, "kubeconfig %s: %s", f->path, who);
    if (kl_exec_config_from_yaml(&u->exec, &f->d, exec, ctx, f->dir, why, sizeof why) == 0) return 0;
    return (u->exec_error = strdup(why)) ? 0 : oom(f);
}

static int parse_user(kc_file *f, yaml_node_t *m, const char *who, void *out) {
    kl_kc_user *u = out;
    if (read_strings(f, m, who, u, user_strings, NSTRINGS(user_strings)) < 0) return -1;
    return parse_user_extras(f, m, who, u);
}

static int parse_context(kc_file *f, yaml_node_t *m, const char *who, void *out) {
    kl_kc_context *c = out;
    if (get_str(f, m, "cluster", who, &c->cluster) < 0 || get_str(f, m, "user", who, &c->user) < 0)
        return -1;
    return get_str(f, m, "namespace", who, &c->namespace);
}

/* Room for any one entry while it is parsed. */
typedef union {
    kl_kc_named head;
    kl_kc_cluster cluster;
    kl_kc_user user;
    kl_kc_context context;
} kc_entry;

typedef int (*parse_fn)(kc_file *f, yaml_node_t *m, const char *who, void *out);

typedef struct {
    const char *list;  /* "clusters" */
    const char *field; /* "cluster" */
    parse_fn parse;
} kc_kind;

static void *list_find(kc_list *l, const char *name) {
    for (size_t i = 0; i < *l->n; i++) {
        kl_kc_named *e = (kl_kc_named *)((char *)*l->items + i * l->size);
        if (!strcmp(e->name, name)) return e;
    }
    return NULL;
}

/* Adds a parsed entry by client-go's merge rule; takes ownership of entry's
 * contents either way. */
static int list_merge(kc_list *l, void *entry, kc_file *f) {
    kl_kc_named *e = entry, *old = list_find(l, e->name);
    if (old && old->file != f->index) {
        l->clear(entry);
        return 0;
    }
    if (old) {
        l->clear(old);
        memcpy(old, entry, l->size);
        return 0;
    }
    void *grown = kl_buf_try_grow(*l->items, l->cap, *l->n + 1, l->size, 4);
    if (!grown) {
        l->clear(entry);
        return oom(f);
    }
    *l->items = grown;
    memcpy((char *)grown + (*l->n)++ * l->size, entry, l->size);
    return 0;
}

static int parse_entry(kc_file *f, const kc_kind *k, kc_list *l, yaml_node_t *item) {
    if (item->type != YAML_MAPPING_NODE) return type_error(f, item, k->list, "a list of mappings");
    char *name = NULL;
    if (get_str(f, item, "name", "", &name) < 0) return -1;
    if (!name)
        return kl_cfg_fail(f->err, f->errlen, "kubeconfig %s line %zu: a %s entry has no name",
                           f->path, kl_ydoc_line(item), k->field);
    char who[200];
    snprintf(who, sizeof who, "%s \"%.150s\"", k->field, name);
    kc_entry entry;
    memset(&entry, 0, sizeof entry);
    entry.head.name = name;
    entry.head.file = f->index;
    yaml_node_t *body = kl_ydoc_get(&f->d, item, k->field);
    if (body && body->type != YAML_MAPPING_NODE) {
        l->clear(&entry);
        char what[256];
        snprintf(what, sizeof what, "%s: %s", who, k->field);
        return type_error(f, body, what, "a mapping");
    }
    if (body && k->parse(f, body, who, &entry) < 0) {
        l->clear(&entry);
        return -1;
    }
    return list_merge(l, &entry, f);
}

static int parse_list(kc_file *f, yaml_node_t *root, const kc_kind *k, kc_list *l) {
    yaml_node_t *seq = kl_ydoc_get(&f->d, root, k->list);
    if (!seq) return 0;
    if (seq->type != YAML_SEQUENCE_NODE) return type_error(f, seq, k->list, "a list");
    for (size_t i = 0; i < kl_ydoc_len(seq); i++)
        if (parse_entry(f, k, l, kl_ydoc_item(&f->d, seq, i)) < 0) return -1;
    return 0;
}

static int merge_file(kl_kubeconfig *kc, kc_file *f) {
    yaml_node_t *root = kl_ydoc_root(&f->d);
    if (!root) return 0;
    if (root->type != YAML_MAPPING_NODE) return type_error(f, root, "the document", "a mapping");
    const kc_kind kinds[] = {{"clusters", "cluster", parse_cluster},
                             {"users", "user", parse_user},
                             {"contexts", "context", parse_context}};
    kc_list lists[] = {
        {(void **)&kc->clusters, &kc->nclusters, &kc->cap_clusters, sizeof(kl_kc_cluster), clear_cluster},
        {(void **)&kc->users, &kc->nusers, &kc->cap_users, sizeof(kl_kc_user), clear_user},
        {(void **)&kc->contexts, &kc->ncontexts, &kc->cap_contexts, sizeof(kl_kc_context), clear_context}};
    for (size_t i = 0; i < 3; i++)
        if (parse_list(f, root, &kinds[i], &lists[i]) < 0) return -1;
    if (kc->current_context) return 0;
    return get_str(f, root, "current-context", "", &kc->current_context);
}

/* 1 when the file was merged, 0 when it does not exist, -1 on error. */
static int load_file(kl_kubeconfig *kc, const char *path, size_t index, char *err, size_t errlen) {
    size_t len;
    char *buf = kl_cfg_read_file(path, KL_KUBECONFIG_MAX, &len);
    if (!buf && errno == ENOENT) return 0;
    if (!buf && errno == EFBIG)
        return kl_cfg_fail(err, errlen, "kubeconfig %s: larger than %zu MiB", path,
                           KL_KUBECONFIG_MAX >> 20);
    if (!buf) return kl_cfg_fail(err, errlen, "kubeconfig %s: %s", path, strerror(errno));
    kc_file f = {.path = path, .index = index, .err = err, .errlen = errlen};
    char why[200];
    int rc = kl_ydoc_load(&f.d, buf, len, 0, why, sizeof why);
    if (rc < 0) rc = kl_cfg_fail(err, errlen, "kubeconfig %s: invalid YAML at %s", path, why);
    else if (!(f.dir = kl_cfg_dirname(path))) rc = oom(&f);
    else rc = merge_file(kc, &f);
    kl_ydoc_free(&f.d);
    free(f.dir);
    kl_cfg_free_secret(buf, len);
    return rc < 0 ? -1 : 1;
}

int kl_kubeconfig_load(kl_kubeconfig *kc, char *const *paths, size_t n, char *err, size_t errlen) {
    memset(kc, 0, sizeof *kc);
    if (n && !(kc->found = calloc(n, sizeof *kc->found))) return kl_cfg_fail(err, errlen, "out of memory");
    for (size_t i = 0; i < n; i++) {
        int rc = load_file(kc, paths[i], i, err, errlen);
        if (rc < 0) return -1;
        if (rc) kc->found[kc->files_found++] = i;
    }
    return 0;
}

void kl_kubeconfig_free(kl_kubeconfig *kc) {
    for (size_t i = 0; i < kc->nclusters; i++) clear_cluster(&kc->clusters[i]);
    for (size_t i = 0; i < kc->nusers; i++) clear_user(&kc->users[i]);
    for (size_t i = 0; i < kc->ncontexts; i++) clear_context(&kc->contexts[i]);
    free(kc->clusters);
    free(kc->users);
    free(kc->contexts);
    free(kc->current_context);
    free(kc->found);
    memset(kc, 0, sizeof *kc);
}

int kl_kubeconfig_empty(const kl_kubeconfig *kc) {
    return !kc->nclusters && !kc->nusers && !kc->ncontexts && !kc->current_context;
}

const kl_kc_cluster *kl_kubeconfig_cluster(const kl_kubeconfig *kc, const char *name) {
    for (size_t i = 0; name && i < kc->nclusters; i++)
        if (!strcmp(kc->clusters[i].head.name, name)) return &kc->clusters[i];
    return NULL;
}

const kl_kc_user *kl_kubeconfig_user(const kl_kubeconfig *kc, const char *name) {
    for (size_t i = 0; name && i < kc->nusers; i++)
        if (!strcmp(kc->users[i].head.name, name)) return &kc->users[i];
    return NULL;
}

const kl_kc_context *kl_kubeconfig_context(const kl_kubeconfig *kc, const char *name) {
    for (size_t i = 0; name && i < kc->ncontexts; i++)
        if (!strcmp(kc->contexts[i].head.name, name)) return &kc->contexts[i];
    return NULL;
}
