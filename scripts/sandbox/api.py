"""The REST verbs over the store: get, list, create, update, patch, delete and subresources.

Every method takes a Request and returns (http_code, json_text); errors are ApiError.
A write holds the store lock from read to commit, so writes are atomic like etcd's.
"""
import base64
import binascii
import copy
import json

from . import apply, conversion, defaults, deletion, fields, jsonnum, managedfields, objects, \
    protobuf, webhooks
from .patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from .routes import query_bool
from .selection import FieldSelector, LabelSelector
from .sharding import ShardSelector
from .status import (ApiError, Cause, already_exists, bad_request,
                     conflict, forbidden, internal_error, invalid, not_found,
                     stale_conflict, success, too_large_resource_version,
                     unsupported_media_type)
from .store import Doc, dumps

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
CONTINUE_VERSION = "meta.k8s.io/v1"


class Request:
    """One parsed API call; params holds the first value of each query parameter."""

    def __init__(self, verb, rtype, version, namespace, name, subresource, params, body,
                 content_type, user, user_agent=""):
        self.verb = verb
        self.rtype = rtype
        self.version = version
        self.namespace = namespace
        self.name = name
        self.subresource = subresource
        self.params = params
        self.body = body
        self.content_type = content_type
        self.user = user
        self.user_agent = user_agent
        # The subresource managedFields names for this write (scale writes the main one).
        self.tracked_subresource = subresource
        self.warnings = []
        self.delete_options = None

    def param(self, name, default=""):
        return self.params.get(name, default)

    def flag(self, name):
        return query_bool(self.params, name)

    def dry_run(self):
        return self.param("dryRun") == "All"

    def check_dry_run(self, options_kind, values=None):
        """ValidateDryRun (apimachinery's meta/v1/validation): "All" is the one value a
        write's options take; values is DeleteOptions' list, else the query's."""
        if values is None:
            values = [self.param("dryRun")] if "dryRun" in self.params else []
        for value in values:
            if value != "All":
                raise invalid(options_kind, "meta.k8s.io", "",
                              [Cause("dryRun", "Unsupported value", 'supported values: "All"',
                                     value)])

    def manager(self, operation):
        """Who this write is recorded as in managedFields (managerOrUserAgent in the
        handlers: the fieldManager parameter, else the User-Agent up to its first /)."""
        name = self.param("fieldManager") or "".join(
            c for c in self.user_agent.split("/")[0] if c.isprintable())[:128]
        return managedfields.Manager(name, operation, self.rtype.api_version(self.version),
                                     self.tracked_subresource or "")


def render(rtype, version, data):
    """JSON text of an object as served at version: a custom resource is converted by its
    CRD's conversion webhook, or else changes apiVersion only."""
    api_version = rtype.api_version(version)
    if isinstance(data, Doc):
        if data.data.get("apiVersion") == api_version or not rtype.crd_name:
            return data.text()
        data = data.data
    if rtype.crd_name and data.get("apiVersion") != api_version:
        data = conversion.convert(rtype, [data], api_version)[0]
    return dumps(data)


def render_item(rtype, version, doc):
    """JSON text of an object as an item of a list. kube-apiserver writes the items of
    built-in lists without kind and apiVersion (they are converted as typed objects, whose
    TypeMeta the list encoder leaves empty); custom resources are unstructured and keep
    both, as stored."""
    if rtype.crd_name:
        return render(rtype, version, doc)
    text = doc.text()
    head = dumps({"apiVersion": doc.data.get("apiVersion"), "kind": doc.data.get("kind")})[:-1]
    if text.startswith(head + ","):
        return "{" + text[len(head) + 1:]
    return dumps({k: v for k, v in doc.data.items() if k not in ("apiVersion", "kind")})


def decode_body(req):
    try:
        value = jsonnum.loads(req.body.decode("utf-8") or "null")
    except (UnicodeDecodeError, ValueError) as err:
        raise bad_request("couldn't get version/kind; json parse error: %s" % err) from None
    return value


def decode_object(req):
    if req.content_type not in ("", "application/json", PROTOBUF):
        raise unsupported_media_type(["application/json", PROTOBUF])
    obj = protobuf.decode(req.body) if req.content_type == PROTOBUF else decode_body(req)
    if not isinstance(obj, dict):
        raise bad_request("the request body must be a JSON object")
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise bad_request("metadata must be a JSON object")
    return obj


def check_kind(obj, kind, api_version):
    if obj.get("apiVersion") and obj["apiVersion"] != api_version:
        raise bad_request("the API version in the data (%s) does not match the expected API "
                          "version (%s)" % (obj["apiVersion"], api_version))
    if obj.get("kind") and obj["kind"] != kind:
        raise bad_request("the kind in the data (%s) does not match the expected kind (%s)"
                          % (obj["kind"], kind))
    obj["apiVersion"] = api_version
    obj["kind"] = kind


def check_identity(req, obj):
    meta = obj["metadata"]
    if req.rtype.namespaced:
        if meta.get("namespace") and meta["namespace"] != req.namespace:
            raise bad_request("the namespace of the provided object does not match the "
                              "namespace sent on the request")
        meta["namespace"] = req.namespace
    else:
        meta.pop("namespace", None)
    if req.name and meta.get("name") and meta["name"] != req.name:
        raise bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                          % (meta["name"], req.name))
    if req.name:
        meta["name"] = req.name


def parse_rv(text, what="resourceVersion"):
    try:
        value = int(text)
    except ValueError:
        raise bad_request("%s: Invalid value: \"%s\": must be an integer" % (what, text)) from None
    if value < 0:
        raise bad_request("%s: Invalid value: \"%s\": must be non-negative" % (what, text))
    return value


def encode_continue(rv, last_key):
    token = json.dumps({"v": CONTINUE_VERSION, "rv": rv, "start": last_key + "\x00"},
                       separators=(",", ":"))
    return base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")


def decode_continue(token):
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        if data.get("v") != CONTINUE_VERSION or not isinstance(data.get("rv"), int):
            raise ValueError("unknown continue token version")
        return data["rv"], data["start"]
    except (binascii.Error, ValueError, TypeError, AttributeError, KeyError) as err:
        raise bad_request("continue key is not valid: %s" % err) from None


def list_options_invalid(field, kind, detail, value=None):
    return invalid("ListOptions", "meta.k8s.io", "", [Cause(field, kind, detail, value)])


# How long a consistent LIST waits for the watch cache to catch up with storage before
# storage serves it (kube-apiserver 1.32's cacher: 3 s, then it delegates to etcd).
CONSISTENT_READ_WAIT = 3.0
# How often a write whose object changed while its admission webhooks ran starts over, as
# GuaranteedUpdate tries again on a conflict it made itself.
ADMISSION_RETRIES = 5


class _Changed(Exception):
    """The object a write started from changed while its webhooks ran."""

    def __init__(self, rtype, name):
        super().__init__(name)
        self.rtype = rtype
        self.name = name


class Api:
    """The verbs. rv_wait is how long a read waits for a resourceVersion not reached yet."""

    def __init__(self, store, rv_wait=1.0, cache_fill=1.0):
        self.store = store
        self.rv_wait = rv_wait
        self.cache_fill = cache_fill
        self.defaulter = objects.Defaulter()
        self.admission = webhooks.Admission(store)
        # The ShardedListAndWatch feature gate (KEP-5866): off, shardSelector is ignored.
        self.sharded_list_watch = False

    # -- reads ---------------------------------------------------------------------------

    def get(self, req):
        with self.store.lock:
            doc = self._existing_locked(req)
            if req.subresource == "scale":
                return 200, dumps(self._scale_view(req.rtype, doc.data))
        return 200, render(req.rtype, req.version, doc)

    def _selectors(self, req):
        return (LabelSelector(req.param("labelSelector")),
                FieldSelector(req.param("fieldSelector"), req.rtype.fields),
                ShardSelector(req.param("shardSelector"), self.sharded_list_watch))

    def list(self, req):
        if "sendInitialEvents" in req.params:
            raise list_options_invalid("sendInitialEvents", "Forbidden",
                                       "sendInitialEvents is forbidden for list")
        labels, fields, shard = self._selectors(req)
        limit = parse_rv(req.param("limit") or "0", "limit")
        with self.store.lock:
            items, list_rv, start, limit = self._list_source_locked(req, limit, labels, fields)
            page, next_key, remaining = self._page(req, items, start, limit, labels, fields,
                                                   shard)
        meta = {"resourceVersion": str(list_rv)}
        if next_key is not None:
            meta["continue"] = encode_continue(list_rv, next_key)
            if labels.empty() and fields.empty() and shard.empty():
                meta["remainingItemCount"] = remaining
        if shard.list_meta():
            meta["shardInfo"] = shard.list_meta()
        head = dumps({"kind": req.rtype.list_kind, "apiVersion": req.rtype.api_version(req.version),
                      "metadata": meta})
        if req.rtype.conversion is not None:
            # One ConversionReview for the page, as the list is converted whole.
            page = conversion.convert(req.rtype, [doc.data for doc in page],
                                      req.rtype.api_version(req.version), is_list=True)
        body = ",".join(render_item(req.rtype, req.version, doc) for doc in page)
        return 200, head[:-1] + ',"items":[' + body + "]}"

    def _list_source_locked(self, req, limit, labels, fields):
        """(items by key, list resourceVersion, start key, limit) per the rv semantics table.

        As kube-apiserver 1.32 decides (cacher.go, shouldDelegateList, with the
        ConsistentListFromCache gate on by default since 1.31): a continue token, a limit
        with a resourceVersion other than "0", or resourceVersionMatch=Exact go to storage,
        where resourceVersion=N with a limit and no match is the exact snapshot at N;
        everything else is the watch cache's current state, once it has reached N. While
        the watch cache fills, that is 429, except for a list with a limit and no
        selectors at resourceVersion "" or "0", which storage serves
        (shouldDelegateListOnNotReadyCache). With a watch lag the watch cache trails
        storage: resourceVersion "0" gets its state as it is, N waits until it has reached
        N, and "" (a consistent read) until it has reached storage's revision."""
        rv, match, token = (req.param("resourceVersion"), req.param("resourceVersionMatch"),
                            req.param("continue"))
        if match and not rv:
            raise list_options_invalid("resourceVersionMatch", "Forbidden",
                                       "resourceVersionMatch is forbidden unless "
                                       "resourceVersion is provided")
        if match not in ("", "Exact", "NotOlderThan"):
            raise list_options_invalid("resourceVersionMatch", "Unsupported value",
                                       'supported values: "Exact", "NotOlderThan", ""', match)
        if token:
            if rv not in ("", "0"):
                raise bad_request("specifying resource version is not allowed when using "
                                  "continue")
            token_rv, start = decode_continue(token)
            return self.store.snapshot_locked(req.rtype, token_rv, True), token_rv, start, limit
        if match == "Exact" and parse_rv(rv) == 0:
            raise list_options_invalid("resourceVersionMatch", "Forbidden",
                                       'resourceVersionMatch "exact" is forbidden for '
                                       'resourceVersion "0"')
        if rv:
            wanted = parse_rv(rv)
            self._wait_for_rv_locked(wanted)
            if wanted and (match == "Exact" or (not match and limit)):
                return self.store.snapshot_locked(req.rtype, wanted), wanted, "", limit
            if not self.store.wait_for_cache_locked(wanted, self.rv_wait):
                raise too_large_resource_version(wanted, self.store.cache_rv_locked())
        if not (limit and (rv != "0" or labels.empty() and fields.empty())):
            self.store.check_cache_ready_locked(req.rtype)
        if rv == "" or not self.store.cache_ready_locked(req.rtype):
            # A consistent read: served by the watch cache once it has caught up with
            # storage's revision, or by storage after CONSISTENT_READ_WAIT; either way the
            # current state. With a limit it goes to storage at once.
            if not limit:
                self.store.wait_for_cache_locked(self.store.rv, CONSISTENT_READ_WAIT)
            return self.store.items_locked(req.rtype), self.store.rv, "", limit
        items, cache_rv = self.store.cache_items_locked(req.rtype)
        return items, cache_rv, "", 0 if rv == "0" else limit

    def _wait_for_rv_locked(self, wanted):
        if not self.store.wait_for_rv_locked(wanted, self.rv_wait):
            raise too_large_resource_version(wanted, self.store.rv)

    def _page(self, req, items, start, limit, labels, fields, shard):
        prefix = req.namespace + "/" if req.rtype.namespaced and req.namespace else ""
        keys = sorted(k for k in items if k >= start and k.startswith(prefix))
        page = []
        for n, key in enumerate(keys):
            doc = items[key]
            if (labels.matches(doc.meta.get("labels")) and fields.matches(doc.data)
                    and shard.matches(doc)):
                page.append(doc)
                if limit and len(page) == limit:
                    more = len(keys) - n - 1
                    return page, (key if more else None), more
        return page, None, 0

    # -- create --------------------------------------------------------------------------

    def create(self, req):
        req.check_dry_run("CreateOptions")
        obj = decode_object(req)
        check_kind(obj, req.rtype.kind, req.rtype.api_version(req.version))
        check_identity(req, obj)
        with self.store.lock:
            doc = self._create_locked(req, obj)
        return 201, render(req.rtype, req.version, doc)

    def _create_locked(self, req, obj, managers=None):
        """managers: what an apply made of managedFields; other creates record an Update."""
        rtype, meta = req.rtype, obj["metadata"]
        if rtype.namespaced:
            self._check_namespace_locked(req, meta.get("name") or meta.get("generateName", ""))
        fields.admit(self.store, req, obj)
        # The field manager records the object as the request gave it, before any admission
        # plugin (handlers/create.go): what admission adds is owned by nobody.
        if managers is None:
            schema = self._schema_locked(req)
            managers = managedfields.record_update(
                schema, managedfields.request_managers(obj, None, ""), schema.zero(), obj,
                req.manager("Update"))
        managedfields.store(obj, managers)
        defaults.admission_plugins(rtype, obj)
        # Mutating admission sees the decoded object, before the create strategy names it
        # from generateName and fills the system fields (handlers/create.go, then
        # rest.BeforeCreate); validating admission sees it once validated, before storage.
        obj = self._mutated_locked(req, "CREATE", obj, None)
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = self._generate_name_locked(rtype, req.namespace, meta["generateName"])
        fields.check_schema(self.store, req, obj)
        objects.validate(rtype, obj)
        self.defaulter.on_create(rtype, obj)
        self.admission.validate(req, "CREATE", obj, None)
        if self.store.get_locked(rtype, req.namespace, meta["name"]):
            raise already_exists(rtype, meta["name"])
        if req.dry_run():
            return Doc(obj)
        obj = self._stored_locked(req, obj)
        if self.store.get_locked(rtype, req.namespace, meta["name"]):
            raise already_exists(rtype, meta["name"])
        doc = self.store.commit_locked(rtype, "ADDED", obj, None)
        if rtype.key == objects.CRD_KEY:
            self.store.registry.set_crd(doc.data)
            served = self.store.registry.custom.get(doc.meta["name"])
            if served is not None:
                self.store.new_watch_cache_locked(served, self.cache_fill)
        return doc

    def _generate_name_locked(self, rtype, namespace, prefix):
        for _ in range(8):
            name = objects.generated_name(prefix)
            if not self.store.get_locked(rtype, namespace, name):
                return name
        raise already_exists(rtype, prefix)

    def _check_namespace_locked(self, req, name):
        ns_type = self.store.registry.lookup("", "v1", "namespaces")
        ns = self.store.get_locked(ns_type, "", req.namespace)
        if ns is None:
            raise not_found(ns_type, req.namespace)
        if ns.meta.get("deletionTimestamp"):
            err = forbidden(req.rtype, name, "unable to create new content in namespace %s "
                            "because it is being terminated" % req.namespace)
            err.details["causes"] = [{"reason": "NamespaceTerminating",
                                      "message": "namespace %s is being terminated"
                                                 % req.namespace,
                                      "field": "metadata.namespace"}]
            raise err

    # -- update and patch ----------------------------------------------------------------

    def update(self, req):
        req.check_dry_run("UpdateOptions")
        if req.subresource == "scale":
            return self._update_scale(req, None)
        obj = decode_object(req)
        check_kind(obj, req.rtype.kind, req.rtype.api_version(req.version))
        check_identity(req, obj)
        def attempt():
            cur = self._existing_locked(req)
            return self._update_locked(req, cur, copy.deepcopy(obj))
        doc = self._retrying(attempt)
        return 200, render(req.rtype, req.version, doc)

    def _retrying(self, attempt):
        """attempt() under the store lock, again while the object it started from changed
        during its admission webhooks."""
        with self.store.lock:
            for _ in range(ADMISSION_RETRIES):
                try:
                    return attempt()
                except _Changed as changed:
                    last = changed
            # As GuaranteedUpdate gives up: the object kept changing under the write.
            raise stale_conflict(last.rtype, last.name)

    def _mutated_locked(self, req, operation, obj, old):
        """obj as the mutating webhooks leave it, decoded again as the real server decodes
        a patched object (unknown fields dropped silently, defaults set)."""
        mutated = self.admission.mutate(req, operation, obj, old)
        if mutated is obj:
            return obj
        if not isinstance(mutated, dict) or not isinstance(mutated.get("metadata"), dict):
            raise internal_error("the object admission webhooks returned has no metadata")
        check_kind(mutated, req.rtype.kind, req.rtype.api_version(req.version))
        fields.admit(self.store, req, mutated, quiet=True)
        return mutated

    def _unchanged_locked(self, req, cur):
        """Raises _Changed when the stored object is no longer cur."""
        if self.store.get_locked(req.rtype, req.namespace, cur.meta["name"]) is not cur:
            raise _Changed(req.rtype, cur.meta["name"])

    def _update_locked(self, req, cur, obj, managers=None, old=None):
        """managers: what an apply made of managedFields; other writes record an Update.
        old: cur's object at the request's version, when the caller has it already."""
        rtype = req.rtype
        given_rv = obj["metadata"].get("resourceVersion", "")
        if given_rv and given_rv != cur.meta["resourceVersion"]:
            raise stale_conflict(rtype, cur.meta["name"])
        if not given_rv and rtype.crd_name:
            raise invalid(rtype.kind, rtype.group, cur.meta["name"],
                          [Cause("metadata.resourceVersion", "Invalid value",
                                 "must be specified for an update", 0)])
        if old is None:
            old = self._current_locked(req, cur)
        fields.admit(self.store, req, obj)
        # Mutating admission sees the new object before the update strategy carries status
        # (or the rest) over; validating admission sees it validated (rest/update.go,
        # handlers/update.go's admission transformer). A scale write was mutated as a Scale.
        if req.tracked_subresource != "scale":
            obj = self._mutated_locked(req, "UPDATE", obj, old)
            self._unchanged_locked(req, cur)
        new = objects.carry_over(rtype, old, obj, req.subresource)
        new["metadata"]["resourceVersion"] = cur.meta["resourceVersion"]
        fields.check_schema(self.store, req, new)
        objects.validate(rtype, new, old)
        causes = objects.finalizer_causes(old, new)
        if causes:
            raise invalid(rtype.kind, rtype.group, cur.meta["name"], causes)
        if defaults.has_generation(rtype) and \
                objects.spec_part(new) != objects.spec_part(old):
            new["metadata"]["generation"] = cur.meta.get("generation", 0) + 1
        if managers is None:
            sub = req.tracked_subresource
            managers = managedfields.record_update(
                self._schema_locked(req), managedfields.request_managers(obj, old, sub),
                old, new, req.manager("Update"))
        managedfields.store(new, managers)
        managedfields.keep_times_if_unchanged(new, old)
        if req.tracked_subresource == "scale":
            self.admission.validate(req, "UPDATE", self._scale_view(rtype, new),
                                    self._scale_view(rtype, old))
        else:
            self.admission.validate(req, "UPDATE", new, old)
        self._unchanged_locked(req, cur)
        if new == old or req.dry_run():
            return Doc(new) if req.dry_run() else cur
        new = self._stored_locked(req, new)
        self._unchanged_locked(req, cur)
        if cur.meta.get("deletionTimestamp") and not new["metadata"].get("finalizers") and \
                not cur.meta.get("deletionGracePeriodSeconds"):
            deletion.remove_locked(self.store, rtype, cur)
            return Doc(new)
        doc = self.store.commit_locked(rtype, "MODIFIED", new, cur)
        if rtype.key == objects.CRD_KEY:
            self.store.registry.set_crd(doc.data)
        return doc

    def _current_locked(self, req, cur):
        """The stored object at the request's version: a custom resource with a conversion
        webhook is stored at its storage version and converted (the patcher and the update
        handler work at the request's version)."""
        if req.rtype.conversion is None:
            return cur.data
        return conversion.convert(req.rtype, [cur.data], req.rtype.api_version(req.version),
                                  self.store.lock)[0]

    def _stored_locked(self, req, obj):
        """obj as storage keeps it: a custom resource with a conversion webhook at its
        storage version."""
        if req.rtype.conversion is None:
            return obj
        return conversion.convert(req.rtype, [obj],
                                  req.rtype.api_version(req.rtype.storage_version),
                                  self.store.lock)[0]

    def patch(self, req):
        ctype = req.content_type
        accepted = [JSON_PATCH, MERGE, APPLY] + ([] if req.rtype.crd_name else [STRATEGIC])
        if ctype not in accepted:
            raise unsupported_media_type(accepted)
        apply.check_options(req, ctype == APPLY)
        req.check_dry_run("PatchOptions")
        if req.subresource == "scale":
            patch = apply.decode_scale(req) if ctype == APPLY else decode_body(req)
            return self._update_scale(req, (ctype, patch))
        if ctype == APPLY:
            return self._apply(req)
        patch = decode_body(req)

        def attempt():
            cur = self._existing_locked(req)
            old = self._current_locked(req, cur)
            self._unchanged_locked(req, cur)
            patched = self._patched(ctype, old, patch)
            return self._update_locked(req, cur, self._as_body(req, patched), old=old)
        doc = self._retrying(attempt)
        return 200, render(req.rtype, req.version, doc)

    @staticmethod
    def _patched(ctype, data, patch):
        try:
            if ctype == JSON_PATCH:
                result = json_patch(data, patch)
            elif ctype == STRATEGIC:
                result = strategic_merge_patch(copy.deepcopy(data), patch)
            else:
                result = merge_patch(copy.deepcopy(data), patch)
        except PatchError as err:
            raise ApiError(422, "Invalid", "the server rejected our request due to an error "
                           "in our request", {"causes": [{"message": str(err)}]}) from None
        except (ValueError, TypeError, KeyError) as err:
            raise bad_request(str(err)) from None
        if not isinstance(result, dict) or not isinstance(result.get("metadata"), dict):
            raise bad_request("the patch must leave an object with metadata")
        return result

    def _as_body(self, req, patched):
        check_kind(patched, req.rtype.kind, req.rtype.api_version(req.version))
        check_identity(req, patched)
        return patched

    def _apply(self, req):
        """Server-side apply (apply.py): creates the object when it does not exist."""
        config = apply.decode(req)
        check_identity(req, config)
        who = req.manager("Apply")

        def attempt():
            schema = self._schema_locked(req)
            cur = self.store.get_locked(req.rtype, req.namespace, req.name)
            if cur is None and req.subresource:
                raise not_found(req.rtype, req.name)
            old = None
            if cur is not None:
                old = self._current_locked(req, cur)
                self._unchanged_locked(req, cur)
            new, managers = apply.apply(schema, old, copy.deepcopy(config), who,
                                        req.flag("force"))
            if cur is None:
                return 201, self._create_locked(req, new, managers)
            return 200, self._update_locked(req, cur, new, managers, old)
        code, doc = self._retrying(attempt)
        return code, render(req.rtype, req.version, doc)

    # -- scale ---------------------------------------------------------------------------

    @staticmethod
    def _scale_view(rtype, obj):
        """The autoscaling/v1 Scale of obj, built from the paths its type declares."""
        if rtype.crd_name:
            selector = objects.get_path(obj, rtype.scale.selector_path or ".status.selector")
        else:
            selector = objects.selector_string((obj.get("spec") or {}).get("selector"))
        meta = {k: obj["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                 "creationTimestamp") if k in obj["metadata"]}
        status = {"replicas": objects.get_path(obj, rtype.scale.status_path) or 0}
        if selector:
            status["selector"] = selector
        return {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": meta,
                "spec": {"replicas": objects.get_path(obj, rtype.scale.spec_path) or 0},
                "status": status}

    def _update_scale(self, req, patch):
        body = None if patch else decode_object(req)
        return self._retrying(lambda: self._update_scale_locked(req, patch, body))

    def _update_scale_locked(self, req, patch, body):
        cur = self._existing_locked(req)
        view = self._scale_view(req.rtype, cur.data)
        scale = self._patched(patch[0], view, patch[1]) if patch else body
        # Admitted as Scales (the scale REST storage's scaleUpdatedObjectInfo and
        # toScaleUpdateValidation, pkg/registry/apps/deployment/storage/storage.go).
        scale = self.admission.mutate(req, "UPDATE", scale, view)
        self._unchanged_locked(req, cur)
        if not isinstance(scale, dict):
            raise internal_error("the Scale admission webhooks returned is not an object")
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise invalid("Scale", "autoscaling", cur.meta["name"],
                          [Cause("spec.replicas", "Invalid value",
                                 "must be greater than or equal to 0", replicas)])
        given_rv = (scale.get("metadata") or {}).get("resourceVersion")
        if given_rv and given_rv != cur.meta["resourceVersion"]:
            raise stale_conflict(req.rtype, cur.meta["name"])
        new = copy.deepcopy(cur.data)
        objects.set_path(new, req.rtype.scale.spec_path, replicas)
        main = Request("update", req.rtype, req.version, req.namespace, req.name, "",
                       req.params, b"", "", req.user, req.user_agent)
        main.tracked_subresource = "scale"
        main.warnings = req.warnings
        doc = self._update_locked(main, cur, new)
        return 200, dumps(self._scale_view(req.rtype, doc.data))

    # -- delete --------------------------------------------------------------------------

    def delete(self, req):
        opts = self._delete_options(req)
        with self.store.lock:
            self._existing_locked(req)
            # handlers/delete.go: mutating admission gets neither object; the store's
            # delete validation then gives validating admission the stored one.
            self.admission.mutate(req, "DELETE", None, None)
            self.admission.validate(req, "DELETE", None, self._existing_locked(req).data)
            cur = self._existing_locked(req)
            check_preconditions(req.rtype, cur, opts.get("preconditions") or {})
            self._check_deletable(req.rtype, cur)
            grace = opts.get("gracePeriodSeconds", req.param("gracePeriodSeconds") or None)
            doc, gone = self._delete_locked(req.rtype, cur, opts.get("propagationPolicy") or
                                            req.param("propagationPolicy"), grace, req.dry_run())
        # Like the real server: an object kept by finalizers comes back as it now is; pods
        # come back even when gone; anything else gone answers with a Success Status.
        if not gone or req.rtype.key == "pods":
            return 200, render(req.rtype, req.version, doc)
        return 200, dumps(success(doc.meta["name"], req.rtype, doc.meta.get("uid")))

    def delete_collection(self, req):
        labels, fields, shard = self._selectors(req)
        self._delete_options(req)
        with self.store.lock:
            # handlers/delete.go (DeleteCollection): mutating admission once, for no object
            # and no name; then the store deletes each item with validating admission.
            self.admission.mutate(req, "DELETE", None, None)
            items = self.store.items_locked(req.rtype)
            page, _, _ = self._page(req, dict(items), "", 0, labels, fields, shard)
            for doc in page:
                self._check_deletable(req.rtype, doc)
            done = []
            for doc in page:
                self.admission.validate(req, "DELETE", None, doc.data)
                doc = self.store.get_locked(req.rtype, doc.meta.get("namespace", ""),
                                            doc.meta["name"])
                if doc is not None:
                    done.append(doc if req.dry_run() else
                                self._delete_locked(req.rtype, doc)[0])
        body = ",".join(render_item(req.rtype, req.version, d) for d in done)
        head = dumps({"kind": req.rtype.list_kind, "apiVersion": req.rtype.api_version(req.version),
                      "metadata": {"resourceVersion": str(self.store.rv)}})
        return 200, head[:-1] + ',"items":[' + body + "]}"

    @staticmethod
    def _check_deletable(rtype, doc):
        if rtype.key == "namespaces" and doc.meta["name"] in objects.PROTECTED_NAMESPACES:
            raise forbidden(rtype, doc.meta["name"], "this namespace may not be deleted")

    def _delete_options(self, req):
        opts = {}
        if req.body.strip():
            opts = decode_body(req)
            if not isinstance(opts, dict):
                raise bad_request("DeleteOptions must be a JSON object")
        policy = opts.get("propagationPolicy") or req.param("propagationPolicy")
        if policy and policy not in ("Orphan", "Background", "Foreground"):
            raise invalid("DeleteOptions", "meta.k8s.io", "",
                          [Cause("propagationPolicy", "Unsupported value",
                                 'supported values: "Foreground", "Background", "Orphan", '
                                 '"nil"', policy)])
        # The handler decodes DeleteOptions from the body when there is one, and from the
        # query only when there is none (endpoints/handlers/delete.go): so does dryRun.
        if req.body.strip():
            dry = opts.get("dryRun") or []
            req.check_dry_run("DeleteOptions", dry if isinstance(dry, list) else [dry])
            req.params.pop("dryRun", None)
            if dry:
                req.params["dryRun"] = "All"
        else:
            req.check_dry_run("DeleteOptions")
        req.delete_options = opts
        return opts

    def _delete_locked(self, rtype, cur, policy=None, grace=None, dry=False):
        return deletion.delete_locked(self.store, rtype, cur, policy, grace, dry)

    # -- shared --------------------------------------------------------------------------

    def _schema_locked(self, req):
        """The list and map types managedFields and apply follow for req's objects."""
        return managedfields.Schema(req.rtype, fields.crd_schema(self.store, req))

    def _existing_locked(self, req):
        doc = self.store.get_locked(req.rtype, req.namespace, req.name)
        if doc is None:
            raise not_found(req.rtype, req.name)
        return doc


def check_preconditions(rtype, cur, pre):
    name = cur.meta["name"]
    if pre.get("uid") and pre["uid"] != cur.meta.get("uid"):
        raise conflict(rtype, name, "Precondition failed: UID in precondition: %s, UID in "
                       "object meta: %s" % (pre["uid"], cur.meta.get("uid")))
    if pre.get("resourceVersion") and pre["resourceVersion"] != cur.meta["resourceVersion"]:
        raise conflict(rtype, name, "Precondition failed: ResourceVersion in precondition: %s, "
                       "ResourceVersion in object meta: %s"
                       % (pre["resourceVersion"], cur.meta["resourceVersion"]))
