/*
 * cli.h - the klua command line: global flags, the command and its
 * arguments.
 *
 *   klua [flags] COMMAND [args...]
 *
 * Global flags (--kubeconfig, -v, --page-size, ...) are recognised anywhere
 * on the line, in the forms `--flag value` and `--flag=value`, except after
 * `run SCRIPT`: from there on every word belongs to the script (and after
 * `test`, to busted). The first word that is not a flag is the command;
 * `-h`, `--help` and `help` are the command "help". Kept apart from main() so that the parser can be tested
 * and fuzzed on its own.
 */
#ifndef KLUA_CLI_H
#define KLUA_CLI_H

#include <stdio.h>

#include "log.h"
#include "runtime.h"

typedef struct kl_cli {
    kl_rt_opts rt;        /* connection, limits and tuning from the flags */
    int verbosity;        /* -v N */
    kl_log_format format; /* --log-format */
    const char *command;  /* the command word, NULL when there is none */
    const char *script;   /* run: the script's path, NULL when missing */
    char **args;          /* the command's (or script's) arguments; malloc'd, items point into argv */
    int nargs;
} kl_cli;

/* Parses argv[1..argc) into c, which is zeroed first. Returns 0, or -1
 * after writing what is wrong to errs as one line (plus a hint where the
 * usage helps); -1 without a message means out of memory. Strings in c
 * point into argv. Free c with kl_cli_free whatever the result. */
int kl_cli_parse(kl_cli *c, int argc, char **argv, FILE *errs);
/* Releases what c owns (args); c may be parsed again afterwards. */
void kl_cli_free(kl_cli *c);

#endif
