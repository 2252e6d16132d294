"""A fake Kubernetes API server that is never the bottleneck.

It serves just enough of the API for klua and kubectl to list and watch Pods: discovery, the
PodList (all namespaces or one, paged or not), single Pods, and a watch stream of MODIFIED events.
Bodies come from a pre-encoded data set (see data.py) and go out with sendfile(2) in large HTTP/1.1
chunks, so the server spends almost no CPU per byte.

A watch from resourceVersion R gets the events after R, then ends (or, with watch_end "hold",
stays open); a watch with no events left stays open until timeoutSeconds or the client leaves.
resourceVersion 0 or unset starts at the first event, without the synthetic ADDED events a real
server would send first. A watch-list (sendInitialEvents=true, KEP-3157) gets what kube-apiserver
sends: every listed Pod as ADDED, a BOOKMARK annotated k8s.io/initial-events-end at the list's
resourceVersion, then the events. Label and field selectors are ignored.
"""
import base64
import bisect
import binascii
import json
import mmap
import os
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from sandbox import cbor

from . import data, pods

CHUNK = 16 << 20
# Items of one namespace are gathered into writes of about this size.
GATHER = 1 << 20
VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0", "gitCommit": "klua-bench",
           "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.3",
           "compiler": "gc", "platform": "linux/amd64"}
POD_RESOURCE = {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod",
                "verbs": ["get", "list", "watch"], "shortNames": ["po"], "categories": ["all"]}
INITIAL_EVENTS_END = ('{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{'
                      '"resourceVersion":"%d","annotations":{"k8s.io/initial-events-end":"true"}}}}\n'
                      % data.LIST_RV).encode()
NAMESPACED = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?$")


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def namespace_number(namespace):
    """Which of the data set's namespaces ("team-NN") this is, or None."""
    m = re.fullmatch(r"team-(\d\d)", namespace)
    return int(m.group(1)) if m and int(m.group(1)) < pods.NAMESPACES else None


def watch_list_refusal(query):
    """The 422 kube-apiserver answers a watch with sendInitialEvents it does not accept, or None.
    apimachinery's ValidateListOptions (internalversion/validation) needs resourceVersionMatch
    NotOlderThan with sendInitialEvents, and allowWatchBookmarks with sendInitialEvents=true, since
    the initial-events-end bookmark is the client's only sign that the initial state is complete."""
    if query.get("resourceVersionMatch") != "NotOlderThan":
        field = "resourceVersionMatch"
        message = "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
    elif flag(query["sendInitialEvents"]) and not flag(query.get("allowWatchBookmarks")):
        field, message = "allowWatchBookmarks", "sendInitialEvents requires setting allowWatchBookmarks=true"
    else:
        return None
    body = status(422, "Invalid", "ListOptions.meta.k8s.io \"\" is invalid: %s: Forbidden: %s" % (field, message))
    body["details"] = {"group": "meta.k8s.io", "kind": "ListOptions",
                       "causes": [{"reason": "FieldValueForbidden", "message": "Forbidden: " + message,
                                   "field": field}]}
    return body


def seconds(text):
    """A timeoutSeconds parameter; 0 (no limit) when absent or not a number."""
    try:
        return max(0.0, float(text or 0))
    except ValueError:
        return 0.0


def flag(text):
    """A boolean parameter as kube-apiserver reads one (apimachinery's Convert_Slice_string_To_bool):
    false only when absent, "0" or "false" in any case, so the Python client's watch=True is true."""
    return text is not None and text != "0" and text.lower() != "false"


def count(text):
    """A limit parameter; 0 (no limit) when absent or not a whole number."""
    return int(text) if text and text.isdigit() else 0


STAMP = b'"annotations":{'


def stamp_event(event, seq):
    """event (a watch event's line) with the annotations klua.bench/sent-boottime and
    klua.bench/sent-monotonic, both the time of this call in seconds on that clock, and klua.bench/seq:
    the latency scenario's clients read the clock their runtime has (klua's core.now() is
    CLOCK_BOOTTIME, Node.js's process.hrtime CLOCK_MONOTONIC) and subtract."""
    at = event.index(STAMP) + len(STAMP)
    stamps = b'"klua.bench/sent-boottime":"%.6f","klua.bench/sent-monotonic":"%.6f","klua.bench/seq":"%d",' % (
        time.clock_gettime(time.CLOCK_BOOTTIME), time.clock_gettime(time.CLOCK_MONOTONIC), seq)
    return event[:at] + stamps + event[at:]


def kubeconfig_text(url):
    """A kubeconfig for url with no credentials at all."""
    return ("apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster:\n    server: %s\n"
            "users:\n- name: bench\n  user: {}\ncontexts:\n- name: bench\n  context:\n    cluster: bench\n"
            "    user: bench\n    namespace: default\ncurrent-context: bench\n" % url)


class Selection:
    """The Pods a request sees: all listed Pods, or those of one namespace."""

    def __init__(self, cfg, namespace):
        self.contiguous = namespace is None
        self.namespace = None
        if self.contiguous:
            self.items, self.events = range(cfg.pods), range(cfg.events)
            return
        ns = namespace_number(namespace)
        if ns is None:
            self.items, self.events = range(0), range(0)
            return
        self.namespace = ns
        self.items = range(ns, cfg.pods, pods.NAMESPACES)
        self.events = cfg.namespace_events[ns]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Responses are written in several pieces; Nagle would hold the last one for a delayed ACK.
    disable_nagle_algorithm = True
    server_version = "klua-bench"

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        path = url.path.rstrip("/") or "/"
        try:
            self._route(path, query)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _route(self, path, query):
        cfg = self.server.config
        if path == "/version":
            return self._json(200, VERSION)
        if path == "/api":
            return self._json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": "%s:%d" % self.server.server_address[:2]}]})
        if path == "/api/v1":
            return self._json(200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": [POD_RESOURCE]})
        if path == "/apis":
            return self._json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        if path == "/api/v1/pods":
            return self._collection(Selection(cfg, None), query)
        m = NAMESPACED.match(path)
        if m and m.group(2):
            return self._get_pod(m.group(1), m.group(2))
        if m:
            return self._collection(Selection(cfg, m.group(1)), query)
        return self._json(404, status(404, "NotFound", "the server could not find the requested resource"))

    def _collection(self, sel, query):
        if flag(query.get("watch")):
            return self._watch(sel, query)
        return self._list(sel, query)

    def _get_pod(self, namespace, name):
        m = re.search(r"(\d+)$", name)
        index = int(m.group(1)) if m else -1
        cfg = self.server.config
        if 0 <= index < cfg.pods and cfg.dataset.pod_name(index) == name and \
                index % pods.NAMESPACES == namespace_number(namespace):
            offset, length = cfg.dataset.item_span(index, index + 1)
            return self._respond(200, os.pread(cfg.items_fd, length, offset))
        return self._json(404, status(404, "NotFound", 'pods "%s" not found' % name))

    # --- list

    def _list(self, sel, query):
        cfg = self.server.config
        limit = count(query.get("limit"))
        start = 0
        token = query.get("continue")
        if token:
            start = self._decode_continue(token)
            if start is None or start > len(sel.items):
                return self._json(410, status(410, "Expired", "the provided continue parameter is too old; "
                                                              "list again without it"))
        paged = limit > 0 and (cfg.paginate == "always" or query.get("resourceVersion") != "0")
        end = min(len(sel.items), start + limit) if paged else len(sel.items)
        meta = {"resourceVersion": str(data.LIST_RV)}
        if end < len(sel.items):
            meta["continue"] = base64.urlsafe_b64encode(b"%d" % end).decode()
            meta["remainingItemCount"] = len(sel.items) - end
        # A metadata-only informer asks for the PartialObjectMetadataList kube-apiserver converts
        # the list into (endpoints/handlers/response.go); it is made here, item by item.
        partial = "as=PartialObjectMetadataList" in (self.headers.get("Accept") or "")
        if self._cbor(sel, watch=False) and not partial:
            return self._list_cbor(sel, start, end, meta)
        kind, api = ("PartialObjectMetadataList", "meta.k8s.io/v1") if partial else ("PodList", "v1")
        head = '{"kind":"%s","apiVersion":"%s","metadata":%s,"items":[' % (
            kind, api, json.dumps(meta, separators=(",", ":")))
        self._start_chunked(200)
        self._chunk(head.encode())
        if partial:
            self._send_partial_items(sel, start, end)
        else:
            self._send_items(sel, start, end)
        self._chunk(b"]}")
        self._end_chunked()

    def _cbor(self, sel, watch):
        """Whether to answer in CBOR (KEP-4222): the client prefers it, and the data set has the
        selection's bytes in CBOR (the whole collection's; a namespace's are served in JSON)."""
        return self.server.config.dataset.has_cbor and sel.contiguous and \
            cbor.wanted(self.headers.get("Accept"), watch)

    def _list_cbor(self, sel, start, end, meta):
        cfg = self.server.config
        head = cbor.encode({"kind": "PodList", "apiVersion": "v1", "metadata": meta}, True)
        # The map of three members becomes one of four: items, an array of the items' CBOR.
        head = head[:3] + cbor.head(5, 4) + head[4:] + cbor.encode("items", False) + cbor.head(4, end - start)
        self._start_chunked(200, content_type=cbor.CBOR)
        self._chunk(head)
        self._chunk_file(cfg.items_cbor_fd, *cfg.dataset.cbor_item_span(start, end))
        self._end_chunked()

    def _send_partial_items(self, sel, start, end):
        """The items of a PartialObjectMetadataList: from partial.json with sendfile(2) when it holds
        them (data.write_partial), else converted here item by item."""
        cfg = self.server.config
        if sel.contiguous and end <= cfg.dataset.partial_count():
            self._chunk_file(cfg.partial_fd, *cfg.dataset.partial_span(start, end))
            return

        def items():
            for n, i in enumerate(sel.items[start:end]):
                offset, length = cfg.dataset.item_span(i, i + 1)
                yield (b"," if n else b"") + data.partial_item(os.pread(cfg.items_fd, length, offset))
        self._gather(items())

    @staticmethod
    def _decode_continue(token):
        try:
            return int(base64.urlsafe_b64decode(token.encode()))
        except (ValueError, binascii.Error):
            return None

    def _send_items(self, sel, start, end):
        cfg = self.server.config
        if sel.contiguous:
            self._chunk_file(cfg.items_fd, *cfg.dataset.item_span(start, end))
            return

        def items():
            for n, i in enumerate(sel.items[start:end]):
                offset, length = cfg.dataset.item_span(i, i + 1)
                yield (b"," if n else b"") + os.pread(cfg.items_fd, length, offset)
        self._gather(items())

    # --- watch

    def _watch(self, sel, query):
        cfg = self.server.config
        if "sendInitialEvents" in query:
            refusal = watch_list_refusal(query)
            if refusal:
                return self._json(422, refusal)
        watch_list = flag(query.get("sendInitialEvents"))
        rv = query.get("resourceVersion") or "0"
        # A watch-list's state is the list's (resourceVersion "" with NotOlderThan: the latest, which
        # the data set's list is), so its events are all those after the list.
        first = int(rv) - data.LIST_RV if not watch_list and rv.isdigit() and int(rv) > data.LIST_RV else 0
        in_cbor = self._cbor(sel, watch=True)
        if in_cbor and watch_list:
            return self._json(406, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 406,
                                    "reason": "NotAcceptable",
                                    "message": "the bench server streams a watch-list's initial events in JSON only"})
        self._start_chunked(200, close=True, content_type=cbor.CBOR_SEQ if in_cbor else "application/json")
        if watch_list:
            self._send_added(sel)
            self._chunk(INITIAL_EVENTS_END)
        # A change made this long after the client listed, or got its initial events (fresh-first).
        time.sleep(cfg.watch_delay)
        if cfg.watch_rate and not in_cbor and sel.contiguous:
            sent = self._send_paced(sel, first)
        elif in_cbor:
            sent = first < len(sel.events)
            if sent:
                self._chunk_file(cfg.events_cbor_fd, *cfg.dataset.cbor_event_span(first, len(sel.events)))
        elif sel.contiguous:
            sent = first < len(sel.events)
            if sent:
                self._chunk_file(cfg.events_fd, *cfg.dataset.event_span(first, len(sel.events)))
        elif cfg.by_namespace_fd is not None:
            # The namespace's events are one span of the grouped file, from the first after rv on.
            start = bisect.bisect_left(sel.events, first)
            sent = start < len(sel.events)
            if sent:
                self._chunk_file(cfg.by_namespace_fd,
                                 *cfg.dataset.namespace_event_span(sel.namespace, start, len(sel.events)))
        else:
            sent = self._send_events(sel, first)
        if not sent or cfg.watch_end == "hold":
            self._hold_open(seconds(query.get("timeoutSeconds")))
        self._end_chunked()
        self.close_connection = True

    def _send_added(self, sel):
        """A watch-list's initial events: every Pod of the selection as ADDED, from added.ndjson
        with sendfile(2) when it holds them (data.write_added), else gathered from the items."""
        cfg = self.server.config
        if sel.contiguous and len(sel.items) <= cfg.dataset.added_count():
            self._chunk_file(cfg.added_fd, *cfg.dataset.added_span(0, len(sel.items)))
            return
        spans = (cfg.dataset.item_bytes(i) for i in sel.items)
        self._gather(data.ADDED_PREFIX + cfg.items_map[start:end] + b"}\n" for start, end in spans)

    def _send_events(self, sel, first):
        """Sends the selection's events from index first on; whether there were any."""
        cfg = self.server.config
        spans = (cfg.dataset.event_span(k, k + 1) for k in sel.events if k >= first)
        return self._gather(cfg.events_map[offset:offset + length] for offset, length in spans)

    def _gather(self, pieces):
        """Sends pieces, read as they are sent, joined into chunks of about GATHER bytes: few
        writes without holding a whole selection in memory; whether there were any."""
        batch, size, sent = [], 0, False
        for piece in pieces:
            batch.append(piece)
            size += len(piece)
            sent = True
            if size >= GATHER:
                self._chunk(b"".join(batch))
                batch, size = [], 0
        if batch:
            self._chunk(b"".join(batch))
        return sent

    def _send_paced(self, sel, first):
        """The latency scenario's stream: the selection's events from index first on, one chunk each,
        event i at watch_rate per second from now, each stamped as it is written (stamp_event)."""
        cfg = self.server.config
        started = time.monotonic()
        for i, k in enumerate(range(first, len(sel.events))):
            pause = started + i / cfg.watch_rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            offset, length = cfg.dataset.event_span(k, k + 1)
            self._chunk(stamp_event(cfg.events_map[offset:offset + length], k))
        return first < len(sel.events)

    def _hold_open(self, timeout):
        """Waits, as a real watch with nothing to report does, until the client leaves or timeout passes."""
        self.connection.settimeout(timeout or None)
        try:
            self.connection.recv(1)
        except (socket.timeout, OSError):
            pass
        self.connection.settimeout(None)

    # --- HTTP plumbing

    def _json(self, code, body):
        self._respond(code, json.dumps(body, separators=(",", ":")).encode())

    def _respond(self, code, payload):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _start_chunked(self, code, close=False, content_type="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        if close:
            # Said, so that a client or proxy does not pool the connection and send its next
            # request into the close (nghttpx answers that request 502).
            self.send_header("Connection", "close")
        self.end_headers()

    def _chunk(self, payload):
        if payload:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))

    def _chunk_file(self, fd, offset, length):
        while length > 0:
            n = min(length, CHUNK)
            self.wfile.write(b"%x\r\n" % n)
            self._sendfile(fd, offset, n)
            self.wfile.write(b"\r\n")
            offset += n
            length -= n

    def _sendfile(self, fd, offset, length):
        sock = self.connection.fileno()
        while length > 0:
            sent = os.sendfile(sock, fd, offset, length)
            if sent == 0:
                raise BrokenPipeError("client closed the connection")
            offset += sent
            length -= sent

    def _end_chunked(self):
        self.wfile.write(b"0\r\n\r\n")


class Config:
    """What one server serves: the first `pods` Pods of the data set and its first `events` events.

    paginate: "auto" serves resourceVersion=0 lists in one page, "always" pages every list with a limit.
    watch_end: "close" ends a watch once its events are sent, "hold" keeps it open like a quiet server.
    watch_delay: seconds a watch waits before its first event.
    watch_rate: when not 0, a watch of every Pod sends its events at this many a second, each stamped
    with its send time (stamp_event), rather than all at once.
    """

    def __init__(self, dataset, pods_count, events, paginate="auto", watch_end="close", watch_delay=0.0,
                 watch_rate=0.0):
        if pods_count > dataset.pods or events > dataset.n_events:
            raise ValueError("the data set has %d pods and %d events; asked for %d and %d"
                             % (dataset.pods, dataset.n_events, pods_count, events))
        if events and pods_count < dataset.watch_pods:
            raise ValueError("events modify the first %d pods, so at least that many must be listed"
                             % dataset.watch_pods)
        self.dataset, self.pods, self.events, self.paginate = dataset, pods_count, events, paginate
        self.watch_end, self.watch_delay, self.watch_rate = watch_end, watch_delay, watch_rate
        # Each namespace's events, found once: a request that looked for them (200,000 events in
        # many-informers) held Python's lock for some 20 ms, so ten informers' LISTs were answered
        # one after another, over 200 ms, and the informers started their watches that far apart.
        watch_pods = dataset.watch_pods or 1
        self.namespace_events = [[] for _ in range(pods.NAMESPACES)]
        for k in range(events):
            self.namespace_events[data.namespace_of_event(k, watch_pods)].append(k)
        self.items_fd = os.open(dataset.items_path, os.O_RDONLY)
        self.events_fd = os.open(dataset.events_path, os.O_RDONLY)
        # A data set generated by_namespace has each namespace's events in one span of a second
        # file, sent like the whole stream; otherwise they are scattered over the file, and slicing a
        # mapping gathers them without a pread(2) for each event.
        self.by_namespace_fd = os.open(dataset.by_namespace_path, os.O_RDONLY) if dataset.namespace_starts \
            else None
        self.items_cbor_fd = os.open(dataset.items_cbor_path, os.O_RDONLY) if dataset.has_cbor else None
        self.events_cbor_fd = os.open(dataset.events_cbor_path, os.O_RDONLY) if dataset.has_cbor else None
        self.events_map = mmap.mmap(self.events_fd, 0, access=mmap.ACCESS_READ) if dataset.meta["event_bytes"] \
            else b""
        self.items_map = mmap.mmap(self.items_fd, 0, access=mmap.ACCESS_READ) if dataset.pods else b""
        self.added_fd = os.open(dataset.added_path, os.O_RDONLY) if dataset.added_count() else None
        self.partial_fd = os.open(dataset.partial_path, os.O_RDONLY) if dataset.partial_count() else None

    def close(self):
        if self.events_map:
            self.events_map.close()
        if self.items_map:
            self.items_map.close()
        for fd in (self.added_fd, self.partial_fd):
            if fd is not None:
                os.close(fd)
        os.close(self.items_fd)
        os.close(self.events_fd)
        for fd in (self.items_cbor_fd, self.events_cbor_fd):
            if fd is not None:
                os.close(fd)
        if self.by_namespace_fd is not None:
            os.close(self.by_namespace_fd)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, config, host="127.0.0.1", port=0):
        self.config = config
        super().__init__((host, port), Handler)

    @property
    def url(self):
        return "http://%s:%d" % self.server_address[:2]

    def start(self):
        """Serves on a background thread; returns the thread."""
        thread = threading.Thread(target=self.serve_forever, name="bench-server", daemon=True)
        thread.start()
        return thread
