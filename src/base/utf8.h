/*
 * utf8.h - the one UTF-8 check: RFC 3629's well-formed sequences, as
 * kube-apiserver (Go's encoding/json) and simdjson accept them. Overlong
 * forms, surrogates (U+D800..U+DFFF) and code points past U+10FFFF are
 * refused.
 */
#ifndef KLUA_UTF8_H
#define KLUA_UTF8_H

#include <stddef.h>

/* The length (2 to 4) of the well-formed multi-byte sequence that starts
 * at s, within its n bytes, or 0 when there is none (ASCII included). */
size_t kl_utf8_len(const unsigned char *s, size_t n);

#endif
