#!/usr/bin/python3
"""An HTTPS admission and conversion webhook for spec/sandbox/webhooks_spec.lua.

Each path behaves one way:
  /allow         allows
  /deny          denies as controller-runtime's admission.Denied does (403 Forbidden)
  /deny-bare     denies with no status
  /warn          allows with the warning "careful"
  /mutate        allows with a JSON patch that sets the label mutated=true
  /error         answers 500 "boom"
  /hang          answers nothing until the caller hangs up
  /touch         allows; first, when the object has no annotation "touched", annotates it
                 so through the API server whose URL the query parameter "server" gives
  /convert       ConversionReview: v1 spec.colour <-> v2 spec.color (example.com)
  /convert-fail  ConversionReview answered with a Failure result
  /convert-rename  converts as /convert, but renames every object "renamed"
Every request is appended to --log as one JSON line {"path", "query", "body"}.
It prints "listening on https://127.0.0.1:PORT" once it listens.
"""
import argparse
import base64
import json
import os
import select
import signal
import ssl
import sys
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HANG_LIMIT = 60


def admission_response(review, **fields):
    response = dict(uid=review["request"]["uid"], allowed=True)
    response.update(fields)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def mutate(review):
    labels = (review["request"]["object"].get("metadata") or {}).get("labels")
    if labels is None:
        ops = [{"op": "add", "path": "/metadata/labels", "value": {"mutated": "true"}}]
    else:
        ops = [{"op": "add", "path": "/metadata/labels/mutated", "value": "true"}]
    patch = base64.b64encode(json.dumps(ops).encode()).decode()
    return admission_response(review, patchType="JSONPatch", patch=patch)


def touch(review, query):
    """Changes the object under review through the API server, while it waits for us."""
    request = review["request"]
    annotations = (request["object"].get("metadata") or {}).get("annotations") or {}
    if "touched" not in annotations:
        server = urllib.parse.parse_qs(query)["server"][0]
        url = "%s/api/v1/namespaces/%s/configmaps/%s" % (server, request["namespace"],
                                                         request["name"])
        patch = json.dumps({"metadata": {"annotations": {"touched": "yes"}}}).encode()
        call = urllib.request.Request(url, data=patch, method="PATCH", headers={
            "Content-Type": "application/merge-patch+json"})
        urllib.request.urlopen(call, timeout=10).read()
    return admission_response(review)


def convert_one(obj, desired):
    obj = json.loads(json.dumps(obj))
    spec = obj.setdefault("spec", {})
    if desired.endswith("/v2") and "colour" in spec:
        spec["color"] = spec.pop("colour")
    if desired.endswith("/v1") and "color" in spec:
        spec["colour"] = spec.pop("color")
    obj["apiVersion"] = desired
    return obj


def conversion(review, ok, rename=False):
    request = review["request"]
    response = {"uid": request["uid"]}
    if ok:
        response["convertedObjects"] = [convert_one(o, request["desiredAPIVersion"])
                                        for o in request["objects"]]
        for obj in response["convertedObjects"] if rename else []:
            obj["metadata"]["name"] = "renamed"
        response["result"] = {"status": "Success"}
    else:
        response["result"] = {"status": "Failure", "message": "cannot convert"}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "response": response}


ANSWERS = {
    "/allow": lambda r: admission_response(r),
    "/deny": lambda r: admission_response(r, allowed=False, status={
        "code": 403, "reason": "Forbidden", "message": "widgets need an owner"}),
    "/deny-bare": lambda r: admission_response(r, allowed=False),
    "/warn": lambda r: admission_response(r, warnings=["careful"]),
    "/mutate": mutate,
    "/convert": lambda r: conversion(r, True),
    "/convert-fail": lambda r: conversion(r, False),
    "/convert-rename": lambda r: conversion(r, True, rename=True),
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        review = json.loads(body or b"null")
        with self.server.log_lock, open(self.server.log, "a", encoding="utf-8") as log:
            log.write(json.dumps({"path": url.path, "query": url.query, "body": review}) + "\n")
        if url.path == "/hang":
            # Readable means the caller closed the connection.
            select.select([self.connection], [], [], HANG_LIMIT)
            self.close_connection = True
            return
        if url.path == "/error":
            self.answer(500, b"boom", "text/plain")
            return
        if url.path == "/touch":
            self.answer(200, json.dumps(touch(review, url.query)).encode(), "application/json")
            return
        answer = ANSWERS.get(url.path)
        if answer is None:
            self.answer(404, b"no such webhook", "text/plain")
            return
        self.answer(200, json.dumps(answer(review)).encode(), "application/json")

    def answer(self, code, data, ctype):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Server(ThreadingHTTPServer):
    daemon_threads = True


def watch_owner(pid):
    def wait():
        try:
            fd = os.pidfd_open(pid)
            select.select([fd], [], [])
        except ProcessLookupError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=wait, daemon=True).start()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--owner-pid", type=int)
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.owner_pid:
        watch_owner(args.owner_pid)
    server = Server(("127.0.0.1", 0), Handler)
    server.log, server.log_lock = args.log, threading.Lock()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print("listening on https://127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
