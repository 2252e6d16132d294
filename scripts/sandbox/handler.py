"""The HTTP side: request parsing, authentication, per-request faults and responses."""
import gzip
import hmac
import ipaddress
import json
import socket
import sys
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler

from . import cbor, control, discovery, fields, partial, protobuf, rbac, routes, tables
from .api import PROTOBUF, Request
from .status import ApiError, bad_request, internal_error, path_not_found, rbac_forbidden, \
    unauthorized
from .store import dumps
from .watch import WatchStream


# kube-apiserver gzips an answer larger than this when the client accepts gzip
# (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/writers.go,
# defaultGzipThresholdBytes, at gzip level 1, defaultGzipContentEncodingLevel); a watch's
# stream is never compressed.
GZIP_THRESHOLD = 128 * 1024


class Handler(BaseHTTPRequestHandler):
    """One connection; HTTP/1.1 keep-alive, so one instance may serve many requests."""

    protocol_version = "HTTP/1.1"
    server_version = "klua-sandbox"
    sys_version = ""

    @property
    def ctx(self):
        return self.server.ctx

    def do_GET(self):
        self.dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def log_request(self, code="-", size="-"):
        """Requests are logged once, by dispatch."""

    def log_message(self, format, *args):
        """The base class's own messages (malformed requests) go to the -v log."""
        self.ctx.log(1, format % args)

    def dispatch(self):
        started = time.monotonic()
        self.code = 0
        # Whether this request's answers, its errors included, are CBOR (cbor.py).
        self.cbor = False
        # Whether the answer's body is cut to its first half (the list_cut fault).
        self.cut = False
        self.after_response = None
        # The request's warnings, sent as a Warning header with whatever answer it gets
        # (apiserver's warning recorder writes them when the status is written).
        self.warnings = []
        url = urllib.parse.urlsplit(self.path)
        try:
            body = self.read_body()
            if url.path.startswith("/sandbox/"):
                if not ipaddress.ip_address(self.client_address[0]).is_loopback:
                    raise path_not_found()
                self.send_json(*control.handle(self, self.command, url.path, body))
            else:
                self.serve_api(url, body)
        except ApiError as err:
            self.send_json(err.code, dumps(err.status()), err.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:
            # A bug answers 500 with its message and is logged; the server keeps serving.
            self.ctx.log(0, traceback.format_exc())
            if not self.code:
                err = internal_error(str(sys.exc_info()[1]))
                self.send_json(err.code, dumps(err.status()))
            self.close_connection = True
        self.ctx.log(1, "%s %s -> %s (%.1f ms)" % (self.command, self.path, self.code or "-",
                                                   (time.monotonic() - started) * 1000))
        if self.after_response:
            self.after_response()

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = self.headers.get("Content-Length")
        try:
            return self.rfile.read(int(length)) if length else b""
        except ValueError:
            raise bad_request("invalid Content-Length") from None

    # -- API requests --------------------------------------------------------------------

    def serve_api(self, url, body):
        ctx = self.ctx
        user = rbac.impersonate(ctx.store, self.authenticate(), self.headers)
        params = {k: v[0] for k, v in
                  urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        try:
            with ctx.store.lock:
                route = routes.resolve(self.command, url.path, params, ctx.store.registry)
        except ApiError:
            ctx.stats.request("other")
            raise
        ctx.stats.request(route.verb, route.rtype.key if route.rtype else None)
        rbac.authorize(ctx.store, user, route)
        self.apply_faults(route, user)
        # After authorization, as apiextensions-apiserver's handler adds it.
        deprecation = route.rtype.deprecations.get(route.version) if route.rtype else None
        if deprecation:
            self.warnings.append(deprecation)
        if route.kind != "resource":
            self.serve_discovery(route)
            return
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        req = Request(route.verb, route.rtype, route.version, route.namespace, route.name,
                      route.subresource, params, body, ctype, user,
                      self.headers.get("User-Agent") or "")
        req.warnings = self.warnings
        accept = self.headers.get("Accept")
        self.cbor = (not ctx.faults.settings.get("cbor_disabled")
                     and cbor.wanted(accept, route.verb == "watch") and not req.subresource
                     and not tables.wanted_version(accept) and not partial.wanted(accept))
        if route.verb == "watch":
            WatchStream(ctx, self, req).serve()
            return
        if req.subresource == "token":
            if ctype == PROTOBUF:
                request = protobuf.decode(body)
            else:
                try:
                    request = json.loads(body or b"{}")
                except ValueError as err:
                    raise bad_request("the body is not a TokenRequest: %s" % err) from None
            code, text = ctx.tokens.issue(ctx.store, req, request)
            self.send_json(code, text)
            return
        handlers = {"get": ctx.api.get, "list": ctx.api.list, "create": ctx.api.create,
                    "update": ctx.api.update, "patch": ctx.api.patch, "delete": ctx.api.delete,
                    "deletecollection": ctx.api.delete_collection}
        code, text = handlers[req.verb](req)
        accept = self.headers.get("Accept")
        table, form = tables.wanted_version(accept), partial.wanted(accept)
        if code == 200 and req.verb in ("get", "list") and not req.subresource:
            if table:
                text = tables.convert(ctx.store, req, table, text)
            elif form:
                text = partial.convert(req.rtype, form, text)
        if code == 200 and req.verb == "list" and ctx.faults.take_list_cut():
            self.cut = True
            ctx.stats.fault("list_cut")
        self.send_json(code, text)

    def authenticate(self):
        """The user name, or 401. Tokens are compared in constant time and never logged.

        A service-account token (rbac.Tokens) authenticates whatever --auth says, as its
        ServiceAccount, whom RBAC then binds."""
        ctx = self.ctx
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        sa_user = ctx.tokens.user(ctx.store, ctx.store.registry, token) if token else None
        if sa_user:
            return sa_user
        if ctx.auth == "token":
            if token and hmac.compare_digest(token.encode(), ctx.token.encode()):
                return "sandbox-admin"
            raise unauthorized()
        if ctx.auth == "cert":
            cert = self.connection.getpeercert() if hasattr(self.connection, "getpeercert") \
                else None
            for rdn in (cert or {}).get("subject", ()):
                for key, value in rdn:
                    if key == "commonName":
                        return value
            raise unauthorized()
        return "sandbox-admin"

    def apply_faults(self, route, user):
        ctx = self.ctx
        delay = ctx.faults.settings.get("delay")
        if delay:
            ctx.stats.fault("delay")
            time.sleep(delay)
        failure = ctx.faults.take_failure(route.verb, self.path)
        if failure:
            ctx.stats.fault("fail_%d" % failure.code)
            raise failure
        if route.rtype and ctx.faults.forbids(route.rtype, route.verb):
            ctx.stats.fault("forbidden")
            raise rbac_forbidden(route.rtype, route.name, user, route.verb, route.namespace,
                                 route.subresource)

    def serve_discovery(self, route):
        registry = self.ctx.store.registry
        if route.kind == "health":
            self.send_text(200, "ok", "text/plain; charset=utf-8")
            return
        with self.ctx.store.lock:
            doc = self.discovery_document(route, registry)
        if doc is None:
            raise path_not_found()
        self.send_json(200, dumps(doc))

    def discovery_document(self, route, registry):
        kind = route.kind
        if kind == "root":
            return {"paths": sorted(["/api", "/api/v1", "/apis", "/healthz", "/livez",
                                     "/openapi/v3", "/readyz", "/version"] +
                                    ["/apis/" + g for g in registry.groups()])}
        if kind == "version":
            return discovery.VERSION_INFO
        if kind == "api":
            return discovery.api_versions("%s:%d" % self.server.server_address[:2])
        if kind == "apis":
            return discovery.api_group_list(registry)
        if kind == "group":
            return discovery.api_group(registry, route.group)
        if kind == "resources":
            return discovery.resource_list(registry, route.group, route.version)
        if kind == "openapi_index":
            return discovery.openapi_index(registry)
        if kind == "openapi":
            return discovery.openapi_document(registry, route.group, route.version)
        return None

    # -- responses -----------------------------------------------------------------------

    def send_json(self, code, text, headers=None):
        """A JSON answer, or its CBOR when the request prefers it (cbor.py)."""
        if self.cbor:
            self.ctx.stats.served(cbor.CBOR)
            self.send_bytes(code, cbor.from_json(text), cbor.CBOR, headers)
        else:
            self.send_text(code, text, "application/json", headers)

    def send_text(self, code, text, ctype, headers=None):
        self.send_bytes(code, text.encode("utf-8"), ctype, headers)

    def send_bytes(self, code, data, ctype, headers=None):
        self.code = code
        if self.cut:
            data = data[:len(data) // 2]
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in dict(headers or {}, **fields.warning_header(self.warnings)).items():
            self.send_header(key, value)
        if len(data) > GZIP_THRESHOLD and self.accepts_gzip():
            data = gzip.compress(data, compresslevel=1)
            self.send_header("Content-Encoding", "gzip")
            self.ctx.stats.encoded("gzip")
        self.send_header("Content-Length", str(len(data)))
        # Headers and body leave in one write: two small writes meet the client's delayed
        # ACK and cost 40 ms per request.
        self._headers_buffer.append(b"\r\n" + data)
        self.flush_headers()

    def accepts_gzip(self):
        """Whether Accept-Encoding names gzip, as responsewriters' negotiateContentEncoding
        reads it (a coding of the comma-separated list, parameters aside)."""
        codings = (self.headers.get("Accept-Encoding") or "").split(",")
        return any(c.split(";")[0].strip().lower() == "gzip" for c in codings)

    def start_chunked(self):
        self.code = 200
        self.send_response(200)
        if self.cbor:
            self.ctx.stats.served(cbor.CBOR_SEQ)
        self.send_header("Content-Type", cbor.CBOR_SEQ if self.cbor else "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in fields.warning_header(self.warnings).items():
            self.send_header(key, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunked(self):
        self.wfile.write(b"0\r\n\r\n")

    def drop_connection(self):
        """Closes the connection abruptly, with no end to the chunked body."""
        self.close_connection = True
        try:
            socket.socket.shutdown(self.connection, socket.SHUT_RDWR)
        except OSError:
            pass
