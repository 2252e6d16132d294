/*
 * tls.h - a kubeconfig's tls-server-name on a libcurl easy handle.
 *
 * client-go uses tls-server-name both as the SNI name it sends and as the
 * name the server's certificate must match, while the connection still goes
 * to the server URL's host and the Host header stays that host. libcurl has
 * no option for this: CURLOPT_CONNECT_TO / CURLOPT_RESOLVE would need the
 * URL to name the TLS name, which changes the Host header and what proxies
 * and NO_PROXY see. So klua uses CURLOPT_SSL_CTX_FUNCTION, libcurl's hook
 * into its OpenSSL backend: the callback sets the name OpenSSL verifies the
 * certificate against during the handshake (X509_VERIFY_PARAM_set1_host; a
 * mismatch fails the connection with CURLE_PEER_FAILED_VERIFICATION) and
 * replaces the SNI name when the handshake starts. libcurl's own host check
 * (CURLOPT_SSL_VERIFYHOST), which compares with the URL's host, is turned
 * off because OpenSSL now makes the stricter one.
 *
 * klua is not linked against OpenSSL: the callback takes the few functions
 * it needs from the libssl that libcurl itself loaded, so it always works on
 * the very SSL_CTX libcurl created. Other TLS backends are refused clearly.
 */
#ifndef KLUA_CONFIG_TLS_H
#define KLUA_CONFIG_TLS_H

#include <curl/curl.h>
#include <stddef.h>

/* Makes the handle's TLS handshake send and verify name. name must stay
 * valid for as long as the handle may connect. verify is 0 when
 * certificate checks are off (insecure-skip-tls-verify): then only the SNI
 * name is set. 0, or -1 with err. */
int kl_tls_set_server_name(CURL *easy, const char *name, int verify, char *err, size_t errlen);

/* 1 when this libcurl can take certificates and keys from memory
 * (CURLOPT_CAINFO_BLOB, CURLOPT_SSLCERT_BLOB, CURLOPT_SSLKEY_BLOB). */
int kl_tls_blobs_supported(void);

#endif
