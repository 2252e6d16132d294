/* exec.c - client-go credential plugins; see exec.h. */
#include "conn/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/jsonesc.h"
#include "conn/cfg.h"

extern char **environ;

#define STDERR_KEEP 512

/* ---- configuration from the kubeconfig ---------------------------------- */

typedef char *(*item_fn)(kl_ydoc *d, yaml_node_t *item, const char *who, char *err, size_t errlen);

static char *env_item(kl_ydoc *d, yaml_node_t *item, const char *who, char *err, size_t errlen) {
    const char *name = kl_ydoc_scalar(kl_ydoc_get(d, item, "name"));
    yaml_node_t *vn = kl_ydoc_get(d, item, "value");
    const char *value = vn ? kl_ydoc_scalar(vn) : "";
    if (!name || !*name || strchr(name, '=') || !value) {
        kl_cfg_fail(err, errlen, "%s: exec env entry at line %zu needs a name and a string value",
                    who, kl_ydoc_line(item));
        return NULL;
    }
    char *s = kl_cfg_format("%s=%s", name, value);
    if (!s) kl_cfg_fail(err, errlen, "out of memory");
    return s;
}

static char *arg_item(kl_ydoc *d, yaml_node_t *item, const char *who, char *err, size_t errlen) {
    (void)d;
    const char *s = kl_ydoc_scalar(item);
    char *copy = s ? strdup(s) : NULL;
    if (!s)
        kl_cfg_fail(err, errlen, "%s: exec args must be strings (line %zu)", who, kl_ydoc_line(item));
    else if (!copy)
        kl_cfg_fail(err, errlen, "out of memory");
    return copy;
}

/* Fills *out (NULL-terminated) with one string per item of seq. */
static int string_list(kl_ydoc *d, yaml_node_t *seq, item_fn fn, char ***out, size_t *n,
                       const char *what, const char *who, char *err, size_t errlen) {
    if (!seq) return 0;
    if (seq->type != YAML_SEQUENCE_NODE)
        return kl_cfg_fail(err, errlen, "%s: exec %s must be a list (line %zu)", who, what,
                           kl_ydoc_line(seq));
    size_t len = kl_ydoc_len(seq);
    *out = calloc(len + 1, sizeof **out);
    if (!*out) return kl_cfg_fail(err, errlen, "out of memory");
    for (size_t i = 0; i < len; i++) {
        if (!((*out)[i] = fn(d, kl_ydoc_item(d, seq, i), who, err, errlen))) return -1;
        *n = i + 1;
    }
    return 0;
}

static int interactive_mode(const char *mode, const char *api, kl_exec_interactive *out,
                            const char *who, char *err, size_t errlen) {
    if (!mode) {
        if (!strcmp(api, KL_EXEC_API_V1))
            return kl_cfg_fail(err, errlen,
                               "%s: exec interactiveMode must be set for %s (Never, IfAvailable "
                               "or Always)", who, KL_EXEC_API_V1);
        *out = KL_EXEC_IF_AVAILABLE;
    } else if (!strcmp(mode, "Never")) {
        *out = KL_EXEC_NEVER;
    } else if (!strcmp(mode, "IfAvailable")) {
        *out = KL_EXEC_IF_AVAILABLE;
    } else if (!strcmp(mode, "Always")) {
        *out = KL_EXEC_ALWAYS;
    } else {
        return kl_cfg_fail(err, errlen,
                           "%s: exec interactiveMode \"%s\" is not Never, IfAvailable or Always",
                           who, mode);
    }
    return 0;
}

static int exec_fields(kl_exec_config *cfg, kl_ydoc *d, yaml_node_t *exec, const char *who,
                       const char *dir, char *err, size_t errlen) {
    const char *api = kl_ydoc_scalar(kl_ydoc_get(d, exec, "apiVersion"));
    if (!api || (strcmp(api, KL_EXEC_API_V1) && strcmp(api, KL_EXEC_API_V1BETA1)))
        return kl_cfg_fail(err, errlen, "%s: exec apiVersion must be %s or %s", who,
                           KL_EXEC_API_V1, KL_EXEC_API_V1BETA1);
    const char *cmd = kl_ydoc_scalar(kl_ydoc_get(d, exec, "command"));
    if (!cmd || !*cmd) return kl_cfg_fail(err, errlen, "%s: exec needs a command", who);
    const char *hint = kl_ydoc_scalar(kl_ydoc_get(d, exec, "installHint"));
    if (interactive_mode(kl_ydoc_scalar(kl_ydoc_get(d, exec, "interactiveMode")), api,
                         &cfg->interactive, who, err, errlen) < 0)
        return -1;
    yaml_node_t *pci = kl_ydoc_get(d, exec, "provideClusterInfo");
    cfg->provide_cluster_info = pci ? kl_ydoc_bool(pci) : 0;
    if (cfg->provide_cluster_info < 0)
        return kl_cfg_fail(err, errlen, "%s: exec provideClusterInfo must be true or false", who);
    /* client-go runs a command with a slash relative to the kubeconfig's
     * directory and looks a bare name up in PATH. */
    cfg->command = strchr(cmd, '/') ? kl_cfg_path_join(dir, cmd) : strdup(cmd);
    cfg->api_version = strdup(api);
    cfg->install_hint = hint ? strdup(hint) : NULL;
    if (!cfg->command || !cfg->api_version || (hint && !cfg->install_hint))
        return kl_cfg_fail(err, errlen, "out of memory");
    if (string_list(d, kl_ydoc_get(d, exec, "args"), arg_item, &cfg->args, &cfg->nargs, "args",
                    who, err, errlen) < 0)
        return -1;
    return string_list(d, kl_ydoc_get(d, exec, "env"), env_item, &cfg->env, &cfg->nenv, "env",
                       who, err, errlen);
}

int kl_exec_config_from_yaml(kl_exec_config *cfg, kl_ydoc *d, yaml_node_t *exec,
                             const char *who, const char *dir, char *err, size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    if (exec->type != YAML_MAPPING_NODE)
        return kl_cfg_fail(err, errlen, "%s: exec must be a mapping (line %zu)", who,
                           kl_ydoc_line(exec));
    if (exec_fields(cfg, d, exec, who, dir, err, errlen) < 0) {
        kl_exec_config_clear(cfg);
        return -1;
    }
    return 0;
}

static void free_list(char **list, size_t n) {
    if (!list) return;
    for (size_t i = 0; i < n; i++) free(list[i]);
    free(list);
}

static int copy_list(char ***dst, char *const *src, size_t n) {
    if (!src) return 0;
    *dst = calloc(n + 1, sizeof **dst);
    if (!*dst) return -1;
    for (size_t i = 0; i < n; i++)
        if (!((*dst)[i] = strdup(src[i]))) return -1;
    return 0;
}

int kl_exec_config_copy(kl_exec_config *dst, const kl_exec_config *src) {
    *dst = *src;
    dst->api_version = strdup(src->api_version);
    dst->command = strdup(src->command);
    dst->install_hint = src->install_hint ? strdup(src->install_hint) : NULL;
    dst->args = dst->env = NULL;
    int rc = (!dst->api_version || !dst->command || (src->install_hint && !dst->install_hint) ||
              copy_list(&dst->args, src->args, src->nargs) < 0 ||
              copy_list(&dst->env, src->env, src->nenv) < 0) ? -1 : 0;
    if (rc < 0) kl_exec_config_clear(dst);
    return rc;
}

void kl_exec_config_clear(kl_exec_config *cfg) {
    free(cfg->api_version);
    free(cfg->command);
    free(cfg->install_hint);
    free_list(cfg->args, cfg->nargs);
    free_list(cfg->env, cfg->nenv);
    memset(cfg, 0, sizeof *cfg);
}

/* ---- KUBERNETES_EXEC_INFO ------------------------------------------------ */

static void json_field(FILE *f, const char *key, const char *value, int *first) {
    if (!value) return;
    fputs(*first ? "" : ",", f);
    *first = 0;
    kl_jsonesc_fputs(f, key);
    fputc(':', f);
    kl_jsonesc_fputs(f, value);
}

/* Field names and order follow client-go's clientauthentication.Cluster. */
static int json_cluster(FILE *f, const kl_exec_cluster *c) {
    char *ca = c->ca_data ? kl_cfg_base64_encode(c->ca_data, c->ca_len) : NULL;
    if (c->ca_data && !ca) return -1;
    int first = 1;
    fputs("\"cluster\":{", f);
    json_field(f, "server", c->server, &first);
    json_field(f, "tls-server-name", c->tls_server_name, &first);
    if (c->insecure) {
        fputs(first ? "" : ",", f);
        fputs("\"insecure-skip-tls-verify\":true", f);
        first = 0;
    }
    json_field(f, "certificate-authority-data", ca, &first);
    json_field(f, "proxy-url", c->proxy_url, &first);
    fputs("},", f);
    free(ca);
    return 0;
}

/* The KUBERNETES_EXEC_INFO value for a run (new string), or NULL on OOM. */
static char *exec_info_json(const kl_exec_config *cfg, const kl_exec_cluster *cluster, int interactive) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fputs("{\"kind\":\"ExecCredential\",\"apiVersion\":", f);
    kl_jsonesc_fputs(f, cfg->api_version);
    fputs(",\"spec\":{", f);
    int rc = cluster ? json_cluster(f, cluster) : 0;
    fprintf(f, "\"interactive\":%s}}", interactive ? "true" : "false");
    if (fclose(f) != 0 || rc < 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* ---- running the plugin -------------------------------------------------- */

/* The parent's environment, minus what the plugin's own entries replace,
 * then those entries, then KUBERNETES_EXEC_INFO: later entries win in Go's
 * os/exec, and this keeps exactly one of each name. */
static int env_overridden(const char *entry, char *const *env, size_t n, size_t from) {
    const char *eq = strchr(entry, '=');
    size_t nl = eq ? (size_t)(eq - entry) : strlen(entry);
    if (nl == strlen("KUBERNETES_EXEC_INFO") && !strncmp(entry, "KUBERNETES_EXEC_INFO", nl))
        return 1;
    for (size_t i = from; i < n; i++)
        if (!strncmp(env[i], entry, nl) && env[i][nl] == '=') return 1;
    return 0;
}

static char **child_env(const kl_exec_config *cfg, char *info) {
    size_t n = 0;
    while (environ && environ[n]) n++;
    char **envp = calloc(n + cfg->nenv + 2, sizeof *envp);
    if (!envp) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!env_overridden(environ[i], cfg->env, cfg->nenv, 0)) envp[k++] = environ[i];
    for (size_t i = 0; i < cfg->nenv; i++)
        if (!env_overridden(cfg->env[i], cfg->env, cfg->nenv, i + 1)) envp[k++] = cfg->env[i];
    envp[k] = info;
    return envp;
}

typedef struct {
    int fd;
    char *buf;
    size_t len, cap, max;
    int overflow; /* more than max bytes arrived */
} sink;

static int sink_read(sink *s) {
    char tmp[4096];
    ssize_t r = read(s->fd, tmp, sizeof tmp);
    if (r < 0) return errno == EINTR || errno == EAGAIN ? 1 : -1;
    if (r == 0) return 0;
    size_t take = (size_t)r;
    if (s->len + take > s->max) {
        s->overflow = 1;
        take = s->max - s->len;
    }
    char *nb = kl_cfg_grow_secret(s->buf, s->len, &s->cap, s->len + take + 1);
    if (!nb) return -1;
    s->buf = nb;
    memcpy(s->buf + s->len, tmp, take);
    s->len += take;
    s->buf[s->len] = '\0';
    explicit_bzero(tmp, sizeof tmp);
    return 1;
}

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads both pipes until they close or the deadline passes: 0, 1 on
 * timeout, -1 on error. Stdout past its limit stops the run; stderr is kept
 * only for its first line and otherwise drained so the plugin never blocks. */
static int drain(sink *out, sink *errs, int timeout_ms) {
    long long deadline = now_ms() + timeout_ms;
    while (out->fd >= 0 || errs->fd >= 0) {
        struct pollfd p[2] = {{out->fd, POLLIN, 0}, {errs->fd, POLLIN, 0}};
        long long left = deadline - now_ms();
        if (left <= 0) return 1;
        int r = poll(p, 2, (int)(left > 60000 ? 60000 : left));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        for (int i = 0; i < 2; i++) {
            sink *s = i == 0 ? out : errs;
            if (s->fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            int rr = sink_read(s);
            if (rr < 0) return -1;
            if (rr == 0) {
                close(s->fd);
                s->fd = -1;
            }
        }
        if (out->overflow) return -1;
    }
    return 0;
}

static void first_line(const sink *s, char *line, size_t size) {
    size_t n = 0;
    for (size_t i = 0; i < s->len && s->buf[i] != '\n' && n + 1 < size; i++)
        line[n++] = (unsigned char)s->buf[i] < 0x20 ? ' ' : s->buf[i];
    line[n] = '\0';
    kl_cfg_trim(line);
}

static int spawn_actions(posix_spawn_file_actions_t *fa, posix_spawnattr_t *attr, int out_w,
                         int err_w, int interactive) {
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGCHLD);
    /* The event loop may block or ignore signals; the plugin starts clean. */
    if (posix_spawnattr_setsigmask(attr, &none) || posix_spawnattr_setsigdefault(attr, &defaults) ||
        posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        return -1;
    if (!interactive && posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0))
        return -1;
    if (posix_spawn_file_actions_adddup2(fa, out_w, 1) || posix_spawn_file_actions_adddup2(fa, err_w, 2))
        return -1;
    return 0;
}

typedef struct {
    const kl_exec_config *cfg;
    pid_t pid;
    sink out, errs;
} run_state;

static int start(run_state *rs, char **envp, int interactive, char *err, size_t errlen) {
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) < 0) return kl_cfg_fail(err, errlen, "exec plugin: pipe: %s", strerror(errno));
    if (pipe2(pe, O_CLOEXEC) < 0) {
        close(po[0]);
        close(po[1]);
        return kl_cfg_fail(err, errlen, "exec plugin: pipe: %s", strerror(errno));
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    char **argv = calloc(rs->cfg->nargs + 2, sizeof *argv);
    int rc = !argv || spawn_actions(&fa, &attr, po[1], pe[1], interactive) ? ENOMEM : 0;
    if (!rc) {
        argv[0] = rs->cfg->command;
        for (size_t i = 0; i < rs->cfg->nargs; i++) argv[i + 1] = rs->cfg->args[i];
        rc = posix_spawnp(&rs->pid, rs->cfg->command, &fa, &attr, argv, envp);
    }
    free(argv);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(po[1]);
    close(pe[1]);
    rs->out.fd = po[0];
    rs->errs.fd = pe[0];
    if (!rc) return 0;
    close(po[0]);
    close(pe[0]);
    rs->out.fd = rs->errs.fd = -1;
    const kl_exec_config *c = rs->cfg;
    if (rc == ENOENT)
        return kl_cfg_fail(err, errlen, "exec plugin \"%s\" not found%s%s", c->command,
                           c->install_hint ? ": " : "", c->install_hint ? c->install_hint : "");
    return kl_cfg_fail(err, errlen, "exec plugin \"%s\" cannot be started: %s", c->command,
                       strerror(rc));
}

static int wait_child(pid_t pid, int *status) {
    for (;;) {
        if (waitpid(pid, status, 0) >= 0) return 0;
        if (errno != EINTR) return -1;
    }
}

static int finish(run_state *rs, int drained, int timeout_ms, char *err, size_t errlen) {
    const char *cmd = rs->cfg->command;
    if (drained != 0) kill(rs->pid, SIGKILL);
    int status = 0;
    int waited = wait_child(rs->pid, &status);
    if (drained == 1)
        return kl_cfg_fail(err, errlen, "exec plugin \"%s\" did not finish within %g s", cmd,
                           timeout_ms / 1000.0);
    if (rs->out.overflow)
        return kl_cfg_fail(err, errlen, "exec plugin \"%s\" printed more than %zu bytes", cmd,
                           KL_EXEC_OUTPUT_MAX);
    if (drained < 0) return kl_cfg_fail(err, errlen, "exec plugin \"%s\": reading its output failed", cmd);
    if (waited < 0)
        return kl_cfg_fail(err, errlen, "exec plugin \"%s\": cannot collect its exit status: %s",
                           cmd, strerror(errno));
    char line[256];
    first_line(&rs->errs, line, sizeof line);
    if (WIFSIGNALED(status))
        return kl_cfg_fail(err, errlen, "exec plugin \"%s\" was killed by signal %d%s%s", cmd,
                           WTERMSIG(status), *line ? ": " : "", line);
    if (WEXITSTATUS(status) != 0)
        return kl_cfg_fail(err, errlen, "exec plugin \"%s\" failed with exit status %d: %s", cmd,
                           WEXITSTATUS(status), *line ? line : "(nothing on stderr)");
    return 0;
}

/* ---- the ExecCredential -------------------------------------------------- */

static int two_digits(const char *s, int *v) {
    if (s[0] < '0' || s[0] > '9' || s[1] < '0' || s[1] > '9') return -1;
    *v = (s[0] - '0') * 10 + (s[1] - '0');
    return 0;
}

static int parse_zone(const char *s, long *offset) {
    if ((s[0] == 'Z' || s[0] == 'z') && !s[1]) {
        *offset = 0;
        return 0;
    }
    int h, m;
    if ((s[0] != '+' && s[0] != '-') || two_digits(s + 1, &h) || s[3] != ':' ||
        two_digits(s + 4, &m) || s[6] || h > 23 || m > 59)
        return -1;
    *offset = (s[0] == '-' ? -1 : 1) * (h * 3600L + m * 60L);
    return 0;
}

/* Parses an RFC 3339 time such as 2006-01-02T15:04:05Z or
 * 2006-01-02T15:04:05.123+02:00 into seconds since the epoch; 0 or -1. */
static int parse_time(const char *s, time_t *out) {
    int year_hi, year_lo, mon, day, hh, mm, ss;
    if (strlen(s) < 20 || two_digits(s, &year_hi) || two_digits(s + 2, &year_lo) || s[4] != '-' ||
        two_digits(s + 5, &mon) || s[7] != '-' || two_digits(s + 8, &day) ||
        (s[10] != 'T' && s[10] != 't') || two_digits(s + 11, &hh) || s[13] != ':' ||
        two_digits(s + 14, &mm) || s[16] != ':' || two_digits(s + 17, &ss))
        return -1;
    if (mon < 1 || mon > 12 || day < 1 || day > 31 || hh > 23 || mm > 59 || ss > 60) return -1;
    const char *z = s + 19;
    if (*z == '.') {
        do z++;
        while (*z >= '0' && *z <= '9');
        if (z == s + 20) return -1;
    }
    long offset;
    if (parse_zone(z, &offset) < 0) return -1;
    struct tm tm = {.tm_year = year_hi * 100 + year_lo - 1900, .tm_mon = mon - 1, .tm_mday = day,
                    .tm_hour = hh, .tm_min = mm, .tm_sec = ss};
    *out = timegm(&tm) - offset;
    return 0;
}

static int dup_field(char **dst, size_t *len, const char *src) {
    if (!src || !*src) return 0;
    if (!(*dst = strdup(src))) return -1;
    if (len) *len = strlen(src);
    return 0;
}

static int cred_status(kl_ydoc *d, yaml_node_t *status, const char *cmd, kl_exec_cred *out,
                       char *err, size_t errlen) {
    const char *token = kl_ydoc_scalar(kl_ydoc_get(d, status, "token"));
    const char *cert = kl_ydoc_scalar(kl_ydoc_get(d, status, "clientCertificateData"));
    const char *key = kl_ydoc_scalar(kl_ydoc_get(d, status, "clientKeyData"));
    yaml_node_t *exp = kl_ydoc_get(d, status, "expirationTimestamp");
    int has_cert = cert && *cert, has_key = key && *key;
    if (!(token && *token) && !has_cert && !has_key)
        return kl_cfg_fail(err, errlen,
                           "exec plugin \"%s\" returned neither status.token nor a client "
                           "certificate and key", cmd);
    if (has_cert != has_key)
        return kl_cfg_fail(err, errlen,
                           "exec plugin \"%s\" returned only one of status.clientCertificateData "
                           "and status.clientKeyData; it must return both", cmd);
    if (token && kl_cfg_has_control(token))
        return kl_cfg_fail(err, errlen, "exec plugin \"%s\" returned a token with control characters", cmd);
    if (exp && (!kl_ydoc_scalar(exp) || parse_time(kl_ydoc_scalar(exp), &out->expiry) < 0))
        return kl_cfg_fail(err, errlen,
                           "exec plugin \"%s\" returned an invalid status.expirationTimestamp "
                           "(want RFC 3339, like 2006-01-02T15:04:05Z)", cmd);
    out->has_expiry = exp != NULL;
    if (dup_field(&out->token, NULL, token) < 0 || dup_field(&out->cert_pem, &out->cert_len, cert) < 0 ||
        dup_field(&out->key_pem, &out->key_len, key) < 0)
        return kl_cfg_fail(err, errlen, "out of memory");
    return 0;
}

static int parse_cred(const kl_exec_config *cfg, const sink *s, kl_exec_cred *out, char *err,
                      size_t errlen) {
    const char *cmd = cfg->command;
    kl_ydoc d;
    char why[128];
    if (kl_ydoc_load(&d, s->buf ? s->buf : "", s->len, 1, why, sizeof why) < 0)
        return kl_cfg_fail(err, errlen, "exec plugin \"%s\" printed invalid ExecCredential JSON (%s)",
                           cmd, why);
    yaml_node_t *root = kl_ydoc_root(&d);
    const char *kind = kl_ydoc_scalar(kl_ydoc_get(&d, root, "kind"));
    const char *api = kl_ydoc_scalar(kl_ydoc_get(&d, root, "apiVersion"));
    yaml_node_t *status = kl_ydoc_get(&d, root, "status");
    int rc;
    if (!kind || strcmp(kind, "ExecCredential") || !api || strcmp(api, cfg->api_version))
        rc = kl_cfg_fail(err, errlen,
                         "exec plugin \"%s\" did not print an ExecCredential with apiVersion %s",
                         cmd, cfg->api_version);
    else if (!status || status->type != YAML_MAPPING_NODE)
        rc = kl_cfg_fail(err, errlen, "exec plugin \"%s\" printed an ExecCredential without status", cmd);
    else
        rc = cred_status(&d, status, cmd, out, err, errlen);
    kl_ydoc_free(&d);
    if (rc < 0) kl_exec_cred_clear(out);
    return rc;
}

static int interactive_run(const kl_exec_config *cfg, int *interactive, char *err, size_t errlen) {
    int tty = isatty(0);
    if (cfg->interactive == KL_EXEC_ALWAYS && !tty)
        return kl_cfg_fail(err, errlen,
                           "exec plugin \"%s\" needs a terminal (interactiveMode: Always), but "
                           "standard input is not one", cfg->command);
    *interactive = cfg->interactive != KL_EXEC_NEVER && tty;
    return 0;
}

int kl_exec_run(const kl_exec_config *cfg, const kl_exec_cluster *cluster, int timeout_ms,
                kl_exec_cred *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    int interactive = 0;
    if (interactive_run(cfg, &interactive, err, errlen) < 0) return -1;
    char *json = exec_info_json(cfg, cluster, interactive);
    char *info = json ? kl_cfg_format("KUBERNETES_EXEC_INFO=%s", json) : NULL;
    free(json);
    char **envp = info ? child_env(cfg, info) : NULL;
    if (!envp) {
        free(info);
        return kl_cfg_fail(err, errlen, "out of memory");
    }
    run_state rs = {.cfg = cfg, .out = {.fd = -1, .max = KL_EXEC_OUTPUT_MAX},
                    .errs = {.fd = -1, .max = STDERR_KEEP}};
    int rc = start(&rs, envp, interactive, err, errlen);
    free(envp);
    free(info);
    if (rc == 0) {
        int drained = drain(&rs.out, &rs.errs, timeout_ms);
        if (rs.out.fd >= 0) close(rs.out.fd);
        if (rs.errs.fd >= 0) close(rs.errs.fd);
        rc = finish(&rs, drained, timeout_ms, err, errlen);
    }
    if (rc == 0) rc = parse_cred(cfg, &rs.out, out, err, errlen);
    kl_cfg_free_secret(rs.out.buf, rs.out.cap);
    free(rs.errs.buf);
    return rc;
}

void kl_exec_cred_clear(kl_exec_cred *cred) {
    kl_cfg_free_secret_str(cred->token);
    kl_cfg_free_secret(cred->cert_pem, cred->cert_len);
    kl_cfg_free_secret(cred->key_pem, cred->key_len);
    memset(cred, 0, sizeof *cred);
}
