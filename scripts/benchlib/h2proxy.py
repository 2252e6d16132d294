"""An HTTP/2 front for bench-server: nghttpx (Debian's nghttp2-proxy) with a self-signed
certificate, as spec/process/http2_spec.lua puts one in front of the sandbox. Over TLS klua speaks
HTTP/2, and libcurl multiplexes every list and watch of a process on one connection; nghttpx turns
each stream into an HTTP/1.1 request to the server.
"""
import os
import shutil
import socket
import subprocess
import time

PACKAGE = "nghttp2-proxy"


def find(command=None):
    """The nghttpx to run, or None."""
    return shutil.which(command or "nghttpx")


def missing_reason(command=None):
    return "%s is not installed: sh scripts/build/bootstrap bench installs %s (Debian's nghttpx)" % (
        command or "nghttpx", PACKAGE)


def version(command):
    """nghttpx's version line, e.g. "nghttpx nghttp2/1.52.0"."""
    try:
        out = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return command
    return out.strip().splitlines()[0] if out.strip() else command


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kubeconfig(path, url, ca):
    with open(path, "w") as f:
        f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: bench\n  cluster:\n    server: %s\n"
                "    certificate-authority: %s\nusers:\n- name: bench\n  user: {}\ncontexts:\n- name: bench\n"
                "  context:\n    cluster: bench\n    user: bench\ncurrent-context: bench\n" % (url, ca))


def start(nghttpx, backend_url, workdir, children, timeout=10):
    """Starts nghttpx in front of backend_url (http://HOST:PORT); (url, kubeconfig, port, child).
    Raises RuntimeError with nghttpx's log when it does not come up."""
    host, backend_port = backend_url[len("http://"):].split(":")
    os.makedirs(workdir, exist_ok=True)
    key, cert = os.path.join(workdir, "key.pem"), os.path.join(workdir, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    port = _free_port()
    # One worker, as in http2_spec; long timeouts, since a held watch is quiet for as long as a run.
    # --conf=/dev/null: Debian's /etc/nghttpx/nghttpx.conf adds a frontend of its own on
    # 127.0.0.1:3000, so that a second nghttpx on the machine (another run) failed to start.
    child = children.spawn("nghttpx", [
        nghttpx, "--conf=/dev/null", "-f%s,%d" % (host, port), "-b%s,%s" % (host, backend_port), key, cert, "--workers=1",
        "--no-ocsp", "--frontend-read-timeout=1h", "--backend-read-timeout=1h",
        "--accesslog-file=" + os.path.join(workdir, "access.log"),
        "--errorlog-file=" + os.path.join(workdir, "error.log")], stdout_to_file=True)
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=1).close()
            break
        except OSError:
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("nghttpx did not start: " + _tail(os.path.join(workdir, "error.log")))
            time.sleep(0.05)
    url = "https://%s:%d" % (host, port)
    kubeconfig = os.path.join(workdir, "kubeconfig")
    _kubeconfig(kubeconfig, url, cert)
    return url, kubeconfig, port, child


def _tail(path):
    try:
        with open(path, errors="replace") as f:
            return " | ".join(f.read().splitlines()[-5:])
    except OSError:
        return "(no log)"


def _children(pid):
    out = []
    try:
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def cpu_seconds(pid):
    """User and system CPU time process pid and its children (nghttpx's worker process is one)
    have used so far, from /proc/PID/stat; None when pid is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # utime and stime are fields 14 and 15 of proc(5)'s stat, the 12th and 13th after the command.
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_seconds(c) or 0.0 for c in _children(pid))


def connections(pid, port):
    """Established TCP connections from process pid to port, from /proc/PID/fd and the kernel's
    socket tables (as http2_spec counts them); None once the process is gone."""
    inodes = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[len("socket:["):-1])
    except OSError:
        return None
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    # local, remote (hex address:port), state (01 is ESTABLISHED), ..., inode
                    if int(parts[2].rsplit(":", 1)[1], 16) == port and parts[3] == "01" and parts[9] in inodes:
                        n += 1
        except OSError:
            continue
    return n
