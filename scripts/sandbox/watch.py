"""Watch streams: replay from history, then live events, bookmarks and injected faults.

Each watch runs in its request thread. It sleeps on the store's condition variable and
wakes for new events, injected frames, its next bookmark or deadline, and every
LIVENESS_SECONDS to notice a client that hung up.
"""
import select
import time

from . import cbor, partial, tables
from .api import list_options_invalid, parse_rv, render
from .selection import FieldSelector, LabelSelector
from .sharding import ShardSelector
from .status import ApiError, too_large_resource_version
from .store import dumps

LIVENESS_SECONDS = 0.5
DEFAULT_TIMEOUT = 1800
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
HANGUP = select.POLLHUP | select.POLLERR | select.POLLNVAL | getattr(select, "POLLRDHUP", 0)


class WatchEnded(Exception):
    """Ends the watch; clean=True finishes the chunked body, False drops the connection."""

    def __init__(self, clean):
        super().__init__("clean" if clean else "dropped")
        self.clean = clean


class Watcher:
    """What one watch selects, and the frames faults inject into it (guarded by the store lock)."""

    def __init__(self, rtype, version, namespace, labels, fields, shard=None):
        self.rtype = rtype
        self.shard = shard
        self.version = version
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.injected = []
        self.closed = None
        self.cursor = 0
        # The Table or metadata-only form the client's Accept header asked for, if any.
        self.form = None

    def close(self, clean):
        """Ends the watch at its next wake-up; the caller notifies the store condition."""
        self.closed = WatchEnded(clean)

    def matches(self, doc):
        return (doc is not None and self.labels.matches(doc.meta.get("labels"))
                and self.fields.matches(doc.data)
                and (self.shard is None or self.shard.matches(doc)))

    def change(self, event):
        """(event type, object) event is for this watch, or None; watch-cache filtering
        semantics. It is encoded (and converted, for a custom resource with a conversion
        webhook) once the store lock is let go."""
        if event.rkey != self.rtype.key:
            return None
        if self.namespace and event.namespace != self.namespace:
            return None
        if event.type == "DELETED":
            return ("DELETED", event.doc) if self.matches(event.prev) else None
        now, before = self.matches(event.doc), self.matches(event.prev)
        if now:
            return ("MODIFIED" if before else "ADDED", event.doc)
        if before:
            gone = dict(event.prev.data, metadata=dict(event.prev.meta,
                                                       resourceVersion=str(event.rv)))
            return ("DELETED", gone)
        return None

    def encode(self, etype, obj):
        if self.form:
            return self.form.encode(etype, render(self.rtype, self.version, obj))
        return '{"type":"%s","object":%s}\n' % (etype, render(self.rtype, self.version, obj))

    def bookmark(self, rv, initial_end=False):
        meta = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        return self.encode("BOOKMARK", {"kind": self.rtype.kind,
                                        "apiVersion": self.rtype.api_version(self.version),
                                        "metadata": meta})


class Options:
    """The watch query parameters, validated the way the real server validates them."""

    def __init__(self, req, watch_list=True):
        self.rv = req.param("resourceVersion")
        self.match = req.param("resourceVersionMatch")
        send = req.params.get("sendInitialEvents")
        self.send_initial = None if send is None else req.flag("sendInitialEvents")
        self.bookmarks = req.flag("allowWatchBookmarks")
        timeout = parse_rv(req.param("timeoutSeconds") or "0", "timeoutSeconds")
        self.timeout = timeout or DEFAULT_TIMEOUT
        self._validate(watch_list)

    def _validate(self, watch_list):
        if self.send_initial is not None and self.match != "NotOlderThan":
            raise list_options_invalid("resourceVersionMatch", "Forbidden",
                                       "sendInitialEvents requires setting "
                                       "resourceVersionMatch to NotOlderThan")
        # apiserver's validateWatchOptions with the WatchList feature gate off.
        if self.send_initial is not None and not watch_list:
            raise list_options_invalid("sendInitialEvents", "Forbidden",
                                       "sendInitialEvents is forbidden for watch unless the "
                                       "WatchList feature gate is enabled")
        if self.match and self.send_initial is None:
            raise list_options_invalid("resourceVersionMatch", "Forbidden",
                                       "resourceVersionMatch is forbidden for watch unless "
                                       "sendInitialEvents is provided")
        if self.match and self.match != "NotOlderThan":
            raise list_options_invalid("resourceVersionMatch", "Unsupported value",
                                       'supported values: "NotOlderThan"', self.match)
        if self.rv:
            parse_rv(self.rv)


def error_frame(err):
    """The ERROR event a watch ends with, carrying err as a Status."""
    return '{"type":"ERROR","object":%s}\n' % dumps(err.status())


def client_gone(sock):
    """True once the peer has closed or reset the connection; never blocks."""
    try:
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN | HANGUP)
        return any(ev & HANGUP for _, ev in poller.poll(0))
    except (OSError, ValueError):
        return True


class WatchStream:
    """Serves one watch request over an HTTP/1.1 chunked response."""

    def __init__(self, ctx, handler, req):
        self.ctx = ctx
        self.store = ctx.store
        self.handler = handler
        self.opts = Options(req, not ctx.faults.settings.get("watch_list_disabled"))
        self.watcher = Watcher(req.rtype, req.version, req.namespace if req.rtype.namespaced
                               else "", LabelSelector(req.param("labelSelector")),
                               FieldSelector(req.param("fieldSelector"), req.rtype.fields),
                               ShardSelector(req.param("shardSelector"),
                                             ctx.api.sharded_list_watch))
        accept = handler.headers.get("Accept")
        table, form = tables.wanted_version(accept), partial.wanted(accept)
        if table and self.opts.send_initial and self.opts.bookmarks:
            tables.check_watch_list(accept)
            table = None
        if table:
            self.watcher.form = tables.WatchTables(ctx.store, req, table)
        elif form:
            self.watcher.form = partial.WatchPartial(form)
        self.sent = 0
        self.started = time.monotonic()
        self.deadline = self.started + self.opts.timeout
        self.next_bookmark = None
        interval = ctx.bookmark_interval
        if self.opts.bookmarks and interval > 0:
            self.next_bookmark = self.started + interval

    def serve(self):
        with self.store.lock:
            initial, failure = self._start_locked()
            self.store.watchers.add(self.watcher)
            if self.ctx.replay and not failure:
                self.ctx.replay.watched_locked(self.watcher.rtype)
        try:
            self.handler.start_chunked()
            if failure:
                self._write(error_frame(failure))
                raise WatchEnded(True)
            for doc in initial:
                self._event(self._encoded("ADDED", doc))
            if self.opts.send_initial and self.opts.bookmarks:
                self._write(self.watcher.bookmark(self.watcher.cursor, initial_end=True))
            self._loop()
        except WatchEnded as end:
            if end.clean:
                self.handler.end_chunked()
            else:
                self.handler.drop_connection()
        except OSError:
            self.handler.close_connection = True
        finally:
            with self.store.lock:
                self.store.watchers.discard(self.watcher)

    def _start_locked(self):
        """(initial objects to send as ADDED, an error to send instead); sets the cursor."""
        opts, store = self.opts, self.store
        store.check_cache_ready_locked(self.watcher.rtype)
        wants_state = opts.send_initial or (opts.send_initial is None and opts.rv in ("", "0"))
        if opts.rv not in ("", "0"):
            wanted = parse_rv(opts.rv)
            if opts.send_initial and not store.wait_for_rv_locked(wanted, self.ctx.api.rv_wait):
                raise too_large_resource_version(wanted, store.rv)
            if not wants_state:
                self.watcher.cursor = wanted
                try:
                    store.events_after_locked(wanted, self.watcher.rtype.key)
                except ApiError as err:
                    return [], err
                return [], None
        if opts.rv == "" and opts.send_initial:
            # A consistent watch-list: the watch cache catches up with storage first.
            store.wait_for_cache_locked(store.rv, self.ctx.api.rv_wait)
        items, self.watcher.cursor = store.cache_items_locked(self.watcher.rtype)
        if not wants_state:
            return [], None
        return [items[k] for k in sorted(items)
                if self._selects(k) and self.watcher.matches(items[k])], None

    def _selects(self, key):
        return not self.watcher.namespace or key.startswith(self.watcher.namespace + "/")

    def _loop(self):
        while True:
            self._check_stall()
            for kind, frame in self._next_frames():
                if kind == "event":
                    self._event(self._encoded(*frame))
                elif kind == "end":
                    raise WatchEnded(True)
                else:
                    self._write(frame)

    def _next_frames(self):
        """Waits once for something to send; returns [(kind, text)], kind event, raw or end."""
        with self.store.lock:
            frames = self._injected_locked() + self._events_locked()
            if frames:
                return frames
            if self.watcher.closed:
                raise self.watcher.closed
            now = time.monotonic()
            if now >= self.deadline:
                raise WatchEnded(True)
            if self.next_bookmark is not None and now >= self.next_bookmark:
                self.next_bookmark = now + self.ctx.bookmark_interval
                return [("raw", self.watcher.bookmark(self.watcher.cursor))]
            wake = min(self.deadline, self.next_bookmark or self.deadline,
                       self.store.cache_due_locked(self.watcher.cursor) or self.deadline)
            self.store.changed.wait(min(wake - now, LIVENESS_SECONDS))
        if client_gone(self.handler.connection):
            raise WatchEnded(False)
        return []

    def _events_locked(self):
        """The frames of the events the watch cache holds past the cursor."""
        reached = self.store.cache_rv_locked()
        if reached <= self.watcher.cursor:
            return []
        try:
            events = self.store.events_after_locked(self.watcher.cursor,
                                                    self.watcher.rtype.key)
        except ApiError as err:
            return [("raw", error_frame(err)), ("end", "")]
        frames = []
        for event in events[:reached - self.watcher.cursor]:
            change = self.watcher.change(event)
            if change and self._skipped_locked(event):
                continue
            if change:
                frames.append(("event", change))
        self.watcher.cursor = reached
        return frames

    def _skipped_locked(self, event):
        """Whether the watch_skip fault takes this event: the watch goes on past it."""
        if not self.ctx.faults.take_skip(self.watcher.rtype, event.doc.meta.get("name", "")):
            return False
        self.ctx.stats.fault("watch_skip")
        return True

    def _encoded(self, etype, obj):
        """The frame of one change; a conversion webhook that fails ends the watch with its
        error, as the watch cache's encoder does."""
        try:
            return self.watcher.encode(etype, obj)
        except ApiError as err:
            self._write(error_frame(err))
            raise WatchEnded(True) from None

    def _injected_locked(self):
        frames, self.watcher.injected = self.watcher.injected, []
        return frames

    def _bytes(self, frame):
        """A frame as the watch writes it: JSON, or a CBOR Sequence's item (cbor.py); a
        fault's junk stays the junk it is."""
        if self.handler.cbor:
            try:
                return cbor.from_json(frame)
            except ValueError:
                pass
        return frame.encode("utf-8")

    def _write(self, frame):
        self.handler.write_chunk(self._bytes(frame))

    def _event(self, frame):
        """Writes one object event, unless a fault stalls or drops the watch first."""
        faults = self.ctx.faults
        self._check_stall()
        if faults.should_drop(self.sent):
            self.ctx.stats.fault("watch_drop")
            if faults.settings.get("watch_drop_mid_frame"):
                data = self._bytes(frame)
                self.handler.write_chunk(data[:max(1, len(data) // 2)])
            raise WatchEnded(False)
        self._write(frame)
        self.sent += 1

    def _check_stall(self):
        stall_after = self.ctx.faults.settings.get("watch_stall_after")
        if stall_after is None or self.sent < stall_after:
            return
        self.ctx.stats.fault("watch_stall")
        self._stall()

    def _stall(self):
        """Silence until the client hangs up or the server closes the watch."""
        while True:
            with self.store.lock:
                if self.watcher.closed:
                    raise WatchEnded(False)
                self.store.changed.wait(LIVENESS_SECONDS)
            if client_gone(self.handler.connection):
                raise WatchEnded(False)
