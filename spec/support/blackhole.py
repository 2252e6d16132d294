#!/usr/bin/env python3
"""A TCP relay that can go silent without closing, for specs.

    blackhole.py UPSTREAM_PORT [--owner-pid PID]

Listens on a free port of 127.0.0.1 and relays each connection to
127.0.0.1:UPSTREAM_PORT byte for byte (TLS passes through untouched). On
SIGUSR1 every connection open at that moment stops being relayed in both
directions, its sockets left open and unread: the client sees a connection
that is up and says nothing, as behind a proxy or load balancer that lost
it. Connections accepted later are relayed again.

Prints "listening PORT" once ready, "open N" for each connection accepted,
"blackholed N" for each one silenced and "blackhole done" after each
signal's, flushed line by line.
"""
import os
import selectors
import signal
import socket
import sys


def say(line):
    print(line, flush=True)


class Relay:
    def __init__(self, upstream_port, owner_pid):
        self.upstream_port = upstream_port
        self.owner_pid = owner_pid
        self.sel = selectors.DefaultSelector()
        self.pairs = {}  # connection number -> (client, upstream)
        self.silenced = []  # pairs kept open and unread
        self.count = 0
        self.blackhole_pending = False
        self.listener = socket.create_server(('127.0.0.1', 0))
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        # The signal's handler only sets a flag; this wakes the select.
        self.wake, wake_w = socket.socketpair()
        self.wake.setblocking(False)
        wake_w.setblocking(False)
        self.wake_w = wake_w
        signal.set_wakeup_fd(wake_w.fileno())
        self.sel.register(self.wake, selectors.EVENT_READ, 'wake')

    def accept(self):
        client, _ = self.listener.accept()
        upstream = socket.create_connection(('127.0.0.1', self.upstream_port))
        client.setblocking(False)
        upstream.setblocking(False)
        self.count += 1
        n = self.count
        self.pairs[n] = (client, upstream)
        self.sel.register(client, selectors.EVENT_READ, (n, upstream))
        self.sel.register(upstream, selectors.EVENT_READ, (n, client))
        say('open %d' % n)

    def close(self, n):
        for s in self.pairs.pop(n, ()):
            self.sel.unregister(s)
            s.close()

    def forward(self, n, src, dst):
        try:
            data = src.recv(65536)
        except OSError:
            data = b''
        if not data:
            self.close(n)
            return
        dst.setblocking(True)
        try:
            dst.sendall(data)
        except OSError:
            self.close(n)
            return
        dst.setblocking(False)

    def blackhole(self):
        for n, pair in sorted(self.pairs.items()):
            for s in pair:
                self.sel.unregister(s)
            self.silenced.append(pair)
            say('blackholed %d' % n)
        self.pairs.clear()
        say('blackhole done')

    def run(self):
        say('listening %d' % self.listener.getsockname()[1])
        while True:
            for key, _ in self.sel.select(timeout=1):
                if key.data == 'wake':
                    self.wake.recv(64)
                elif key.data is None:
                    self.accept()
                elif key.data[0] in self.pairs:
                    self.forward(key.data[0], key.fileobj, key.data[1])
            if self.blackhole_pending:
                self.blackhole_pending = False
                self.blackhole()
            if self.owner_pid and not os.path.exists('/proc/%d' % self.owner_pid):
                return


def main():
    args = sys.argv[1:]
    owner = 0
    if '--owner-pid' in args:
        i = args.index('--owner-pid')
        owner = int(args[i + 1])
        del args[i:i + 2]
    relay = Relay(int(args[0]), owner)

    def on_usr1(signum, frame):
        relay.blackhole_pending = True

    signal.signal(signal.SIGUSR1, on_usr1)
    relay.run()


if __name__ == '__main__':
    main()
