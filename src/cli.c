/* cli.c - parsing the klua command line; see cli.h. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A flag the user named but got wrong: one line, as for a bad number. */
static int bad_flag(FILE *errs, const char *fmt, const char *arg) {
    fprintf(errs, "klua: ");
    fprintf(errs, fmt, arg);
    fputc('\n', errs);
    return -1;
}

/* A flag klua does not know: the usage is where to look for the right one. */
static int unknown_flag(FILE *errs, const char *arg) {
    fprintf(errs, "klua: unknown flag %s\nRun 'klua --help' for usage.\n", arg);
    return -1;
}

/* Numeric flags end up as ints, longs and size_ts: this bound keeps those
 * conversions defined, since strtod also reads "inf" and "1e300". */
#define NUMBER_MAX 2147483647.0

/* Reads s as a number in [lo, hi]; NaN is refused as not a number. */
static int parse_number(FILE *errs, const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo)) {
        fprintf(errs, "klua: %s needs a number of at least %g, not \"%s\"\n", flag, lo, s);
        return -1;
    }
    if (v > hi) {
        fprintf(errs, "klua: %s needs a number of at most %.15g, not \"%s\"\n", flag, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* A duration as kubectl writes it: "30", "30s", "500ms", "2m", "1h". */
static int parse_duration(FILE *errs, const char *flag, const char *s, double *out) {
    static const struct {
        const char *unit;
        double secs;
    } units[] = {{"", 1}, {"s", 1}, {"ms", 0.001}, {"m", 60}, {"h", 3600}};
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!errno && end != s && v >= 0) {
        for (size_t k = 0; k < sizeof units / sizeof units[0]; k++) {
            if (strcmp(end, units[k].unit) == 0) {
                *out = v * units[k].secs;
                return 0;
            }
        }
    }
    fprintf(errs, "klua: %s needs a duration such as 30s, 500ms or 2m, not \"%s\"\n", flag, s);
    return -1;
}

static int parse_watch_timeout(kl_cli *c, FILE *errs, const char *s) {
    char lo[32];
    const char *colon = strchr(s, ':');
    snprintf(lo, sizeof lo, "%.*s", colon ? (int)(colon - s) : (int)strlen(s), s);
    double a, b;
    if (parse_number(errs, "--watch-timeout", lo, 1, NUMBER_MAX, &a) < 0) return -1;
    if (parse_number(errs, "--watch-timeout", colon ? colon + 1 : lo, a, NUMBER_MAX, &b) < 0) return -1;
    c->rt.watch_timeout_min = a;
    c->rt.watch_timeout_max = b > a ? b : a + 1;
    return 0;
}

/* Handles a global flag at argv[*i]; 1 if it was one, 0 if not, -1 on error. */
static int global_flag(kl_cli *c, int argc, char **argv, int *i, FILE *errs) {
    const char *a = argv[*i];
    const char *eq = strchr(a, '=');
    char name[64];
    snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
    static const char *const valued[] = {"--kubeconfig", "--context", "--server", "--token", "-v", "--v",
                                         "--log-format", "--instruction-budget", "--memory-limit",
                                         "--watch-idle-timeout", "--watch-timeout", "--page-size",
                                         "--watch-list-deadline", "--request-timeout", NULL};
    int takes = 0, known = 0;
    for (int k = 0; valued[k]; k++)
        if (strcmp(name, valued[k]) == 0) known = takes = 1;
    if (strcmp(name, "--insecure-skip-tls-verify") == 0 || strcmp(name, "--allow-insecure-credentials") == 0 ||
        strcmp(name, "--watch-list") == 0)
        known = 1;
    if (!known && strncmp(a, "-v", 2) == 0 && a[2] >= '0' && a[2] <= '9' && !a[3]) {
        c->verbosity = a[2] - '0';
        return 1;
    }
    if (!known) return 0;
    const char *v = NULL;
    if (takes) {
        if (eq) v = eq + 1;
        else if (*i + 1 < argc) v = argv[++*i];
        else return bad_flag(errs, "flag %s needs a value", name);
    }
    double n;
    if (!strcmp(name, "--kubeconfig")) c->rt.conn.kubeconfig = v;
    else if (!strcmp(name, "--context")) c->rt.conn.context = v;
    else if (!strcmp(name, "--server")) c->rt.conn.server = v;
    else if (!strcmp(name, "--token")) c->rt.conn.token = v;
    else if (!strcmp(name, "--insecure-skip-tls-verify")) c->rt.conn.insecure_skip_tls_verify = 1;
    else if (!strcmp(name, "--allow-insecure-credentials")) c->rt.conn.allow_insecure_credentials = 1;
    else if (!strcmp(name, "--watch-list")) c->rt.watch_list = 1;
    else if (!strcmp(name, "-v") || !strcmp(name, "--v")) {
        if (parse_number(errs, name, v, 0, NUMBER_MAX, &n) < 0) return -1;
        c->verbosity = (int)n;
    } else if (!strcmp(name, "--log-format")) {
        if (!strcmp(v, "text")) c->format = KL_LOG_TEXT;
        else if (!strcmp(v, "json")) c->format = KL_LOG_JSON;
        else return bad_flag(errs, "--log-format must be text or json, not \"%s\"", v);
    } else if (!strcmp(name, "--instruction-budget")) {
        /* Any larger budget means "as much as an int allows". */
        if (parse_number(errs, name, v, 0, HUGE_VAL, &n) < 0) return -1;
        c->rt.instruction_budget = n > NUMBER_MAX ? (long)NUMBER_MAX : (long)n;
    } else if (!strcmp(name, "--memory-limit")) {
        if (parse_number(errs, name, v, 1, NUMBER_MAX, &n) < 0) return -1;
        c->rt.memory_limit = (size_t)(n * 1048576.0);
    } else if (!strcmp(name, "--watch-idle-timeout")) {
        if (parse_number(errs, name, v, 0.1, NUMBER_MAX, &c->rt.idle_timeout) < 0) return -1;
    } else if (!strcmp(name, "--watch-timeout")) {
        if (parse_watch_timeout(c, errs, v) < 0) return -1;
    } else if (!strcmp(name, "--watch-list-deadline")) {
        if (parse_number(errs, name, v, 0.1, NUMBER_MAX, &c->rt.watch_list_deadline) < 0) return -1;
    } else if (!strcmp(name, "--request-timeout")) {
        if (parse_duration(errs, name, v, &c->rt.request_timeout) < 0) return -1;
    } else if (!strcmp(name, "--page-size")) {
        if (parse_number(errs, name, v, 1, NUMBER_MAX, &n) < 0) return -1;
        c->rt.page_size = (int)n;
    }
    return 1;
}

int kl_cli_parse(kl_cli *c, int argc, char **argv, FILE *errs) {
    memset(c, 0, sizeof *c);
    c->rt.instruction_budget = 100000000;
    c->args = calloc((size_t)argc + 1, sizeof *c->args);
    if (!c->args) return -1;
    for (int i = 1; i < argc; i++) {
        /* After `run SCRIPT`, and after `test` (busted's flags), words are not klua's. */
        int script_args = c->command && ((!strcmp(c->command, "run") && c->script) || !strcmp(c->command, "test"));
        if (!script_args) {
            int r = global_flag(c, argc, argv, &i, errs);
            if (r < 0) return -1;
            if (r) continue;
        }
        const char *a = argv[i];
        if (!c->command) {
            if (!strcmp(a, "-h") || !strcmp(a, "--help") || !strcmp(a, "help")) c->command = "help";
            else if (a[0] == '-') return unknown_flag(errs, a);
            else c->command = a;
        } else if (!strcmp(c->command, "run") && !c->script) {
            if (a[0] == '-' && a[1]) return unknown_flag(errs, a);
            c->script = a;
        } else {
            c->args[c->nargs++] = argv[i];
        }
    }
    return 0;
}

void kl_cli_free(kl_cli *c) {
    free(c->args);
    c->args = NULL;
    c->nargs = 0;
}
