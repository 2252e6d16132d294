/* exec.c - client-go credential plugins; see exec.h. */
#include "conn/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/jsonesc.h"
#include "base/xalloc.h"
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

static int parse_cred(const kl_exec_config *cfg, const char *buf, size_t len, kl_exec_cred *out,
                      char *err, size_t errlen) {
    const char *cmd = cfg->command;
    kl_ydoc d;
    char why[128];
    if (kl_ydoc_load(&d, buf ? buf : "", len, 1, why, sizeof why) < 0)
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

/* ---- running the plugin on the loop -------------------------------------- */

/* A plugin's pipes need not close when it exits (a child it left behind may
 * hold them), so whether it exited is asked (waitpid WNOHANG) every POLL_S;
 * right after its pipes close, or after it was killed, sooner, backing off
 * from POLL_FIRST_S. */
#define POLL_S 0.05
#define POLL_FIRST_S 0.001
/* Reads of one pipe per turn of the loop: a plugin flooding stderr still
 * lets everything else run. */
#define READS_PER_TURN 16
/* Turns of reading what an exited plugin left in its pipes; with the reads
 * per turn, more than KL_EXEC_OUTPUT_MAX. */
#define FINAL_TURNS 64

typedef struct {
    int fd; /* the pipe's read end, non-blocking; -1 once closed */
    char *buf;
    size_t len, cap, max;
    int overflow; /* more than max bytes arrived */
} sink;

typedef enum { PULL_MORE, PULL_EMPTY, PULL_EOF, PULL_ERROR } pull_result;

/* Keeps what fits under s->max of n bytes read. */
static int sink_take(sink *s, const char *p, size_t n) {
    if (s->len + n > s->max) {
        s->overflow = 1;
        n = s->max - s->len;
    }
    char *nb = kl_cfg_grow_secret(s->buf, s->len, &s->cap, s->len + n + 1);
    if (!nb) return -1;
    s->buf = nb;
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = '\0';
    return 0;
}

/* Reads what the pipe holds, READS_PER_TURN reads at most: PULL_MORE when
 * there may be more. */
static pull_result sink_pull(sink *s) {
    char tmp[4096];
    pull_result res = PULL_MORE;
    for (int i = 0; i < READS_PER_TURN && res == PULL_MORE; i++) {
        ssize_t r = read(s->fd, tmp, sizeof tmp);
        if (r > 0) res = sink_take(s, tmp, (size_t)r) < 0 ? PULL_ERROR : PULL_MORE;
        else if (r == 0) res = PULL_EOF;
        else if (errno == EAGAIN) res = PULL_EMPTY;
        else if (errno != EINTR) res = PULL_ERROR;
    }
    explicit_bzero(tmp, sizeof tmp);
    return res;
}

static void first_line(const sink *s, char *line, size_t size) {
    size_t n = 0;
    for (size_t i = 0; i < s->len && s->buf[i] != '\n' && n + 1 < size; i++)
        line[n++] = (unsigned char)s->buf[i] < 0x20 ? ' ' : s->buf[i];
    line[n] = '\0';
    kl_cfg_trim(line);
}

/* A run is RUNNING from the spawn until the plugin exits or is killed.
 * RUNNING -> (exit seen) -> reported, freed; RUNNING -> (deadline, output
 * over its limit, a failed read) -> KILLED -> (reaped) -> reported, freed.
 * kl_exec_cancel ends either phase without a report. */
typedef enum { RUN_RUNNING, RUN_KILLED } run_phase;

struct kl_exec_run {
    kl_loop *loop;
    const kl_exec_config *cfg;
    pid_t pid;     /* 0 once reaped */
    int own_group; /* pid leads a process group of its own */
    run_phase phase;
    sink out, errs;
    int read_failed;
    kl_exec_cred cred; /* parsed once the plugin exited */
    int timeout_ms;
    double poll_s; /* the delay before the next exit check */
    uint64_t deadline_id, poll_id;
    char why[512]; /* KILLED: the error reported once the plugin is reaped */
    kl_exec_done_fn done;
    void *ud;
};

/* The whole group, so that nothing the plugin started outlives it; an
 * interactive plugin shares klua's group (see spawn) and is killed alone. */
static void kill_plugin(kl_exec_run *run) {
    if (run->pid > 0) kill(run->own_group ? -run->pid : run->pid, SIGKILL);
}

static void sink_close(kl_exec_run *run, sink *s) {
    if (s->fd < 0) return;
    kl_loop_unwatch(run->loop, s->fd);
    close(s->fd);
    s->fd = -1;
}

/* Kills and reaps a plugin still running (SIGKILL cannot be caught, so the
 * wait is short), then releases everything the run holds. */
static void run_free(kl_exec_run *run) {
    if (run->pid > 0) {
        kill_plugin(run);
        while (waitpid(run->pid, NULL, 0) < 0 && errno == EINTR) {}
    }
    sink_close(run, &run->out);
    sink_close(run, &run->errs);
    kl_loop_cancel(run->loop, run->deadline_id);
    kl_loop_cancel(run->loop, run->poll_id);
    kl_cfg_free_secret(run->out.buf, run->out.cap);
    free(run->errs.buf);
    free(run);
}

void kl_exec_cancel(kl_exec_run *run) {
    if (run) run_free(run);
}

static void on_poll(kl_loop *loop, void *ud);

static void schedule_poll(kl_exec_run *run, double delay) {
    kl_loop_cancel(run->loop, run->poll_id);
    run->poll_s = delay;
    run->poll_id = kl_loop_after(run->loop, delay, on_poll, run);
}

static void fail_run(kl_exec_run *run, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_run(kl_exec_run *run, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(run->why, sizeof run->why, fmt, ap);
    va_end(ap);
    kill_plugin(run);
    run->phase = RUN_KILLED;
    sink_close(run, &run->out);
    sink_close(run, &run->errs);
    kl_loop_cancel(run->loop, run->deadline_id);
    run->deadline_id = 0;
    schedule_poll(run, POLL_FIRST_S);
}

static void on_deadline(kl_loop *loop, void *ud) {
    (void)loop;
    kl_exec_run *run = ud;
    run->deadline_id = 0;
    fail_run(run, "exec plugin \"%s\" did not finish within %g s", run->cfg->command,
             run->timeout_ms / 1000.0);
}

static void on_output(kl_exec_run *run, sink *s) {
    pull_result r = sink_pull(s);
    if (r == PULL_ERROR)
        fail_run(run, "exec plugin \"%s\": reading its output failed", run->cfg->command);
    else if (run->out.overflow)
        fail_run(run, "exec plugin \"%s\" printed more than %zu bytes", run->cfg->command,
                 KL_EXEC_OUTPUT_MAX);
    else if (r == PULL_EOF) {
        sink_close(run, s);
        if (run->out.fd < 0 && run->errs.fd < 0) schedule_poll(run, POLL_FIRST_S);
    }
}

static void on_stdout(kl_loop *loop, void *ud) {
    (void)loop;
    kl_exec_run *run = ud;
    on_output(run, &run->out);
}

static void on_stderr(kl_loop *loop, void *ud) {
    (void)loop;
    kl_exec_run *run = ud;
    on_output(run, &run->errs);
}

/* The plugin exited: what it wrote before is in the pipes, what a child it
 * left behind writes later is not waited for. */
static void read_rest(kl_exec_run *run, sink *s) {
    pull_result r = PULL_MORE;
    for (int i = 0; i < FINAL_TURNS && s->fd >= 0 && r == PULL_MORE; i++) r = sink_pull(s);
    if (r == PULL_ERROR) run->read_failed = 1;
    sink_close(run, s);
}

static int outcome(kl_exec_run *run, int status, int wait_errno, char *err, size_t errlen) {
    const char *cmd = run->cfg->command;
    if (run->out.overflow)
        return kl_cfg_fail(err, errlen, "exec plugin \"%s\" printed more than %zu bytes", cmd,
                           KL_EXEC_OUTPUT_MAX);
    if (run->read_failed) return kl_cfg_fail(err, errlen, "exec plugin \"%s\": reading its output failed", cmd);
    if (wait_errno)
        return kl_cfg_fail(err, errlen, "exec plugin \"%s\": cannot collect its exit status: %s",
                           cmd, strerror(wait_errno));
    char line[256];
    first_line(&run->errs, line, sizeof line);
    if (WIFSIGNALED(status))
        return kl_cfg_fail(err, errlen, "exec plugin \"%s\" was killed by signal %d%s%s", cmd,
                           WTERMSIG(status), *line ? ": " : "", line);
    if (WEXITSTATUS(status) != 0)
        return kl_cfg_fail(err, errlen, "exec plugin \"%s\" failed with exit status %d: %s", cmd,
                           WEXITSTATUS(status), *line ? line : "(nothing on stderr)");
    return parse_cred(run->cfg, run->out.buf, run->out.len, &run->cred, err, errlen);
}

/* The plugin is gone: the run is freed, then reported, so that done may
 * start the next run. */
static void finish(kl_exec_run *run, int status, int wait_errno) {
    char err[512];
    int rc;
    if (run->phase == RUN_KILLED) {
        rc = kl_cfg_fail(err, sizeof err, "%s", run->why);
    } else {
        read_rest(run, &run->out);
        read_rest(run, &run->errs);
        rc = outcome(run, status, wait_errno, err, sizeof err);
    }
    kl_exec_cred cred = run->cred;
    kl_exec_done_fn done = run->done;
    void *ud = run->ud;
    run_free(run);
    done(ud, rc == 0 ? &cred : NULL, rc == 0 ? NULL : err);
}

static void on_poll(kl_loop *loop, void *ud) {
    (void)loop;
    kl_exec_run *run = ud;
    run->poll_id = 0;
    int status = 0;
    pid_t w = waitpid(run->pid, &status, WNOHANG);
    if (w == 0 || (w < 0 && errno == EINTR)) {
        schedule_poll(run, run->poll_s * 2 < POLL_S ? run->poll_s * 2 : POLL_S);
        return;
    }
    int wait_errno = w < 0 ? errno : 0;
    run->pid = 0;
    finish(run, status, wait_errno);
}

/* The plugin gets stdin (a terminal when interactive, else /dev/null),
 * stdout and stderr and no other descriptor of klua's, default signal
 * handling, and, unless interactive, a process group of its own: the
 * deadline and klua's shutdown kill all it started. An interactive plugin
 * stays in klua's group, the terminal's foreground one, where it may read
 * the terminal. */
static int spawn_actions(posix_spawn_file_actions_t *fa, posix_spawnattr_t *attr, int out_w,
                         int err_w, int interactive) {
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGCHLD);
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    if (!interactive) flags |= POSIX_SPAWN_SETPGROUP;
    if (posix_spawnattr_setsigmask(attr, &none) || posix_spawnattr_setsigdefault(attr, &defaults) ||
        posix_spawnattr_setpgroup(attr, 0) || posix_spawnattr_setflags(attr, flags))
        return -1;
    if (!interactive && posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0))
        return -1;
    if (posix_spawn_file_actions_adddup2(fa, out_w, 1) || posix_spawn_file_actions_adddup2(fa, err_w, 2) ||
        posix_spawn_file_actions_addclosefrom_np(fa, 3))
        return -1;
    return 0;
}

/* A pipe whose read end (p[0]) does not block; the plugin's end does, as
 * programs expect of their stdout. */
static int make_pipe(int p[2]) {
    if (pipe2(p, O_CLOEXEC) < 0) return -1;
    if (fcntl(p[0], F_SETFL, O_NONBLOCK) == 0) return 0;
    close(p[0]);
    close(p[1]);
    return -1;
}

static int spawn_error(const kl_exec_config *c, int rc, char *err, size_t errlen) {
    if (rc == ENOENT)
        return kl_cfg_fail(err, errlen, "exec plugin \"%s\" not found%s%s", c->command,
                           c->install_hint ? ": " : "", c->install_hint ? c->install_hint : "");
    return kl_cfg_fail(err, errlen, "exec plugin \"%s\" cannot be started: %s", c->command,
                       strerror(rc));
}

static int spawn(kl_exec_run *run, char **envp, int interactive, char *err, size_t errlen) {
    int po[2], pe[2];
    if (make_pipe(po) < 0) return kl_cfg_fail(err, errlen, "exec plugin: pipe: %s", strerror(errno));
    if (make_pipe(pe) < 0) {
        close(po[0]);
        close(po[1]);
        return kl_cfg_fail(err, errlen, "exec plugin: pipe: %s", strerror(errno));
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    char **argv = calloc(run->cfg->nargs + 2, sizeof *argv);
    int rc = !argv || spawn_actions(&fa, &attr, po[1], pe[1], interactive) ? ENOMEM : 0;
    if (!rc) {
        argv[0] = run->cfg->command;
        for (size_t i = 0; i < run->cfg->nargs; i++) argv[i + 1] = run->cfg->args[i];
        rc = posix_spawnp(&run->pid, run->cfg->command, &fa, &attr, argv, envp);
    }
    free(argv);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(po[1]);
    close(pe[1]);
    run->out.fd = po[0];
    run->errs.fd = pe[0];
    if (!rc) return 0;
    run->pid = 0;
    return spawn_error(run->cfg, rc, err, errlen);
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

/* Spawns the plugin with its environment; 0 or -1 with err. */
static int start(kl_exec_run *run, const kl_exec_cluster *cluster, char *err, size_t errlen) {
    int interactive = 0;
    if (interactive_run(run->cfg, &interactive, err, errlen) < 0) return -1;
    run->own_group = !interactive;
    char *json = exec_info_json(run->cfg, cluster, interactive);
    char *info = json ? kl_cfg_format("KUBERNETES_EXEC_INFO=%s", json) : NULL;
    free(json);
    char **envp = info ? child_env(run->cfg, info) : NULL;
    int rc = envp ? spawn(run, envp, interactive, err, errlen) : kl_cfg_fail(err, errlen, "out of memory");
    free(envp);
    free(info);
    return rc;
}

kl_exec_run *kl_exec_start(kl_loop *loop, const kl_exec_config *cfg, const kl_exec_cluster *cluster,
                           int timeout_ms, kl_exec_done_fn done, void *ud, char *err, size_t errlen) {
    kl_exec_run *run = kl_xcalloc(1, sizeof *run);
    *run = (kl_exec_run){.loop = loop, .cfg = cfg, .timeout_ms = timeout_ms, .done = done, .ud = ud,
                         .out = {.fd = -1, .max = KL_EXEC_OUTPUT_MAX},
                         .errs = {.fd = -1, .max = STDERR_KEEP}};
    if (start(run, cluster, err, errlen) < 0) {
        run_free(run);
        return NULL;
    }
    if (kl_loop_watch(loop, run->out.fd, on_stdout, run) < 0 ||
        kl_loop_watch(loop, run->errs.fd, on_stderr, run) < 0) {
        kl_cfg_fail(err, errlen, "exec plugin \"%s\": too many descriptors watched", cfg->command);
        run_free(run);
        return NULL;
    }
    run->deadline_id = kl_loop_after(loop, timeout_ms / 1000.0, on_deadline, run);
    schedule_poll(run, POLL_S);
    return run;
}

void kl_exec_cred_clear(kl_exec_cred *cred) {
    kl_cfg_free_secret_str(cred->token);
    kl_cfg_free_secret(cred->cert_pem, cred->cert_len);
    kl_cfg_free_secret(cred->key_pem, cred->key_len);
    memset(cred, 0, sizeof *cred);
}
