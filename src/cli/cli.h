/*
 * cli.h - the klua command line: global flags, the command and its
 * arguments.
 *
 *   klua [flags] COMMAND [args...]
 *
 * Global flags (--kubeconfig, -v, --page-size, ...) are recognised anywhere
 * on the line, in the forms `--flag value` and `--flag=value` (a switch also
 * as `--flag=false`, a short flag also as `-v4`), except after `run SCRIPT`:
 * from there on every word belongs to the script (and after `test`, to
 * busted, but for --help and -h). The first word that is
 * not a flag is the command; flags of watch may come before it, as kubectl
 * takes `kubectl -n shop get pods`, and go first among watch's words. `-h`
 * and `--help` stand for the command "help",
 * `-V` and `--version` for "version". After a command, `--help` asks for
 * that command's help, except after `watch`, whose words klua.cmd.watch reads
 * (lua/klua/cmd/watch.lua owns watch's flags, its parser and its help).
 *
 * One table in cli.c describes the global flags: it drives the parser, the
 * suggestion for a mistyped flag and every help text, whose flag lines all
 * read "  -s, --long ARG" or "      --long ARG" padded to 40 columns, then
 * the help; a group of flags starts with a line "Heading:". Kept apart from
 * main() so that the parser can be tested and fuzzed on its own.
 */
#ifndef KLUA_CLI_H
#define KLUA_CLI_H

#include <stdio.h>

#include <lua.h>

#include "base/log.h"
#include "lua/runtime.h"

typedef struct kl_cli {
    kl_rt_opts rt;        /* connection, limits and tuning from the flags */
    int verbosity;        /* -v N */
    kl_log_format format; /* --log-format */
    int allow_core_dumps; /* --allow-core-dumps */
    const char *command;  /* the command word, NULL when there is none */
    const char *script;   /* run: the script's path, NULL when missing */
    int help;             /* `COMMAND --help`: show the command's help */
    char **args;          /* the command's (or script's) arguments; malloc'd, items point into argv */
    int nargs;
    const char **as_groups; /* --as-group, each (rt.conn.as_groups); malloc'd, items point into argv */
    size_t cap_as_groups;
} kl_cli;

/* Parses argv[1..argc) into c, which is zeroed first. Returns 0, or -1
 * after writing what is wrong to errs as one line (plus a hint where the
 * usage helps); -1 without a message means out of memory. Strings in c
 * point into argv. Free c with kl_cli_free whatever the result. */
int kl_cli_parse(kl_cli *c, int argc, char **argv, FILE *errs);
/* Releases what c owns (args, as_groups); c may be parsed again afterwards. */
void kl_cli_free(kl_cli *c);

/* Does what a parsed line asks that needs no connection: the help of klua
 * or of a command (to out, or to errs when there is no command), an unknown
 * command refused with the nearest known one, and watch's words checked by
 * klua.cmd.watch's parse. Returns the exit status, or -1 when c is a command
 * to run ("run", "watch", "record", "replay", "test", "completion" or
 * "version"). */
int kl_cli_answer(const kl_cli *c, FILE *out, FILE *errs);

/* Writes the help of command (klua's own when NULL) to out, as `klua help
 * COMMAND` does; the man pages and the shell completion read their flags
 * and commands from this text, in the layout above. Returns the exit
 * status: 2, after a message to errs, for an unknown command. */
int kl_cli_help(const char *command, FILE *out, FILE *errs);
/* Calls fn with each output format `klua watch -o` takes (klua.cmd.watch's
 * FORMATS), for the shell completion; nothing when they cannot be read. */
void kl_cli_watch_formats(void (*fn)(void *ud, const char *word, size_t len), void *ud);

/* Pushes suggest(word, names) -> the name nearest to word among names and
 * the global flags, or nil: the suggestion klua.cmd.watch's parse makes for an
 * unknown flag. [-0, +1] */
void kl_cli_push_suggest(lua_State *L);

#endif
