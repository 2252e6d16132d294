"""metav1.Status bodies with the codes, reasons and messages kube-apiserver uses."""
import json


class ApiError(Exception):
    """An error answered as a metav1.Status object with an HTTP status code."""

    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self):
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": self.message}
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def success(name, rtype, uid=None):
    """The Status a DELETE answers with when the object is gone at once."""
    details = resource_details(rtype, name)
    if uid:
        details["uid"] = uid
    return {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Success", "details": details}


def resource_details(rtype, name=None):
    details = {}
    if name:
        details["name"] = name
    if rtype.group:
        details["group"] = rtype.group
    details["kind"] = rtype.plural
    return details


def not_found(rtype, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (rtype.qualified, name),
                    resource_details(rtype, name))


def path_not_found():
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(rtype, name):
    return ApiError(409, "AlreadyExists", '%s "%s" already exists' % (rtype.qualified, name),
                    resource_details(rtype, name))


def conflict(rtype, name, why):
    return ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": %s'
                    % (rtype.qualified, name, why), resource_details(rtype, name))


def stale_conflict(rtype, name):
    return conflict(rtype, name, "the object has been modified; please apply your changes "
                    "to the latest version and try again")


class Cause:
    """One field error of an Invalid Status (field.Error in the real server)."""

    REASONS = {"Invalid value": "FieldValueInvalid", "Required value": "FieldValueRequired",
               "Forbidden": "FieldValueForbidden", "Unsupported value": "FieldValueNotSupported",
               "Duplicate value": "FieldValueDuplicate", "Too long": "FieldValueTooLong",
               "Too many": "FieldValueTooMany"}

    def __init__(self, field, kind, detail, value=None):
        self.field = field
        self.kind = kind
        self.detail = detail
        self.value = value

    def body(self):
        if self.kind in ("Invalid value", "Unsupported value", "Duplicate value", "Too many"):
            text = '%s: %s' % (self.kind, quote_value(self.value))
            return text + (": " + self.detail if self.detail else "")
        # field.Error.ErrorBody: a Required or Forbidden error without detail is just its type.
        return "%s: %s" % (self.kind, self.detail) if self.detail else self.kind

    def message(self):
        return "%s: %s" % (self.field, self.body())


def quote_value(value):
    if isinstance(value, str):
        return '"%s"' % value
    if value is None:
        return "null"
    # Like field.Error: numbers and booleans as Go prints them, anything else as JSON.
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def invalid(kind, group, name, causes):
    """422 Invalid: kind is the object kind (Pod), as the real server reports it."""
    qualified = kind + ("." + group if group else "")
    if len(causes) == 1:
        summary = causes[0].message()
    else:
        summary = "[" + ", ".join(c.message() for c in causes) + "]"
    # StatusDetails.name is omitempty: options objects (PatchOptions...) have none.
    details = {"name": name} if name else {}
    details.update(kind=kind, causes=[{"reason": Cause.REASONS.get(c.kind, "FieldValueInvalid"),
                                       "message": c.body(), "field": c.field} for c in causes])
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (qualified, name, summary), details)


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def unauthorized():
    return ApiError(401, "Unauthorized", "Unauthorized")


def forbidden(rtype, name, why):
    subject = rtype.qualified if not name else '%s "%s"' % (rtype.qualified, name)
    return ApiError(403, "Forbidden", "%s is forbidden: %s" % (subject, why),
                    resource_details(rtype, name))


def rbac_forbidden(rtype, name, user, verb, namespace, subresource=""):
    resource = rtype.plural + ("/" + subresource if subresource else "")
    scope = 'in the namespace "%s"' % namespace if namespace else "at the cluster scope"
    why = 'User "%s" cannot %s resource "%s" in API group "%s" %s' % (
        user, verb, resource, rtype.group, scope)
    return forbidden(rtype, name, why)


def method_not_allowed(rtype):
    details = resource_details(rtype)
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource", details)


def unsupported_media_type(accepted):
    return ApiError(415, "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types "
                    "include: " + ", ".join(accepted))


def expired(message):
    return ApiError(410, "Expired", message)


def too_old_resource_version(requested, oldest):
    return expired("too old resource version: %d (%d)" % (requested, oldest))


INCONSISTENT_CONTINUE = ("The provided continue parameter is too old to display a consistent "
                         "list result. You can start a new list without the continue parameter.")


def too_large_resource_version(requested, current, retry_after=1):
    details = {"causes": [{"reason": "ResourceVersionTooLarge",
                           "message": "Too large resource version"}],
               "retryAfterSeconds": retry_after}
    return ApiError(504, "Timeout", "Timeout: Too large resource version: %d, current: %d"
                    % (requested, current), details)


def too_many_requests(retry_after):
    return ApiError(429, "TooManyRequests", "Too many requests, please try again later.",
                    {"retryAfterSeconds": retry_after}, {"Retry-After": str(retry_after)})


def storage_initializing():
    """What kube-apiserver answers while a resource's new watch cache is being filled
    (cacher.go with ResilientWatchCacheInitialization, on by default since 1.31)."""
    return ApiError(429, "TooManyRequests", "storage is (re)initializing",
                    {"retryAfterSeconds": 1}, {"Retry-After": "1"})


def internal_error(why):
    return ApiError(500, "InternalError", "Internal error occurred: " + why,
                    {"causes": [{"message": why}]})


def service_unavailable():
    return ApiError(503, "ServiceUnavailable",
                    "the server is currently unable to handle the request", {})


# The reason and message the real server gives for each code it can answer with.
GENERIC = {
    400: ("BadRequest", "the server rejected our request for an unknown reason"),
    401: ("Unauthorized", "Unauthorized"),
    403: ("Forbidden", "forbidden"),
    404: ("NotFound", "the server could not find the requested resource"),
    405: ("MethodNotAllowed", "the server does not allow this method on the requested resource"),
    409: ("Conflict", "the server reported a conflict"),
    410: ("Expired", "the resource version is too old"),
    422: ("Invalid", "the server rejected our request due to an error in our request"),
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: sandbox fault"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "the server was unable to return a response in the time allotted, "
          "but may still be processing the request"),
}


def generic(code, retry_after=None):
    """The error an injected fault answers with: code's usual reason and message."""
    if code == 429:
        return too_many_requests(retry_after if retry_after is not None else 1)
    if code == 500:
        err = internal_error("sandbox fault")
    else:
        reason, message = GENERIC.get(code, ("", "sandbox fault"))
        err = ApiError(code, reason, message, {} if code in (503, 504) else None)
    if retry_after is not None:
        err.headers["Retry-After"] = str(retry_after)
        if err.details is not None:
            err.details["retryAfterSeconds"] = retry_after
    return err
