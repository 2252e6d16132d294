"""What kube-apiserver does with a request body as it decodes it, before validation.

- fieldValidation (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/rest.go,
  fieldValidation()): unset means Warn. Unknown fields are an error under Strict (400
  BadRequest "strict decoding error: unknown field \"spec.foo\""; for create and update
  prefixed "Pod in version \"v1\" cannot be handled as a Pod: ", as transformDecodeError
  words it), a `Warning: 299 - "unknown field \"spec.foo\""` header under Warn, and nothing
  under Ignore. In every mode the field is dropped: built-in objects are decoded into their
  Go structs, custom resources are pruned against their schema.
- Custom resources are then validated against their CRD's openAPIV3Schema (422 Invalid).
- Secret data must be base64 (a decode error, 400).
- Decoding sets the defaults of defaults.decode_defaults.
"""
import json

from . import crdschema, defaults, schemas, validation
from .status import Cause, bad_request, invalid

MODES = ("", "Ignore", "Strict", "Warn")


def mode(req):
    """The fieldValidation directive, or 422 Invalid on the verb's options for a bad one."""
    value = req.param("fieldValidation")
    if value not in MODES:
        options = {"create": "CreateOptions", "update": "UpdateOptions"}.get(req.verb,
                                                                             "PatchOptions")
        raise invalid(options, "meta.k8s.io", "", [
            Cause("fieldValidation", "Unsupported value",
                  'supported values: "", "Ignore", "Strict", "Warn"', value)])
    return value or "Warn"


def _decode_error(req, message):
    if req.verb == "patch":
        return bad_request(message)
    kind, version = req.rtype.kind, req.version
    return bad_request('%s in version "%s" cannot be handled as a %s: %s'
                       % (kind, version, kind, message))


def crd_schema(store, req):
    """The openAPIV3Schema of the custom resource req addresses, at its version, or None."""
    if not req.rtype.crd_name:
        return None
    crd_type = store.registry.by_key("customresourcedefinitions.apiextensions.k8s.io")
    crd = store.get_locked(crd_type, "", req.rtype.crd_name)
    return crdschema.schema_of(crd.data, req.version) if crd else None


def admit(store, req, obj, quiet=False):
    """Drops the unknown fields of a request body, as fieldValidation says to report them;
    quiet: silently, as an object mutating admission webhooks patched is decoded."""
    directive = "Ignore" if quiet else mode(req)
    rtype = req.rtype
    if rtype.crd_name:
        schema = crd_schema(store, req)
        unknown = schemas.unknown_fields(obj.get("metadata"), schemas.OBJECT_META, "metadata")
        if schema is not None:
            unknown += crdschema.prune(obj, schema)
    else:
        tree = schemas.BUILTIN.get(rtype.key)
        unknown = schemas.unknown_fields(obj, tree) if tree else []
    if unknown and directive == "Strict":
        raise _decode_error(req, "strict decoding error: " + ", ".join(
            'unknown field "%s"' % f for f in unknown))
    if unknown and directive == "Warn":
        req.warnings.extend('unknown field "%s"' % f for f in unknown)
    if rtype.key == "secrets":
        bad = validation.bad_base64(obj)
        if bad:
            raise _decode_error(req, bad[1])
    defaults.decode_defaults(rtype, obj)


def check_schema(store, req, obj):
    """422 Invalid when a custom resource breaks its CRD's openAPIV3Schema."""
    if not req.rtype.crd_name:
        return
    schema = crd_schema(store, req)
    causes = crdschema.validate(obj, schema) if schema is not None else []
    if causes:
        raise invalid(req.rtype.kind, req.rtype.group, obj["metadata"].get("name", ""), causes)


def warning_header(warnings):
    """The Warning header value: each text as `299 - "text"`, quoted like a Go %q string."""
    if not warnings:
        return {}
    return {"Warning": ", ".join("299 - " + json.dumps(w) for w in warnings)}

