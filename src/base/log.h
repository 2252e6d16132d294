/*
 * log.h - the process's diagnostic log on stderr.
 *
 * Errors, warnings and info lines always print; debug lines from -v 4.
 * Verbose narration prints when -v is at least its level, kubectl-style:
 * -v 2 narrates each reflector, -v 3 each handler call, enqueue and
 * reconcile, -v 5 each read, frame and decoded event, -v 6 each HTTP
 * request (klua --help lists them, src/cli/cli.c).
 * Nothing logged may contain a credential: callers log URLs and statuses,
 * never headers or bodies of auth exchanges.
 * The sink is process-wide because stderr is; everything else that a second
 * runtime would need lives in that runtime's own structs.
 */
#ifndef KLUA_LOG_H
#define KLUA_LOG_H

#include <stdarg.h>

typedef enum { KL_LOG_DEBUG, KL_LOG_INFO, KL_LOG_WARN, KL_LOG_ERROR } kl_log_level;
typedef enum { KL_LOG_TEXT, KL_LOG_JSON } kl_log_format;

void kl_log_configure(int verbosity, kl_log_format format);
int kl_log_verbosity(void);
/* Whether the log is JSON: messages that bypass it must follow suit. */
int kl_log_format_json(void);
/* component names the stage ("reflector pods", "http", "lua"). */
void kl_log(kl_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void kl_vlog(int v, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The -v level, written by kl_log_configure alone: KL_VLOG reads it inline. */
extern int kl_log_v;
/* kl_vlog for the per-event paths: when -v is below v, one load and one
 * compare, no call, and the arguments are not evaluated. */
#define KL_VLOG(v, ...)                                \
    do {                                               \
        if (kl_log_v >= (v)) kl_vlog((v), __VA_ARGS__); \
    } while (0)
void kl_log_va(kl_log_level level, const char *component, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
