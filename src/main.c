/* main.c - the klua command line. */
#include <curl/curl.h>
#include <errno.h>
#include <lauxlib.h>
#include <lua-cjson.h>
#include <lua.h>
#include <lualib.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "runtime.h"
#include "version.h"

static const char usage[] =
    "usage: klua [flags] run SCRIPT.lua [script args...]\n"
    "       klua [flags] watch RESOURCE [NAME] [-n NS | -A] [-l SEL] [--field-selector SEL]\n"
    "                          [-e LUA] [-o line|json|name] [--watch-only]\n"
    "       klua version\n"
    "\n"
    "Connection (as kubectl):\n"
    "  --kubeconfig FILE            kubeconfig file (default: $KUBECONFIG, ~/.kube/config)\n"
    "  --context NAME               kubeconfig context to use\n"
    "  --server URL, --token TOKEN  connect without a kubeconfig\n"
    "  --insecure-skip-tls-verify   do not verify the server's certificate\n"
    "  --allow-insecure-credentials send credentials over plain http\n"
    "Diagnostics:\n"
    "  -v N                         verbosity: 2 narrates every reflector, 6 every request\n"
    "  --log-format text|json       format of the log on stderr\n"
    "Limits and tuning:\n"
    "  --instruction-budget N       instructions a handler may run in one go (default 100000000)\n"
    "  --memory-limit MIB           memory cap of the Lua state (default: none)\n"
    "  --watch-idle-timeout SEC     restart a watch silent this long (default 150)\n"
    "  --watch-timeout MIN[:MAX]    server-side watch timeout range (default 300:600)\n"
    "  --page-size N                objects per LIST page (default 500)\n"
    "  --watch-list                 stream the initial state (sendInitialEvents) instead of LIST\n"
    "  --watch-list-deadline SEC    fall back to LIST when the initial state takes longer (default 10)\n";

typedef struct cli {
    kl_rt_opts rt;
    int verbosity;
    kl_log_format format;
    const char *command;
    const char *script;
    char **args;
    int nargs;
} cli;

/* A flag the user named but got wrong: one line, as for a bad number. */
static int bad_flag(const char *fmt, const char *arg) {
    fprintf(stderr, "klua: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    return -1;
}

/* A flag klua does not know: the usage is where to look for the right one. */
static int unknown_flag(const char *arg) {
    fprintf(stderr, "klua: unknown flag %s\nRun 'klua --help' for usage.\n", arg);
    return -1;
}

/* Reports what ended a run before the script could start, in the log's
 * format, so that a consumer of --log-format json can parse every line. */
__attribute__((format(printf, 2, 3))) static void run_error(const cli *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (c->format == KL_LOG_JSON) {
        kl_log_va(KL_LOG_ERROR, "klua", fmt, ap);
    } else {
        fputs("klua: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
    }
    va_end(ap);
}

static int parse_number(const char *flag, const char *s, double lo, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo) {
        fprintf(stderr, "klua: %s needs a number of at least %g, not \"%s\"\n", flag, lo, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_watch_timeout(cli *c, const char *s) {
    char lo[32];
    const char *colon = strchr(s, ':');
    snprintf(lo, sizeof lo, "%.*s", colon ? (int)(colon - s) : (int)strlen(s), s);
    double a, b;
    if (parse_number("--watch-timeout", lo, 1, &a) < 0) return -1;
    if (parse_number("--watch-timeout", colon ? colon + 1 : lo, a, &b) < 0) return -1;
    c->rt.watch_timeout_min = a;
    c->rt.watch_timeout_max = b > a ? b : a + 1;
    return 0;
}

/* Handles a global flag at argv[*i]; 1 if it was one, 0 if not, -1 on error. */
static int global_flag(cli *c, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *eq = strchr(a, '=');
    char name[64];
    snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
    static const char *const valued[] = {"--kubeconfig", "--context", "--server", "--token", "-v", "--v",
                                         "--log-format", "--instruction-budget", "--memory-limit",
                                         "--watch-idle-timeout", "--watch-timeout", "--page-size",
                                         "--watch-list-deadline", NULL};
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
        else return bad_flag("flag %s needs a value", name);
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
        if (parse_number(name, v, 0, &n) < 0) return -1;
        c->verbosity = (int)n;
    } else if (!strcmp(name, "--log-format")) {
        if (!strcmp(v, "text")) c->format = KL_LOG_TEXT;
        else if (!strcmp(v, "json")) c->format = KL_LOG_JSON;
        else return bad_flag("--log-format must be text or json, not \"%s\"", v);
    } else if (!strcmp(name, "--instruction-budget")) {
        if (parse_number(name, v, 0, &n) < 0) return -1;
        c->rt.instruction_budget = n > 2147483647.0 ? 2147483647L : (long)n;
    } else if (!strcmp(name, "--memory-limit")) {
        if (parse_number(name, v, 1, &n) < 0) return -1;
        c->rt.memory_limit = (size_t)(n * 1048576.0);
    } else if (!strcmp(name, "--watch-idle-timeout")) {
        if (parse_number(name, v, 0.1, &c->rt.idle_timeout) < 0) return -1;
    } else if (!strcmp(name, "--watch-timeout")) {
        if (parse_watch_timeout(c, v) < 0) return -1;
    } else if (!strcmp(name, "--watch-list-deadline")) {
        if (parse_number(name, v, 0.1, &c->rt.watch_list_deadline) < 0) return -1;
    } else if (!strcmp(name, "--page-size")) {
        if (parse_number(name, v, 1, &n) < 0) return -1;
        c->rt.page_size = (int)n;
    }
    return 1;
}

static int parse(cli *c, int argc, char **argv) {
    c->rt.instruction_budget = 100000000;
    c->args = calloc((size_t)argc + 1, sizeof *c->args);
    if (!c->args) return -1;
    for (int i = 1; i < argc; i++) {
        int script_args = c->command && !strcmp(c->command, "run") && c->script;
        if (!script_args) {
            int r = global_flag(c, argc, argv, &i);
            if (r < 0) return -1;
            if (r) continue;
        }
        const char *a = argv[i];
        if (!c->command) {
            if (!strcmp(a, "-h") || !strcmp(a, "--help") || !strcmp(a, "help")) c->command = "help";
            else if (a[0] == '-') return unknown_flag(a);
            else c->command = a;
        } else if (!strcmp(c->command, "run") && !c->script) {
            if (a[0] == '-' && a[1]) return unknown_flag(a);
            c->script = a;
        } else {
            c->args[c->nargs++] = argv[i];
        }
    }
    return 0;
}

/* Prints klua's version and those of the libraries it runs with. */
static int cmd_version(void) {
    lua_State *L = luaL_newstate();
    const char *cjson = "unknown";
    if (L) {
        luaL_requiref(L, "cjson", luaopen_cjson, 0);
        lua_getfield(L, -1, "_VERSION");
        if (lua_isstring(L, -1)) cjson = lua_tostring(L, -1);
    }
    printf("klua %s\n%s\nlibcurl %s\nlua-cjson %s\n", KLUA_VERSION, LUA_RELEASE,
           curl_version_info(CURLVERSION_NOW)->version, cjson);
    if (L) lua_close(L);
    return 0;
}

static const char watch_chunk[] = "return require('klua.watch').main(...)";

static int run(cli *c) {
    kl_log_configure(c->verbosity, c->format);
    if (!strcmp(c->command, "run") && !c->script) {
        run_error(c, "run needs a script: klua run SCRIPT.lua");
        return 2;
    }
    if (!strcmp(c->command, "run") && c->script) {
        FILE *f = fopen(c->script, "r");
        if (!f) {
            run_error(c, "cannot open %s: %s", c->script, strerror(errno));
            return 1;
        }
        fclose(f);
    }
    char err[512];
    kl_rt *rt = kl_rt_new(&c->rt, err, sizeof err);
    if (!rt) {
        run_error(c, "%s", err);
        return 1;
    }
    int code = !strcmp(c->command, "run")
                   ? kl_rt_run(rt, c->script, NULL, c->nargs, c->args)
                   : kl_rt_run(rt, "klua watch", watch_chunk, c->nargs, c->args);
    kl_rt_free(rt);
    return code;
}

int main(int argc, char **argv) {
    cli c;
    memset(&c, 0, sizeof c);
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int code;
    if (parse(&c, argc, argv) < 0) code = 2;
    else if (!c.command || !strcmp(c.command, "help")) {
        fputs(usage, c.command ? stdout : stderr);
        code = c.command ? 0 : 2;
    } else if (!strcmp(c.command, "version")) code = cmd_version();
    else if (!strcmp(c.command, "run") || !strcmp(c.command, "watch")) code = run(&c);
    else {
        fprintf(stderr, "klua: unknown command \"%s\"\nRun 'klua --help' for usage.\n", c.command);
        code = 2;
    }
    free(c.args);
    curl_global_cleanup();
    return code;
}
