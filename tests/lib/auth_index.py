"""A private package index for the credential tests: a PEP 503 simple index and a dumb-HTTP git
repository behind HTTP basic auth, on a free port of a given address.

Every request without the right `Authorization` header is answered 401, and every request is counted,
so a test can tell "the tool got the credentials" from "the tool never asked".
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import hashlib
import io
import ipaddress
import ssl
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from httpserve import ThreadedServer


def make_wheel(name: str, version: str) -> tuple[str, bytes]:
    """(file name, bytes) of a pure-Python wheel holding one module that records its version."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{dist}/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: sglstack-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()) + f"{info}/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path, data in {**files, f"{info}/RECORD": record.encode()}.items():
            zf.writestr(path, data)
    return f"{dist}-{version}-py3-none-any.whl", buf.getvalue()


@dataclass
class AuthIndex:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    wheels: dict[str, bytes] = field(default_factory=dict, repr=False)  # file name -> bytes
    git_root: Path | None = None  # a bare repository served at /git/<name>.git (dumb HTTP)
    tls: bool = False  # https with a certificate for `host` from a CA of its own (`ca_pem`)
    require_auth: bool = True  # False: a public index (what uv's default index stands for in a test)
    ca_pem: str = ""
    requests: list[tuple[str, bool]] = field(default_factory=list)  # (path, authorised)
    _server: ThreadedServer | None = field(default=None, repr=False)

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    def url(self, path: str, *, credentials: bool = True) -> str:
        auth = f"{self.user}:{self.password}@" if credentials else ""
        return f"{self.scheme}://{auth}{self.host}:{self.port}{path}"

    def authorised(self) -> list[str]:
        return [p for p, ok in self.requests if ok]

    def _page(self, path: str) -> bytes | None:
        if path in ("/simple", "/simple/"):
            names = sorted({f.split("-")[0].replace("_", "-") for f in self.wheels})
            return "".join(f'<a href="/simple/{n}/">{n}</a>\n' for n in names).encode()
        if path.startswith("/simple/"):
            want = path.removeprefix("/simple/").strip("/").replace("_", "-")
            links = [f'<a href="/files/{f}#sha256={hashlib.sha256(d).hexdigest()}">{f}</a>'
                     for f, d in sorted(self.wheels.items()) if f.split("-")[0].replace("_", "-") == want]
            return ("<html><body>\n" + "\n".join(links) + "\n</body></html>\n").encode() if links else None
        if path.startswith("/files/"):
            return self.wheels.get(path.removeprefix("/files/"))
        if path.startswith("/git/") and self.git_root is not None:
            target = (self.git_root / path.removeprefix("/git/")).resolve()
            if target.is_file() and target.is_relative_to(self.git_root.resolve()):
                return target.read_bytes()
        return None

    def start(self) -> AuthIndex:
        index = self
        expected = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, body: bool) -> None:
                path = self.path.split("?")[0]
                ok = self.headers.get("Authorization") == expected
                index.requests.append((path, ok))
                if not ok and index.require_auth:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="private"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = index._page(path)
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                kind = "text/html" if path.startswith("/simple") else "application/octet-stream"
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve(True)

            def do_HEAD(self) -> None:
                self._serve(False)

            def log_message(self, *args) -> None:
                pass

        wrap = None
        if self.tls:
            self.ca_pem, context = _tls_context(self.host)
            wrap = functools.partial(context.wrap_socket, server_side=True)
        self._server = ThreadedServer(Handler, host=self.host, port=self.port, wrap=wrap)
        self.port = self._server.port
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()


def _tls_context(host: str) -> tuple[str, ssl.SSLContext]:
    """(CA certificate PEM, server context) for `host`: a CA that signs one certificate for it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sglstack test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as tmp:
        chain, key_file = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        chain.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        context.load_cert_chain(chain, key_file)
    return ca.public_bytes(serialization.Encoding.PEM).decode(), context


def bare_repo_with_commit(root: Path, name: str = "sglang.git") -> tuple[Path, str]:
    """A bare repository with one commit (`python/pyproject.toml`), prepared for dumb HTTP; (path, sha)."""
    work = root / "work"
    (work / "python").mkdir(parents=True)
    (work / "python" / "pyproject.toml").write_text('[project]\nname = "sglang"\nversion = "0.0.1"\n')

    def git(*args: str, cwd: Path = work) -> str:
        return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    sha = git("rev-parse", "HEAD")
    bare = root / name
    git("clone", "-q", "--bare", str(work), str(bare), cwd=root)
    git("update-server-info", cwd=bare)
    return bare, sha
