"""Service-account tokens and RBAC authorization, as kube-apiserver applies them.

So that a controller's manifests can be tried here: deploy/rbac.yaml's ServiceAccount, Roles
and bindings are applied with kubectl, a token for the ServiceAccount is issued through the
TokenRequest API (`kubectl create token NAME`), and requests made with that token are allowed
only as the RBAC authorizer (plugin/pkg/auth/authorizer/rbac) would allow them:
- A token is issued by POST .../serviceaccounts/NAME/token (a TokenRequest, 201) and
  authenticates as "system:serviceaccount:NS:NAME" in the groups system:serviceaccounts,
  system:serviceaccounts:NS and system:authenticated. Like a bound token it stops working
  (401) once its ServiceAccount is deleted or recreated (the token is bound to the uid).
- A request is allowed when a rule of a Role or ClusterRole bound to the user (by name, by
  ServiceAccount or by group) matches its verb, API group, resource ("pods", "pods/status",
  "*", "*/status") and, when the rule names resourceNames, the object's name. A RoleBinding
  grants in its own namespace only, a ClusterRoleBinding everywhere.
- Discovery, /version and the health paths are open to every authenticated user, as the
  system:discovery and system:public-info-viewer ClusterRoles make them.
- The sandbox's own credentials (its admin token, its client certificate, or no auth) are
  superusers, as system:masters are: RBAC binds only service-account users.
Refusals are 403 with the authorizer's message (status.rbac_forbidden).

Impersonation, as kube-apiserver's filter does it
(staging/src/k8s.io/apiserver/pkg/endpoints/filters/impersonation.go): a request with
Impersonate-User (and Impersonate-Group, one header per group, Impersonate-Uid,
Impersonate-Extra-<key> with the key percent-encoded) is allowed to act only if the
authenticated user may `impersonate` each of them: serviceaccounts (API group "", in the
ServiceAccount's namespace, by name) for a system:serviceaccount:NS:NAME user, else users, and
groups, uids and userextras/<key> in authentication.k8s.io, named by the value. Refused: 403
`users "x" is forbidden: User "y" cannot impersonate resource "users" in API group
"authentication.k8s.io" at the cluster scope`. Allowed: the request runs as the impersonated
user, who is in the groups given (a ServiceAccount without any given: its own two groups) and
system:authenticated, and whom RBAC binds whatever the name (the sandbox's superusers are only
its own credentials). Groups, a uid or extras without a user are refused with 500, as the
filter does ("requested ... without impersonating a user").
"""
import secrets
import threading
import types
import urllib.parse

from .status import internal_error, not_found, rbac_forbidden, unauthorized
from .store import dumps

SA_PREFIX = "system:serviceaccount:"
OPEN_GROUPS = ("system:authenticated",)


class Tokens:
    """The tokens issued for service accounts: token -> (namespace, name, uid)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.issued = {}

    def issue(self, store, req, body):
        """Answers a TokenRequest for req's ServiceAccount: (201, TokenRequest JSON)."""
        with store.lock:
            sa = store.get_locked(req.rtype, req.namespace, req.name)
        if sa is None:
            raise not_found(req.rtype, req.name)
        token = "sandbox-sa." + secrets.token_urlsafe(24)
        with self.lock:
            self.issued[token] = (req.namespace, req.name, sa.meta.get("uid"))
        spec = dict(body.get("spec") or {})
        spec.setdefault("audiences", ["https://kubernetes.default.svc"])
        spec.setdefault("expirationSeconds", 3600)
        return 201, dumps({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                           "metadata": {"name": req.name, "namespace": req.namespace},
                           "spec": spec,
                           "status": {"token": token,
                                      "expirationTimestamp": "2099-01-01T00:00:00Z"}})

    def user(self, store, registry, token):
        """The service-account user a token authenticates as, or None if it is not ours."""
        with self.lock:
            bound = self.issued.get(token)
        if bound is None:
            return None
        namespace, name, uid = bound
        rtype = registry.by_key("serviceaccounts")
        with store.lock:
            sa = store.get_locked(rtype, namespace, name)
        if sa is None or sa.meta.get("uid") != uid:
            raise unauthorized()
        return SA_PREFIX + namespace + ":" + name


class Impersonated(str):
    """The user a request acts as after impersonation, with the groups it was given."""

    def __new__(cls, name, group_names):
        self = super().__new__(cls, name)
        self.group_names = tuple(group_names)
        return self


AUTHN = "authentication.k8s.io"
EXTRA_PREFIX = "impersonate-extra-"


def _impersonation_requests(headers):
    """(resource, group, namespace, name, subresource) to authorize, in the filter's order."""
    user = headers.get("Impersonate-User")
    wanted = []
    if user is not None:
        if user.startswith(SA_PREFIX) and user.count(":") == 3:
            namespace, name = user[len(SA_PREFIX):].split(":", 1)
            wanted.append(("serviceaccounts", "", namespace, name, ""))
        else:
            wanted.append(("users", AUTHN, "", user, ""))
    wanted.extend(("groups", AUTHN, "", g, "") for g in headers.get_all("Impersonate-Group") or [])
    for key in sorted(set(k.lower() for k in headers.keys() if k.lower().startswith(EXTRA_PREFIX))):
        extra = urllib.parse.unquote(key[len(EXTRA_PREFIX):])
        wanted.extend(("userextras", AUTHN, "", v, extra) for v in headers.get_all(key) or [])
    uid = headers.get("Impersonate-Uid")
    if uid is not None:
        wanted.append(("uids", AUTHN, "", uid, ""))
    return user, wanted


def impersonate(store, user, headers):
    """The user the request acts as: user itself, or whom its Impersonate-* headers name,
    once user may impersonate each (403 otherwise)."""
    target, wanted = _impersonation_requests(headers)
    if not wanted:
        return user
    if target is None:
        raise internal_error("requested %s without impersonating a user"
                             % ", ".join(w[0] for w in wanted))
    for resource, group, namespace, name, sub in wanted:
        route = types.SimpleNamespace(verb="impersonate", name=name, subresource=sub,
                                      rtype=types.SimpleNamespace(plural=resource, group=group,
                                                                  qualified=resource + (
                                                                      "." + group if group else "")))
        if bound_by_rbac(user) and not _allowed(store, user, route, namespace):
            raise rbac_forbidden(route.rtype, name, user, "impersonate", namespace, sub)
    given = list(headers.get_all("Impersonate-Group") or [])
    if not given and target.startswith(SA_PREFIX):
        given = ["system:serviceaccounts",
                 "system:serviceaccounts:" + target[len(SA_PREFIX):].split(":", 1)[0]]
    if "system:authenticated" not in given:
        given.append("system:authenticated")
    return Impersonated(target, given)


def _allowed(store, user, route, namespace):
    with store.lock:
        return any(rule_allows(rule, route) for rule in rules_for_locked(store, user, namespace))


def groups(user):
    """The groups a user is in: the service-account groups, and system:authenticated."""
    if isinstance(user, Impersonated):
        return user.group_names
    if user.startswith(SA_PREFIX):
        namespace = user[len(SA_PREFIX):].split(":", 1)[0]
        return ("system:serviceaccounts", "system:serviceaccounts:" + namespace) + OPEN_GROUPS
    return OPEN_GROUPS


def bound_by_rbac(user):
    return isinstance(user, Impersonated) or user.startswith(SA_PREFIX)


def authorize(store, user, route):
    """Raises 403 unless RBAC allows user the resource request route names."""
    if route.kind != "resource" or not bound_by_rbac(user):
        return
    with store.lock:
        allowed = any(rule_allows(rule, route) for rule in rules_for_locked(store, user,
                                                                             route.namespace))
    if not allowed and "system:masters" not in groups(user):
        raise rbac_forbidden(route.rtype, route.name, user, route.verb, route.namespace,
                             route.subresource)


def rules_for_locked(store, user, namespace):
    """Every rule granted to user for a request in namespace ("" at the cluster scope)."""
    registry, mine = store.registry, set(groups(user)) | {user}
    for binding in _docs(store, registry, "clusterrolebindings.rbac.authorization.k8s.io"):
        if _binds(binding.data, mine):
            yield from _role_rules(store, registry, binding.data.get("roleRef") or {}, "")
    if not namespace:
        return
    for binding in _docs(store, registry, "rolebindings.rbac.authorization.k8s.io"):
        if binding.meta.get("namespace") == namespace and _binds(binding.data, mine):
            yield from _role_rules(store, registry, binding.data.get("roleRef") or {}, namespace)


def _docs(store, registry, key):
    rtype = registry.by_key(key)
    return list(store.items_locked(rtype).values()) if rtype else []


def _binds(binding, mine):
    for subject in binding.get("subjects") or []:
        kind, name = subject.get("kind"), subject.get("name", "")
        if kind == "ServiceAccount":
            name = SA_PREFIX + subject.get("namespace", "") + ":" + name
        if kind in ("ServiceAccount", "User", "Group") and name in mine:
            return True
    return False


def _role_rules(store, registry, ref, namespace):
    kind = ref.get("kind")
    if kind == "ClusterRole":
        rtype, ns = registry.by_key("clusterroles.rbac.authorization.k8s.io"), ""
    elif kind == "Role" and namespace:
        rtype, ns = registry.by_key("roles.rbac.authorization.k8s.io"), namespace
    else:
        return []
    role = store.get_locked(rtype, ns, ref.get("name", ""))
    return (role.data.get("rules") or []) if role else []


def rule_allows(rule, route):
    """rbac's RuleAllows for a resource request."""
    resource = route.rtype.plural + ("/" + route.subresource if route.subresource else "")
    return (_has(rule.get("verbs"), route.verb)
            and _has(rule.get("apiGroups"), route.rtype.group)
            and _resource_matches(rule.get("resources") or [], resource, route.subresource)
            and (not rule.get("resourceNames") or route.name in rule["resourceNames"]))


def _has(values, wanted):
    values = values or []
    return "*" in values or wanted in values


def _resource_matches(resources, resource, subresource):
    for r in resources:
        if r == "*" or r == resource or (subresource and r == "*/" + subresource):
            return True
    return False
