"""The garbage collector and the namespace controller, run in one background thread.

They model pkg/controller/garbagecollector and pkg/controller/namespace closely enough for
a client to see the same sequence of states:

- An object whose owners (ownerReferences, matched by uid) are all gone is deleted
  (attemptToDeleteItem); one with some owners left loses the references to the gone ones.
- An owner deleted with propagationPolicy=Orphan carries the `orphan` finalizer: its
  dependents lose their references to it, then the finalizer goes (orphanDependents).
- An owner deleted with propagationPolicy=Foreground carries `foregroundDeletion`: its
  dependents are deleted (foreground themselves when their reference blocks the owner),
  and the finalizer goes once no dependent with blockOwnerDeletion=true remains
  (processDeletingDependentsItem).
- A namespace being deleted (phase Terminating) has its objects deleted; once none is
  left, the `kubernetes` finalizer leaves spec.finalizers and the namespace is removed.

Every change goes through deletion.py and the store, so it makes the events a client's
write would.
"""
import copy
import threading

from . import deletion
from .deletion import FOREGROUND, ORPHAN
from .status import ApiError
from .store import Doc

NAMESPACE_FINALIZER = "kubernetes"


class GarbageCollector:
    """Owns the thread; start() once the store holds the initial cluster."""

    def __init__(self, store):
        self.store = store
        self.seen_rv = 0
        self.stopped = False

    def start(self):
        threading.Thread(target=self._run, name="sandbox-gc", daemon=True).start()

    def _run(self):
        with self.store.lock:
            while not self.stopped:
                if self._relevant_changes_locked():
                    self.collect_locked()
                self.store.changed.wait(0.5)

    def _relevant_changes_locked(self):
        """Whether anything since the last pass can concern the collector."""
        if self.store.rv == self.seen_rv:
            return False
        try:
            events = self.store.events_after_locked(self.seen_rv)
        except ApiError:
            events = None
        self.seen_rv = self.store.rv
        if events is None:
            return True
        return any(e.type == "DELETED" or e.doc.meta.get("deletionTimestamp") or
                   e.doc.meta.get("ownerReferences") for e in events)

    # -- one pass ------------------------------------------------------------------------

    def collect_locked(self):
        """Runs passes until one changes nothing."""
        for _ in range(100):
            if not self._pass_locked():
                break
        self.seen_rv = self.store.rv

    def _everything_locked(self):
        out = []
        for rtype in self.store.registry.all():
            for doc in list(self.store.items_locked(rtype).values()):
                out.append((rtype, doc))
        return out

    def _pass_locked(self):
        objects = self._everything_locked()
        by_uid = {doc.meta.get("uid"): (rtype, doc) for rtype, doc in objects}
        changed = False
        for rtype, doc in objects:
            current = self.store.get_locked(rtype, doc.meta.get("namespace", ""),
                                            doc.meta["name"])
            if current is not doc:
                continue
            if rtype.key == "namespaces" and doc.meta.get("deletionTimestamp"):
                changed |= self._finish_namespace_locked(rtype, doc)
            elif doc.meta.get("deletionTimestamp") and ORPHAN in _finalizers(doc):
                changed |= self._orphan_locked(rtype, doc, objects)
            elif doc.meta.get("deletionTimestamp") and FOREGROUND in _finalizers(doc):
                changed |= self._foreground_locked(rtype, doc, objects)
            if doc.meta.get("ownerReferences") and \
                    self.store.get_locked(rtype, doc.meta.get("namespace", ""),
                                          doc.meta["name"]) is doc:
                changed |= self._dependent_locked(rtype, doc, by_uid)
        return changed

    def _dependents(self, owner, objects):
        uid = owner.meta.get("uid")
        return [(rtype, doc) for rtype, doc in objects
                if any(r.get("uid") == uid for r in doc.meta.get("ownerReferences") or [])
                and self.store.get_locked(rtype, doc.meta.get("namespace", ""),
                                          doc.meta["name"]) is doc]

    def _orphan_locked(self, rtype, owner, objects):
        uid = owner.meta["uid"]
        for dep_type, dep in self._dependents(owner, objects):
            new = copy.deepcopy(dep.data)
            refs = [r for r in new["metadata"]["ownerReferences"] if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                del new["metadata"]["ownerReferences"]
            deletion.write_locked(self.store, dep_type, dep, new)
        self._drop_finalizer_locked(rtype, owner, ORPHAN)
        return True

    def _foreground_locked(self, rtype, owner, objects):
        changed = False
        blocking = False
        for dep_type, dep in self._dependents(owner, objects):
            ref = next(r for r in dep.meta["ownerReferences"]
                       if r.get("uid") == owner.meta["uid"])
            if ref.get("blockOwnerDeletion"):
                blocking = True
            if not dep.meta.get("deletionTimestamp"):
                policy = "Foreground" if ref.get("blockOwnerDeletion") else "Background"
                deletion.delete_locked(self.store, dep_type, dep, policy)
                changed = True
        if not blocking:
            self._drop_finalizer_locked(rtype, owner, FOREGROUND)
            changed = True
        return changed

    def _dependent_locked(self, rtype, doc, by_uid):
        """attemptToDeleteItem: delete when no owner is left, else drop the dangling refs."""
        if doc.meta.get("deletionTimestamp"):
            return False
        refs = doc.meta["ownerReferences"]
        solid, dangling, waiting = [], [], []
        for ref in refs:
            owner = by_uid.get(ref.get("uid"))
            if owner is None or self._gone(owner):
                dangling.append(ref)
            elif owner[1].meta.get("deletionTimestamp") and \
                    FOREGROUND in _finalizers(owner[1]):
                waiting.append(ref)
            else:
                solid.append(ref)
        if not dangling and not waiting:
            return False
        if solid:
            if not dangling:
                return False
            new = copy.deepcopy(doc.data)
            new["metadata"]["ownerReferences"] = [r for r in refs if r not in dangling]
            deletion.write_locked(self.store, rtype, doc, new)
            return True
        blocks = any(r.get("blockOwnerDeletion") for r in waiting)
        deletion.delete_locked(self.store, rtype, doc, "Foreground" if blocks else "Background")
        return True

    def _gone(self, owner):
        rtype, doc = owner
        return self.store.get_locked(rtype, doc.meta.get("namespace", ""),
                                     doc.meta["name"]) is None

    def _drop_finalizer_locked(self, rtype, doc, finalizer):
        current = self.store.get_locked(rtype, doc.meta.get("namespace", ""), doc.meta["name"])
        if current is None:
            return
        new = copy.deepcopy(current.data)
        new["metadata"]["finalizers"] = [f for f in _finalizers(current) if f != finalizer]
        if not new["metadata"]["finalizers"]:
            del new["metadata"]["finalizers"]
        deletion.write_locked(self.store, rtype, current, new)

    # -- namespaces ----------------------------------------------------------------------

    def _finish_namespace_locked(self, ns_type, ns):
        name = ns.meta["name"]
        left = False
        changed = False
        for rtype in self.store.registry.all():
            if not rtype.namespaced:
                continue
            for key, doc in sorted(self.store.items_locked(rtype).items()):
                if not key.startswith(name + "/"):
                    continue
                left = True
                if not doc.meta.get("deletionTimestamp"):
                    deletion.delete_locked(self.store, rtype, doc)
                    changed = True
        spec_finalizers = (ns.data.get("spec") or {}).get("finalizers") or []
        if left or NAMESPACE_FINALIZER not in spec_finalizers:
            return changed
        new = copy.deepcopy(ns.data)
        new["spec"]["finalizers"] = [f for f in spec_finalizers if f != NAMESPACE_FINALIZER]
        if not new["spec"]["finalizers"]:
            del new["spec"]["finalizers"]
        deletion.finalize_namespace_locked(self.store, ns_type, ns, new)
        return True


def _finalizers(doc):
    data = doc.data if isinstance(doc, Doc) else doc
    return data["metadata"].get("finalizers") or []
