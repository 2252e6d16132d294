"""The /sandbox/v1/ control endpoint: fault settings, one-shot fault actions, stats and
the replay's progress.

It needs no credentials; it is served on the same loopback listener as the API.
"""
import json

from . import replay
from .faults import DEFAULT_OVERSIZE
from .status import bad_request, path_not_found, too_old_resource_version
from .store import dumps
from .watch import error_frame

MALFORMED = "this line is not JSON {\n"
UNKNOWN_TYPE = "SANDBOX_UNKNOWN"


def handle(handler, method, path, body):
    """Serves one control request; returns (code, json_text) or raises ApiError."""
    ctx = handler.ctx
    if path == "/sandbox/v1/stats" and method == "GET":
        return 200, dumps(stats(ctx))
    if path == "/sandbox/v1/faults" and method == "GET":
        return 200, dumps({"faults": ctx.faults.describe()})
    if path == "/sandbox/v1/faults" and method == "POST":
        try:
            request = json.loads(body.decode("utf-8") or "{}")
        except ValueError as err:
            raise bad_request("the faults body is not JSON: %s" % err) from None
        actions = ctx.faults.update(request)
        done = run_actions(handler, actions)
        return 200, dumps({"faults": ctx.faults.describe(), "injected": done})
    if path == "/sandbox/v1/pods/fail" and method == "POST":
        try:
            request = json.loads(body.decode("utf-8") or "{}")
        except ValueError as err:
            raise bad_request("the body is not JSON: %s" % err) from None
        return 200, dumps(ctx.nodes.fail(request))
    if path == "/sandbox/v1/replay" and method in ("GET", "POST"):
        return 200, dumps(replay.control(ctx, method, body))
    if path == "/sandbox/v1/reset" and method == "POST":
        ctx.faults.reset()
        return 200, dumps({"faults": {}})
    raise path_not_found()


def stats(ctx):
    out = ctx.stats.snapshot()
    with ctx.store.lock:
        watches = {}
        for w in ctx.store.watchers:
            watches[w.rtype.key] = watches.get(w.rtype.key, 0) + 1
        out.update(open_watches=len(ctx.store.watchers), watches=watches,
                   resourceVersion=str(ctx.store.rv),
                   compactedResourceVersion=str(ctx.store.compacted),
                   watchCacheResourceVersion=str(ctx.store.window_start))
    return out


def run_actions(handler, actions):
    """Performs the one-shot actions; returns {action: how many watches it reached}."""
    ctx, done = handler.ctx, {}
    if actions.get("compact"):
        with ctx.store.lock:
            ctx.store.compact_locked()
        ctx.stats.fault("compact")
        done["compact"] = 1
    makers = {"expire_watches": _expire, "malformed_line": _malformed,
              "unknown_event": _unknown, "oversized_event": _oversized}
    for name, maker in makers.items():
        value = actions.get(name)
        if value:
            done[name] = _inject(ctx, name, lambda w, v=value, m=maker: m(ctx, w, v))
    restart = actions.get("restart")
    if restart:
        down = restart.get("down_seconds", 0) if isinstance(restart, dict) else 0
        if not isinstance(down, (int, float)) or down < 0:
            raise bad_request("restart.down_seconds must be a number >= 0")
        handler.after_response = lambda: ctx.request_restart(float(down))
        ctx.stats.fault("restart")
        done["restart"] = 1
    return done


def _inject(ctx, name, make):
    with ctx.store.lock:
        watchers = list(ctx.store.watchers)
        for watcher in watchers:
            watcher.injected.extend(make(watcher))
        ctx.store.changed.notify_all()
    ctx.stats.fault(name, len(watchers))
    return len(watchers)


def _expire(ctx, watcher, _):
    err = too_old_resource_version(watcher.cursor, ctx.store.rv)
    return [("raw", error_frame(err)), ("end", "")]


def _malformed(_ctx, _watcher, value):
    text = value if isinstance(value, str) else MALFORMED
    return [("raw", text if text.endswith("\n") else text + "\n")]


def _placeholder(ctx, watcher, name):
    meta = {"name": name, "resourceVersion": str(ctx.store.rv)}
    if watcher.rtype.namespaced:
        meta["namespace"] = watcher.namespace or "default"
    return {"kind": watcher.rtype.kind, "apiVersion": watcher.rtype.api_version(watcher.version),
            "metadata": meta}


def _unknown(ctx, watcher, value):
    etype = value if isinstance(value, str) else UNKNOWN_TYPE
    obj = _placeholder(ctx, watcher, "sandbox-unknown-event")
    return [("raw", '{"type":%s,"object":%s}\n' % (json.dumps(etype), dumps(obj)))]


def _oversized(ctx, watcher, value):
    size = value if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_OVERSIZE
    obj = _placeholder(ctx, watcher, "sandbox-oversized")
    obj["data"] = {"blob": ""}
    frame = '{"type":"ADDED","object":%s}\n' % dumps(obj)
    pad = "x" * max(0, size - len(frame))
    return [("raw", frame.replace('"blob":""', '"blob":"%s"' % pad, 1))]
