/*
 * lua_webhook.h - the webhook server of a runtime (--webhook-bind-address):
 * HTTPS on the loop (serve.h), each POST handed to the Lua module
 * klua.internal.webhook in a task of its own, with a deadline below the
 * API server's; the certificate pair read from --webhook-cert-dir and
 * read again when its files change (docs/webhooks.md).
 */
#ifndef KLUA_LUA_WEBHOOK_H
#define KLUA_LUA_WEBHOOK_H

#include <stddef.h>

#include "lua/runtime.h"

/* controller-runtime's default certificate directory (pkg/webhook/server.go). */
#define KL_WEBHOOK_CERT_DIR "/tmp/k8s-webhook-server/serving-certs"

/* Makes the runtime's part KL_RT_WEBHOOKS (kl_rt_new). */
void kl_lua_webhook_init(kl_rt *rt);
/* Serves the webhooks the script declares on addr, with the pair tls.crt
 * and tls.key of cert_dir (NULL: KL_WEBHOOK_CERT_DIR). Returns 0, or -1
 * with the reason in err (the address, the files). */
int kl_lua_webhook_open(kl_rt *rt, const char *addr, const char *cert_dir, char *err, size_t errlen);
/* Parses a Go duration ("10s", "1m30s", "500ms"), as kube-apiserver
 * writes a webhook call's `timeout` query parameter. Returns 0, or -1 when
 * s is not one. */
int kl_lua_webhook_parse_duration(const char *s, double *seconds);

#endif
