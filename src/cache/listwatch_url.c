/* listwatch_url.c - LIST and WATCH request targets; see listwatch_url.h. */
#include "cache/listwatch_url.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

typedef struct sbuf {
    char *s;
    size_t len, cap;
} sbuf;

static void sb_add(sbuf *b, const char *p, size_t n) {
    b->s = kl_buf_grow(b->s, &b->cap, b->len + n + 1, 1, 256);
    memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* Appends "&name=value" (or "?name=value" first) with value percent-encoded. */
static void sb_param(sbuf *b, const char *name, const char *value) {
    static const char hex[] = "0123456789ABCDEF";
    sb_str(b, strchr(b->s ? b->s : "", '?') ? "&" : "?");
    sb_str(b, name);
    sb_str(b, "=");
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_' || *p == '.' || *p == '~') {
            sb_add(b, (const char *)p, 1);
        } else {
            char enc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            sb_add(b, enc, 3);
        }
    }
}

/* What every request of the target asks besides its own parameters. */
static void sb_target(sbuf *b, const kl_listwatch_target *t) {
    if (t->label_selector && t->label_selector[0]) sb_param(b, "labelSelector", t->label_selector);
    if (t->field_selector && t->field_selector[0]) sb_param(b, "fieldSelector", t->field_selector);
    if (t->include_object) sb_param(b, "includeObject", "Object");
    if (t->shard_selector && t->shard_selector[0]) sb_param(b, "shardSelector", t->shard_selector);
}

char *kl_listwatch_url_list(const kl_listwatch_target *t, int limit, const char *rv, const char *cont) {
    sbuf b = {0};
    sb_str(&b, t->path);
    if (limit > 0) {
        char n[24];
        snprintf(n, sizeof n, "%d", limit);
        sb_param(&b, "limit", n);
    }
    if (cont) sb_param(&b, "continue", cont);
    else sb_param(&b, "resourceVersion", rv);
    sb_target(&b, t);
    return b.s;
}

char *kl_listwatch_url_watch(const kl_listwatch_target *t, long timeout, const char *rv, int initial_events) {
    char n[24];
    snprintf(n, sizeof n, "%ld", timeout);
    sbuf b = {0};
    sb_str(&b, t->path);
    sb_param(&b, "watch", "true");
    sb_param(&b, "allowWatchBookmarks", "true");
    sb_param(&b, "timeoutSeconds", n);
    if (initial_events) {
        sb_param(&b, "sendInitialEvents", "true");
        sb_param(&b, "resourceVersionMatch", "NotOlderThan");
    }
    sb_param(&b, "resourceVersion", rv);
    sb_target(&b, t);
    return b.s;
}
