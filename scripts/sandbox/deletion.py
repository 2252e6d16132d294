"""Deletion as staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go does it.

- Delete: propagationPolicy Orphan or Foreground adds the `orphan` or `foregroundDeletion`
  finalizer (deletionFinalizersForGarbageCollection; Background removes both, unset keeps
  what is there). An object left with finalizers is marked (deletionTimestamp,
  deletionGracePeriodSeconds 0) and kept; the garbage collector (gc.py) does the rest.
- An update that removes the last finalizer of an object being deleted is not stored:
  Update returns errEmptiedFinalizers and deleteWithoutFinalizers deletes the stored
  object, so the DELETED event carries the object as last stored, its finalizers still
  listed, while the writer gets back the object it sent.
- Namespaces (pkg/registry/core/namespace/storage): deleting one with spec.finalizers marks
  it Terminating; the namespace controller (gc.py) empties and then removes it.

Functions ending in _locked need the store lock held.
"""
import copy
import time

from .objects import CRD_KEY, now
from .store import Doc

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"


def gc_finalizers(finalizers, policy):
    """The finalizers an object keeps when deleted with policy (None: as the object says)."""
    if not policy:
        return list(finalizers)
    kept = [f for f in finalizers if f not in (ORPHAN, FOREGROUND)]
    if policy == "Orphan":
        kept.append(ORPHAN)
    elif policy == "Foreground":
        kept.append(FOREGROUND)
    return kept


def mark_deleting(data):
    """A copy of data marked for deletion, as the real server marks objects with finalizers."""
    new = copy.deepcopy(data)
    meta = new["metadata"]
    if meta.get("generation"):
        meta["generation"] += 1
    meta["deletionTimestamp"] = now()
    meta["deletionGracePeriodSeconds"] = 0
    return new


def _set_finalizers(meta, finalizers):
    if finalizers:
        meta["finalizers"] = finalizers
    else:
        meta.pop("finalizers", None)


def pod_grace(store, rtype, cur, grace):
    """CheckGracefulDelete: the seconds a Pod is given to stop, 0 to delete it now.

    A Pod not bound to a node, or finished, goes at once; one bound to a Node that exists
    waits for that node's kubelet (see nodes.py)."""
    if rtype.key != "pods":
        return 0
    spec, status = cur.data.get("spec") or {}, cur.data.get("status") or {}
    node_type = store.registry.lookup("", "v1", "nodes")
    if not spec.get("nodeName") or status.get("phase") in ("Failed", "Succeeded") or \
            store.get_locked(node_type, "", spec["nodeName"]) is None:
        return 0
    if grace is None:
        grace = spec.get("terminationGracePeriodSeconds", 30)
    return max(int(grace), 0)


def delete_locked(store, rtype, cur, policy=None, grace=None, dry=False):
    """Deletes now, or marks for deletion while finalizers or a Pod's grace period remain.

    Returns (the object's state now, whether it is gone). dry (dryRun=All) answers the
    same and stores nothing, as the registry's DryRunnableStorage does: no watch event."""
    def commit(event, new):
        if dry:
            return Doc(new)
        if event == "DELETED":
            return remove_locked(store, rtype, cur)
        return store.commit_locked(rtype, event, new, cur)

    if rtype.key == "namespaces":
        return _delete_namespace_locked(store, rtype, cur, commit)
    finalizers = gc_finalizers(cur.meta.get("finalizers") or [], policy)
    seconds = pod_grace(store, rtype, cur, grace)
    if seconds and not cur.meta.get("deletionTimestamp"):
        new = mark_deleting(cur.data)
        new["metadata"]["deletionTimestamp"] = time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds))
        new["metadata"]["deletionGracePeriodSeconds"] = seconds
        _set_finalizers(new["metadata"], finalizers)
        return commit("MODIFIED", new), False
    if not finalizers:
        return commit("DELETED", copy.deepcopy(cur.data)), True
    if cur.meta.get("deletionTimestamp"):
        if finalizers == (cur.meta.get("finalizers") or []):
            return cur, False
        new = copy.deepcopy(cur.data)
    else:
        new = mark_deleting(cur.data)
    _set_finalizers(new["metadata"], finalizers)
    return commit("MODIFIED", new), False


def remove_locked(store, rtype, cur):
    """Removes cur for good; its DELETED event carries its last stored state."""
    if rtype.key == CRD_KEY:
        _drop_crd_locked(store, cur)
    return store.commit_locked(rtype, "DELETED", copy.deepcopy(cur.data), cur)


def write_locked(store, rtype, cur, new):
    """A controller's update of cur to new; removing the last finalizer deletes."""
    if cur.meta.get("deletionTimestamp") and not new["metadata"].get("finalizers") and \
            not cur.meta.get("deletionGracePeriodSeconds") and rtype.key != "namespaces":
        return remove_locked(store, rtype, cur)
    return store.commit_locked(rtype, "MODIFIED", new, cur)


def _drop_crd_locked(store, crd):
    rtype = store.registry.custom.get(crd.meta["name"])
    if rtype is None:
        return
    for _, doc in sorted(store.items_locked(rtype).items()):
        store.commit_locked(rtype, "DELETED", copy.deepcopy(doc.data), doc)
    store.objects.pop(rtype.key, None)
    store.registry.drop_crd(crd.meta["name"])
    for watcher in list(store.watchers):
        if watcher.rtype is rtype:
            watcher.close(clean=True)


def _delete_namespace_locked(store, ns_type, ns, commit):
    spec_finalizers = (ns.data.get("spec") or {}).get("finalizers") or []
    if not spec_finalizers and not ns.meta.get("finalizers"):
        return commit("DELETED", copy.deepcopy(ns.data)), True
    if ns.meta.get("deletionTimestamp"):
        return ns, False
    marked = mark_deleting(ns.data)
    marked["status"] = {"phase": "Terminating"}
    return commit("MODIFIED", marked), False


def finalize_namespace_locked(store, ns_type, ns, new):
    """The namespace controller's finalize: spec.finalizers emptied, then the namespace goes."""
    doc = store.commit_locked(ns_type, "MODIFIED", new, ns)
    if not (new.get("spec") or {}).get("finalizers") and not new["metadata"].get("finalizers"):
        return remove_locked(store, ns_type, doc)
    return doc
