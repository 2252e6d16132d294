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
#include <sys/prctl.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "cli/cmd_replay.h"
#include "cli/cmd_test.h"
#include "cli/complete.h"
#include "base/log.h"
#include "conn/http.h"
#include "lua/lua_endpoint.h"
#include "lua/lua_webhook.h"
#include "lua/runtime.h"
#include "base/version.h"

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

static const char watch_chunk[] = "return require('klua.cmd.watch').main(...)";
static const char record_chunk[] = "return require('klua.cmd.record').main(...)";
static const char webhook_config_chunk[] = "return require('klua.cmd.webhook_config').main(...)";

/* A core dump of klua holds its credentials, the bearer token among them:
 * none is made unless --allow-core-dumps asks. RLIMIT_CORE 0 keeps the
 * kernel from writing a core file, but a core_pattern that pipes to a
 * helper is not bound by it (core(5)); a process that is not dumpable is
 * dumped by nothing, and, as ssh-agent is, cannot be traced or have its
 * memory read through /proc by another process of the same user. */
static void forbid_core_dumps(void) {
    const struct rlimit none = {0, 0};
    if (setrlimit(RLIMIT_CORE, &none) < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
        kl_log(KL_LOG_WARN, "klua", "cannot turn core dumps off: %s", strerror(errno));
}

/* One warning for each flag that weakens what the kubeconfig would have
 * kept safe, naming what to use instead. */
static void warn_unsafe_flags(const kl_cli *c) {
    if (c->rt.conn.token)
        kl_log(KL_LOG_WARN, "klua", "--token shows the token to every user of this machine (ps, "
                                    "/proc/PID/cmdline): name a file that holds it with tokenFile in a "
                                    "kubeconfig user instead (docs/config.md)");
    if (c->rt.conn.insecure_skip_tls_verify)
        kl_log(KL_LOG_WARN, "klua", "--insecure-skip-tls-verify: the server's certificate is not checked, so "
                                    "anyone on the way can read the credentials sent and answer as the "
                                    "server: give the cluster's CA instead (certificate-authority in the "
                                    "kubeconfig, docs/config.md)");
}

/* klua watch tells of a server's warnings as kubectl does: "Warning: "
 * and the text on stderr, once per distinct text (client-go's rest
 * WarningWriter with Deduplicate, which kubectl installs). */
static void print_warning(void *ud, const char *text) {
    fprintf(ud, "Warning: %s\n", text);
    fflush(ud);
}

static int run(kl_cli *c) {
    kl_log_configure(c->verbosity, c->format);
    if (!c->allow_core_dumps) forbid_core_dumps();
    warn_unsafe_flags(c);
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
    int watch = !strcmp(c->command, "watch"), record = !strcmp(c->command, "record");
    int webhook_config = !strcmp(c->command, "webhook-config");
    const kl_ctl_opts *ctl = &c->rt.ctl;
    double lease = ctl->lease_duration > 0 ? ctl->lease_duration : KL_LEASE_DURATION;
    double renew = ctl->renew_deadline > 0 ? ctl->renew_deadline : KL_RENEW_DEADLINE;
    double retry = ctl->retry_period > 0 ? ctl->retry_period : KL_RETRY_PERIOD;
    /* client-go's NewLeaderElector refuses these too. */
    if (ctl->leader_elect && (lease <= renew || renew <= 1.2 * retry)) {
        run_error(c, "--leader-elect-lease-duration (%gs) must be longer than --leader-elect-renew-deadline (%gs), "
                     "which must be longer than 1.2 x --leader-elect-retry-period (%gs)", lease, renew, retry);
        return 2;
    }
    if (ctl->shards && !ctl->leader_elect) {
        run_error(c, "--shards needs --leader-elect: the shards are Leases taken with its id, namespace and "
                     "timings (add --leader-elect)");
        return 2;
    }
    /* A trial run must neither take the Lease from the controller in
     * production (that would stop it) nor wait behind it for ever; and a
     * dry-run Lease write would hold nothing. */
    if (ctl->dry_run && (ctl->leader_elect || ctl->shards)) {
        run_error(c, "--dry-run runs without leader election: it persists nothing, so it needs no Lease and must not "
                     "take one from the controller in production (drop --leader-elect and --shards)");
        return 2;
    }
    if (ctl->once && ctl->shards) {
        run_error(c, "--once reconciles every key once, --shards only those of the shards this replica holds: "
                     "use one or the other");
        return 2;
    }
    if ((watch || record || webhook_config) &&
        (ctl->leader_elect || ctl->shards || ctl->metrics_addr || ctl->probe_addr || ctl->ui_addr ||
         ctl->webhook_addr || ctl->graceful_shutdown_timeout > 0 || ctl->dry_run || ctl->once)) {
        run_error(c, "leader election, --dry-run, --once, the graceful shutdown, the metrics and probe endpoint, "
                     "the live page and the webhooks are for klua run, not klua %s", c->command);
        return 2;
    }
    /* webhook-config only collects the script's declarations: whatever it
     * might ask of a cluster fails at once, without one. */
    if (webhook_config) {
        c->rt.conn.kubeconfig = "/dev/null";
        c->rt.conn.server = "http://127.0.0.1:1";
    }
    c->rt.ctl.script = c->script;
    char err[512];
    kl_rt *rt = kl_rt_new(&c->rt, err, sizeof err);
    if (!rt) {
        run_error(c, "%s", err);
        return 1;
    }
    if (watch) kl_http_on_warning(kl_rt_http(rt), print_warning, stderr);
    /* The endpoints start before any watch does, so that a port in use is
     * reported at once; one server answers both when the addresses agree. */
    const char *addrs[3] = {ctl->metrics_addr, ctl->probe_addr, ctl->ui_addr};
    const char *flag_names[3] = {"--metrics-bind-address", "--health-probe-bind-address", "--ui-bind-address"};
    for (int k = 0; k < 3; k++) {
        if (!addrs[k] || (k == 1 && addrs[0] && !strcmp(addrs[0], addrs[1]))) continue;
        kl_endpoint_kind kind = k == 2 ? KL_ENDPOINT_UI : KL_ENDPOINT_PROBES;
        if (kl_lua_endpoint_open(rt, kind, addrs[k], err, sizeof err) < 0) {
            run_error(c, "%s %s", flag_names[k], err);
            kl_rt_free(rt);
            return 2;
        }
    }
    if (ctl->webhook_addr && kl_lua_webhook_open(rt, ctl->webhook_addr, ctl->webhook_cert_dir, err, sizeof err) < 0) {
        run_error(c, "--webhook-bind-address %s", err);
        kl_rt_free(rt);
        return 2;
    }
    int code = watch    ? kl_rt_run(rt, "klua watch", watch_chunk, c->nargs, c->args)
               : record ? kl_rt_run(rt, "klua record", record_chunk, c->nargs, c->args)
               : webhook_config ? kl_rt_run(rt, "klua webhook-config", webhook_config_chunk, c->nargs, c->args)
                        : kl_rt_run(rt, c->script, NULL, c->nargs, c->args);
    /* A shell tool stopped by a signal ends with 128 + its number (130 for
     * SIGINT); a script that stops cleanly chose its code with klua.stop. */
    if (watch && kl_rt_stop_signal(rt)) code = 128 + kl_rt_stop_signal(rt);
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
    memset(&c, 0, sizeof c); /* freed below on every path, __complete's too */
    /* The completion scripts' call back: the words are a line being typed,
     * flags half-written included, so they are not parsed as a command. */
    if (argc > 1 && !strcmp(argv[1], "__complete")) code = kl_complete_words(argc - 2, argv + 2);
    else if (kl_cli_parse(&c, argc, argv, stderr) < 0) code = 2;
    else if ((code = kl_cli_answer(&c, stdout, stderr)) < 0) {
        if (!strcmp(c.command, "version")) code = cmd_version();
        else if (!strcmp(c.command, "test")) code = kl_cmd_test(c.nargs, c.args);
        else if (!strcmp(c.command, "replay")) code = kl_cmd_replay(c.nargs, c.args);
        else if (!strcmp(c.command, "completion"))
            code = c.nargs > 1 ? (fputs("klua completion: one shell: bash, zsh or fish\n", stderr), 2)
                               : kl_complete_script(c.nargs ? c.args[0] : NULL, stdout, stderr);
        else code = run(&c);
    }
    kl_cli_free(&c);
    curl_global_cleanup();
    return code;
}
