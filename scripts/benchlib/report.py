"""The benchmark report: machine facts, one table of scenarios, and the details behind each row."""
import os
import platform
import subprocess
import time

PASS, FAIL, INFO, ERROR = "pass", "FAIL", "-", "error"


class Row:
    """One line of the table. ok is True, False or None (a reference point without a target);
    rate, in events/s, is compared with each measured peer's once every scenario has run (vs).
    unmeasured names the parts of a target that could not be checked (a peer that did not run):
    such a row is neither a pass nor a miss. cpu says the CPU time of the process measured and of
    the bench-server that fed it, so that a reader sees who was measured."""

    def __init__(self, scenario, result, target="-", ok=None, rate=None, details=(), cpu="-"):
        self.scenario, self.result, self.target = scenario, result, target
        self.ok, self.rate, self.details = ok, rate, list(details)
        self.vs = "-"
        self.cpu = cpu
        self.unmeasured = []
        self.error = False

    @classmethod
    def failed(cls, scenario, message, details=()):
        row = cls(scenario, "error: " + message, details=details)
        row.error = True
        return row

    @property
    def verdict(self):
        if self.error:
            return ERROR
        if self.ok is False:
            return FAIL
        if self.unmeasured:
            return "not measured: " + ", ".join(self.unmeasured)
        return INFO if self.ok is None else PASS


def number(value, digits=0):
    """12345.6 -> '12,346'."""
    return "{:,.{}f}".format(value, digits)


def cpu_cell(who, seconds, server_seconds=None, server=True):
    """The CPU column: the measured process's CPU time beside its bench-server's ("-" for a part
    not read); server False for a row that has no bench-server behind it."""
    part = lambda s: "-" if s is None else "%.2f s" % s  # noqa: E731
    if not server:
        return "%s %s, no server" % (who, part(seconds))
    return "%s %s · server %s" % (who, part(seconds), part(server_seconds))


def ratio(value, reference):
    return "%.1f×" % (value / reference) if value and reference else "-"


def _first_line(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_total():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return "%.1f GiB" % (int(line.split()[1]) / 1048576)
    except OSError:
        pass
    return "unknown"


def machine_facts(klua):
    """(name, value) pairs describing where and with what the benchmark ran."""
    versions = []
    try:
        versions = subprocess.run([klua, "version"], capture_output=True, text=True, timeout=20).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        pass
    return [
        ("date", time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())),
        ("cpu", "%s, nproc %d" % (_cpu_model(), os.cpu_count() or 0)),
        ("memory", _memory_total()),
        ("kernel", "%s %s" % (platform.system(), platform.release())),
        ("load average at the end", "%.2f %.2f %.2f (other work on the machine skews every number)"
         % os.getloadavg()),
        ("klua", ", ".join(versions) or "unknown"),
        ("python", platform.python_version()),
    ]


def _table(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"

    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out.extend(line(r) for r in rows)
    return out


def render(facts, setup, rows):
    """The whole report as Markdown text."""
    out = ["## klua benchmark", ""]
    out.extend("- %s: %s" % (k, v) for k, v in facts)
    out.extend("- %s: %s" % (k, v) for k, v in setup)
    out.append("")
    out.extend(_table(["scenario", "result", "target", "pass/fail", "CPU: measured · bench-server", "vs peers"],
                      [[r.scenario, r.result, r.target, r.verdict, r.cpu, r.vs] for r in rows]))
    details = [r for r in rows if r.details]
    if details:
        out += ["", "Details:", ""]
        for r in details:
            out.append("- %s" % r.scenario)
            out.extend("  - %s" % d for d in r.details)
    return "\n".join(out) + "\n"
