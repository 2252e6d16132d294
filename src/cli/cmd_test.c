/* cmd_test.c - `klua test`: busted with klua's test harness on the path. */
#include "cli/cmd_test.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where the harness's directory (the one holding klua/testing.lua) lies
 * relative to the directory of the klua binary: installed, PREFIX/bin/klua
 * beside PREFIX/share/klua/lua; in the source tree, build/klua beside lua/. */
static const char *const harness_dirs[] = {"/../share/klua/lua", "/../lua"};

static int is_file(const char *path) {
    return access(path, R_OK) == 0;
}

/* Finds which of dirs, relative to the directory of the binary exe, holds
 * file; writes that directory, resolved, to out. 0, or -1. */
static int find_beside(const char *exe, const char *const *dirs, size_t ndirs, const char *file, char *out,
                       size_t size) {
    const char *slash = strrchr(exe, '/');
    int dirlen = slash ? (int)(slash - exe) : 0;
    for (size_t i = 0; i < ndirs; i++) {
        char probe[PATH_MAX];
        int n = snprintf(out, size, "%.*s%s", dirlen, exe, dirs[i]);
        if (n < 0 || (size_t)n >= size) continue;
        n = snprintf(probe, sizeof probe, "%s/%s", out, file);
        if (n > 0 && (size_t)n < sizeof probe && is_file(probe) && realpath(out, probe)) {
            snprintf(out, size, "%s", probe);
            return 0;
        }
    }
    return -1;
}

int kl_find_installed(const char *command, const char *what, const char *const *dirs, size_t ndirs,
                      const char *file, char exe[PATH_MAX], char dir[PATH_MAX]) {
    if (!realpath("/proc/self/exe", exe)) {
        fprintf(stderr, "klua %s: cannot find the klua binary: %s\n", command, strerror(errno));
        return -1;
    }
    if (find_beside(exe, dirs, ndirs, file, dir, PATH_MAX) < 0) {
        fprintf(stderr, "klua %s: %s is not beside %s: install klua with `make install`, which puts it in "
                        "PREFIX%s\n", command, what, exe, dirs[0] + 3);
        return -1;
    }
    return 0;
}

/* The path of busted on $PATH into out; 0 or -1. */
static int find_busted(char *out, size_t size) {
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        int n = snprintf(out, size, "%.*s/busted", (int)len, path);
        if (len && n > 0 && (size_t)n < size && is_file(out)) return 0;
        path += len + (path[len] == ':');
    }
    return -1;
}

int kl_cmd_test(int nargs, char **args) {
    char exe[PATH_MAX], dir[PATH_MAX], busted[PATH_MAX];
    if (kl_find_installed("test", "the test harness klua/testing.lua", harness_dirs,
                          sizeof harness_dirs / sizeof *harness_dirs, "klua/testing.lua", exe, dir) < 0)
        return 1;
    if (find_busted(busted, sizeof busted) < 0) {
        fputs("klua test: busted is not on the PATH: install it (Debian package lua-busted)\n", stderr);
        return 127;
    }
    /* ";;" stands for Lua's default path, where busted and its modules are. */
    const char *old = getenv("LUA_PATH");
    size_t need = strlen(dir) + strlen(old ? old : ";") + 16;
    char *lua_path = malloc(need);
    char **argv = calloc((size_t)nargs + 3, sizeof *argv);
    if (!lua_path || !argv) {
        free(lua_path);
        free(argv);
        fputs("klua test: out of memory\n", stderr);
        return 1;
    }
    snprintf(lua_path, need, "%s/?.lua;%s", dir, old ? old : ";");
    if (setenv("LUA_PATH", lua_path, 1) < 0 || setenv("KLUA_BIN", exe, 1) < 0) {
        fprintf(stderr, "klua test: cannot set the environment: %s\n", strerror(errno));
        free(lua_path);
        free(argv);
        return 1;
    }
    free(lua_path);
    /* busted runs under lua5.4, whatever its #! line says: the harness needs the
     * 5.4 builds of lua-cjson and luasystem, and klua's own Lua is 5.4. */
    argv[0] = "lua5.4";
    argv[1] = busted;
    for (int i = 0; i < nargs; i++) argv[i + 2] = args[i];
    execvp(argv[0], argv);
    fprintf(stderr, "klua test: cannot run lua5.4: %s (Debian package lua5.4)\n", strerror(errno));
    free(argv);
    return 127;
}
