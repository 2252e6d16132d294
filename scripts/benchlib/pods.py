"""Realistic Pods, as a Deployment's ReplicaSet creates them and the kubelet reports them.

A Pod is a function of its index, its resourceVersion and its generation (how many times the
kubelet has updated it), so the list body and the watch stream can be produced separately and
agree. Generating 100,000 Pods must take well under a second, so the JSON is encoded once as a
template and each Pod only fills in its own strings and numbers.
"""
import functools
import hashlib
import json
import random

NAMESPACES = 50
NODES = 40
APPS = ["web", "api", "worker", "cache", "gateway", "auth", "billing", "search", "ingest", "report"]
TIERS = ["frontend", "backend", "data"]
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_ENCODER = json.JSONEncoder(separators=(",", ":"))
# Fields that are numbers in the JSON; every other field is a string.
_NUMERIC = ("restarts",)
_FIELDS = ("name", "namespace", "uid", "rv", "created", "updated", "app", "hash", "tier", "owner", "owner_uid",
           "image", "image_id", "sidecar", "sidecar_image_id", "cpu", "node", "host_ip", "ip", "container_id",
           "sidecar_id", "restarts")


def _token(bits, n):
    """n characters of Kubernetes' generated-name alphabet taken from the integer bits."""
    out = []
    for _ in range(n):
        bits, r = divmod(bits, len(ALPHABET))
        out.append(ALPHABET[r])
    return "".join(out)


def _uid(bits):
    h = "%032x" % bits
    return "%s-%s-4%s-a%s-%s" % (h[:8], h[8:12], h[13:16], h[17:20], h[20:32])


def _stamp(bits):
    return "2024-%02d-%02dT%02d:%02d:%02dZ" % (
        1 + bits % 12, 1 + bits // 12 % 28, bits // 336 % 24, bits // 8064 % 60, bits // 483840 % 60)


def _container(name, image, port, cpu, memory, env):
    return {
        "name": name,
        "image": image,
        "ports": [{"containerPort": port}],
        "env": env,
        "resources": {"limits": {"cpu": cpu, "memory": memory}, "requests": {"cpu": cpu, "memory": memory}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/" + name}],
    }


def _managed_fields(v):
    controller = {
        "f:metadata": {"f:labels": {"f:app": {}}, "f:ownerReferences": {".": {}}},
        "f:spec": {"f:containers": {'k:{"name":"app"}': {}}},
    }
    kubelet = {"f:status": {"f:conditions": {}, "f:phase": {}}}
    return [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": v["created"],
         "fieldsType": "FieldsV1", "fieldsV1": controller},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": v["updated"],
         "fieldsType": "FieldsV1", "fieldsV1": kubelet, "subresource": "status"},
    ]


def _container_status(name, image, image_id, restarts, t, container_id):
    # imageID is required in the API (no omitempty): clients with typed models reject a status without it.
    return {"name": name, "state": {"running": {"startedAt": t}}, "ready": True, "restartCount": restarts,
            "image": image, "imageID": image_id, "containerID": "containerd://" + container_id}


def _shape(v):
    """The Pod as a dict, with every varying field taken from v."""
    applied = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": v["name"]},
               "spec": {"containers": [{"image": v["image"], "name": "app"}]}}
    pod_name_env = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": v["name"], "namespace": v["namespace"], "uid": v["uid"],
            "resourceVersion": v["rv"], "creationTimestamp": v["created"],
            "labels": {"app": v["app"], "pod-template-hash": v["hash"], "tier": v["tier"]},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": _ENCODER.encode(applied) + "\n",
                            "prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": v["owner"],
                                 "uid": v["owner_uid"], "controller": True, "blockOwnerDeletion": True}],
            "managedFields": _managed_fields(v),
        },
        "spec": {
            "containers": [_container("app", v["image"], 8080, v["cpu"], "256Mi", pod_name_env),
                           _container("sidecar", v["sidecar"], 9090, "50m", "64Mi",
                                      [{"name": "PORT", "value": "9090"}])],
            "volumes": [{"name": "config", "configMap": {"name": v["app"] + "-config"}}],
            "restartPolicy": "Always", "nodeName": v["node"],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": kind, "status": "True", "lastTransitionTime": v["updated"]}
                           for kind in ("Ready", "ContainersReady", "PodScheduled")],
            "hostIP": v["host_ip"], "podIP": v["ip"], "podIPs": [{"ip": v["ip"]}], "startTime": v["created"],
            "containerStatuses": [
                _container_status("app", v["image"], v["image_id"], v["restarts"], v["updated"], v["container_id"]),
                _container_status("sidecar", v["sidecar"], v["sidecar_image_id"], 0, v["updated"],
                                  v["sidecar_id"])],
        },
    }


@functools.lru_cache(maxsize=1)
def _template():
    """The compact JSON of a Pod as a %-format string with one %(field)s per varying field.

    Field values are plain ASCII without quotes or backslashes, so they can be substituted
    verbatim, even inside the last-applied-configuration string.
    """
    marks = {f: "@@%s@@" % f for f in _FIELDS}
    text = _ENCODER.encode(_shape(marks)).replace("%", "%%")
    for f, mark in marks.items():
        text = text.replace('"%s"' % mark if f in _NUMERIC else mark, "%%(%s)s" % f)
    return text


@functools.lru_cache(maxsize=4096)
def _identity(index):
    """The fields of a Pod that never change after it is created."""
    rng = random.Random(index)
    bits = rng.getrandbits(64)
    app = APPS[index % len(APPS)]
    template_hash = _token(bits, 10)
    owner = "%s-%s" % (app, template_hash)
    ip = "10.%d.%d.%d" % (bits % 256, bits >> 8 & 255, 1 + (bits >> 16) % 254)
    image = "registry.example.com/%s:1.%d.%d" % (app, bits % 20, bits // 20 % 10)
    sidecar = "registry.example.com/metrics-agent:0.%d.0" % (bits % 9)
    return {
        "name": "%s-%s%d" % (owner, _token(bits >> 50, 3), index), "namespace": "team-%02d" % (index % NAMESPACES),
        "uid": _uid(rng.getrandbits(128)), "created": _stamp(bits), "app": app, "hash": template_hash,
        "tier": TIERS[index % len(TIERS)], "owner": owner, "owner_uid": _uid(rng.getrandbits(128)),
        "image": image, "image_id": _image_id(image), "sidecar": sidecar, "sidecar_image_id": _image_id(sidecar),
        "cpu": "%dm" % (100 + bits % 400),
        "node": "node-%03d" % (bits % NODES), "host_ip": "192.168.0.%d" % (10 + bits % NODES), "ip": ip,
        "bits": bits,
    }


def _image_id(image):
    """The digest reference the kubelet reports for a pulled image."""
    return "%s@sha256:%s" % (image.split(":")[0], hashlib.sha256(image.encode()).hexdigest())


def fields(index, rv, generation=0):
    """Every varying field of Pod `index` at resourceVersion `rv` after `generation` kubelet updates."""
    v = dict(_identity(index))
    bits = v.pop("bits") + generation
    v.update(rv=rv, updated=_stamp((bits >> 24) + generation * 8064), restarts=bits % 10,
             container_id=hashlib.sha256(b"app%d" % bits).hexdigest(),
             sidecar_id=hashlib.sha256(b"sidecar%d" % bits).hexdigest())
    return v


def encode(index, rv, generation=0):
    """Pod `index` as compact JSON bytes (see fields())."""
    return (_template() % fields(index, rv, generation)).encode()


def pod(index, rv="1", generation=0):
    """Pod `index` as a dict, for reading; encode() is the fast path."""
    return json.loads(encode(index, rv, generation))
