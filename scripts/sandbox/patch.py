"""The three patch formats kube-apiserver accepts, applied to JSON documents.

PatchError means the patch is well formed but cannot be applied (422); ValueError
means the patch itself is malformed (400).
"""
import copy


class PatchError(Exception):
    """A patch that does not apply to the object."""


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch: objects merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# Lists that strategic merge patch merges element by element, keyed by this field, as the
# patchMergeKey struct tags of k8s.io/api declare them. Anything else is replaced whole.
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "env": "name", "volumes": "name", "imagePullSecrets": "name", "resourceClaims": "name",
    "volumeMounts": "mountPath", "volumeDevices": "devicePath", "hostAliases": "ip",
    "conditions": "type", "ownerReferences": "uid", "topologySpreadConstraints": "topologyKey",
    "readinessGates": "conditionType", "webhooks": "name",
}
# Lists of scalars merged as sets (patchStrategy:"merge" on a []string).
PRIMITIVE_MERGE = {"finalizers"}
DIRECTIVE = "$patch"
RETAIN = "$retainKeys"
DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
ORDER = "$setElementOrder/"


def _merge_key(field, items):
    if field == "ports":
        sample = next((i for i in items if isinstance(i, dict)), {})
        return "containerPort" if "containerPort" in sample else "port"
    return MERGE_KEYS.get(field)


def strategic_merge_patch(target, patch):
    """Strategic merge patch for the built-in kinds, with its $patch directives."""
    if not isinstance(patch, dict):
        raise ValueError("strategic merge patch must be a JSON object")
    return _smp_map(target if isinstance(target, dict) else {}, patch)


def _smp_map(target, patch):
    directive = patch.get(DIRECTIVE)
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != DIRECTIVE}
    if directive not in (None, "merge"):
        raise ValueError("Unknown patch type: %s" % directive)
    result = dict(target)
    orders = {}
    for key, value in patch.items():
        if key in (DIRECTIVE, RETAIN):
            continue
        if key.startswith(ORDER):
            orders[key[len(ORDER):]] = value
        elif key.startswith(DELETE_PRIMITIVE):
            field = key[len(DELETE_PRIMITIVE):]
            result[field] = [v for v in result.get(field) or [] if v not in (value or [])]
        elif value is None:
            result.pop(key, None)
        else:
            _smp_field(result, key, value)
    for field, order in orders.items():
        if isinstance(result.get(field), list):
            result[field] = _ordered(result[field], order, _merge_key(field, result[field]))
    if RETAIN in patch:
        keep = set(patch[RETAIN] or [])
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _smp_field(result, key, value):
    current = result.get(key)
    if isinstance(value, dict):
        merged = _smp_map(current if isinstance(current, dict) else {}, value)
        if merged is None:
            result.pop(key, None)
        else:
            result[key] = merged
    elif isinstance(value, list):
        result[key] = _smp_list(key, current if isinstance(current, list) else [], value)
    else:
        result[key] = value


def _smp_list(field, current, patch):
    if any(isinstance(i, dict) and i.get(DIRECTIVE) == "replace" for i in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and DIRECTIVE in i)]
    if field in PRIMITIVE_MERGE:
        return current + [v for v in patch if v not in current]
    key = _merge_key(field, current + patch)
    if key is None or not all(isinstance(i, dict) for i in patch):
        return copy.deepcopy(patch)
    result = list(current)
    for item in patch:
        idx = next((n for n, c in enumerate(result)
                    if isinstance(c, dict) and c.get(key) == item.get(key)), None)
        if item.get(DIRECTIVE) == "delete":
            if idx is not None:
                del result[idx]
        elif idx is None:
            result.append(_smp_map({}, item))
        else:
            result[idx] = _smp_map(result[idx], item)
    return result


def _ordered(items, order, key):
    def identity(item):
        return item.get(key) if key and isinstance(item, dict) else item
    wanted = [identity(o) for o in order]
    rank = {w: n for n, w in enumerate(wanted) if isinstance(w, (str, int, float))}

    def position(item):
        ident = identity(item)
        return rank.get(ident, len(rank)) if isinstance(ident, (str, int, float)) else len(rank)
    return sorted(items, key=position)


def json_patch(target, ops):
    """RFC 6902 JSON patch."""
    if not isinstance(ops, list):
        raise ValueError("json patch must be a JSON array of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ValueError("json patch operation must have 'op' and 'path': %r" % (op,))
        doc = _apply_op(doc, op)
    return doc


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError("json patch path must start with '/': " + path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc, parts, path):
    node = doc
    for part in parts[:-1]:
        node = _child(node, part, path)
    return node


def _child(node, part, path):
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise PatchError("doc is missing path: \"%s\": missing value" % path)


def _get(doc, path):
    node = doc
    for part in _pointer(path):
        node = _child(node, part, path)
    return node


def _add(doc, path, value):
    parts = _pointer(path)
    if not parts:
        return value
    parent, last = _parent(doc, parts, path), parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        idx = len(parent) if last == "-" else _index(last, len(parent) + 1, path)
        parent.insert(idx, value)
    else:
        raise PatchError("doc is missing path: \"%s\": missing value" % path)
    return doc


def _remove(doc, path):
    parts = _pointer(path)
    parent, last = _parent(doc, parts, path), parts[-1] if parts else None
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(last, len(parent), path))
    raise PatchError("unable to remove nonexistent key: %s: missing value" % last)


def _index(part, limit, path):
    if not part.isdigit() or int(part) >= limit:
        raise PatchError("Unable to access invalid index: %s: invalid index referenced: %s"
                         % (part, path))
    return int(part)


def _apply_op(doc, op):
    kind, path = op["op"], op["path"]
    if kind == "add":
        return _add(doc, path, copy.deepcopy(op.get("value")))
    if kind == "remove":
        _remove(doc, path)
        return doc
    if kind == "replace":
        _get(doc, path)
        if _pointer(path):
            _remove(doc, path)
        return _add(doc, path, copy.deepcopy(op.get("value")))
    if kind in ("move", "copy"):
        value = copy.deepcopy(_get(doc, op.get("from", "")))
        if kind == "move":
            _remove(doc, op["from"])
        return _add(doc, path, value)
    if kind == "test":
        if _get(doc, path) != op.get("value"):
            raise PatchError("testing value %s failed: test failed" % path)
        return doc
    raise ValueError("Unexpected kind: " + str(kind))
