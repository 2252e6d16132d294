/*
 * ydoc.h - reading kubeconfig files and ExecCredential JSON through
 * libyaml's document API.
 *
 * Both formats are small trees, and JSON of the shapes involved is valid
 * YAML, so one loader serves both. Lookups return NULL for an absent key and
 * for a YAML null (`key:`, `~`, `null`), which callers treat alike.
 */
#ifndef KLUA_CONFIG_YAML_H
#define KLUA_CONFIG_YAML_H

#include <stddef.h>
#include <yaml.h>

typedef struct kl_ydoc {
    yaml_document_t doc;
    int loaded;
} kl_ydoc;

/* Parses the first document of buf. With single set, anything after it is an
 * error. On failure writes "line N: <problem>" into err and returns -1; the
 * message never quotes the input. An empty input loads as an empty document. */
int kl_ydoc_load(kl_ydoc *d, const char *buf, size_t len, int single, char *err, size_t errlen);
void kl_ydoc_free(kl_ydoc *d);

/* The root node, or NULL for an empty document. */
yaml_node_t *kl_ydoc_root(kl_ydoc *d);
/* The value under key in a mapping node; NULL when map is not a mapping, the
 * key is absent, or the value is null. */
yaml_node_t *kl_ydoc_get(kl_ydoc *d, yaml_node_t *map, const char *key);
/* Number of items of a sequence node (0 for anything else) and item i. */
size_t kl_ydoc_len(yaml_node_t *seq);
yaml_node_t *kl_ydoc_item(kl_ydoc *d, yaml_node_t *seq, size_t i);

/* The text of a scalar node, or NULL for any other node. */
const char *kl_ydoc_scalar(yaml_node_t *n);
/* YAML 1.1 booleans as Kubernetes' decoder accepts them (true/false,
 * yes/no, on/off in any case): 0 or 1, or -1 when n is not one. */
int kl_ydoc_bool(yaml_node_t *n);
/* 1-based line where n starts, for error messages. */
size_t kl_ydoc_line(yaml_node_t *n);

#endif
