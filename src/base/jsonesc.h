/*
 * jsonesc.h - the one way klua writes a string as JSON: `"` and `\` and
 * the control characters escaped, with the two-character forms where JSON
 * has one (\n, \t, \r, \b, \f) and \u00XX for the others; every other byte
 * as it is (UTF-8 is the writer's to check: klua.json.encode refuses
 * invalid UTF-8, the log and the exec plugin's input pass bytes on).
 * Used by klua.json.encode, the JSON log, KUBERNETES_EXEC_INFO and the
 * kind and apiVersion spliced into list items.
 */
#ifndef KLUA_JSONESC_H
#define KLUA_JSONESC_H

#include <stddef.h>
#include <stdio.h>

#define KL_JSONESC_MAX 6 /* the longest escape of one byte, \u00XX */

/* Writes the escape of byte c to out and returns its length, or returns 0
 * when c stands for itself. */
size_t kl_jsonesc_char(unsigned char c, char out[KL_JSONESC_MAX]);
/* The length of s[0, n) escaped, quotes excluded. */
size_t kl_jsonesc_len(const char *s, size_t n);
/* Writes s[0, n) escaped to out (kl_jsonesc_len bytes), quotes excluded;
 * returns the bytes written. */
size_t kl_jsonesc_put(char *out, const char *s, size_t n);
/* Writes the C string s to f as a JSON string, quotes included. */
void kl_jsonesc_fputs(FILE *f, const char *s);

#endif
