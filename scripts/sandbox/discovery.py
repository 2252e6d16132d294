"""Discovery documents (/api, /apis, ...) and the OpenAPI v3 documents kubectl consults.

kubectl 1.32 asks for aggregated discovery first; answering with the legacy documents
(Content-Type application/json) makes it fall back, as it does against older servers.
The OpenAPI v3 documents are minimal: one PATCH operation per kind, declaring the
fieldValidation parameter, which is what kubectl checks before it lets the server
validate fields. They carry no schemas.
"""
import hashlib
import json

VERSION_INFO = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-klua-sandbox",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z",
                "goVersion": "go1.23.3", "compiler": "gc", "platform": "linux/amd64"}


def api_versions(server_address):
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                            "serverAddress": server_address}]}


def _group(name, versions):
    entries = [{"groupVersion": "%s/%s" % (name, v), "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(registry):
    groups = registry.groups()
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group(g, vs) for g, vs in groups.items()]}


def api_group(registry, group):
    versions = registry.groups().get(group)
    if not versions:
        return None
    return dict(_group(group, versions), kind="APIGroup", apiVersion="v1")


def resource_list(registry, group, version):
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources = [entry for t in types for entry in t.discovery()]
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": "%s/%s" % (group, version) if group else version,
            "resources": resources}


def _gv_path(group, version):
    return "apis/%s/%s" % (group, version) if group else "api/" + version


def openapi_index(registry):
    """The /openapi/v3 index; each URL's hash changes when the document does."""
    paths = {}
    for group, version in _group_versions(registry):
        text = json.dumps(openapi_document(registry, group, version), sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()[:32].upper()
        path = _gv_path(group, version)
        paths[path] = {"serverRelativeURL": "/openapi/v3/%s?hash=%s" % (path, digest)}
    return {"paths": paths}


def _group_versions(registry):
    seen = []
    for t in registry.all():
        for v in t.versions:
            if (t.group, v) not in seen:
                seen.append((t.group, v))
    return seen


FIELD_VALIDATION = {"name": "fieldValidation", "in": "query", "schema": {"type": "string"},
                    "description": "Ignore, Warn or Strict: how the server treats unknown "
                                   "or duplicate fields."}


def _patch_operation(rtype, version):
    # Strategic merge patch is left out on purpose: advertising it makes kubectl apply look
    # for schemas here; without it kubectl computes the patch from its compiled-in types.
    content = {"application/json-patch+json": {}, "application/merge-patch+json": {},
               "application/apply-patch+yaml": {}}
    return {"operationId": "patch" + rtype.kind, "parameters": [FIELD_VALIDATION],
            "requestBody": {"content": content},
            "responses": {"200": {"description": "OK"}},
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": {"group": rtype.group, "version": version,
                                                "kind": rtype.kind}}


def openapi_document(registry, group, version):
    types = registry.in_group_version(group, version)
    if not types:
        return None
    paths = {}
    for t in types:
        scope = "/namespaces/{namespace}" if t.namespaced else ""
        path = "/%s%s/%s/{name}" % (_gv_path(group, version), scope, t.plural)
        paths[path] = {"patch": _patch_operation(t, version)}
    return {"openapi": "3.0.0",
            "info": {"title": "Kubernetes (klua sandbox)", "version": VERSION_INFO["gitVersion"]},
            "paths": paths, "components": {"schemas": {}}}
