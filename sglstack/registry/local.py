"""The embedded default registry on 127.0.0.1:5000: `invoke registry.up` / `registry.down`.

`registry:2` runs as a container when the image is present or can be pulled (data in the named volume
`sglstack-registry-data`); otherwise Debian's distribution binary `docker-registry` serves from a data
folder ($SGLSTACK_REGISTRY_DIR, default $XDG_DATA_HOME/sglstack/registry). Either way the data survives
`down` and `up`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
import requests
import yaml

from ..adapters.docker import PullFailed, docker_client, present_or_pulled
from ..core.errors import ConfigError, RegistryError
from ..core.inputs import loads, read_bytes
from ..core.labels import OWNER_LABEL
from ..core.options import BadOption
from ..core.records import build_root
from ..core.safefiles import containing_root, open_log, write_text

DEFAULT_PORT = 5000
CONTAINER_NAME = "sglstack-registry"
VOLUME_NAME = "sglstack-registry-data"
REGISTRY_IMAGE = "registry:2"
BINARY = "docker-registry"
STATE_FILE = "sglstack-registry.json"


@dataclass(frozen=True)
class TokenAuth:
    """`auth: token` settings: the registry trusts JWTs signed by a key in `rootcertbundle`."""

    realm: str
    service: str
    issuer: str
    rootcertbundle: Path


def parse_port(value: int | str | None, *, option: str = "--port") -> int:
    """A TCP port from the command line (None: the default); anything else is a one-line error."""
    if value is None or value == "":
        return DEFAULT_PORT
    try:
        port = int(str(value).strip())
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise BadOption(f"{option} '{value}' is not a TCP port (1-65535)")
    return port


def data_dir() -> Path:
    explicit = os.environ.get("SGLSTACK_REGISTRY_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "sglstack" / "registry"


def registry_config(
    port: int, storage: Path, *, htpasswd: Path | None = None, token: TokenAuth | None = None, host: str = "127.0.0.1"
) -> dict[str, Any]:
    """A distribution config: filesystem storage with deletes enabled, one loopback listener."""
    config: dict[str, Any] = {
        "version": 0.1,
        "log": {"level": "info", "formatter": "text", "accesslog": {"disabled": False}},
        "storage": {
            "filesystem": {"rootdirectory": str(storage)},
            "delete": {"enabled": True},
            "maintenance": {"uploadpurging": {"enabled": False}},
        },
        "http": {"addr": f"{host}:{port}", "secret": secrets.token_hex(16)},
    }
    if htpasswd is not None:
        config["auth"] = {"htpasswd": {"realm": "sglstack", "path": str(htpasswd)}}
    elif token is not None:
        config["auth"] = {
            "token": {
                "realm": token.realm,
                "service": token.service,
                "issuer": token.issuer,
                "rootcertbundle": str(token.rootcertbundle),
            }
        }
    return config


def answers(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    """A registry (any answer of /v2/ with the API version header) listens on host:port."""
    try:
        resp = requests.get(f"http://{host}:{port}/v2/", timeout=timeout)
    except requests.RequestException:
        return False
    return "Docker-Distribution-Api-Version" in resp.headers or resp.status_code in (200, 401)


def wait_until_serving(
    port: int, proc: subprocess.Popen | None = None, *, log: Path | None = None, timeout: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answers(port):
            return
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log and log.exists() else []
            raise RegistryError(
                f"registry 127.0.0.1:{port}: {BINARY} exited ({proc.returncode})"
                + (f": {tail[0][:200]}" if tail else "")
            )
        time.sleep(0.1)
    raise RegistryError(f"registry 127.0.0.1:{port}: did not answer within {timeout:.0f}s")


def start_binary(config: dict[str, Any], workdir: Path, port: int) -> subprocess.Popen:
    """Run `docker-registry serve` in its own session, logging to workdir/registry.log."""
    binary = shutil.which(BINARY)
    if not binary:
        raise RegistryError(
            f"registry 127.0.0.1:{port}: neither {REGISTRY_IMAGE} nor {BINARY} is available "
            "(apt-get install docker-registry)"
        )
    root = containing_root(workdir, build_root())
    config_path = write_text(root, workdir / "config.yml", yaml.safe_dump(config, sort_keys=False))
    log = workdir / "registry.log"
    with open_log(root, log, append=True) as out:
        proc = subprocess.Popen(
            [binary, "serve", str(config_path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            # Only what it needs: the server reads any REGISTRY_* variable as configuration, and holds no secret.
            env={"PATH": os.environ.get("PATH", os.defpath)},
        )
    try:
        wait_until_serving(port, proc, log=log)
    except BaseException:
        stop_process(proc.pid)
        raise
    return proc


def _is_our_registry(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(part.endswith(BINARY.encode()) for part in cmdline[:1])


def stop_process(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`; reaps the child when it is ours."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return
        except ChildProcessError:
            if not Path(f"/proc/{pid}").exists():
                return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


# ---- up / down -------------------------------------------------------------------------------------


def _state_path(folder: Path) -> Path:
    return folder / STATE_FILE


def _write_state(folder: Path, state: dict[str, Any]) -> None:
    write_text(containing_root(folder, build_root()), _state_path(folder), json.dumps(state))


def _running_port(folder: Path) -> int | None:
    """The port of the registry recorded in `folder`'s state file, when it still answers there."""
    state_file = _state_path(folder)
    if not state_file.exists():
        return None
    try:
        port = int(_state(state_file)["port"])
    except (RegistryError, KeyError, TypeError, ValueError):
        return None
    return port if answers(port) else None


def _image_available(client: Any) -> bool:
    try:
        present_or_pulled(client, REGISTRY_IMAGE)
    except (PullFailed, docker.errors.DockerException):
        return False
    return True


def registry_up(
    *,
    port: int | str | None = DEFAULT_PORT,
    folder: Path | None = None,
    docker_host: str | None = None,
    use_container: bool | None = None,
) -> str:
    """Start the local registry on 127.0.0.1:`port` unless one already answers; return a one-line status."""
    port = parse_port(port)
    folder = folder or data_dir()
    if answers(port):
        return f"a registry already answers on 127.0.0.1:{port}"
    running = _running_port(folder)
    if running is not None:
        # One state file per data folder: a second instance would be untracked, and `down` could not stop it.
        raise RegistryError(
            f"registry 127.0.0.1:{running}: already running from {folder}; `invoke registry.down` first"
        )
    client = None
    if use_container is not False:
        try:
            client = docker_client(docker_host)
        except Exception:  # no engine: the binary still works
            client = None
    if client is not None and (use_container or _image_available(client)):
        return _container_up(client, port, folder)
    config = registry_config(port, folder / "data")
    proc = start_binary(config, folder, port)
    _write_state(folder, {"kind": "binary", "pid": proc.pid, "port": port})
    return f"registry on 127.0.0.1:{port} ({BINARY}, pid {proc.pid}, data in {folder / 'data'})"


def _container_up(client: Any, port: int, folder: Path) -> str:
    try:
        old = client.containers.get(CONTAINER_NAME)
        old.remove(force=True)
    except docker.errors.NotFound:
        pass
    client.containers.run(
        REGISTRY_IMAGE,
        name=CONTAINER_NAME,
        detach=True,
        restart_policy={"Name": "unless-stopped"},
        ports={"5000/tcp": ("127.0.0.1", port)},
        volumes={VOLUME_NAME: {"bind": "/var/lib/registry", "mode": "rw"}},
        environment={"REGISTRY_STORAGE_DELETE_ENABLED": "true"},
        labels={OWNER_LABEL: CONTAINER_NAME},
    )
    _write_state(folder, {"kind": "container", "name": CONTAINER_NAME, "port": port})
    wait_until_serving(port)
    return f"registry on 127.0.0.1:{port} (container {CONTAINER_NAME}, data in volume {VOLUME_NAME})"


def _state(state_file: Path) -> dict[str, Any]:
    """The state file `registry_up` wrote, read bounded (never from a FIFO put in its place); a file that does not
    read as one is a one-line `RegistryError`."""
    try:
        state = loads(read_bytes(state_file, limit=1024 * 1024, what="registry state file"))
    except (ConfigError, ValueError) as exc:
        raise RegistryError(f"{state_file}: not a registry state ({getattr(exc, 'reason', None) or exc})") from None
    if not isinstance(state, dict):
        raise RegistryError(f"{state_file}: not a registry state (not a JSON object)")
    return state


def registry_down(*, folder: Path | None = None, docker_host: str | None = None) -> str:
    """Stop what `registry_up` started; the data stays."""
    folder = folder or data_dir()
    state_file = _state_path(folder)
    if not state_file.exists():
        return "no sglstack registry is running"
    state = _state(state_file)
    key, kind, words = ("name", str, "a string") if state.get("kind") == "container" else ("pid", int, "a number")
    if not isinstance(state.get(key), kind) or isinstance(state.get(key), bool):
        raise RegistryError(f"{state_file}: not a registry state ('{key}' is not {words}): stop the registry by "
                            "hand, then remove the file")
    if state.get("kind") == "container":
        with contextlib.suppress(docker.errors.NotFound):
            docker_client(docker_host).containers.get(state["name"]).remove(force=True)
        message = f"stopped container {state['name']} (data kept in volume {VOLUME_NAME})"
    else:
        pid = int(state["pid"])
        if _is_our_registry(pid):
            stop_process(pid)
        message = f"stopped {BINARY} (pid {pid}; data kept in {folder / 'data'})"
    state_file.unlink()
    return message
