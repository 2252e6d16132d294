"""Per-kind rules for objects: validation, defaulting on create, and what a write may change."""
import base64
import copy
import random
import re
import time
import uuid

from . import defaults, validation, webhookconfig
from .selection import label_key_problem, label_value_problem
from .status import Cause, invalid

SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                 "characters, '-' or '.', and must start and end with an alphanumeric character "
                 "(e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?"
                 "(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
             "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
             "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
# Kinds whose names must be DNS labels rather than subdomains (ValidateNamespaceName);
# Service names are DNS-1035 labels (ValidateServiceName: they start with a letter).
LABEL_NAMED = {"namespaces"}
DNS1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
               "start with an alphabetic character, and end with an alphanumeric character "
               "(e.g. 'my-name',  or 'abc-123', regex used for validation is "
               "'[a-z]([-a-z0-9]*[a-z0-9])?')")
GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
PROTECTED_NAMESPACES = {"default", "kube-system", "kube-public"}
CRD_KEY = "customresourcedefinitions.apiextensions.k8s.io"


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def generated_name(prefix):
    return prefix + "".join(random.choice(GENERATE_ALPHABET) for _ in range(5))


def get_path(obj, path):
    """Value at a CRD-style JSON path such as .spec.replicas, or None."""
    node = obj
    for part in path.strip(".").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def set_path(obj, path, value):
    parts = path.strip(".").split(".")
    node = obj
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def name_causes(rtype, meta):
    name = meta.get("name")
    if not name:
        return [Cause("metadata.name", "Required value", "name or generateName is required")]
    if rtype.plural == "services" and not rtype.group:
        ok, msg = len(name) <= 63 and DNS1035_RE.match(name), DNS1035_MSG
    elif rtype.plural in LABEL_NAMED and not rtype.group:
        ok, msg = len(name) <= 63 and LABEL_RE.match(name), LABEL_MSG
    else:
        ok, msg = len(name) <= 253 and SUBDOMAIN_RE.match(name), SUBDOMAIN_MSG
    return [] if ok else [Cause("metadata.name", "Invalid value", msg, name)]


def label_causes(meta):
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        return [Cause("metadata.labels", "Invalid value", "must be an object of strings", "")]
    causes = []
    for key, value in labels.items():
        problem = label_key_problem(key)
        if problem:
            causes.append(Cause("metadata.labels", "Invalid value", problem, key))
        elif not isinstance(value, str) or label_value_problem(value):
            causes.append(Cause("metadata.labels", "Invalid value",
                                label_value_problem(str(value)) or "must be a string",
                                value if isinstance(value, str) else str(value)))
    return causes


def crd_causes(crd):
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    causes = []
    if not spec.get("group"):
        causes.append(Cause("spec.group", "Required value", ""))
    for field in ("plural", "kind"):
        if not names.get(field):
            causes.append(Cause("spec.names." + field, "Required value", ""))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(Cause("spec.scope", "Unsupported value",
                            'supported values: "Cluster", "Namespaced"', spec.get("scope", "")))
    versions = spec.get("versions") or []
    if len([v for v in versions if v.get("storage")]) != 1:
        causes.append(Cause("spec.versions", "Invalid value",
                            "must have exactly one version marked as storage version",
                            "[...]"))
    causes += conversion_causes(spec.get("conversion"))
    expected = "%s.%s" % (names.get("plural", ""), spec.get("group", ""))
    if crd["metadata"].get("name") != expected:
        causes.append(Cause("metadata.name", "Invalid value",
                            'must be spec.names.plural+"."+spec.group',
                            crd["metadata"].get("name", "")))
    return causes


def conversion_causes(conversion):
    """spec.conversion as ValidateCustomResourceConversion (apiextensions-apiserver
    pkg/apis/apiextensions/validation/validation.go) checks it, for the sandbox's v1 only."""
    if not isinstance(conversion, dict):
        return []
    strategy = conversion.get("strategy")
    if strategy not in (None, "None", "Webhook"):
        return [Cause("spec.conversion.strategy", "Unsupported value",
                      'supported values: "None", "Webhook"', strategy)]
    if strategy != "Webhook":
        return []
    webhook = conversion.get("webhook")
    if not isinstance(webhook, dict) or not isinstance(webhook.get("clientConfig"), dict):
        return [Cause("spec.conversion.webhook", "Required value",
                      "required when strategy is set to Webhook")]
    versions = webhook.get("conversionReviewVersions")
    if not versions:
        return [Cause("spec.conversion.webhook.conversionReviewVersions", "Required value",
                      "must specify one of v1, v1beta1")]
    if "v1" not in versions:
        return [Cause("spec.conversion.webhook.conversionReviewVersions", "Invalid value",
                      "must include at least one of v1", versions)]
    return webhookconfig.client_causes("spec.conversion.webhook.clientConfig",
                                       webhook["clientConfig"])


def validate(rtype, obj, old=None):
    """Raises 422 Invalid for what the real server's validation would reject.

    old is the stored object when obj is the new state of an update."""
    meta = obj["metadata"]
    causes = name_causes(rtype, meta) + label_causes(meta)
    if rtype.key == CRD_KEY:
        causes += crd_causes(obj)
    causes += validation.kind_causes(rtype, obj)
    if old is not None:
        causes += validation.update_causes(rtype, obj, old)
    if causes:
        raise invalid(rtype.kind, rtype.group, meta.get("name", ""), causes)


def spec_part(obj):
    """What a change to bumps metadata.generation: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class Defaulter:
    """Fills what the real server fills on create. Owns the ClusterIP allocator state."""

    def __init__(self):
        self.next_ip = 1

    def on_create(self, rtype, obj):
        meta = obj["metadata"]
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink",
                      "resourceVersion"):
            meta.pop(field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now()
        if defaults.has_generation(rtype):
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        defaults.on_create(rtype, obj)
        handler = getattr(self, "_" + rtype.plural, None) if not rtype.crd_name else None
        if handler:
            handler(obj)
        elif rtype.crd_name and rtype.status:
            obj.pop("status", None)

    @staticmethod
    def _namespaces(obj):
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}

    def _services(self, obj):
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec["type"] != "ExternalName" and not spec.get("clusterIP"):
            ip = "10.96.%d.%d" % (self.next_ip // 254, self.next_ip % 254 + 1)
            self.next_ip += 1
            spec["clusterIP"] = ip
            spec["clusterIPs"] = [ip]
        obj["status"] = {"loadBalancer": {}}

    @staticmethod
    def _secrets(obj):
        obj.setdefault("type", "Opaque")
        fold_string_data(obj)

    @staticmethod
    def _deployments(obj):
        obj["status"] = {}

    _replicasets = _deployments

    @staticmethod
    def _customresourcedefinitions(obj):
        spec = obj.get("spec") or {}
        names = dict(spec.get("names") or {})
        names.setdefault("singular", names.get("kind", "").lower())
        names.setdefault("listKind", names.get("kind", "") + "List")
        storage = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
        stamp = now()
        obj["status"] = {
            "acceptedNames": names,
            "storedVersions": storage,
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": stamp},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": stamp},
            ],
        }


def fold_string_data(secret):
    """Secrets: stringData is write-only, merged into data base64-encoded."""
    string_data = secret.pop("stringData", None) or {}
    if string_data:
        data = secret.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def carry_over(rtype, old, new, subresource):
    """The object an update stores: new, minus what this kind of write may not change."""
    if subresource == "status":
        result = copy.deepcopy(old)
        if "status" in new:
            result["status"] = new["status"]
        else:
            result.pop("status", None)
        return result
    result = new
    if rtype.status:
        if "status" in old:
            result["status"] = copy.deepcopy(old["status"])
        else:
            result.pop("status", None)
    meta, old_meta = result["metadata"], old["metadata"]
    for field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "generation", "name", "namespace"):
        if field in old_meta:
            meta[field] = old_meta[field]
        else:
            meta.pop(field, None)
    if rtype.plural == "secrets" and not rtype.group:
        fold_string_data(result)
    if rtype.plural == "services" and not rtype.group:
        spec = result.setdefault("spec", {})
        for field in ("clusterIP", "clusterIPs"):
            if field in (old.get("spec") or {}) and not spec.get(field):
                spec[field] = old["spec"][field]
    return result


def finalizer_causes(old, new):
    """A deleting object may lose finalizers but never gain new ones."""
    if not old["metadata"].get("deletionTimestamp"):
        return []
    added = [f for f in new["metadata"].get("finalizers") or []
             if f not in (old["metadata"].get("finalizers") or [])]
    if not added:
        return []
    return [Cause("metadata.finalizers", "Forbidden",
                  "no new finalizers can be added if the object is being deleted, found new "
                  "finalizers []string{%s}" % ", ".join('"%s"' % f for f in added))]


def selector_string(selector):
    """A metav1.LabelSelector as the string a Scale status carries."""
    if not isinstance(selector, dict):
        return ""
    parts = ["%s=%s" % kv for kv in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, key, values = expr.get("operator"), expr.get("key"), expr.get("values") or []
        if op == "In":
            parts.append("%s in (%s)" % (key, ",".join(values)))
        elif op == "NotIn":
            parts.append("%s notin (%s)" % (key, ",".join(values)))
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append("!" + key)
    return ",".join(parts)
