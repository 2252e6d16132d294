"""Replays a recording of `klua record` (docs/record.md): the recorded initial state is
in the store before the server listens, and the recorded watch events are committed, in
the file's order, at their recorded times divided by the speed.

The server gives every replayed object its own resourceVersion, in file order after
the seeded namespaces, rather than the recorded one: resourceVersions must grow with
the store's revision for watches, lists and the watch cache to work, and the recorded
ones, taken from several resources and a relist, need not. Everything else in an
object (uid, creationTimestamp, generation, ...) is served as recorded. So the same
file gives the same objects, resourceVersions and events in the same order.

The replay's clock starts when the first watch of a recorded resource is accepted, or at
once if one is open when the recording is loaded (the watch's cursor is then the
revision before the first event): a client started after the server, such as `klua
watch` or a controller, lists the initial state and then sees every event, however long
it took to start. POST /sandbox/v1/replay {} starts it at once. The garbage collector
stops while a recording is loaded: the recording holds what it did, as events, and it
would delete the recorded dependents of owners that were not recorded.
"""
import json
import threading
import time

from .status import bad_request

RECORDING_KIND = "KluaRecording"
RECORDING_VERSION = 1


def _fail(path, line, why):
    raise ValueError("%s:%d: %s (docs/record.md describes the format)" % (path, line, why))


def load(path):
    """(header, [entry]) of the recording at path; raises ValueError with the line."""
    header, entries = None, []
    with open(path, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
            except ValueError as err:
                _fail(path, n, "not JSON: %s" % err)
            if header is None:
                if not isinstance(line, dict) or line.get("kind") != RECORDING_KIND:
                    _fail(path, n, 'the first line is not a {"kind":"%s"} header' % RECORDING_KIND)
                if line.get("version") != RECORDING_VERSION:
                    _fail(path, n, "version %r, not %d" % (line.get("version"), RECORDING_VERSION))
                header = line
                continue
            if not isinstance(line, dict) or line.get("type") not in ("ADDED", "MODIFIED", "DELETED") \
                    or not isinstance(line.get("object"), dict) or not isinstance(line.get("t"), (int, float)) \
                    or not isinstance(line.get("resource"), str):
                _fail(path, n, "an event needs t, type (ADDED, MODIFIED or DELETED), resource and object")
            line["line"] = n
            entries.append(line)
    if header is None:
        _fail(path, 1, "empty file")
    return header, entries


class Replay:
    """One recording being replayed; install() makes one and starts its thread."""

    def __init__(self, ctx, path, speed):
        self.ctx = ctx
        self.path = path
        self.speed = speed
        self.header, entries = load(path)
        self.initial = [e for e in entries if e.get("initial")]
        self.events = [e for e in entries if not e.get("initial")]
        self.applied = 0
        self.state = "waiting"
        self.started = threading.Event()
        self.resources = set()

    def _rtype(self, entry):
        api_version = entry["object"].get("apiVersion", "")
        group, _, version = api_version.rpartition("/")
        rtype = self.ctx.store.registry.lookup(group, version, entry["resource"])
        if rtype is None:
            raise ValueError("%s:%d: the sandbox does not serve %s of %s" % (
                self.path, entry["line"], entry["resource"], api_version or "no apiVersion"))
        return rtype

    def _commit_locked(self, rtype, entry):
        obj = json.loads(json.dumps(entry["object"]))
        meta = obj.setdefault("metadata", {})
        meta.pop("resourceVersion", None)
        store = self.ctx.store
        prev = store.get_locked(rtype, meta.get("namespace", ""), meta.get("name", ""))
        store.commit_locked(rtype, entry["type"], obj, prev)

    def keep_history_locked(self):
        """Widens the watch cache to the whole replay, so that a client that lists
        late still watches from its list's resourceVersion rather than relisting."""
        store = self.ctx.store
        wanted = len(self.initial) + len(self.events) + store.history_limit
        store.history_limit = wanted
        store.storage_limit = max(store.storage_limit, wanted)

    def load_initial_locked(self):
        """Puts the recorded initial state in the store: objects in the recording's order,
        replacing one of the same name (a seeded namespace)."""
        for entry in self.initial + self.events:
            self.resources.add(self._rtype(entry).key)
        self.keep_history_locked()
        for entry in self.initial:
            self._commit_locked(self._rtype(entry), dict(entry, type="ADDED"))
        if any(w.rtype.key in self.resources for w in self.ctx.store.watchers):
            self.started.set()

    def watched_locked(self, rtype):
        """Called as a watch of rtype is accepted: the first of a recorded resource starts
        the clock."""
        if rtype.key in self.resources:
            self.started.set()

    def _run(self):
        self.started.wait()
        with self.ctx.store.lock:
            self.state = "playing"
        # The recorder had its initial state at its last initial entry: the first watch
        # here stands for that moment.
        synced = max([e["t"] for e in self.initial], default=0)
        begin = time.monotonic()
        for entry in self.events:
            delay = begin + max(entry["t"] - synced, 0) / self.speed - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with self.ctx.store.lock:
                self._commit_locked(self._rtype(entry), entry)
                self.applied += 1
        with self.ctx.store.lock:
            self.state = "done"
        self.ctx.log(1, "replay of %s done: %d events" % (self.path, self.applied))

    def describe_locked(self):
        return {"file": self.path, "state": self.state, "speed": self.speed,
                "initial": len(self.initial), "events": len(self.events), "applied": self.applied}


def install(ctx, path, speed):
    """Loads the recording at path into ctx's store and starts its replay thread, which
    waits for the clock to start; raises ValueError or OSError on a bad recording."""
    replay = Replay(ctx, path, speed)
    with ctx.store.lock:
        if ctx.replay is not None:
            raise ValueError("this sandbox already replays %s" % ctx.replay.path)
        ctx.gc.stopped = True
        replay.load_initial_locked()
        ctx.replay = replay
    threading.Thread(target=replay._run, name="sandbox-replay", daemon=True).start()


def control(ctx, method, body):
    """GET /sandbox/v1/replay: the replay's progress. POST {"file": F, "speed": S}
    loads a recording; POST {} starts the loaded one's clock now."""
    if method == "POST":
        try:
            request = json.loads(body.decode("utf-8") or "{}")
        except ValueError as err:
            raise bad_request("the body is not JSON: %s" % err) from None
        if request.get("file"):
            speed = request.get("speed", 1)
            if not isinstance(speed, (int, float)) or speed <= 0:
                raise bad_request("speed must be a number above 0")
            try:
                install(ctx, request["file"], speed)
            except (OSError, ValueError) as err:
                raise bad_request(str(err)) from None
        elif ctx.replay is not None:
            ctx.replay.started.set()
    if ctx.replay is None:
        raise bad_request('this sandbox replays nothing: POST {"file": "RECORDING"} or start it '
                          'with --replay FILE')
    with ctx.store.lock:
        return ctx.replay.describe_locked()
