"""admissionregistration.k8s.io/v1 webhook configurations: their defaults and validation.

Defaults as pkg/apis/admissionregistration/v1/defaults.go sets them; validation as
pkg/apis/admissionregistration/validation/validation.go refuses, for the fields the sandbox
acts on (webhooks.py calls the webhooks).
"""
import urllib.parse

from .status import Cause

GROUP = "admissionregistration.k8s.io"
MUTATING_KEY = "mutatingwebhookconfigurations." + GROUP
VALIDATING_KEY = "validatingwebhookconfigurations." + GROUP
KEYS = (MUTATING_KEY, VALIDATING_KEY)
DEFAULT_TIMEOUT = 10
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT", "*")


def set_defaults(rtype, obj):
    """SetDefaults_ValidatingWebhook / SetDefaults_MutatingWebhook / SetDefaults_Rule /
    SetDefaults_ServiceReference (pkg/apis/admissionregistration/v1/defaults.go)."""
    for hook in obj.get("webhooks") or []:
        if not isinstance(hook, dict):
            continue
        hook.setdefault("failurePolicy", "Fail")
        hook.setdefault("matchPolicy", "Equivalent")
        hook.setdefault("namespaceSelector", {})
        hook.setdefault("objectSelector", {})
        hook.setdefault("timeoutSeconds", DEFAULT_TIMEOUT)
        if rtype.key == MUTATING_KEY:
            hook.setdefault("reinvocationPolicy", "Never")
        for rule in hook.get("rules") or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")
        service = (hook.get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)


def causes(rtype, obj):
    """What ValidateValidatingWebhookConfiguration / ValidateMutatingWebhookConfiguration
    (pkg/apis/admissionregistration/validation/validation.go) refuse, for the fields the
    sandbox acts on."""
    out = []
    names = set()
    for i, hook in enumerate(obj.get("webhooks") or []):
        at = "webhooks[%d]" % i
        if not isinstance(hook, dict):
            out.append(Cause(at, "Invalid value", "must be an object", ""))
            continue
        name = hook.get("name") or ""
        if not name:
            out.append(Cause(at + ".name", "Required value", ""))
        elif len(name.split(".")) < 3:
            out.append(Cause(at + ".name", "Invalid value",
                             "should be a domain with at least three segments separated by dots",
                             name))
        elif name in names:
            out.append(Cause(at + ".name", "Duplicate value", "", name))
        names.add(name)
        out += client_causes(at + ".clientConfig", hook.get("clientConfig"))
        side = hook.get("sideEffects")
        if side is None:
            out.append(Cause(at + ".sideEffects", "Required value",
                             "must specify one of None, NoneOnDryRun"))
        elif side not in ("None", "NoneOnDryRun"):
            out.append(Cause(at + ".sideEffects", "Unsupported value",
                             'supported values: "None", "NoneOnDryRun"', side))
        versions = hook.get("admissionReviewVersions")
        if not versions:
            out.append(Cause(at + ".admissionReviewVersions", "Required value",
                             "must specify one of v1, v1beta1"))
        elif "v1" not in versions:
            # The sandbox speaks only v1; kube-apiserver would also take v1beta1.
            out.append(Cause(at + ".admissionReviewVersions", "Invalid value",
                             "must include at least one of v1", versions))
        if hook.get("failurePolicy") not in ("Fail", "Ignore"):
            out.append(Cause(at + ".failurePolicy", "Unsupported value",
                             'supported values: "Fail", "Ignore"', hook.get("failurePolicy")))
        timeout = hook.get("timeoutSeconds")
        if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 30:
            out.append(Cause(at + ".timeoutSeconds", "Invalid value",
                             "the timeout value must be between 1 and 30 seconds", timeout))
        for j, rule in enumerate(hook.get("rules") or []):
            ops = (rule if isinstance(rule, dict) else {}).get("operations") or []
            where = "%s.rules[%d].operations" % (at, j)
            if not ops:
                out.append(Cause(where, "Required value", ""))
            out += [Cause("%s[%d]" % (where, k), "Unsupported value",
                          'supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE"', op)
                    for k, op in enumerate(ops) if op not in OPERATIONS]
    return out


def client_causes(at, config):
    config = config if isinstance(config, dict) else {}
    url, service = config.get("url"), config.get("service")
    if url and service:
        return [Cause(at, "Required value", "exactly one of url or service is required")]
    if not url and not service:
        return [Cause(at, "Required value", "exactly one of url or service is required")]
    if url:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https":
            return [Cause(at + ".url", "Invalid value", "'https' is the only allowed URL scheme",
                          url)]
        if not parts.hostname:
            return [Cause(at + ".url", "Invalid value", "host must be specified", url)]
    return []
