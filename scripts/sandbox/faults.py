"""Fault settings, their validation, and the counters GET /sandbox/v1/stats reports.

Settings persist until changed or reset; actions (expire_watches, compact, ...) happen once,
when posted. The same JSON object configures both at start (--faults) and at run time.
"""
import collections
import random
import re
import threading

from .status import bad_request, generic

DEFAULT_OVERSIZE = 17 * 1024 * 1024
VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection",
         "discovery"}


def _count(value, name, minimum=0):
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise bad_request("%s must be an integer >= %d or null" % (name, minimum))
    return value


def _number(value, name, maximum=None):
    """A non-negative number; 0 and null switch the setting off."""
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0 or \
            (maximum is not None and value > maximum):
        raise bad_request("%s must be a number in [0, %s]" % (name, maximum or "inf"))
    return float(value) or None


def _fail_rule(value):
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request('fail must be an object like {"count": 2, "code": 503}')
    unknown = set(value) - {"count", "code", "retry_after", "verbs", "path"}
    if unknown:
        raise bad_request("unknown fail keys: %s" % ", ".join(sorted(unknown)))
    code = _count(value.get("code", 500), "fail.code", 400)
    verbs = value.get("verbs") or []
    if not isinstance(verbs, list) or not set(verbs) <= VERBS:
        raise bad_request("fail.verbs must be a list of: %s" % ", ".join(sorted(VERBS)))
    try:
        path = re.compile(value.get("path") or "")
    except re.error as err:
        raise bad_request("fail.path is not a regular expression: %s" % err) from None
    return {"count": _count(value.get("count", 1), "fail.count", 1), "code": code,
            "retry_after": _count(value.get("retry_after"), "fail.retry_after"),
            "verbs": verbs, "path": path}


def _forbid(value):
    if value is None or value == {}:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad_request('forbid must be a list like ["secrets", "pods:list,watch"]')
    rules = []
    for entry in value:
        resource, _, verbs = entry.partition(":")
        rules.append((resource, set(verbs.split(",")) if verbs else None))
    return rules


def _skip_rule(value):
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request('watch_skip must be an object like {"count": 1, "resource": '
                          '"configmaps", "name": "^web-"}')
    unknown = set(value) - {"count", "resource", "name"}
    if unknown:
        raise bad_request("unknown watch_skip keys: %s" % ", ".join(sorted(unknown)))
    resource = value.get("resource")
    if resource is not None and not isinstance(resource, str):
        raise bad_request("watch_skip.resource must be a resource's plural, such as configmaps")
    try:
        name = re.compile(value.get("name") or "")
    except re.error as err:
        raise bad_request("watch_skip.name is not a regular expression: %s" % err) from None
    return {"count": _count(value.get("count", 1), "watch_skip.count", 1), "resource": resource,
            "name": name}


SETTINGS = {
    "watch_skip": _skip_rule,
    "watch_drop_after": lambda v: _count(v, "watch_drop_after"),
    "watch_drop_probability": lambda v: _number(v, "watch_drop_probability", 1),
    "watch_drop_mid_frame": lambda v: True if v else None,
    "watch_stall_after": lambda v: _count(v, "watch_stall_after"),
    "delay": lambda v: _number(v, "delay"),
    "fail": _fail_rule,
    "forbid": _forbid,
    "watch_list_disabled": lambda v: True if v else None,
    "cbor_disabled": lambda v: True if v else None,
    "list_cut": lambda v: _count(v, "list_cut", 1),
}
ACTIONS = {"expire_watches", "compact", "malformed_line", "unknown_event", "oversized_event",
           "restart", "seed"}


class Faults:
    """The current fault settings. settings is replaced, never mutated, so reads need no lock."""

    def __init__(self, seed=None):
        self.lock = threading.Lock()
        self.settings = {}
        self.raw = {}
        self.rng = random.Random(seed)

    def update(self, body):
        """Applies the settings in body; returns the actions it asks for."""
        if not isinstance(body, dict):
            raise bad_request("the faults body must be a JSON object")
        unknown = set(body) - set(SETTINGS) - ACTIONS
        if unknown:
            raise bad_request("unknown fault keys: %s; known: %s" % (
                ", ".join(sorted(unknown)), ", ".join(sorted(set(SETTINGS) | ACTIONS))))
        parsed = {k: SETTINGS[k](v) for k, v in body.items() if k in SETTINGS}
        actions = {k: v for k, v in body.items() if k in ACTIONS}
        with self.lock:
            if "seed" in actions:
                self.rng.seed(actions.pop("seed"))
            settings = dict(self.settings, **parsed)
            self.settings = {k: v for k, v in settings.items() if v is not None and v != []}
            self.raw = {k: v for k, v in dict(self.raw, **body).items()
                        if k in self.settings}
        return actions

    def reset(self):
        with self.lock:
            self.settings = {}
            self.raw = {}

    def describe(self):
        return dict(self.raw)

    def should_drop(self, sent):
        """Whether a watch that has sent `sent` events is dropped before the next one."""
        settings = self.settings
        after = settings.get("watch_drop_after")
        if after is not None and sent >= after:
            return True
        probability = settings.get("watch_drop_probability")
        if probability:
            with self.lock:
                return self.rng.random() < probability
        return False

    def take_failure(self, verb, target):
        """The error the next matching request is answered with, consuming one count."""
        with self.lock:
            rule = self.settings.get("fail")
            if not rule or (rule["verbs"] and verb not in rule["verbs"]) or \
                    not rule["path"].search(target):
                return None
            self._consume("fail", rule)
        return generic(rule["code"], rule["retry_after"])

    def take_list_cut(self):
        """Whether the LIST being answered is cut to its first half, consuming one count."""
        with self.lock:
            left = self.settings.get("list_cut")
            if not left:
                return False
            settings = dict(self.settings)
            if left > 1:
                settings["list_cut"] = self.raw["list_cut"] = left - 1
            else:
                del settings["list_cut"]
                self.raw.pop("list_cut", None)
            self.settings = settings
        return True

    def take_skip(self, rtype, name):
        """Whether a watch leaves out the event of object `name` of rtype without a trace,
        consuming one count: the event is lost on its way, as by a bug no client can see."""
        with self.lock:
            rule = self.settings.get("watch_skip")
            if not rule or rule["resource"] not in (None, rtype.key, rtype.plural) or \
                    not rule["name"].search(name):
                return False
            self._consume("watch_skip", rule)
        return True

    def _consume(self, key, rule):
        """Takes one of the counted rule's matches (under the lock): the rule goes once its count is spent."""
        remaining = rule["count"] - 1
        settings = dict(self.settings)
        if remaining:
            settings[key] = dict(rule, count=remaining)
            self.raw[key] = dict(self.raw[key], count=remaining)
        else:
            del settings[key]
            self.raw.pop(key, None)
        self.settings = settings

    def forbids(self, rtype, verb):
        for resource, verbs in self.settings.get("forbid", []):
            if resource in (rtype.key, rtype.plural) and (verbs is None or verb in verbs):
                return True
        return False


class Stats:
    """Request and fault counters, kept across restarts."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = collections.Counter()
        self.by_resource = collections.defaultdict(collections.Counter)
        self.faults = collections.Counter()
        self.encodings = collections.Counter()
        self.media_types = collections.Counter()
        self.restarts = 0

    def request(self, verb, resource=None):
        with self.lock:
            self.requests[verb] += 1
            if resource:
                self.by_resource[resource][verb] += 1

    def fault(self, kind, count=1):
        with self.lock:
            self.faults[kind] += count

    def encoded(self, coding):
        """Counts an answer sent with a Content-Encoding."""
        with self.lock:
            self.encodings[coding] += 1

    def served(self, media_type):
        """Counts an answer (a watch: its stream) of a media type other than JSON."""
        with self.lock:
            self.media_types[media_type] += 1

    def restarted(self):
        with self.lock:
            self.restarts += 1

    def snapshot(self):
        with self.lock:
            return {"requests": dict(self.requests),
                    "resources": {k: dict(v) for k, v in self.by_resource.items()},
                    "faults": dict(self.faults), "encodings": dict(self.encodings),
                    "media_types": dict(self.media_types),
                    "restarts": self.restarts}
