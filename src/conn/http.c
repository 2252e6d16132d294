/* http.c - requests to the API server on the event loop; see http.h. */
#include "conn/http.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/version.h"
#include "base/xalloc.h"
#include "conn/h2health.h"

#define ERROR_BODY_MAX ((size_t)1 << 20)

struct kl_http {
    kl_loop *loop;
    kl_conn *conn;
    kl_http_req *reqs; /* every running request, so free can cancel them */
    kl_http_count *counts;
    size_t ncounts, cap_counts;
    kl_http_latency *latencies;
    size_t nlatencies, cap_latencies;
    char host[256];
    kl_h2health *health; /* NULL when HTTP2_READ_IDLE_TIMEOUT_SECONDS turns it off */
    uint64_t health_timer;
    char **warned; /* the distinct warning texts seen, up to KL_HTTP_WARNINGS_DISTINCT */
    size_t nwarned, cap_warned;
    unsigned long warnings;
    kl_http_warning_sink warning_sink;
    void *warning_ud;
};

const double kl_http_buckets[KL_HTTP_BUCKETS] = {0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60};

struct kl_http_req {
    kl_http *h;
    kl_http_req *prev, *next;
    CURL *easy;
    struct curl_slist *headers;
    /* Copies of the caller's options: a 401 retry prepares the request
     * again after kl_http_start has returned. */
    char *method, *path, *body, *content_type, *accept;
    size_t body_len;
    long timeout_ms;
    size_t max_body; /* of a buffered 2xx body, as decoded */
    kl_http_cb cb;
    void *ud;
    char *buf; /* buffered body */
    size_t len, cap;
    int too_big;      /* a buffered 2xx body went past max_body */
    int stopped;      /* the data callback refused a streamed body's bytes */
    int started_told; /* cb.started was called */
    int read;         /* bytes came since the health check last looked */
    int probe;        /* the health check's: no metrics */
    double send_by;   /* kl_http_opts.send_by */
    int too_late;     /* the send_by check stopped it before it was sent */
    double retry_after;
    char **warnings; /* this attempt's warning texts */
    size_t nwarnings, cap_warnings;
    int retried_401;
    double started;   /* when this attempt began, a wait for the credential included */
    kl_conn_waiter waiter; /* queued while it waits for an exec plugin's credential */
    uint64_t wait_id;      /* the request's deadline while it waits */
    uint64_t report_id; /* deferred report of a request that could not start */
    char errbuf[CURL_ERROR_SIZE];
    char err[512]; /* why it could not be prepared, or its body was too large */
};

/* "https://host:port/prefix" -> "host:port". */
static void set_host(kl_http *h) {
    const char *s = kl_conn_server(h->conn);
    const char *p = strstr(s, "://");
    p = p ? p + 3 : s;
    size_t n = strcspn(p, "/");
    snprintf(h->host, sizeof h->host, "%.*s", (int)n, p);
}

kl_http *kl_http_new(kl_loop *loop, kl_conn *conn) {
    kl_http *h = kl_xcalloc(1, sizeof *h);
    h->loop = loop;
    h->conn = conn;
    set_host(h);
    kl_h2health_opts health = kl_h2health_env();
    h->health = kl_h2health_new(&health);
    return h;
}

const kl_http_count *kl_http_counts(const kl_http *h, size_t *n) {
    *n = h->ncounts;
    return h->counts;
}

const kl_http_latency *kl_http_latencies(const kl_http *h, size_t *n) {
    *n = h->nlatencies;
    return h->latencies;
}

const char *kl_http_host(const kl_http *h) { return h->host; }

void kl_http_on_warning(kl_http *h, kl_http_warning_sink sink, void *ud) {
    h->warning_sink = sink;
    h->warning_ud = ud;
}

unsigned long kl_http_warnings_total(const kl_http *h) { return h->warnings; }

/* Counts one warning, and tells of it the first time its text comes:
 * client-go's WarningWriter with Deduplicate, as kubectl uses it. */
static void note_warning(kl_http *h, const char *text) {
    h->warnings++;
    for (size_t i = 0; i < h->nwarned; i++)
        if (!strcmp(h->warned[i], text)) return;
    if (h->nwarned == KL_HTTP_WARNINGS_DISTINCT) {
        kl_vlog(2, "http", "server warning (past %d distinct ones, not remembered): %s",
                KL_HTTP_WARNINGS_DISTINCT, text);
        return;
    }
    h->warned = kl_buf_grow(h->warned, &h->cap_warned, h->nwarned + 1, sizeof *h->warned, 8);
    h->warned[h->nwarned++] = kl_xstrdup(text);
    if (h->warning_sink) h->warning_sink(h->warning_ud, text);
    else kl_log(KL_LOG_WARN, "http", "Warning: %s (logged once; klua_api_warnings_total counts every one)", text);
}

static void free_warnings(kl_http_req *r) {
    for (size_t i = 0; i < r->nwarnings; i++) free(r->warnings[i]);
    r->nwarnings = 0;
}

/* ---- Warning headers (RFC 7234 section 5.5, as client-go reads them) ---- */

typedef struct {
    const char *p, *end;
} span;

static void skip_space(span *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t')) s->p++;
}

/* A segment up to the next space: code or agent. */
static span segment(span *s) {
    span seg = {s->p, s->p};
    while (seg.end < s->end && *seg.end != ' ') seg.end++;
    s->p = seg.end < s->end ? seg.end + 1 : seg.end;
    return seg;
}

static int valid_code(span c) {
    return c.end - c.p == 3 && c.p[0] >= '1' && c.p[0] <= '9' && c.p[1] >= '0' && c.p[1] <= '9' &&
           c.p[2] >= '0' && c.p[2] <= '9';
}

/* A quoted-string at s->p, unescaped into a new string; NULL when it is
 * not one or does not end. */
static char *quoted(span *s) {
    if (s->p >= s->end || *s->p != '"') return NULL;
    char *out = kl_xmalloc((size_t)(s->end - s->p)), *w = out;
    for (const char *q = s->p + 1; q < s->end; q++) {
        if (*q == '\\' && q + 1 < s->end) {
            *w++ = *++q;
        } else if (*q == '"') {
            *w = '\0';
            s->p = q + 1;
            return out;
        } else if (*q != '\\') {
            *w++ = *q;
        }
    }
    free(out);
    return NULL;
}

/* After the text: an optional quoted date, then a comma or the end.
 * 0, or -1 when anything else follows. */
static int after_text(span *s) {
    skip_space(s);
    if (s->p < s->end && *s->p == '"') {
        const char *close = memchr(s->p + 1, '"', (size_t)(s->end - s->p - 1));
        if (!close) return -1;
        s->p = close + 1;
        skip_space(s);
    }
    if (s->p == s->end) return 0;
    if (*s->p != ',') return -1;
    s->p++;
    skip_space(s);
    return 0;
}

void kl_http_parse_warnings(const char *value, size_t len, void (*fn)(void *ud, const char *text), void *ud) {
    span s = {value, value + len};
    while (s.end > s.p && (s.end[-1] == ' ' || s.end[-1] == '\t' || s.end[-1] == '\r' || s.end[-1] == '\n')) s.end--;
    skip_space(&s);
    while (s.p < s.end) {
        span code = segment(&s), agent = segment(&s);
        if (!valid_code(code) || agent.p == agent.end) return;
        char *text = quoted(&s);
        if (!text) return;
        int ok = after_text(&s) == 0;
        if (!strncmp(code.p, "299", 3) && *text) fn(ud, text);
        free(text);
        if (!ok) return;
    }
}

static void warning_of_request(void *ud, const char *text) {
    kl_http_req *r = ud;
    r->warnings = kl_buf_grow(r->warnings, &r->cap_warnings, r->nwarnings + 1, sizeof *r->warnings, 4);
    r->warnings[r->nwarnings++] = kl_xstrdup(text);
    if (!r->probe) note_warning(r->h, text);
}

static void count_request(kl_http *h, const char *method, long status) {
    char code[8];
    if (status > 0 && status < 1000) snprintf(code, sizeof code, "%u", (unsigned)status % 1000u);
    else snprintf(code, sizeof code, "<error>");
    for (size_t i = 0; i < h->ncounts; i++) {
        if (!strcmp(h->counts[i].method, method) && !strcmp(h->counts[i].code, code)) {
            h->counts[i].n++;
            return;
        }
    }
    h->counts = kl_buf_grow(h->counts, &h->cap_counts, h->ncounts + 1, sizeof *h->counts, 8);
    kl_http_count *c = &h->counts[h->ncounts++];
    snprintf(c->method, sizeof c->method, "%s", method);
    snprintf(c->code, sizeof c->code, "%s", code);
    c->n = 1;
}

static void observe_latency(kl_http *h, const char *verb, double seconds) {
    kl_http_latency *l = NULL;
    for (size_t i = 0; i < h->nlatencies && !l; i++)
        if (!strcmp(h->latencies[i].verb, verb)) l = &h->latencies[i];
    if (!l) {
        h->latencies = kl_buf_grow(h->latencies, &h->cap_latencies, h->nlatencies + 1, sizeof *h->latencies, 8);
        l = memset(&h->latencies[h->nlatencies++], 0, sizeof *l);
        snprintf(l->verb, sizeof l->verb, "%s", verb);
    }
    for (int i = 0; i < KL_HTTP_BUCKETS; i++)
        if (seconds <= kl_http_buckets[i]) l->le[i]++;
    l->n++;
    l->sum += seconds;
}

/* One attempt ended: a 401 retried counts once on its own, as client-go
 * counts every attempt. */
static void count_attempt(kl_http_req *r, long status) {
    if (r->probe) return;
    count_request(r->h, r->method, status);
    if (r->timeout_ms > 0) observe_latency(r->h, r->method, kl_now() - r->started);
}

const char *kl_http_outcome_name(kl_http_outcome o) {
    static const char *const names[] = {
        [KL_HTTP_OK] = "OK",
        [KL_HTTP_STATUS] = "Status",
        [KL_HTTP_TRANSPORT] = "TransportError",
        [KL_HTTP_TIMEOUT] = "Timeout",
        [KL_HTTP_TOO_LARGE] = "TooLarge",
        [KL_HTTP_CONFIG] = "ConfigError",
        [KL_HTTP_ABANDONED] = "Abandoned",
        [KL_HTTP_TOO_LATE] = "TooLate",
    };
    return (unsigned)o < sizeof names / sizeof names[0] ? names[o] : "TransportError";
}

/* Tells the health check which connection r's transfer is on, and
 * whether it read since the last time. */
static void report_reads(kl_http_req *r) {
    kl_h2conn_id id = {0};
    char *ip = NULL;
    long version = 0;
    if (!r->h->health || !r->easy) return;
    curl_easy_getinfo(r->easy, CURLINFO_LOCAL_PORT, &id.local_port);
    curl_easy_getinfo(r->easy, CURLINFO_PRIMARY_PORT, &id.peer_port);
    curl_easy_getinfo(r->easy, CURLINFO_PRIMARY_IP, &ip);
    curl_easy_getinfo(r->easy, CURLINFO_HTTP_VERSION, &version);
    if (id.local_port <= 0 || !ip || !*ip) return; /* not on a connection yet */
    snprintf(id.peer_ip, sizeof id.peer_ip, "%s", ip);
    kl_h2health_saw(r->h->health, &id, r->read, version == CURL_HTTP_VERSION_2_0, kl_now());
    r->read = 0;
}

/* The easy handle goes; what it read counts for its connection. */
static void drop_easy(kl_http_req *r) {
    if (!r->easy) return;
    if (r->read) report_reads(r);
    curl_multi_remove_handle(kl_loop_multi(r->h->loop), r->easy);
    curl_easy_cleanup(r->easy);
    r->easy = NULL;
}

static void release(kl_http_req *r) {
    kl_loop_cancel(r->h->loop, r->report_id);
    kl_loop_cancel(r->h->loop, r->wait_id);
    kl_conn_forget(r->h->conn, &r->waiter);
    drop_easy(r);
    if (r->prev) r->prev->next = r->next;
    else if (r->h->reqs == r) r->h->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    curl_slist_free_all(r->headers);
    free_warnings(r);
    free(r->warnings);
    free(r->method);
    free(r->path);
    free(r->body);
    free(r->content_type);
    free(r->accept);
    free(r->buf);
    free(r);
}

void kl_http_free(kl_http *h) {
    if (!h) return;
    kl_loop_cancel(h->loop, h->health_timer);
    while (h->reqs) release(h->reqs);
    kl_h2health_free(h->health);
    for (size_t i = 0; i < h->nwarned; i++) free(h->warned[i]);
    free(h->warned);
    free(h->counts);
    free(h->latencies);
    free(h);
}

static long response_status(kl_http_req *r);

/* The reader ended it (a watch it stopped, a LIST item it refused): the
 * request ends here, with whatever status had come. */
void kl_http_cancel(kl_http_req *r) {
    if (!r) return;
    count_attempt(r, r->easy ? response_status(r) : 0);
    release(r);
}

void kl_http_resume(kl_http_req *r) {
    if (r && r->easy) curl_easy_pause(r->easy, CURLPAUSE_CONT);
}

static long response_status(kl_http_req *r) {
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

static int is_2xx(long status) { return status >= 200 && status < 300; }

static int buffer(kl_http_req *r, const char *p, size_t n, size_t max) {
    if (r->len + n > max) return -1;
    r->buf = kl_buf_grow(r->buf, &r->cap, r->len + n + 1, 1, 16384);
    memcpy(r->buf + r->len, p, n);
    r->len += n;
    r->buf[r->len] = '\0';
    return 0;
}

static size_t on_write(char *p, size_t size, size_t n, void *ud) {
    kl_http_req *r = ud;
    size_t bytes = size * n;
    int ok = is_2xx(response_status(r));
    r->read = 1;
    KL_VLOG(5, "http", "%s %s: read %zu bytes", r->method, r->path, bytes);
    if (ok && r->cb.data) {
        size_t taken = r->cb.data(r->ud, p, bytes);
        if (taken != bytes && taken != KL_HTTP_PAUSE) r->stopped = 1;
        return taken;
    }
    if (buffer(r, p, bytes, ok ? r->max_body : ERROR_BODY_MAX) < 0) {
        if (!ok) return bytes; /* an oversized error body is cut, not fatal */
        r->too_big = 1;
        return 0;
    }
    return bytes;
}

static const char *content_type(kl_http_req *r) {
    char *ct = NULL;
    if (r->easy) curl_easy_getinfo(r->easy, CURLINFO_CONTENT_TYPE, &ct);
    return ct;
}

/* The blank line that ends a response's headers: a 2xx is announced. */
static void headers_end(kl_http_req *r) {
    if (r->started_told || !r->cb.started || !is_2xx(response_status(r))) return;
    r->started_told = 1;
    r->cb.started(r->ud, content_type(r));
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
    kl_http_req *r = ud;
    size_t bytes = size * n;
    static const char name[] = "retry-after:", warning[] = "warning:";
    r->read = 1;
    if ((bytes == 2 && p[0] == '\r' && p[1] == '\n') || (bytes == 1 && p[0] == '\n')) headers_end(r);
    if (bytes > sizeof warning - 1 && strncasecmp(p, warning, sizeof warning - 1) == 0)
        kl_http_parse_warnings(p + sizeof warning - 1, bytes - (sizeof warning - 1), warning_of_request, r);
    if (bytes > sizeof name - 1 && strncasecmp(p, name, sizeof name - 1) == 0) {
        char v[32];
        size_t vl = bytes - (sizeof name - 1);
        if (vl >= sizeof v) vl = sizeof v - 1;
        memcpy(v, p + sizeof name - 1, vl);
        v[vl] = '\0';
        char *end;
        double secs = strtod(v, &end);
        /* Only delta-seconds; an HTTP-date is rare from API servers. */
        if (end != v && secs >= 0) r->retry_after = secs;
    }
    return bytes;
}

static void report(kl_http_req *r, kl_http_outcome outcome, const char *error) {
    kl_http_resp resp = {
        .outcome = outcome,
        .status = r->easy ? response_status(r) : 0,
        .error = error,
        .body = r->buf,
        .body_len = r->len,
        .retry_after = r->retry_after,
        .content_type = content_type(r),
        .warnings = (const char *const *)r->warnings,
        .nwarnings = r->nwarnings,
    };
    count_attempt(r, resp.status);
    kl_vlog(6, "http", "%s %s -> %ld %s (%.0f ms)%s%s", r->method, r->path, resp.status,
            kl_http_outcome_name(outcome), (kl_now() - r->started) * 1000, error ? ": " : "",
            error ? error : "");
    r->cb.done(r->ud, &resp);
    release(r);
}

static void report_prepare_error(kl_loop *loop, void *ud) {
    (void)loop;
    kl_http_req *r = ud;
    r->report_id = 0;
    report(r, KL_HTTP_CONFIG, r->err);
}

/* curl_slist_append returns NULL when out of memory, and the list it was
 * given would be lost with its Authorization header: abort instead. */
static void add_header(kl_http_req *r, const char *line) {
    struct curl_slist *l = curl_slist_append(r->headers, line);
    if (!l) kl_oom(strlen(line));
    r->headers = l;
}

/* curl calls this once the connection is ready, just before it sends the
 * request: the last moment this process can decide that it must not. */
static int before_send(void *ud, char *primary_ip, char *local_ip, int primary_port, int local_port) {
    (void)primary_ip, (void)local_ip, (void)primary_port, (void)local_port;
    kl_http_req *r = ud;
    if (kl_now() < r->send_by) return CURL_PREREQFUNC_OK;
    r->too_late = 1;
    return CURL_PREREQFUNC_ABORT;
}

/* What is left of the request's deadline, in ms, once a wait for the
 * credential took its share; at least 1, as 0 would mean none. */
static long remaining_ms(const kl_http_req *r) {
    long left = r->timeout_ms - (long)((kl_now() - r->started) * 1000);
    return left > 0 ? left : 1;
}

/* 0 when the transfer started, KL_CONN_PENDING when the request waits for
 * the credential (r->waiter.ready goes on), -1 with r->err. */
static int setup(kl_http_req *r) {
    if (!r->easy) r->easy = curl_easy_init();
    if (!r->easy) kl_oom(sizeof(CURL *));
    int prepared = kl_conn_prepare(r->h->conn, r->easy, &r->headers, &r->waiter, r->err, sizeof r->err);
    if (prepared != 0) return prepared;
    size_t n = strlen(kl_conn_server(r->h->conn)) + strlen(r->path) + 1;
    char *url = kl_xmalloc(n);
    snprintf(url, n, "%s%s", kl_conn_server(r->h->conn), r->path);
    curl_easy_setopt(r->easy, CURLOPT_URL, url);
    free(url);
    char accept[256];
    snprintf(accept, sizeof accept, "Accept: %s", r->accept ? r->accept : "application/json");
    add_header(r, accept);
    if (r->content_type) {
        char ct[160];
        snprintf(ct, sizeof ct, "Content-Type: %s", r->content_type);
        add_header(r, ct);
    }
    curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(r->easy, CURLOPT_USERAGENT, "klua/" KLUA_VERSION);
    curl_easy_setopt(r->easy, CURLOPT_CUSTOMREQUEST, r->method);
    if (strcmp(r->method, "GET") == 0) curl_easy_setopt(r->easy, CURLOPT_CUSTOMREQUEST, NULL);
    if (r->body) {
        curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, r->body);
        curl_easy_setopt(r->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    }
    curl_easy_setopt(r->easy, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(r->easy, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(r->easy, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(r->easy, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(r->easy, CURLOPT_PRIVATE, r);
    curl_easy_setopt(r->easy, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(r->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(r->easy, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(r->easy, CURLOPT_TCP_KEEPALIVE, 1L);
    /* Credentials must never follow a redirect to another host; the API
     * server does not redirect, so redirects are not followed at all. */
    curl_easy_setopt(r->easy, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(r->easy, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(r->easy, CURLOPT_PIPEWAIT, 1L);
    /* kube-apiserver gzips a response of 128 KiB or more that may be
     * (responsewriters' defaultGzipThresholdBytes): less on the wire, and
     * most of the server's CPU for a big LIST (kubernetes#112296). */
    if (kl_conn_compression(r->h->conn)) curl_easy_setopt(r->easy, CURLOPT_ACCEPT_ENCODING, "");
    /* A watch or a LIST delivers megabytes: 256 KiB reads rather than
     * curl's 16 KiB take a sixteenth of the system calls. */
    if (r->cb.data) curl_easy_setopt(r->easy, CURLOPT_BUFFERSIZE, 256L << 10);
    if (r->send_by > 0) {
        curl_easy_setopt(r->easy, CURLOPT_PREREQFUNCTION, before_send);
        curl_easy_setopt(r->easy, CURLOPT_PREREQDATA, r);
    }
    if (r->timeout_ms > 0) curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, remaining_ms(r));
    /* A Content-Length over the limit fails before any byte is read. */
    if (!r->cb.data) curl_easy_setopt(r->easy, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)r->max_body);
    r->retry_after = -1;
    if (curl_multi_add_handle(kl_loop_multi(r->h->loop), r->easy) != CURLM_OK) {
        snprintf(r->err, sizeof r->err, "cannot start the request");
        return -1;
    }
    kl_vlog(8, "http", "%s %s", r->method, r->path);
    return 0;
}

static void arm_health(kl_http *h);

static void on_wait_timeout(kl_loop *loop, void *ud) {
    (void)loop;
    kl_http_req *r = ud;
    r->wait_id = 0;
    kl_conn_forget(r->h->conn, &r->waiter);
    snprintf(r->err, sizeof r->err, "no credential within %.3g s: the exec plugin is still running",
             r->timeout_ms / 1000.0);
    report(r, KL_HTTP_TIMEOUT, r->err);
}

/* The request waits for the credential, its deadline running. */
static void await_credential(kl_http_req *r) {
    if (r->timeout_ms > 0)
        r->wait_id = kl_loop_after(r->h->loop, remaining_ms(r) / 1000.0, on_wait_timeout, r);
}

/* Sends the request, or has it wait for the credential; a failure is
 * reported from the loop, never before kl_http_start returns. */
static void begin(kl_http_req *r) {
    r->started = kl_now();
    int rc = setup(r);
    if (rc == KL_CONN_PENDING) await_credential(r);
    else if (rc < 0) r->report_id = kl_loop_defer(r->h->loop, report_prepare_error, r);
}

static void credential_ready(kl_conn_waiter *w, const char *err) {
    kl_http_req *r = (kl_http_req *)((char *)w - offsetof(kl_http_req, waiter));
    kl_loop_cancel(r->h->loop, r->wait_id);
    r->wait_id = 0;
    if (err) snprintf(r->err, sizeof r->err, "%s", err);
    int rc = err ? -1 : setup(r);
    if (rc == KL_CONN_PENDING) await_credential(r);
    else if (rc < 0) report(r, KL_HTTP_CONFIG, r->err);
}

kl_http_req *kl_http_start(kl_http *h, const kl_http_opts *o, kl_http_cb cb, void *ud) {
    kl_http_req *r = kl_xcalloc(1, sizeof *r);
    r->h = h;
    r->method = kl_xstrdup(o->method ? o->method : "GET");
    r->path = kl_xstrdup(o->path);
    r->content_type = o->content_type ? kl_xstrdup(o->content_type) : NULL;
    r->accept = o->accept ? kl_xstrdup(o->accept) : NULL;
    r->body_len = o->body_len;
    r->timeout_ms = o->timeout_ms;
    r->max_body = o->max_body ? o->max_body : KL_HTTP_BODY_MAX;
    r->send_by = o->send_by;
    if (o->body) {
        r->body = kl_xmalloc(o->body_len + 1);
        memcpy(r->body, o->body, o->body_len);
        r->body[o->body_len] = '\0';
    }
    r->cb = cb;
    r->ud = ud;
    r->waiter.ready = credential_ready;
    r->next = h->reqs;
    if (h->reqs) h->reqs->prev = r;
    h->reqs = r;
    begin(r);
    arm_health(h);
    return r;
}

/* ---- the HTTP/2 health check (h2health.h) -------------------------------- */

/* A probe's answer is what it read, counted for its connection when it
 * ends; how it ended says nothing more. */
static void probe_done(void *ud, const kl_http_resp *resp) {
    (void)ud;
    (void)resp;
}

static void send_probe(kl_http *h) {
    kl_http_opts o = {.path = "/version", .timeout_ms = (long)(kl_h2health_ping_timeout(h->health) * 1000)};
    kl_http_req *r = kl_http_start(h, &o, (kl_http_cb){.done = probe_done}, NULL);
    r->probe = 1;
}

static void on_verdict(void *ud, const kl_h2conn_id *id, kl_h2_verdict v, double silent) {
    kl_http *h = ud;
    if (v == KL_H2_PROBE) {
        kl_vlog(6, "http", "the connection from local port %ld read nothing for %.1f s: probing it", id->local_port,
                silent);
        send_probe(h);
        return;
    }
    if (kl_h2health_shutdown(id) < 0) {
        kl_log(KL_LOG_WARN, "http", "the HTTP/2 connection from local port %ld to %s looks dead, but its socket "
               "was not found to close", id->local_port, h->host);
        return;
    }
    kl_log(KL_LOG_WARN, "http", "the HTTP/2 connection from local port %ld to %s read nothing for %.1f s nor "
           "answered a probe: closed; its requests go on over a new connection", id->local_port, h->host, silent);
}

static void health_check(kl_loop *loop, void *ud) {
    (void)loop;
    kl_http *h = ud;
    h->health_timer = 0;
    for (kl_http_req *r = h->reqs; r; r = r->next) report_reads(r);
    kl_h2health_judge(h->health, kl_now(), on_verdict, h);
    arm_health(h);
}

/* The check runs while requests do. */
static void arm_health(kl_http *h) {
    if (h->health && h->reqs && !h->health_timer)
        h->health_timer = kl_loop_after(h->loop, kl_h2health_interval(h->health), health_check, h);
}

/* A 401 may mean the credential rotated: ask the connection once, then
 * send the same request again on a fresh handle. */
static int retry_unauthorized(kl_http_req *r, CURLcode result) {
    if (result != CURLE_OK || r->retried_401 || response_status(r) != 401) return 0;
    if (!kl_conn_unauthorized(r->h->conn)) return 0;
    count_attempt(r, 401);
    drop_easy(r);
    curl_slist_free_all(r->headers);
    r->headers = NULL;
    r->len = 0;
    free_warnings(r);
    r->retried_401 = 1;
    begin(r);
    return 1;
}

/* A non-2xx status is the server's answer even if its body broke off;
 * otherwise the transport's result decides, so that a timeout or a cut
 * after a 200 is never mistaken for a response. */
static kl_http_outcome decide(kl_http_req *r, CURLcode result) {
    if (r->too_late) return KL_HTTP_TOO_LATE;
    long status = response_status(r);
    if (status && !is_2xx(status)) return KL_HTTP_STATUS;
    if (r->too_big || result == CURLE_FILESIZE_EXCEEDED) return KL_HTTP_TOO_LARGE;
    if (r->stopped) return KL_HTTP_ABANDONED;
    if (result == CURLE_OPERATION_TIMEDOUT) return KL_HTTP_TIMEOUT;
    return result == CURLE_OK ? KL_HTTP_OK : KL_HTTP_TRANSPORT;
}

static const char *describe(kl_http_req *r, kl_http_outcome outcome, CURLcode result) {
    switch (outcome) {
    case KL_HTTP_OK:
    case KL_HTTP_STATUS:
        return NULL;
    case KL_HTTP_TOO_LARGE:
        if (r->max_body % ((size_t)1 << 20) == 0)
            snprintf(r->err, sizeof r->err, "the response body is over the limit of %zu MiB",
                     r->max_body >> 20);
        else
            snprintf(r->err, sizeof r->err, "the response body is over the limit of %zu bytes",
                     r->max_body);
        return r->err;
    case KL_HTTP_ABANDONED:
        return "the response was not read to its end";
    case KL_HTTP_TOO_LATE:
        return "not sent: its send-by time had passed";
    default:
        return r->errbuf[0] ? r->errbuf : curl_easy_strerror(result);
    }
}

void kl_http_transfer_done(kl_loop *loop, CURL *easy, CURLcode result) {
    (void)loop;
    kl_http_req *r = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&r);
    if (!r || retry_unauthorized(r, result)) return;
    kl_http_outcome outcome = decide(r, result);
    report(r, outcome, describe(r, outcome, result));
}
