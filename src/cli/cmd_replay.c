/* cmd_replay.c - `klua replay`: the sandbox API server with a recording. */
#include "cli/cmd_replay.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cmd_test.h"

/* Where scripts/sandbox-apiserver lies relative to the klua binary's
 * directory: installed under PREFIX/share/klua, or the source tree's. */
static const char *const sandbox_dirs[] = {"/../share/klua/scripts", "/../scripts"};

typedef struct replay_opts {
    const char *file, *speed, *port, *kubeconfig;
} replay_opts;

static int usage_error(const char *fmt, const char *what) {
    fputs("klua replay: ", stderr);
    fprintf(stderr, fmt, what);
    fputs("\nRun 'klua replay --help' for usage.\n", stderr);
    return 2;
}

/* The option a flag word names ("--speed" or "--speed=2"), its value in *inline_value. */
static const char **option_of(replay_opts *o, const char *word, const char **inline_value) {
    static const char *const names[] = {"--speed", "--port", "--kubeconfig-out"};
    const char **slots[] = {&o->speed, &o->port, &o->kubeconfig};
    size_t len = strcspn(word, "=");
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        if (strlen(names[k]) == len && !strncmp(word, names[k], len)) {
            *inline_value = word[len] ? word + len + 1 : NULL;
            return slots[k];
        }
    }
    return NULL;
}

static int parse(replay_opts *o, int nargs, char **args) {
    for (int i = 0; i < nargs; i++) {
        const char *a = args[i], *value;
        if (a[0] != '-' || !a[1]) {
            if (o->file) return usage_error("unexpected argument \"%s\": one recording is replayed", a);
            o->file = a;
            continue;
        }
        const char **slot = option_of(o, a, &value);
        if (!slot) return usage_error("unknown flag: %s", a);
        if (!value && i + 1 >= nargs) return usage_error("flag %s needs a value", a);
        *slot = value ? value : args[++i];
    }
    if (!o->file) return usage_error("%s", "a recording of klua record is needed: klua replay FILE");
    if (!o->kubeconfig) return usage_error("%s", "--kubeconfig-out KC is needed: where to write the kubeconfig");
    char *end;
    double speed = strtod(o->speed, &end);
    if (*end || end == o->speed || !(speed > 0)) return usage_error("--speed %s: a factor above 0, such as 2 or 0.5", o->speed);
    long port = strtol(o->port, &end, 10);
    if (*end || end == o->port || port < 0 || port > 65535) return usage_error("--port %s: a port, 0 to 65535", o->port);
    return 0;
}

int kl_cmd_replay(int nargs, char **args) {
    replay_opts o = {NULL, "1", "0", NULL};
    int code = parse(&o, nargs, args);
    if (code) return code;
    if (access(o.file, R_OK) < 0) {
        fprintf(stderr, "klua replay: cannot read %s: %s\n", o.file, strerror(errno));
        return 1;
    }
    char exe[PATH_MAX], dir[PATH_MAX], server[PATH_MAX + 32];
    if (kl_find_installed("replay", "the sandbox API server", sandbox_dirs, sizeof sandbox_dirs / sizeof *sandbox_dirs,
                          "sandbox-apiserver", exe, dir) < 0)
        return 1;
    snprintf(server, sizeof server, "%s/sandbox-apiserver", dir);
    char *argv[] = {server, "--port", (char *)o.port, "--kubeconfig-out", (char *)o.kubeconfig, "--replay",
                    (char *)o.file, "--replay-speed", (char *)o.speed, NULL};
    execv(server, argv);
    fprintf(stderr, "klua replay: cannot run %s: %s (it needs python3)\n", server, strerror(errno));
    return 127;
}
