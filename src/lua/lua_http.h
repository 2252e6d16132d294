/*
 * lua_http.h - API requests for scripts: core.request, which suspends the
 * calling task until the request has ended, and core.http_metrics,
 * client-go's request metrics as the HTTP layer counts them.
 */
#ifndef KLUA_LUA_HTTP_H
#define KLUA_LUA_HTTP_H

#include <lua.h>

/* Adds the functions to the klua.core table on top of L. [-0, +0, e] */
void kl_lua_http_open(lua_State *L);

#endif
