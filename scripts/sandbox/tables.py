"""Table output (Accept: application/json;as=Table;g=meta.k8s.io;v=v1), as kubectl get asks.

Columns and cells follow pkg/printers/internalversion/printers.go (pods, configmaps,
secrets, namespaces, nodes, services, deployments, replicasets), the CRD table convertor of apiextensions-apiserver
(additionalPrinterColumns, or Name and Age) and the default convertor for the rest
(Name and Created At). Rows carry a PartialObjectMetadata unless includeObject=Object
(None leaves it out), as the real server does.
"""
import calendar
import json
import re
import time

from .status import ApiError
from .store import dumps

NAME = {"name": "Name", "type": "string", "format": "name", "priority": 0,
        "description": "Name must be unique within a namespace. More info: "
                       "https://kubernetes.io/docs/concepts/overview/working-with-objects/"
                       "names#names"}


def _col(name, kind="string", priority=0, description="", fmt=""):
    return {"name": name, "type": kind, "format": fmt, "priority": priority,
            "description": description}


AGE = _col("Age", description="CreationTimestamp is a timestamp representing the server time "
           "when this object was created.")


def wanted_version(accept):
    """The meta.k8s.io version of Table the Accept header asks for, or None."""
    for clause in (accept or "").split(","):
        params = dict(p.strip().split("=", 1) for p in clause.split(";")[1:] if "=" in p)
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io" and \
                params.get("v") in ("v1", "v1beta1"):
            return params["v"]
    return None


# What NegotiateOutputMediaType's 406 lists: the serializer's media types (1.32, CBOR off).
MEDIA_TYPES = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")


def check_watch_list(accept):
    """A watch-list request (sendInitialEvents=true, allowWatchBookmarks=true) may not have
    the Table form: kube-apiserver 1.32 and 1.33 negotiate its Accept header with
    watchListEndpointRestrictions (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/
    get.go; added by kubernetes#126996, removed in 1.34), which refuses a Table clause, so
    negotiation moves on to the next one. Returns when another clause takes the objects
    (application/json, a wildcard, or the metadata-only form); raises 406 otherwise."""
    for clause in (accept or "").split(","):
        parts = [p.strip() for p in clause.split(";")]
        params = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        if params.get("as") != "Table" and parts[0] in ("application/json", "application/*", "*/*"):
            return
    raise ApiError(406, "NotAcceptable", "only the following media types are accepted: %s"
                   % ", ".join(MEDIA_TYPES))


def _two_units(n, unit, rest, rest_unit):
    """n of a unit and the rest in the next smaller one, the rest left out when 0."""
    return "%d%s" % (n, unit) if rest == 0 else "%d%s%d%s" % (n, unit, rest, rest_unit)


def human_duration(seconds):
    """k8s.io/apimachinery/pkg/util/duration HumanDuration."""
    if seconds < -1:
        return "<invalid>"
    seconds = max(int(seconds), 0)
    if seconds < 120:
        return "%ds" % seconds
    minutes = seconds // 60
    if minutes < 10:
        return _two_units(minutes, "m", seconds % 60, "s")
    if minutes < 180:
        return "%dm" % minutes
    hours = minutes // 60
    if hours < 8:
        return _two_units(hours, "h", minutes % 60, "m")
    if hours < 48:
        return "%dh" % hours
    if hours < 192:
        return _two_units(hours // 24, "d", hours % 24, "h")
    if hours < 24 * 365 * 2:
        return "%dd" % (hours // 24)
    return "%dy" % (hours // (24 * 365))


def age(stamp):
    if not stamp:
        return "<unknown>"
    try:
        then = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return "<unknown>"
    return human_duration(time.time() - then)


def _pod_status(pod):
    """printPod's STATUS: the phase, refined by the containers' states."""
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or ""
    running = False
    for cs in reversed(status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
        elif state.get("terminated"):
            t = state["terminated"]
            reason = ("Signal:%d" % t["signal"]) if t.get("signal") else \
                "ExitCode:%d" % t.get("exitCode", 0)
        elif state.get("running") and cs.get("ready"):
            running = True
    if reason == "Completed" and running:
        reason = "Running"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod_cells(pod):
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for cs in statuses if cs.get("ready"))
    restarts = sum(cs.get("restartCount", 0) for cs in statuses)
    last = max([((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt", "")
                for cs in statuses] or [""])
    restarts_text = str(restarts) if not last else "%d (%s ago)" % (restarts, age(last))
    gates = spec.get("readinessGates") or []
    gate_text = "<none>"
    if gates:
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        gate_text = "%d/%d" % (sum(1 for g in gates if conditions.get(g.get("conditionType"))
                                   == "True"), len(gates))
    return ["%d/%d" % (ready, len(spec.get("containers") or [])), _pod_status(pod), restarts_text, age(pod["metadata"].get("creationTimestamp")),
            status.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>", gate_text]


POD_COLUMNS = [
    _col("Ready", description="The aggregate readiness state of this pod for accepting "
         "traffic."),
    _col("Status", description="The aggregate status of the containers in this pod."),
    _col("Restarts", description="The number of times the containers in this pod have been "
         "restarted and when the last container in this pod has restarted."),
    AGE,
    _col("IP", priority=1, description="IP address allocated to the pod. Routable at least "
         "within the cluster. Empty if not yet allocated."),
    _col("Node", priority=1, description="NodeName is a request to schedule this pod onto a "
         "specific node."),
    _col("Nominated Node", priority=1, description="nominatedNodeName is set only when this "
         "pod preempts other pods on the node."),
    _col("Readiness Gates", priority=1, description="If specified, all readiness gates will "
         "be evaluated for pod readiness."),
]


def _node_cells(node):
    status = node.get("status") or {}
    ready = {c.get("type"): c.get("status") for c in status.get("conditions") or []}.get("Ready")
    state = "Ready" if ready == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels
                   if k.startswith("node-role.kubernetes.io/"))
    return [state, ",".join(roles) or "<none>", age(node["metadata"].get("creationTimestamp")),
            (status.get("nodeInfo") or {}).get("kubeletVersion", "")]


def _template_columns(obj):
    """The wide columns of workloads: containers, images and the selector."""
    spec = obj.get("spec") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    selector = spec.get("selector") or {}
    parts = ["%s=%s" % kv for kv in sorted((selector.get("matchLabels") or {}).items())]
    return [",".join(c.get("name", "") for c in containers),
            ",".join(c.get("image", "") for c in containers), ",".join(parts) or "<none>"]


WIDE_WORKLOAD = [_col("Containers", priority=1, description="Names of each container in the "
                      "template."),
                 _col("Images", priority=1, description="Images referenced by each container "
                      "in the template."),
                 _col("Selector", priority=1, description="Label selector for pods.")]


def _deployment_cells(obj):
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return ["%d/%d" % (status.get("readyReplicas", 0), spec.get("replicas", 0)),
            status.get("updatedReplicas", 0), status.get("availableReplicas", 0),
            age(obj["metadata"].get("creationTimestamp"))] + _template_columns(obj)


def _replicaset_cells(obj):
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return [spec.get("replicas", 0), status.get("replicas", 0),
            status.get("readyReplicas", 0),
            age(obj["metadata"].get("creationTimestamp"))] + _template_columns(obj)


def _service_cells(obj):
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    kind = spec.get("type", "ClusterIP")
    external = ",".join(spec.get("externalIPs") or [])
    if kind == "ExternalName":
        external = spec.get("externalName", "")
    elif kind == "LoadBalancer":
        ingress = (status.get("loadBalancer") or {}).get("ingress") or []
        external = ",".join(i.get("ip") or i.get("hostname", "") for i in ingress) or \
            external or "<pending>"
    ports = []
    for p in spec.get("ports") or []:
        text = "%s/%s" % (p.get("port"), p.get("protocol", "TCP"))
        if p.get("nodePort"):
            text = "%s:%s/%s" % (p.get("port"), p["nodePort"], p.get("protocol", "TCP"))
        ports.append(text)
    selector = ",".join("%s=%s" % kv for kv in sorted((spec.get("selector") or {}).items()))
    return [kind, spec.get("clusterIP") or "<none>", external or "<none>",
            ",".join(ports) or "<none>", age(obj["metadata"].get("creationTimestamp")),
            selector or "<none>"]


BUILTIN_GROUPED = {
    "deployments.apps": ([_col("Ready", description="Number of the pod with ready state"),
                          _col("Up-to-date", "integer", description="Total number of non-"
                               "terminated pods targeted by this deployment that have the "
                               "desired template spec."),
                          _col("Available", "integer", description="Total number of available "
                               "pods (ready for at least minReadySeconds) targeted by this "
                               "deployment."), AGE] + WIDE_WORKLOAD, _deployment_cells),
    "replicasets.apps": ([_col("Desired", "integer", description="Number of desired pods."),
                          _col("Current", "integer", description="Number of actual replicas."),
                          _col("Ready", "integer", description="The number of ready replicas "
                               "for this replica set."), AGE] + WIDE_WORKLOAD,
                         _replicaset_cells),
    "services": ([_col("Type", description="The type of the service."),
                  _col("Cluster-IP", description="The IP address of the service."),
                  _col("External-IP", description="The list of external IP addresses."),
                  _col("Port(s)", description="The ports the service exposes."), AGE,
                  _col("Selector", priority=1, description="Route service traffic to pods "
                       "with label keys and values matching this selector.")],
                 _service_cells),
}
# pkg/printers/internalversion/printers.go: both webhook configuration kinds.
WEBHOOK_CONFIGURATION = ([_col("Webhooks", "integer", description="Webhooks indicates the "
                               "number of webhooks included in this configuration."), AGE],
                         lambda o: [len(o.get("webhooks") or []),
                                    age(o["metadata"].get("creationTimestamp"))])
BUILTIN_GROUPED["mutatingwebhookconfigurations.admissionregistration.k8s.io"] = \
    WEBHOOK_CONFIGURATION
BUILTIN_GROUPED["validatingwebhookconfigurations.admissionregistration.k8s.io"] = \
    WEBHOOK_CONFIGURATION

BUILTIN = {
    "pods": (POD_COLUMNS, _pod_cells),
    "configmaps": ([_col("Data", "integer", description="Data contains the configuration "
                         "data."), AGE],
                   lambda o: [len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                              age(o["metadata"].get("creationTimestamp"))]),
    "secrets": ([_col("Type", description="The type of this secret."),
                 _col("Data", "integer", description="Data contains the secret data."), AGE],
                lambda o: [o.get("type", ""), len(o.get("data") or {}),
                           age(o["metadata"].get("creationTimestamp"))]),
    "namespaces": ([_col("Status", description="The status of the namespace"), AGE],
                   lambda o: [(o.get("status") or {}).get("phase", ""),
                              age(o["metadata"].get("creationTimestamp"))]),
    "nodes": ([_col("Status", description="The status of the node"),
               _col("Roles", description="The roles of the node"), AGE,
               _col("Version", description="Kubelet Version reported by the node.")],
              _node_cells),
}


def _json_path(obj, path):
    """A CRD column's JSONPath: dotted fields and [n] indices (as additionalPrinterColumns use)."""
    node = obj
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", path.strip().strip("{}").lstrip(".")):
        if part.startswith("["):
            index = int(part[1:-1])
            node = node[index] if isinstance(node, list) and index < len(node) else None
        else:
            node = node.get(part) if isinstance(node, dict) else None
    return node


def _crd_columns(store, rtype, version):
    crd_type = store.registry.by_key("customresourcedefinitions.apiextensions.k8s.io")
    crd = store.get_locked(crd_type, "", rtype.crd_name)
    for v in ((crd.data.get("spec") or {}).get("versions") or []) if crd else []:
        if v.get("name") == version and v.get("additionalPrinterColumns"):
            return v["additionalPrinterColumns"]
    return [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]


def _crd_cell(obj, column):
    value = _json_path(obj, column.get("jsonPath", ""))
    if value is None:
        return None
    if column.get("type") == "date" and isinstance(value, str):
        return age(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return value


class Converter:
    """Turns objects of one type into Table rows (and the Table's column definitions)."""

    def __init__(self, store, rtype, version, include):
        self.include = include or "Metadata"
        # includeObject=Object: the object converted to the request's version, so with its
        # kind and apiVersion even where a list's items have none (what kubectl --sort-by reads).
        self.type_meta = {"kind": rtype.kind, "apiVersion": rtype.api_version(version)}
        if rtype.crd_name:
            columns = _crd_columns(store, rtype, version)
            self.columns = [dict(NAME)] + [
                _col(c["name"], c.get("type", "string"), c.get("priority", 0),
                     c.get("description", ""), c.get("format", "")) for c in columns]
            self.cells = lambda o: [_crd_cell(o, c) for c in columns]
        elif rtype.key in BUILTIN_GROUPED:
            columns, self.cells = BUILTIN_GROUPED[rtype.key]
            self.columns = [dict(NAME)] + columns
        elif rtype.plural in BUILTIN and not rtype.group:
            columns, self.cells = BUILTIN[rtype.plural]
            self.columns = [dict(NAME)] + columns
        else:
            self.columns = [dict(NAME), _col("Created At", "date", description="CreationTimestamp"
                                             " is a timestamp representing the server time "
                                             "when this object was created.")]
            self.cells = lambda o: [o["metadata"].get("creationTimestamp", "")]

    def row(self, obj):
        row = {"cells": [obj["metadata"].get("name", "")] + self.cells(obj)}
        if self.include == "Object":
            row["object"] = dict(self.type_meta, **obj)
        elif self.include == "Metadata":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj["metadata"]}
        return row

    def table(self, version, items, meta, with_columns=True):
        out = {"kind": "Table", "apiVersion": "meta.k8s.io/" + version, "metadata": meta}
        out["columnDefinitions"] = self.columns if with_columns else None
        out["rows"] = [self.row(o) for o in items]
        return out


def convert(store, req, version, text):
    """The Table for a get or list answer (text is its JSON)."""
    data = json.loads(text)
    with store.lock:
        converter = Converter(store, req.rtype, req.version, req.param("includeObject"))
    if "items" in data:
        meta = {k: v for k, v in data.get("metadata", {}).items()
                if k in ("resourceVersion", "continue", "remainingItemCount")}
        return dumps(converter.table(version, data["items"], meta))
    meta = {"resourceVersion": data["metadata"].get("resourceVersion", "")}
    return dumps(converter.table(version, [data], meta))


class WatchTables:
    """Table frames for a watch: column definitions only in the first event's Table."""

    def __init__(self, store, req, version):
        self.version = version
        with store.lock:
            self.converter = Converter(store, req.rtype, req.version,
                                       req.param("includeObject"))
        self.first = True

    def encode(self, etype, text):
        obj = json.loads(text)
        meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
        table = self.converter.table(self.version, [obj], meta, self.first)
        self.first = False
        return '{"type":"%s","object":%s}\n' % (etype, dumps(table))
