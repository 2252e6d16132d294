/*
 * lua_endpoint.h - the metrics and probe endpoint of a runtime: an HTTP
 * server on the loop (serve.h) whose answers come from the Lua module
 * klua.internal.endpoint (/metrics, /healthz, /readyz).
 */
#ifndef KLUA_LUA_ENDPOINT_H
#define KLUA_LUA_ENDPOINT_H

#include <stddef.h>

#include "lua/runtime.h"

/* Makes the runtime's part KL_RT_ENDPOINTS (kl_rt_new); closed first of
 * all when the runtime closes. */
void kl_lua_endpoint_init(kl_rt *rt);
/* Listens on addr for rt, answering every path klua.internal.endpoint knows.
 * Returns 0, or -1 with the reason in err (the address unparsable or in
 * use). The runtime's part owns the endpoint from then on. */
int kl_lua_endpoint_open(kl_rt *rt, const char *addr, char *err, size_t errlen);

#endif
