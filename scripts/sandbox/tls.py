"""The sandbox's own CA, server and client certificates (made with the openssl CLI), the
TLS context that serves them, and the kubeconfig that points clients at the server."""
import base64
import ipaddress
import os
import ssl
import subprocess

CLIENT_USER = "sandbox-admin"
KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(directory, *args):
    result = subprocess.run(["openssl"] + list(args), cwd=directory, capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (args[0], result.stderr.strip()))


def _signed(directory, name, subject, extensions):
    """Makes name.key and name.crt, signed by ca.key."""
    with open(os.path.join(directory, name + ".ext"), "w", encoding="utf-8") as f:
        f.write("\n".join(extensions) + "\n")
    _openssl(directory, "req", *KEY, "-keyout", name + ".key", "-out", name + ".csr",
             "-subj", subject)
    _openssl(directory, "x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey",
             "ca.key", "-CAcreateserial", "-days", "825", "-sha256", "-out", name + ".crt",
             "-extfile", name + ".ext")
    for leftover in (name + ".csr", name + ".ext"):
        os.remove(os.path.join(directory, leftover))


def _san(name):
    try:
        ipaddress.ip_address(name)
        return "IP:" + name
    except ValueError:
        return "DNS:" + name


def make_ca(directory):
    """Writes the CA, ca.crt and ca.key, to directory."""
    _openssl(directory, "req", "-x509", *KEY, "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "3650", "-sha256", "-subj", "/CN=klua-sandbox-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")


def make_server_cert(directory, names):
    """Writes server.crt and server.key, signed by the CA in directory, valid for the DNS
    names and IP addresses in names only."""
    _signed(directory, "server", "/CN=klua-sandbox-apiserver",
            ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
             "extendedKeyUsage=serverAuth", "subjectAltName=" + ",".join(map(_san, names))])


def make_pki(directory, sans):
    """Writes ca.crt/ca.key, server.crt/server.key (for 127.0.0.1, localhost and sans) and
    client.crt/client.key to directory."""
    make_ca(directory)
    make_server_cert(directory, ["127.0.0.1", "localhost"]
                     + [s for s in sans if s not in ("127.0.0.1", "localhost")])
    _signed(directory, "client", "/O=system:masters/CN=" + CLIENT_USER,
            ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
             "extendedKeyUsage=clientAuth"])


def server_context(directory, client_certs):
    """TLS for the listener; with client_certs a presented certificate must chain to the CA.

    A client without a certificate still connects (and gets 401), as with the real server.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(directory, "server.crt"),
                        os.path.join(directory, "server.key"))
    ctx.set_alpn_protocols(["http/1.1"])
    if client_certs:
        ctx.load_verify_locations(os.path.join(directory, "ca.crt"))
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def _b64_file(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def write_kubeconfig(path, url, pki_dir, auth, token):
    """A kubeconfig with one cluster, user and context, all named sandbox."""
    cluster = ["    server: " + url]
    if pki_dir:
        cluster.append("    certificate-authority-data: " +
                       _b64_file(os.path.join(pki_dir, "ca.crt")))
    user = ["  user: {}"]
    if auth == "token":
        user = ["  user:", "    token: " + token]
    elif auth == "cert":
        user = ["  user:",
                "    client-certificate-data: " + _b64_file(os.path.join(pki_dir, "client.crt")),
                "    client-key-data: " + _b64_file(os.path.join(pki_dir, "client.key"))]
    lines = (["apiVersion: v1", "kind: Config", "clusters:", "- name: sandbox", "  cluster:"]
             + cluster + ["users:", "- name: sandbox"] + user
             + ["contexts:", "- name: sandbox", "  context:", "    cluster: sandbox",
                "    user: sandbox", "    namespace: default", "current-context: sandbox",
                "preferences: {}"])
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
