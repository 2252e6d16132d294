"""The benchmark's data set on disk, encoded once so that serving it costs no CPU.

A data set directory holds:
  items.json     every listed Pod, joined by commas (a PodList's items without the brackets)
  items.idx      n + 1 little-endian uint64 offsets: item i is bytes [off[i], off[i+1] - 1)
  events.ndjson  the watch stream: one {"type":"MODIFIED","object":...} line per event
  events.idx     n + 1 offsets: event k is bytes [off[k], off[k+1])
  meta.json      the counts and sizes

Listed Pod i has resourceVersion 1 + i % 999 (the list itself is at LIST_RV). Event k modifies
Pod k % watch_pods, at resourceVersion LIST_RV + 1 + k, so a watch from resourceVersion R
starts at event R - LIST_RV.
"""
import array
import json
import os

from . import pods

LIST_RV = 1000
_WRITE_BUFFER = 1 << 20


def _write(path, count, encode):
    """Writes count encoded records to path; returns their start offsets plus the end offset."""
    offsets = array.array("Q")
    pos = 0
    with open(path, "wb", buffering=_WRITE_BUFFER) as f:
        for i in range(count):
            offsets.append(pos)
            record = encode(i)
            f.write(record)
            pos += len(record)
    offsets.append(pos)
    return offsets


def _save_index(path, offsets):
    with open(path, "wb") as f:
        offsets.tofile(f)


def _load_index(path):
    offsets = array.array("Q")
    with open(path, "rb") as f:
        offsets.frombytes(f.read())
    return offsets


def generate(directory, n_pods, watch_pods, n_events):
    """Writes a data set of n_pods listed Pods and n_events MODIFIED events about the first watch_pods."""
    if n_events and not 0 < watch_pods <= n_pods:
        raise ValueError("events need 1 <= watch_pods <= pods, got watch_pods=%d pods=%d" % (watch_pods, n_pods))
    os.makedirs(directory, exist_ok=True)
    items = _write(os.path.join(directory, "items.json"), n_pods,
                   lambda i: (b"," if i else b"") + pods.encode(i, str(1 + i % (LIST_RV - 1))))
    # Offsets point past the separating comma, so item i is [off[i], off[i+1] - 1) for every i.
    for i in range(1, n_pods):
        items[i] += 1
    items[n_pods] += 1
    prefix = b'{"type":"MODIFIED","object":'
    events = _write(os.path.join(directory, "events.ndjson"), n_events,
                    lambda k: prefix + pods.encode(k % watch_pods, str(LIST_RV + 1 + k), 1 + k // watch_pods)
                    + b"}\n")
    _save_index(os.path.join(directory, "items.idx"), items)
    _save_index(os.path.join(directory, "events.idx"), events)
    meta = {"pods": n_pods, "watch_pods": watch_pods, "events": n_events,
            "pod_bytes": items[n_pods] - n_pods, "event_bytes": events[n_events]}
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump(meta, f)
    return Dataset(directory)


class Dataset:
    """A generated data set, read-only."""

    def __init__(self, directory):
        self.directory = directory
        with open(os.path.join(directory, "meta.json")) as f:
            self.meta = json.load(f)
        self.items_path = os.path.join(directory, "items.json")
        self.events_path = os.path.join(directory, "events.ndjson")
        self.items = _load_index(os.path.join(directory, "items.idx"))
        self.events = _load_index(os.path.join(directory, "events.idx"))

    @property
    def pods(self):
        return self.meta["pods"]

    @property
    def watch_pods(self):
        return self.meta["watch_pods"]

    @property
    def n_events(self):
        return self.meta["events"]

    def average_pod_bytes(self, count=None):
        """Mean compact-JSON size of the first count listed Pods."""
        count = self.pods if count is None else count
        return (self.items[count] - count) / count if count else 0.0

    def item_span(self, start, end):
        """(offset, length) in items.json of items [start, end), without a trailing comma."""
        if start >= end:
            return self.items[start], 0
        return self.items[start], self.items[end] - 1 - self.items[start]

    def event_span(self, start, end):
        """(offset, length) in events.ndjson of events [start, end)."""
        return self.events[start], self.events[end] - self.events[start]

    def pod_name(self, index):
        return pods.fields(index, "0")["name"]
