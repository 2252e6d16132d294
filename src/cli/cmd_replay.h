/*
 * cmd_replay.h - `klua replay FILE [--speed FACTOR] [--port P]
 * --kubeconfig-out KC`: the sandbox API server serving a recording of
 * `klua record` again (docs/record.md).
 */
#ifndef KLUA_CMD_REPLAY_H
#define KLUA_CMD_REPLAY_H

/* Checks the words after `replay` and execs scripts/sandbox-apiserver,
 * found as installed (PREFIX/share/klua/scripts) or in the source tree,
 * with the recording to replay. Returns only on failure, with the exit
 * code (2 for a usage error), after saying what is wrong on stderr. */
int kl_cmd_replay(int nargs, char **args);

#endif
