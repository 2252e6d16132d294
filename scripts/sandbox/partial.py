"""Metadata-only answers (Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1).

As kube-apiserver's endpoints/handlers/response.go transforms them, and as client-go's
metadata client and metadata informers ask for them:
- a get asks as=PartialObjectMetadata and gets {"kind": "PartialObjectMetadata",
  "apiVersion": "meta.k8s.io/v1", "metadata": <the object's whole ObjectMeta>};
- a list asks as=PartialObjectMetadataList and gets a PartialObjectMetadataList whose list
  metadata keeps resourceVersion, continue and remainingItemCount and whose items each carry
  kind PartialObjectMetadata and apiVersion meta.k8s.io/v1;
- the wrong one of the two (a list as PartialObjectMetadata, a get as the List) is refused
  with 406 NotAcceptable and the server's message, which names the Go type it holds;
- a watch asks as=PartialObjectMetadata and every event's object (bookmarks too) is
  converted; ERROR events keep their Status. A watch that asks for the List form cannot
  convert its objects and the server, logging the failure, sends them whole.
meta.k8s.io/v1beta1 is served alike; another group or version is refused with 406.
"""
import json

from .status import ApiError
from .store import dumps

KINDS = ("PartialObjectMetadata", "PartialObjectMetadataList")


def wanted(accept):
    """(kind, version) of the metadata-only form the Accept header asks for, or None."""
    for clause in (accept or "").split(","):
        params = dict(p.strip().split("=", 1) for p in clause.split(";")[1:] if "=" in p)
        if params.get("as") in KINDS and params.get("g") == "meta.k8s.io":
            return params["as"], params.get("v", "")
    return None


def _not_acceptable(message):
    return ApiError(406, "NotAcceptable", message)


def _go_type(rtype, is_list):
    """The %T kube-apiserver prints: an internal type, or unstructured for custom resources."""
    if rtype.crd_name:
        return "*unstructured.UnstructuredList" if is_list else "*unstructured.Unstructured"
    package = (rtype.group.split(".")[0] if rtype.group else "core")
    return "*%s.%s%s" % (package, rtype.kind, "List" if is_list else "")


def _check_version(version):
    if version not in ("v1", "v1beta1"):
        # kube-apiserver names the List in this message for both forms.
        raise _not_acceptable("no PartialObjectMetadataList exists in group version "
                              "meta.k8s.io/%s" % version)


def partial(obj, version):
    """The PartialObjectMetadata of one object (a dict)."""
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/" + version,
            "metadata": obj.get("metadata", {})}


def convert(rtype, form, text):
    """The metadata-only answer of a get or list whose full answer is text; raises 406."""
    kind, version = form
    data = json.loads(text)
    is_list = "items" in data
    if kind == "PartialObjectMetadata" and is_list:
        raise _not_acceptable("you requested PartialObjectMetadata, but the requested object "
                              "is a list (%s)" % _go_type(rtype, True))
    if kind == "PartialObjectMetadataList" and not is_list:
        raise _not_acceptable("you requested PartialObjectMetadataList, but the requested "
                              "object is not a list (%s)" % _go_type(rtype, False))
    _check_version(version)
    if not is_list:
        return dumps(partial(data, version))
    meta = {k: v for k, v in data.get("metadata", {}).items()
            if k in ("resourceVersion", "continue", "remainingItemCount")}
    return dumps({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/" + version,
                  "metadata": meta, "items": [partial(i, version) for i in data["items"]]})


class WatchPartial:
    """Converts a watch's event objects, when the watch asked for PartialObjectMetadata."""

    def __init__(self, form):
        kind, version = form
        _check_version(version)
        self.version = version if kind == "PartialObjectMetadata" else None

    def encode(self, etype, text):
        if self.version is None:
            return '{"type":"%s","object":%s}\n' % (etype, text)
        return '{"type":"%s","object":%s}\n' % (etype,
                                                dumps(partial(json.loads(text), self.version)))
