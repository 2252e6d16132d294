"""Custom resources against their CRD's structural openAPIV3Schema: validation and pruning.

Models staging/src/k8s.io/apiextensions-apiserver: pkg/apiserver/schema/pruning (fields the
schema does not specify are dropped unless x-kubernetes-preserve-unknown-fields) and
pkg/apiserver/validation (kube-openapi's validator, its errors turned into field errors by
kubeOpenAPIResultToFieldErrors, so messages read "spec.size in body should be ...").
"""
import re

from .status import Cause

JSON_TYPES = {"string": (str,), "boolean": (bool,), "object": (dict,), "array": (list,)}


def schema_of(crd, version):
    """The openAPIV3Schema of crd at version, or None when it declares none."""
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("name") == version:
            return ((v.get("schema") or {}).get("openAPIV3Schema")) or None
    return None


def prune(value, schema, path="", root=True):
    """Drops what schema does not specify; returns the paths dropped."""
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return _prune_known(value, schema, path) if isinstance(schema, dict) else []
    dropped = []
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key in list(value):
            here = key if not path else "%s.%s" % (path, key)
            if root and key in ("apiVersion", "kind", "metadata"):
                continue
            if props is not None and key in props:
                dropped += prune(value[key], props[key], here, False)
            elif isinstance(extra, dict):
                dropped += prune(value[key], extra, "%s[%s]" % (path, key), False)
            elif extra is True:
                continue
            else:
                dropped.append(here)
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            dropped += prune(item, schema["items"], "%s[%d]" % (path, i), False)
    return dropped


def _prune_known(value, schema, path):
    """Under preserve-unknown-fields, the specified properties are still pruned inside."""
    dropped = []
    props = schema.get("properties") or {}
    if isinstance(value, dict):
        for key, sub in props.items():
            if key in value:
                dropped += prune(value[key], sub, key if not path else "%s.%s" % (path, key),
                                 False)
    return dropped


def _type_name(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_ok(value, wanted, schema):
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    if wanted == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or \
            (isinstance(value, float) and value.is_integer())
    if wanted == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, JSON_TYPES.get(wanted, (object,)))


def _num(value):
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def validate(value, schema, path=""):
    """The field errors kube-apiserver reports for value against schema, in its order."""
    if not isinstance(schema, dict):
        return []
    name = path or "<root>"
    if value is None:
        if schema.get("nullable"):
            return []
        if "type" in schema:
            return [Cause(name, "Invalid value",
                          '%s in body must be of type %s: "null"' % (name, schema["type"]),
                          "null")]
        return []
    wanted = schema.get("type")
    if wanted and not _type_ok(value, wanted, schema):
        actual = _type_name(value)
        return [Cause(name, "Invalid value", '%s in body must be of type %s: "%s"'
                      % (name, wanted, actual), actual)]
    causes = []
    if "enum" in schema and value not in schema["enum"]:
        causes.append(Cause(name, "Unsupported value", "supported values: " + ", ".join(
            '"%s"' % v if isinstance(v, str) else str(v) for v in schema["enum"]), value))
    if isinstance(value, str):
        causes += _string_causes(value, schema, name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        causes += _number_causes(value, schema, name)
    if isinstance(value, list):
        causes += _array_causes(value, schema, name, path)
    if isinstance(value, dict):
        causes += _object_causes(value, schema, path)
    return causes


def _string_causes(value, schema, name):
    causes = []
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        causes.append(Cause(name, "Too long", "may not be more than %d bytes"
                            % schema["maxLength"], value))
    if "minLength" in schema and len(value) < schema["minLength"]:
        causes.append(Cause(name, "Invalid value", "%s in body should be at least %d chars "
                            "long" % (name, schema["minLength"]), value))
    if "pattern" in schema and not re.search(schema["pattern"], value):
        causes.append(Cause(name, "Invalid value", "%s in body should match '%s'"
                            % (name, schema["pattern"]), value))
    return causes


def _number_causes(value, schema, name):
    causes = []
    if "minimum" in schema:
        low = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= low:
            causes.append(Cause(name, "Invalid value", "%s in body should be greater than %s"
                                % (name, _num(low)), value))
        elif value < low:
            causes.append(Cause(name, "Invalid value", "%s in body should be greater than or "
                                "equal to %s" % (name, _num(low)), value))
    if "maximum" in schema:
        high = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= high:
            causes.append(Cause(name, "Invalid value", "%s in body should be less than %s"
                                % (name, _num(high)), value))
        elif value > high:
            causes.append(Cause(name, "Invalid value", "%s in body should be less than or "
                                "equal to %s" % (name, _num(high)), value))
    return causes


def _array_causes(value, schema, name, path):
    causes = []
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        causes.append(Cause(name, "Too many", "must have at most %d items"
                            % schema["maxItems"], len(value)))
    if "minItems" in schema and len(value) < schema["minItems"]:
        causes.append(Cause(name, "Invalid value", "%s in body should have at least %d items"
                            % (name, schema["minItems"]), value))
    for i, item in enumerate(value):
        causes += validate(item, schema.get("items"), "%s[%d]" % (path, i))
    return causes


def _object_causes(value, schema, path):
    causes = []
    for key in schema.get("required") or []:
        if key not in value:
            causes.append(Cause(key if not path else "%s.%s" % (path, key),
                                "Required value", ""))
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for key in sorted(value):
        if not path and key in ("apiVersion", "kind", "metadata"):
            continue
        if key in props:
            causes += validate(value[key], props[key], key if not path else "%s.%s"
                               % (path, key))
        elif isinstance(extra, dict):
            causes += validate(value[key], extra, "%s[%s]" % (path, key))
    return causes
