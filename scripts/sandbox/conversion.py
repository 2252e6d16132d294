"""Conversion webhooks of custom resources, as apiextensions-apiserver 1.32 calls them.

staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/conversion/webhook_converter.go:
objects already at the desired version are not sent; the others go in one
apiextensions.k8s.io/v1 ConversionReview (uid, desiredAPIVersion, objects); the response
must carry the same uid, a Success result and as many convertedObjects, each of the desired
apiVersion and the same kind; of their metadata only labels and annotations are kept
(restoreObjectMeta). Every failure is `conversion webhook for GVK failed: ...`, which
kube-apiserver answers as a 500 Status with no reason (ErrorToAPIStatus), so kubectl prints
`Error from server: conversion webhook for example.com/v1, Kind=Widget failed: ...`.
"""
import copy
import uuid

from . import webhooks
from .status import ApiError
from .store import dumps

REVIEW_VERSION = "apiextensions.k8s.io/v1"
# webhook_converter.go sets no timeout of its own: the request's deadline applies,
# kube-apiserver's --request-timeout (60 s by default).
TIMEOUT = 60


def webhook_of(crd):
    """The spec.conversion.webhook of a CRD whose strategy is Webhook, else None."""
    conversion = (crd.get("spec") or {}).get("conversion") or {}
    if conversion.get("strategy") != "Webhook":
        return None
    return conversion.get("webhook") or {}


def storage_version(crd):
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("storage"):
            return v.get("name")
    return None


def _failed(gvk, why):
    return ApiError(500, "", "conversion webhook for %s failed: %s" % (gvk, why))


def convert(rtype, items, api_version, lock=None, is_list=False):
    """items (dicts) at api_version, converted by rtype's conversion webhook; lock, when
    held by the caller, is let go during the call."""
    todo = [i for i, obj in enumerate(items) if obj.get("apiVersion") != api_version]
    if rtype.conversion is None:
        return [dict(o, apiVersion=api_version) for o in items]
    if not todo:
        return items
    first = items[todo[0]]
    gvk = "%s, Kind=%s" % (first.get("apiVersion"), rtype.kind + ("List" if is_list else ""))
    uid = str(uuid.uuid4())
    review = {"kind": "ConversionReview", "apiVersion": REVIEW_VERSION,
              "request": {"uid": uid, "desiredAPIVersion": api_version,
                          "objects": [items[i] for i in todo]}}
    body = dumps(review).encode("utf-8")
    if lock:
        lock.release()
    try:
        answer = webhooks.post(rtype.conversion.get("clientConfig") or {}, body, TIMEOUT,
                               query_timeout=False)
    except webhooks.CallError as err:
        raise _failed(gvk, err) from None
    finally:
        if lock:
            lock.acquire()
    converted = _converted(gvk, uid, answer)
    if len(converted) != len(todo):
        raise ApiError(500, "", "conversion webhook for %s returned %d objects, expected %d"
                       % (gvk, len(converted), len(todo)))
    out = list(items)
    for n, (i, obj) in enumerate(zip(todo, converted)):
        out[i] = _restored(gvk, n if is_list else None, items[i], obj, api_version)
    return out


def _converted(gvk, uid, answer):
    """getConvertedObjectsFromResponse for a v1 ConversionReview."""
    got = "%s, Kind=%s" % ((answer or {}).get("apiVersion", ""), (answer or {}).get("kind", "")) \
        if isinstance(answer, dict) else ", Kind="
    if got != REVIEW_VERSION + ", Kind=ConversionReview":
        raise _failed(gvk, "expected webhook response of %s, Kind=ConversionReview, got %s"
                      % (REVIEW_VERSION, got))
    response = answer.get("response")
    if not isinstance(response, dict):
        raise _failed(gvk, "no response provided")
    if response.get("uid") != uid:
        raise _failed(gvk, 'expected response.uid="%s", got "%s"' % (uid, response.get("uid", "")))
    result = response.get("result") or {}
    if result.get("status") != "Success":
        raise _failed(gvk, result.get("message") or
                      "response.result.status was '%s', not 'Success'" % result.get("status", ""))
    return response.get("convertedObjects") or []


def _restored(gvk, index, before, after, api_version):
    """The converted object checked as webhook_converter.go checks it (apiVersion, kind,
    validateConvertedObject) with the metadata of the object sent but for its labels and
    annotations (restoreObjectMeta). index: the object's place among those a list sent,
    None for a single object; the messages differ."""
    def failed(single, listed, why):
        what = single if index is None else listed % index
        return ApiError(500, "", "conversion webhook for %s returned %s: %s" % (gvk, what, why))
    if not isinstance(after, dict):
        raise failed("invalid object at index 0", "invalid converted object at index %d",
                     "not an object")
    if after.get("apiVersion") != api_version:
        raise failed("invalid object at index 0", "invalid converted object at index %d",
                     "invalid groupVersion (expected %s, received %s)"
                     % (api_version, after.get("apiVersion")))
    if after.get("kind") != before.get("kind"):
        raise failed("invalid object at index 0", "invalid converted object at index %d",
                     "invalid kind (expected %s, received %s)"
                     % (before.get("kind"), after.get("kind")))
    meta, new_meta = before.get("metadata") or {}, after.get("metadata")
    for field, name in (("name", "name"), ("namespace", "namespace"), ("uid", "UID")):
        was, now = meta.get(field, ""), (new_meta if isinstance(new_meta, dict) else {}).get(
            field, "")
        if was != now:
            raise failed("invalid object", "invalid converted object at index %d",
                         "must have the same %s: %s != %s" % (name, was, now))
    if not isinstance(new_meta, dict):
        raise failed("invalid metadata", "invalid metadata in object at index %d",
                     "missing metadata in converted object")
    restored = copy.deepcopy(meta)
    for field in ("labels", "annotations"):
        if new_meta.get(field) is None:
            restored.pop(field, None)
        else:
            restored[field] = new_meta[field]
    return dict(after, metadata=restored)
