"""metadata.managedFields: who owns which fields, kept on every write as kube-apiserver 1.32 does.

Sources: k8s.io/apimachinery/pkg/util/managedfields/internal (fieldmanager.go,
structuredmerge.go, managedfieldsupdater.go, stripmeta.go, skipnonapplied.go,
conflict.go, managedfields.go) and sigs.k8s.io/structured-merge-diff/v4 (fieldpath,
typed/compare.go, typed/tofieldset.go, merge/update.go).

- A field set is a set of paths; a path is a tuple of FieldsV1 elements: "f:name" for a
  field, 'k:{"name":"web"}' for an item of a list merged by key, 'v:"x"' for an item of a
  list of scalars kept as a set. FieldsV1 is the set as a tree, with "." marking a node
  that is itself a member and has children.
- What is a granular map or list and what is atomic comes from the schema: the tables below
  hold the list types and atomic structs of k8s.io/api 1.32 that matter for the common
  built-ins; every other object is a granular map and every other list atomic. Custom
  resources follow their schema: x-kubernetes-list-type (map with
  x-kubernetes-list-map-keys, set, atomic: the default) and x-kubernetes-map-type /
  x-kubernetes-struct-type atomic.
- An Update (create, update, non-apply patch, status and scale writes) gives its manager
  the fields it changed (added or modified, typed.Compare) and takes them from every other
  manager; fields it removed leave every manager. The entry's time moves only when the
  write changed a field of it (managedfieldsupdater.go). Past 10 Update entries the
  oldest are merged into an `ancient-changes` entry per apiVersion (capmanagers.go).
- apiVersion, kind, metadata itself, name, namespace, uid, resourceVersion, generation,
  creationTimestamp, selfLink and managedFields are never owned (stripmeta.go), nor is
  status on the main resource of a kind with a status subresource, nor anything but status
  through the status subresource (the strategies' reset fields).
"""
import copy
import json
import time

STRIPPED = {("f:apiVersion",), ("f:kind",), ("f:metadata",)} | {
    ("f:metadata", "f:" + name) for name in (
        "name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName",
        "generation", "managedFields", "resourceVersion")}
BEFORE_FIRST_APPLY = "before-first-apply"
# capmanagers.go: past this many Update entries the oldest merge into one per apiVersion.
MAX_UPDATE_MANAGERS = 10
ANCIENT_CHANGES = "ancient-changes"

# Lists merged by key (+listType=map, +listMapKey in k8s.io/api 1.32), by field name.
MAP_LISTS = {
    "containers": ("name",), "initContainers": ("name",), "ephemeralContainers": ("name",),
    "env": ("name",), "volumes": ("name",), "imagePullSecrets": ("name",),
    "resourceClaims": ("name",), "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",), "hostAliases": ("ip",), "conditions": ("type",),
    "ownerReferences": ("uid",), "readinessGates": ("conditionType",),
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
}
CONTAINER_PORT_KEYS = ("containerPort", "protocol")
SERVICE_PORT_KEYS = ("port", "protocol")
# Key fields the schema defaults, which an applied item may leave out.
KEY_DEFAULTS = {"protocol": "TCP"}
# Structs and maps marked +structType=atomic or +mapType=atomic: owned and replaced whole.
ATOMIC_NAMES = {"nodeSelector", "involvedObject"}
ATOMIC_SELECTOR_KINDS = {"deployments.apps", "replicasets.apps", "services"}
# Structs the zero value of a built-in kind already has (Go value fields, not pointers):
# a write that fills them does not add them themselves, only their fields.
POD_TEMPLATE_ZERO = {"metadata": {"creationTimestamp": None}, "spec": {"containers": None}}
ZERO = {
    "pods": {"spec": {"containers": None}, "status": {}},
    "deployments.apps": {"spec": {"template": POD_TEMPLATE_ZERO, "strategy": {}},
                         "status": {}},
    "replicasets.apps": {"spec": {"template": POD_TEMPLATE_ZERO}, "status": {}},
    "events": {"involvedObject": {}, "source": {}},
    "leases.coordination.k8s.io": {"spec": {}},
}
# Every other kind with a status subresource has a spec and a status struct.
ZERO_WITH_STATUS = {"spec": {}, "status": {}}


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Schema:
    """The list and map types of one resource type's objects, by their field path.
    openapi: a custom resource's openAPIV3Schema (None: every list atomic)."""

    def __init__(self, rtype, openapi=None):
        self.rtype = rtype
        self.custom = bool(rtype.crd_name)
        self.openapi = openapi if isinstance(openapi, dict) else {}

    def _node(self, names):
        """The schema node of the field at names (list items: their items schema)."""
        node = self.openapi
        for n, name in enumerate(names):
            node = (node.get("properties") or {}).get(name) or \
                (node.get("additionalProperties") if isinstance(
                    node.get("additionalProperties"), dict) else None) or {}
            if node.get("type") == "array" and n < len(names) - 1:
                node = node.get("items") or {}
        return node

    def _custom_list_keys(self, names):
        node = self._node(names)
        kind = node.get("x-kubernetes-list-type")
        if kind == "set":
            return "set"
        if kind == "map":
            return tuple(node.get("x-kubernetes-list-map-keys") or ()) or None
        return None

    def _custom_atomic(self, names):
        node = self._node(names)
        return "atomic" in (node.get("x-kubernetes-map-type"), node.get("x-kubernetes-struct-type"))

    def zero(self):
        """The object the kind's Go zero value encodes to (New() in the real server)."""
        if self.custom:
            return {}
        return copy.deepcopy(ZERO.get(self.rtype.key,
                                      ZERO_WITH_STATUS if self.rtype.status else {}))

    def atomic_map(self, names):
        if not names:
            return False
        if self.custom and names[0] != "metadata":
            return self._custom_atomic(names)
        if names[-1] in ATOMIC_NAMES:
            return True
        return names == ("spec", "selector") and self.rtype.key in ATOMIC_SELECTOR_KINDS

    def list_keys(self, names):
        """The key fields of the list at names, "set" for a set of scalars, or None (atomic)."""
        if not names:
            return None
        if names[0] == "metadata":
            return {"finalizers": "set", "ownerReferences": ("uid",)}.get(names[-1]) \
                if len(names) == 2 else None
        if self.custom:
            return self._custom_list_keys(names)
        if names[-1] == "ports":
            return SERVICE_PORT_KEYS if names == ("spec", "ports") and \
                self.rtype.key == "services" else CONTAINER_PORT_KEYS
        return MAP_LISTS.get(names[-1])

    def item_atomic(self, names):
        if names[:1] == ("metadata",) or not self.custom:
            return names[-1:] == ("ownerReferences",)
        items = self._node(names).get("items") or {}
        return "atomic" in (items.get("x-kubernetes-map-type"),
                            items.get("x-kubernetes-struct-type"))


def item_element(keys, item):
    """The path element of a list item: k:{...} by its key fields, or v:value."""
    if keys == "set":
        return "v:" + _json(item)
    key = {}
    for name in keys:
        value = item.get(name, KEY_DEFAULTS.get(name)) if isinstance(item, dict) else None
        if value is not None:
            key[name] = value
    return "k:" + _json(dict(sorted(key.items())))


def _json(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _is_map(value):
    return isinstance(value, dict)


# -- field sets of objects --------------------------------------------------------------

def field_set(schema, obj):
    """The fields an applied configuration sets (typed.ToFieldSet): its scalars, atomic
    lists and maps, and list items; granular maps only through their fields."""
    out = set()
    _collect(schema, obj, (), (), out)
    return out


def _collect(schema, value, path, names, out):
    if _is_map(value) and not schema.atomic_map(names):
        for key, child in value.items():
            _collect(schema, child, path + ("f:" + key,), names + (key,), out)
        return
    keys = schema.list_keys(names) if isinstance(value, list) else None
    if keys is None:
        if path:
            out.add(path)
        return
    for item in value:
        here = path + (item_element(keys, item),)
        out.add(here)
        if keys != "set" and _is_map(item) and not schema.item_atomic(names):
            for key, child in item.items():
                _collect(schema, child, here + ("f:" + key,), names + (key,), out)


def compare(schema, old, new):
    """(added, modified, removed) paths between two objects (typed.Compare): a node that
    appears or goes is itself in the set, with everything under it; a map empty on both
    sides is a leaf."""
    diff = (set(), set(), set())
    _compare(schema, old, new, (), (), diff)
    return diff


MISSING = object()


def _empty(value):
    return value is MISSING or value is None or value == {} or value == []


def _absent(value):
    """MISSING or null: a null in the zero object is there (the node is not added), but
    holds nothing."""
    return value is MISSING or value is None


def _compare(schema, old, new, path, names, diff):
    added, removed = diff[0], diff[2]
    if old is MISSING and new is MISSING:
        return
    maps = all(_absent(v) or _is_map(v) for v in (old, new))
    if maps and not schema.atomic_map(names) and not (_empty(old) and _empty(new)):
        if path and old is MISSING:
            added.add(path)
        elif path and new is MISSING:
            removed.add(path)
        _compare_fields(schema, old, new, path, names, diff)
        return
    keys = schema.list_keys(names)
    if keys is not None and all(_absent(v) or isinstance(v, list) for v in (old, new)) and \
            not (_empty(old) and _empty(new)):
        if old is MISSING:
            added.add(path)
        elif new is MISSING:
            removed.add(path)
        lhs = _items(keys, old if isinstance(old, list) else [])
        rhs = _items(keys, new if isinstance(new, list) else [])
        for element in list(lhs) + [e for e in rhs if e not in lhs]:
            here = path + (element,)
            left, right = lhs.get(element, MISSING), rhs.get(element, MISSING)
            if keys == "set" or schema.item_atomic(names) or \
                    not all(v is MISSING or _is_map(v) for v in (left, right)):
                _leaf(left, right, here, diff)
                continue
            if left is MISSING:
                added.add(here)
            elif right is MISSING:
                removed.add(here)
            _compare_fields(schema, left, right, here, names, diff)
        return
    _leaf(old, new, path, diff)


def _compare_fields(schema, old, new, path, names, diff):
    lhs = old if _is_map(old) else {}
    rhs = new if _is_map(new) else {}
    for key in list(lhs) + [k for k in rhs if k not in lhs]:
        _compare(schema, lhs.get(key, MISSING), rhs.get(key, MISSING), path + ("f:" + key,),
                 names + (key,), diff)


def _items(keys, items):
    return {item_element(keys, item): item for item in items}


def _leaf(old, new, path, diff):
    added, modified, removed = diff
    if old is MISSING:
        added.add(path)
    elif new is MISSING:
        removed.add(path)
    elif old != new:
        modified.add(path)


def ignored(paths, rtype, subresource):
    """paths without the ones nobody owns (stripmeta.go, the strategy's reset fields)."""
    out = {p for p in paths if p and p not in STRIPPED}
    if subresource == "status":
        return {p for p in out if p[0] == "f:status"}
    if rtype.status and not subresource:
        out = {p for p in out if p[0] != "f:status"}
    return out


# -- FieldsV1 ---------------------------------------------------------------------------

def to_fields_v1(paths):
    """The FieldsV1 tree of a set of paths, members marked "." where they have children,
    elements in the order fieldpath's serializer writes them (fields, keys, values)."""
    tree = {}
    for path in paths:
        node = tree
        for element in path:
            node = node.setdefault(element, {})
        node.setdefault(".", None)
    return _emit(tree)


def element_order(element):
    return ("fkvi".index(element[0]) if element[0] in "fkvi" else 4, element)


def _emit(node):
    children = {k: v for k, v in node.items() if k != "."}
    out = {}
    if children and "." in node:
        out["."] = {}
    for element in sorted(children, key=element_order):
        out[element] = _emit(children[element])
    return out


def from_fields_v1(tree, prefix=()):
    paths = set()
    if not isinstance(tree, dict):
        raise ValueError("fieldsV1 must be an object")
    for element, child in tree.items():
        if element == ".":
            paths.add(prefix)
            continue
        here = prefix + (element,)
        if not child:
            paths.add(here)
        else:
            paths |= from_fields_v1(child, here)
    return paths


def path_string(path):
    """A path as fieldpath.Path.String() writes it: .spec.containers[name="web"].image."""
    out = []
    for element in path:
        kind, text = element[0], element[2:]
        if kind == "f":
            out.append("." + text)
        elif kind == "k":
            key = json.loads(text)
            out.append("[" + ",".join("%s=%s" % (name, _json(value))
                                      for name, value in key.items()) + "]")
        elif kind == "v":
            out.append("[=%s]" % text)
        else:
            out.append("[%s]" % text)
    return "".join(out)


# -- managers -----------------------------------------------------------------------------

class Manager:
    """One managedFields entry: its identity, its field set and its time."""

    def __init__(self, manager, operation, api_version, subresource="", fields=None,
                 stamp=None):
        self.manager = manager
        self.operation = operation
        self.api_version = api_version
        self.subresource = subresource
        self.fields = set(fields or ())
        self.time = stamp

    @property
    def identity(self):
        """BuildManagerIdentifier: appliers are one manager whatever apiVersion they use."""
        version = "" if self.operation == "Apply" else self.api_version
        return (self.manager, self.operation, version, self.subresource)

    def describe(self):
        """How a conflict names this manager (conflict.go printManager)."""
        text = json.dumps(self.manager)
        if self.subresource:
            text += " with subresource %s" % json.dumps(self.subresource)
        if self.operation == "Update":
            text += " using " + self.api_version
        return text

    def sort_key(self):
        """sortEncodedManagedFields: Apply before Update, then by time, manager, version."""
        return (self.operation, self.time or "", self.manager, self.api_version,
                self.subresource)

    def entry(self):
        out = {"manager": self.manager, "operation": self.operation,
               "apiVersion": self.api_version}
        if self.time:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = to_fields_v1(self.fields)
        if self.subresource:
            out["subresource"] = self.subresource
        return out


class Managers:
    """The decoded managedFields of an object, by manager identity."""

    def __init__(self, managers=()):
        self.by_id = {}
        for m in managers:
            self.by_id[m.identity] = m

    @classmethod
    def decode(cls, entries):
        """The managers of a managedFields list; ValueError when an entry does not decode
        (DecodeManagedFields)."""
        if not isinstance(entries, list):
            raise ValueError("managedFields must be a list")
        managers = []
        for entry in entries:
            if not isinstance(entry, dict) or entry.get("operation") not in ("Apply", "Update"):
                raise ValueError("operation must be `Apply` or `Update`")
            if entry.get("fieldsType") != "FieldsV1":
                raise ValueError("invalid fieldsType")
            managers.append(Manager(entry.get("manager", ""), entry["operation"],
                                    entry.get("apiVersion", ""), entry.get("subresource", ""),
                                    from_fields_v1(entry.get("fieldsV1") or {}),
                                    entry.get("time")))
        return cls(managers)

    def get(self, identity):
        return self.by_id.get(identity)

    def others(self, identity):
        return [m for i, m in self.by_id.items() if i != identity]

    def owned(self):
        out = set()
        for m in self.by_id.values():
            out |= m.fields
        return out

    def drop_empty(self):
        self.by_id = {i: m for i, m in self.by_id.items() if m.fields}

    def encode(self):
        return [m.entry() for m in sorted(self.by_id.values(), key=Manager.sort_key)]


def managers_of(obj):
    """The managers recorded in a stored object (an undecodable list counts as none)."""
    try:
        return Managers.decode(obj.get("metadata", {}).get("managedFields") or [])
    except ValueError:
        return Managers()


def request_managers(body, live, subresource):
    """Whose fields an update starts from (FieldManager.Update): the managedFields the
    request sent if they decode and are not empty, except on a subresource; else the live
    object's. [{}] decodes to nothing: it resets them (the documented way to strip them)."""
    given = body.get("metadata", {}).get("managedFields")
    if given == [{}] and not subresource:
        return Managers()
    if given and not subresource:
        try:
            return Managers.decode(given)
        except ValueError:
            pass
    return managers_of(live) if live is not None else Managers()


def record_update(schema, managers, old, new, who):
    """An Update by manager who from old to new (merge.Updater.Update with force, through
    managedFieldsUpdater): returns managers changed in place."""
    added, modified, removed = compare(schema, old, new)
    changed = ignored(added | modified, schema.rtype, who.subresource)
    removed = ignored(removed, schema.rtype, who.subresource)
    for other in managers.others(who.identity):
        other.fields -= changed | removed
    mine = managers.get(who.identity)
    if mine is not None:
        mine.fields -= removed
    if changed:
        if mine is None:
            mine = who
            managers.by_id[who.identity] = who
        mine.fields |= changed
        mine.time = now()
    managers.drop_empty()
    cap_update_managers(managers)
    return managers


def cap_update_managers(managers):
    """capUpdateManagers: oldest first (by time, then identity), each Update entry past the
    cap joins the first one of its apiVersion in an ancient-changes entry, which takes the
    time of the newest entry merged into it."""
    updaters = sorted((m for m in managers.by_id.values() if m.operation == "Update"),
                      key=lambda m: (m.time or "", m.identity))
    length, first = len(updaters), {}
    for manager in updaters:
        if length <= MAX_UPDATE_MANAGERS:
            break
        version = manager.api_version
        if version not in first:
            first[version] = manager
            continue
        bucket_id = (ANCIENT_CHANGES, "Update", version, "")
        if bucket_id not in managers.by_id:
            oldest = managers.by_id.pop(first[version].identity)
            managers.by_id[bucket_id] = Manager(ANCIENT_CHANGES, "Update", version, "",
                                                oldest.fields, oldest.time)
        bucket = managers.by_id[bucket_id]
        bucket.fields |= manager.fields
        bucket.time = manager.time
        del managers.by_id[manager.identity]
        length -= 1


def store(obj, managers):
    """Writes managers into obj's metadata (none: no managedFields at all)."""
    entries = managers.encode()
    if entries:
        obj["metadata"]["managedFields"] = entries
    else:
        obj["metadata"].pop("managedFields", None)


def keep_times_if_unchanged(new, old):
    """IgnoreManagedFieldsTimestampsTransformer: a write that changes nothing but the times
    of managedFields keeps the old ones, so it stores nothing."""
    new_entries = new["metadata"].get("managedFields")
    old_entries = old["metadata"].get("managedFields")
    if not new_entries or not old_entries or len(new_entries) != len(old_entries):
        return
    untimed = [[{k: v for k, v in e.items() if k != "time"} for e in entries]
               for entries in (new_entries, old_entries)]
    if untimed[0] != untimed[1]:
        return
    rest = [dict(o, metadata={k: v for k, v in o["metadata"].items() if k != "managedFields"})
            for o in (new, old)]
    if rest[0] == rest[1]:
        new["metadata"]["managedFields"] = copy.deepcopy(old_entries)
