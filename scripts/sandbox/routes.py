"""Maps a request path onto what it names: a discovery document or a resource call."""
from .status import method_not_allowed, path_not_found


def query_bool(params, name):
    """A boolean query parameter as apimachinery converts it: false when absent or "false"
    or "0" (any case), true otherwise, "?watch=" included."""
    value = params.get(name)
    return value is not None and value.lower() not in ("false", "0")


class Route:
    """kind is one of root, version, health, api, apis, group, resources, openapi_v2,
    openapi_index, openapi, resource. The rest is set when it applies."""

    def __init__(self, kind, **fields):
        self.kind = kind
        self.verb = "discovery"
        self.group = fields.get("group", "")
        self.version = fields.get("version", "")
        self.rtype = None
        self.namespace = ""
        self.name = ""
        self.subresource = ""


def resolve(method, path, params, registry):
    parts = [p for p in path.split("/") if p]
    simple = _simple(parts)
    if simple:
        return simple
    if parts[:2] == ["openapi", "v3"]:
        return _openapi(parts[2:])
    if parts[:2] == ["api", "v1"]:
        return _resource(method, "", "v1", parts[2:], params, registry)
    if parts and parts[0] == "apis" and len(parts) >= 3:
        return _resource(method, parts[1], parts[2], parts[3:], params, registry)
    if len(parts) == 2 and parts[0] == "apis":
        return Route("group", group=parts[1])
    raise path_not_found()


def _simple(parts):
    if not parts:
        return Route("root")
    if len(parts) == 1 and parts[0] in ("healthz", "readyz", "livez"):
        return Route("health")
    names = {("version",): "version", ("api",): "api", ("apis",): "apis",
             ("openapi", "v2"): "openapi_v2", ("openapi", "v3"): "openapi_index"}
    kind = names.get(tuple(parts))
    return Route(kind) if kind else None


def _openapi(rest):
    if rest[:1] == ["api"] and len(rest) == 2:
        return Route("openapi", version=rest[1])
    if rest[:1] == ["apis"] and len(rest) == 3:
        return Route("openapi", group=rest[1], version=rest[2])
    raise path_not_found()


def _resource(method, group, version, rest, params, registry):
    if not rest:
        return Route("resources", group=group, version=version)
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise path_not_found()
    rtype = registry.lookup(group, version, rest[0])
    if rtype is None or (namespace and not rtype.namespaced):
        raise path_not_found()
    route = Route("resource", group=group, version=version)
    route.rtype = rtype
    route.namespace = namespace
    route.name = rest[1] if len(rest) > 1 else ""
    route.subresource = rest[2] if len(rest) > 2 else ""
    if route.subresource and not _has_subresource(rtype, route.subresource):
        raise path_not_found()
    route.verb = _verb(method, route, params)
    return route


def _has_subresource(rtype, name):
    return ((name == "status" and rtype.status) or (name == "scale" and rtype.scale)
            or (name == "token" and rtype.key == "serviceaccounts"))


def _verb(method, route, params):
    named = bool(route.name)
    if method == "GET":
        if named:
            return "get"
        return "watch" if query_bool(params, "watch") else "list"
    verbs = {("POST", False): "create", ("PUT", True): "update", ("PATCH", True): "patch",
             ("DELETE", True): "delete", ("DELETE", False): "deletecollection"}
    if route.subresource == "token":
        # A TokenRequest is created on its ServiceAccount: POST .../serviceaccounts/NAME/token.
        verbs = {("POST", True): "create"}
    verb = verbs.get((method, named))
    if verb is None or (route.subresource not in ("", "token") and verb not in ("update", "patch")):
        raise method_not_allowed(route.rtype)
    if route.rtype.namespaced and not route.namespace:
        raise method_not_allowed(route.rtype)
    return verb
