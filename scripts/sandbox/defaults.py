"""Defaults kube-apiserver 1.32 sets on built-in objects, and which kinds carry a generation.

Three sources, applied where the real server applies them:
- decode defaults, pkg/apis/core/v1/defaults.go (SetDefaults_Pod, SetDefaults_PodSpec,
  SetDefaults_Container, ...) and pkg/apis/apps/v1/defaults.go (SetDefaults_Deployment,
  SetDefaults_ReplicaSet; pod templates get the PodSpec and Container defaults): every
  create and update body gets them, so a PUT of a manifest without them does not look
  like a spec change;
- the pod strategy's PrepareForCreate (pkg/registry/core/pod/strategy.go): status phase
  Pending and the QoS class (pkg/apis/core/helper/qos GetPodQOS);
- admission plugins every cluster runs on create: Priority (priority 0,
  preemptionPolicy PreemptLowerPriority without a priority class) and
  DefaultTolerationSeconds (NoExecute tolerations of node.kubernetes.io/not-ready and
  node.kubernetes.io/unreachable for 300 s unless the pod tolerates them already).
"""
import copy
import re
from fractions import Fraction

from . import webhookconfig

# Kinds whose strategy sets metadata.generation (1 on create, +1 on a spec change). Pods
# only get one from 1.33 on; ConfigMaps, Secrets, Services, Namespaces... never.
GENERATION_KINDS = {"deployments.apps", "replicasets.apps",
                    "customresourcedefinitions.apiextensions.k8s.io"}
NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300
SUFFIXES = {"": 1, "m": Fraction(1, 1000), "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9,
            "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18, "Ki": 2 ** 10, "Mi": 2 ** 20,
            "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def has_generation(rtype):
    return bool(rtype.crd_name) or rtype.key in GENERATION_KINDS


def decode_defaults(rtype, obj):
    """The defaults decoding sets; called on create and update bodies."""
    if rtype.crd_name:
        return
    if rtype.key in webhookconfig.KEYS:
        webhookconfig.set_defaults(rtype, obj)
        return
    spec = obj.setdefault("spec", {}) if rtype.key in ("pods", "deployments.apps",
                                                        "replicasets.apps") else None
    if not isinstance(spec, dict):
        return
    if rtype.key == "pods":
        _pod_spec(spec)
        # SetDefaults_Pod, not SetDefaults_PodSpec: Pods get these, pod templates do not.
        spec.setdefault("enableServiceLinks", True)
        for ctr in _containers(spec):
            _requests_from_limits(ctr)
        return
    spec.setdefault("replicas", 1)
    if rtype.key == "deployments.apps":
        # SetDefaults_Deployment (apps/v1).
        strategy = spec.setdefault("strategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                rolling.setdefault("maxUnavailable", "25%")
                rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    template = spec.setdefault("template", {})
    if isinstance(template, dict):
        # A zero metav1.Time is written as null, so every template shows this.
        meta = template.setdefault("metadata", {})
        if isinstance(meta, dict):
            meta.setdefault("creationTimestamp", None)
        if isinstance(template.setdefault("spec", {}), dict):
            _pod_spec(template["spec"])


def _containers(spec):
    return [c for f in ("initContainers", "containers") for c in spec.get(f) or []
            if isinstance(c, dict)]


def _pod_spec(spec):
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for ctr in _containers(spec):
        _container(ctr)


def _requests_from_limits(ctr):
    """SetDefaults_Pod: requests default to the limits."""
    resources = ctr.get("resources")
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
        requests = resources.setdefault("requests", {})
        for name, value in resources["limits"].items():
            requests.setdefault(name, copy.deepcopy(value))


def _container(ctr):
    ctr.setdefault("resources", {})
    ctr.setdefault("terminationMessagePath", "/dev/termination-log")
    ctr.setdefault("terminationMessagePolicy", "File")
    ctr.setdefault("imagePullPolicy", pull_policy(ctr.get("image") or ""))
    for port in ctr.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def pull_policy(image):
    """SetDefaults_Container: Always for :latest or no tag (and no digest), else IfNotPresent."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def admission_plugins(rtype, obj):
    """What the built-in admission plugins add to a new object. They run before the
    MutatingAdmissionWebhook plugin (the order of kube-apiserver's AllOrderedPlugins,
    pkg/kubeapiserver/options/plugins.go), so mutating webhooks see it."""
    if rtype.group or rtype.crd_name or rtype.plural != "pods":
        return
    spec = obj["spec"]
    if not spec.get("priorityClassName"):
        spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    _default_tolerations(spec)


def on_create(rtype, obj):
    """What the create strategy adds to a new object."""
    if rtype.group or rtype.crd_name or rtype.plural != "pods":
        return
    obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj["spec"])}


def _tolerates(tolerations, key):
    for t in tolerations:
        if not isinstance(t, dict) or t.get("effect") not in (None, "", "NoExecute"):
            continue
        if t.get("key") == key or (not t.get("key") and t.get("operator") == "Exists"):
            return True
    return False


def _default_tolerations(spec):
    tolerations = spec.get("tolerations") or []
    added = [{"key": key, "operator": "Exists", "effect": "NoExecute",
              "tolerationSeconds": DEFAULT_TOLERATION_SECONDS}
             for key in (NOT_READY, UNREACHABLE) if not _tolerates(tolerations, key)]
    if added:
        spec["tolerations"] = list(tolerations) + added


def quantity(text):
    """A resource.Quantity as an exact number, or None when it does not parse."""
    m = QUANTITY_RE.match(str(text).strip())
    if not m:
        return None
    try:
        value = Fraction(m.group(1))
    except ValueError:
        return None
    if m.group(2):
        value *= Fraction(10) ** int(m.group(2)[1:])
    return value * SUFFIXES[m.group(3) or ""]


def qos_class(spec):
    """GetPodQOS: Guaranteed, Burstable or BestEffort from the cpu and memory resources."""
    requests, limits, any_set, guaranteed = {}, {}, False, True
    for ctr in _containers(spec):
        res = ctr.get("resources") or {}
        ctr_limits = set()
        for name, value in (res.get("requests") or {}).items():
            if name in ("cpu", "memory") and (quantity(value) or 0) > 0:
                any_set = True
                requests[name] = requests.get(name, 0) + quantity(value)
        for name, value in (res.get("limits") or {}).items():
            if name in ("cpu", "memory") and (quantity(value) or 0) > 0:
                any_set = True
                ctr_limits.add(name)
                limits[name] = limits.get(name, 0) + quantity(value)
        if ctr_limits != {"cpu", "memory"}:
            guaranteed = False
    if not any_set:
        return "BestEffort"
    if guaranteed and set(requests) == {"cpu", "memory"} and requests == limits:
        return "Guaranteed"
    return "Burstable"
