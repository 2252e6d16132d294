/* cfg.c - text and file helpers for the configuration; see cfg.h. */
#include "conn/cfg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"

int kl_cfg_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

char *kl_cfg_format(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    /* asprintf leaves s undefined on failure. */
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

/* Opens path for reading, refusing a directory (EISDIR) and, when
 * regular_only, anything but a regular file (EINVAL), which it then opens
 * without blocking: a FIFO's open would wait for a writer. */
static int open_file(const char *path, int regular_only) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | (regular_only ? O_NONBLOCK : 0));
    if (fd < 0) return -1;
    struct stat st;
    int e = fstat(fd, &st) < 0 ? errno
            : S_ISDIR(st.st_mode) ? EISDIR
            : regular_only && !S_ISREG(st.st_mode) ? EINVAL
            : 0;
    if (e) {
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int kl_cfg_check_readable(const char *path) {
    int fd = open_file(path, 0);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

static int read_all(int fd, char **buf, size_t *len, size_t max) {
    size_t cap = 0, n = 0; /* cap counts the byte of the final NUL */
    char *b = NULL;
    for (;;) {
        if (n + 1 >= cap) {
            if (n > max) break;
            char *nb = kl_cfg_grow_secret(b, n, &cap, n + 2);
            if (!nb) goto fail;
            b = nb;
        }
        ssize_t r = read(fd, b + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) goto fail;
        if (r == 0) break;
        n += (size_t)r;
    }
    if (n > max) {
        kl_cfg_free_secret(b, n);
        errno = EFBIG;
        return -1;
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return 0;
fail:;
    int e = errno;
    kl_cfg_free_secret(b, n);
    errno = e;
    return -1;
}

static char *read_file(const char *path, size_t max, size_t *len, int regular_only) {
    int fd = open_file(path, regular_only);
    if (fd < 0) return NULL;
    char *buf = NULL;
    int rc = read_all(fd, &buf, len, max);
    int e = errno;
    close(fd);
    errno = e;
    return rc < 0 ? NULL : buf;
}

char *kl_cfg_read_file(const char *path, size_t max, size_t *len) { return read_file(path, max, len, 0); }

char *kl_cfg_read_regular(const char *path, size_t max, size_t *len) {
    return read_file(path, max, len, 1);
}

const char *kl_cfg_read_error(int e) {
    return e == EINVAL ? "not a regular file" : strerror(e);
}

char *kl_cfg_path_join(const char *dir, const char *rel) {
    if (!dir || rel[0] == '/') return strdup(rel);
    size_t dl = strlen(dir), rl = strlen(rel);
    char *p = malloc(dl + rl + 2);
    if (!p) return NULL;
    memcpy(p, dir, dl);
    p[dl] = '/';
    memcpy(p + dl + 1, rel, rl + 1);
    return p;
}

char *kl_cfg_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Copies text without CR/LF into a new buffer; *n gets its length. */
static char *b64_strip(const char *text, size_t *n) {
    size_t len = strlen(text), k = 0;
    char *s = malloc(len + 1);
    if (!s) return NULL;
    for (size_t i = 0; i < len; i++)
        if (text[i] != '\r' && text[i] != '\n') s[k++] = text[i];
    s[k] = '\0';
    *n = k;
    return s;
}

static int b64_decode_quad(const char *q, int last, unsigned char *out, size_t *o) {
    int v[4], pad = 0;
    for (int j = 0; j < 4; j++) {
        if (q[j] == '=' && last && j >= 2) {
            pad++;
            v[j] = 0;
            continue;
        }
        if (pad) return -1;
        if ((v[j] = b64_value((unsigned char)q[j])) < 0) return -1;
    }
    unsigned long bits = (unsigned long)v[0] << 18 | (unsigned long)v[1] << 12 |
                         (unsigned long)v[2] << 6 | (unsigned long)v[3];
    out[(*o)++] = (unsigned char)(bits >> 16);
    if (pad < 2) out[(*o)++] = (unsigned char)(bits >> 8);
    if (pad < 1) out[(*o)++] = (unsigned char)bits;
    return 0;
}

unsigned char *kl_cfg_base64_decode(const char *text, size_t *len) {
    size_t n;
    char *s = b64_strip(text, &n);
    if (!s) {
        errno = ENOMEM;
        return NULL;
    }
    unsigned char *out = n % 4 == 0 ? malloc(n / 4 * 3 + 1) : NULL;
    size_t o = 0;
    int ok = out != NULL;
    for (size_t i = 0; ok && i < n; i += 4)
        ok = b64_decode_quad(s + i, i + 4 == n, out, &o) == 0;
    kl_cfg_free_secret(s, n);
    if (!ok) {
        kl_cfg_free_secret(out, o);
        errno = (n % 4 == 0 && !out) ? ENOMEM : EINVAL;
        return NULL;
    }
    out[o] = '\0';
    *len = o;
    return out;
}

char *kl_cfg_base64_encode(const unsigned char *data, size_t len) {
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc((len + 2) / 3 * 4 + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        unsigned long bits = (unsigned long)data[i] << 16;
        if (i + 1 < len) bits |= (unsigned long)data[i + 1] << 8;
        if (i + 2 < len) bits |= data[i + 2];
        out[o++] = alphabet[bits >> 18 & 63];
        out[o++] = alphabet[bits >> 12 & 63];
        out[o++] = i + 1 < len ? alphabet[bits >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? alphabet[bits & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

char *kl_cfg_trim(char *s) {
    size_t len = strlen(s), start = 0;
    while (len > 0 && is_space(s[len - 1])) len--;
    while (start < len && is_space(s[start])) start++;
    memmove(s, s + start, len - start);
    s[len - start] = '\0';
    return s;
}

int kl_cfg_has_control(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 1;
    return 0;
}

void kl_cfg_free_secret(void *p, size_t len) {
    if (!p) return;
    explicit_bzero(p, len);
    free(p);
}

void kl_cfg_free_secret_str(char *s) {
    if (s) kl_cfg_free_secret(s, strlen(s));
}

char *kl_cfg_grow_secret(char *buf, size_t len, size_t *cap, size_t need) {
    if (need <= *cap) return buf;
    size_t n = kl_buf_cap(*cap, need, 4096);
    char *nb = malloc(n);
    if (!nb) return NULL;
    if (buf) memcpy(nb, buf, len);
    kl_cfg_free_secret(buf, *cap);
    *cap = n;
    return nb;
}
