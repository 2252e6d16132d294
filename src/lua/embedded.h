/* embedded.h - klua's Lua library compiled into the binary (scripts/build/embed-lua). */
#ifndef KLUA_EMBEDDED_H
#define KLUA_EMBEDDED_H

#include <lua.h>
#include <stddef.h>

typedef struct kl_embedded {
    const char *module; /* "klua", "klua.api", ... */
    const char *path;   /* source path, for tracebacks */
    const char *src;
    size_t len;
} kl_embedded;

/* Terminated by an entry whose module is NULL. */
extern const kl_embedded kl_embedded_lua[];

/* Makes `require` find these modules, before any file on package.path:
 * a script cannot shadow klua's own library by accident. [-0, +0] */
void kl_embedded_add_searcher(lua_State *L);

#endif
