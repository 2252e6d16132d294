/* jsonesc.c - strings written as JSON; see jsonesc.h. */
#include "base/jsonesc.h"

#include <string.h>

size_t kl_jsonesc_char(unsigned char c, char out[KL_JSONESC_MAX]) {
    static const char hex[] = "0123456789abcdef";
    char letter;
    switch (c) {
    case '"': letter = '"'; break;
    case '\\': letter = '\\'; break;
    case '\b': letter = 'b'; break;
    case '\f': letter = 'f'; break;
    case '\n': letter = 'n'; break;
    case '\r': letter = 'r'; break;
    case '\t': letter = 't'; break;
    default:
        if (c >= 0x20) return 0;
        memcpy(out, "\\u00", 4);
        out[4] = hex[c >> 4];
        out[5] = hex[c & 15];
        return 6;
    }
    out[0] = '\\';
    out[1] = letter;
    return 2;
}

size_t kl_jsonesc_len(const char *s, size_t n) {
    char esc[KL_JSONESC_MAX];
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t e = kl_jsonesc_char((unsigned char)s[i], esc);
        len += e ? e : 1;
    }
    return len;
}

size_t kl_jsonesc_put(char *out, const char *s, size_t n) {
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t e = kl_jsonesc_char((unsigned char)s[i], out + len);
        if (!e) out[len] = s[i];
        len += e ? e : 1;
    }
    return len;
}

void kl_jsonesc_fputs(FILE *f, const char *s) {
    char esc[KL_JSONESC_MAX];
    fputc('"', f);
    for (; *s; s++) {
        size_t e = kl_jsonesc_char((unsigned char)*s, esc);
        if (e) fwrite(esc, 1, e, f);
        else fputc(*s, f);
    }
    fputc('"', f);
}
