"""The fields each built-in kind has, for unknown-field detection.

kube-apiserver decodes a built-in object into its Go struct: a field the struct does not
have is unknown (an error under fieldValidation=Strict, a warning under Warn) and is
dropped. These trees list the fields of k8s.io/api 1.32 down to where clients commonly
err; ANY marks a subtree whose fields are not listed (everything in it is kept).
"""

ANY = "any"


class Map:
    """A map with free keys whose values have schema value (labels, data, resources)."""

    def __init__(self, value):
        self.value = value


class List:
    """A list whose items have schema item."""

    def __init__(self, item):
        self.item = item


def fields(names, **nested):
    """A struct: every name in names is a leaf (kept as is) unless nested gives its schema."""
    out = {name: ANY for name in names.split()}
    out.update(nested)
    return out


OWNER_REFERENCE = fields("apiVersion kind name uid controller blockOwnerDeletion")
OBJECT_META = fields(
    "name generateName namespace selfLink uid resourceVersion generation creationTimestamp "
    "deletionTimestamp deletionGracePeriodSeconds labels annotations finalizers managedFields",
    ownerReferences=List(OWNER_REFERENCE))
CONTAINER = fields(
    "name image command args workingDir ports envFrom env resources resizePolicy "
    "restartPolicy volumeMounts volumeDevices livenessProbe readinessProbe startupProbe "
    "lifecycle terminationMessagePath terminationMessagePolicy imagePullPolicy "
    "securityContext stdin stdinOnce tty",
    ports=List(fields("name hostPort containerPort protocol hostIP")),
    env=List(fields("name value valueFrom")),
    resources=fields("limits requests claims"))
EPHEMERAL_CONTAINER = dict(CONTAINER, targetContainerName=ANY)
POD_SPEC = fields(
    "volumes activeDeadlineSeconds restartPolicy terminationGracePeriodSeconds dnsPolicy "
    "nodeSelector serviceAccountName serviceAccount automountServiceAccountToken nodeName "
    "hostNetwork hostPID hostIPC shareProcessNamespace securityContext imagePullSecrets "
    "hostname subdomain affinity schedulerName tolerations hostAliases priorityClassName "
    "priority dnsConfig readinessGates runtimeClassName enableServiceLinks preemptionPolicy "
    "overhead topologySpreadConstraints setHostnameAsFQDN os hostUsers schedulingGates "
    "resourceClaims resources",
    containers=List(CONTAINER), initContainers=List(CONTAINER),
    ephemeralContainers=List(EPHEMERAL_CONTAINER))
POD_TEMPLATE = fields("", metadata=OBJECT_META, spec=POD_SPEC)
LABEL_SELECTOR = fields("matchLabels matchExpressions")


def _top(extra="", **nested):
    return fields("apiVersion kind " + extra, metadata=OBJECT_META, **nested)


WORKLOAD_SPEC = fields("replicas minReadySeconds revisionHistoryLimit strategy paused "
                       "progressDeadlineSeconds", selector=LABEL_SELECTOR,
                       template=POD_TEMPLATE)

BUILTIN = {
    "pods": _top("status", spec=POD_SPEC),
    "configmaps": _top("data binaryData immutable"),
    "secrets": _top("data stringData type immutable"),
    "namespaces": _top("status", spec=fields("finalizers")),
    "services": _top("status", spec=fields(
        "ports selector clusterIP clusterIPs type externalIPs sessionAffinity loadBalancerIP "
        "loadBalancerSourceRanges externalName externalTrafficPolicy healthCheckNodePort "
        "publishNotReadyAddresses sessionAffinityConfig ipFamilies ipFamilyPolicy "
        "allocateLoadBalancerNodePorts loadBalancerClass internalTrafficPolicy "
        "trafficDistribution")),
    "events": _top("involvedObject reason message source firstTimestamp lastTimestamp count "
                   "type eventTime series action related reportingComponent "
                   "reportingInstance"),
    "deployments.apps": _top("status", spec=WORKLOAD_SPEC),
    "replicasets.apps": _top("status", spec=WORKLOAD_SPEC),
    "leases.coordination.k8s.io": _top("", spec=fields(
        "holderIdentity leaseDurationSeconds acquireTime renewTime leaseTransitions "
        "strategy preferredHolder")),
    "customresourcedefinitions.apiextensions.k8s.io": _top("status", spec=fields(
        "group names scope versions conversion preserveUnknownFields")),
    "nodes": _top("status", spec=fields("podCIDR podCIDRs providerID unschedulable taints "
                                        "configSource externalID")),
}


def unknown_fields(obj, schema, path=""):
    """Removes from obj what schema does not know; returns the dotted paths removed."""
    found = []
    if schema is ANY or obj is None:
        return found
    if isinstance(schema, Map):
        if isinstance(obj, dict):
            for key, value in obj.items():
                found += unknown_fields(value, schema.value, "%s[%s]" % (path, key))
        return found
    if isinstance(schema, List):
        if isinstance(obj, list):
            for i, item in enumerate(obj):
                found += unknown_fields(item, schema.item, "%s[%d]" % (path, i))
        return found
    if not isinstance(obj, dict):
        return found
    for key in list(obj):
        here = key if not path else "%s.%s" % (path, key)
        if key not in schema:
            found.append(here)
            del obj[key]
        else:
            found += unknown_fields(obj[key], schema[key], here)
    return found
