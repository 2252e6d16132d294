"""The resource types the sandbox serves: the built-in ones and those CRDs define."""
import re

from .selection import SelectableFields

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUB_VERBS = ["get", "patch", "update"]


def _field(path):
    parts = path.split(".")

    def get(obj):
        node = obj
        for part in parts:
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return ""
        if isinstance(node, bool):
            return "true" if node else "false"
        return str(node)
    return get


# Field selectors each kind supports beyond metadata.name and metadata.namespace,
# from the real server's per-kind field label conversion functions.
EXTRA_FIELDS = {
    "pods": ["spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
             "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
             "status.nominatedNodeName"],
    "events": ["involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
               "involvedObject.uid", "involvedObject.apiVersion",
               "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
               "reportingComponent", "source", "type"],
    "secrets": ["type"],
    "namespaces": ["status.phase"],
    "replicasets": ["status.replicas"],
}


class Scale:
    """Where a kind keeps the numbers its scale subresource shows (CRD-style paths)."""

    def __init__(self, spec_path, status_path, selector_path=None):
        self.spec_path = spec_path
        self.status_path = status_path
        self.selector_path = selector_path


class ResourceType:
    """One served resource: its names, scope, subresources and the versions it is served at."""

    def __init__(self, group, versions, plural, kind, namespaced, short_names=(),
                 singular=None, status=False, scale=None, categories=(), crd_name=None):
        self.group = group
        self.versions = list(versions)
        self.plural = plural
        self.kind = kind
        self.namespaced = namespaced
        self.short_names = list(short_names)
        self.singular = singular or kind.lower()
        self.status = status
        self.scale = scale
        self.categories = list(categories)
        self.crd_name = crd_name
        self.deprecations = {}  # version -> the warning a request at that version gets
        # A CRD's spec.conversion.webhook when its strategy is Webhook: objects are then
        # stored at storage_version and converted by the webhook (conversion.py).
        self.conversion = None
        self.storage_version = None
        self.fields = SelectableFields(bool(crd_name) or plural in EXTRA_FIELDS)
        self.fields["metadata.name"] = _field("metadata.name")
        if namespaced:
            self.fields["metadata.namespace"] = _field("metadata.namespace")
        for path in EXTRA_FIELDS.get(plural, []) if not crd_name else []:
            self.fields[path] = _field(path)

    @property
    def key(self):
        """The group-qualified resource, the store's name for this type (e.g. deployments.apps)."""
        return self.plural + ("." + self.group if self.group else "")

    qualified = key

    def api_version(self, version):
        return "%s/%s" % (self.group, version) if self.group else version

    @property
    def list_kind(self):
        return self.kind + "List"

    def discovery(self):
        """APIResource entries for this type and its subresources."""
        main = {"name": self.plural, "singularName": self.singular,
                "namespaced": self.namespaced, "kind": self.kind, "verbs": VERBS}
        if self.short_names:
            main["shortNames"] = self.short_names
        if self.categories:
            main["categories"] = self.categories
        out = [main]
        if self.status:
            out.append({"name": self.plural + "/status", "singularName": "",
                        "namespaced": self.namespaced, "kind": self.kind, "verbs": SUB_VERBS})
        if self.scale:
            out.append({"name": self.plural + "/scale", "singularName": "",
                        "namespaced": self.namespaced, "group": "autoscaling",
                        "version": "v1", "kind": "Scale", "verbs": SUB_VERBS})
        return out


REPLICAS = Scale(".spec.replicas", ".status.replicas")
RBAC = "rbac.authorization.k8s.io"
ADMISSION = "admissionregistration.k8s.io"


def builtin_types():
    return [
        ResourceType("", ["v1"], "namespaces", "Namespace", False, ["ns"], status=True),
        ResourceType("", ["v1"], "pods", "Pod", True, ["po"], status=True, categories=["all"]),
        ResourceType("", ["v1"], "nodes", "Node", False, ["no"], status=True),
        ResourceType("", ["v1"], "configmaps", "ConfigMap", True, ["cm"]),
        ResourceType("", ["v1"], "secrets", "Secret", True),
        ResourceType("", ["v1"], "services", "Service", True, ["svc"], status=True,
                     categories=["all"]),
        ResourceType("", ["v1"], "events", "Event", True, ["ev"]),
        ResourceType("apps", ["v1"], "deployments", "Deployment", True, ["deploy"],
                     status=True, scale=REPLICAS, categories=["all"]),
        ResourceType("apps", ["v1"], "replicasets", "ReplicaSet", True, ["rs"], status=True,
                     scale=REPLICAS, categories=["all"]),
        ResourceType("", ["v1"], "serviceaccounts", "ServiceAccount", True, ["sa"]),
        ResourceType("coordination.k8s.io", ["v1"], "leases", "Lease", True),
        ResourceType(RBAC, ["v1"], "roles", "Role", True),
        ResourceType(RBAC, ["v1"], "rolebindings", "RoleBinding", True),
        ResourceType(RBAC, ["v1"], "clusterroles", "ClusterRole", False),
        ResourceType(RBAC, ["v1"], "clusterrolebindings", "ClusterRoleBinding", False),
        ResourceType("apiextensions.k8s.io", ["v1"], "customresourcedefinitions",
                     "CustomResourceDefinition", False, ["crd", "crds"], status=True),
        ResourceType(ADMISSION, ["v1"], "mutatingwebhookconfigurations",
                     "MutatingWebhookConfiguration", False, categories=["api-extensions"]),
        ResourceType(ADMISSION, ["v1"], "validatingwebhookconfigurations",
                     "ValidatingWebhookConfiguration", False, categories=["api-extensions"]),
    ]


def version_priority(version):
    """Sort key of kube-aware version ordering: v2 > v1 > v1beta2 > v1beta1 > v1alpha1 > foo."""
    m = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?$", version)
    if not m:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (stage, -int(m.group(1)), -int(m.group(3) or 0), version)


def crd_type(crd):
    """The ResourceType an established CustomResourceDefinition serves."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    served = [v for v in spec.get("versions") or [] if v.get("served")]
    served.sort(key=lambda v: version_priority(v["name"]))
    subresources = {}
    for v in served:
        subresources.update(v.get("subresources") or {})
    scale = None
    if "scale" in subresources:
        s = subresources["scale"] or {}
        scale = Scale(s.get("specReplicasPath", ".spec.replicas"),
                      s.get("statusReplicasPath", ".status.replicas"),
                      s.get("labelSelectorPath"))
    rtype = ResourceType(spec.get("group", ""), [v["name"] for v in served],
                         names.get("plural", ""), names.get("kind", ""),
                         spec.get("scope") == "Namespaced", names.get("shortNames") or [],
                         singular=names.get("singular") or names.get("kind", "").lower(),
                         status="status" in subresources, scale=scale,
                         categories=names.get("categories") or [],
                         crd_name=crd["metadata"]["name"])
    conversion = spec.get("conversion") or {}
    if conversion.get("strategy") == "Webhook":
        rtype.conversion = conversion.get("webhook") or {}
        rtype.storage_version = next((v["name"] for v in spec.get("versions") or []
                                      if v.get("storage")), None)
    for v in served:
        if v.get("deprecated"):
            rtype.deprecations[v["name"]] = v.get("deprecationWarning") or \
                _default_deprecation(spec.get("group", ""), names.get("kind", ""), v["name"], served)
    return rtype


def _default_deprecation(group, kind, version, served):
    """apiextensions-apiserver's defaultDeprecationWarning (pkg/apiserver/
    customresource_handler.go): "G/V Kind is deprecated", and "; use G/V' Kind" naming the
    served version that is not deprecated and sorts first by kube-aware version priority."""
    msg = "%s/%s %s is deprecated" % (group, version, kind)
    current = [v["name"] for v in served if not v.get("deprecated")]
    if current:
        msg += "; use %s/%s %s" % (group, current[0], kind)
    return msg


class Registry:
    """Types by group/version/plural; CRD types come and go with their CRDs."""

    def __init__(self):
        self.builtin = builtin_types()
        self.custom = {}

    def all(self):
        return self.builtin + list(self.custom.values())

    def lookup(self, group, version, plural):
        for t in self.all():
            if t.group == group and t.plural == plural and version in t.versions:
                return t
        return None

    def by_key(self, key):
        return next((t for t in self.all() if t.key == key), None)

    def set_crd(self, crd):
        """Serves (or re-serves) the resource of crd; returns its type."""
        rtype = crd_type(crd)
        self.custom[crd["metadata"]["name"]] = rtype
        return rtype

    def drop_crd(self, name):
        return self.custom.pop(name, None)

    def groups(self):
        """{group: [versions in preference order]} over every served group but core."""
        out = {}
        for t in self.all():
            if t.group:
                versions = out.setdefault(t.group, [])
                versions.extend(v for v in t.versions if v not in versions)
        return {g: sorted(vs, key=version_priority) for g, vs in out.items()}

    def in_group_version(self, group, version):
        return [t for t in self.all() if t.group == group and version in t.versions]
