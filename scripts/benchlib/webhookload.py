"""The webhook scenario's parts: a CA and a serving pair, AdmissionReview v1 bodies as kube-apiserver
sends them, and the load: concurrent HTTPS POSTs over kept-alive connections, each timed.

The certificates are made as spec/process/webhook_spec.lua makes them (openssl, P-256, a pair for
127.0.0.1 signed by a CA of its own). Each request is the AdmissionReview v1 apiserver's
request/admissionreview.go builds for a Pod's CREATE, the Pod one of the generator's, posted to the
path with `?timeout=10s` appended as kube-apiserver appends the webhook's timeoutSeconds.
"""
import http.client
import json
import os
import ssl
import subprocess
import threading
import time

from . import pods

# admissionregistration.k8s.io/v1's default timeoutSeconds (types.go: "Default to 10 seconds").
API_SERVER_TIMEOUT = 10


def make_certs(directory):
    """Writes ca.crt and the pair tls.crt, tls.key for 127.0.0.1 into directory; the CA's path."""
    os.makedirs(directory, exist_ok=True)
    script = (
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=bench-ca "
        "-keyout ca.key -out ca.crt && "
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=localhost "
        "-keyout tls.key -out leaf.csr && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > ext && "
        "openssl x509 -req -in leaf.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile ext -out tls.crt")
    done = subprocess.run(["sh", "-c", script], cwd=directory, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError("openssl could not make the webhook's certificates: " + done.stderr.strip()[-300:])
    return os.path.join(directory, "ca.crt")


def review(index):
    """(body, uid) of request index: an AdmissionReview v1 for the CREATE of generated Pod index."""
    pod = pods.pod(index)
    md = pod["metadata"]
    uid = "00000000-0000-4000-8000-%012d" % index
    request = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "name": md["name"], "namespace": md["namespace"], "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                     "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                                "system:authenticated"]},
        "object": pod, "oldObject": None, "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    body = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}
    return json.dumps(body, separators=(",", ":")).encode(), uid.encode()


class Load:
    """count POSTs of distinct reviews over `concurrency` connections, one thread each. Each
    connection first sends one request that is not counted (its TLS handshake: kube-apiserver keeps
    its connections to a webhook alive), then the threads start together and each sends its share
    back to back, timing each from before the request is written to the end of the answer."""

    BODIES = 512

    def __init__(self, port, ca, path, count, concurrency, timeout):
        self.port, self.path, self.count, self.concurrency = port, path + "?timeout=%ds" % API_SERVER_TIMEOUT, \
            count, concurrency
        self.context = ssl.create_default_context(cafile=ca)
        self.timeout = timeout
        self.reviews = [review(i) for i in range(min(count, self.BODIES))]
        self.latencies = [[] for _ in range(concurrency)]
        self.failures = []
        self.tls = None
        self.wall = self.cpu = 0.0
        self.body_bytes = sum(len(b) for b, _ in self.reviews) / len(self.reviews)

    def _post(self, conn, n):
        body, uid = self.reviews[n % len(self.reviews)]
        conn.request("POST", self.path, body, {"Content-Type": "application/json", "Accept": "application/json"})
        resp = conn.getresponse()
        answer = resp.read()
        # The answer must be this request's, and allowed (every generated Pod passes the policy).
        if resp.status != 200 or uid not in answer or b'"allowed":true' not in answer:
            self.failures.append("HTTP %d: %s" % (resp.status, answer[:200].decode(errors="replace")))

    def _worker(self, k, start):
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=self.timeout)
        try:
            self._post(conn, k)
            self.tls = self.tls or conn.sock.version()
            start.wait()
            out = self.latencies[k]
            for n in range(k, self.count, self.concurrency):
                t0 = time.perf_counter()
                self._post(conn, n)
                out.append(time.perf_counter() - t0)
        except (OSError, http.client.HTTPException, threading.BrokenBarrierError) as e:
            self.failures.append("connection %d: %s: %s" % (k, type(e).__name__, e))
            start.abort()
        finally:
            conn.close()

    def run(self):
        start = threading.Barrier(self.concurrency + 1)
        threads = [threading.Thread(target=self._worker, args=(k, start), daemon=True)
                   for k in range(self.concurrency)]
        for t in threads:
            t.start()
        try:
            start.wait(self.timeout)
        except threading.BrokenBarrierError:
            pass
        cpu, t0 = time.process_time(), time.perf_counter()
        for t in threads:
            t.join(self.timeout)
        self.wall = time.perf_counter() - t0
        self.cpu = time.process_time() - cpu
        return self

    def sorted_latencies(self):
        return sorted(x for per in self.latencies for x in per)

    @property
    def answered(self):
        return sum(len(per) for per in self.latencies)


def percentile(sorted_values, p):
    """The nearest-rank p-th percentile (0 < p <= 100) of sorted_values."""
    if not sorted_values:
        return 0.0
    rank = max(1, -(-len(sorted_values) * p // 100))
    return sorted_values[int(rank) - 1]
