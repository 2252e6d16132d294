/* yaml_plain.c - go-yaml v2's resolve() for plain scalars; see yaml_plain.h. */
#include "lua/yaml_plain.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* resolve_map's words; "<<" is in it too, but no hint leads there. */
static int in_map(const char *s) {
    static const char *const words[] = {
        "", "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
        "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
        ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN",
        NULL};
    for (int i = 0; words[i]; i++)
        if (!strcmp(s, words[i])) return 1;
    return 0;
}

/* The length of the run of digits at s, or 0; with underscores, a '_'
 * between two digits is part of it (Go's underscoreOK). */
static size_t digit_run(const char *s, int underscores) {
    size_t i = 0;
    while (is_digit(s[i]) || (underscores && i > 0 && s[i] == '_' && is_digit(s[i + 1]))) i++;
    return i;
}

/* [eE][-+]?DIGITS at *p, if there; 0 when an 'e' is not followed by one. */
static int exponent(const char **p, int underscores) {
    if ((**p | 32) != 'e') return 1;
    const char *s = *p + 1;
    if (*s == '+' || *s == '-') s++;
    size_t n = digit_run(s, underscores);
    *p = s + n;
    return n > 0;
}

/* What strconv.ParseFloat makes of a syntactically valid decimal s: a float
 * unless it overflows (ErrRange); underscores are dropped first. */
static int finite_float(const char *s) {
    char *copy = kl_xstrdup(s), *o = copy;
    for (const char *p = s; *p; p++)
        if (*p != '_') *o++ = *p;
    *o = '\0';
    int ok = isfinite(strtod(copy, NULL));
    free(copy);
    return ok;
}

/* Hint '.': strconv.ParseFloat(s) succeeds (".5", ".5e3", ".5_5"). */
static int dot_float(const char *s) {
    const char *p = s + 1;
    size_t n = digit_run(p, 1);
    if (n == 0) return 0;
    p += n;
    return exponent(&p, 1) && *p == '\0' && finite_float(s);
}

/* yamlStyleFloat, ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$,
 * on the text without underscores, and ParseFloat without ErrRange. */
static int style_float(const char *plain) {
    const char *p = plain;
    if (*p == '+' || *p == '-') p++;
    if (*p == '.') {
        size_t n = digit_run(p + 1, 0);
        if (n == 0) return 0;
        p += 1 + n;
    } else {
        size_t n = digit_run(p, 0);
        if (n == 0) return 0;
        p += n;
        if (*p == '.') p += 1 + digit_run(p + 1, 0);
    }
    return exponent(&p, 0) && *p == '\0' && finite_float(plain);
}

static int digit_value(char c) {
    if (is_digit(c)) return c - '0';
    c = (char)(c | 32);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : 99;
}

/* strconv.ParseInt(plain, 0, 64) or strconv.ParseUint(plain, 0, 64)
 * succeeds: 0x, 0o, 0b and 0 prefixes, a sign for ParseInt only. */
static int go_integer(const char *s) {
    int sign = *s == '+' || *s == '-', neg = *s == '-';
    s += sign;
    unsigned base = 10;
    if (s[0] == '0' && s[1]) {
        switch (s[1] | 32) {
        case 'x': base = 16; s += 2; break;
        case 'o': base = 8; s += 2; break;
        case 'b': base = 2; s += 2; break;
        default: base = 8; s += 1; break;
        }
    }
    if (!*s) return 0;
    uint64_t v = 0;
    for (; *s; s++) {
        unsigned d = (unsigned)digit_value(*s);
        if (d >= base || v > (UINT64_MAX - d) / base) return 0;
        v = v * base + d;
    }
    if (!sign) return 1;
    return v <= (uint64_t)INT64_MAX + (neg ? 1 : 0);
}

/* One or two digits at *p, as time.Parse's getnum reads 1, 2, 15, 4, 5. */
static int small_number(const char **p, int *out) {
    if (!is_digit(**p)) return 0;
    *out = *(*p)++ - '0';
    if (is_digit(**p)) *out = *out * 10 + (*(*p)++ - '0');
    return 1;
}

static int days_in(int month, int year) {
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return days[month - 1] + (month == 2 && leap);
}

/* The time after the date: "15:4:5.999999999" and, after a T, "Z07:00". */
static int clock(const char *p, int zone) {
    int h, m, s;
    if (!small_number(&p, &h) || *p++ != ':' || !small_number(&p, &m) || *p++ != ':' || !small_number(&p, &s))
        return 0;
    if (h > 23 || m > 59 || s > 59) return 0;
    if ((*p == '.' || *p == ',') && is_digit(p[1]))
        for (p++; is_digit(*p); p++) {}
    if (!zone) return *p == '\0';
    if (*p == 'Z') return p[1] == '\0';
    if ((*p != '+' && *p != '-') || !is_digit(p[1]) || !is_digit(p[2]) || p[3] != ':' || !is_digit(p[4]) ||
        !is_digit(p[5]) || p[6] != '\0')
        return 0;
    return (p[1] - '0') * 10 + (p[2] - '0') <= 24 && (p[4] - '0') * 10 + (p[5] - '0') <= 60;
}

/* go-yaml's parseTimestamp: time.Parse with "2006-1-2T15:4:5.999999999Z07:00",
 * the same with a 't', "2006-1-2 15:4:5.999999999" or "2006-1-2", dates and
 * times in range. */
static int timestamp(const char *s) {
    for (int i = 0; i < 4; i++)
        if (!is_digit(s[i])) return 0;
    if (s[4] != '-') return 0;
    int year = atoi(s), month, day;
    const char *p = s + 5;
    if (!small_number(&p, &month) || *p++ != '-' || !small_number(&p, &day)) return 0;
    if (month < 1 || month > 12 || day < 1 || day > days_in(month, year)) return 0;
    if (*p == '\0') return 1;
    if (*p == 'T' || *p == 't') return clock(p + 1, 1);
    return *p == ' ' && clock(p + 1, 0);
}

/* isBase60Float: ^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$ */
static int base60(const char *s) {
    if (*s == '+' || *s == '-') s++;
    if (!is_digit(*s)) return 0;
    while (is_digit(*s) || *s == '_') s++;
    int groups = 0;
    for (; *s == ':'; groups++) {
        s++;
        if (s[0] >= '0' && s[0] <= '5' && is_digit(s[1])) s += 2;
        else if (is_digit(s[0])) s++;
        else return 0;
    }
    if (!groups) return 0;
    if (*s == '.')
        for (s++; is_digit(*s) || *s == '_'; s++) {}
    return *s == '\0';
}

/* Hint 'D' or 'S' (a digit or a sign first): a timestamp, an integer or a float. */
static int number_or_time(const char *s) {
    if (timestamp(s)) return 1;
    char *plain = kl_xstrdup(s), *o = plain;
    for (const char *p = s; *p; p++)
        if (*p != '_') *o++ = *p;
    *o = '\0';
    int hit = go_integer(plain) || style_float(plain);
    free(plain);
    return hit;
}

int kl_yaml_plain_not_string(const char *s) {
    if (base60(s) || in_map(s)) return 1;
    if (*s == '.') return dot_float(s);
    if (*s == '+' || *s == '-' || is_digit(*s)) return number_or_time(s);
    return 0;
}
