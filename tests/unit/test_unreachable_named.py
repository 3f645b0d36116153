"""A failure that is the network's says so, in the house's one wording (core/network), where the tool's own
last line said something else: pip's "No matching distribution" for an index it never reached, the Docker
engine's raw dial error for a pull."""

from __future__ import annotations

import subprocess

import docker.errors
import pytest

from sglstack.adapters import wheels
from sglstack.attest import shown as attest
from sglstack.attest.errors import AttestationError

ADVICE = ("check this machine's network, DNS and proxy settings (HTTPS_PROXY, NO_PROXY), or run where the host "
          "can be reached")
PIP_OFFLINE = (
    "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection "
    "broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPConnection object at 0x7f>: Failed to "
    "establish a new connection: [Errno 111] Connection refused')': /simple/sglang/\n"
    "ERROR: No matching distribution found for sglang\n")


def test_pip_index_versions_with_no_index_reached_says_so(monkeypatch):
    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", PIP_OFFLINE))
    with pytest.raises(wheels.WheelFetchError) as err:
        wheels.available_versions("sglang")
    assert str(err.value) == f"pip index versions sglang: cannot reach a host: the connection was refused; {ADVICE}"


def test_pip_index_versions_of_a_name_the_index_lacks_keeps_pips_answer(monkeypatch):
    said = "ERROR: No matching distribution found for nothing-here\n"
    monkeypatch.setattr(wheels.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 1, "", said))
    with pytest.raises(wheels.WheelFetchError) as err:
        wheels.available_versions("nothing-here")
    assert str(err.value) == "pip index versions nothing-here: ERROR: No matching distribution found for nothing-here"


class _Images:
    def get(self, ref):
        raise docker.errors.ImageNotFound("no such image")

    def pull(self, ref):
        raise docker.errors.APIError("500", explanation='Get "https://registry-1.docker.io/v2/": dial tcp: lookup '
                                                        "registry-1.docker.io on 10.0.0.53:53: no such host")


class _Client:
    images = _Images()


def test_an_sbom_of_an_image_the_engine_cannot_pull_names_the_host_and_the_fix(monkeypatch):
    monkeypatch.setattr(attest, "docker_client", lambda host: _Client())
    with pytest.raises(AttestationError) as err:
        attest._listed_sbom("sglstack/x:1", None)
    assert str(err.value) == ("image 'sglstack/x:1' is neither attached to a registry SBOM nor pullable: cannot "
                              f"reach registry-1.docker.io: its name does not resolve (DNS); {ADVICE}")
