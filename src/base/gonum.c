/* gonum.c - floats written as Go writes them; see gonum.h. */
#include "base/gonum.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* |d| = 0.DIGITS x 10^dp, DIGITS without trailing zeros (none for 0). */
typedef struct {
    char digits[24];
    int nd, dp, neg;
} decimal;

/* Reads the digits and exponent of %e's "D.DDDe+XX". */
static void from_e(const char *text, decimal *dec) {
    dec->nd = 0;
    const char *p = text;
    for (; *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') dec->digits[dec->nd++] = *p;
    dec->dp = atoi(p + 1) + 1;
}

static void trim(decimal *dec) {
    while (dec->nd > 0 && dec->digits[dec->nd - 1] == '0') dec->nd--;
    if (dec->nd == 0) dec->dp = 0;
}

static double value_of(const decimal *dec) {
    char text[48];
    snprintf(text, sizeof text, "0.%.*se%d", dec->nd, dec->digits, dec->dp);
    return strtod(text, NULL);
}

/* dec with one added to (step 1) or taken from (step -1) its last digit. */
static decimal nudged(decimal dec, int step) {
    int i = dec.nd - 1;
    char wrap = step > 0 ? '9' : '0';
    for (; i >= 0 && dec.digits[i] == wrap; i--) dec.digits[i] = step > 0 ? '0' : '9';
    if (i >= 0) {
        dec.digits[i] = (char)(dec.digits[i] + step);
    } else if (step > 0) { /* 99.9 + 0.1: one digit more in front */
        memmove(dec.digits + 1, dec.digits, (size_t)dec.nd - 1);
        dec.digits[0] = '1';
        dec.dp++;
    }
    if (dec.nd > 0 && dec.digits[0] == '0') { /* 10.0 - 0.1: one digit less in front */
        memmove(dec.digits, dec.digits + 1, (size_t)--dec.nd);
        dec.dp--;
    }
    trim(&dec);
    return dec;
}

/* The fewest digits that read back to d, and of those the nearest to d, as
 * Go's strconv finds them (Ryu). %.*e rounds to the nearest p digits, which
 * read back unless d sits at a power of two, where the gap below d is half
 * the gap above: then the p-digit neighbour above may read back instead. */
static void shortest(double d, decimal *dec) {
    dec->neg = signbit(d) != 0;
    d = fabs(d);
    dec->nd = dec->dp = 0;
    if (d == 0) return;
    char text[40];
    for (int p = 1;; p++) {
        snprintf(text, sizeof text, "%.*e", p - 1, d);
        from_e(text, dec);
        decimal near = *dec;
        trim(&near);
        if (p == 17 || value_of(&near) == d) { /* 17 digits always read back */
            *dec = near;
            return;
        }
        for (int step = -1; step <= 1; step += 2) {
            decimal other = nudged(*dec, step);
            if (value_of(&other) == d) {
                *dec = other;
                return;
            }
        }
    }
}

/* 'f' notation with every digit of dec. */
static size_t put_f(const decimal *dec, char *out) {
    char *o = out;
    if (dec->neg) *o++ = '-';
    if (dec->dp > 0)
        for (int i = 0; i < dec->dp; i++) *o++ = i < dec->nd ? dec->digits[i] : '0';
    else
        *o++ = '0';
    if (dec->nd > dec->dp) {
        *o++ = '.';
        for (int i = dec->dp < 0 ? dec->dp : 0; i < 0; i++) *o++ = '0';
        for (int i = dec->dp > 0 ? dec->dp : 0; i < dec->nd; i++) *o++ = dec->digits[i];
    }
    *o = '\0';
    return (size_t)(o - out);
}

/* 'e' notation: at least two exponent digits, or as encoding/json trims
 * it (json), one for a negative exponent below 10 (1e-7, but 1e+21). */
static size_t put_e(const decimal *dec, int json, char *out) {
    char *o = out;
    if (dec->neg) *o++ = '-';
    *o++ = dec->digits[0];
    if (dec->nd > 1) {
        *o++ = '.';
        memcpy(o, dec->digits + 1, (size_t)dec->nd - 1);
        o += dec->nd - 1;
    }
    int exp = dec->dp - 1;
    const char *form = exp < 0 && json ? "e-%d" : exp < 0 ? "e-%02d" : "e+%02d";
    o += sprintf(o, form, exp < 0 ? -exp : exp);
    return (size_t)(o - out);
}

size_t kl_gonum_json(double d, char out[KL_GONUM_MAX]) {
    decimal dec;
    shortest(d, &dec);
    double a = fabs(d);
    return a != 0 && (a < 1e-6 || a >= 1e21) ? put_e(&dec, 1, out) : put_f(&dec, out);
}

size_t kl_gonum_g(double d, char out[KL_GONUM_MAX]) {
    decimal dec;
    shortest(d, &dec);
    int exp = dec.dp - 1;
    return dec.nd > 0 && (exp < -4 || exp >= 6) ? put_e(&dec, 0, out) : put_f(&dec, out);
}
