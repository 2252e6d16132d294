"""Admission webhooks, called as kube-apiserver 1.32 calls them.

The rules come from staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook:
- configuration (mutating_webhook_manager.go, validating_webhook_manager.go): the
  configurations are taken in the order of their names, each one's webhooks in order.
- generic/webhook.go, ShouldCallHook: a webhook is called when its namespaceSelector
  (predicates/namespace/matcher.go), its objectSelector (predicates/object/matcher.go) and
  one of its rules (predicates/rules/rules.go) match the request.
- request/admissionreview.go, CreateV1AdmissionReview and VerifyAdmissionResponse: the
  AdmissionReview sent and what a response must hold.
- mutating/dispatcher.go and validating/dispatcher.go: dry runs, failurePolicy, warnings,
  denials (errors/statuserror.go, ToStatusErr) and JSON patches.
- k8s.io/apiserver/pkg/util/webhook/client.go and error.go: the call (`?timeout=Ns` in the
  URL) and ErrCallingWebhook's text, `failed calling webhook "NAME": ...`.
"""
import base64
import http.client
import json
import queue
import socket
import ssl
import threading
import urllib.parse
import uuid

from . import rbac
from .objects import selector_string
from .patch import PatchError, json_patch
from .selection import LabelSelector
from .status import ApiError, internal_error
from .store import dumps
from .webhookconfig import DEFAULT_TIMEOUT, MUTATING_KEY, VALIDATING_KEY

REVIEW_VERSION = "admission.k8s.io/v1"
OPTIONS_KIND = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}


# -- matching ---------------------------------------------------------------------------

class Attributes:
    """What admission knows of one request (admission.Attributes)."""

    def __init__(self, req, operation, obj, old, options):
        rtype = req.rtype
        self.group, self.version, self.resource = rtype.group, req.version, rtype.plural
        self.subresource = req.tracked_subresource or ""
        # The scale subresource is admitted as an autoscaling/v1 Scale.
        self.kind = ("autoscaling", "v1", "Scale") if self.subresource == "scale" else \
            (rtype.group, req.version, rtype.kind)
        self.name = req.name or ((obj or old or {}).get("metadata") or {}).get("name", "")
        self.is_namespace = rtype.key == "namespaces"
        # A request naming a namespace in its path has that name for its namespace, as the
        # request info resolver sets it (rules.go, scope()); a create has none.
        self.namespace = req.namespace or (req.name if self.is_namespace else "")
        self.operation = operation
        self.obj, self.old = obj, old
        self.options = options
        self.dry_run = req.dry_run()
        self.user = req.user


def _selector(value):
    return LabelSelector(selector_string(value)) if isinstance(value, dict) else LabelSelector("")


def _rule_matches(rule, attr):
    """rules.go, Matcher.Matches: scope, operation, group, version and resource."""
    def any_of(items, wanted):
        return any(item in ("*", wanted) for item in items or [])
    scope = rule.get("scope", "*")
    is_ns = attr.is_namespace
    if scope == "Namespaced" and (is_ns or not attr.namespace):
        return False
    if scope == "Cluster" and not (is_ns or not attr.namespace):
        return False
    if not any_of(rule.get("operations"), attr.operation):
        return False
    if not any_of(rule.get("apiGroups"), attr.group) or \
            not any_of(rule.get("apiVersions"), attr.version):
        return False
    for res in rule.get("resources") or []:
        name, _, sub = res.partition("/")
        if name in ("*", attr.resource) and sub in ("*", attr.subresource):
            return True
    return False


def _namespace_labels_locked(store, attr):
    """matcher.go, GetNamespaceLabels: a namespace created or updated is matched by its own
    labels; anything else by its namespace's as stored."""
    if attr.is_namespace and not attr.subresource and attr.operation in ("CREATE", "UPDATE"):
        return (attr.obj.get("metadata") or {}).get("labels") or {}
    ns_type = store.registry.lookup("", "v1", "namespaces")
    ns = store.get_locked(ns_type, "", attr.namespace)
    return (ns.meta.get("labels") or {}) if ns else {}


def _should_call_locked(store, hook, attr):
    """ShouldCallHook: namespace selector, object selector, then the rules. Cluster-scoped
    objects other than namespaces are never exempted by a namespaceSelector; an
    objectSelector matches when it matches the new object or the old one (none: never)."""
    ns_selector = _selector(hook.get("namespaceSelector"))
    if (attr.namespace or attr.is_namespace) and not ns_selector.empty() and \
            not ns_selector.matches(_namespace_labels_locked(store, attr)):
        return False
    obj_selector = _selector(hook.get("objectSelector"))
    if not obj_selector.empty() and \
            not any(obj_selector.matches((o.get("metadata") or {}).get("labels") or {})
                    for o in (attr.obj, attr.old) if isinstance(o, dict)):
        return False
    return any(_rule_matches(rule, attr) for rule in hook.get("rules") or []
               if isinstance(rule, dict))


def hooks_locked(store, key, attr):
    """The webhooks of the configurations of type key that attr calls, in call order."""
    rtype = store.registry.by_key(key)
    configs = sorted(store.items_locked(rtype).values(), key=lambda d: d.meta["name"])
    return [hook for doc in configs for hook in doc.data.get("webhooks") or []
            if _should_call_locked(store, hook, attr)]


# -- the call ---------------------------------------------------------------------------

class CallError(Exception):
    """ErrCallingWebhook: failurePolicy decides whether it fails the request."""


def _target(config):
    """The URL a clientConfig names. A service reference is reached at
    https://NAME.NAMESPACE.svc:PORT/PATH, which resolves only where that name does."""
    if config.get("url"):
        return config["url"]
    service = config.get("service") or {}
    return "https://%s.%s.svc:%d%s" % (service.get("name", ""), service.get("namespace", ""),
                                        service.get("port", 443), service.get("path") or "")


def _ssl_context(config):
    """Trust the caBundle when there is one, the system's roots otherwise (webhook/
    authentication.go, restConfigFromKubeconfig: TLSClientConfig.CAData)."""
    bundle = config.get("caBundle")
    if not bundle:
        return ssl.create_default_context()
    try:
        pem = base64.b64decode(bundle).decode("ascii")
        return ssl.create_default_context(cadata=pem)
    except (ValueError, ssl.SSLError) as err:
        raise CallError("failed to create webhook client: %s" % err) from None


def post(config, body, timeout, query_timeout=True):
    """POSTs body (bytes) as client-go's rest client does for a webhook, with the
    ?timeout=Ns an admission call appends (query_timeout); returns the decoded JSON answer,
    or raises CallError with the reason in Go's words."""
    url = _target(config)
    parts = urllib.parse.urlsplit(url)
    query = parts.query
    if query_timeout:
        query += ("&" if query else "") + "timeout=%ds" % timeout
    full = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))
    target = (parts.path or "/") + ("?" + query if query else "")
    context = _ssl_context(config)
    conn = http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout,
                                       context=context)
    try:
        conn.request("POST", target, body,
                     {"Content-Type": "application/json", "Accept": "application/json",
                      "User-Agent": "kube-apiserver-admission"})
        answer = conn.getresponse()
        data = answer.read()
    except socket.timeout:
        raise CallError('Post "%s": context deadline exceeded' % full) from None
    except ssl.SSLCertVerificationError as err:
        raise CallError('Post "%s": tls: failed to verify certificate: %s'
                        % (full, _x509_reason(err))) from None
    except ConnectionRefusedError:
        raise CallError('Post "%s": dial tcp %s:%d: connect: connection refused'
                        % (full, parts.hostname, parts.port or 443)) from None
    except socket.gaierror:
        raise CallError('Post "%s": dial tcp: lookup %s: no such host'
                        % (full, parts.hostname)) from None
    except (OSError, http.client.HTTPException) as err:
        raise CallError('Post "%s": %s' % (full, err)) from None
    finally:
        conn.close()
    if not 200 <= answer.status < 300:
        raise CallError(_status_error(answer.status, data))
    try:
        return json.loads(data)
    except ValueError as err:
        raise CallError("couldn't get version/kind; json parse error: %s" % err) from None


def _x509_reason(err):
    if "self-signed" in str(err) or "unable to get local issuer" in str(err):
        return "x509: certificate signed by unknown authority"
    return "x509: " + (err.verify_message or str(err))


def _status_error(code, data):
    """The error client-go makes of a non-2xx answer (a Status body's message, else
    apierrors.NewGenericServerResponse's text)."""
    try:
        body = json.loads(data)
        if isinstance(body, dict) and body.get("kind") == "Status" and body.get("message"):
            return body["message"]
    except ValueError:
        pass
    text = data.decode("utf-8", "replace").strip()
    if code == 500:
        return 'an error on the server (%s) has prevented the request from succeeding' \
            % json.dumps(text or "unknown")
    return "the server responded with the status code %d but did not return more " \
           "information" % code


def _user_info(user):
    groups = list(rbac.groups(user))
    if not rbac.bound_by_rbac(user):
        groups.insert(0, "system:masters")
    return {"username": str(user), "groups": groups}


def review(attr, uid):
    """CreateV1AdmissionReview: the request kube-apiserver sends (Exact matchPolicy: the
    kind and resource are those of the request)."""
    gvk = dict(zip(("group", "version", "kind"), attr.kind))
    gvr = {"group": attr.group, "version": attr.version, "resource": attr.resource}
    request = {"uid": uid, "kind": gvk, "resource": gvr}
    if attr.subresource:
        request["subResource"] = attr.subresource
    request.update(requestKind=dict(gvk), requestResource=dict(gvr))
    if attr.subresource:
        request["requestSubResource"] = attr.subresource
    if attr.name:
        request["name"] = attr.name
    if attr.namespace:
        request["namespace"] = attr.namespace
    request.update(operation=attr.operation, userInfo=_user_info(attr.user), object=attr.obj,
                   oldObject=attr.old, dryRun=attr.dry_run, options=attr.options)
    return {"kind": "AdmissionReview", "apiVersion": REVIEW_VERSION, "request": request}


def _verify(answer, uid, mutating):
    """VerifyAdmissionResponse for admission.k8s.io/v1, its checks in its order."""
    answer = answer if isinstance(answer, dict) else {}
    response = answer.get("response")

    def invalid(why):
        return CallError("received invalid webhook response: " + why)
    if not isinstance(response, dict):
        raise invalid("webhook response was absent")
    if response.get("uid") != uid:
        raise invalid('expected response.uid="%s", got "%s"' % (uid, response.get("uid", "")))
    gvk = "%s, Kind=%s" % (answer.get("apiVersion", ""), answer.get("kind", ""))
    if gvk != REVIEW_VERSION + ", Kind=AdmissionReview":
        raise invalid("expected webhook response of %s, Kind=AdmissionReview, got %s"
                      % (REVIEW_VERSION, gvk))
    patch, ptype = response.get("patch"), response.get("patchType")
    if mutating and patch and ptype is None:
        raise invalid("webhook returned response.patch but not response.patchType")
    if mutating and not patch and ptype is not None:
        raise invalid("webhook returned response.patchType but not response.patch")
    if mutating and ptype == "":
        raise invalid('webhook returned invalid response.patchType of ""')
    if not mutating and patch:
        raise invalid("validating webhook may not return response.patch")
    if not mutating and ptype is not None:
        raise invalid("validating webhook may not return response.patchType")
    return response


def denied(name, result):
    """ToStatusErr (errors/statuserror.go): the webhook's Status, at least 400 and Failure,
    its message prefixed with who denied the request."""
    result = dict(result) if isinstance(result, dict) else {}
    code = result.get("code") if isinstance(result.get("code"), int) else 0
    by = 'admission webhook "%s" denied the request' % name
    if result.get("message"):
        message = "%s: %s" % (by, result["message"])
    elif result.get("reason"):
        message = "%s: %s" % (by, result["reason"])
    else:
        message = by + " without explanation"
    return ApiError(max(code, 400), result.get("reason") or "", message, result.get("details"))


class Admission:
    """The MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins over a store.

    Called with the store lock held; the lock is let go during the calls, so a webhook may
    call the API server back, as it may on a cluster, and other requests go on."""

    def __init__(self, store):
        self.store = store

    def mutate(self, req, operation, obj, old):
        """Calls the matching mutating webhooks one after the other (reinvocationPolicy
        Never); returns obj as their JSON patches left it."""
        attr = Attributes(req, operation, obj, old, options(operation, req))
        for hook in hooks_locked(self.store, MUTATING_KEY, attr):
            uid = str(uuid.uuid4())
            body = dumps(review(attr, uid)).encode("utf-8")
            with _unlocked(self.store.lock):
                answer = _exchange(hook, body)
            ops = _judge(hook, uid, answer, req.warnings, True)
            if ops:
                attr.obj = _patched(hook, attr, ops)
        return attr.obj

    def validate(self, req, operation, obj, old):
        """Calls the matching validating webhooks all at once, as the validating
        dispatcher does, and raises the first error to come back."""
        attr = Attributes(req, operation, obj, old, options(operation, req))
        calls = []
        for hook in hooks_locked(self.store, VALIDATING_KEY, attr):
            uid = str(uuid.uuid4())
            calls.append((hook, uid, dumps(review(attr, uid)).encode("utf-8")))
        if not calls:
            return
        done = queue.Queue()
        with _unlocked(self.store.lock):
            for hook, uid, body in calls:
                threading.Thread(target=lambda h=hook, u=uid, b=body:
                                 done.put((h, u, _exchange(h, b))), daemon=True).start()
            answers = [done.get() for _ in calls]
        errors = []
        for hook, uid, answer in answers:
            try:
                _judge(hook, uid, answer, req.warnings, False)
            except ApiError as err:
                errors.append(err)
        if errors:
            raise errors[0]


class _unlocked:
    """Lets a held lock go for the length of a with block."""

    def __init__(self, lock):
        self.lock = lock

    def __enter__(self):
        self.lock.release()

    def __exit__(self, *exc):
        self.lock.acquire()


def _exchange(hook, body):
    """The webhook's decoded answer to body, or the CallError that stopped the call."""
    try:
        return post(hook.get("clientConfig") or {}, body,
                    hook.get("timeoutSeconds") or DEFAULT_TIMEOUT)
    except CallError as err:
        return CallError("failed to call webhook: %s" % err)


def _judge(hook, uid, answer, warnings, mutating):
    """What one call's answer means: the JSON patch operations a mutating webhook sent
    (None when the call failed and failurePolicy is Ignore); raises on a denial, or on a
    failure under failurePolicy Fail."""
    try:
        if isinstance(answer, CallError):
            raise answer
        response = _verify(answer, uid, mutating)
        warnings.extend(w for w in response.get("warnings") or [] if isinstance(w, str))
        if not response.get("allowed"):
            raise denied(hook.get("name", ""), response.get("status"))
        ops = _decoded_patch(response) if mutating else None
        if ops and response.get("patchType") != "JSONPatch":
            raise CallError('unsupported patch type "%s"' % response["patchType"])
        return ops
    except CallError as err:
        if hook.get("failurePolicy") == "Ignore":
            return None
        raise internal_error('failed calling webhook "%s": %s' % (hook.get("name", ""), err)) \
            from None


def _decoded_patch(response):
    """The operations of response's patch (base64 of a JSON array), or CallError."""
    if not response.get("patch"):
        return None
    try:
        ops = json.loads(base64.b64decode(response["patch"], validate=True))
        if not isinstance(ops, list):
            raise ValueError("json: cannot unmarshal %s into Go value of type jsonpatch.Patch"
                             % type(ops).__name__)
        return ops
    except (ValueError, TypeError) as err:
        raise CallError("received undecodable patch in webhook response: %s" % err) from None


def _patched(hook, attr, ops):
    """The object after the webhook's JSON patch; a patch that does not apply is an internal
    error whatever the failurePolicy."""
    if attr.obj is None:
        raise internal_error('admission webhook "%s" attempted to modify the object, which is '
                             'not supported for this operation' % hook.get("name", ""))
    try:
        return json_patch(attr.obj, ops)
    except (PatchError, ValueError, TypeError, KeyError) as err:
        raise internal_error(str(err)) from None


def options(operation, req):
    """The operation's options as admission sees them: CreateOptions, UpdateOptions (a
    patch's PatchOptions become these: patchToCreateOptions, patchToUpdateOptions in
    endpoints/handlers/patch.go) or DeleteOptions."""
    if operation == "DELETE":
        out = {k: v for k, v in (req.delete_options or {}).items()
               if k not in ("kind", "apiVersion")}
        out.update(kind="DeleteOptions", apiVersion="meta.k8s.io/v1")
        if req.dry_run():
            out["dryRun"] = ["All"]
        return out
    out = {"kind": OPTIONS_KIND[operation], "apiVersion": "meta.k8s.io/v1"}
    if req.dry_run():
        out["dryRun"] = ["All"]
    for name in ("fieldManager", "fieldValidation"):
        if req.param(name):
            out[name] = req.param(name)
    return out
