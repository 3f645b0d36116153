# ruff: noqa: F811 - pytest fixtures imported from registry_fixtures are parameters here
"""`invoke registry.up/down`: the embedded registry keeps its data across restarts."""

from __future__ import annotations

import pytest
from registry_fixtures import free_port, tiny_image  # noqa: F401 - fixture

from sglstack.config.imageref import parse_repository
from sglstack.core.errors import RegistryError
from sglstack.publish import push_candidate
from sglstack.registry.client import RegistryClient
from sglstack.registry.local import answers, registry_down, registry_up

pytestmark = pytest.mark.docker


def test_up_down_up_keeps_the_data(tmp_path, tiny_image, docker_client, docker_cli):
    port, folder = free_port(), tmp_path / "registry"
    have_registry_image = bool(docker_client.images.list(name="registry"))
    try:
        message = registry_up(port=port, folder=folder)
        assert answers(port)
        assert ("container" if have_registry_image else "docker-registry") in message
        assert "already answers" in registry_up(port=port, folder=folder)
        repo = parse_repository(f"127.0.0.1:{port}/sglstack-test/local")
        client = RegistryClient(repo.registry)
        digest = push_candidate(docker_client, tiny_image, repo, "kept", client)
        assert "stopped" in registry_down(folder=folder)
        assert not answers(port)
        registry_up(port=port, folder=folder)
        assert client.manifest_digest(repo.path, "kept") == digest
    finally:
        registry_down(folder=folder)
    assert not answers(port)
    assert registry_down(folder=folder) == "no sglstack registry is running"


def test_up_on_a_second_port_is_refused_while_one_runs(tmp_path):
    first, second, folder = free_port(), free_port(), tmp_path / "registry"
    try:
        registry_up(port=first, folder=folder, use_container=False)
        with pytest.raises(RegistryError, match=f"127.0.0.1:{first}.*registry.down"):
            registry_up(port=second, folder=folder, use_container=False)
        assert not answers(second)
        assert "stopped" in registry_down(folder=folder)
        assert not answers(first)
    finally:
        registry_down(folder=folder)
