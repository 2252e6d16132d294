/*
 * complete.h - shell completion, as kubectl's: `klua completion SHELL`
 * prints a script for bash, zsh or fish that, on every TAB, calls back
 * into klua as `klua __complete WORD... CURRENT` with the words typed so
 * far. That answers with one candidate a line and, last, ":N" (N = 0: the
 * shell may complete file names when nothing matched; 4: it may not), the
 * protocol of kubectl's `__complete`.
 *
 * Commands and flags come from the help texts (kl_cli_help: the global flag
 * table, and for watch lua/klua/cmd/watch.lua's FLAGS), so completion offers
 * what the help lists; resources after `watch` and namespaces after a flag
 * whose argument is NS come from the server (lua/klua/cmd/complete.lua),
 * reached through the kubeconfig and the flags on the line, and silently
 * nothing when it cannot be reached.
 */
#ifndef KLUA_COMPLETE_H
#define KLUA_COMPLETE_H

#include <stdio.h>

/* `klua completion SHELL`: the script of shell (NULL when none was given)
 * to out; an unknown or missing shell is one line to errs naming those it
 * knows. Returns the exit status (2 for a bad shell). */
int kl_complete_script(const char *shell, FILE *out, FILE *errs);

/* `klua __complete`: argv holds the words after klua, the last the one
 * being completed (may be ""). Writes the answer to stdout (a Lua chunk
 * that asks the server writes there too). Returns the exit status, 0. */
int kl_complete_words(int argc, char **argv);

#endif
