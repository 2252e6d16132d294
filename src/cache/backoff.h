/*
 * backoff.h - the wait between a reflector's failed attempts: client-go's
 * reflector backoff (NewReflectorWithOptions builds it with
 * wait.NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0, clock)).
 *
 * Each failure steps d: 0.8 s, doubling, at most 30 s; the wait is d
 * jittered by a factor of 1.0, uniform in [d, 2d), so it settles in
 * [30, 60) s. A failure more than 2 minutes after the one before starts
 * again from 0.8 s. The clock and the random draw are arguments, so specs
 * step through it without waiting.
 */
#ifndef KLUA_BACKOFF_H
#define KLUA_BACKOFF_H

#define KL_BACKOFF_INITIAL 0.8
#define KL_BACKOFF_CAP 30.0
#define KL_BACKOFF_RESET 120.0
#define KL_BACKOFF_FACTOR 2.0
#define KL_BACKOFF_JITTER 1.0

typedef struct kl_backoff {
    double step; /* d of the last failure; 0 before the first */
    double last; /* when the last failure was, or a negative number before any */
} kl_backoff;

void kl_backoff_init(kl_backoff *b);
/* A failure at `now`: the seconds to wait, given u uniform in [0, 1). */
double kl_backoff_next(kl_backoff *b, double now, double u);

#endif
