"""Decodes the protobuf request bodies kubectl's typed clients send (kubectl create
configmap/secret/namespace/deployment/service/serviceaccount/token, kubectl run) into the
JSON form.

Only the messages and fields those commands set are known; anything else is refused with
415 so that nothing is silently dropped. Field numbers are those of the Kubernetes API's
generated.proto files. Go's protobuf encoding writes zero values of non-pointer fields,
so zeros are dropped (like JSON's omitempty) except for fields marked KEEP, which are
pointers in Go and therefore only present when the client set them. Status is skipped:
the server sets the status of a new object itself.
"""
import base64
import time

from .status import ApiError

MAGIC = b"k8s\x00"
KEEP, REPEATED = "keep", "repeated"
GO_ZERO_TIME = -62135596800

META = {1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
        4: ("selfLink", "string"), 5: ("uid", "string"), 6: ("resourceVersion", "string"),
        7: ("generation", "int"), 8: ("creationTimestamp", "time"),
        9: ("deletionTimestamp", "time"), 10: ("deletionGracePeriodSeconds", "int", KEEP),
        11: ("labels", "map:string"), 12: ("annotations", "map:string"),
        13: ("ownerReferences", "OwnerReference", REPEATED),
        14: ("finalizers", "string", REPEATED)}

SCHEMA = {
    "Unknown": {1: ("typeMeta", "TypeMeta"), 2: ("raw", "bytes"),
                3: ("contentEncoding", "string"), 4: ("contentType", "string")},
    "TypeMeta": {1: ("apiVersion", "string"), 2: ("kind", "string")},
    "ObjectMeta": META,
    "OwnerReference": {5: ("apiVersion", "string"), 1: ("kind", "string"),
                       3: ("name", "string"), 4: ("uid", "string"),
                       6: ("controller", "bool", KEEP), 7: ("blockOwnerDeletion", "bool", KEEP)},
    "LabelSelector": {1: ("matchLabels", "map:string"),
                      2: ("matchExpressions", "LabelSelectorRequirement", REPEATED)},
    "LabelSelectorRequirement": {1: ("key", "string"), 2: ("operator", "string"),
                                 3: ("values", "string", REPEATED)},
    "ConfigMap": {1: ("metadata", "ObjectMeta"), 2: ("data", "map:string"),
                  3: ("binaryData", "map:bytes"), 4: ("immutable", "bool", KEEP)},
    "Secret": {1: ("metadata", "ObjectMeta"), 2: ("data", "map:bytes"), 3: ("type", "string"),
               4: ("stringData", "map:string"), 5: ("immutable", "bool", KEEP)},
    "Namespace": {1: ("metadata", "ObjectMeta"), 2: ("spec", "NamespaceSpec"),
                  3: ("status", "skip")},
    "NamespaceSpec": {1: ("finalizers", "string", REPEATED)},
    "Service": {1: ("metadata", "ObjectMeta"), 2: ("spec", "ServiceSpec"),
                3: ("status", "skip")},
    "ServiceSpec": {1: ("ports", "ServicePort", REPEATED), 2: ("selector", "map:string"),
                    3: ("clusterIP", "string"), 18: ("clusterIPs", "string", REPEATED),
                    4: ("type", "string"), 5: ("externalIPs", "string", REPEATED),
                    7: ("sessionAffinity", "string"), 8: ("loadBalancerIP", "string"),
                    9: ("loadBalancerSourceRanges", "string", REPEATED),
                    10: ("externalName", "string"), 11: ("externalTrafficPolicy", "string"),
                    12: ("healthCheckNodePort", "int"), 21: ("loadBalancerClass", "string", KEEP),
                    23: ("trafficDistribution", "string", KEEP),
                    13: ("publishNotReadyAddresses", "bool"),
                    19: ("ipFamilies", "string", REPEATED),
                    17: ("ipFamilyPolicy", "string", KEEP),
                    20: ("allocateLoadBalancerNodePorts", "bool", KEEP),
                    22: ("internalTrafficPolicy", "string", KEEP)},
    "ServicePort": {1: ("name", "string"), 2: ("protocol", "string"),
                    6: ("appProtocol", "string", KEEP), 3: ("port", "int"),
                    4: ("targetPort", "intorstring"), 5: ("nodePort", "int")},
    "Pod": {1: ("metadata", "ObjectMeta"), 2: ("spec", "PodSpec"), 3: ("status", "skip")},
    "PodTemplateSpec": {1: ("metadata", "ObjectMeta"), 2: ("spec", "PodSpec")},
    "PodSpec": {2: ("containers", "Container", REPEATED),
                20: ("initContainers", "Container", REPEATED),
                3: ("restartPolicy", "string"),
                4: ("terminationGracePeriodSeconds", "int", KEEP),
                5: ("activeDeadlineSeconds", "int", KEEP), 6: ("dnsPolicy", "string"),
                7: ("nodeSelector", "map:string"), 8: ("serviceAccountName", "string"),
                9: ("serviceAccount", "string"),
                21: ("automountServiceAccountToken", "bool", KEEP),
                10: ("nodeName", "string"), 11: ("hostNetwork", "bool"),
                12: ("hostPID", "bool"), 13: ("hostIPC", "bool"),
                27: ("shareProcessNamespace", "bool", KEEP), 25: ("priority", "int", KEEP),
                29: ("runtimeClassName", "string", KEEP),
                31: ("preemptionPolicy", "string", KEEP),
                35: ("setHostnameAsFQDN", "bool", KEEP), 37: ("hostUsers", "bool", KEEP),
                16: ("hostname", "string"), 17: ("subdomain", "string"),
                19: ("schedulerName", "string"), 24: ("priorityClassName", "string"),
                30: ("enableServiceLinks", "bool", KEEP)},
    "Container": {1: ("name", "string"), 2: ("image", "string"),
                  3: ("command", "string", REPEATED), 4: ("args", "string", REPEATED),
                  5: ("workingDir", "string"), 6: ("ports", "ContainerPort", REPEATED),
                  7: ("env", "EnvVar", REPEATED), 8: ("resources", "ResourceRequirements"),
                  13: ("terminationMessagePath", "string"),
                  20: ("terminationMessagePolicy", "string"),
                  14: ("imagePullPolicy", "string"), 16: ("stdin", "bool"),
                  24: ("restartPolicy", "string", KEEP),
                  17: ("stdinOnce", "bool"), 18: ("tty", "bool")},
    "ContainerPort": {1: ("name", "string"), 2: ("hostPort", "int"),
                      3: ("containerPort", "int", KEEP), 4: ("protocol", "string"),
                      5: ("hostIP", "string")},
    "EnvVar": {1: ("name", "string"), 2: ("value", "string")},
    "ResourceRequirements": {1: ("limits", "map:quantity"), 2: ("requests", "map:quantity")},
    "Deployment": {1: ("metadata", "ObjectMeta"), 2: ("spec", "DeploymentSpec"),
                   3: ("status", "skip")},
    "DeploymentSpec": {1: ("replicas", "int", KEEP), 2: ("selector", "LabelSelector"),
                       3: ("template", "PodTemplateSpec"), 4: ("strategy", "DeploymentStrategy"),
                       5: ("minReadySeconds", "int"), 6: ("revisionHistoryLimit", "int", KEEP),
                       7: ("paused", "bool"), 9: ("progressDeadlineSeconds", "int", KEEP)},
    "DeploymentStrategy": {1: ("type", "string"), 2: ("rollingUpdate", "RollingUpdateDeployment")},
    "RollingUpdateDeployment": {1: ("maxUnavailable", "intorstring"),
                                2: ("maxSurge", "intorstring")},
    "Lease": {1: ("metadata", "ObjectMeta"), 2: ("spec", "LeaseSpec")},
    "LeaseSpec": {1: ("holderIdentity", "string", KEEP),
                  2: ("leaseDurationSeconds", "int", KEEP), 3: ("acquireTime", "microtime"),
                  4: ("renewTime", "microtime"), 5: ("leaseTransitions", "int", KEEP)},
    "ServiceAccount": {1: ("metadata", "ObjectMeta"),
                       4: ("automountServiceAccountToken", "bool", KEEP)},
    "TokenRequest": {1: ("metadata", "ObjectMeta"), 2: ("spec", "TokenRequestSpec"),
                     3: ("status", "skip")},
    "TokenRequestSpec": {1: ("audiences", "string", REPEATED), 3: ("boundObjectRef", "skip"),
                         4: ("expirationSeconds", "int", KEEP)},
    "Timestamp": {1: ("seconds", "int"), 2: ("nanos", "int")},
    "IntOrString": {1: ("type", "int"), 2: ("intVal", "int"), 3: ("strVal", "string")},
    "Quantity": {1: ("string", "string")},
}


def refuse(why):
    return ApiError(415, "UnsupportedMediaType",
                    "the sandbox decodes protobuf bodies only for the fields kubectl's create "
                    "commands set (%s); send this object as JSON instead, e.g. with kubectl "
                    "create -f" % why)


def _varint(data, pos):
    result = shift = 0
    while True:
        if pos >= len(data):
            raise refuse("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pos


def _fields(data):
    """(field number, wire type, value) triples; value is an int or bytes."""
    pos, out = 0, []
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, pos = int.from_bytes(data[pos:pos + width], "little"), pos + width
        else:
            raise refuse("wire type %d" % wire)
        out.append((number, wire, value))
    return out


def _signed(value):
    return value - (1 << 64) if value >= 1 << 63 else value


def _time(data, micro=False):
    fields = _message("Timestamp", data)
    seconds, nanos = fields.get("seconds", 0), fields.get("nanos", 0)
    if seconds in (0, GO_ZERO_TIME) and not nanos:
        return None
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return stamp + (".%06dZ" % (nanos // 1000) if micro else "Z")


def _scalar(kind, wire, value):
    if kind == "int":
        return _signed(value)
    if kind == "bool":
        return bool(value)
    if wire != 2:
        raise refuse("unexpected wire type for %s" % kind)
    if kind == "string":
        return value.decode("utf-8")
    if kind == "bytes":
        return value
    if kind in ("time", "microtime"):
        return _time(value, kind == "microtime")
    if kind == "intorstring":
        ios = _message("IntOrString", value)
        return ios.get("strVal", "") if ios.get("type") == 1 else ios.get("intVal", 0)
    if kind == "quantity":
        return _message("Quantity", value).get("string", "")
    return _message(kind, value)


def _map_value(kind, raw):
    if kind == "bytes":
        return base64.b64encode(raw).decode()
    if kind == "quantity":
        return _message("Quantity", raw).get("string", "")
    return raw.decode("utf-8")


def _empty(value):
    return value in ("", 0, False, None, {}, [])


def _message(name, data):
    schema, out = SCHEMA[name], {}
    for number, wire, value in _fields(data):
        spec = schema.get(number)
        if spec is None:
            raise refuse("%s field %d is not among them" % (name, number))
        field, kind = spec[0], spec[1]
        flags = spec[2:]
        if kind == "skip":
            continue
        if kind.startswith("map:"):
            entry = {n: v for n, _, v in _fields(value)}
            out.setdefault(field, {})[entry.get(1, b"").decode("utf-8")] = \
                _map_value(kind[4:], entry.get(2, b""))
            continue
        decoded = _scalar(kind, wire, value)
        if REPEATED in flags:
            out.setdefault(field, []).append(decoded)
        elif KEEP in flags or not _empty(decoded) or name in ("Timestamp", "IntOrString"):
            out[field] = decoded
    return out


def decode(body):
    """The JSON-form object of a protobuf-encoded Kubernetes object body."""
    if not body.startswith(MAGIC):
        raise refuse("the body does not start with the k8s protobuf magic")
    envelope = _message("Unknown", body[len(MAGIC):])
    type_meta = envelope.get("typeMeta", {})
    kind = type_meta.get("kind", "")
    if kind not in SCHEMA or "metadata" not in [s[0] for s in SCHEMA[kind].values()]:
        raise refuse("kind %s is not among them" % (kind or "(none)"))
    obj = {"apiVersion": type_meta.get("apiVersion", ""), "kind": kind}
    obj.update(_message(kind, envelope.get("raw", b"")))
    return obj
