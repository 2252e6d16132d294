"""The peers: the readers a user would otherwise pick, measured on the same stream as klua.

  kubectl       `kubectl get pods -A --watch-only -o name`, against `klua watch` (watch-names)
  client-node   @kubernetes/client-node's informer (makeInformer), an update handler reading
                the three fields of handler-3-fields; npm installs the version pinned in
                peer-clients/package-lock.json into the bench's own folder, never globally
  python        the Python kubernetes client's watch.Watch().stream, reading the same fields;
                Debian's python3-kubernetes (scripts/build/bootstrap bench installs it)

find() says for each peer how to run it, or why it cannot be run here (not installed, no
network for npm): such a peer is reported as not measured, and the run goes on.
"""
import json
import os
import shutil
import subprocess

CLIENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer-clients")
CLIENT_NODE = "@kubernetes/client-node"
# Debian installs python3-kubernetes for its own interpreter, which need not be python3 on PATH.
SYSTEM_PYTHON = "/usr/bin/python3"
NPM_SECONDS = 600
# npm's own retries wait minutes for a registry that cannot be reached; these keep a machine
# without network from holding up the run (set npm_config_* in the environment to override).
NPM_DEFAULTS = {"npm_config_fetch_retries": "1", "npm_config_fetch_retry_mintimeout": "2000",
                "npm_config_fetch_retry_maxtimeout": "10000", "npm_config_fetch_timeout": "60000"}
ORDER = ["kubectl", "client-node", "python"]


class Peer:
    """One peer: the label of its row, what to run (or why it cannot run) and its version."""

    def __init__(self, name, label, version=None, missing=None, command=None):
        self.name, self.label, self.version = name, label, version
        self.missing = missing
        self.command = command

    def fact(self):
        return "%s: %s" % (self.name, self.version if not self.missing else "not measured: " + self.missing)


def _last_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _npm_reason(err):
    """npm's error code and message out of its stderr (its last line only names a log file)."""
    lines = [line[len("npm error"):].strip() for line in (err or "").splitlines() if line.startswith("npm error")]
    code = next((line[len("code"):].strip() for line in lines if line.startswith("code ")), None)
    message = next((line for line in lines if "reason:" in line or line.startswith("FetchError")), None)
    message = message or next((line for line in lines if not line.startswith(("code ", "syscall ", "errno "))),
                              _last_line(err))
    return "%s: %s" % (code, message) if code else message


def _run(argv, timeout=30, env=None):
    """(exit status, stdout, stderr); status None when argv could not run or timed out."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        return None, "", str(e)
    return out.returncode, out.stdout, out.stderr


def kubectl_version(kubectl):
    status, out, _ = _run([kubectl, "version", "--client", "-o", "json"])
    try:
        return json.loads(out)["clientVersion"]["gitVersion"] if status == 0 else "unknown"
    except (ValueError, KeyError):
        return "unknown"


def find_kubectl():
    label = "peer kubectl: kubectl get pods -A --watch-only -o name"
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return Peer("kubectl", label, missing="kubectl not found (sh scripts/build/bootstrap bench installs "
                                              "kubernetes-client)")
    return Peer("kubectl", label, "kubectl " + kubectl_version(kubectl), command=kubectl)


def pinned_client_node():
    with open(os.path.join(CLIENTS, "package.json")) as f:
        return json.load(f)["dependencies"][CLIENT_NODE]


def _installed_entry(prefix, version):
    """client-node's entry module under prefix when exactly the pinned tree is installed there."""
    try:
        with open(os.path.join(prefix, "package-lock.json"), "rb") as f:
            same_lock = f.read() == open(os.path.join(CLIENTS, "package-lock.json"), "rb").read()
        with open(os.path.join(prefix, "node_modules", CLIENT_NODE, "package.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    if not same_lock or meta.get("version") != version:
        return None
    return os.path.join(prefix, "node_modules", CLIENT_NODE, meta.get("main", "index.js"))


def find_client_node(prefix, log):
    """Installs the pinned client-node into prefix with `npm ci` unless it is there already."""
    version = pinned_client_node()
    label = "peer client-node: %s %s informer, update handler reads the 3 fields" % (CLIENT_NODE, version)
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node:
        return Peer("client-node", label, missing="node not found (sh scripts/build/bootstrap bench installs nodejs "
                                                  "and npm)")
    status, out, _ = _run([node, "--version"])
    node_version = out.strip() if status == 0 else "unknown"
    entry = _installed_entry(prefix, version)
    if entry is None:
        if not npm:
            return Peer("client-node", label, missing="npm not found (sh scripts/build/bootstrap bench installs npm)")
        log("installing %s %s into %s with npm ci ..." % (CLIENT_NODE, version, prefix))
        os.makedirs(prefix, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(os.path.join(CLIENTS, name), os.path.join(prefix, name))
        env = dict(NPM_DEFAULTS)
        env.update(os.environ)
        status, _, err = _run([npm, "ci", "--prefix", prefix, "--no-audit", "--no-fund", "--omit=dev"],
                              timeout=NPM_SECONDS, env=env)
        entry = _installed_entry(prefix, version) if status == 0 else None
        if entry is None:
            why = "timed out after %d s" % NPM_SECONDS if status is None and not err else _npm_reason(err)
            return Peer("client-node", label, missing="npm ci could not install %s %s into %s (no network?): %s"
                        % (CLIENT_NODE, version, prefix, why))
    return Peer("client-node", label, "%s %s (node %s)" % (CLIENT_NODE, version, node_version),
                command=[node, os.path.join(CLIENTS, "informer.mjs"), entry])


def find_python(python):
    """The Python client under python, else under the first of python3 on PATH and Debian's."""
    label = 'peer python: kubernetes Watch(return_type="object").stream, reads the 3 fields'
    candidates = [python] if python else [p for p in (shutil.which("python3"), SYSTEM_PYTHON) if p]
    probe = "import kubernetes, platform; print(kubernetes.__version__, platform.python_version())"
    errors = []
    for candidate in dict.fromkeys(candidates):
        status, out, err = _run([candidate, "-c", probe])
        if status == 0 and len(out.split()) == 2:
            client, interpreter = out.split()
            return Peer("python", label.replace("kubernetes", "kubernetes " + client, 1),
                        "kubernetes %s (python %s, %s)" % (client, interpreter, candidate),
                        command=[candidate, os.path.join(CLIENTS, "python_watch.py")])
        errors.append("%s: %s" % (candidate, _last_line(err)))
    return Peer("python", label, missing="no interpreter imports kubernetes (%s); sh scripts/build/bootstrap bench "
                                         "installs python3-kubernetes" % "; ".join(errors or ["no python3"]))


def find(prefix, python, log):
    """Every peer, in ORDER."""
    return [find_kubectl(), find_client_node(prefix, log), find_python(python)]
