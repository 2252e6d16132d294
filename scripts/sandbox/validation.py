"""Per-kind validation of built-in objects, as kube-apiserver's pkg/apis/core/validation does it.

Each check names the function of validation.go it models. Causes come back in the order
the real server reports them; the caller turns them into one 422 Invalid.
"""
import base64
import binascii
import json
import re

from . import webhookconfig
from .status import Cause

# k8s.io/apimachinery/pkg/util/validation: IsConfigMapKey.
CONFIG_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")
CONFIG_KEY_MSG = ("a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
                  "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation "
                  "is '[-._a-zA-Z0-9]+')")
# core.MaxSecretSize: the limit on a ConfigMap's or Secret's data, in bytes.
MAX_DATA_SIZE = 1024 * 1024
LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
             "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
             "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
# ValidatePodUpdate: updatablePodSpecFields, joined with "," as the real message joins them.
UPDATABLE_POD_FIELDS = ",".join([
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously "
    "negative)",
])
RESTART_POLICIES = ("Always", "OnFailure", "Never")
DNS_POLICIES = ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def config_key_problems(key):
    """IsConfigMapKey: the messages for a bad ConfigMap or Secret data key."""
    problems = []
    if len(key) > 253:
        problems.append("must be no more than 253 characters")
    if not CONFIG_KEY_RE.match(key):
        problems.append(CONFIG_KEY_MSG)
    if key == ".":
        problems.append("must not be '.'")
    elif key == "..":
        problems.append("must not be '..'")
    elif key.startswith(".."):
        problems.append("must not start with '..'")
    return problems


def _key_causes(section, mapping):
    causes = []
    for key in mapping:
        for problem in config_key_problems(key):
            causes.append(Cause("%s[%s]" % (section, key), "Invalid value", problem, key))
    return causes


def _too_long(field):
    return Cause(field, "Too long", "may not be more than %d bytes" % MAX_DATA_SIZE)


def configmap_causes(obj):
    """ValidateConfigMap: data and binaryData keys, no key in both, 1 MiB in all."""
    data = obj.get("data") or {}
    binary = obj.get("binaryData") or {}
    causes = _key_causes("data", data)
    for key in data:
        if key in binary:
            causes.append(Cause("data[%s]" % key, "Invalid value",
                                "duplicate of key present in binaryData", key))
    causes += _key_causes("binaryData", binary)
    size = sum(len(str(v).encode()) for v in data.values())
    size += sum(len(_decoded(v)) for v in binary.values())
    if size > MAX_DATA_SIZE:
        causes.append(_too_long(""))
    return causes


def _decoded(value):
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        return str(value).encode()


def secret_causes(obj):
    """ValidateSecret: data keys and at most 1 MiB of decoded data."""
    data = obj.get("data") or {}
    causes = _key_causes("data", data)
    if sum(len(_decoded(v)) for v in data.values()) > MAX_DATA_SIZE:
        causes.append(_too_long("data"))
    return causes


def bad_base64(obj):
    """The first data key of a Secret whose value is not base64 (a decode error, 400)."""
    for key, value in (obj.get("data") or {}).items():
        if not isinstance(value, str):
            return key, "json: cannot unmarshal %s into Go struct field Secret.data of " \
                        "type []uint8" % json_type(value)
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return key, "illegal base64 data at input byte %d" % _bad_byte(value)
    return None


def _bad_byte(text):
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
    for i, ch in enumerate(text):
        if ch not in alphabet and ch != "=":
            return i
    return max(0, len(text) - len(text) % 4)


def json_type(value):
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


def _containers_causes(containers, path, names, require_image):
    """validateContainers / validateInitContainers: name (DNS label, unique) and image."""
    causes = []
    for i, ctr in enumerate(containers if isinstance(containers, list) else []):
        ctr = ctr if isinstance(ctr, dict) else {}
        here = "%s[%d]" % (path, i)
        name = ctr.get("name") or ""
        if not name:
            causes.append(Cause(here + ".name", "Required value", ""))
        elif len(name) > 63 or not LABEL_RE.match(name):
            causes.append(Cause(here + ".name", "Invalid value", LABEL_MSG, name))
        elif name in names:
            causes.append(Cause(here + ".name", "Duplicate value", "", name))
        names.add(name)
        if require_image and not ctr.get("image"):
            causes.append(Cause(here + ".image", "Required value", ""))
        policy = ctr.get("imagePullPolicy")
        if policy and policy not in PULL_POLICIES:
            causes.append(Cause(here + ".imagePullPolicy", "Unsupported value",
                                _supported(PULL_POLICIES), policy))
    return causes


def _supported(values):
    return "supported values: " + ", ".join('"%s"' % v for v in values)


def pod_spec_causes(spec, path="spec"):
    """ValidatePodSpec, the parts a client meets first: containers and the enum fields."""
    spec = spec if isinstance(spec, dict) else {}
    causes = []
    names = set()
    causes += _containers_causes(spec.get("initContainers") or [], path + ".initContainers",
                                 names, True)
    containers = spec.get("containers") or []
    if not containers:
        causes.append(Cause(path + ".containers", "Required value", ""))
    causes += _containers_causes(containers, path + ".containers", names, True)
    for field, allowed in (("restartPolicy", RESTART_POLICIES), ("dnsPolicy", DNS_POLICIES)):
        value = spec.get(field)
        if value is not None and value not in allowed:
            causes.append(Cause("%s.%s" % (path, field), "Unsupported value",
                                _supported(allowed), value))
    return causes


def _container_updates(new, old, path):
    """ValidateContainerUpdates: containers may not be added or removed; images are required."""
    new = new if isinstance(new, list) else []
    old = old if isinstance(old, list) else []
    if len(new) != len(old):
        return [Cause(path, "Forbidden", "pod updates may not add or remove containers")], True
    causes = []
    for i, ctr in enumerate(new):
        if isinstance(ctr, dict) and not ctr.get("image"):
            causes.append(Cause("%s[%d].image" % (path, i), "Required value", ""))
    return causes, False


def _toleration_key(t):
    return json.dumps({k: v for k, v in t.items() if k != "tolerationSeconds"}, sort_keys=True)


def _tolerations_causes(new, old):
    """validateOnlyAddedTolerations: existing tolerations stay; only their seconds may drop."""
    new = new if isinstance(new, list) else []
    causes = []
    for t in old if isinstance(old, list) else []:
        if not any(_toleration_key(n) == _toleration_key(t) and
                   _seconds_ok(n.get("tolerationSeconds"), t.get("tolerationSeconds"))
                   for n in new if isinstance(n, dict)):
            causes.append(Cause("spec.tolerations", "Forbidden",
                                "existing toleration can not be modified except its "
                                "tolerationSeconds"))
            break
    return causes


def _seconds_ok(new, old):
    if old is None:
        return new is None
    return new is not None and new <= old


def pod_update_causes(new, old):
    """ValidatePodUpdate: the spec may change only in the fields updatablePodSpecFields names."""
    nspec, ospec = new.get("spec") or {}, old.get("spec") or {}
    causes = []
    for field in ("containers", "initContainers"):
        found, stop = _container_updates(nspec.get(field), ospec.get(field), "spec." + field)
        causes += found
        if stop:
            return causes
    deadline, before = nspec.get("activeDeadlineSeconds"), ospec.get("activeDeadlineSeconds")
    if deadline is not None:
        if not isinstance(deadline, int) or deadline < 0 or deadline > 2147483647:
            return causes + [Cause("spec.activeDeadlineSeconds", "Invalid value",
                                   "must be between 0 and 2147483647, inclusive", deadline)]
        if before is not None and before < deadline:
            return causes + [Cause("spec.activeDeadlineSeconds", "Invalid value",
                                   "must be less than or equal to previous value", deadline)]
    elif before is not None:
        causes.append(Cause("spec.activeDeadlineSeconds", "Invalid value",
                            "must not update from a positive integer to nil value", None))
    causes += _tolerations_causes(nspec.get("tolerations"), ospec.get("tolerations"))
    if nspec == ospec:
        return causes
    munged = json.loads(json.dumps(nspec))
    for field in ("containers", "initContainers"):
        for ctr, was in zip(munged.get(field) or [], ospec.get(field) or []):
            if isinstance(ctr, dict) and isinstance(was, dict):
                _copy_field(ctr, was, "image")
    for field in ("activeDeadlineSeconds", "tolerations", "schedulingGates"):
        _copy_field(munged, ospec, field)
    grace_before = ospec.get("terminationGracePeriodSeconds")
    if isinstance(grace_before, int) and grace_before < 0 and \
            munged.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = grace_before
    if munged != ospec:
        causes.append(Cause("spec", "Forbidden", "pod updates may not change fields other "
                            "than %s\n%s" % (UPDATABLE_POD_FIELDS, spec_diff(ospec, munged))))
    return causes


def _copy_field(target, source, field):
    if field in source:
        target[field] = source[field]
    else:
        target.pop(field, None)


def spec_diff(old, new, path="spec"):
    """The changed paths, one per line as -old/+new (the real server prints a go-cmp diff)."""
    lines = []
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                lines += spec_diff(old.get(key), new.get(key), "%s.%s" % (path, key))
        return lines if path != "spec" else "\n".join(lines)
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            if a != b:
                lines += spec_diff(a, b, "%s[%d]" % (path, i))
        return lines
    lines.append("  %s: - %s + %s" % (path, json.dumps(old), json.dumps(new)))
    return lines


def _selector_matches(selector, labels):
    """metav1.LabelSelectorAsSelector(selector).Matches(labels)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op = expr.get("key"), expr.get("operator")
        values = expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def workload_causes(kind, obj):
    """ValidateDeploymentSpec / ValidateReplicaSetSpec: replicas, selector, pod template."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    causes = []
    replicas = spec.get("replicas")
    if isinstance(replicas, int) and replicas < 0:
        causes.append(Cause("spec.replicas", "Invalid value",
                            "must be greater than or equal to 0", replicas))
    selector = spec.get("selector")
    template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not isinstance(selector, dict):
        causes.append(Cause("spec.selector", "Required value", ""))
    elif not selector.get("matchLabels") and not selector.get("matchExpressions"):
        causes.append(Cause("spec.selector", "Invalid value", "empty selector is invalid for "
                            "%s" % kind.lower(), selector))
    elif not _selector_matches(selector, labels):
        causes.append(Cause("spec.template.metadata.labels", "Invalid value",
                            "`selector` does not match template `labels`", labels))
    causes += pod_spec_causes(template.get("spec"), "spec.template.spec")
    policy = (template.get("spec") or {}).get("restartPolicy")
    if policy is not None and policy != "Always":
        causes.append(Cause("spec.template.spec.restartPolicy", "Unsupported value",
                            'supported values: "Always"', policy))
    return causes


SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")


def service_causes(obj):
    """ValidateService: ports (unless headless or ExternalName), their numbers, the type."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    causes = []
    kind = spec.get("type", "ClusterIP")
    if kind not in SERVICE_TYPES:
        causes.append(Cause("spec.type", "Unsupported value", _supported(SERVICE_TYPES), kind))
    ports = spec.get("ports") or []
    if not ports and spec.get("clusterIP") != "None" and kind != "ExternalName":
        causes.append(Cause("spec.ports", "Required value", ""))
    names = set()
    for i, port in enumerate(ports if isinstance(ports, list) else []):
        port = port if isinstance(port, dict) else {}
        number = port.get("port")
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 65535:
            causes.append(Cause("spec.ports[%d].port" % i, "Invalid value",
                                "must be between 1 and 65535, inclusive", number))
        if len(ports) > 1 and not port.get("name"):
            causes.append(Cause("spec.ports[%d].name" % i, "Required value", ""))
        elif port.get("name") in names:
            causes.append(Cause("spec.ports[%d].name" % i, "Duplicate value", "",
                                port.get("name")))
        names.add(port.get("name"))
    return causes


def kind_causes(rtype, obj):
    """The per-kind checks for a create or the new state of an update."""
    if rtype.key in ("deployments.apps", "replicasets.apps"):
        return workload_causes(rtype.kind, obj)
    if rtype.key in webhookconfig.KEYS:
        return webhookconfig.causes(rtype, obj)
    if rtype.group or rtype.crd_name:
        return []
    if rtype.plural == "configmaps":
        return configmap_causes(obj)
    if rtype.plural == "secrets":
        return secret_causes(obj)
    if rtype.plural == "pods":
        return pod_spec_causes(obj.get("spec"))
    if rtype.plural == "services":
        return service_causes(obj)
    return []


def update_causes(rtype, new, old):
    """The checks only an update has (immutability)."""
    if rtype.key in ("deployments.apps", "replicasets.apps"):
        # apps/v1 ValidateDeploymentUpdate / ValidateReplicaSetUpdate: the selector stays.
        if (new.get("spec") or {}).get("selector") != (old.get("spec") or {}).get("selector"):
            return [Cause("spec.selector", "Invalid value", "field is immutable",
                          (new.get("spec") or {}).get("selector"))]
        return []
    if rtype.group or rtype.crd_name:
        return []
    if rtype.plural == "pods":
        return pod_update_causes(new, old)
    if rtype.plural in ("configmaps", "secrets") and old.get("immutable"):
        causes = []
        if not new.get("immutable"):
            causes.append(Cause("immutable", "Forbidden",
                                "field is immutable when `immutable` is set"))
        for field in ("data", "binaryData") if rtype.plural == "configmaps" else ("data",):
            if (new.get(field) or {}) != (old.get(field) or {}):
                causes.append(Cause(field, "Forbidden",
                                    "field is immutable when `immutable` is set"))
        return causes
    return []
