"""Objects, the global resourceVersion and the history of changes, under one lock.

Every change bumps one counter (like etcd's revision) and appends one event to the
history, so history[i] always has resourceVersion compacted + 1 + i. Stored dicts are
never mutated: a change stores a new dict, which lets history events share them.

The history models two things kube-apiserver keeps apart:
- storage (etcd): every revision after `compacted`, at most storage_limit of them. Exact
  and paged lists, and continue tokens, are snapshots rebuilt from it; they expire only
  when storage is compacted (the `compact` fault; etcd compacts every few minutes).
- the watch cache: the last history_limit events, and none from before the server last
  started (`window_start`). Watches replay from it; unpaged lists are its current state.
  A restart empties it and leaves storage alone, as a new kube-apiserver process builds
  a new watch cache from a LIST of etcd at the current revision.

With a watch lag (--watch-lag), the watch cache receives each change that many seconds
after it was committed and acknowledged, as a loaded kube-apiserver's watch cache trails
etcd: it is at `cache_rv_locked()`, and watches and the lists it serves see that state.
"""
import collections
import itertools
import json
import threading
import time

from .jsonnum import go_floats
from .resources import Registry
from .status import (INCONSISTENT_CONTINUE, expired, storage_initializing,
                     too_old_resource_version)


TOP_ORDER = ("apiVersion", "kind", "metadata")
META_ORDER = ("name", "generateName", "namespace", "uid", "resourceVersion", "generation",
              "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
              "annotations", "ownerReferences", "finalizers", "managedFields")


def _ordered(mapping, first):
    out = {k: mapping[k] for k in first if k in mapping}
    out.update((k, v) for k, v in mapping.items() if k not in out)
    return out


def canonical(obj):
    """obj with its keys in the order the real server writes them, for readable output."""
    ordered = _ordered(obj, TOP_ORDER)
    ordered["metadata"] = _ordered(obj["metadata"], META_ORDER)
    return ordered


def dumps(obj):
    return go_floats(json.dumps(obj, separators=(",", ":"), ensure_ascii=False))


class Doc:
    """One stored version of an object and its JSON text, encoded at most once."""

    __slots__ = ("data", "_text")

    def __init__(self, data):
        self.data = data
        self._text = None

    def text(self):
        if self._text is None:
            self._text = dumps(self.data)
        return self._text

    @property
    def meta(self):
        return self.data["metadata"]


class Event:
    """One history entry: the change that produced resourceVersion rv, committed at `at`
    (time.monotonic())."""

    __slots__ = ("rv", "type", "rkey", "key", "doc", "prev", "at")

    def __init__(self, rv, etype, rkey, key, doc, prev):
        self.rv = rv
        self.type = etype
        self.rkey = rkey
        self.key = key
        self.doc = doc
        self.prev = prev
        self.at = time.monotonic()

    @property
    def namespace(self):
        return self.doc.meta.get("namespace", "")


def object_key(namespace, name):
    """The store key, ordered like the real server's etcd keys: ns/name or name."""
    return "%s/%s" % (namespace, name) if namespace else name


class Store:
    """The state of the sandbox cluster. Methods ending in _locked need self.lock held."""

    def __init__(self, history_limit, storage_limit=None, watch_lag=0.0):
        self.lock = threading.Lock()
        self.watch_lag = watch_lag
        self.changed = threading.Condition(self.lock)
        self.registry = Registry()
        self.rv = 0
        self.compacted = 0
        self.window_start = 0
        self.type_start = {}  # resource key -> rv its newest watch cache started at
        self.ready_at = {}    # resource key -> when that watch cache is filled (monotonic)
        self.history_limit = history_limit
        self.storage_limit = max(history_limit, storage_limit or 0)
        self.history = collections.deque()
        self.objects = collections.defaultdict(dict)
        self.watchers = set()

    def get_locked(self, rtype, namespace, name):
        return self.objects[rtype.key].get(object_key(namespace, name))

    def items_locked(self, rtype):
        return self.objects[rtype.key]

    def commit_locked(self, rtype, etype, obj, prev):
        """Stores obj (now owned by the store) as the next revision; returns its Doc."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        doc = Doc(canonical(obj))
        key = object_key(obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if etype == "DELETED":
            self.objects[rtype.key].pop(key, None)
        else:
            self.objects[rtype.key][key] = doc
        self.history.append(Event(self.rv, etype, rtype.key, key, doc, prev))
        while len(self.history) > self.storage_limit:
            self.compacted = self.history.popleft().rv
        self.window_start = max(self.window_start, self.rv - self.history_limit)
        self.changed.notify_all()
        return doc

    def compact_locked(self):
        """Forgets all history, in storage and in the watch cache: older resourceVersions
        can no longer be watched or listed."""
        self.history.clear()
        self.compacted = self.window_start = self.rv
        self.changed.notify_all()

    def restart_cache_locked(self):
        """A new watch cache, as after a kube-apiserver restart: it holds the current
        state and no event before it; storage keeps its history."""
        self.window_start = self.rv
        self.changed.notify_all()

    def new_watch_cache_locked(self, rtype, fill_seconds):
        """A resource served anew (a CRD created): its watch cache starts now, empty of
        history, and answers 429 until it is filled, fill_seconds from now."""
        self.type_start[rtype.key] = self.rv
        self.ready_at[rtype.key] = time.monotonic() + fill_seconds

    def check_cache_ready_locked(self, rtype):
        """Raises 429 "storage is (re)initializing" while rtype's watch cache fills."""
        if time.monotonic() < self.ready_at.get(rtype.key, 0):
            raise storage_initializing()

    def cache_ready_locked(self, rtype):
        return time.monotonic() >= self.ready_at.get(rtype.key, 0)

    def events_after_locked(self, rv, rkey=None):
        """Watch-cache events with resourceVersion > rv; raises Expired when the watch
        cache (of resource rkey, if given) no longer holds them (kube-apiserver's "too
        old resource version")."""
        start = max(self.window_start, self.type_start.get(rkey, 0))
        if rv < start:
            raise too_old_resource_version(rv, start)
        return self._storage_events_after_locked(rv)

    def _storage_events_after_locked(self, rv):
        return list(itertools.islice(self.history, rv - self.compacted, None))

    def snapshot_locked(self, rtype, rv, for_continue=False):
        """The objects of rtype as they were at resourceVersion rv, rebuilt from storage's
        history (etcd's snapshot at a revision)."""
        if rv < self.compacted:
            if for_continue:
                raise expired(INCONSISTENT_CONTINUE)
            raise too_old_resource_version(rv, self.compacted)
        items = dict(self.objects[rtype.key])
        for event in reversed(self._storage_events_after_locked(rv)):
            if event.rkey != rtype.key:
                continue
            if event.type == "ADDED":
                items.pop(event.key, None)
            else:
                items[event.key] = event.prev
        return items

    def cache_rv_locked(self):
        """The resourceVersion the watch cache has reached: the last change committed at
        least watch_lag seconds ago (every change without a lag)."""
        if not self.watch_lag:
            return self.rv
        cutoff = time.monotonic() - self.watch_lag
        for event in reversed(self.history):
            if event.at <= cutoff:
                return event.rv
        return self.history[0].rv - 1 if self.history else self.rv

    def cache_due_locked(self, rv):
        """When the change after rv reaches the watch cache (monotonic), or None."""
        i = rv - self.compacted
        if not self.watch_lag or i < 0 or i >= len(self.history):
            return None
        return self.history[i].at + self.watch_lag

    def cache_items_locked(self, rtype):
        """(the objects of rtype as the watch cache holds them, its resourceVersion)."""
        rv = self.cache_rv_locked()
        if rv == self.rv:
            return self.objects[rtype.key], rv
        return self.snapshot_locked(rtype, rv), rv

    def wait_for_cache_locked(self, rv, timeout):
        """Waits up to timeout for the watch cache to reach rv; True when it has."""
        end = time.monotonic() + timeout
        while self.cache_rv_locked() < rv:
            now = time.monotonic()
            if now >= end:
                return False
            due = self.cache_due_locked(self.cache_rv_locked())
            self.changed.wait(min(end, due or end) - now)
        return True

    def wait_for_rv_locked(self, rv, timeout):
        """Waits up to timeout for the store to reach rv; True when it has."""
        return self.changed.wait_for(lambda: self.rv >= rv, timeout)
