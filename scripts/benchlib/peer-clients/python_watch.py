"""Peer of scenario handler-3-fields (a): the Python kubernetes client's watch.

    python3 python_watch.py KUBECONFIG COUNT TIMEOUT MODE

Lists the Pods as a user of the client would, then follows them with
watch.Watch().stream(list_pod_for_all_namespaces, resource_version=...) and reads the same
three fields as events.lua's handler. MODE picks what stream() turns each event's object
into: "dict" (Watch(return_type="object"): the decoded JSON, the fastest the client offers)
or "model" (Watch(): a V1Pod, the default). Prints the `bench synced` and `bench done`
lines events.lua prints, times from time.monotonic() and CPU from time.process_time(), read
at the first update, every STAMP_EVERY-th and the last.
"""
import json
import sys
import time

from kubernetes import client, config, watch

STAMP_EVERY = 256


def emit(name, **fields):
    parts = ["bench", name]
    for key in sorted(fields):
        value = fields[key]
        parts.append("%s=%s" % (key, "%.6f" % value if isinstance(value, float) else value))
    print(" ".join(parts), flush=True)


def hwm_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def main(kubeconfig, count, timeout, mode):
    started = time.monotonic()
    config.load_kube_config(config_file=kubeconfig)
    v1 = client.CoreV1Api()
    # The list is not timed; without _preload_content=False the client would build 1,000 V1Pods.
    listed = json.loads(v1.list_pod_for_all_namespaces(_preload_content=False).data)
    emit("synced", at=time.monotonic() - started, cached=len(listed["items"]), updates=0)
    w = watch.Watch(return_type="object") if mode == "dict" else watch.Watch()
    if mode == "dict":
        def read(obj):
            md = obj["metadata"]
            return md["name"], md["namespace"], obj["status"]["phase"]
    else:
        def read(obj):
            return obj.metadata.name, obj.metadata.namespace, obj.status.phase
    seen = stamped = 0
    first = last = cpu_first = cpu_last = 0.0
    reason = "stream-ended"
    # timeout_seconds also keeps stream() from watching again once the server ends the stream.
    for event in w.stream(v1.list_pod_for_all_namespaces, resource_version=listed["metadata"]["resourceVersion"],
                          timeout_seconds=timeout):
        if event["type"] != "MODIFIED":
            continue
        read(event["object"])
        seen += 1
        if seen == 1:
            first, cpu_first = time.monotonic(), time.process_time()
        elif seen == count or seen % STAMP_EVERY == 0:
            stamped, last, cpu_last = seen, time.monotonic(), time.process_time()
            if seen == count:
                reason = "count"
                break
    emit("done", reason=reason, seen=seen, stamped=stamped, first=first, last=last, cpu_first=cpu_first,
         cpu_last=cpu_last, hwm_kb=hwm_kb())


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[4] not in ("dict", "model"):
        sys.exit("usage: python3 python_watch.py KUBECONFIG COUNT TIMEOUT dict|model")
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
