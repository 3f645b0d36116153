"""Real distribution registries for the publishing tests: plain, htpasswd and token auth, each on a free
loopback port, plus a byte-counting TCP proxy and a small JWT token service."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from engine_refs import free_port
from httpserve import ThreadedServer

from sglstack.registry.local import TokenAuth, registry_config, start_binary, stop_process


@dataclass
class RunningRegistry:
    port: int
    workdir: Path
    proc: subprocess.Popen
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "registry.log"

    def stop(self) -> None:
        stop_process(self.proc.pid)


def start_registry(workdir: Path, **auth) -> RunningRegistry:
    port = free_port()
    proc = start_binary(registry_config(port, workdir / "data", **auth), workdir, port)
    return RunningRegistry(port=port, workdir=workdir, proc=proc)


def htpasswd_file(path: Path, user: str, password: str) -> Path:
    import bcrypt

    path.write_text(f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()}\n")
    return path


# ---- byte-counting proxy ---------------------------------------------------------------------------


class CountingProxy:
    """A TCP proxy in front of a registry: counts the bytes clients send to it, and the request lines."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.bytes_up = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def reset(self) -> int:
        with self._lock:
            seen, self.bytes_up = self.bytes_up, 0
        return seen

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        try:
            while chunk := src.recv(65536):
                if count:
                    with self._lock:
                        self.bytes_up += len(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop = True
        self._server.close()


# ---- a JWT token service (the registry's `auth: token`) -----------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenService:
    """Issues RS256 JWTs (x5c header, self-signed cert) to a client presenting user/password."""

    issuer = "sglstack-test-issuer"
    service = "sglstack-test-registry"

    def __init__(self, workdir: Path, user: str, password: str) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        self.user, self.password = user, password
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sglstack test token signer")])
        now = dt.datetime.now(dt.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.cert_der = cert.public_bytes(serialization.Encoding.DER)
        self.bundle = workdir / "token-root.pem"
        self.bundle.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.requests: list[dict[str, list[str]]] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                query = parse_qs(urlparse(self.path).query)
                service.requests.append(query)
                want = "Basic " + base64.b64encode(f"{service.user}:{service.password}".encode()).decode()
                if self.headers.get("Authorization") != want:
                    self.send_response(401)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"details":"incorrect username or password"}')
                    return
                body = json.dumps({"token": service.token(query.get("scope", [])), "expires_in": 300}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._http = ThreadedServer(Handler)
        self.port = self._http.port

    @property
    def auth(self) -> TokenAuth:
        return TokenAuth(
            realm=f"http://127.0.0.1:{self.port}/token",
            service=self.service,
            issuer=self.issuer,
            rootcertbundle=self.bundle,
        )

    def token(self, scopes: list[str]) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        access = []
        for scope in " ".join(scopes).split():
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(self.cert_der).decode()]}
        claims = {
            "iss": self.issuer,
            "sub": self.user,
            "aud": self.service,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": secrets.token_hex(8),
            "access": access,
        }
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"

    def close(self) -> None:
        self._http.close()


# ---- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def plain_registry(tmp_path_factory) -> Iterator[RunningRegistry]:
    reg = start_registry(tmp_path_factory.mktemp("registry-plain"))
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def counting_proxy(plain_registry) -> Iterator[CountingProxy]:
    proxy = CountingProxy(plain_registry.port)
    yield proxy
    proxy.close()


@pytest.fixture(scope="session")
def htpasswd_registry(tmp_path_factory) -> Iterator[RunningRegistry]:
    workdir = tmp_path_factory.mktemp("registry-htpasswd")
    user, password = "sglstack-ci", "s3cret-" + secrets.token_hex(6)
    reg = start_registry(workdir, htpasswd=htpasswd_file(workdir / "htpasswd", user, password))
    reg.user, reg.password = user, password
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory) -> Iterator[tuple[RunningRegistry, TokenService]]:
    workdir = tmp_path_factory.mktemp("registry-token")
    user, password = "sglstack-bot", "tok-" + secrets.token_hex(6)
    service = TokenService(workdir, user, password)
    reg = start_registry(workdir, token=service.auth)
    reg.user, reg.password = user, password
    yield reg, service
    reg.stop()
    service.close()


@pytest.fixture(scope="session")
def tiny_image(docker_cli, docker_client, tmp_path_factory) -> Iterator[str]:
    """A one-small-layer image built with BuildKit (FROM scratch: a debian base layer costs ~20 s of
    compression per fresh registry, and the auth tests only need some image to push)."""
    ctx = tmp_path_factory.mktemp("tiny-image")
    (ctx / "nonce").write_text(secrets.token_hex(16))
    (ctx / "Dockerfile").write_text('FROM scratch\nCOPY nonce /nonce\nCMD ["/nonce"]\n')
    tag = f"sglstack-test-publish-tiny:{secrets.token_hex(4)}"
    subprocess.run(
        [docker_cli, "build", "-q", "-t", tag, str(ctx)],
        check=True,
        capture_output=True,
        env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"},
    )
    yield tag
    docker_client.images.remove(tag, force=True)
