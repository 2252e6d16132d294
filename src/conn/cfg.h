/*
 * cfg.h - small text and file helpers shared by the connection
 * configuration files (conn.c, kubeconfig.c, exec.c).
 *
 * Errors are written into a caller's buffer as one line; nothing here ever
 * prints the bytes it reads, because those bytes are often credentials.
 */
#ifndef KLUA_CONFIG_UTIL_H
#define KLUA_CONFIG_UTIL_H

#include <stddef.h>

/* snprintf into err (when errlen > 0); always returns -1 so callers can
 * `return kl_cfg_fail(...)`. */
int kl_cfg_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A new string formatted like printf, or NULL on OOM. */
char *kl_cfg_format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Reads a whole file of at most max bytes into a new NUL-terminated buffer
 * (the caller frees it); *len gets its length. NULL with errno set on
 * failure (EFBIG when the file is larger than max). */
char *kl_cfg_read_file(const char *path, size_t max, size_t *len);
/* kl_cfg_read_file for what is read while the loop runs (token files, a CA
 * for an exec plugin): only a regular file, opened without blocking, so that
 * a FIFO or a device put in its place cannot stall klua; anything else
 * fails with errno EINVAL. */
char *kl_cfg_read_regular(const char *path, size_t max, size_t *len);
/* Why a read failed with errno e, in words ("not a regular file" for
 * kl_cfg_read_regular's EINVAL). */
const char *kl_cfg_read_error(int e);

/* 0 when path names something that can be opened for reading and is not a
 * directory; -1 with errno otherwise. */
int kl_cfg_check_readable(const char *path);

/* A new string "dir/rel", or a copy of rel when it is absolute or dir is
 * NULL. NULL on OOM. */
char *kl_cfg_path_join(const char *dir, const char *rel);
/* A new string with the directory part of path ("." when it has none). */
char *kl_cfg_dirname(const char *path);

/* Decodes standard base64 (padding required; CR and LF are ignored, as Go's
 * decoder does) into a new buffer the caller frees. NULL when the text is
 * not valid base64 (errno EINVAL) or on OOM (errno ENOMEM). */
unsigned char *kl_cfg_base64_decode(const char *text, size_t *len);
/* Encodes len bytes as padded base64 into a new NUL-terminated string. */
char *kl_cfg_base64_encode(const unsigned char *data, size_t len);

/* Removes leading and trailing ASCII whitespace in place; returns s. */
char *kl_cfg_trim(char *s);
/* 1 when s has a byte below 0x20 or 0x7f: such a credential would break or
 * inject an HTTP header. */
int kl_cfg_has_control(const char *s);

/* Overwrites and frees a buffer that held a secret. NULL is ignored. */
void kl_cfg_free_secret(void *p, size_t len);
/* kl_cfg_free_secret for a NUL-terminated string. */
void kl_cfg_free_secret_str(char *s);
/* buf (capacity *cap, the first len bytes a secret) grown as kl_buf_grow
 * grows arrays of bytes, to hold need: not by realloc, which would free the
 * old block unwiped, but into a new block, the old one wiped and freed.
 * NULL when out of memory, buf and *cap untouched. */
char *kl_cfg_grow_secret(char *buf, size_t len, size_t *cap, size_t need);

#endif
