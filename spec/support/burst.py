#!/usr/bin/env python3
"""Makes many changes to ConfigMaps quickly over one keep-alive connection,
as direct API calls: burst.py URL NAMESPACE PREFIX CREATES UPDATES DELETES [MARK].
Creates PREFIX-0..CREATES-1, updates the first UPDATES of them (data.updated
set to MARK, default "yes": a new MARK changes them again), deletes the last
DELETES. Prints the number of requests."""
import http.client
import json
import sys
import urllib.parse

url, ns, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
creates, updates, deletes = (int(x) for x in sys.argv[4:7])
mark = sys.argv[7] if len(sys.argv) > 7 else "yes"
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
    call("POST", base, {"metadata": {"name": f"{prefix}-{i}", "labels": {"burst": prefix}},
                        "data": {"i": str(i)}})
for i in range(updates):
    call("PATCH", f"{base}/{prefix}-{i}", {"data": {"updated": mark}},
         "application/merge-patch+json")
for i in range(creates - deletes, creates):
    call("DELETE", f"{base}/{prefix}-{i}")
print(n)
