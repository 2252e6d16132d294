"""Simulated nodes (--nodes N): a scheduler and kubelets, so Pods run as on a cluster.

- Node objects sandbox-node-1..N exist, Ready, with the labels, addresses, capacity and
  nodeInfo a kubelet reports.
- The scheduler binds each Pod that names default-scheduler and no node (spec.nodeName
  and a PodScheduled condition, as the binding subresource writes them), round-robin.
- A node's kubelet then starts the Pod after `start_delay` seconds: phase Running, podIP
  and hostIP, startTime, one containerStatus per container (ready, started, restartCount
  0, state.running.startedAt, image, imageID, containerID) and the Initialized,
  ContainersReady and Ready conditions, all True.
- Deleting a Pod bound to a node is graceful (pkg/registry/core/pod/strategy.go
  CheckGracefulDelete): it keeps deletionTimestamp and deletionGracePeriodSeconds until
  the kubelet has stopped it, then the kubelet deletes it for good.
- POST /sandbox/v1/pods/fail {"namespace", "name", "exitCode", "reason"} makes its
  containers exit: with restartPolicy Never (or OnFailure and exit code 0) the Pod ends
  Failed or Succeeded with state.terminated; otherwise the kubelet restarts them: Running,
  restartCount + 1, lastState.terminated, state.waiting CrashLoopBackOff, not Ready.
"""
import copy
import hashlib
import threading
import time

from . import deletion, managedfields
from .objects import now
from .status import bad_request, not_found

KUBELET_VERSION = "v1.32.0"


def _hex(*parts):
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def normalized_image(image):
    """The image as the container runtime reports it: docker.io/library/nginx:latest."""
    name = image
    if "@" not in name and ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    first = name.split("/", 1)[0]
    if "/" not in name:
        return "docker.io/library/" + name
    if "." not in first and ":" not in first and first != "localhost":
        return "docker.io/" + name
    return name


def node_object(name, index):
    stamp = now()
    capacity = {"cpu": "4", "memory": "16331768Ki", "pods": "110",
                "ephemeral-storage": "102687672Ki", "hugepages-2Mi": "0"}

    def condition(kind, status, reason, message):
        return {"type": kind, "status": status, "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp, "reason": reason, "message": message}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64"}},
        "spec": {"podCIDR": "10.244.%d.0/24" % index, "podCIDRs": ["10.244.%d.0/24" % index]},
        "status": {
            "capacity": capacity, "allocatable": dict(capacity),
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                          "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                          "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID",
                          "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": "172.18.0.%d" % (index + 2)},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": KUBELET_VERSION,
                         "operatingSystem": "linux", "architecture": "amd64",
                         "containerRuntimeVersion": "containerd://1.7.22",
                         "osImage": "Debian GNU/Linux 12 (bookworm)",
                         "kernelVersion": "6.1.0", "machineID": _hex(name)[:32],
                         "systemUUID": _hex("uuid", name)[:32], "bootID": _hex("boot", name)[:32]},
        },
    }


class Nodes:
    """The scheduler and the kubelets of count nodes, in one background thread."""

    def __init__(self, store, count, start_delay=0.3):
        self.store = store
        self.count = count
        self.start_delay = start_delay
        self.names = ["sandbox-node-%d" % i for i in range(1, count + 1)]
        self.next = 0
        self.due = {}
        self.pod_ips = 0
        self.live = set()

    def _types(self):
        registry = self.store.registry
        return registry.lookup("", "v1", "pods"), registry.lookup("", "v1", "nodes")

    def start(self, defaulter):
        if not self.count:
            return
        _, node_type = self._types()
        with self.store.lock:
            for i, name in enumerate(self.names):
                obj = node_object(name, i)
                defaulter.on_create(node_type, obj)
                self.store.commit_locked(node_type, "ADDED", obj, None)
        threading.Thread(target=self._run, name="sandbox-nodes", daemon=True).start()

    def is_node(self, name):
        return name in self.names

    def _run(self):
        with self.store.lock:
            while True:
                self._step_locked()
                wait = min([t - time.monotonic() for t in self.due.values()] + [0.5])
                self.store.changed.wait(max(wait, 0.01))

    def _step_locked(self):
        pod_type, _ = self._types()
        self.live = set()
        for key, doc in sorted(self.store.items_locked(pod_type).items()):
            spec, meta = doc.data.get("spec") or {}, doc.meta
            node = spec.get("nodeName")
            if meta.get("deletionTimestamp"):
                if node in self.names and meta.get("deletionGracePeriodSeconds"):
                    self._after(key, doc, self._stop_locked)
                continue
            if not node:
                if spec.get("schedulerName", "default-scheduler") == "default-scheduler":
                    self._bind_locked(pod_type, doc)
                continue
            if node in self.names and not (doc.data.get("status") or {}).get("startTime"):
                self._after(key, doc, self._start_locked)
        self.due = {k: t for k, t in self.due.items() if k in self.live}

    def _after(self, key, doc, action):
        """Runs action(doc) once start_delay has passed since the pod was first seen."""
        handle = (key, action.__name__)
        due = self.due.setdefault(handle, time.monotonic() + self.start_delay)
        if time.monotonic() >= due:
            del self.due[handle]
            action(doc)
        else:
            self.live.add(handle)

    def _commit_status_locked(self, doc, status, spec=None, kubelet=True):
        """Writes a pod's status (and the binding's nodeName). The kubelet's status writes
        are recorded in managedFields as a cluster's are (manager kubelet, subresource
        status); a binding records nothing (the binding storage sets nodeName itself)."""
        pod_type, _ = self._types()
        new = copy.deepcopy(doc.data)
        new["status"] = status
        if spec:
            new["spec"].update(spec)
        if kubelet:
            managers = managedfields.record_update(
                managedfields.Schema(pod_type), managedfields.managers_of(doc.data), doc.data,
                new, managedfields.Manager("kubelet", "Update", "v1", "status"))
            managedfields.store(new, managers)
        return self.store.commit_locked(pod_type, "MODIFIED", new, doc)

    def _bind_locked(self, pod_type, doc):
        node = self.names[self.next % len(self.names)]
        self.next += 1
        status = copy.deepcopy(doc.data.get("status") or {})
        status["conditions"] = [{"type": "PodScheduled", "status": "True",
                                 "lastProbeTime": None, "lastTransitionTime": now()}]
        self._commit_status_locked(doc, status, {"nodeName": node}, kubelet=False)

    def _start_locked(self, doc):
        stamp = now()
        node_index = self.names.index(doc.data["spec"]["nodeName"])
        self.pod_ips += 1
        ip = "10.244.%d.%d" % (node_index, self.pod_ips % 250 + 2)
        status = copy.deepcopy(doc.data.get("status") or {})
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"):
            conditions[kind] = {"type": kind, "status": "True", "lastProbeTime": None,
                                "lastTransitionTime": stamp}
        order = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                 "PodScheduled")
        status.update({
            "phase": "Running",
            "conditions": [conditions[k] for k in order if k in conditions],
            "hostIP": "172.18.0.%d" % (node_index + 2), "hostIPs": [{"ip": "172.18.0.%d"
                                                                      % (node_index + 2)}],
            "podIP": ip, "podIPs": [{"ip": ip}], "startTime": stamp,
            "containerStatuses": [self._running(doc, c, stamp)
                                  for c in doc.data["spec"].get("containers") or []],
        })
        self._commit_status_locked(doc, status)

    @staticmethod
    def _running(doc, ctr, stamp, restarts=0):
        image = normalized_image(ctr.get("image", ""))
        return {"name": ctr.get("name"), "state": {"running": {"startedAt": stamp}},
                "ready": True, "restartCount": restarts, "image": image,
                "imageID": image.split(":")[0].split("@")[0] + "@sha256:" + _hex("image", image),
                "containerID": "containerd://" + _hex(doc.meta["uid"], ctr.get("name", ""),
                                                      str(restarts)),
                "started": True}

    def _stop_locked(self, doc):
        pod_type, _ = self._types()
        new = copy.deepcopy(doc.data)
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        if new["metadata"].get("finalizers"):
            self.store.commit_locked(pod_type, "MODIFIED", new, doc)
        else:
            deletion.remove_locked(self.store, pod_type, doc)

    # -- the control endpoint ------------------------------------------------------------

    def fail(self, request):
        """Makes a running Pod's containers exit; returns the Pod as it now is."""
        if not isinstance(request, dict) or not request.get("name"):
            raise bad_request('the body must be {"namespace": NS, "name": POD, "exitCode": N}')
        namespace = request.get("namespace") or "default"
        code = request.get("exitCode", 1)
        if not isinstance(code, int) or isinstance(code, bool):
            raise bad_request("exitCode must be an integer")
        pod_type, _ = self._types()
        with self.store.lock:
            doc = self.store.get_locked(pod_type, namespace, request["name"])
            if doc is None:
                raise not_found(pod_type, request["name"])
            status = doc.data.get("status") or {}
            if status.get("phase") != "Running":
                raise bad_request("pod %s/%s is %s, not Running (is --nodes on?)"
                                  % (namespace, request["name"], status.get("phase")))
            return self._exit_locked(doc, code, request.get("reason") or
                                     ("Completed" if code == 0 else "Error")).data

    def _exit_locked(self, doc, code, reason):
        stamp = now()
        status = copy.deepcopy(doc.data["status"])
        policy = doc.data["spec"].get("restartPolicy", "Always")
        restart = policy == "Always" or (policy == "OnFailure" and code != 0)
        statuses = []
        for cs in status.get("containerStatuses") or []:
            started = (cs.get("state", {}).get("running") or {}).get("startedAt", stamp)
            terminated = {"exitCode": code, "reason": reason, "startedAt": started,
                          "finishedAt": stamp, "containerID": cs.get("containerID")}
            cs = dict(cs, ready=False, started=False)
            if restart:
                cs["lastState"] = {"terminated": terminated}
                cs["restartCount"] = cs.get("restartCount", 0) + 1
                cs["state"] = {"waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": "back-off 10s restarting failed container=%s pod=%s_%s(%s)"
                               % (cs["name"], doc.meta["name"], doc.meta["namespace"],
                                  doc.meta["uid"])}}
            else:
                cs["state"] = {"terminated": terminated}
            statuses.append(cs)
        status["containerStatuses"] = statuses
        if not restart:
            status["phase"] = "Succeeded" if code == 0 else "Failed"
        for c in status.get("conditions") or []:
            if c["type"] in ("Ready", "ContainersReady"):
                c.update(status="False", reason="PodCompleted" if not restart
                         else "ContainersNotReady", lastTransitionTime=stamp)
                if restart:
                    c["message"] = "containers with unready status: [%s]" % " ".join(
                        cs["name"] for cs in statuses)
        return self._commit_status_locked(doc, status)
