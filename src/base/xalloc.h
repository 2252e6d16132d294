/*
 * xalloc.h - host allocations that do not fail: out of memory aborts.
 *
 * klua's policy, as Redis's: when the host (C) side cannot allocate, klua
 * logs one line naming the size and aborts. Carrying on was never right:
 * each caller that tried produced a result that looked fine and was not (a
 * URL without its selectors, a WatchList item or a watch event dropped
 * after the resourceVersion had moved past it), and a cache that silently
 * lacks an event is worse for a controller than a restart, after which it
 * lists again and is exact. The Lua state is different: --memory-limit caps
 * what script code allocates, and a script over it gets a Lua error ("not
 * enough memory") in its task while the host goes on; what the host makes
 * there is made with the cap lifted (runtime.c, task.c;
 * docs/architecture.md, "Out of memory").
 */
#ifndef KLUA_XALLOC_H
#define KLUA_XALLOC_H

#include <stddef.h>

void *kl_xmalloc(size_t n);
void *kl_xcalloc(size_t count, size_t size);
void *kl_xrealloc(void *p, size_t n);
char *kl_xstrdup(const char *s);
char *kl_xstrndup(const char *s, size_t n);
/* Hands the heap's free pages back to the kernel. main.c keeps up to 64 MiB
 * of freed memory for the churn of events; after a burst is done (an
 * informer's list handled) what it freed would otherwise stay resident. */
void kl_heap_trim(void);
/* Logs that n bytes could not be allocated and aborts. */
__attribute__((noreturn)) void kl_oom(size_t n);

/* KL_UNDER_ASAN: AddressSanitizer instruments this build, so that what keeps
 * freed blocks for reuse (pool.c) keeps none and a use after free
 * is still caught. gcc says __SANITIZE_ADDRESS__; clang (the fuzz build)
 * says it through __has_feature. */
#if defined(__SANITIZE_ADDRESS__)
#define KL_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KL_UNDER_ASAN 1
#endif
#endif

/* For specs only: the n-th host allocation from now fails (0: the next
 * one); a negative n turns this off. Process-wide, as the allocator is. */
void kl_xalloc_fail_after(long n);

#endif
