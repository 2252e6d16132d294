/*
 * fuzz_kubeconfig.c - libFuzzer target for the kubeconfig loader
 * (src/conn/kubeconfig.c, the other src/conn files, the YAML and exec-config readers).
 *
 * The input is a kubeconfig file. It is written to a private temporary
 * directory and loaded three ways, as klua would:
 *   1. --kubeconfig FILE;
 *   2. KUBECONFIG=FILE:MISSING (a list whose second file does not exist);
 *   3. KUBECONFIG=FILE with --server, --token and --insecure-skip-tls-verify
 *      overriding it.
 * Environment lookups go through the loader's hook and see only KUBECONFIG,
 * so the real HOME and any in-cluster variables play no part. Failures are
 * fine; an error must not quote the --token value (unless the file itself
 * has those bytes, which the fuzzer soon learns). A connection that loads
 * must describe itself, and unless it authenticates with an exec plugin it
 * is also prepared on a libcurl handle (nothing is sent) and told of a 401.
 * Exec plugins only ever run inside kl_conn_prepare, which is never called
 * for them here: the fuzzer runs no program a kubeconfig names. To keep it
 * so, this file defines posix_spawnp, which the plugin runner calls, as an
 * abort.
 */
#include <curl/curl.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "conn/conn.h"

#define OVERRIDE_TOKEN "fuzz-override-token-3c1f"

static struct {
    char dir[64];
    char path[96];
    char list[200]; /* path, then a file that does not exist */
} tmp;

static void die(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_kubeconfig: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

/* Takes the place of libc's for the whole fuzzer binary. */
int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions,
                 const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    (void)pid, (void)actions, (void)attr, (void)argv, (void)envp;
    die("a kubeconfig made the loader start a program", file);
    return -1;
}

static void remove_tmp(void) {
    unlink(tmp.path);
    rmdir(tmp.dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    snprintf(tmp.dir, sizeof tmp.dir, "/tmp/klua-fuzz-kubeconfig-XXXXXX");
    if (!mkdtemp(tmp.dir)) die("cannot create a temporary directory", NULL);
    snprintf(tmp.path, sizeof tmp.path, "%s/config", tmp.dir);
    snprintf(tmp.list, sizeof tmp.list, "%s:%s/missing", tmp.path, tmp.dir);
    atexit(remove_tmp);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return 0;
}

/* The environment the loader sees: KUBECONFIG (ud) and nothing else. */
static const char *env_lookup(void *ud, const char *name) {
    return strcmp(name, "KUBECONFIG") == 0 ? ud : NULL;
}

static void write_input(const uint8_t *data, size_t size) {
    FILE *f = fopen(tmp.path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) die("cannot write the kubeconfig", tmp.path);
}

static int nonempty(const char *s) { return s && *s; }

/* What a loaded connection must say about itself, and that preparing a
 * request with it stays within its bounds. */
static void use_conn(kl_conn *c) {
    const char *server = kl_conn_server(c);
    if (!server || (strncasecmp(server, "https://", 8) && strncasecmp(server, "http://", 7)))
        die("a connection's server is not an http(s) URL", server);
    if (!nonempty(kl_conn_namespace(c)) || !kl_conn_context(c)) die("a connection lacks its namespace or context", NULL);
    kl_conn_info info;
    kl_conn_describe(c, &info);
    if (!nonempty(info.source) || !nonempty(info.auth) || !nonempty(info.ca) || !nonempty(info.client_cert))
        die("a connection's description is incomplete", NULL);
    if (strcmp(info.auth, "exec") == 0) return;
    CURL *easy = curl_easy_init();
    if (!easy) die("curl_easy_init failed", NULL);
    struct curl_slist *headers = NULL;
    char err[1024];
    /* Not an exec credential (above): the request never waits on w. */
    kl_conn_waiter w = {0};
    kl_conn_prepare(c, easy, &headers, &w, err, sizeof err);
    kl_conn_unauthorized(c);
    curl_slist_free_all(headers);
    curl_easy_cleanup(easy);
}

static void load(const kl_conn_opts *opts, const char *kubeconfig_env, int token_in_file) {
    kl_conn_hooks hooks = {.getenv = env_lookup, .ud = (void *)kubeconfig_env};
    char err[1024] = "";
    kl_conn *c = kl_conn_load_with(opts, &hooks, err, sizeof err);
    if (!c) {
        if (!err[0]) die("a failed load gives no message", NULL);
        if (!token_in_file && strstr(err, OVERRIDE_TOKEN)) die("an error message quotes the --token value", err);
        return;
    }
    use_conn(c);
    kl_conn_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_input(data, size);
    int token_in_file = memmem(data, size, OVERRIDE_TOKEN, strlen(OVERRIDE_TOKEN)) != NULL;
    kl_conn_opts flag = {.kubeconfig = tmp.path};
    load(&flag, NULL, token_in_file);
    kl_conn_opts env = {0};
    load(&env, tmp.list, token_in_file);
    kl_conn_opts overridden = {.server = "https://override.test:6443", .token = OVERRIDE_TOKEN,
                               .insecure_skip_tls_verify = 1};
    load(&overridden, tmp.path, token_in_file);
    return 0;
}
