/*
 * listwatch_url.h - the path and query of a reflector's LIST and WATCH
 * requests, parameters percent-encoded.
 */
#ifndef KLUA_LISTWATCH_URL_H
#define KLUA_LISTWATCH_URL_H

/* What every request of one reflector names. */
typedef struct kl_listwatch_target {
    const char *path;                            /* e.g. /api/v1/namespaces/x/pods */
    const char *label_selector, *field_selector; /* or NULL */
    int include_object; /* Table rows with the whole object: includeObject=Object */
    const char *shard_selector; /* KEP-5866's shardSelector, or NULL */
} kl_listwatch_target;

/* A LIST: limit (when > 0), then resourceVersion rv, or the continue token
 * cont when it is not NULL. The caller frees the result. */
char *kl_listwatch_url_list(const kl_listwatch_target *t, int limit, const char *rv, const char *cont);

/* A WATCH with bookmarks ending after timeout seconds: from rv, or, with
 * initial_events, WatchList's stream of a state not older than rv
 * (sendInitialEvents, resourceVersionMatch=NotOlderThan; rv "" is the
 * latest). The caller frees the result. */
char *kl_listwatch_url_watch(const kl_listwatch_target *t, long timeout, const char *rv, int initial_events);

#endif
