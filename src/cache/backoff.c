/* backoff.c - client-go's reflector backoff on an injected clock; see backoff.h. */
#include "cache/backoff.h"

void kl_backoff_init(kl_backoff *b) {
    b->step = 0;
    b->last = -1;
}

double kl_backoff_next(kl_backoff *b, double now, double u) {
    if (b->last >= 0 && now - b->last > KL_BACKOFF_RESET) b->step = 0;
    b->step = b->step > 0 ? b->step * KL_BACKOFF_FACTOR : KL_BACKOFF_INITIAL;
    if (b->step > KL_BACKOFF_CAP) b->step = KL_BACKOFF_CAP;
    b->last = now;
    return b->step * (1.0 + KL_BACKOFF_JITTER * u);
}
