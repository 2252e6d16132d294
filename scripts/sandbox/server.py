"""Command line, listener lifecycle (including the restart fault) and shutdown."""
import argparse
import json
import os
import secrets
import select
import shutil
import signal
import socket
import ssl
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer

from . import tls
from .api import Api
from .faults import Faults, Stats
from .gc import GarbageCollector
from .nodes import Nodes
from .handler import Handler
from .rbac import Tokens
from . import replay
from .status import ApiError
from .store import Store

TLS_HANDSHAKE_SECONDS = 10


class Context:
    """Everything one sandbox server owns; handlers reach it as self.server.ctx."""

    def __init__(self, args):
        self.verbosity = args.verbose
        self.store = Store(args.history, args.storage_history, args.watch_lag)
        self.api = Api(self.store, cache_fill=args.watch_cache_fill)
        self.api.sharded_list_watch = args.feature_gates.get("ShardedListAndWatch", False)
        self.gc = GarbageCollector(self.store)
        self.nodes = Nodes(self.store, args.nodes)
        self.faults = Faults(args.seed)
        self.stats = Stats()
        self.bookmark_interval = args.bookmark_interval
        self.auth = args.auth
        self.token = args.token or (secrets.token_urlsafe(24) if args.auth == "token" else "")
        self.tokens = Tokens()
        self.connections = set()
        self.connections_lock = threading.Lock()
        self.httpd = None
        self.restart_down = None
        self.log_lock = threading.Lock()
        self.replay = None  # the recording replayed (replay.install), if any

    def log(self, level, message):
        if level <= self.verbosity:
            with self.log_lock:
                sys.stderr.write("sandbox-apiserver: %s\n" % message.rstrip())
                sys.stderr.flush()

    def request_restart(self, down_seconds):
        """Asks the main loop to drop every connection and listen again, keeping all state."""
        self.restart_down = down_seconds
        threading.Thread(target=self.httpd.shutdown, daemon=True).start()

    def drop_everything(self):
        with self.store.lock:
            for watcher in self.store.watchers:
                watcher.close(clean=False)
            self.store.changed.notify_all()
        with self.connections_lock:
            connections = list(self.connections)
        for conn in connections:
            try:
                socket.socket.shutdown(conn, socket.SHUT_RDWR)
            except OSError:
                pass


class Server(ThreadingHTTPServer):
    """A threaded listener that does TLS handshakes in the connection's own thread."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address, ctx, ssl_context):
        self.ctx = ctx
        self.ssl_context = ssl_context
        super().__init__(address, Handler)

    def finish_request(self, request, client_address):
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = request
        if self.ssl_context:
            try:
                request.settimeout(TLS_HANDSHAKE_SECONDS)
                conn = self.ssl_context.wrap_socket(request, server_side=True)
                conn.settimeout(None)
            except (ssl.SSLError, OSError) as err:
                self.ctx.log(1, "TLS handshake with %s failed: %s" % (client_address[0], err))
                return
        with self.ctx.connections_lock:
            self.ctx.connections.add(conn)
        try:
            self.RequestHandlerClass(conn, client_address, self)
        finally:
            with self.ctx.connections_lock:
                self.ctx.connections.discard(conn)
            if conn is not request:
                conn.close()

    def handle_error(self, request, client_address):
        self.ctx.log(1, "connection from %s ended with an error: %s"
                     % (client_address[0], sys.exc_info()[1]))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="sandbox-apiserver",
                                description="An in-memory Kubernetes API server for klua's "
                                            "tests, demos and practice (see docs/sandbox.md).")
    p.add_argument("--port", type=int, required=True, help="port to listen on; 0 picks one")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--tls", action="store_true", help="serve HTTPS with a generated CA")
    p.add_argument("--tls-san", action="append", default=[], metavar="NAME",
                   help="extra DNS name or IP for the server certificate (repeatable)")
    p.add_argument("--auth", choices=["none", "token", "cert"], default="none")
    p.add_argument("--token", help="the bearer token to accept (default: a random one)")
    p.add_argument("--cert-dir", help="where to write ca.crt, server.*, client.* (default: a "
                                      "temporary directory removed at exit)")
    p.add_argument("--kubeconfig-out", metavar="FILE", help="write a kubeconfig here")
    p.add_argument("--ready-file", metavar="FILE", help="write the URL here once listening")
    p.add_argument("--history", type=int, default=1000,
                   help="events kept for watch replay (the watch cache window)")
    p.add_argument("--storage-history", type=int, default=100000, metavar="N",
                   help="revisions storage keeps for Exact and paged lists until compacted "
                        "(etcd's history; at least --history)")
    p.add_argument("--watch-cache-fill", type=float, default=1.0, metavar="SEC",
                   help="seconds a new resource (a CRD created) answers 429 \"storage is "
                        "(re)initializing\" while its watch cache fills")
    p.add_argument("--watch-lag", type=float, default=0.0, metavar="SEC",
                   help="seconds each change takes to reach watches and the watch cache "
                        "after its write is answered, as a loaded kube-apiserver's watch cache "
                        "trails etcd (default 0)")
    p.add_argument("--bookmark-interval", type=float, default=60.0, metavar="SEC",
                   help="seconds between BOOKMARK events on watches that allow them "
                        "(kube-apiserver: about a minute)")
    p.add_argument("--nodes", type=int, default=0, metavar="N",
                   help="simulate N nodes that schedule and run pods (default 0: none)")
    p.add_argument("--owner-pid", type=int, help="exit when this process is gone")
    p.add_argument("--replay", metavar="FILE",
                   help="start with the initial state of a recording of `klua record` and "
                        "replay its events once a watch of a recorded resource starts "
                        "(docs/record.md); the garbage collector stays off")
    p.add_argument("--replay-speed", type=float, default=1.0, metavar="FACTOR",
                   help="replay FACTOR times as fast as recorded (default 1)")
    p.add_argument("--feature-gates", type=feature_gates, default={}, metavar="GATES",
                   help="as kube-apiserver's, e.g. ShardedListAndWatch=true (shardSelector on "
                        "LIST and WATCH, KEP-5866; the only gate modelled, off by default)")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="log one line per request to stderr")
    f = p.add_argument_group("faults (also settable at run time: POST /sandbox/v1/faults)")
    f.add_argument("--faults", metavar="JSON", help="a fault settings object, as posted")
    f.add_argument("--watch-drop-after", type=int, metavar="N")
    f.add_argument("--watch-drop-probability", type=float, metavar="P")
    f.add_argument("--watch-drop-mid-frame", action="store_true")
    f.add_argument("--watch-stall-after", type=int, metavar="N")
    f.add_argument("--delay", type=float, metavar="SEC")
    f.add_argument("--fail-next", type=int, metavar="K", help="fail the next K requests")
    f.add_argument("--fail-code", type=int, default=500)
    f.add_argument("--fail-retry-after", type=int, metavar="SEC")
    f.add_argument("--fail-verbs", metavar="LIST", help="e.g. watch,list")
    f.add_argument("--fail-path", metavar="REGEX")
    f.add_argument("--forbid", action="append", default=[], metavar="RESOURCE[:VERBS]")
    f.add_argument("--seed", type=int, help="seed for random watch drops")
    args = p.parse_args(argv)
    if args.auth == "cert" and not args.tls:
        p.error("--auth cert needs --tls")
    if args.replay_speed <= 0:
        p.error("--replay-speed must be more than 0")
    return args


def fault_settings(args):
    settings = json.loads(args.faults) if args.faults else {}
    for name in ("watch_drop_after", "watch_drop_probability", "watch_stall_after", "delay"):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    if args.watch_drop_mid_frame:
        settings["watch_drop_mid_frame"] = True
    if args.forbid:
        settings["forbid"] = args.forbid
    if args.fail_next:
        settings["fail"] = {"count": args.fail_next, "code": args.fail_code,
                            "retry_after": args.fail_retry_after,
                            "verbs": args.fail_verbs.split(",") if args.fail_verbs else [],
                            "path": args.fail_path or ""}
    return settings


def seed_cluster(ctx):
    """The namespaces every cluster starts with."""
    ns_type = ctx.store.registry.lookup("", "v1", "namespaces")
    with ctx.store.lock:
        for name in ("default", "kube-system", "kube-public"):
            obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            ctx.api.defaulter.on_create(ns_type, obj)
            ctx.store.commit_locked(ns_type, "ADDED", obj, None)


def watch_owner(pid):
    """Sends this process SIGTERM once process pid has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os.kill(os.getpid(), signal.SIGTERM)
        return

    def wait():
        select.select([fd], [], [])
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=wait, daemon=True).start()


def serve(ctx, args, ssl_context, announce):
    port = args.port
    while True:
        httpd = Server((args.host, port), ctx, ssl_context)
        ctx.httpd = httpd
        if announce:
            port = httpd.server_address[1]
            announce(port)
            announce = None
        else:
            ctx.stats.restarted()
        httpd.serve_forever(poll_interval=0.5)
        httpd.server_close()
        ctx.drop_everything()
        if ctx.restart_down is None:
            return
        with ctx.store.lock:
            ctx.store.restart_cache_locked()
        time.sleep(ctx.restart_down)
        ctx.restart_down = None


def feature_gates(text):
    gates = {}
    for term in filter(None, text.split(",")):
        name, _, value = term.partition("=")
        if name != "ShardedListAndWatch" or value.lower() not in ("true", "false"):
            raise argparse.ArgumentTypeError("unknown feature gate setting %r" % term)
        gates[name] = value.lower() == "true"
    return gates


def main(argv):
    args = parse_args(argv)
    ctx = Context(args)
    try:
        ctx.faults.update(fault_settings(args))
    except (ApiError, ValueError) as err:
        sys.stderr.write("sandbox-apiserver: bad fault settings: %s\n" % err)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.owner_pid:
        watch_owner(args.owner_pid)
    pki_dir, own_dir = args.cert_dir, None
    if args.tls and not pki_dir:
        pki_dir = own_dir = tempfile.mkdtemp(prefix="klua-sandbox-pki.")
    try:
        ssl_context = None
        if args.tls:
            os.makedirs(pki_dir, exist_ok=True)
            tls.make_pki(pki_dir, args.tls_san)
            ssl_context = tls.server_context(pki_dir, args.auth == "cert")
        seed_cluster(ctx)
        if args.replay:
            try:
                replay.install(ctx, args.replay, args.replay_speed)
            except (OSError, ValueError) as err:
                sys.stderr.write("sandbox-apiserver: --replay: %s\n" % err)
                return 2
        ctx.gc.start()
        ctx.nodes.start(ctx.api.defaulter)

        def announce(port):
            host = "127.0.0.1" if args.host in ("0.0.0.0", "") else args.host
            url = "%s://%s:%d" % ("https" if args.tls else "http", host, port)
            if args.kubeconfig_out:
                tls.write_kubeconfig(args.kubeconfig_out, url, pki_dir if args.tls else None,
                                     args.auth, ctx.token)
            if args.ready_file:
                with open(args.ready_file, "w", encoding="utf-8") as f:
                    f.write(url + "\n")
            print("listening on " + url, flush=True)

        serve(ctx, args, ssl_context, announce)
    except KeyboardInterrupt:
        pass
    except (OSError, RuntimeError, ValueError) as err:
        sys.stderr.write("sandbox-apiserver: %s\n" % err)
        return 1
    finally:
        if own_dir:
            shutil.rmtree(own_dir, ignore_errors=True)
    return 0
