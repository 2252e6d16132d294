#!/usr/bin/env python3
"""Makes many changes to ConfigMaps quickly over one keep-alive connection,
as direct API calls: burst.py URL NAMESPACE PREFIX CREATES UPDATES DELETES [MARK [PAD]].
Creates PREFIX-0..CREATES-1 (with PAD, data.pad: that many bytes of text alike
across them, as real objects' are), updates the first UPDATES of them
(data.updated set to MARK, default "yes": a new MARK changes them again),
deletes the last DELETES. Prints the number of requests."""
import http.client
import json
import sys
import urllib.parse

url, ns, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
creates, updates, deletes = (int(x) for x in sys.argv[4:7])
mark = sys.argv[7] if len(sys.argv) > 7 else "yes"
pad = int(sys.argv[8]) if len(sys.argv) > 8 else 0
u = urllib.parse.urlparse(url)
conn = http.client.HTTPConnection(u.hostname, u.port)
base = f"/api/v1/namespaces/{ns}/configmaps"
n = 0


def call(method, path, body=None, ctype="application/json"):
    global n
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": ctype})
    r = conn.getresponse()
    data = r.read()
    n += 1
    if r.status >= 300:
        sys.exit(f"{method} {path}: {r.status} {data[:200]!r}")


for i in range(creates):
    data = {"i": str(i)}
    if pad:
        data["pad"] = ("%s line %d of setting %d; " * (pad // 20 + 1) % tuple(
            x for j in range(pad // 20 + 1) for x in (prefix, j, i % 7)))[:pad]
    call("POST", base, {"metadata": {"name": f"{prefix}-{i}", "labels": {"burst": prefix}}, "data": data})
for i in range(updates):
    call("PATCH", f"{base}/{prefix}-{i}", {"data": {"updated": mark}},
         "application/merge-patch+json")
for i in range(creates - deletes, creates):
    call("DELETE", f"{base}/{prefix}-{i}")
print(n)
