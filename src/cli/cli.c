/* cli.c - parsing the klua command line and printing its help; see cli.h. */
#include "cli/cli.h"

#include <ctype.h>
#include <errno.h>
#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "lua/embedded.h"
#include "conn/serve.h"

/* ---- numbers and durations ------------------------------------------------ */

/* Numeric flags end up as ints, longs and size_ts: this bound keeps those
 * conversions defined, since strtod also reads "inf" and "1e300". */
#define NUMBER_MAX 2147483647.0
/* A number macro as text, for the help of a flag whose default it is. */
#define STR(n) STR_(n)
#define STR_(n) #n

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

/* A switch alone is on; with a value it is what the value says, as pflag
 * reads --insecure-skip-tls-verify=false. */
static int parse_switch(FILE *errs, const char *flag, const char *v, int *out) {
    static const char *const on[] = {"1", "t", "T", "true", "TRUE", "True", NULL};
    static const char *const off[] = {"0", "f", "F", "false", "FALSE", "False", NULL};
    *out = 1;
    if (!v) return 0;
    for (int k = 0; on[k]; k++)
        if (!strcmp(v, on[k])) return 0;
    *out = 0;
    for (int k = 0; off[k]; k++)
        if (!strcmp(v, off[k])) return 0;
    fprintf(errs, "klua: %s is a switch: true or false, not \"%s\"\n", flag, v);
    return -1;
}

/* ---- the global flags ------------------------------------------------------ */

typedef int (*flag_setter)(kl_cli *c, FILE *errs, const char *name, const char *v);

/* Repeatable, as kubectl's: each --as-group adds a group. */
static int set_as_group(kl_cli *c, FILE *errs, const char *name, const char *v) {
    (void)errs, (void)name;
    const char **grown = kl_buf_try_grow(c->as_groups, &c->cap_as_groups, c->rt.conn.n_as_groups + 1,
                                         sizeof *grown, 4);
    if (!grown) return -1;
    c->as_groups = grown;
    c->as_groups[c->rt.conn.n_as_groups++] = v;
    c->rt.conn.as_groups = c->as_groups;
    return 0;
}

static int set_verbosity(kl_cli *c, FILE *errs, const char *name, const char *v) {
    double n;
    if (parse_number(errs, name, v, 0, NUMBER_MAX, &n) < 0) return -1;
    c->verbosity = (int)n;
    return 0;
}

/* One of two words: 0 for the first, 1 for the second. */
static int parse_either(FILE *errs, const char *flag, const char *v, const char *first, const char *second,
                        int *out) {
    *out = !strcmp(v, second);
    if (*out || !strcmp(v, first)) return 0;
    fprintf(errs, "klua: %s must be %s or %s, not \"%s\"\n", flag, first, second, v);
    return -1;
}

static int set_log_format(kl_cli *c, FILE *errs, const char *name, const char *v) {
    int json;
    if (parse_either(errs, name, v, "text", "json", &json) < 0) return -1;
    c->format = json ? KL_LOG_JSON : KL_LOG_TEXT;
    return 0;
}

static int set_instruction_budget(kl_cli *c, FILE *errs, const char *name, const char *v) {
    double n;
    /* Any larger budget means "as much as an int allows". */
    if (parse_number(errs, name, v, 0, HUGE_VAL, &n) < 0) return -1;
    c->rt.instruction_budget = n > NUMBER_MAX ? (long)NUMBER_MAX : (long)n;
    return 0;
}

static int set_memory_limit(kl_cli *c, FILE *errs, const char *name, const char *v) {
    double n;
    if (parse_number(errs, name, v, 1, NUMBER_MAX, &n) < 0) return -1;
    c->rt.memory_limit = (size_t)(n * 1048576.0);
    return 0;
}

static int set_watch_timeout(kl_cli *c, FILE *errs, const char *name, const char *v) {
    char lo[32];
    const char *colon = strchr(v, ':');
    snprintf(lo, sizeof lo, "%.*s", colon ? (int)(colon - v) : (int)strlen(v), v);
    double a, b;
    if (parse_number(errs, name, lo, 1, NUMBER_MAX, &a) < 0) return -1;
    if (parse_number(errs, name, colon ? colon + 1 : lo, a, NUMBER_MAX, &b) < 0) return -1;
    c->rt.watch_timeout_min = a;
    c->rt.watch_timeout_max = b > a ? b : a + 1;
    return 0;
}

static int set_page_size(kl_cli *c, FILE *errs, const char *name, const char *v) {
    double n;
    if (parse_number(errs, name, v, 1, NUMBER_MAX, &n) < 0) return -1;
    c->rt.page_size = (int)n;
    return 0;
}

static int set_watch_list(kl_cli *c, FILE *errs, const char *name, const char *v) {
    int on;
    if (parse_switch(errs, name, v, &on) < 0) return -1;
    c->rt.watch_list = on ? KL_WATCH_LIST_ON : KL_WATCH_LIST_OFF;
    return 0;
}

static int set_serialization(kl_cli *c, FILE *errs, const char *name, const char *v) {
    return parse_either(errs, name, v, "json", "cbor", &c->rt.cbor);
}

/* How many shards the keys are split into: 1 to 1024, whole. */
static int set_shards(kl_cli *c, FILE *errs, const char *name, const char *v) {
    double n;
    if (parse_number(errs, name, v, 1, 1024, &n) < 0) return -1;
    if (n != (double)(int)n) {
        fprintf(errs, "klua: %s needs a whole number of shards, not \"%s\"\n", name, v);
        return -1;
    }
    c->rt.ctl.shards = (int)n;
    return 0;
}

/* ---- flags that set one field ---------------------------------------------- */

/* Reads the value v of flag `name` into the field at out, or writes to errs
 * why it cannot. */
typedef int (*flag_reader)(FILE *errs, const char *name, const char *v, void *out);

/* A word kept as it is (it points into argv). */
static int read_text(FILE *errs, const char *name, const char *v, void *out) {
    (void)errs, (void)name;
    *(const char **)out = v;
    return 0;
}

static int read_switch(FILE *errs, const char *name, const char *v, void *out) {
    return parse_switch(errs, name, v, out);
}

static int read_duration(FILE *errs, const char *name, const char *v, void *out) {
    return parse_duration(errs, name, v, out);
}

/* Seconds, at least a tenth of one. */
static int read_seconds(FILE *errs, const char *name, const char *v, void *out) {
    return parse_number(errs, name, v, 0.1, NUMBER_MAX, out);
}

/* A lease duration, renew deadline, retry period or any timeout: positive,
 * as Go's time.Duration flags of client-go's components are written (15s). */
static int read_period(FILE *errs, const char *name, const char *v, void *out) {
    double *d = out;
    if (parse_duration(errs, name, v, d) < 0) return -1;
    if (*d > 0) return 0;
    fprintf(errs, "klua: %s must be longer than 0s\n", name);
    return -1;
}

/* A bind address as controller-runtime takes one; "0" turns it off. */
static int read_address(FILE *errs, const char *name, const char *v, void *out) {
    const char **addr = out;
    if (!strcmp(v, "0")) {
        *addr = NULL;
        return 0;
    }
    char host[256], why[256];
    unsigned port;
    if (kl_serve_parse_address(v, host, sizeof host, &port, why, sizeof why) < 0) {
        fprintf(errs, "klua: %s %s; \"0\" turns it off\n", name, why);
        return -1;
    }
    *addr = v;
    return 0;
}

/* The offset in kl_cli of member, whose type must be type: _Generic has no
 * case for another. */
#define FIELD(type, member) _Generic(((kl_cli *)0)->member, type: offsetof(kl_cli, member))
#define TEXT(member) .read = read_text, .at = FIELD(const char *, member)
#define SWITCH(member) .read = read_switch, .at = FIELD(int, member)
#define DURATION(member) .read = read_duration, .at = FIELD(double, member)
#define SECONDS(member) .read = read_seconds, .at = FIELD(double, member)
#define PERIOD(member) .read = read_period, .at = FIELD(double, member)
#define ADDRESS(member) .read = read_address, .at = FIELD(const char *, member)

/* One flag: what parses it and what --help says of it. The help of every
 * command prints this table, and a man page generator can read the same
 * lines (see kl_cli_help). */
typedef struct flag {
    const char *group;   /* heading of the group this flag starts, or NULL */
    const char *name;    /* "--kubeconfig" */
    const char *alias;   /* "-v", or NULL */
    const char *arg;     /* "FILE"; NULL for a switch */
    const char *help;    /* one line */
    flag_setter set;     /* a flag that needs more than read and at, or NULL */
    const char *command; /* the command a flag such as --help stands for, or NULL */
    flag_reader read;    /* a flag that sets one field: its reader (TEXT(member) etc.), */
    size_t at;           /* and the field's offset in kl_cli */
} flag;

static const flag flags[] = {
    {"Connection (as kubectl)", "--kubeconfig", NULL, "FILE",
     "kubeconfig file (default: $KUBECONFIG, ~/.kube/config)", TEXT(rt.conn.kubeconfig)},
    {NULL, "--context", NULL, "NAME", "kubeconfig context to use", TEXT(rt.conn.context)},
    {NULL, "--server", NULL, "URL", "API server to use, with or without a kubeconfig", TEXT(rt.conn.server)},
    {NULL, "--token", NULL, "TOKEN", "bearer token to send instead of the kubeconfig's credentials",
     TEXT(rt.conn.token)},
    {NULL, "--insecure-skip-tls-verify", NULL, NULL, "do not verify the server's certificate",
     SWITCH(rt.conn.insecure_skip_tls_verify)},
    {NULL, "--allow-insecure-credentials", NULL, NULL, "send credentials over plain http",
     SWITCH(rt.conn.allow_insecure_credentials)},
    {NULL, "--as", NULL, "USER", "act as this user (impersonation), e.g. system:serviceaccount:NS:NAME",
     TEXT(rt.conn.as)},
    {NULL, "--as-group", NULL, "GROUP", "act as a member of this group too; repeat for more (needs --as)",
     .set = set_as_group},
    {NULL, "--as-uid", NULL, "UID", "the uid of the user impersonated (needs --as)", TEXT(rt.conn.as_uid)},
    {NULL, "--disable-compression", NULL, NULL,
     "ask for uncompressed responses: less API server CPU where bandwidth is ample",
     SWITCH(rt.conn.disable_compression)},
    {"Diagnostics", "-v", "--v", "N", "verbosity, 0 to 8: see \"Verbosity levels\" below", .set = set_verbosity},
    {NULL, "--log-format", NULL, "text|json", "format of the log on stderr", .set = set_log_format},
    {NULL, "--allow-core-dumps", NULL, NULL,
     "let a crash dump core and debuggers attach (off: a core holds the credentials)", SWITCH(allow_core_dumps)},
    {"Limits and tuning", "--instruction-budget", NULL, "N",
     "instructions a handler may run in one go (default 100000000)", .set = set_instruction_budget},
    {NULL, "--memory-limit", NULL, "MIB", "memory cap of the Lua state and of one klua.api response (default: none; 64 MiB a response)", .set = set_memory_limit},
    {NULL, "--watch-idle-timeout", NULL, "SEC", "restart a watch silent this long (default 150)",
     SECONDS(rt.idle_timeout)},
    {NULL, "--watch-timeout", NULL, "MIN[:MAX]", "server-side watch timeout range (default 300:600)",
     .set = set_watch_timeout},
    {NULL, "--page-size", NULL, "N", "objects per LIST page (default 500)", .set = set_page_size},
    {NULL, "--watch-list", NULL, NULL,
     "stream the initial state (sendInitialEvents) at every relist; =false: LIST (default: while the server serves it)",
     .set = set_watch_list},
    {NULL, "--watch-list-deadline", NULL, "SEC", "list instead when no initial event came this long (default 10)",
     SECONDS(rt.watch_list_deadline)},
    {NULL, "--serialization", NULL, "json|cbor",
     "what informers ask the server for: cbor needs kube-apiserver 1.32+ with CBORServingAndStorage, and falls back to json (default json; docs/architecture.md)",
     .set = set_serialization},
    {NULL, "--request-timeout", NULL, "DURATION",
     "give up on a LIST (default 5m) or API call (1m) after this long", DURATION(rt.request_timeout)},
    {NULL, "--cache-compression", NULL, NULL,
     "compress cached objects left unwritten, on idle time; =false: keep them as JSON, more memory for "
     "less CPU on reads (default: on; docs/config.md)",
     SWITCH(rt.cache_compression)},
    {NULL, "--cache-compression-after", NULL, "DURATION",
     "how long a cached object stays unwritten before it is compressed (default 5s)",
     PERIOD(rt.cache_compression_after)},
    {"Running a controller (klua run)", "--leader-elect", NULL, NULL,
     "reconcile only while holding a Lease, as client-go's leader election", SWITCH(rt.ctl.leader_elect)},
    {NULL, "--leader-election-id", NULL, "NAME", "the Lease's name (default: the script's name)",
     TEXT(rt.ctl.election_id)},
    {NULL, "--leader-election-namespace", NULL, "NS", "the Lease's namespace (default: the pod's, else the context's)",
     TEXT(rt.ctl.election_namespace)},
    {NULL, "--leader-elect-lease-duration", NULL, "DUR", "how long a Lease holds without renewal (default " STR(KL_LEASE_DURATION) "s)",
     PERIOD(rt.ctl.lease_duration)},
    {NULL, "--leader-elect-renew-deadline", NULL, "DUR", "how long the leader tries to renew (default " STR(KL_RENEW_DEADLINE) "s)",
     PERIOD(rt.ctl.renew_deadline)},
    {NULL, "--leader-elect-retry-period", NULL, "DUR", "time between tries to take or renew (default " STR(KL_RETRY_PERIOD) "s)",
     PERIOD(rt.ctl.retry_period)},
    {NULL, "--shards", NULL, "N",
     "split the keys into N shards on Leases; reconcile those this replica holds, and list and watch only them "
     "where the server shards lists (KEP-5866; docs/scale.md)",
     .set = set_shards},
    {NULL, "--server-side-sharding", NULL, NULL,
     "with --shards, have a server that shards lists (KEP-5866) send only the held shards' objects; "
     "=false: list everything and filter here (default: where the server does)",
     SWITCH(rt.ctl.server_sharding)},
    {NULL, "--dry-run", NULL, NULL,
     "send every write with dryRun=All and log it as a diff against the cache; persist nothing",
     SWITCH(rt.ctl.dry_run)},
    {NULL, "--once", NULL, NULL,
     "reconcile every key of the initial sync once, then exit (0 when all succeeded)", SWITCH(rt.ctl.once)},
    {NULL, "--graceful-shutdown-timeout", NULL, "DUR",
     "on SIGTERM, how long reconciles in flight and on_shutdown hooks may take (default 30s)",
     PERIOD(rt.ctl.graceful_shutdown_timeout)},
    {NULL, "--metrics-bind-address", NULL, "ADDR", "serve /metrics on ADDR, e.g. :8080 (default 0: off)",
     ADDRESS(rt.ctl.metrics_addr)},
    {NULL, "--health-probe-bind-address", NULL, "ADDR", "serve /healthz and /readyz on ADDR (default 0: off)",
     ADDRESS(rt.ctl.probe_addr)},
    {NULL, "--readyz-max-staleness", NULL, "DUR",
     "/readyz fails while an informer has heard nothing from the server for DUR (default: no bound)",
     PERIOD(rt.ctl.readyz_max_staleness)},
    {NULL, "--verify-cache", NULL, "DUR",
     "check each cache against a consistent LIST every DUR; relist on drift (default: off)",
     PERIOD(rt.ctl.verify_cache)},
    {NULL, "--ui-bind-address", NULL, "ADDR",
     "serve the live page /ui/ on ADDR; :PORT is 127.0.0.1 only (default 0: off; docs/ui.md)", ADDRESS(rt.ctl.ui_addr)},
    {NULL, "--webhook-bind-address", NULL, "ADDR",
     "serve the script's webhooks over HTTPS on ADDR, e.g. :9443 (default 0: off; docs/webhooks.md)",
     ADDRESS(rt.ctl.webhook_addr)},
    {NULL, "--webhook-cert-dir", NULL, "DIR",
     "the webhooks' tls.crt and tls.key, read again when they change (default /tmp/k8s-webhook-server/serving-certs)",
     TEXT(rt.ctl.webhook_cert_dir)},
    {"Help", "--help", "-h", NULL, "print this help; after a command, the help of that command", .command = "help"},
    {NULL, "--version", "-V", NULL, "print the versions of klua and its libraries, as klua version",
     .command = "version"},
};
#define NFLAGS (sizeof flags / sizeof flags[0])

/* The flag a word names, the part before any '=' (its length in len). */
static const flag *find_flag(const char *word, size_t len) {
    for (size_t k = 0; k < NFLAGS; k++) {
        const flag *f = &flags[k];
        if ((strlen(f->name) == len && !strncmp(word, f->name, len)) ||
            (f->alias && strlen(f->alias) == len && !strncmp(word, f->alias, len)))
            return f;
    }
    return NULL;
}

/* A short flag with a value takes it joined too, as pflag does: -v4. */
static const flag *find_joined(const char *word) {
    if (word[0] != '-' || word[1] == '-' || !word[1] || !word[2]) return NULL;
    const flag *f = find_flag(word, 2);
    return f && f->arg ? f : NULL;
}

/* ---- commands -------------------------------------------------------------- */

typedef struct command {
    const char *name;
    const char *synopsis; /* for the list of commands */
    const char *summary;  /* one line */
    const char *usage;    /* the command's own usage line; NULL when klua.cmd.watch prints it */
    const char *about;    /* what `klua help NAME` says after the usage line */
} command;

static const command commands[] = {
    {"run", "run SCRIPT.lua [args...]", "run a Lua script on the List+Watch pipeline",
     "usage: klua [flags] run SCRIPT.lua [script args...]",
     "Runs SCRIPT.lua, which sees the global klua (README.md, docs/tutorial.md), until\n"
     "it calls klua.stop() or SIGINT or SIGTERM stops it. Every word after SCRIPT.lua\n"
     "is the script's (klua.args), flags included: klua's flags go before it. Those\n"
     "under \"Running a controller\" are run's alone. A trial of a new version\n"
     "against production: klua run --dry-run --once SCRIPT.lua sends every write\n"
     "with dryRun=All, logs each as a diff, reconciles each key once and exits 0\n"
     "when every reconcile succeeded (docs/deploy.md, \"Trial runs\")."},
    {"watch", "watch RESOURCE [NAME]", "print one line per event, like kubectl get -w", NULL, NULL},
    {"record", "record TYPE[,TYPE...] --output FILE", "write what klua sees of some resources to a file, for replay",
     "usage: klua [flags] record TYPE[,TYPE...] [-n NS | -A] [-l SEL] --output FILE [--include-secret-data]",
     "Writes to FILE, as NDJSON, what klua's informers see of the resources named\n"
     "(as kubectl names them, several separated by commas): a header, the initial\n"
     "list, then every change with its arrival time, until SIGINT or SIGTERM ends\n"
     "it. A relist is written as the informer delivers it: the adds, updates and\n"
     "deletes it found. Secrets' data and stringData values are replaced by\n"
     "\"<redacted>\" (base64 in data) unless --include-secret-data. klua replay\n"
     "serves the file again; docs/record.md describes it field by field.\n"
     "\n"
     "Flags:\n"
     "  -n, --namespace NS                     record this namespace (default: the kubeconfig context's)\n"
     "  -A, --all-namespaces                   record every namespace\n"
     "  -l, --selector SEL                     only objects whose labels match, filtered by the server\n"
     "  -o, --output FILE                      the file to write (replaced)\n"
     "      --include-secret-data              keep the values of Secrets' data and stringData"},
    {"replay", "replay FILE --kubeconfig-out KC", "serve a recording of klua record again, at its pace",
     "usage: klua replay FILE [--speed FACTOR] [--port P] --kubeconfig-out KC",
     "Starts the sandbox API server (docs/sandbox.md) holding the initial state of\n"
     "FILE, a recording of klua record, writes a kubeconfig for it to KC and, once\n"
     "a client watches a recorded resource, commits the recorded changes in the\n"
     "file's order at their recorded pace, so that klua run, klua watch or kubectl\n"
     "sees the incident again. The server assigns its own resourceVersions, in\n"
     "the file's order: the same file gives the same events in the same order\n"
     "(docs/record.md). It serves, the final state once the replay is over, until\n"
     "SIGINT or SIGTERM.\n"
     "\n"
     "Flags:\n"
     "      --speed FACTOR                     replay FACTOR times as fast (default 1)\n"
     "      --port P                           port to listen on, on 127.0.0.1 (default 0: any free one)\n"
     "      --kubeconfig-out FILE              write the kubeconfig of the server here"},
    {"webhook-config", "webhook-config SCRIPT.lua [flags]",
     "print the webhook configurations of the webhooks a script declares",
     "usage: klua webhook-config SCRIPT.lua (--service NS/NAME [--port N] | --url URL) "
     "[--ca-bundle FILE | --inject-ca-from NS/CERT] [--name NAME]",
     "Prints, as YAML documents for kubectl apply, the ValidatingWebhookConfiguration\n"
     "and MutatingWebhookConfiguration that register the webhooks SCRIPT.lua declares\n"
     "with klua.webhook (their paths, resources, operations, failure policies and\n"
     "timeouts), and, as comments, the conversion stanza of each CustomResourceDefinition\n"
     "it converts, so that the configuration cannot disagree with the script. The\n"
     "script's main chunk runs without a cluster, only to collect its declarations\n"
     "(docs/webhooks.md).\n"
     "\n"
     "Flags:\n"
     "      --service NS/NAME                  the API server calls the Service NAME in namespace NS\n"
     "      --port N                           the Service's port (default 443)\n"
     "      --url URL                          the API server calls https://HOST:PORT instead\n"
     "      --ca-bundle FILE                   the PEM CA that signed the webhook's certificate\n"
     "      --inject-ca-from NS/CERT           let cert-manager's cainjector fill the CA in from Certificate NS/CERT\n"
     "      --name NAME                        the configurations' name (default: the script's file name)"},
    {"test", "test [busted args...]", "run a controller's specs with klua.testing (docs/testing.md)",
     "usage: klua test [busted args...]",
     "Runs busted with the klua.testing harness on the Lua path and KLUA_BIN set to\n"
     "this klua, so that a controller's specs start a sandbox API server and the\n"
     "controller against it (docs/testing.md). Every word after test is busted's\n"
     "(spec files or directories, --filter PATTERN, -o FORMAT, ...), except --help\n"
     "and -h, which print this help."},
    {"version", "version", "print the versions of klua, Lua, libcurl and lua-cjson", "usage: klua version",
     "Prints the version of klua and of the libraries it runs with, one per line\n"
     "(also klua --version and klua -V)."},
    {"completion", "completion bash|zsh|fish", "print the shell completion script of bash, zsh or fish",
     "usage: klua completion bash|zsh|fish",
     "Prints the completion script of a shell. It completes commands and flags, the\n"
     "values of flags that take one of a few words, namespaces and, after watch,\n"
     "the resources the server serves: the script asks this klua (klua __complete),\n"
     "which asks the server through the kubeconfig and the flags on the line, and\n"
     "says nothing when no server answers. Load it for the session with\n"
     "  source <(klua completion bash)\n"
     "or install it where the shell looks (make install does)."},
    {"help", "help [COMMAND]", "print this help, or the help of COMMAND (also COMMAND --help)",
     "usage: klua help [COMMAND]", "Prints the help of klua, or of COMMAND with its flags."},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const command *find_command(const char *name) {
    for (size_t k = 0; k < NCOMMANDS; k++)
        if (!strcmp(commands[k].name, name)) return &commands[k];
    return NULL;
}

/* ---- suggestions ----------------------------------------------------------- */

/* Words longer than this get no suggestion: nobody mistypes a flag that long. */
#define SUGGEST_MAX 64

/* Levenshtein distance, ignoring case, as cobra's suggestions measure it. */
static size_t distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b), row[SUGGEST_MAX + 1];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            int same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
            size_t best = diag + !same;
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* Keeps in *best the candidate nearest to word, if near enough to be what
 * was meant: at most 2 edits, as cobra's SuggestionsMinimumDistance, and
 * fewer edits than the word has letters (so "-x" is no typo of "-v"). For
 * commands a candidate the word begins also counts, as in cobra. */
static void consider(const char *word, const char *cand, int prefix, const char **best, size_t *best_d) {
    const char *w = word + strspn(word, "-"), *c = cand + strspn(cand, "-");
    size_t lw = strlen(w);
    if (!lw || lw > SUGGEST_MAX || strlen(c) > SUGGEST_MAX) return;
    size_t d = prefix && !strncmp(c, w, lw) ? 0 : distance(w, c);
    if (d <= 2 && d < lw && d < *best_d) {
        *best = cand;
        *best_d = d;
    }
}

/* The global flag nearest to word, or NULL. */
static const char *suggest_flag(const char *word, const char *best, size_t best_d) {
    for (size_t k = 0; k < NFLAGS; k++) {
        consider(word, flags[k].name, 0, &best, &best_d);
        if (flags[k].alias) consider(word, flags[k].alias, 0, &best, &best_d);
    }
    return best;
}

/* Writes "Did you mean this?" as cobra does, then where to read more. */
static void hint(FILE *errs, const char *suggestion, const char *command) {
    if (suggestion) fprintf(errs, "\nDid you mean this?\n\t%s\n\n", suggestion);
    fprintf(errs, "Run 'klua%s%s --help' for usage.\n", command ? " " : "", command ? command : "");
}

/* A flag klua does not know: one line with the nearest flag it does know. */
static int unknown_flag(FILE *errs, const char *arg, const char *command) {
    fprintf(errs, "klua: unknown flag: %s\n", arg);
    hint(errs, suggest_flag(arg, NULL, (size_t)-1), command);
    return -1;
}

static const char *suggest_command(const char *word) {
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t k = 0; k < NCOMMANDS; k++) consider(word, commands[k].name, 1, &best, &best_d);
    return best;
}

/* suggest(word, names) -> the nearest of names and the global flags, or
 * nil. For klua.cmd.watch's parse, whose flags live in Lua. */
static int l_suggest(lua_State *L) {
    const char *word = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    lua_Integer n = luaL_len(L, 2);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, 2, i); /* stays on the stack, so that best stays valid */
        const char *cand = lua_tostring(L, -1);
        if (cand) consider(word, cand, 0, &best, &best_d);
    }
    best = suggest_flag(word, best, best_d);
    if (best) lua_pushstring(L, best);
    else lua_pushnil(L);
    return 1;
}

void kl_cli_push_suggest(lua_State *L) { lua_pushcfunction(L, l_suggest); }

/* ---- parsing --------------------------------------------------------------- */

static int set_flag(kl_cli *c, FILE *errs, const flag *f, const char *v) {
    if (f->read) return f->read(errs, f->name, v, (char *)c + f->at);
    return f->set(c, errs, f->name, v);
}

/* Handles a setting flag at argv[*i]; 1 if it was one, 0 if not, -1 on error. */
static int global_flag(kl_cli *c, int argc, char **argv, int *i, FILE *errs) {
    const char *a = argv[*i];
    const char *eq = a[0] == '-' ? strchr(a, '=') : NULL;
    const flag *f = find_flag(a, eq ? (size_t)(eq - a) : strlen(a));
    const char *v = NULL;
    if (f && !f->command) {
        if (f->arg && eq) v = eq + 1;
        else if (f->arg && *i + 1 < argc) v = argv[++*i];
        else if (f->arg) {
            fprintf(errs, "klua: flag %.*s needs a value\n", (int)(eq ? (size_t)(eq - a) : strlen(a)), a);
            return -1;
        } else if (eq) {
            v = eq + 1;
        }
        return set_flag(c, errs, f, v) < 0 ? -1 : 1;
    }
    if (f || !(f = find_joined(a)) || f->command) return 0;
    return set_flag(c, errs, f, a + 2) < 0 ? -1 : 1;
}

/* The command a flag such as --help or -V stands for, or NULL. */
static const char *command_flag(const char *a) {
    const flag *f = find_flag(a, strlen(a));
    return f ? f->command : NULL;
}

static lua_State *watch_module(FILE *errs);

/* How many words a flag of klua watch at a spans (1 or 2, with its value),
 * as klua.cmd.watch's flag_words says; 0 when it is none, or cannot be read. */
static int watch_flag_words(const char *a) {
    FILE *null = fopen("/dev/null", "w");
    lua_State *L = null ? watch_module(null) : NULL;
    if (null) fclose(null);
    if (!L) return 0;
    lua_getfield(L, -1, "flag_words");
    lua_pushstring(L, a);
    int n = lua_pcall(L, 1, 1, 0) == LUA_OK ? (int)lua_tointeger(L, -1) : 0;
    lua_close(L);
    return n;
}

/* A flag of watch before any command (`klua -n shop watch pods`), as kubectl
 * takes `kubectl -n shop get pods`: kept, with its value, as the first of
 * the command's words, for watch to read. 1 if it was one, 0 if not. */
static int leading_watch_flag(kl_cli *c, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    int words = a[0] == '-' && a[1] && !command_flag(a) ? watch_flag_words(a) : 0;
    if (!words || *i + words > argc) return 0;
    for (int k = 0; k < words; k++) c->args[c->nargs++] = argv[(*i)++];
    --*i;
    return 1;
}

/* The first word that is not a flag: the command; watch's flags may come
 * before it (they wait in c->args), no other command's. */
static int take_command(kl_cli *c, const char *a, FILE *errs) {
    const char *named = command_flag(a);
    if (named) c->command = named;
    else if (a[0] == '-') return unknown_flag(errs, a, NULL);
    else c->command = a;
    if (c->nargs && strcmp(c->command, "watch")) {
        fprintf(errs, "klua: %s is a flag of klua watch, not of klua %s\n", c->args[0], c->command);
        hint(errs, NULL, c->command);
        return -1;
    }
    return 0;
}

/* --help or -h after test: klua test's own help, not busted's, which
 * busted cannot print under klua. */
static int is_help(const char *a) {
    return !strcmp(a, "--help") || !strcmp(a, "-h");
}

int kl_cli_parse(kl_cli *c, int argc, char **argv, FILE *errs) {
    memset(c, 0, sizeof *c);
    c->rt.instruction_budget = 100000000;
    c->rt.watch_list = KL_WATCH_LIST_AUTO;
    c->rt.ctl.server_sharding = 1;
    c->rt.cache_compression = 1;
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
        const char *named = command_flag(a);
        if (!c->command) {
            if (leading_watch_flag(c, argc, argv, &i)) continue;
            if (take_command(c, a, errs) < 0) return -1;
        } else if (!strcmp(c->command, "test") && is_help(a)) {
            c->help = 1;
        } else if (!script_args && strcmp(c->command, "watch") && named && !strcmp(named, "help")) {
            /* klua.cmd.watch reads its own words: `-e --help` is an expression. */
            c->help = 1;
        } else if (!strcmp(c->command, "run") && !c->script) {
            if (a[0] == '-' && a[1]) return unknown_flag(errs, a, "run");
            c->script = a;
        } else {
            c->args[c->nargs++] = argv[i];
        }
    }
    return 0;
}

void kl_cli_free(kl_cli *c) {
    free(c->as_groups);
    c->as_groups = NULL;
    c->cap_as_groups = 0;
    c->rt.conn.as_groups = NULL;
    c->rt.conn.n_as_groups = 0;
    free(c->args);
    c->args = NULL;
    c->nargs = 0;
}

/* ---- help ------------------------------------------------------------------ */

/* What each -v level adds, as src/base/log.h's callers narrate it. */
static const char levels[] =
    "\nVerbosity levels (-v N; each level shows what those below it show):\n"
    "  0   errors, warnings, recoveries, and the script's klua.log.info\n"
    "  2   each reflector: LIST, WATCH, bookmarks, 410s, relists, backoffs, sync; the runtime's phases; "
    "each pass of an informer's cache compression that compressed much\n"
    "  3   each handler call (informer, event, key, resourceVersion); each enqueue (key, the informer and "
    "event that caused it, queued or deduplicated); each reconcile's start and end (result, duration, "
    "requeue or backoff)\n"
    "  4   the script's klua.log.debug; the cache compression's transitions and heap trims\n"
    "  5   the wire: each read's size, each frame's size, each decoded event's type, key and resourceVersion\n"
    "  6   each HTTP request as it ends: status and duration\n"
    "  8   each HTTP request as it starts\n";

/* The global flags (those that stand for a command only if with_commands),
 * one line each under their group's heading: "  -v, --v N"
 * or "      --kubeconfig FILE", the help from column 42; then the levels. */
static void print_flags(FILE *out, int with_commands) {
    for (size_t k = 0; k < NFLAGS; k++) {
        const flag *f = &flags[k];
        char left[64];
        if (f->command && !with_commands) continue;
        if (f->group) fprintf(out, "%s:\n", f->group);
        const char *shrt = f->alias && f->alias[1] != '-' ? f->alias : f->name[1] != '-' ? f->name : NULL;
        const char *lng = shrt == f->name ? f->alias : f->name;
        snprintf(left, sizeof left, "%s%s%s%s%s", shrt ? shrt : "  ", shrt && lng ? ", " : "  ",
                 lng ? lng : "", f->arg ? " " : "", f->arg ? f->arg : "");
        fprintf(out, "  %-38s %s\n", left, f->help);
    }
    fputs(levels, out);
}

static void print_root(FILE *out) {
    fputs("usage: klua [flags] COMMAND [args...]\n\n"
          "klua runs the Kubernetes List+Watch pipeline and hands every event to Lua.\n\n"
          "Commands:\n",
          out);
    for (size_t k = 0; k < NCOMMANDS; k++) fprintf(out, "  %-38s %s\n", commands[k].synopsis, commands[k].summary);
    fputs("\nFlags (anywhere before a script's arguments):\n", out);
    print_flags(out, 1);
    fputs("\nRun 'klua help COMMAND' or 'klua COMMAND --help' for the usage and flags of a command.\n", out);
}

/* Loads klua.cmd.watch, as compiled into klua, into a bare Lua state: its flag
 * parser and help need nothing of the runtime. NULL on failure, reported. */
static lua_State *watch_module(FILE *errs) {
    lua_State *L = luaL_newstate();
    if (!L) {
        fputs("klua: out of memory\n", errs);
        return NULL;
    }
    luaL_openlibs(L);
    kl_embedded_add_searcher(L);
    lua_getglobal(L, "require");
    lua_pushstring(L, "klua.cmd.watch");
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        fprintf(errs, "klua: %s\n", lua_tostring(L, -1));
        lua_close(L);
        return NULL;
    }
    return L;
}

void kl_cli_watch_formats(void (*fn)(void *ud, const char *word, size_t len), void *ud) {
    FILE *null = fopen("/dev/null", "w");
    lua_State *L = null ? watch_module(null) : NULL;
    if (null) fclose(null);
    if (!L) return;
    lua_getfield(L, -1, "FORMATS"); /* stack: watch, "a,b,c" */
    const char *w = lua_tostring(L, -1);
    for (; w && *w; w += strcspn(w, ","), w += *w == ',') fn(ud, w, strcspn(w, ","));
    lua_close(L);
}

/* Prints klua.cmd.watch's help (its usage, flags, and then the global flags). */
static int watch_help(lua_State *L, FILE *out, FILE *errs) {
    lua_getfield(L, -1, "help");
    if (lua_pcall(L, 0, 1, 0) != LUA_OK || !lua_isstring(L, -1)) {
        fprintf(errs, "klua: %s\n", lua_isstring(L, -1) ? lua_tostring(L, -1) : "klua.cmd.watch has no help");
        return 1;
    }
    fputs(lua_tostring(L, -1), out);
    fputs("\nGlobal flags:\n", out);
    print_flags(out, 0);
    lua_pop(L, 1);
    return 0;
}

/* Checks watch's words with klua.cmd.watch's parse before klua connects, so
 * that a mistyped flag or --help needs no cluster. [-0, +0] on the module. */
static int watch_check(lua_State *L, const kl_cli *c, FILE *out, FILE *errs) {
    lua_getfield(L, -1, "parse");
    lua_createtable(L, c->nargs, 0);
    for (int i = 0; i < c->nargs; i++) {
        lua_pushstring(L, c->args[i]);
        lua_rawseti(L, -2, i + 1);
    }
    kl_cli_push_suggest(L);
    if (lua_pcall(L, 2, 3, 0) != LUA_OK) {
        fprintf(errs, "klua: %s\n", lua_tostring(L, -1));
        return 1;
    }
    if (lua_isnil(L, -3)) {
        fprintf(errs, "klua watch: %s\n", lua_isstring(L, -2) ? lua_tostring(L, -2) : "bad arguments");
        hint(errs, lua_tostring(L, -1), "watch");
        return 2;
    }
    lua_getfield(L, -3, "help");
    int help = lua_toboolean(L, -1);
    lua_pop(L, 4);
    return help ? watch_help(L, out, errs) : -1;
}

static int command_help(const command *cmd, FILE *out, FILE *errs) {
    if (!cmd->usage) {
        lua_State *L = watch_module(errs);
        if (!L) return 1;
        int code = watch_help(L, out, errs);
        lua_close(L);
        return code;
    }
    fprintf(out, "%s\n\n%s\n\nGlobal flags:\n", cmd->usage, cmd->about);
    print_flags(out, 0);
    return 0;
}

int kl_cli_help(const char *name, FILE *out, FILE *errs) {
    if (!name) {
        print_root(out);
        return 0;
    }
    const command *cmd = find_command(name);
    if (cmd) return command_help(cmd, out, errs);
    fprintf(errs, "klua: unknown help topic \"%s\"\n", name);
    hint(errs, suggest_command(name), NULL);
    return 2;
}

int kl_cli_answer(const kl_cli *c, FILE *out, FILE *errs) {
    if (!c->command) {
        print_root(errs);
        return 2;
    }
    const command *cmd = find_command(c->command);
    if (!cmd) {
        fprintf(errs, "klua: unknown command \"%s\"\n", c->command);
        hint(errs, suggest_command(c->command), NULL);
        return 2;
    }
    if (c->help) return command_help(cmd, out, errs);
    if (!strcmp(cmd->name, "help")) {
        if (!c->nargs) {
            print_root(out);
            return 0;
        }
        return kl_cli_help(c->args[0], out, errs);
    }
    if (strcmp(cmd->name, "watch")) return -1;
    lua_State *L = watch_module(errs);
    if (!L) return 1;
    int code = watch_check(L, c, out, errs);
    lua_close(L);
    return code;
}
