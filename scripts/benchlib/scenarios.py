"""The benchmark scenarios, each a separate klua (or peer, or lua5.4) process against bench-server.

Scenarios have names (DESCRIPTIONS, in ORDER); the letters earlier reports used stay aliases
(ALIASES), on the command line and in the report's rows.
"""
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request

from . import data, h2proxy, peers, procs, webhookload
from .pods import NAMESPACES
from .report import Row, cpu_cell, number, ratio

ORDER = ["server", "ref", "peers", "limit", "watch-names", "handler-3-fields", "handler-copy", "handler-edit",
         "controller-enqueue",
         "initial-sync", "watchlist-sync", "large-sync", "memory-per-pod", "cache-less", "scale", "many-informers",
         "slow-handler", "fresh-first", "latency", "webhook", "cbor"]
DESCRIPTIONS = {
    "server": "how fast the server delivers the watch stream (socket reader and curl)",
    "ref": "lua-cjson decoding the same lines in plain lua5.4 (reference)",
    "peers": "kubectl, @kubernetes/client-node's informer and the Python client's watch on the same stream",
    "limit": "simdjson alone (the parser klua uses) on the same event lines, reading the same 3 fields: no HTTP, "
             "no Lua; klua's event rates as a fraction of it",
    "watch-names": "`klua watch pods -A -o name --watch-only`, against the kubectl peer",
    "handler-3-fields": "update handler reading metadata.name, metadata.namespace, status.phase",
    "handler-copy": "update handler calling klua.copy(new)",
    "handler-edit": "update handler setting a label on new and encoding it, as a reconcile's update does: through "
                    "klua.edit(new) and through klua.copy(new), against handler-3-fields",
    "controller-enqueue": "\"controller\" update handler enqueuing namespace/name",
    "initial-sync": "initial sync of --pods Pods: time to synced and peak RSS (one page, and paged)",
    "watchlist-sync": "initial sync of --pods Pods streamed with WatchList against a LIST: time to synced and "
                      "peak RSS, as ratios",
    "large-sync": "initial sync of --large-pods Pods: time and memory per Pod against initial-sync's",
    "memory-per-pod": "resident memory per cached Pod against its JSON size",
    "cache-less": "sync time and memory per Pod at --pods Pods: full, drop_fields, a Lua function transform, "
                  "metadata-only",
    "scale": "handler-3-fields and memory-per-pod at a tenth of the size: both must stay flat",
    "many-informers": "10 Pod informers (one namespace each) in one klua over one HTTP/2 connection (nghttpx), "
                      "--informer-events updates each",
    "slow-handler": "4 informers, one with a handler that waits 1 ms (klua.sleep): the others' rates and klua's "
                    "memory, against the 3 alone",
    "fresh-first": "a controller (one worker, 1 ms reconcile) starting on 20,000 listed Pods: latency of a change "
                   "made after the sync",
    "latency": "a controller (one worker) on 10,000 cached Pods while the server changes 1,000 a second: p50/p99 "
               "from the server's write to the reconcile that sees it, against client-node's informer",
    "webhook": "a small validating webhook over HTTPS: requests/s and p50/p99 latency of --webhook-requests "
               "AdmissionReviews on --webhook-concurrency kept-alive connections",
    "cbor": "--serialization cbor against JSON: bytes on the wire per event and per listed Pod, CPU per event "
            "(handler-3-fields), memory per cached Pod, peak RSS at sync",
}
ALIASES = {"a": "handler-3-fields", "b": "handler-copy", "c": "controller-enqueue", "d": "watch-names",
           "e": "initial-sync", "e'": "large-sync", "f": "memory-per-pod", "g": "many-informers", "h": "slow-handler"}
LETTERS = {name: letter for letter, name in ALIASES.items()}
LUA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lua")
MODES = {"handler-3-fields": ("read", "handler reads metadata.name, metadata.namespace, status.phase"),
         "handler-copy": ("copy", "handler calls klua.copy(new)"),
         "controller-enqueue": ("enqueue", "controller handler enqueues namespace/name")}
# The event-rate targets are ratios to rates measured in the same run, since this machine's speed
# moves twofold from hour to hour (docs/benchmarks.md, "Targets as ratios"): watch-names (d),
# handler-3-fields (a) and controller-enqueue (c) at least TARGET_OF_LIMIT of the limit row (simdjson
# alone on the same lines) and TARGET_VS_PEER times each of these peers; handler-copy (b) at least
# TARGET_COPY_OF_READ of (a)'s rate. A peer that did not run leaves its part not measured.
TARGET_OF_LIMIT = 0.5
TARGET_VS_PEER = {"kubectl": 30.0, "client-node": 5.0}
TARGET_COPY_OF_READ = 0.5
LIMIT_ROUNDS = 3
# Synced within 1 s (one page, resourceVersion=0) and 1.5 s (paged by 500) for 100,000 Pods,
# scaled for other sizes; at the peak of the sync the process may hold at most TARGET_PEAK times
# what the cache holds once synced (before its compaction, which comes seconds later).
TARGET_SYNC_SECONDS = 1.0
TARGET_SYNC_PAGED_SECONDS = 1.5
TARGET_SYNC_PODS = 100000
TARGET_PEAK = 1.3
TARGET_MEMORY = 1.0
TARGET_FLAT = 1.25
TARGET_SERVER = 1e9
# A watch printer silent this long after its first line has stopped for good (events were lost).
QUIET = 3.0
# The server's speed is measured over at least this much data, or this long.
SPEED_BYTES = 512 << 20
SPEED_SECONDS = 1.0
# many-informers (g): informers of namespaces team-00 ... team-09, each with its own stream, in
# all at least TARGET_MANY events/s; no informer starved: the fastest informer's rate at most
# TARGET_STARVED times the slowest's (both from the first update of any of them, so an informer
# served only after the others counts as slow), and every one handles all its updates.
INFORMERS = 10
TARGET_MANY = 200000
TARGET_STARVED = 2.0
# slow-handler (h): SLOW_INFORMERS informers, the first with a handler that waits SLOW_SECONDS
# per update; the others' rate in all must stay within TARGET_UNCHANGED of the same informers'
# alone, and klua's peak RSS within TARGET_HELD_MB of theirs, while the slow stream waits (klua
# holds a reflector whose notification queue is full, src/cache/informer.c QUEUE_HIGH). The run
# goes on SLOW_HOLD seconds after the others are done, with RSS sampled every 0.1 s: from the
# first sample of that time to the last, RSS may not grow by more than TARGET_FLAT_HELD_MB.
SLOW_INFORMERS = 4
SLOW_SECONDS = 0.001
SLOW_HOLD = 1.0
TARGET_UNCHANGED = 0.8
TARGET_HELD_MB = 16
TARGET_FLAT_HELD_MB = 1
# fresh-first: FRESH_PODS listed Pods (FRESH_PODS_QUICK with --quick), one worker whose reconcile
# waits FRESH_RECONCILE; the watch's one event changes the last listed Pod, whose key waits at the
# back of the initial list's, FRESH_DELAY seconds after the watch began (the reconciles of the list
# are under way by then): it must be reconciled within TARGET_FRESH_SECONDS (klua's controller
# issue: "within 1 s, not after the backlog").
FRESH_PODS = 20000
FRESH_PODS_QUICK = 2000
FRESH_RECONCILE = 0.001
FRESH_DELAY = 1.0
TARGET_FRESH_SECONDS = 1.0
# latency: LATENCY_PODS listed Pods (LATENCY_PODS_QUICK with --quick); once the watch has waited
# LATENCY_DELAY seconds (the initial reconciles done), the server changes one Pod every 1/LATENCY_RATE
# seconds for LATENCY_SECONDS (LATENCY_SECONDS_QUICK), each change stamped with its send time.
# klua's p99 from the write to the reconcile must be at most TARGET_LATENCY_P99 times client-node's
# from the write to its informer's update handler, measured on the same stream in the same run
# (docs/benchmarks.md, "Latency", says why a ratio and why this one).
LATENCY_PODS = 10000
LATENCY_PODS_QUICK = 1000
LATENCY_RATE = 1000
LATENCY_SECONDS = 10
LATENCY_SECONDS_QUICK = 2
LATENCY_DELAY = 1.0
TARGET_LATENCY_P99 = 1.0
# klua streams an informer's initial state with WatchList unless told to list. The rows compared
# with the peers, which LIST (kubectl get -w, client-node's informer, the Python client's
# list-then-watch), and the sync and memory rows, whose targets were set for a LIST, run klua
# with this; watchlist-sync measures both ways (docs/benchmarks.md, "LIST or WatchList").
LIST_ONLY = ["--watch-list=false"]
# watchlist-sync: a sync streamed with WatchList may take at most TARGET_WATCHLIST_TIME times the
# LIST's time to klua.on_synced and TARGET_WATCHLIST_PEAK times its peak RSS, both measured in the
# same run (docs/benchmarks.md says why these bounds: the first full runs measured 1.33× and 1.01×).
TARGET_WATCHLIST_TIME = 1.5
TARGET_WATCHLIST_PEAK = 1.1
# cbor: a sync by a CBOR LIST may peak at most TARGET_CBOR_PEAK times the same sync in JSON
# (issue 26: a CBOR body was held whole, 1.56× JSON's at 10,000 Pods).
TARGET_CBOR_PEAK = 1.1
# webhook: every answer right; klua's CPU a request at most TARGET_WEBHOOK_CPU times the load
# generator's, which does the mirror image of its work in the same run (TLS, HTTP/1.1, the
# bodies), so that the machine's speed cancels out; and, a sanity bound rather than a ratio, p99
# below TARGET_WEBHOOK_P99_SECONDS, a hundredth of the API server's default timeoutSeconds.
TARGET_WEBHOOK_CPU = 1.0
TARGET_WEBHOOK_P99_SECONDS = webhookload.API_SERVER_TIMEOUT / 100
WEBHOOK_PORT = re.compile(r"webhooks over HTTPS on .*\(port (\d+)\)")
LINE = re.compile(rb"^bench (\w[\w-]*)((?: [\w-]+=\S*)*)$")


def resolve(ids):
    """(scenario names in ORDER, unknown ids) for names or letter aliases."""
    names = {ALIASES.get(i, i) for i in ids}
    return [n for n in ORDER if n in names], [i for i in ids if ALIASES.get(i, i) not in DESCRIPTIONS]


def title(name):
    """A scenario's name as the report shows it: with its letter, when it has one."""
    return "%s (%s)" % (name, LETTERS[name]) if name in LETTERS else name


class ScenarioError(Exception):
    """A scenario that could not produce its measurement; details say what the process printed."""

    def __init__(self, message, details=()):
        super().__init__(message)
        self.details = list(details)


def _us(seconds):
    return "%.1f µs" % (seconds * 1e6)


def _seconds(value):
    return "?" if value is None else "%.2f" % value


def _mb(kb):
    return "%s MB" % number(kb / 1024, 1)


class UiReader:
    """What an open live page does to a klua (--ui): reads /ui/state once a second, on a thread of
    its own, from the port klua's log names, until stopped. The count of reads shows it happened."""

    def __init__(self, log_offset):
        self.done, self.reads, self.thread, self.log_offset = threading.Event(), 0, None, log_offset

    def start(self, child):
        self.thread = threading.Thread(target=self._run, args=(child.log_path,), daemon=True)
        self.thread.start()

    def _run(self, log_path):
        port = None
        while port is None and not self.done.wait(0.05):
            with open(log_path, errors="replace") as f:
                f.seek(self.log_offset)
                m = re.search(r"live page.*\(port (\d+)\)", f.read())
            port = m and int(m.group(1))
        while port and not self.done.is_set():
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/ui/state" % port, timeout=5) as r:
                    json.load(r)
                self.reads += 1
            except (OSError, ValueError):
                pass
            self.done.wait(1.0)

    def stop(self):
        self.done.set()
        if self.thread:
            self.thread.join()


class Bench:
    """One benchmark run: the data set, the servers, and the measurements taken so far."""

    def __init__(self, opts, root, klua, workdir, children):
        self.opts, self.root, self.klua = opts, root, klua
        self.workdir, self.children = workdir, children
        self.lua = shutil.which("lua5.4")
        self.dataset = None
        self.servers = {}
        self.server_pids = {}
        # many-informers and slow-handler: their data set and nghttpx (url, kubeconfig, port, pid) by
        # backend, made when first needed.
        self.namespaces = None
        self.fresh = None
        self.latency = None
        self.proxies = {}
        self.memo = {}
        # Set by the peers scenario: each Peer, and the event rate of those measured, in peers.ORDER.
        self.peers = []
        self.peer_rates = {}
        self.env = dict(os.environ)
        path = os.path.join(LUA_DIR, "?.lua") + ";;"
        self.env.update(LUA_PATH=path, LUA_PATH_5_4=path)

    # --- set-up

    def prepare(self):
        o = self.opts
        n_pods = max(o.pods, o.watch_pods, o.large_pods if "large-sync" in o.only else 0)
        self.log("generating %s Pods and %s MODIFIED events ..." % (number(n_pods), number(o.events)))
        started = time.monotonic()
        self.dataset = data.generate(os.path.join(self.workdir, "data"), n_pods, o.watch_pods, o.events,
                                     with_cbor="cbor" in o.only)
        # Written back now, not by the kernel's flusher 30 s later in the middle of a scenario:
        # with 1.6 GB of dirty pages (large-sync's data set) being written out, a 500,000-Pod
        # sync took twice as long.
        if "watchlist-sync" in o.only:
            # A watch-list's initial events, sent with sendfile(2) as the LIST they are compared with.
            data.write_added(self.dataset.directory, o.pods)
        if {"memory-per-pod", "cache-less"} & set(o.only):
            # A metadata-only LIST's items, sent with sendfile(2) as the full LIST's: the server's
            # conversion of each Pod is no part of klua's sync.
            data.write_partial(self.dataset.directory, o.pods)
        os.sync()
        self.log("  done in %.1f s: %s bytes per Pod on average, %s MB of events"
                 % (time.monotonic() - started, number(self.dataset.average_pod_bytes()),
                    number(self.dataset.meta["event_bytes"] / 1e6)))

    def setup_facts(self):
        o = self.opts
        return [
            ("data", "%s-byte Pods on average (compact JSON), %d namespaces; watch stream of %s MODIFIED events "
                     "about %s Pods, %s MB" % (number(self.dataset.average_pod_bytes()), NAMESPACES, number(o.events),
                                               number(o.watch_pods), number(self.dataset.meta["event_bytes"] / 1e6))),
            ("server", "scripts/bench-server over loopback, HTTP/1.1 chunked, sendfile; watch end: %s" % o.watch_end),
        ] + [("peer", p.fact()) for p in self.peers] + self._namespaces_facts()

    def _namespaces_facts(self):
        ds = self.namespaces
        if not ds:
            return []
        facts = [("data (g, h)", "the same generator's Pods; %s MODIFIED events about %d Pods, one in each "
                                 "of team-00 ... team-%02d, so each namespace's watch is a stream of its own "
                                 "%s events, %s MB each"
                  % (number(ds.n_events), INFORMERS, INFORMERS - 1, number(self.opts.informer_events),
                     number(ds.meta["event_bytes"] / INFORMERS / 1e6)))]
        proxies = list(self.proxies.values())
        if proxies:
            facts.append(("proxy (g)", "%s at %s with a self-signed certificate, one worker; HTTP/1.1 to "
                                       "bench-server" % (h2proxy.version(h2proxy.find(self.opts.nghttpx)),
                                                         proxies[0][0])))
        return facts

    def log(self, message):
        print(message, file=sys.stderr, flush=True)

    def server(self, pods, events, paginate="auto", watch_end=None, dataset=None, watch_delay=0.0, watch_rate=0.0):
        """(url, kubeconfig) of a server listing `pods` Pods and streaming `events` events of dataset
        (the run's, by default), each watch after watch_delay seconds, at watch_rate events a second
        (0: at once); started once."""
        dataset = dataset or self.dataset
        key = (pods, events, paginate, watch_end or self.opts.watch_end, watch_delay, watch_rate)
        if (key, dataset.directory) in self.servers:
            return self.servers[key, dataset.directory]
        name = "server-%d-%d-%s-%s-%g-%g" % key + ("" if dataset is self.dataset else "-" + os.path.basename(
            dataset.directory))
        kubeconfig = os.path.join(self.workdir, name + ".kubeconfig")
        child = self.children.spawn(name, [
            sys.executable, os.path.join(self.root, "scripts", "bench-server"), "--data", dataset.directory,
            "--pods", str(pods), "--events", str(events), "--paginate", paginate, "--watch-end", key[3],
            "--watch-delay", str(watch_delay), "--watch-rate", str(watch_rate), "--kubeconfig", kubeconfig])
        out = bytearray()
        reason = procs.pump(child, lambda now, chunk: out.extend(chunk) or b"\n" in out, timeout=30)
        m = re.match(rb"listening on (http://\S+)", bytes(out))
        if reason != "done" or not m:
            raise ScenarioError("bench-server did not start", child.log_tail())
        self.servers[key, dataset.directory] = (m.group(1).decode(), kubeconfig)
        self.server_pids[self.servers[key, dataset.directory][0]] = child.pid
        return self.servers[key, dataset.directory]

    def namespaces_dataset(self):
        """The data set of many-informers and slow-handler, generated once by the same generator:
        --watch-pods listed Pods, and INFORMERS x --informer-events events about the first INFORMERS,
        one in each of team-00 ... team-09, so that each namespace's watch stream is its own
        --informer-events updates; grouped by namespace too, so that bench-server sends each stream
        with sendfile(2)."""
        if not self.namespaces:
            o = self.opts
            events = INFORMERS * o.informer_events
            self.log("generating %s MODIFIED events about %d Pods in %d namespaces ..."
                     % (number(events), INFORMERS, INFORMERS))
            self.namespaces = data.generate(os.path.join(self.workdir, "data-namespaces"),
                                            max(o.watch_pods, INFORMERS), INFORMERS, events, by_namespace=True)
        return self.namespaces

    def latency_dataset(self, n_pods, n_events):
        """The latency scenario's data set, generated once: n_pods listed Pods and n_events changes
        about them, in turn."""
        if not self.latency:
            self.latency = data.generate(os.path.join(self.workdir, "data-latency"), n_pods, n_pods, n_events)
        return self.latency

    def fresh_dataset(self, n_pods):
        """fresh-first's data set, generated once: n_pods listed Pods and one event, about the last."""
        if not self.fresh:
            self.fresh = data.generate(os.path.join(self.workdir, "data-fresh"), n_pods, n_pods, 1,
                                       first_event_pod=n_pods - 1)
            data.write_added(self.fresh.directory, n_pods)
        return self.fresh

    def proxy(self, backend_url):
        """(url, kubeconfig, port, pid) of nghttpx in front of backend_url, started once; None without nghttpx."""
        command = h2proxy.find(self.opts.nghttpx)
        if not command:
            return None
        if backend_url not in self.proxies:
            try:
                url, kubeconfig, port, child = h2proxy.start(command, backend_url,
                                                             os.path.join(self.workdir, "nghttpx"), self.children)
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                raise ScenarioError(str(e))
            self.proxies[backend_url] = (url, kubeconfig, port, child.pid)
        return self.proxies[backend_url]

    # --- running klua

    def klua_script(self, name, url, script, args, until, watch_list=False, flags=()):
        """Runs `klua --server URL FLAGS run SCRIPT ARGS` until it prints `bench UNTIL`; the child and
        its records. klua lists (LIST_ONLY) unless watch_list. With --ui, klua serves its live page and
        a reader polls /ui/state as an open page does."""
        ui = ["--ui-bind-address", "127.0.0.1:0"] if self.opts.ui else []
        argv = [self.klua, "--server", url] + ([] if watch_list else LIST_ONLY) + list(flags) + ui + [
            "run", os.path.join(LUA_DIR, script)] + [str(a) for a in args]
        if not ui:
            return self.script(name, argv, until, "klua", self.env)
        # The log is appended to by each repeat: the reader looks past what is there now.
        log = os.path.join(self.children.log_dir, "%s.log" % name)
        reader = UiReader(os.path.getsize(log) if os.path.exists(log) else 0)
        try:
            return self.script(name, argv, until, "klua", self.env, on_start=reader.start)
        finally:
            reader.stop()
            self.log("  %s: the live page read /ui/state %d times" % (name, reader.reads))

    def script(self, name, argv, until, what, env=None, on_record=None, on_start=None):
        """Runs argv until it prints `bench UNTIL` (events.lua's protocol); the child and its records
        (the last of each name). on_record(child, name, fields) sees every record as it comes;
        on_start(child) runs once the child is started."""
        child = self.children.spawn(name, argv, env=env)
        if on_start:
            on_start(child)
        records, pending = {}, bytearray()

        def on_data(now, chunk):
            pending.extend(chunk)
            while b"\n" in pending:
                line, _, rest = bytes(pending).partition(b"\n")
                pending[:] = rest
                m = LINE.match(line)
                if m:
                    fields = dict(kv.split("=", 1) for kv in m.group(2).decode().split())
                    records[m.group(1).decode()] = (now, fields)
                    if on_record:
                        on_record(child, m.group(1).decode(), fields)
            return until in records

        reason = procs.pump(child, on_data, self.opts.timeout)
        if reason != "done":
            child.stop()
            how = "timed out after %d s" % self.opts.timeout if reason == "timeout" else \
                "exited with status %s" % getattr(child.usage, "exit_code", "?")
            last = ["last `bench %s` record: %s" % (name, " ".join("%s=%s" % kv for kv in sorted(fields.items())))
                    for name, (_, fields) in sorted(records.items())]
            raise ScenarioError("%s %s before printing `bench %s`" % (what, how, until),
                                ["command: " + " ".join(argv)] + last + child.log_tail())
        return child, records

    def best(self, run):
        """The fastest of --repeat calls of run(), which returns something with a rate."""
        return max((run() for _ in range(self.opts.repeat)), key=lambda r: r.rate)

    def measured(self, key, make_once):
        """The fastest of --repeat runs of make_once()'s function, memoised under key; interleave()
        may have made them already, in rounds with the other event rates."""
        if key not in self.memo:
            self.memo[key] = self.best(make_once())
        if isinstance(self.memo[key], ScenarioError):
            raise self.memo[key]
        return self.memo[key]

    def interleave(self, plan, faster=lambda a, b: a.rate > b.rate):
        """Runs each of plan's measurements, (key, make_once) pairs, once a round for --repeat rounds
        and memoises the fastest run of each (by faster) under its key: the rates a ratio compares
        are then made in the same minutes, not in groups a minute or more apart, between which this
        machine's speed moves by tens of percent. A measurement that fails is memoised as its error,
        for its row to report, and left out of the later rounds."""
        once = {key: make() for key, make in plan if key not in self.memo}
        for r in range(self.opts.repeat):
            self.log("  round %d of %d: %s" % (r + 1, self.opts.repeat, ", ".join(_measurement_name(k) for k in once)))
            for key, run in once.items():
                if isinstance(self.memo.get(key), ScenarioError):
                    continue
                try:
                    result = run()
                except ScenarioError as e:
                    self.memo[key] = e
                    continue
                if key not in self.memo or faster(result, self.memo[key]):
                    self.memo[key] = result

    def found_peers(self):
        """The peers (peers.find), looked for once a run."""
        self.peers = self.peers or peers.find(self.opts.peers_dir, self.opts.python, self.log)
        return self.peers

    def server_cpu(self, url):
        """CPU seconds the bench-server at url has used so far (/proc/PID/stat), or None. Read before
        and after a run, it says what feeding that run cost the server: one client runs at a time."""
        pid = self.server_pids.get(url)
        return h2proxy.cpu_seconds(pid) if pid else None

    def limit_binary(self):
        """The limit row's program, built by `make bench`; built here when missing or older than its
        source, so that scripts/bench run alone has it too."""
        build = os.path.join(self.root, os.environ.get("KLUA_BUILD") or "build")
        exe = os.path.join(build, "bench-limit")
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "limit.cc")
        if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(source):
            out = subprocess.run(["make", "--no-print-directory", "-s", "BUILD=" + build, exe], cwd=self.root,
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise ScenarioError("could not build %s" % exe, (out.stdout + out.stderr).splitlines()[-8:])
        return exe

    def limit_run(self):
        """The limit: simdjson alone on the first --events lines of the events file, reading the three
        fields of handler-3-fields; the fastest round of --repeat processes of LIMIT_ROUNDS rounds
        each (a round of 50,000 events takes a tenth of a second, and a single one, --quick's, is as
        likely as not to be preempted on a shared machine). Memoised, so that every rate of the run
        is divided by the same figure."""
        return self.measured(*self.limit_measurement())

    def limit_measurement(self):
        """The limit as Bench.measured and Bench.interleave take it: (key, make_once)."""
        return ("limit",), self.limit_once

    def limit_once(self):
        """One bench-limit process of LIMIT_ROUNDS rounds: a function returning its LimitRun."""
        n = self.opts.events
        argv = [self.limit_binary(), self.dataset.events_path, str(n), str(LIMIT_ROUNDS)]

        def once():
            out = subprocess.run(argv, capture_output=True, text=True, timeout=self.opts.timeout)
            m = LINE.match(out.stdout.strip().encode())
            if out.returncode != 0 or not m:
                raise ScenarioError("bench-limit failed (status %d)" % out.returncode,
                                    ["command: " + " ".join(argv)] + (out.stdout + out.stderr).splitlines()[-8:])
            fields = dict(kv.split("=", 1) for kv in m.group(2).decode().split())
            return LimitRun(int(fields["seen"]), n, float(fields["best"]), float(fields["cpu"]), int(fields["bytes"]),
                            LIMIT_ROUNDS * self.opts.repeat)
        return once

    def events_run(self, mode, count, flags=()):
        """handler-3-fields, handler-copy, controller-enqueue: a handler on `count` watch events, best of --repeat runs. Memoised.
        flags: klua's global flags (cbor: --serialization cbor)."""
        return self.measured(*self.events_measurement(mode, count, flags))

    def events_measurement(self, mode, count, flags=()):
        """An events.lua run as Bench.measured and Bench.interleave take it: (key, make_once)."""
        return ("events", mode, count, tuple(flags)), lambda: self.events_once(mode, count, flags)

    def events_once(self, mode, count, flags=()):
        """One run of events.lua: a function returning its EventsRun."""
        url, _ = self.server(self.opts.watch_pods, count)

        def once():
            server = self.server_cpu(url)
            child, records = self.klua_script("events-%s-%d%s" % (mode, count, "".join(flags).replace("-", "")),
                                              url, "events.lua", [mode, count], "done", flags=flags)
            usage = child.reap(5) or child.stop()
            run = EventsRun(count, records, usage, time.monotonic() - child.started, self.opts.repeat)
            run.server_cpu = _spent(server, self.server_cpu(url))
            return run
        return once

    def peer_events_run(self, peer, count):
        """A peer's handler on `count` watch events (informer.mjs or python_watch.py), best of --repeat runs."""
        return self.measured(*self.peer_measurement(peer, count))

    def peer_measurement(self, peer, count):
        """A peer's run as Bench.measured and Bench.interleave take it: (key, make_once); kubectl's
        counts the lines it prints, the others report from their handlers."""
        if peer.name == "kubectl":
            return ("peer", peer.name, count), lambda: _kubectl_once(self, peer, count)
        return ("peer", peer.name, count), lambda: self.peer_once(peer, count)

    def peer_once(self, peer, count):
        """One run of a peer's handler: a function returning its EventsRun."""
        url, kubeconfig = self.server(self.opts.watch_pods, count)
        args = {"client-node": [kubeconfig, count], "python": [kubeconfig, count, self.opts.timeout, "dict"]}
        argv = peer.command + [str(a) for a in args[peer.name]]

        def once():
            server = self.server_cpu(url)
            child, records = self.script("peer-%s-%d" % (peer.name, count), argv, "done", peer.name)
            usage = child.reap(5) or child.stop()
            run = EventsRun(count, records, usage, time.monotonic() - child.started, self.opts.repeat,
                            synced_by="the list returned", clock="the peer's monotonic clock",
                            cpu_clock=PEER_CPU_CLOCKS[peer.name])
            run.server_cpu = _spent(server, self.server_cpu(url))
            return run
        return once

    def sync_once(self, pods, paginate="auto", mode="full", watch_list=False, flags=()):
        """One sync of `pods` Pods by sync.lua, by LIST or (watch_list) by WatchList; a SyncRun with
        the settled RSS. flags: klua's global flags."""
        url, _ = self.server(pods, 0, paginate)
        server = self.server_cpu(url)
        child, records = self.klua_script("sync-%d-%s-%s%s%s" % (pods, paginate, mode, "-wl" if watch_list else "",
                                                                 "".join(flags).replace("-", "")),
                                          url, "sync.lua", [self.opts.timeout, mode], "settled",
                                          watch_list=watch_list, flags=flags)
        status = child.proc_status()
        usage = child.stop()
        run = SyncRun(pods, child, records, status, usage, self.opts.repeat if pods else 1)
        run.server_cpu = _spent(server, self.server_cpu(url))
        return run

    def sync_run(self, pods, paginate="auto", mode="full", flags=()):
        """initial-sync, memory-per-pod: sync `pods` Pods by LIST, then read the settled RSS; the
        fastest of --repeat runs (one for an idle klua, `pods` 0), as for the event rates. Memoised.
        mode: full, transform (managedFields dropped by klua.drop_fields), function (dropped by a Lua
        function transform from the Pod it is given), function-copy (from a klua.copy of it) or metadata
        (a metadata-only informer). flags: klua's global flags."""
        key = ("sync", pods, paginate, mode, tuple(flags))
        if key not in self.memo:
            self.memo[key] = min((self.sync_once(pods, paginate, mode, flags=flags)
                                  for _ in range(self.opts.repeat if pods else 1)), key=lambda r: r.wall)
        return self.memo[key]

    def sync_rounds(self, pods, modes):
        """sync_run of each of modes, run in turn for --repeat rounds (interleave): the fastest run of
        each mode, all made in the same rounds. A dict by mode."""
        keys = {mode: ("sync-round", pods, mode) for mode in modes}
        self.interleave([(keys[mode], lambda mode=mode: lambda: self.sync_once(pods, "auto", mode)) for mode in modes],
                        faster=lambda a, b: a.wall < b.wall)
        return {mode: self.measured(key, None) for mode, key in keys.items()}

    def count_lines(self, name, argv, count, url, env=None):
        """Runs a watch printer of the server at url until it has printed `count` lines; a LinesRun."""
        server = self.server_cpu(url)
        child = self.children.spawn(name, argv, env=env)
        run = LinesRun(count, child.started)
        reason = procs.pump(child, run.feed, self.opts.timeout, quiet=QUIET)
        run.reason = reason
        run.hwm_kb = child.proc_status().get("VmHWM", 0)
        run.usage = child.stop()
        run.server_cpu = _spent(server, self.server_cpu(url))
        if run.lines == 0:
            raise ScenarioError("%s printed nothing (%s)" % (name, reason), ["command: " + " ".join(argv)]
                                + child.log_tail())
        return run


def _measurement_name(key):
    """How the log names a measurement of Bench.interleave, by its key."""
    kind = key[0]
    if kind == "events":
        return "events.lua " + key[1]
    if kind == "sync-round":
        return "sync.lua " + key[2]
    return {"limit": "bench-limit", "watch-names": "klua watch"}.get(kind) or key[1]


def _spent(before, after):
    """CPU seconds between two readings of a process's clock; None when either is missing."""
    return after - before if before is not None and after is not None else None


class LimitRun:
    """What bench-limit printed: the fastest round's wall and CPU time over `seen` lines."""

    def __init__(self, seen, count, best, cpu, size, rounds):
        self.seen, self.count, self.best, self.cpu, self.size, self.rounds = seen, count, best, cpu, size, rounds
        self.rate = seen / best if best > 0 else 0.0


PEER_CPU_CLOCKS = {"client-node": "process.cpuUsage()", "python": "time.process_time()"}


class EventsRun:
    """What events.lua, or a peer speaking its protocol, reported."""

    def __init__(self, count, records, usage, wall, runs, synced_by="klua.on_synced ran",
                 clock="klua's monotonic clock", cpu_clock="os.clock"):
        self.count, self.usage, self.wall, self.runs = count, usage, wall, runs
        self.synced_by, self.clock, self.cpu_clock = synced_by, clock, cpu_clock
        fields = records["done"][1]
        self.seen = int(fields["seen"])
        self.queued = int(fields.get("queued", 0))
        # The clocks were read at the first update and at the stamped-th.
        stamped = int(fields["stamped"])
        span = float(fields["last"]) - float(fields["first"])
        cpu_span = float(fields["cpu_last"]) - float(fields["cpu_first"])
        self.rate = (stamped - 1) / span if stamped >= 2 and span > 0 else 0.0
        self.cpu_per_event = cpu_span / (stamped - 1) if stamped >= 2 else 0.0
        self.hwm_kb = int(fields["hwm_kb"])
        self.synced = records["synced"][1] if "synced" in records else None

    def details(self):
        if self.synced:
            sync = "%s %.2f s after the script started, after %s updates" % (
                self.synced_by, float(self.synced["at"]), number(int(self.synced["updates"])))
        else:
            sync = "%s only after the last update" % self.synced_by
        out = ["%s of %s updates handled; rate from the first to the last on %s; "
               "best of %d runs" % (number(self.seen), number(self.count), self.clock, self.runs), sync,
               "CPU per event %s (%s from the first update to the last clock reading)"
               % (_us(self.cpu_per_event), self.cpu_clock),
               "whole process: %.2f s wall, %.2f s CPU (wait4), peak RSS %s (VmHWM; ru_maxrss %s)"
               % (self.wall, self.usage.cpu, _mb(self.hwm_kb), _mb(self.usage.maxrss_kb))]
        if self.seen < self.count:
            out.append("the first watch stream ended (the server had sent all %s events) but only %s reached "
                       "the handler before the stream was watched again" % (number(self.count), number(self.seen)))
        return out


class InformersRun:
    """What informers.lua reported for the informers of namespaces first..last, and what the harness
    saw while it ran: VmRSS at each tick and, behind a proxy, the process's connections to it."""

    def __init__(self, b, first, last, slow=0.0, hold=0.0, url=None, kubeconfig=None, proxy=None, server_pid=None):
        self.count = b.opts.informer_events
        argv = [b.klua] + (["--kubeconfig", kubeconfig] if kubeconfig else ["--server", url]) + [
            "run", os.path.join(LUA_DIR, "informers.lua"), self.count, first, last, slow, hold]
        self.ticks, self.connections = [], []

        # Connections are counted once every list is done: at each tick after klua.on_synced. The
        # proxy's and the server's CPU time are read around the run.
        seen = set()
        proxy_cpu = h2proxy.cpu_seconds(proxy[1]) if proxy else None
        server_cpu = h2proxy.cpu_seconds(server_pid) if server_pid else None

        def on_record(child, name, fields):
            seen.add(name)
            if name == "tick":
                self.ticks.append(fields)
                if proxy and "synced" in seen:
                    n = h2proxy.connections(child.pid, proxy[0])
                    if n is not None:
                        self.connections.append(n)

        child, records = b.script("informers-%d-%d%s" % (first, last, "-slow" if slow else ""),
                                  [str(a) for a in argv], "done", "klua", b.env, on_record)
        self.usage = child.reap(5) or child.stop()
        self.wall = time.monotonic() - child.started
        self.proxy_cpu = h2proxy.cpu_seconds(proxy[1]) - proxy_cpu if proxy_cpu is not None else None
        self.server_cpu = h2proxy.cpu_seconds(server_pid) - server_cpu if server_cpu is not None else None
        done = records["done"][1]
        self.slow = first if slow else None
        counted = [i for i in range(first, last + 1) if i != self.slow]
        self.seen = {i: int(done["seen%d" % i]) for i in range(first, last + 1)}
        self.pending = {i: int(done["pending%d" % i]) for i in range(first, last + 1)}
        stamped = {i: int(done["stamped%d" % i]) for i in counted}
        firsts = {i: float(done["first%d" % i]) for i in counted}
        lasts = {i: float(done["last%d" % i]) for i in counted}
        # Every rate runs from the first update of any counted informer, so that an informer served
        # only after the others have finished shows as slow however fast it then went.
        start = min(firsts[i] for i in counted if self.seen[i]) if any(self.seen[i] for i in counted) else 0.0
        self.rates = {i: stamped[i] / (lasts[i] - start) if stamped[i] and lasts[i] > start else 0.0
                      for i in counted}
        end = max(lasts.values())
        self.total = sum(stamped.values()) / (end - start) if end > start else 0.0
        self.rate = self.total
        self.all_seen = all(self.seen[i] >= self.count for i in counted)
        self.peak_rss_kb = max(int(done["peak_rss_kb"]), int(done["hwm_kb"]))
        self.rss_kb = int(done["rss_kb"])
        self.counted = records.get("counted", (0, {}))[1]
        self.cpu = self.usage.cpu

    def rates_text(self):
        return ", ".join("team-%02d %s" % (i, number(r)) for i, r in sorted(self.rates.items()))

    def spread(self):
        """The fastest informer's rate over the slowest's."""
        low, high = min(self.rates.values()), max(self.rates.values())
        return high / low if low else float("inf")


class SyncRun:
    """What sync.lua reported, and /proc/PID/status once it had settled."""

    def __init__(self, pods, child, records, status, usage, runs):
        self.pods, self.runs = pods, runs
        synced_at, synced = records["synced"]
        self.wall = synced_at - child.started
        self.script_seconds = float(synced["at"])
        self.added = int(synced["added"])
        self.cached = int(synced["cached"])
        self.lists = int(synced["lists"])
        self.events = int(synced["events"])
        self.hwm_kb = int(synced["hwm_kb"])
        self.rss_kb = status.get("VmRSS") or int(records["settled"][1]["rss_kb"])
        # Right after the sync, before the compaction of the cache (sync.lua), and what it did.
        self.uncompressed_rss_kb = int(records["uncompressed"][1]["rss_kb"])
        settled = records["settled"][1]
        self.compressed = int(settled.get("compressed", 0))
        self.compressed_bytes = int(settled.get("compressed_bytes", 0))
        self.compressed_json_bytes = int(settled.get("compressed_json_bytes", 0))
        self.compaction_seconds = float(settled.get("compaction_seconds", 0))
        self.usage = usage

    def compaction(self, idle, pods):
        """The detail line of what the compaction of the cache did, and what the cache cost before."""
        before = (self.uncompressed_rss_kb - idle.rss_kb) * 1024 / pods
        if not self.compressed:
            return "no cached object compressed (--cache-compression=false, or too little JSON); right " \
                   "after the sync %s B per Pod" % number(before)
        return ("right after the sync, before the compaction: %s B per Pod; then %s Pods compressed, %s of "
                "JSON to %s (%.3f×), in %.2f s of the loop thread's CPU (%s per Pod), waited for as "
                "inf:stats().compaction == \"idle\"" % (
                    number(before), number(self.compressed), _mb(self.compressed_json_bytes // 1024),
                    _mb(self.compressed_bytes // 1024), self.compressed_bytes / max(1, self.compressed_json_bytes),
                    self.compaction_seconds, _us(self.compaction_seconds / self.compressed)))


class LinesRun:
    """Lines a watch printer wrote: when the first and the last (up to count) arrived, and the count-th."""

    def __init__(self, count, started):
        self.count, self.started = count, started
        self.lines, self.first, self.last_time = 0, None, None
        # The read before the one that brought the last line: when it came, and the lines until then.
        self.before_last_time, self.before_last_lines = None, 0
        self.partial = b""
        self.final_line = None
        self.reason = self.usage = None
        self.hwm_kb = 0

    def feed(self, now, chunk):
        complete = (self.partial + chunk).split(b"\n")
        self.partial = complete.pop()
        new = min(len(complete), self.count - self.lines)
        if new:
            self.first = self.first or now
            self.before_last_time, self.before_last_lines = self.last_time, self.lines
            self.last_time = now
            self.lines += new
            if self.lines == self.count:
                self.final_line = complete[new - 1].decode(errors="replace")
        return self.lines >= self.count

    @property
    def rate(self):
        # Lines that all came in one read (a short run) have no span between them: their
        # rate is then counted from the process start.
        span = (self.last_time or 0) - (self.first or 0)
        if self.lines >= 2 and span > 0:
            return (self.lines - 1) / span
        since_start = (self.last_time or 0) - self.started
        return self.lines / since_start if self.lines and since_start > 0 else 0.0

    def last_read_text(self):
        """How long the last read waited after the one before, and the rate up to that one: a printer
        that flushes a partial buffer on a timer (klua watch, every 50 ms) sends its last lines late."""
        if self.before_last_time is None or self.before_last_lines < 2 or self.before_last_time <= self.first:
            return None
        return "the last %s lines came %.1f ms after the read before them; %s lines/s up to that read" % (
            number(self.lines - self.before_last_lines), (self.last_time - self.before_last_time) * 1e3,
            number((self.before_last_lines - 1) / (self.before_last_time - self.first)))


# --- scenarios: each returns a list of Rows


def scenario_server(b):
    # Transfers are timed to their end, so the stream must end whatever --watch-end says.
    url, _ = b.server(b.opts.watch_pods, b.opts.events, watch_end="close")
    path = "/api/v1/pods?watch=true&resourceVersion=%d" % data.LIST_RV
    host, port = url[len("http://"):].split(":")
    received, seconds = 0, 0.0
    server, reader = b.server_cpu(url), time.process_time()
    while received < SPEED_BYTES and seconds < SPEED_SECONDS:
        n, t = _socket_read(host, int(port), path)
        received, seconds = received + n, seconds + t
    raw = received / seconds
    rows = [Row("server: watch stream to a socket reader", "%.2f GB/s" % (raw / 1e9), "> 1 GB/s",
                raw > TARGET_SERVER, cpu=cpu_cell("reader (the harness)", time.process_time() - reader,
                                                  _spent(server, b.server_cpu(url))),
                details=["the %s-byte stream read repeatedly (%s MB in all) with 4 MiB recv() calls, "
                         "connection set-up included" % (number(b.dataset.meta["event_bytes"]),
                                                         number(received / 1e6))])]
    curl = shutil.which("curl")
    if curl:
        speeds = []
        # The curls are the only children the harness waits for meanwhile: RUSAGE_CHILDREN's growth is theirs.
        server, before = b.server_cpu(url), resource.getrusage(resource.RUSAGE_CHILDREN)
        for _ in range(3):
            out = subprocess.run([curl, "-s", "-o", "/dev/null", "-w", "%{speed_download}", url + path],
                                 capture_output=True, text=True, timeout=b.opts.timeout).stdout
            speeds.append(float(out or 0))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        curl_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        rows.append(Row("server: curl -o /dev/null speed_download", "%.2f GB/s" % (max(speeds) / 1e9),
                        cpu=cpu_cell("curl, 3 runs", curl_cpu, _spent(server, b.server_cpu(url))),
                        details=["best of 3; the curl tool writes its output in 16 KiB pieces, which bounds "
                                 "what it can measure on a slow-syscall machine"]))
    return rows


def _socket_read(host, port, path):
    """Reads one whole response; (bytes, seconds)."""
    started = time.monotonic()
    with socket.create_connection((host, port)) as s:
        s.sendall(b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (path.encode(), host.encode()))
        buf = bytearray(4 << 20)
        received = 0
        while True:
            n = s.recv_into(buf)
            if not n:
                break
            received += n
    return received, time.monotonic() - started


def scenario_ref(b):
    if not b.lua:
        return [Row("lua-cjson decode in lua5.4 (reference)", "skipped: lua5.4 not installed")]
    argv = [b.lua, os.path.join(LUA_DIR, "cjson_decode.lua"), b.dataset.events_path, str(b.opts.events)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=b.opts.timeout)
    m = re.search(r"bench done seen=(\d+) cpu=([\d.]+)", out.stdout)
    if not m:
        raise ScenarioError("lua5.4 with lua-cjson failed", out.stderr.splitlines()[-8:])
    seen, cpu = int(m.group(1)), float(m.group(2))
    rate = seen / cpu if cpu else 0.0
    return [Row("lua-cjson decode in lua5.4 (reference)", "%s ev/s" % number(rate), rate=rate,
                cpu=cpu_cell("lua5.4", cpu, server=False),
                details=["cjson.decode of %s event lines and the same three fields as handler-3-fields (a); "
                         "CPU time" % number(seen)])]


def scenario_peers(b):
    """Each peer on the watch stream, best of --repeat runs as klua gets; a peer that cannot run here
    is reported as not measured, and the run goes on."""
    n = b.opts.events
    rows = []
    for peer in b.found_peers():
        if peer.missing:
            rows.append(Row(peer.label, "not measured", details=[peer.missing]))
            continue
        try:
            if peer.name == "kubectl":
                row = _kubectl_row(b, peer, n)
            else:
                r = b.peer_events_run(peer, n)
                row = Row(peer.label, _rate_text(r.rate, r.seen, r.count, "events"), rate=r.rate,
                          details=r.details(), cpu=cpu_cell(peer.name, r.usage.cpu, r.server_cpu))
        except ScenarioError as e:
            rows.append(Row.failed(peer.label, str(e), e.details))
            continue
        b.peer_rates[peer.name] = row.rate
        rows.append(row)
    return rows


def _kubectl_once(b, peer, n):
    url, kubeconfig = b.server(b.opts.watch_pods, n)
    cache = os.path.join(b.workdir, "kube-cache")
    argv = [peer.command, "--kubeconfig", kubeconfig, "--cache-dir", cache, "get", "pods", "-A", "--watch-only",
            "-o", "name"]
    env = dict(os.environ, HOME=b.workdir)
    return lambda: b.count_lines("kubectl-watch", argv, n, url, env=env)


def _kubectl_row(b, peer, n):
    run = b.measured(*b.peer_measurement(peer, n))
    row = _watch_row(peer.label, run, _expected_last(b, n), "kubectl")
    row.details[0] += "; best of %d runs" % b.opts.repeat
    return row


def _expected_last(b, n):
    return "pod/" + b.dataset.pod_name((n - 1) % b.opts.watch_pods)


def _watch_names_measurement(b, n):
    """klua watch -o name on n events as Bench.measured and Bench.interleave take it: (key, make_once)."""
    def make_once():
        url, _ = b.server(b.opts.watch_pods, n)
        argv = [b.klua, "--server", url] + LIST_ONLY + ["watch", "pods", "-A", "-o", "name", "--watch-only"]
        return lambda: b.count_lines("klua-watch", argv, n, url)
    return ("watch-names", n), make_once


def scenario_watch_names(b):
    n = b.opts.events
    run = b.measured(*_watch_names_measurement(b, n))
    row = _watch_row("%s: klua watch pods -A -o name --watch-only" % title("watch-names"), run, _expected_last(b, n),
                     "klua")
    row.details[0] += "; best of %d runs" % b.opts.repeat
    _judge_rate(b, row, run.lines >= n and run.final_line == _expected_last(b, n))
    return [row]


def scenario_limit(b):
    r = b.limit_run()
    return [Row("limit: simdjson alone on the same %s event lines, the 3 fields read" % number(r.count),
                "%s ev/s (%s MB/s)" % (number(r.rate), number(r.size / r.best / 1e6 if r.best else 0)), rate=r.rate,
                cpu=cpu_cell("bench-limit", r.cpu, server=False),
                details=["bench-limit (scripts/benchlib/limit.cc): the events file read into memory first, then each "
                         "line parsed in place by simdjson's DOM parser (klua's, src/wire/json.cc) and "
                         "object.metadata.name, object.metadata.namespace and object.status.phase read; no HTTP, no "
                         "framing, no cache, no Lua; %s of %s lines; the fastest of %d rounds (%d processes of %d, one "
                         "with each round of the event rates), %.3f s wall and %.3f s CPU"
                         % (number(r.seen), number(r.count), r.rounds, r.rounds // LIMIT_ROUNDS, LIMIT_ROUNDS, r.best,
                            r.cpu),
                         "klua's event rows give their rate as a fraction of this one, measured in the same run: "
                         "what they read is these lines, over HTTP, through klua"])]


def _judge_rate(b, row, correct):
    """Sets row's target and verdict from its rate, as ratios to rates of the same run: at least
    TARGET_OF_LIMIT of the limit, at least TARGET_VS_PEER times each peer. A peer that was not
    measured leaves its part unmeasured (not a pass); correct is what the row checks besides."""
    limit = b.limit_run().rate
    share = row.rate / limit if limit else 0.0
    row.result += " = %.0f%% of the limit" % (100 * share)
    parts = ["≥ %.0f%% of the limit" % (100 * TARGET_OF_LIMIT)]
    checks = ["%.0f%% of the limit (%s ev/s)" % (100 * share, number(limit))]
    ok = correct and share >= TARGET_OF_LIMIT
    for peer, factor in TARGET_VS_PEER.items():
        parts.append("≥ %g× %s" % (factor, peer))
        rate = b.peer_rates.get(peer)
        if rate:
            checks.append("%.1f× %s (%s ev/s)" % (row.rate / rate, peer, number(rate)))
            ok = ok and row.rate >= factor * rate
        else:
            row.unmeasured.append(peer)
            checks.append("%s not measured (%s)" % (peer, _peer_absence(b, peer)))
    row.target = ", ".join(parts)
    row.ok = ok
    row.details.append("against the same run: " + "; ".join(checks))


def _peer_absence(b, name):
    """Why a peer has no rate in this run."""
    peer = next((p for p in b.peers if p.name == name), None)
    if peer is None:
        return "the peers scenario did not run"
    return peer.missing or "its run failed"


def _watch_row(name, run, expected_last, who):
    details = ["%s of %s lines; rate between the first and the last of them as the harness read them "
               "(from the process start when they came in one read)" % (number(run.lines), number(run.count)),
               "process: %.2f s to the last line, %.2f s CPU (wait4), peak RSS %s"
               % ((run.last_time or run.started) - run.started, run.usage.cpu,
                  "%s (VmHWM; ru_maxrss %s)" % (_mb(run.hwm_kb), _mb(run.usage.maxrss_kb)) if run.hwm_kb else
                  "not read: the process had ended with its stream (ru_maxrss %s)" % _mb(run.usage.maxrss_kb))]
    if run.last_read_text():
        details.append(run.last_read_text())
    if run.lines >= run.count:
        got = run.final_line
        if got != expected_last:
            details.append("line %s is %r, expected %r" % (number(run.count), got, expected_last))
    else:
        details.append("output stopped (%s) before %s lines" % (run.reason, number(run.count)))
    return Row(name, _rate_text(run.rate, run.lines, run.count, "lines"), rate=run.rate, details=details,
               cpu=cpu_cell(who, run.usage.cpu, run.server_cpu))


def _rate_text(rate, seen, count, what):
    text = "%s ev/s" % number(rate)
    if seen < count:
        text += " (only %s of %s %s)" % (number(seen), number(count), what)
    return text


def scenario_handler(name):
    mode, label = MODES[name]

    def run(b):
        r = b.events_run(mode, b.opts.events)
        correct = r.seen == r.count
        row = Row("%s: %s" % (title(name), label), _rate_text(r.rate, r.seen, r.count, "events"), rate=r.rate,
                  details=r.details(), cpu=cpu_cell("klua", r.usage.cpu, r.server_cpu))
        if mode == "enqueue":
            # Event k modifies Pod k mod --watch-pods, so the set holds one key per Pod seen.
            expected = min(b.opts.watch_pods, r.seen)
            row.details.append("the queue holds %s distinct keys (%s expected)" % (number(r.queued),
                                                                                 number(expected)))
            correct = correct and r.queued == expected
        if mode != "copy":
            _judge_rate(b, row, correct)
            return [row]
        # klua.copy's own cost: against the reading handler of the same run, and the limit for reference.
        read = b.events_run("read", b.opts.events)
        limit = b.limit_run().rate
        share = r.rate / read.rate if read.rate else 0.0
        row.result += " = %.0f%% of (a), %.0f%% of the limit" % (100 * share, 100 * r.rate / limit if limit else 0)
        row.target = "≥ %.0f%% of %s's rate" % (100 * TARGET_COPY_OF_READ, title("handler-3-fields"))
        row.ok = correct and share >= TARGET_COPY_OF_READ
        row.details.append("against the same run: %s at %s ev/s, the limit at %s ev/s" % (
            title("handler-3-fields"), number(read.rate), number(limit)))
        return [row]
    return run


def scenario_handler_edit(b):
    """What a reconcile that writes pays for its object: a label set on new and the object encoded,
    through klua.edit(new) (writes beside the bytes) and through klua.copy(new) (a table of every
    member), each as a fraction of handler-3-fields (a)'s rate in the same run. No target: (b) is
    klua.copy's."""
    read = b.events_run("read", b.opts.events)
    rows = []
    for mode, how in (("write-edit", "klua.edit(new)"), ("write-copy", "klua.copy(new)")):
        r = b.events_run(mode, b.opts.events)
        share = r.rate / read.rate if read.rate else 0.0
        rows.append(Row("%s: handler sets a label through %s and encodes it" % (title("handler-edit"), how),
                        "%s = %.0f%% of (a)" % (_rate_text(r.rate, r.seen, r.count, "events"), 100 * share),
                        ok=None if r.seen == r.count else False, rate=r.rate,
                        cpu=cpu_cell("klua", r.usage.cpu, r.server_cpu),
                        details=r.details() + ["against the same run: %s at %s ev/s" % (
                            title("handler-3-fields"), number(read.rate))]))
    return rows


def scenario_initial_sync(b):
    rows = []
    for paginate, label, seconds in (("auto", "resourceVersion=0, one page", TARGET_SYNC_SECONDS),
                                     ("always", "paged by 500", TARGET_SYNC_PAGED_SECONDS)):
        r = b.sync_run(b.opts.pods, paginate)
        rate = r.pods / r.wall if r.wall > 0 else 0.0
        json_mb = b.dataset.average_pod_bytes(r.pods) * r.pods / 1e6
        limit = seconds * r.pods / TARGET_SYNC_PODS
        # What the cache holds once synced: before its compaction, which comes seconds later.
        idle_kb = b.sync_run(0).rss_kb
        cache_kb = r.uncompressed_rss_kb - idle_kb
        peak = r.hwm_kb / cache_kb if cache_kb > 0 else 0.0
        rows.append(Row("%s: initial sync of %s Pods (%s)" % (title("initial-sync"), number(r.pods), label),
                        "%.2f s (%s obj/s), peak RSS %s = %.2f× the cache" % (r.wall, number(rate), _mb(r.hwm_kb),
                                                                              peak),
                        "≤ %.2f s, peak ≤ %.1f× the cache" % (limit, TARGET_PEAK),
                        r.cached == r.pods and r.wall <= limit and 0 < peak <= TARGET_PEAK,
                        cpu=cpu_cell("klua", r.usage.cpu, r.server_cpu),
                        details=["from process start to klua.on_synced (%.2f s from the script's start); "
                                 "fastest of %d runs" % (r.script_seconds, r.runs),
                                 "%s cached, %s add calls; the list is %s MB of JSON" % (
                                     number(r.cached), number(r.added), number(json_mb, 1)),
                                 "peak RSS is VmHWM at sync (ru_maxrss at exit %s); %.2f s CPU in all (wait4)"
                                 % (_mb(r.usage.maxrss_kb), r.usage.cpu),
                                 "the cache is what the sync added to an idle klua's RSS, read after a full Lua "
                                 "GC right after the sync, before the cache's compaction: %s - %s = %s" % (
                                     _mb(r.uncompressed_rss_kb), _mb(idle_kb), _mb(cache_kb))]))
    return rows


def scenario_watchlist_sync(b):
    """The initial sync by LIST and by WatchList, run by turns --repeat times each; ratios of the
    fastest of each, so that the machine's speed, which moves over the hour, cancels out."""
    pods, lists, streams = b.opts.pods, [], []
    for _ in range(b.opts.repeat):
        lists.append(b.sync_once(pods))
        streams.append(b.sync_once(pods, watch_list=True))
    listed, streamed = min(lists, key=lambda r: r.wall), min(streams, key=lambda r: r.wall)
    list_peak, stream_peak = min(r.hwm_kb for r in lists), min(r.hwm_kb for r in streams)
    time_ratio = streamed.wall / listed.wall if listed.wall else 0.0
    peak_ratio = stream_peak / list_peak if list_peak else 0.0
    # That each came as it should: the streamed state as initial events without a LIST (a watch-list
    # the server refused, or ended without its bookmark, would have fallen back to one).
    right = all(r.lists >= 1 and r.cached == pods for r in lists) and \
        all(r.lists == 0 and r.events >= pods and r.cached == pods for r in streams)
    ok = right and 0 < time_ratio <= TARGET_WATCHLIST_TIME and 0 < peak_ratio <= TARGET_WATCHLIST_PEAK
    return [Row("%s: initial sync of %s Pods, WatchList against LIST" % (title("watchlist-sync"), number(pods)),
                "%.2f s vs %.2f s (%.2f×); peak RSS %s vs %s (%.2f×)" % (
                    streamed.wall, listed.wall, time_ratio, _mb(stream_peak), _mb(list_peak), peak_ratio),
                "time ≤ %.1f×, peak RSS ≤ %.1f× LIST's" % (TARGET_WATCHLIST_TIME, TARGET_WATCHLIST_PEAK), ok,
                cpu="WatchList: %s; LIST: %s" % (cpu_cell("klua", streamed.usage.cpu, streamed.server_cpu),
                                                 cpu_cell("klua", listed.usage.cpu, listed.server_cpu)),
                details=["klua run sync.lua with --watch-list=false (a LIST at resourceVersion=0, one page) and "
                         "without (a WATCH with sendInitialEvents=true: every Pod as ADDED, then the "
                         "initial-events-end bookmark), by turns, %d runs each; time from process start to "
                         "klua.on_synced, the fastest run's; peak RSS is VmHWM at sync, the lowest run's"
                         % b.opts.repeat,
                         "LIST runs: %s s, %s; WatchList runs: %s s, %s" % (
                             ", ".join("%.2f" % r.wall for r in lists), ", ".join(_mb(r.hwm_kb) for r in lists),
                             ", ".join("%.2f" % r.wall for r in streams), ", ".join(_mb(r.hwm_kb) for r in streams)),
                         "CPU in all (wait4), fastest runs: LIST %.2f s, WatchList %.2f s; settled RSS after a full "
                         "Lua GC %s and %s" % (listed.usage.cpu, streamed.usage.cpu, _mb(listed.rss_kb),
                                               _mb(streamed.rss_kb)),
                         "the WatchList runs made %s LIST requests and got %s initial events for %s Pods; the LIST "
                         "runs made %s" % (
                             ", ".join(str(r.lists) for r in streams), ", ".join(number(r.events) for r in streams),
                             number(pods), ", ".join(str(r.lists) for r in lists))
                         + ("" if right else " (one of them did not sync as it should: the row fails)")])]


def scenario_large_sync(b):
    """(e'): the one-page sync at --large-pods against --pods: time and memory per Pod stay flat."""
    small, large, idle = b.sync_run(b.opts.pods), b.sync_run(b.opts.large_pods), b.sync_run(0)
    per_sync = {r: r.wall / r.pods for r in (small, large)}
    per_object = {r: (r.rss_kb - idle.rss_kb) * 1024 / r.pods for r in (small, large)}
    time_growth = per_sync[large] / per_sync[small] if per_sync[small] else 0.0
    memory_growth = per_object[large] / per_object[small] if per_object[small] > 0 else 0.0
    rate = large.pods / large.wall if large.wall > 0 else 0.0
    return [Row("%s: initial sync of %s Pods (resourceVersion=0, one page)" % (title("large-sync"),
                                                                              number(large.pods)),
                "%.2f s (%s obj/s); per Pod %s and %s B, %.2f× and %.2f× %s Pods'" % (
                    large.wall, number(rate), _us(per_sync[large]), number(per_object[large]), time_growth,
                    memory_growth, number(small.pods)),
                "per Pod flat (≤ %.2f×)" % TARGET_FLAT,
                large.cached == large.pods and 0 < time_growth <= TARGET_FLAT and 0 < memory_growth <= TARGET_FLAT,
                cpu=cpu_cell("klua", large.usage.cpu, large.server_cpu),
                details=["%s cached; peak RSS %s (VmHWM at sync), %.2f s CPU in all (wait4); each size the "
                         "fastest of %d runs" % (number(large.cached), _mb(large.hwm_kb), large.usage.cpu,
                                                 large.runs),
                         "per Pod: time from process start to klua.on_synced, and (VmRSS after sync and the "
                         "cache's compaction - VmRSS of an idle klua), after a full Lua GC; at %s Pods %s and %s B" % (
                             number(small.pods), _us(per_sync[small]), number(per_object[small])),
                         "at %s Pods: %s" % (number(large.pods), large.compaction(idle, large.pods)),
                         "at %s Pods: %s" % (number(small.pods), small.compaction(idle, small.pods))])]


def _memory_row(b, pods):
    full, idle = b.sync_run(pods), b.sync_run(0)
    per_object = (full.rss_kb - idle.rss_kb) * 1024 / pods
    size = b.dataset.average_pod_bytes(pods)
    return full, idle, per_object, size


def _memory_variant(b, mode, what):
    """A reference row: memory per cached Pod of an informer that caches less (docs/scale.md)."""
    run, idle = b.sync_run(b.opts.pods, mode=mode), b.sync_run(0)
    per_object = (run.rss_kb - idle.rss_kb) * 1024 / b.opts.pods
    size = b.dataset.average_pod_bytes(b.opts.pods)
    return Row("%s: memory per cached Pod, %s (%s Pods)" % (title("memory-per-pod"), what, number(b.opts.pods)),
               "%s B = %.2f× the full Pod's JSON" % (number(per_object), per_object / size),
               cpu=cpu_cell("klua", run.usage.cpu, run.server_cpu),
               details=["%s of %s Pods cached" % (number(run.cached), number(b.opts.pods)),
                        run.compaction(idle, b.opts.pods)])


def scenario_memory_per_pod(b):
    full, idle, per_object, size = _memory_row(b, b.opts.pods)
    r = per_object / size
    return [Row("%s: memory per cached Pod (%s Pods)" % (title("memory-per-pod"), number(b.opts.pods)),
                "%s B = %.2f× its JSON (%s B)" % (number(per_object), r, number(size)),
                "≤ %.1f×" % TARGET_MEMORY, full.cached == b.opts.pods and r <= TARGET_MEMORY,
                cpu=cpu_cell("klua", full.usage.cpu, full.server_cpu),
                details=["(VmRSS after sync and compaction - VmRSS of an idle klua) / Pods = (%s - %s) / %s, "
                         "read from /proc/PID/status after a full Lua GC" % (_mb(full.rss_kb), _mb(idle.rss_kb),
                                                                           number(b.opts.pods)),
                         full.compaction(idle, b.opts.pods)]),
            _memory_variant(b, "transform", "managedFields dropped"),
            _memory_variant(b, "metadata", "metadata-only")]


# Each informer that caches less, and its sync time per Pod at most this many times the full
# informer's, measured in the same run (None: no target; the first row is the full informer).
# The function transform changes the object it is given, as client-go's TransformFuncs do; the
# one that builds a table (klua.copy) to return is shown beside it.
CACHE_LESS = (("full", "full informer", None),
              ("transform", "klua.drop_fields('metadata.managedFields')", 1.1),
              ("function", "a Lua function transform dropping metadata.managedFields", 2.0),
              ("function-copy", "a Lua function transform returning klua.copy(pod) without metadata.managedFields",
               None),
              ("metadata", "metadata-only", 1.0))


def scenario_cache_less(b):
    """What caching less costs at sync and saves in memory, per Pod (docs/scale.md); sync time per
    Pod judged against the full informer's in the same run."""
    idle, pods = b.sync_run(0), b.opts.pods
    size = b.dataset.average_pod_bytes(pods)
    rows, full = [], None
    runs = b.sync_rounds(pods, [mode for mode, _, _ in CACHE_LESS])
    for mode, what, bound in CACHE_LESS:
        r = runs[mode]
        per_sync = r.wall / pods
        per_object = (r.rss_kb - idle.rss_kb) * 1024 / pods
        full = full or (per_sync, per_object)
        ratio = per_sync / full[0] if full[0] else 0.0
        rows.append(Row("cache-less: sync and memory per Pod, %s (%s Pods)" % (what, number(pods)),
                        "%s (%.2f×) and %s B (%.2f×) per Pod" % (
                            _us(per_sync), ratio, number(per_object), per_object / full[1] if full[1] else 0.0),
                        "-" if bound is None else "sync ≤ %.1f× the full informer's" % bound,
                        None if bound is None else r.cached == pods and ratio <= bound,
                        cpu=cpu_cell("klua", r.usage.cpu, r.server_cpu),
                        details=["sync: %.2f s from process start to klua.on_synced, %s of %s Pods cached, "
                                 "peak RSS %s, %.2f s CPU in all (wait4); the bench server's CPU meanwhile %s"
                                 % (r.wall, number(r.cached), number(pods), _mb(r.hwm_kb), r.usage.cpu,
                                    "%.2f s" % r.server_cpu if r.server_cpu is not None else "unknown"),
                                 "memory: (VmRSS after sync - VmRSS of an idle klua) / Pods = (%s - %s) / %s, "
                                 "after a full Lua GC and the cache's compaction; the full Pod's JSON is %s B" % (
                                     _mb(r.rss_kb), _mb(idle.rss_kb), number(pods), number(size)),
                                 r.compaction(idle, pods),
                                 "the × figures are against the full informer's row; the five informers "
                                 "synced in turn, %d rounds of them, the fastest of each counted" % b.opts.repeat]))
    return rows


def scenario_scale(b):
    small_events = max(2, b.opts.events // 10)
    small_pods = max(1, b.opts.pods // 10)
    big, small = b.events_run("read", b.opts.events), b.events_run("read", small_events)
    growth = big.cpu_per_event / small.cpu_per_event if small.cpu_per_event else 0.0
    rows = [Row("scale: CPU per event, %s vs %s events (%s)" % (number(small_events), number(b.opts.events),
                                                                 title("handler-3-fields")),
                "%s vs %s (%.2f×)" % (_us(small.cpu_per_event), _us(big.cpu_per_event), growth),
                "flat (≤ %.2f×)" % TARGET_FLAT, 0 < growth <= TARGET_FLAT and 1 / growth <= TARGET_FLAT,
                cpu=cpu_cell("klua", small.usage.cpu, small.server_cpu), details=small.details())]
    _, _, big_obj, _ = _memory_row(b, b.opts.pods)
    _, _, small_obj, _ = _memory_row(b, small_pods)
    growth = big_obj / small_obj if small_obj > 0 else 0.0
    rows.append(Row("scale: memory per Pod, %s vs %s Pods (%s)" % (number(small_pods), number(b.opts.pods),
                                                                    title("memory-per-pod")),
                    "%s B vs %s B (%.2f×)" % (number(small_obj), number(big_obj), growth),
                    "flat (≤ %.2f×)" % TARGET_FLAT, 0 < growth <= TARGET_FLAT and 1 / growth <= TARGET_FLAT))
    return rows


def _namespaces_server(b):
    ds = b.namespaces_dataset()
    return b.server(max(b.opts.watch_pods, INFORMERS), INFORMERS * b.opts.informer_events, dataset=ds)


def scenario_many_informers(b):
    name = "%s: %d informers, one HTTP/2 connection" % (title("many-informers"), INFORMERS)
    target = "≥ %s ev/s in all; slowest ≥ 1/%g of fastest; 1 connection" % (number(TARGET_MANY), TARGET_STARVED)
    if not h2proxy.find(b.opts.nghttpx):
        return [Row(name, "not measured", target, details=[h2proxy.missing_reason(b.opts.nghttpx)])]
    backend, _ = _namespaces_server(b)
    _, kubeconfig, port, pid = b.proxy(backend)
    r = b.best(lambda: InformersRun(b, 0, INFORMERS - 1, kubeconfig=kubeconfig, proxy=(port, pid),
                                    server_pid=b.server_pids[backend]))
    n = b.opts.informer_events
    one = bool(r.connections) and set(r.connections) == {1}
    ok = r.all_seen and r.total >= TARGET_MANY and r.spread() <= TARGET_STARVED and one
    result = "%s ev/s in all; per informer %s–%s ev/s" % (number(r.total), number(min(r.rates.values())),
                                                         number(max(r.rates.values())))
    if not r.all_seen:
        result += " (not every informer got its %s)" % number(n)
    details = [
        "%d informers (namespaces team-00 ... team-%02d), each with the handler of handler-3-fields (a) on its own "
        "watch stream of %s MODIFIED events; best of %d runs" % (INFORMERS, INFORMERS - 1, number(n), b.opts.repeat),
        "updates handled: %s" % ", ".join("team-%02d %s" % (i, number(k)) for i, k in sorted(r.seen.items())),
        "rate of each, from the first update of any informer to its own last (klua's monotonic clock): %s; "
        "fastest/slowest %.2f×" % (r.rates_text(), r.spread()),
        "TCP connections from klua to nghttpx (/proc/PID/fd against /proc/net/tcp), at each of %d samples "
        "(every 0.1 s from klua.on_synced on): %s" % (len(r.connections),
                                                      ", ".join(str(c) for c in r.connections) or "none taken"),
        "klua to %s (one worker, self-signed certificate) over TLS and HTTP/2; nghttpx to bench-server "
        "over HTTP/1.1, one request per stream" % h2proxy.version(h2proxy.find(b.opts.nghttpx)),
        "whole process: %.2f s wall, %.2f s CPU (wait4), peak RSS %s; meanwhile nghttpx used %s s of CPU "
        "(its worker process included) and bench-server %s s (/proc/PID/stat)" % (
            r.wall, r.cpu, _mb(r.peak_rss_kb), _seconds(r.proxy_cpu), _seconds(r.server_cpu)),
    ]
    return [Row(name, result, target, ok, r.total, details,
                cpu=cpu_cell("klua", r.cpu, r.server_cpu) + " · nghttpx %s" % (
                    "-" if r.proxy_cpu is None else "%.2f s" % r.proxy_cpu))]


def scenario_slow_handler(b):
    url, _ = _namespaces_server(b)
    others = SLOW_INFORMERS - 1
    pid = b.server_pids[url]
    alone = b.best(lambda: InformersRun(b, 1, others, url=url, server_pid=pid))
    slow = b.best(lambda: InformersRun(b, 0, others, slow=SLOW_SECONDS, hold=SLOW_HOLD, url=url, server_pid=pid))
    n = b.opts.informer_events
    change = slow.total / alone.total if alone.total else 0.0
    label = "%s: %d informers, 1 waiting %g ms per update" % (title("slow-handler"), SLOW_INFORMERS,
                                                                SLOW_SECONDS * 1000)
    ticks = [int(t["rss_kb"]) for t in slow.ticks]
    held = [t for t in slow.ticks if float(t["at"]) >= float(slow.counted.get("at", 0) or 0)]
    pending = [int(t["slow_pending"]) for t in slow.ticks if "slow_pending" in t]
    grown_mb = (slow.peak_rss_kb - alone.peak_rss_kb) / 1024
    held_kb = [int(t["rss_kb"]) for t in held]
    flat = len(held_kb) >= 2 and held_kb[-1] - held_kb[0] <= TARGET_FLAT_HELD_MB * 1024
    stream_mb = n * b.namespaces_dataset().meta["event_bytes"] / b.namespaces_dataset().n_events / 1e6
    rows = [
        Row("%s: the others' rate" % label,
            "%s ev/s vs %s ev/s alone (%.2f×)" % (number(slow.total), number(alone.total), change),
            "unchanged (≥ %.2f×)" % TARGET_UNCHANGED,
            slow.all_seen and alone.all_seen and change >= TARGET_UNCHANGED, slow.total,
            cpu="with the slow one: %s; alone: %s" % (cpu_cell("klua", slow.cpu, slow.server_cpu),
                                                      cpu_cell("klua", alone.cpu, alone.server_cpu)),
            details=[
             "the %d others (team-01 ... team-%02d) each handle %s updates with the handler of handler-3-fields "
             "(a), in one process with a slow informer on team-00 and alone (%d informers); HTTP/1.1, one "
             "connection per watch; best of %d runs each" % (others, others, number(n), others, b.opts.repeat),
             "the slow handler calls klua.sleep(%g): a handler that waits, which suspends its own informer's "
             "notifications and nothing else (a busy-wait would take the one Lua thread from every informer, "
             "which no scheduling can undo)" % SLOW_SECONDS,
             "with the slow one: %s ev/s (%s); alone: %s ev/s (%s); from the first update of any to each one's "
             "last" % (number(slow.total), slow.rates_text(), number(alone.total), alone.rates_text()),
             "the slow informer handled %s of its %s updates in %.2f s (%s pending in its queue at the end)"
             % (number(slow.seen[0]), number(n), slow.wall, number(slow.pending[0]))]),
        Row("%s: klua's peak RSS" % label,
            "%s vs %s alone (%+.1f MB)" % (_mb(slow.peak_rss_kb), _mb(alone.peak_rss_kb), grown_mb),
            "bounded (≤ +%d MB), flat while held" % TARGET_HELD_MB, grown_mb <= TARGET_HELD_MB and flat,
            details=["peak of VmRSS sampled every 0.1 s and VmHWM at the end, in the runs of the row above",
                     "VmRSS while the slow informer waited, %.1f s after the others were done (may grow ≤ %d MB): "
                     "%s" % (
                         SLOW_HOLD, TARGET_FLAT_HELD_MB,
                         " → ".join(_mb(int(t["rss_kb"])) for t in held) or "no sample"),
                     "VmRSS at every sample of the run: %s–%s" % (_mb(min(ticks)), _mb(max(ticks)))
                     if ticks else "no VmRSS sample",
                     "the slow informer's queued notifications at each sample: %s (klua holds its reflector "
                     "while the queue is full, QUEUE_HIGH in src/cache/informer.c); its stream is %s MB, "
                     "which an unbounded queue would come to hold" % (
                         ", ".join(number(p) for p in pending) or "none", number(stream_mb, 1))]),
    ]
    return rows


def scenario_fresh_first(b):
    n = FRESH_PODS_QUICK if b.opts.quick else FRESH_PODS
    ds = b.fresh_dataset(n)
    url, _ = b.server(n, 1, watch_end="hold", dataset=ds, watch_delay=FRESH_DELAY)
    last = ds.pod_name(n - 1)
    key = "team-%02d/%s" % ((n - 1) % NAMESPACES, last)
    server = b.server_cpu(url)
    child, records = b.klua_script("fresh-first", url, "fresh.lua", [key, FRESH_RECONCILE], "done", watch_list=True)
    usage = child.reap(5) or child.stop()
    server = _spent(server, b.server_cpu(url))
    f = records["done"][1]
    latency = float(f["latency"])
    label = "%s: %s listed, 1 worker, %g ms reconcile" % (title("fresh-first"), number(n), FRESH_RECONCILE * 1000)
    return [Row(label, "%s ms after the change" % number(latency * 1000, 1), "≤ %g s" % TARGET_FRESH_SECONDS,
                latency <= TARGET_FRESH_SECONDS, cpu=cpu_cell("klua", usage.cpu, server),
                details=["the watch's one event, %g s after the watch began, changes %s, the last of the %s Pods "
                         "listed; the controller's reconcile waits %g s (klua.sleep) for every other key"
                         % (FRESH_DELAY, key, number(n), FRESH_RECONCILE),
                         "the change came %.3f s after klua.on_synced (synced %.2f s after start), with %s keys "
                         "queued; %s reconciles ran before its own" % (
                             float(f["after_sync"]), float(f["synced"]), number(int(f["queued"])),
                             number(int(f["before"]))),
                         "latency: from the update handler's call to the start of the reconcile it caused"])]


class LatencyRun:
    """What latency.lua, or latency.mjs, reported: the latency of each change it saw, sorted."""

    def __init__(self, child, records, usage, server_cpu):
        done = records["done"][1]
        self.latencies = sorted(float(x) for x in done["latencies"].split(",") if x)
        self.initial = int(done["initial"])
        self.hwm_kb = int(done["hwm_kb"])
        self.synced = float(records["synced"][1]["at"]) if "synced" in records else None
        self.usage, self.server_cpu = usage, server_cpu
        self.wall = time.monotonic() - child.started

    def percentile(self, p):
        return webhookload.percentile(self.latencies, p)

    def text(self):
        return "p50 %s, p99 %s" % (_ms(self.percentile(50)), _ms(self.percentile(99)))

    def spread(self):
        return "min %s, p90 %s, p99.9 %s, max %s; %s changes seen" % (
            _ms(self.latencies[0]), _ms(self.percentile(90)), _ms(self.percentile(99.9)), _ms(self.latencies[-1]),
            number(len(self.latencies)))


def _ms(seconds):
    return "%s ms" % number(seconds * 1000, 2)


def _latency_client_node(b):
    """client-node's Peer, found (and installed) here when the peers scenario did not run."""
    peer = next((p for p in b.peers if p.name == "client-node"), None)
    return peer or peers.find_client_node(b.opts.peers_dir, b.log)


def scenario_latency(b):
    """The latency a controller's user feels: from the server's write of a change to the reconcile
    that sees it, while the server changes LATENCY_RATE cached Pods a second; klua's p99 against
    client-node's, which is not measured when client-node cannot run here."""
    n_pods = LATENCY_PODS_QUICK if b.opts.quick else LATENCY_PODS
    seconds = LATENCY_SECONDS_QUICK if b.opts.quick else LATENCY_SECONDS
    n = LATENCY_RATE * seconds
    ds = b.latency_dataset(n_pods, n)
    url, kubeconfig = b.server(n_pods, n, watch_end="hold", dataset=ds, watch_delay=LATENCY_DELAY,
                               watch_rate=LATENCY_RATE)
    label = "%s: %s changes/s for %d s on %s cached Pods" % (title("latency"), number(LATENCY_RATE), seconds,
                                                            number(n_pods))
    how = ("bench-server changes one Pod every %g ms, in turn, %g s after the watch began (the initial "
           "reconciles done), writing each change when its time comes with its send time in annotations "
           "(CLOCK_BOOTTIME and CLOCK_MONOTONIC: both processes read the same kernel clock)"
           % (1000 / LATENCY_RATE, LATENCY_DELAY))
    server = b.server_cpu(url)
    child, records = b.klua_script("latency", url, "latency.lua", [n], "done")
    klua = LatencyRun(child, records, child.reap(5) or child.stop(), None)
    klua.server_cpu = _spent(server, b.server_cpu(url))
    target = "p99 ≤ %g× client-node's" % TARGET_LATENCY_P99
    rows = [Row("%s: klua.controller, 1 worker: write → reconcile" % label, klua.text(), target,
                cpu=cpu_cell("klua", klua.usage.cpu, klua.server_cpu),
                details=[how, "klua run latency.lua (scripts/benchlib/lua/latency.lua), listing as the peer does: "
                              "the reconcile reads the Pod from the cache and subtracts its stamp from klua's clock; "
                              "one run",
                         "latency: " + klua.spread() + " of %s sent; %s reconciles of unchanged (listed) Pods; "
                         "peak RSS %s" % (number(n), number(klua.initial), _mb(klua.hwm_kb))])]
    peer = _latency_client_node(b)
    name = "%s: client-node informer: write → update handler" % label
    if peer.missing:
        rows[0].unmeasured.append("client-node")
        rows[0].details.append("client-node not measured: " + peer.missing)
        rows.append(Row(name, "not measured", details=[peer.missing]))
        return rows
    argv = [peer.command[0], os.path.join(peers.CLIENTS, "latency.mjs"), peer.command[2], kubeconfig, str(n)]
    server = b.server_cpu(url)
    child, records = b.script("peer-client-node-latency", argv, "done", "client-node")
    node = LatencyRun(child, records, child.reap(5) or child.stop(), None)
    node.server_cpu = _spent(server, b.server_cpu(url))
    p99 = node.percentile(99)
    rows[0].ok = 0 < klua.percentile(99) <= TARGET_LATENCY_P99 * p99
    rows[0].details.append("against client-node's informer in the same run: p50 %.2f×, p99 %.2f× its figures" % (
        klua.percentile(50) / node.percentile(50) if node.percentile(50) else 0.0,
        klua.percentile(99) / p99 if p99 else 0.0))
    rows.append(Row(name, node.text(), "reference: klua's row's target",
                    cpu=cpu_cell("client-node", node.usage.cpu, node.server_cpu),
                    details=[peer.version + ", scripts/benchlib/peer-clients/latency.mjs: client-node has no work "
                             "queue, so its update handler, the first place its user sees a change, takes the stamp; "
                             "klua's row goes through the controller's queue and worker besides",
                             "latency: " + node.spread() + " of %s sent; peak RSS %s" % (number(n), _mb(node.hwm_kb))]))
    return rows


def _webhook_port(child, offset, timeout):
    """The port klua serves its webhooks on, from its log past offset (each run appends to the same
    log); None if it ended or did not say in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and child.poll() is None:
        with open(child.log_path, errors="replace") as f:
            f.seek(offset)
            m = WEBHOOK_PORT.search(f.read())
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    return None


def scenario_webhook(b):
    count, concurrency = b.opts.webhook_requests, b.opts.webhook_concurrency
    label = "%s: validating, %s requests on %d connections" % (title("webhook"), number(count), concurrency)
    target = "all allowed; CPU a request ≤ %g× the client's; p99 < %g ms" % (TARGET_WEBHOOK_CPU,
                                                                             TARGET_WEBHOOK_P99_SECONDS * 1000)
    certs = os.path.join(b.workdir, "webhook-certs")
    try:
        ca = webhookload.make_certs(certs)
    except (RuntimeError, OSError) as e:
        raise ScenarioError(str(e))
    # The script has no informer: the server is never asked anything.
    url, _ = b.server(b.opts.watch_pods, 0)
    argv = [b.klua, "--server", url, "--webhook-bind-address", "127.0.0.1:0", "--webhook-cert-dir", certs,
            "run", os.path.join(LUA_DIR, "webhook.lua")]
    best = None
    for _ in range(b.opts.repeat):
        log = os.path.join(b.children.log_dir, "webhook.log")
        offset = os.path.getsize(log) if os.path.exists(log) else 0
        child = b.children.spawn("webhook", argv, env=b.env, stdout_to_file=True)
        port = _webhook_port(child, offset, 30)
        if port is None:
            child.stop()
            raise ScenarioError("klua did not say which port it serves its webhooks on",
                                ["command: " + " ".join(argv)] + child.log_tail())
        cpu = h2proxy.cpu_seconds(child.pid)
        load = webhookload.Load(port, ca, "/validate-pods", count, concurrency, b.opts.timeout).run()
        load.klua_cpu = (h2proxy.cpu_seconds(child.pid) or cpu) - cpu
        load.hwm_kb = child.proc_status().get("VmHWM", 0)
        child.stop()
        if load.failures:
            raise ScenarioError("%d of %s requests failed" % (len(load.failures), number(count)),
                                load.failures[:5] + child.log_tail())
        if best is None or load.wall < best.wall:
            best = load
    lat = best.sorted_latencies()
    p50, p99 = webhookload.percentile(lat, 50), webhookload.percentile(lat, 99)
    rps = best.answered / best.wall if best.wall else 0.0
    per_request = best.klua_cpu / best.answered if best.answered else 0.0
    client = best.cpu / best.answered if best.answered else 0.0
    cpu_ratio = per_request / client if client else 0.0
    ok = best.answered == count and 0 < cpu_ratio <= TARGET_WEBHOOK_CPU and p99 < TARGET_WEBHOOK_P99_SECONDS
    ms = lambda x: "%s ms" % number(x * 1000, 2)  # noqa: E731
    return [Row(label, "%s req/s; p50 %s, p99 %s; klua %s CPU a request (%.2f× the client's)" % (
                    number(rps), ms(p50), ms(p99), _us(per_request), cpu_ratio),
                target, ok, cpu=cpu_cell("klua", best.klua_cpu, server=False) + " · load generator %.2f s" % best.cpu,
                details=[
                    "klua run webhook.lua (klua.webhook.validating: hostNetwork refused, every container must have "
                    "resource limits) with --webhook-bind-address 127.0.0.1:0; %s (Python's ssl), a P-256 "
                    "certificate; fastest of %d runs" % (best.tls, b.opts.repeat),
                    "each request an AdmissionReview v1 for a generated Pod's CREATE (%s bytes on average, %d "
                    "distinct), POSTed to /validate-pods?timeout=%ds; each answer checked: HTTP 200, the request's "
                    "uid, allowed" % (number(best.body_bytes), len(best.reviews), webhookload.API_SERVER_TIMEOUT),
                    "%d threads of the harness (http.client), one kept-alive connection each, its handshake and first "
                    "request not counted; latency from writing a request to reading its whole answer" % concurrency,
                    "latency: min %s, p90 %s, p99 %.1f× p50, p99.9 %s, max %s; %s answered in %.2f s" % (
                        ms(lat[0]), ms(webhookload.percentile(lat, 90)), p99 / p50 if p50 else 0.0,
                        ms(webhookload.percentile(lat, 99.9)), ms(lat[-1]), number(best.answered), best.wall),
                    "CPU meanwhile: klua %.2f s (/proc/PID/stat, %.0f%% of a core), the load generator %.2f s "
                    "(%.0f%%, %s a request; Python's threads take turns: when it nears 100%% it, not klua, sets "
                    "the rate); klua's peak RSS %s" % (
                        best.klua_cpu, 100 * best.klua_cpu / best.wall, best.cpu, 100 * best.cpu / best.wall,
                        _us(client), _mb(best.hwm_kb))])]


CBOR = ("--serialization", "cbor")


def scenario_cbor(b):
    """Reference rows: CBOR (KEP-4222) against JSON on the same data, as docs/architecture.md's CBOR
    design predicts: fewer bytes, a transcoding pass more per event, the same cache."""
    meta, n, pods = b.dataset.meta, b.opts.events, b.opts.pods
    json_event, cbor_event = meta["event_bytes"] / n, meta["cbor_event_bytes"] / n
    json_pod = b.dataset.average_pod_bytes(pods)
    cbor_pod = b.dataset.cbor_item_span(0, pods)[1] / pods
    rows = [Row("cbor: bytes on the wire per watch event, and per listed Pod",
                "%s B (%.2f× JSON's %s B); %s B (%.2f× JSON's %s B)" % (
                    number(cbor_event), cbor_event / json_event, number(json_event),
                    number(cbor_pod), cbor_pod / json_pod, number(json_pod)),
                details=["the same %s events and %s Pods, as apimachinery's encoder writes them "
                         "(scripts/sandbox/cbor.py): strings as byte strings, the shortest integers and floats, "
                         "each event self-described (d9 d9 f7)" % (number(n), number(pods)),
                         "uncompressed: neither server gzips"])]
    j, c = b.events_run("read", n), b.events_run("read", n, CBOR)
    rows.append(Row("cbor: CPU per event, handler-3-fields",
                    "%s (%.2f× JSON's %s)" % (_us(c.cpu_per_event), c.cpu_per_event / j.cpu_per_event
                                              if j.cpu_per_event else 0.0, _us(j.cpu_per_event)),
                    rate=c.rate, cpu=cpu_cell("klua", c.usage.cpu, c.server_cpu),
                    details=["CBOR: " + "; ".join(c.details()), "JSON: " + "; ".join(j.details()),
                             "each CBOR event is transcoded to JSON (wire/cbor.c), then parsed as JSON is"]))
    idle = b.sync_run(0)
    full, cb = b.sync_run(pods), b.sync_run(pods, flags=CBOR)
    per_json = (full.rss_kb - idle.rss_kb) * 1024 / pods
    per_cbor = (cb.rss_kb - idle.rss_kb) * 1024 / pods
    rows.append(Row("cbor: memory per cached Pod (%s Pods)" % number(pods),
                    "%s B (%.2f× JSON's %s B)" % (number(per_cbor), per_cbor / per_json if per_json else 0.0,
                                                  number(per_json)),
                    cpu=cpu_cell("klua", cb.usage.cpu, cb.server_cpu),
                    details=["the cache holds the JSON text of each object either way; %s of %s Pods cached "
                             "from CBOR" % (number(cb.cached), number(pods)),
                             "memory: (VmRSS after sync - VmRSS of an idle klua) / Pods, after a full Lua GC"]))
    peak = cb.hwm_kb / full.hwm_kb if full.hwm_kb else 0.0
    rows.append(Row("cbor: peak RSS at sync (%s Pods, one LIST)" % number(pods),
                    "%s (%.2f× JSON's %s)" % (_mb(cb.hwm_kb), peak, _mb(full.hwm_kb)),
                    "≤ %.1f× JSON's" % TARGET_CBOR_PEAK, cb.cached == pods and 0 < peak <= TARGET_CBOR_PEAK,
                    details=["each item of a CBOR LIST is transcoded and decoded as it arrives, as a JSON "
                             "LIST's is split (wire/list_stream.h); the body is never held whole",
                             "peak RSS is VmHWM at klua.on_synced, of the fastest of the runs"]))
    return rows


SCENARIOS = {"cbor": scenario_cbor, "server": scenario_server, "ref": scenario_ref, "peers": scenario_peers,
             "limit": scenario_limit, "latency": scenario_latency,
             "watch-names": scenario_watch_names, "handler-3-fields": scenario_handler("handler-3-fields"),
             "handler-copy": scenario_handler("handler-copy"), "handler-edit": scenario_handler_edit,
             "controller-enqueue": scenario_handler("controller-enqueue"), "initial-sync": scenario_initial_sync,
             "large-sync": scenario_large_sync,
             "memory-per-pod": scenario_memory_per_pod, "cache-less": scenario_cache_less,
             "scale": scenario_scale, "many-informers": scenario_many_informers,
             "slow-handler": scenario_slow_handler, "fresh-first": scenario_fresh_first,
             "watchlist-sync": scenario_watchlist_sync, "webhook": scenario_webhook}


# The events.lua modes each event row measures: (a)'s read with every row that is judged against it.
EVENT_MODES = {"handler-3-fields": ("read",), "handler-copy": ("read", "copy"),
               "handler-edit": ("read", "write-edit", "write-copy"), "controller-enqueue": ("enqueue",)}
LIMITED = {"limit", "watch-names", "handler-3-fields", "handler-copy", "controller-enqueue"}


def _event_plan(b, ids):
    """What Bench.interleave runs for the scenarios ids: the peers', the limit's and klua's event
    rates, each as (key, make_once) with the key its scenario asks Bench.measured for."""
    n, plan = b.opts.events, []
    if "peers" in ids:
        plan.extend(b.peer_measurement(peer, n) for peer in b.found_peers() if not peer.missing)
    if LIMITED & set(ids):
        plan.append(b.limit_measurement())
    if "watch-names" in ids:
        plan.append(_watch_names_measurement(b, n))
    modes = []
    for sid in ORDER:
        for mode in EVENT_MODES.get(sid, ()) if sid in ids else ():
            if mode not in modes:
                modes.append(mode)
    plan.extend(b.events_measurement(mode, n) for mode in modes)
    return plan


def run(b, ids):
    """Runs the scenarios in ORDER whose names are in ids; returns their rows. The event rates that
    ratios compare are measured first, in rounds (Bench.interleave)."""
    rows = []
    plan = _event_plan(b, ids)
    if len(plan) > 1:
        b.log("event rates: %d measurements in turn, --repeat %d rounds of them ..." % (len(plan), b.opts.repeat))
        started = time.monotonic()
        b.interleave(plan)
        b.log("  %.1f s" % (time.monotonic() - started))
    for sid in ORDER:
        if sid not in ids:
            continue
        b.log("scenario %s ..." % title(sid))
        started = time.monotonic()
        try:
            rows.extend(SCENARIOS[sid](b))
        except ScenarioError as e:
            rows.append(Row.failed(title(sid), str(e), e.details))
        except (KeyError, ValueError) as e:
            rows.append(Row.failed(title(sid), "unexpected output from a benchmark process (%s: %s)"
                                   % (type(e).__name__, e)))
        b.log("  %.1f s" % (time.monotonic() - started))
    for row in rows:
        if row.rate is not None and b.peer_rates:
            row.vs = ", ".join("%s %s" % (ratio(row.rate, rate), name) for name, rate in b.peer_rates.items())
    return rows
