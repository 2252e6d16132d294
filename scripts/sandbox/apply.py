"""Server-side apply (PATCH with application/apply-patch+yaml), as kube-apiserver 1.32 does it.

Sources: staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go (applyPatcher),
k8s.io/apimachinery/pkg/apis/meta/v1/validation ValidatePatchOptions,
k8s.io/apimachinery/pkg/util/managedfields/internal (versioncheck.go, structuredmerge.go,
skipnonapplied.go, conflict.go) and sigs.k8s.io/structured-merge-diff/v4 merge/update.go
(Updater.Apply, prune).

- PatchOptions: an apply needs fieldManager (422 Invalid on PatchOptions.meta.k8s.io,
  `fieldManager: Required value: is required for apply patch`); force on any other patch
  type is 422 too (`force: Forbidden: may not be specified for non-apply patch`).
- The body is YAML (JSON is YAML); it must name the resource's apiVersion and kind (400
  `invalid object type: /v1, Kind=ConfigMap` otherwise) and carry no managedFields (400
  `metadata.managedFields must be nil`).
- The configuration is merged into the live object (maps field by field, lists merged by
  key item by item, sets as sets, anything else replaced). The applier then owns exactly
  the fields of its configuration: fields it owned before and left out are removed from
  the object unless another manager owns them.
- A field the apply changes (added or a new value) that another manager owns is a
  conflict: 409 Conflict, `Apply failed with 1 conflict: conflict with "kubectl-patch"
  using apps/v1: .spec.replicas`, one FieldManagerConflict cause per field. Setting the
  value the field already has is no conflict: both share it. With force=true the applier
  takes the fields and the other managers lose them.
- Moving from client-side to server-side apply (lastappliedmanager.go,
  lastappliedupdater.go): for manager `kubectl` only, a conflict on a field that the
  `kubectl.kubernetes.io/last-applied-configuration` annotation sets to the value the object
  still has is no conflict (the apply is forced when all are such); and an apply by
  `kubectl` to an object with that annotation rewrites it to the applied configuration.
- An object without managedFields gets a `before-first-apply` Update manager owning all
  its fields first (skipnonapplied.go), so an apply over it conflicts as on a cluster.
- Apply to a missing object creates it (201).
"""
import copy
import json

from . import managedfields as mf, yamlish
from .status import ApiError, Cause, bad_request, invalid

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# The manager whose applies take over from client-side apply (lastappliedmanager.go).
KUBECTL = "kubectl"


def check_options(req, is_apply):
    """ValidatePatchOptions: fieldManager for apply, no force for other patches."""
    if is_apply and not req.param("fieldManager"):
        raise invalid("PatchOptions", "meta.k8s.io", "",
                      [Cause("fieldManager", "Required value", "is required for apply patch")])
    if not is_apply and "force" in req.params:
        raise invalid("PatchOptions", "meta.k8s.io", "",
                      [Cause("force", "Forbidden", "may not be specified for non-apply patch")])


def _load(req):
    try:
        config = yamlish.loads(req.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise bad_request("error decoding YAML: %s" % err) from None
    if not isinstance(config, dict):
        raise bad_request("error decoding YAML: the apply patch must be an object, not %s"
                          % type(config).__name__)
    return config


def decode_scale(req):
    """An apply to the scale subresource: its Scale, which the sandbox merges into the
    object's Scale and records as an Update of subresource scale."""
    return _load(req)


def decode(req):
    """The applied configuration of a request body, YAML or JSON."""
    config = _load(req)
    rtype = req.rtype
    api_version = rtype.api_version(req.version)
    if config.get("apiVersion") != api_version or config.get("kind") != rtype.kind:
        given = str(config.get("apiVersion") or "")
        group, _, version = given.rpartition("/")
        raise bad_request("invalid object type: %s/%s, Kind=%s"
                          % (group, version, config.get("kind") or ""))
    meta = config.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise bad_request("metadata must be an object")
    if meta.get("managedFields") is not None:
        raise bad_request("metadata.managedFields must be nil")
    meta.pop("managedFields", None)
    return config


def merge(schema, live, config, names=()):
    """config merged into live, following schema (merge/update.go's Merge)."""
    if isinstance(live, dict) and isinstance(config, dict) and not schema.atomic_map(names):
        out = dict(live)
        for key, value in config.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = merge(schema, live.get(key), value, names + (key,))
        return out
    keys = schema.list_keys(names)
    if keys is not None and isinstance(live, list) and isinstance(config, list):
        out = list(live)
        index = {mf.item_element(keys, item): n for n, item in enumerate(out)}
        for item in config:
            element = mf.item_element(keys, item)
            if element not in index:
                index[element] = len(out)
                out.append(copy.deepcopy(item))
            elif keys != "set" and not schema.item_atomic(names):
                out[index[element]] = merge(schema, out[index[element]], item, names)
            else:
                out[index[element]] = copy.deepcopy(item)
        return out
    return copy.deepcopy(config)


def prune(schema, obj, last, owned):
    """obj without the fields of last (the applier's previous set) that nobody owns now.
    A node goes with everything under it, unless something under it is still owned."""
    gone = sorted((p for p in last - owned if p), key=len)
    for path in gone:
        if any(o[:len(path)] == path and len(o) > len(path) for o in owned):
            continue
        _remove(schema, obj, path)
    return obj


def _remove(schema, obj, path):
    node, names = obj, ()
    for element in path[:-1]:
        node, names = _child(schema, node, element, names)
        if node is None:
            return
    last = path[-1]
    if last.startswith("f:") and isinstance(node, dict):
        node.pop(last[2:], None)
    elif isinstance(node, list):
        keys = schema.list_keys(names)
        if keys is not None:
            node[:] = [i for i in node if mf.item_element(keys, i) != last]


def _child(schema, node, element, names):
    if element.startswith("f:"):
        name = element[2:]
        return (node.get(name) if isinstance(node, dict) else None), names + (name,)
    keys = schema.list_keys(names) if isinstance(node, list) else None
    if keys is None:
        return None, names
    for item in node:
        if mf.item_element(keys, item) == element:
            return item, names
    return None, names


def conflict_error(conflicts):
    """409 Conflict with conflict.go's message and FieldManagerConflict causes.
    conflicts: [(Manager, path)] in the order they are reported."""
    causes = [{"reason": "FieldManagerConflict", "message": "conflict with " + m.describe(),
               "field": mf.path_string(p)} for m, p in conflicts]
    if len(conflicts) == 1:
        manager, path = conflicts[0]
        message = "Apply failed with 1 conflict: conflict with %s: %s" % (
            manager.describe(), mf.path_string(path))
    else:
        lines = []
        for manager in sorted({m.identity: m for m, _ in conflicts}.values(),
                              key=_identity_text):
            lines.append("conflicts with %s:" % manager.describe())
            lines += ["- " + mf.path_string(p) for m, p in conflicts
                      if m.identity == manager.identity]
        message = "Apply failed with %d conflicts: %s" % (len(conflicts), "\n".join(lines))
    return ApiError(409, "Conflict", message, {"causes": causes})


def _identity_text(manager):
    """The managers sort as their identifiers do: JSON of manager, operation, apiVersion."""
    return (manager.manager, manager.operation, manager.identity[2], manager.subresource)


def apply(schema, live, config, who, force):
    """(new object, its managers) for config applied by who (an Apply Manager) to live (the
    stored object, or the kind's zero value for a create); raises the 409 on conflicts."""
    creating = live is None
    if creating:
        # Compared with the kind's zero value, merged into nothing: the zero value's empty
        # structs are no field of the new object.
        live, managers = schema.zero(), mf.Managers()
    else:
        managers = mf.managers_of(live)
        if not managers.by_id:
            mf.record_update(schema, managers, schema.zero(), live,
                             mf.Manager(mf.BEFORE_FIRST_APPLY, "Update", who.api_version))
    previous = managers.get(who.identity)
    last = set(previous.fields) if previous else set()
    mine = mf.Manager(who.manager, "Apply", who.api_version, who.subresource,
                      mf.ignored(mf.field_set(schema, config), schema.rtype, who.subresource),
                      mf.now())
    managers.by_id[who.identity] = mine
    new = merge(schema, {} if creating else copy.deepcopy(live), config)
    if last:
        new = prune(schema, new, last, managers.owned())
    added, modified, removed = mf.compare(schema, live, new)
    changed = mf.ignored(added | modified, schema.rtype, who.subresource)
    removed = mf.ignored(removed, schema.rtype, who.subresource)
    others = sorted(managers.others(who.identity), key=_identity_text)
    conflicts = [(m, p) for m in others for p in sorted(m.fields & changed, key=_path_order)]
    if conflicts and not force and who.manager == KUBECTL:
        allowed = _allowed_by_last_applied(schema, live)
        conflicts = [(m, p) for m, p in conflicts if p not in allowed]
    if conflicts and not force:
        raise conflict_error(conflicts)
    for other in others:
        other.fields -= changed | removed
    managers.drop_empty()
    if who.manager == KUBECTL and _last_applied(live) is not None:
        _set_last_applied(new, config)
    return new, managers


def _last_applied(obj):
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return annotations.get(LAST_APPLIED) or None


def _allowed_by_last_applied(schema, live):
    """The fields the last-applied annotation sets to the values live still has."""
    try:
        last = json.loads(_last_applied(live) or "")
    except ValueError:
        return set()
    if not isinstance(last, dict):
        return set()
    added, modified, removed = mf.compare(schema, last, live)
    return mf.field_set(schema, last) - added - modified - removed


def _set_last_applied(obj, config):
    """buildLastApplied: the configuration without the annotation, as Go's JSON encoder
    writes it (sorted keys, HTML characters escaped, a final newline)."""
    applied = copy.deepcopy(config)
    annotations = applied.get("metadata", {}).get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(LAST_APPLIED, None)
    text = json.dumps(applied, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    obj["metadata"].setdefault("annotations", {})[LAST_APPLIED] = text + "\n"


def _path_order(path):
    return [mf.element_order(e) for e in path]
