"""The Docker SDK adapter: engine connection and containers that always clean up.

Everything that is not a build (inspect, run, tag, push, logs) goes through the SDK here. Builds go
through a BuildKit-capable CLI (`buildkit.py`), because the SDK's build API is the legacy builder.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import os
import secrets
import tarfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import docker
import docker.errors
from docker.models.containers import Container
from docker.models.images import Image

from ..core import labels as lb
from ..core.errors import DockerUnavailable, first_line
from ..core.network import explained
from ..core.options import BadOption

OWNER_LABEL = lb.OWNER_LABEL
LOCAL_SOCKET = "unix:///var/run/docker.sock"


# ---- which machine the engine runs on: the one rule for deploy and smoke ---------------------------


def effective_docker_host(docker_host: str | None) -> str:
    """The engine a command talks to: the option, else DOCKER_HOST, else the local socket (as the CLI)."""
    return docker_host or os.environ.get("DOCKER_HOST") or LOCAL_SOCKET


def docker_host_name(docker_host: str | None) -> str:
    """The machine name in the effective host's tcp://host:port or ssh://user@host[:port] ('' for sockets)."""
    host = effective_docker_host(docker_host)
    if "://" not in host:
        host = "tcp://" + host
    try:
        return urlsplit(host).hostname or ""
    except ValueError:
        return ""


def is_local_docker_host(docker_host: str | None) -> bool:
    """Whether the effective engine runs on this machine: a unix:// or npipe:// socket, or a loopback
    tcp:// / ssh:// host. Decides what can be checked from here (paths, ports) and where a published
    port is reached."""
    host = effective_docker_host(docker_host)
    if host.startswith(("unix://", "npipe://")):
        return True
    name = docker_host_name(host)
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def docker_host_address(docker_host: str | None) -> str:
    """Where a port the engine publishes is reached from here: loopback for this machine, else its name."""
    return "127.0.0.1" if is_local_docker_host(docker_host) else docker_host_name(docker_host)


def docker_client(docker_host: str | None = None, *, timeout: int = 120) -> docker.DockerClient:
    """A client for `docker_host` (e.g. unix:///var/run/docker.sock, tcp://h:2375, ssh://user@node).

    With no host, DOCKER_HOST and the default socket apply, as for the docker CLI.
    """
    try:
        if docker_host:
            use_ssh = docker_host.startswith("ssh://")
            client = docker.DockerClient(base_url=docker_host, timeout=timeout, use_ssh_client=use_ssh)
        else:
            client = docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException as exc:
        where = docker_host or os.environ.get("DOCKER_HOST") or "the default Docker socket"
        reason = first_line(str(exc))
        raise DockerUnavailable(f"cannot reach the Docker engine at {where}: {reason}") from None
    except ValueError:  # the URL does not parse (urllib's own words name no option)
        where = f"--docker-host '{docker_host}'" if docker_host else f"DOCKER_HOST '{os.environ.get('DOCKER_HOST')}'"
        raise BadOption(f"{where}: not a Docker engine URL (unix:///PATH, tcp://HOST:PORT or "
                        "ssh://USER@HOST)") from None
    return client


def engine_image(client: docker.DockerClient, ref: str) -> Image:
    """The engine's image `ref` names (a tag, `repo@digest` or an image id): the one place sglstack asks an
    engine for an image. Raises docker.errors.ImageNotFound when it has none, APIError when it fails otherwise
    (each caller says either in its own words)."""
    return client.images.get(ref)


def image_exists(client: docker.DockerClient, ref: str) -> bool:
    try:
        engine_image(client, ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def unique_name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


@contextlib.contextmanager
def running_container(
    client: docker.DockerClient,
    image: str,
    *,
    command: list[str] | str | None = None,
    name_prefix: str = "sglstack",
    labels: Mapping[str, str] | None = None,
    **run_kwargs: Any,
) -> Iterator[Container]:
    """Start a detached container and remove it on exit: on success, on error and on Ctrl-C."""
    all_labels = {OWNER_LABEL: name_prefix, **(labels or {})}
    name = unique_name(name_prefix)
    try:
        container = client.containers.run(
            image, command=command, name=name, labels=all_labels, detach=True, **run_kwargs
        )
    except BaseException:
        # Created but not started (bad ulimit, missing GPU driver) or Ctrl-C mid-call: remove it by name.
        with contextlib.suppress(docker.errors.DockerException):
            client.containers.get(name).remove(force=True, v=True)
        raise
    try:
        yield container
    finally:
        # Shield the removal from a second Ctrl-C so that no container is leaked.
        for _ in range(3):
            try:
                container.remove(force=True, v=True)
                break
            except docker.errors.NotFound:
                break
            except KeyboardInterrupt:
                continue
            except docker.errors.APIError as exc:
                if "removal of container" in str(exc) and "already in progress" in str(exc):
                    break
                raise


def remove_container(client: docker.DockerClient, name: str) -> None:
    """Remove the container called `name`, if there is one (by name: it works even when the call that
    created it was interrupted before it returned)."""
    for _ in range(3):
        try:
            client.api.remove_container(name, force=True, v=True)
            return
        except docker.errors.NotFound:
            return
        except KeyboardInterrupt:
            continue  # a plain second Ctrl-C must not cut the removal in half
        except docker.errors.APIError as exc:
            if "already in progress" in str(exc):
                return
            raise


@contextlib.contextmanager
def created_container(
    client: docker.DockerClient,
    image: str,
    *,
    name_prefix: str = "sglstack",
    labels: Mapping[str, str] | None = None,
    **create_kwargs: Any,
) -> Iterator[Container]:
    """A container that is created and not started (to copy files in or out); removed on every exit."""
    name = unique_name(name_prefix)
    try:
        yield client.containers.create(
            image, name=name, labels={OWNER_LABEL: name_prefix, **(labels or {})}, **create_kwargs
        )
    finally:
        remove_container(client, name)


def run_to_completion(client: docker.DockerClient, image: str, command: list[str], *,
                      name_prefix: str = "sglstack-run", timeout: float = 600,
                      **run_kwargs: Any) -> tuple[int, str]:
    """Run a one-off command in a fresh container; return (exit code, combined output)."""
    with running_container(client, image, command=command, name_prefix=name_prefix,
                           **run_kwargs) as container:
        result = container.wait(timeout=timeout)
        output = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
    return int(result.get("StatusCode", 1)), output


def read_image_files(client: docker.DockerClient, image: str, paths: list[str]) -> dict[str, bytes]:
    """The files at `paths` in `image`, read from a created (never started) container; missing ones left out.

    Nothing in the image runs, so this works for any image, whatever its entrypoint or architecture.
    """
    out: dict[str, bytes] = {}
    name = unique_name("sglstack-read")
    try:
        container = client.containers.create(image, command=["true"], entrypoint=[], name=name,
                                             labels={OWNER_LABEL: "sglstack-read"}, network_disabled=True)
        for path in paths:
            try:
                stream, _ = container.get_archive(path)
            except docker.errors.NotFound:
                continue
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                member = next((m for m in tar.getmembers() if m.isfile()), None)
                handle = tar.extractfile(member) if member else None
                if handle is not None:
                    out[path] = handle.read()
    finally:
        with contextlib.suppress(docker.errors.DockerException):
            client.containers.get(name).remove(force=True, v=True)
    return out


@dataclass(frozen=True)
class LocalImage:
    """An image on the engine: its image id (`sha256:` of its config, what the engine names it by) and the
    registry digests (`repo@sha256:...` of a manifest) it was pushed or pulled as; a local build has none."""

    id: str
    repo_digests: tuple[str, ...]
    created: str = ""  # the engine's `Created` (RFC 3339, nanoseconds), as it says it
    os: str = ""  # the image config's `os` and `architecture` (Docker's names: linux, amd64, arm64)
    architecture: str = ""


def local_image(client: docker.DockerClient, ref: str) -> LocalImage | None:
    """The local image `ref` names (a tag, `repo@digest` or an image id); None if the engine has none.
    An engine that fails otherwise raises docker.errors.APIError (each caller names it in its own words)."""
    try:
        image = engine_image(client, ref)
    except docker.errors.ImageNotFound:
        return None
    return LocalImage(id=str(image.id), repo_digests=tuple(image.attrs.get("RepoDigests") or ()),
                      created=str(image.attrs.get("Created") or ""), os=str(image.attrs.get("Os") or ""),
                      architecture=str(image.attrs.get("Architecture") or ""))


def engine_machine(client: docker.DockerClient) -> tuple[str, str]:
    """The OS type and machine (`uname -m`: x86_64, aarch64) of the host a Docker engine runs on."""
    info = client.info()
    return str(info.get("OSType") or "linux"), str(info.get("Architecture") or "")


def registry_platforms(client: docker.DockerClient, ref: str) -> tuple[tuple[str, str, str], ...] | None:
    """(os, architecture, variant) of each platform the registry serves `ref` for, as the engine reads them from
    the manifest or index (`GET /distribution/REF/json`: the engine asks the registry it would pull from, with its
    credentials, and pulls no layer); None when the engine cannot tell (no such image, an unreachable registry):
    the pull then says why in its own words. An index's attestation entries (unknown/unknown) are no platform."""
    try:
        data = client.images.get_registry_data(ref)
    except docker.errors.DockerException:
        return None
    found = []
    for entry in data.attrs.get("Platforms") or ():
        if isinstance(entry, dict) and entry.get("architecture") not in (None, "", "unknown"):
            found.append((str(entry.get("os") or ""), str(entry["architecture"]), str(entry.get("variant") or "")))
    return tuple(found) or None


class PullFailed(Exception):
    """The engine could not pull an image: `str()` is one line, the engine's first (and what to do when it
    is the network); each caller says it in its own words and error class. `vanished`: the pull went through
    but the engine still has no such image (another client removed it, or the reference names another)."""

    def __init__(self, reason: str, *, vanished: bool = False) -> None:
        super().__init__(reason)
        self.vanished = vanished


def present_or_pulled(client: docker.DockerClient, ref: str, *,
                      before_pull: Callable[[], None] | None = None) -> LocalImage:
    """The local image `ref` names, pulled first when the engine lacks it (`before_pull` says so), identified
    by the engine after the pull: its image id and the registry digests it now has."""
    found = local_image(client, ref)
    if found is not None:
        return found
    if before_pull is not None:
        before_pull()
    try:
        client.images.pull(ref)
    except docker.errors.DockerException as exc:
        reason = first_line(str(getattr(exc, "explanation", None) or exc))
        raise PullFailed(explained(reason) or reason) from None
    found = local_image(client, ref)
    if found is None:
        raise PullFailed("not on the engine after the pull", vanished=True)
    return found


def local_image_id(client: docker.DockerClient, ref: str) -> str | None:
    """The image id of the local image `ref` names (never a registry digest); None if the engine has none."""
    found = local_image(client, ref)
    return found.id if found is not None else None
