/* http.c - requests to the API server on the event loop; see http.h. */
#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "version.h"

#define ERROR_BODY_MAX ((size_t)1 << 20)
#define DEFAULT_BODY_MAX ((size_t)1 << 30)

struct kl_http {
    kl_loop *loop;
    kl_conn *conn;
    size_t max_body;
    kl_http_req *reqs; /* every running request, so free can cancel them */
};

struct kl_http_req {
    kl_http *h;
    kl_http_req *prev, *next;
    CURL *easy;
    struct curl_slist *headers;
    kl_http_opts o; /* copies of path and body are owned below */
    char *path, *body;
    kl_http_cb cb;
    void *ud;
    char *buf; /* buffered body */
    size_t len, cap;
    int too_big;
    double retry_after;
    int retried_401;
    double started;
    uint64_t report_id; /* deferred report of a request that could not start */
    char errbuf[CURL_ERROR_SIZE];
    char err[512]; /* set when the request could not be prepared */
};

kl_http *kl_http_new(kl_loop *loop, kl_conn *conn) {
    kl_http *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->loop = loop;
    h->conn = conn;
    h->max_body = DEFAULT_BODY_MAX;
    return h;
}

void kl_http_set_max_body(kl_http *h, size_t max) { h->max_body = max; }

static void release(kl_http_req *r) {
    kl_loop_cancel(r->h->loop, r->report_id);
    if (r->easy) {
        curl_multi_remove_handle(kl_loop_multi(r->h->loop), r->easy);
        curl_easy_cleanup(r->easy);
    }
    if (r->prev) r->prev->next = r->next;
    else if (r->h->reqs == r) r->h->reqs = r->next;
    if (r->next) r->next->prev = r->prev;
    curl_slist_free_all(r->headers);
    free(r->path);
    free(r->body);
    free(r->buf);
    free(r);
}

void kl_http_free(kl_http *h) {
    if (!h) return;
    while (h->reqs) release(h->reqs);
    free(h);
}

void kl_http_cancel(kl_http_req *r) {
    if (r) release(r);
}

void kl_http_resume(kl_http_req *r) {
    if (r && r->easy) curl_easy_pause(r->easy, CURLPAUSE_CONT);
}

static long response_status(kl_http_req *r) {
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

static int buffer(kl_http_req *r, const char *p, size_t n, size_t max) {
    if (r->len + n > max) {
        r->too_big = 1;
        return -1;
    }
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 16384;
        while (cap < r->len + n + 1) cap *= 2;
        char *b = realloc(r->buf, cap);
        if (!b) return -1;
        r->buf = b;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, p, n);
    r->len += n;
    r->buf[r->len] = '\0';
    return 0;
}

static size_t on_write(char *p, size_t size, size_t n, void *ud) {
    kl_http_req *r = ud;
    size_t bytes = size * n;
    long status = response_status(r);
    int ok = status >= 200 && status < 300;
    if (ok && r->cb.data) return r->cb.data(r->ud, p, bytes);
    if (buffer(r, p, bytes, ok ? r->h->max_body : ERROR_BODY_MAX) < 0)
        return ok ? 0 : bytes; /* an oversized error body is cut, not fatal */
    return bytes;
}

static size_t on_header(char *p, size_t size, size_t n, void *ud) {
    kl_http_req *r = ud;
    size_t bytes = size * n;
    static const char name[] = "retry-after:";
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

static void report(kl_http_req *r, CURLcode result, const char *error) {
    kl_http_resp resp = {
        .result = result,
        .status = r->easy && result == CURLE_OK ? response_status(r) : 0,
        .error = error,
        .body = r->buf,
        .body_len = r->len,
        .retry_after = r->retry_after,
    };
    if (r->easy && result != CURLE_OK) {
        long status = response_status(r);
        if (status) resp.status = status;
    }
    kl_vlog(6, "http", "%s %s -> %ld (%.0f ms)%s%s", r->o.method, r->path, resp.status,
            (kl_now() - r->started) * 1000, error ? ": " : "", error ? error : "");
    r->cb.done(r->ud, &resp);
    release(r);
}

static void report_prepare_error(kl_loop *loop, void *ud) {
    (void)loop;
    kl_http_req *r = ud;
    r->report_id = 0;
    report(r, CURLE_FAILED_INIT, r->err);
}

static int setup(kl_http_req *r) {
    r->easy = curl_easy_init();
    if (!r->easy) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    if (kl_conn_prepare(r->h->conn, r->easy, &r->headers, r->err, sizeof r->err) < 0) return -1;
    size_t n = strlen(kl_conn_server(r->h->conn)) + strlen(r->path) + 1;
    char *url = malloc(n);
    if (!url) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    snprintf(url, n, "%s%s", kl_conn_server(r->h->conn), r->path);
    curl_easy_setopt(r->easy, CURLOPT_URL, url);
    free(url);
    r->headers = curl_slist_append(r->headers, "Accept: application/json");
    if (r->o.content_type) {
        char ct[160];
        snprintf(ct, sizeof ct, "Content-Type: %s", r->o.content_type);
        r->headers = curl_slist_append(r->headers, ct);
    }
    curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->headers);
    curl_easy_setopt(r->easy, CURLOPT_USERAGENT, "klua/" KLUA_VERSION);
    curl_easy_setopt(r->easy, CURLOPT_CUSTOMREQUEST, r->o.method);
    if (strcmp(r->o.method, "GET") == 0) curl_easy_setopt(r->easy, CURLOPT_CUSTOMREQUEST, NULL);
    if (r->body) {
        curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, r->body);
        curl_easy_setopt(r->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->o.body_len);
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
    curl_easy_setopt(r->easy, CURLOPT_ACCEPT_ENCODING, "");
    if (r->o.timeout_ms > 0) curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, r->o.timeout_ms);
    r->started = kl_now();
    r->retry_after = -1;
    if (curl_multi_add_handle(kl_loop_multi(r->h->loop), r->easy) != CURLM_OK) {
        snprintf(r->err, sizeof r->err, "cannot start the request");
        return -1;
    }
    kl_vlog(8, "http", "%s %s", r->o.method, r->path);
    return 0;
}

kl_http_req *kl_http_start(kl_http *h, const kl_http_opts *o, kl_http_cb cb, void *ud) {
    kl_http_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->h = h;
    r->o = *o;
    if (!r->o.method) r->o.method = "GET";
    r->path = strdup(o->path);
    r->body = o->body ? malloc(o->body_len + 1) : NULL;
    if (!r->path || (o->body && !r->body)) {
        free(r->path);
        free(r->body);
        free(r);
        return NULL;
    }
    if (r->body) {
        memcpy(r->body, o->body, o->body_len);
        r->body[o->body_len] = '\0';
    }
    r->cb = cb;
    r->ud = ud;
    r->next = h->reqs;
    if (h->reqs) h->reqs->prev = r;
    h->reqs = r;
    if (setup(r) < 0 && !(r->report_id = kl_loop_defer(h->loop, report_prepare_error, r))) {
        release(r);
        return NULL;
    }
    return r;
}

/* A 401 may mean the credential rotated: ask the connection once, then
 * send the same request again on a fresh handle. */
static int retry_unauthorized(kl_http_req *r, CURLcode result) {
    if (result != CURLE_OK || r->retried_401 || response_status(r) != 401) return 0;
    if (!kl_conn_unauthorized(r->h->conn)) return 0;
    curl_multi_remove_handle(kl_loop_multi(r->h->loop), r->easy);
    curl_easy_cleanup(r->easy);
    r->easy = NULL;
    curl_slist_free_all(r->headers);
    r->headers = NULL;
    r->len = 0;
    r->retried_401 = 1;
    if (setup(r) < 0) report(r, CURLE_FAILED_INIT, r->err);
    return 1;
}

static const char *describe(kl_http_req *r, CURLcode result) {
    if (result == CURLE_OK) return r->too_big ? "response body too large" : NULL;
    if (result == CURLE_WRITE_ERROR && r->too_big) return "response body too large";
    return r->errbuf[0] ? r->errbuf : curl_easy_strerror(result);
}

void kl_http_transfer_done(kl_loop *loop, CURL *easy, CURLcode result) {
    (void)loop;
    kl_http_req *r = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&r);
    if (!r || retry_unauthorized(r, result)) return;
    if (result == CURLE_OK && r->too_big) result = CURLE_WRITE_ERROR;
    report(r, result, describe(r, result));
}
