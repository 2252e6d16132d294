/*
 * lua_endpoint.h - the HTTP servers of a runtime, on the loop (serve.h):
 * the metrics and probe endpoint, whose answers come from the Lua module
 * klua.internal.endpoint (/metrics, /healthz, /readyz), and the live page,
 * from klua.internal.ui (/ui/, /ui/state).
 */
#ifndef KLUA_LUA_ENDPOINT_H
#define KLUA_LUA_ENDPOINT_H

#include <stddef.h>

#include "lua/runtime.h"

/* Makes the runtime's part KL_RT_ENDPOINTS (kl_rt_new); closed first of
 * all when the runtime closes. */
void kl_lua_endpoint_init(kl_rt *rt);
typedef enum kl_endpoint_kind {
    KL_ENDPOINT_PROBES, /* klua.internal.endpoint; ":PORT" is every interface */
    KL_ENDPOINT_UI,     /* klua.internal.ui; ":PORT" is 127.0.0.1 only: the page
                         * shows cluster data */
} kl_endpoint_kind;

/* Listens on addr for rt, answering every path the kind's module knows.
 * Returns 0, or -1 with the reason in err (the address unparsable or in
 * use). The runtime's part owns the endpoint from then on. */
int kl_lua_endpoint_open(kl_rt *rt, kl_endpoint_kind kind, const char *addr, char *err, size_t errlen);

#endif
