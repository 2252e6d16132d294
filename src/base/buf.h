/*
 * buf.h - growable arrays: the one capacity policy of the host.
 *
 * An array is three things its owner keeps side by side, a pointer, a
 * length and a capacity in elements, as Lua's luaM_growvector keeps them;
 * kl_buf_grow makes room and the owner then writes and counts. The
 * capacity starts at the owner's first size and doubles until what is
 * needed fits, so appending n elements one by one costs O(n) copies.
 *
 * kl_buf_grow aborts when out of memory (xalloc.h's policy);
 * kl_buf_try_grow is for the few owners that turn a failed allocation into
 * an error of their own (start-up's configuration, reported before
 * anything runs) or that can do without the room (the tasks' pool).
 */
#ifndef KLUA_BUF_H
#define KLUA_BUF_H

#include <stddef.h>

/* The capacity that holds need elements: cap itself when it does, else
 * cap (first when cap is 0) doubled until it does. */
size_t kl_buf_cap(size_t cap, size_t need, size_t first);
/* p (a kl_buf_cap-grown array of elements of size bytes, capacity *cap)
 * reallocated to hold need elements; *cap updated. p itself when it
 * already does. Aborts when out of memory. */
void *kl_buf_grow(void *p, size_t *cap, size_t need, size_t size, size_t first);
/* As kl_buf_grow, but NULL when out of memory, with p and *cap untouched. */
void *kl_buf_try_grow(void *p, size_t *cap, size_t need, size_t size, size_t first);

#endif
