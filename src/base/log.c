/* log.c - the diagnostic log on stderr; see log.h. */
#include "base/log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/jsonesc.h"

int kl_log_v;
static kl_log_format sink_format = KL_LOG_TEXT;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void kl_log_configure(int verbosity, kl_log_format format) {
    kl_log_v = verbosity;
    sink_format = format;
}

int kl_log_verbosity(void) { return kl_log_v; }
int kl_log_format_json(void) { return sink_format == KL_LOG_JSON; }

/* s into out (cap bytes) with its control characters escaped as Go's
 * strconv.Quote writes them (\n, \r, \t, \x1b; \u0085 for the two-byte
 * UTF-8 form of a C1 control): a message from a server or a script ends
 * no line, forges no second one and sends the terminal no escape
 * sequence. Returns out, cut short where cap runs out. */
static const char *escape_controls(const char *s, char *out, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && n + 7 < cap; p++) {
        unsigned c = *p;
        if (c >= 0x20 && c != 0x7f && !(c == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)) {
            out[n++] = (char)c;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            out[n++] = '\\';
            out[n++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        } else {
            if (c == 0xc2) c = *++p;
            n += (size_t)snprintf(out + n, cap - n, c < 0x80 ? "\\x%c%c" : "\\u00%c%c", hex[c >> 4], hex[c & 15]);
        }
    }
    out[n] = '\0';
    return out;
}

static void emit(kl_log_level level, const char *component, const char *msg) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    size_t n = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof when - n, ".%03ldZ", ts.tv_nsec / 1000000);
    if (sink_format == KL_LOG_JSON) {
        fprintf(stderr, "{\"time\":\"%s\",\"level\":\"%s\",\"component\":", when, level_names[level]);
        kl_jsonesc_fputs(stderr, component);
        fputs(",\"msg\":", stderr);
        kl_jsonesc_fputs(stderr, msg);
        fputs("}\n", stderr);
    } else {
        char comp[256], text[4 * 2048];
        fprintf(stderr, "%s %-5s [%s] %s\n", when, level_names[level],
                escape_controls(component, comp, sizeof comp), escape_controls(msg, text, sizeof text));
    }
    fflush(stderr);
}

void kl_log_va(kl_log_level level, const char *component, const char *fmt, va_list ap) {
    if (level == KL_LOG_DEBUG && kl_log_v < 4) return;
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    emit(level, component, msg);
}

void kl_log(kl_log_level level, const char *component, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kl_log_va(level, component, fmt, ap);
    va_end(ap);
}

void kl_vlog(int v, const char *component, const char *fmt, ...) {
    if (kl_log_v < v) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    emit(KL_LOG_INFO, component, msg);
}
