/* main.c - the klua command line. */
#include <curl/curl.h>
#include <errno.h>
#include <lauxlib.h>
#include <lua-cjson.h>
#include <lua.h>
#include <lualib.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cmd_test.h"
#include "log.h"
#include "runtime.h"
#include "version.h"

static const char usage[] =
    "usage: klua [flags] run SCRIPT.lua [script args...]\n"
    "       klua [flags] watch RESOURCE [NAME] [-n NS | -A] [-l SEL] [--field-selector SEL]\n"
    "                          [-e LUA] [-o line|json|name] [--watch-only]\n"
    "       klua test [busted args...]   run controller specs with klua.testing (docs/testing.md)\n"
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
    "  --watch-list-deadline SEC    fall back to LIST when the initial state takes longer (default 10)\n"
    "  --request-timeout DURATION   give up on a LIST or an API call after this long (30s, 2m;\n"
    "                               default 5m for a LIST, 1m for an API call)\n";

/* Reports what ended a run before the script could start, in the log's
 * format, so that a consumer of --log-format json can parse every line. */
__attribute__((format(printf, 2, 3))) static void run_error(const kl_cli *c, const char *fmt, ...) {
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

static int run(kl_cli *c) {
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
    kl_cli c;
    signal(SIGPIPE, SIG_IGN);
    /* Every event frees an old object and allocates a new one of about the
     * same size: keep freed memory in the heap rather than handing it back
     * to the kernel and faulting it in again a moment later. */
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    mallopt(M_TOP_PAD, 16 << 20);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int code;
    if (kl_cli_parse(&c, argc, argv, stderr) < 0) code = 2;
    else if (!c.command || !strcmp(c.command, "help")) {
        fputs(usage, c.command ? stdout : stderr);
        code = c.command ? 0 : 2;
    } else if (!strcmp(c.command, "version")) code = cmd_version();
    else if (!strcmp(c.command, "run") || !strcmp(c.command, "watch")) code = run(&c);
    else if (!strcmp(c.command, "test")) code = kl_cmd_test(c.nargs, c.args);
    else {
        fprintf(stderr, "klua: unknown command \"%s\"\nRun 'klua --help' for usage.\n", c.command);
        code = 2;
    }
    kl_cli_free(&c);
    curl_global_cleanup();
    return code;
}
