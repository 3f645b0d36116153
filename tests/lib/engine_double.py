"""The one stand-in of a Docker engine as far as images go (docker-py's `DockerClient`): `images.get`,
`images.get_registry_data` (the engine's `GET /distribution/REF/json`: the platforms a registry serves REF for,
no layer pulled) and `images.pull`, `info()`; what a pull brings (`registry`) and how the engine fails
(`get_error`, `pull_error`). It records every ref asked for (`asked`) and pulled (`pulled`). `Image` is an
image it holds."""

from __future__ import annotations

from typing import Any

import docker.errors


class Image:
    """docker-py's `Image`: its id and `attrs` (RepoDigests; Os and Architecture, Created when given)."""

    def __init__(self, image_id: str, repo_digests: list[str], architecture: str | None = None, *,
                 created: str | None = None) -> None:
        self.id, self.attrs = image_id, {"RepoDigests": repo_digests}
        if architecture:  # what the engine says of an image it holds
            self.attrs.update(Os="linux", Architecture=architecture)
        if created:
            self.attrs["Created"] = created


class RegistryData:
    def __init__(self, platforms: list[dict[str, str]]) -> None:
        self.attrs = {"Descriptor": {}, "Platforms": platforms}


class Engine:
    def __init__(self, local: dict[str, Any] | None = None, registry: dict[str, Any] | None = None, *,
                 get_error: Exception | None = None, pull_error: Exception | None = None,
                 machine: str = "x86_64") -> None:
        self.images = self
        self.local, self.registry = dict(local or {}), dict(registry or {})
        self.get_error, self.pull_error, self.machine = get_error, pull_error, machine
        self.asked: list[str] = []
        self.pulled: list[str] = []

    def info(self) -> dict[str, str]:
        return {"OSType": "linux", "Architecture": self.machine}  # `docker info` of the engine's host

    def get(self, ref: str) -> Any:
        self.asked.append(ref)
        if self.get_error is not None:
            raise self.get_error
        if ref not in self.local:
            raise docker.errors.ImageNotFound(f"No such image: {ref}")
        return self.local[ref]

    def get_registry_data(self, ref: str) -> RegistryData:
        if ref not in self.registry:  # what the engine answers when the registry has no such manifest
            raise docker.errors.NotFound(f"{ref}: manifest unknown")
        arch = self.registry[ref].attrs.get("Architecture", "amd64")
        return RegistryData([{"os": "linux", "architecture": arch, **({"variant": "v8"} if arch == "arm64" else {})}])

    def pull(self, ref: str) -> None:
        self.pulled.append(ref)
        if self.pull_error is not None:
            raise self.pull_error
        if ref in self.registry:
            self.local[ref] = self.registry[ref]
