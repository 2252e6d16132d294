/* ydoc.c - libyaml document helpers; see ydoc.h. */
#include "conn/ydoc.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "conn/cfg.h"

static int parser_error(yaml_parser_t *p, char *err, size_t errlen) {
    return kl_cfg_fail(err, errlen, "line %zu: %s", p->problem_mark.line + 1,
                       p->problem ? p->problem : "cannot parse");
}

int kl_ydoc_load(kl_ydoc *d, const char *buf, size_t len, int single, char *err, size_t errlen) {
    yaml_parser_t p;
    memset(d, 0, sizeof *d);
    if (!yaml_parser_initialize(&p)) return kl_cfg_fail(err, errlen, "out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
    int rc = 0;
    if (!yaml_parser_load(&p, &d->doc)) {
        rc = parser_error(&p, err, errlen);
    } else {
        d->loaded = 1;
        yaml_document_t next;
        if (single && yaml_document_get_root_node(&d->doc)) {
            if (!yaml_parser_load(&p, &next)) {
                rc = parser_error(&p, err, errlen);
            } else {
                if (yaml_document_get_root_node(&next))
                    rc = kl_cfg_fail(err, errlen, "line %zu: unexpected data after the document",
                                     next.start_mark.line + 1);
                yaml_document_delete(&next);
            }
        }
    }
    yaml_parser_delete(&p);
    if (rc < 0) kl_ydoc_free(d);
    return rc;
}

void kl_ydoc_free(kl_ydoc *d) {
    if (d->loaded) yaml_document_delete(&d->doc);
    d->loaded = 0;
}

yaml_node_t *kl_ydoc_root(kl_ydoc *d) {
    return d->loaded ? yaml_document_get_root_node(&d->doc) : NULL;
}

const char *kl_ydoc_scalar(yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* 1 for a YAML null. */
static int is_null(yaml_node_t *n) {
    if (!n) return 1;
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
    const char *v = (const char *)n->data.scalar.value;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
           !strcmp(v, "NULL");
}

yaml_node_t *kl_ydoc_get(kl_ydoc *d, yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    yaml_node_t *found = NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        const char *k = kl_ydoc_scalar(yaml_document_get_node(&d->doc, p->key));
        /* Later duplicates win, as in Go's YAML decoder. */
        if (k && !strcmp(k, key)) found = yaml_document_get_node(&d->doc, p->value);
    }
    return is_null(found) ? NULL : found;
}

size_t kl_ydoc_len(yaml_node_t *seq) {
    if (!seq || seq->type != YAML_SEQUENCE_NODE) return 0;
    return (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
}

yaml_node_t *kl_ydoc_item(kl_ydoc *d, yaml_node_t *seq, size_t i) {
    if (i >= kl_ydoc_len(seq)) return NULL;
    return yaml_document_get_node(&d->doc, seq->data.sequence.items.start[i]);
}

int kl_ydoc_bool(yaml_node_t *n) {
    static const char *const truths[] = {"true", "yes", "on", "y"};
    static const char *const lies[] = {"false", "no", "off", "n"};
    const char *v = kl_ydoc_scalar(n);
    if (!v) return -1;
    for (size_t i = 0; i < sizeof truths / sizeof *truths; i++) {
        if (!strcasecmp(v, truths[i])) return 1;
        if (!strcasecmp(v, lies[i])) return 0;
    }
    return -1;
}

size_t kl_ydoc_line(yaml_node_t *n) { return n ? n->start_mark.line + 1 : 0; }
