/* tls.c - tls-server-name through libcurl's OpenSSL hook; see tls.h. */
#include "conn/tls.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <openssl/opensslv.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <string.h>

#include "conn/cfg.h"

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)
/* The libssl libcurl loaded: same major version as the headers. */
#define LIBSSL_SONAME "libssl.so." STRINGIFY(OPENSSL_SHLIB_VERSION)

static int backend_is_openssl(void) {
    const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
    return v->ssl_version && !strncmp(v->ssl_version, "OpenSSL/", 8);
}

int kl_tls_blobs_supported(void) {
    /* The blob options arrived in 7.71 (cert, key) and 7.77 (CA) and are
     * implemented by the OpenSSL backend. */
    return curl_version_info(CURLVERSION_NOW)->version_num >= 0x074d00 && backend_is_openssl();
}

/* libssl, already loaded by libcurl; NULL when it is not. */
static void *libssl(void) { return dlopen(LIBSSL_SONAME, RTLD_NOW | RTLD_NOLOAD); }

/* The callback has no user data, so it finds the name where the CTX
 * callback left it: in the verification parameters the SSL inherited. */
static void on_handshake(const SSL *ssl, int where, int ret) {
    (void)ret;
    if (!(where & SSL_CB_HANDSHAKE_START)) return;
    void *h = libssl();
    if (!h) return;
    __typeof__(SSL_get0_param) *get_param = dlsym(h, "SSL_get0_param");
    __typeof__(X509_VERIFY_PARAM_get0_host) *get_host = dlsym(h, "X509_VERIFY_PARAM_get0_host");
    __typeof__(SSL_ctrl) *ctrl = dlsym(h, "SSL_ctrl");
    /* SSL_set_tlsext_host_name is a macro over SSL_ctrl. */
    const char *name = get_param && get_host ? get_host(get_param((SSL *)ssl), 0) : NULL;
    if (name && ctrl)
        ctrl((SSL *)ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, (void *)name);
    dlclose(h);
}

static int is_ip(const char *name) {
    unsigned char buf[16];
    return inet_pton(AF_INET, name, buf) == 1 || inet_pton(AF_INET6, name, buf) == 1;
}

static CURLcode on_ssl_ctx(CURL *easy, void *ssl_ctx, void *userptr) {
    (void)easy;
    const char *name = userptr;
    void *h = libssl();
    if (!h) return CURLE_SSL_CONNECT_ERROR;
    __typeof__(SSL_CTX_get0_param) *get_param = dlsym(h, "SSL_CTX_get0_param");
    __typeof__(X509_VERIFY_PARAM_set1_host) *set_host = dlsym(h, "X509_VERIFY_PARAM_set1_host");
    __typeof__(X509_VERIFY_PARAM_set1_ip_asc) *set_ip = dlsym(h, "X509_VERIFY_PARAM_set1_ip_asc");
    __typeof__(SSL_CTX_set_info_callback) *set_info = dlsym(h, "SSL_CTX_set_info_callback");
    CURLcode rc = CURLE_SSL_CONNECT_ERROR;
    if (get_param && set_host && set_ip && set_info) {
        X509_VERIFY_PARAM *param = get_param(ssl_ctx);
        /* An IP address is matched against IP SANs and, as in Go, never sent as SNI. */
        int ok = is_ip(name) ? set_ip(param, name) : set_host(param, name, 0);
        if (ok == 1) {
            set_info(ssl_ctx, on_handshake);
            rc = CURLE_OK;
        }
    }
    dlclose(h);
    return rc;
}

int kl_tls_set_server_name(CURL *easy, const char *name, int verify, char *err, size_t errlen) {
    if (!backend_is_openssl())
        return kl_cfg_fail(err, errlen,
                           "tls-server-name needs libcurl built with OpenSSL; this one uses %s",
                           curl_version_info(CURLVERSION_NOW)->ssl_version);
    void *h = libssl();
    if (!h)
        return kl_cfg_fail(err, errlen, "tls-server-name: %s is not the OpenSSL libcurl uses",
                           LIBSSL_SONAME);
    dlclose(h);
    if ((verify && curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 0L) != CURLE_OK) ||
        curl_easy_setopt(easy, CURLOPT_SSL_CTX_FUNCTION, on_ssl_ctx) != CURLE_OK ||
        curl_easy_setopt(easy, CURLOPT_SSL_CTX_DATA, (void *)name) != CURLE_OK)
        return kl_cfg_fail(err, errlen, "tls-server-name: libcurl refused CURLOPT_SSL_CTX_FUNCTION");
    return 0;
}
