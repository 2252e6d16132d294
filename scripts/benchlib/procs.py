"""Child processes of scripts/bench and scripts/soak: started, watched, measured and always ended.

Every child is registered in a Children set; kill_all() ends whatever is still running, and
on_exit() makes it run on exit and on SIGINT, SIGTERM and SIGHUP, so an error or Ctrl-C in the
harness never leaves a server or a klua behind. Resource usage comes from wait4(2) on the child
itself, so it covers exactly that process.
"""
import atexit
import os
import re
import select
import signal
import subprocess
import sys
import time

READ_SIZE = 1 << 20


class Usage:
    """What wait4 reported for one child."""

    def __init__(self, status, rusage):
        self.status = status
        self.user = rusage.ru_utime if rusage else 0.0
        self.system = rusage.ru_stime if rusage else 0.0
        self.maxrss_kb = rusage.ru_maxrss if rusage else 0

    @property
    def cpu(self):
        return self.user + self.system

    @property
    def exit_code(self):
        if os.WIFEXITED(self.status):
            return os.WEXITSTATUS(self.status)
        return -os.WTERMSIG(self.status) if os.WIFSIGNALED(self.status) else None


class Child:
    """One started process: its Popen, when it started, where its stderr goes and, when not to a
    pipe, its stdout."""

    def __init__(self, popen, started, log_path, out_path=None):
        self.popen = popen
        self.started = started
        self.log_path = log_path
        self.out_path = out_path
        self.usage = None

    @property
    def pid(self):
        return self.popen.pid

    def proc_status(self):
        """Fields of /proc/PID/status in kB (VmRSS, VmHWM, ...); empty once the process is gone."""
        fields = {}
        try:
            with open("/proc/%d/status" % self.pid) as f:
                for line in f:
                    key, _, value = line.partition(":")
                    parts = value.split()
                    if len(parts) == 2 and parts[1] == "kB":
                        fields[key] = int(parts[0])
        except OSError:
            pass
        return fields

    def log_tail(self, lines=8):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read().splitlines()[-lines:]
        except OSError:
            return []

    def wait_for_output(self, pattern, timeout):
        """Waits for a line of the stdout file to match the regular expression pattern; the match, or
        None once the process has ended or timeout seconds have passed."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with open(self.out_path, errors="replace") as f:
                    for line in f:
                        m = re.match(pattern, line)
                        if m:
                            return m
            except OSError:
                pass
            if self.poll() is not None or time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def poll(self):
        """The exit status (negative: the signal that ended it), or None while it runs."""
        usage = self.reap(0)
        return usage.exit_code if usage else None

    def reap(self, timeout):
        """Waits up to timeout for the process to exit; its Usage, or None if still running."""
        if self.usage:
            return self.usage
        deadline = time.monotonic() + timeout
        while True:
            pid, status, rusage = os.wait4(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.usage = Usage(status, rusage)
                # wait4 reaped it: tell Popen, or it would wait on a pid that may be reused.
                self.popen.returncode = self.usage.exit_code
                return self.usage
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)

    def stop(self, grace=3.0):
        """Ends the process (SIGTERM, then SIGKILL after grace seconds) and returns its Usage."""
        usage = self.reap(0)
        if usage:
            return usage
        self._signal(signal.SIGTERM)
        usage = self.reap(grace)
        if usage:
            return usage
        self._signal(signal.SIGKILL)
        return self.reap(grace)

    def _signal(self, sig):
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass


class Children:
    """Every process the harness started."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.children = []

    def spawn(self, name, argv, env=None, stdout_to_file=False):
        """Starts argv with stderr in LOG_DIR/name.log and stdout on a pipe (for pump()) or, with
        stdout_to_file, in LOG_DIR/name.stdout (for a child nobody reads all the time)."""
        log_path = os.path.join(self.log_dir, "%s.log" % name)
        out_path = os.path.join(self.log_dir, "%s.stdout" % name) if stdout_to_file else None
        # A session of its own keeps a terminal's Ctrl-C away from the child: the harness ends it.
        with open(log_path, "ab") as log, open(out_path or os.devnull, "ab") as out:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out if out_path else subprocess.PIPE,
                                     stderr=log, env=env, start_new_session=True)
        child = Child(popen, time.monotonic(), log_path, out_path)
        self.children.append(child)
        return child

    def kill_all(self):
        for child in self.children:
            if child.usage is None and child.popen.returncode is None:
                child.stop(grace=1.0)
            if child.popen.stdout:
                child.popen.stdout.close()


def on_exit(cleanup):
    """Runs cleanup (which should end the children) when the harness exits, and makes SIGINT, SIGTERM
    and SIGHUP exit it (status 128 + the signal) rather than kill it without a cleanup."""
    atexit.register(cleanup)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))


def pump(child, on_data, timeout, quiet=None):
    """Feeds the child's stdout to on_data(now, bytes) until it returns True ('done'), the output ends
    ('eof'), timeout seconds pass ('timeout') or, once output started, nothing arrives for quiet seconds
    ('quiet'). Returns the reason."""
    fd = child.popen.stdout.fileno()
    deadline = child.started + timeout
    last = None
    while True:
        now = time.monotonic()
        wait = deadline - now
        if quiet is not None and last is not None:
            wait = min(wait, last + quiet - now)
        if wait <= 0:
            return "timeout" if now >= deadline else "quiet"
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            continue
        chunk = os.read(fd, READ_SIZE)
        now = time.monotonic()
        if not chunk:
            return "eof"
        last = now
        if on_data(now, chunk):
            return "done"
