"""A build that cannot reach a host says which host, what went wrong and what to do, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglstack.adapters.buildkit import BuildRequest, ProgressParser
from sglstack.core.network import DNS, TLS, NetworkProblem, network_advice, network_problem

# BuildKit's plain progress of an offline pull, and of pip behind a TLS-intercepting proxy (lines as printed)
_HEAD = 'Head "https://registry-1.docker.io/v2/library/ubuntu/manifests/24.04"'
_DNS = "dial tcp: lookup registry-1.docker.io on 10.255.255.53:53: no such host"
OFFLINE_PULL = "\n".join([
    "#1 [internal] load build definition from Dockerfile",
    "#1 DONE 0.0s",
    "#4 [internal] load metadata for docker.io/library/ubuntu:24.04",
    f"#4 ERROR: failed to do request: {_HEAD}: {_DNS}",
    f"failed to solve with frontend dockerfile.v0: failed to create LLB definition: failed to do request: {_HEAD}: "
    f"{_DNS}",
]) + "\n"
_SSL = ("SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to "
        "get local issuer certificate (_ssl.c:1006)'))")
PIP_TLS = "\n".join([
    "#7 [sglang-src 3/6] RUN pip download sglang==0.5.9",
    f"#7 1.20 WARNING: Retrying (Retry(total=4)) after connection broken by '{_SSL}': /simple/sglang/",
    "#7 3.05 Could not fetch URL https://pypi.org/simple/sglang/: There was a problem confirming the ssl "
    f"certificate: HTTPSConnectionPool(host='pypi.org', port=443): Max retries exceeded with url: /simple/sglang/ "
    f"(Caused by {_SSL}) - skipping",
    "#7 3.10 ERROR: Could not find a version that satisfies the requirement sglang==0.5.9",
    '#7 ERROR: process "/bin/sh -c pip download sglang==0.5.9" did not complete successfully: exit code: 1',
]) + "\n"
NO_CA = {}
PIP_CERT = {"PIP_CERT": "/etc/ssl/private-ca.pem"}


def _failure(log: str, secrets: dict[str, Path] | None = None) -> str | None:
    parser = ProgressParser()
    for i, line in enumerate(log.splitlines()):
        parser.feed(line, float(i))
    request = BuildRequest(dockerfile=Path("Dockerfile"), context=Path("context"), target="runtime",
                           secrets=secrets or {})
    return parser.network_failure(request)


def test_an_offline_pull_names_the_host_once_and_the_fix():
    assert _failure(OFFLINE_PULL) == (
        "cannot reach registry-1.docker.io: its name does not resolve (DNS); check this machine's network, DNS "
        "and proxy settings (HTTPS_PROXY, NO_PROXY), or run where the host can be reached")


def test_a_tls_failure_with_pip_cert_set_suggests_passing_it(monkeypatch):
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CERT", "/etc/ssl/private-ca.pem")
    # pip's retry warnings name no host (only the URL path): its "Could not fetch URL" line does
    assert _failure(PIP_TLS) == (
        "cannot reach pypi.org: its TLS certificate is not trusted; pass --ca-bundle $PIP_CERT (the CA bundle this "
        "machine trusts, from PIP_CERT, did not reach the build)")


@pytest.mark.parametrize(("env", "given", "advice"), [
    (PIP_CERT, False, "pass --ca-bundle $PIP_CERT (the CA bundle this machine trusts, from PIP_CERT, did not "
                      "reach the build)"),
    ({"SSL_CERT_FILE": "/x.pem"}, False, "pass --ca-bundle $SSL_CERT_FILE (the CA bundle this machine trusts, "
                                         "from SSL_CERT_FILE, did not reach the build)"),
    (NO_CA, False, "pass --ca-bundle FILE, the CA bundle of the proxy or CA that signs it"),
    (PIP_CERT, True, "the CA bundle given does not trust it: pass the bundle of the proxy or CA that signs it"),
])
def test_tls_advice_names_the_variable_never_its_file(env, given, advice):
    assert network_advice(NetworkProblem(TLS, "pypi.org"), ca_option="--ca-bundle", ca_given=given,
                          env=env) == advice


@pytest.mark.parametrize(("line", "problem"), [
    ("dial tcp: lookup pypi.org on 10.0.0.53:53: no such host", NetworkProblem(DNS, "pypi.org")),
    ("Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': "
     "HTTPSConnectionPool(host='files.pythonhosted.org', port=443)", NetworkProblem(DNS, "files.pythonhosted.org")),
    ("curl: (6) Could not resolve host: github.com", NetworkProblem(DNS, "github.com")),
    ("index https://download.pytorch.org/whl/cu130 unreachable: error resolving DNS",  # uv, as the lock says it
     NetworkProblem(DNS, "download.pytorch.org")),
    ("Temporary failure resolving 'deb.debian.org'", NetworkProblem(DNS, "deb.debian.org")),
    ('Get "https://ghcr.io/v2/": x509: certificate signed by unknown authority', NetworkProblem(TLS, "ghcr.io")),
    ("E: Unable to locate package nosuchpackage", None),
])
def test_each_tools_wording_is_read(line, problem):
    assert network_problem([line]) == problem


def test_a_failure_that_is_not_the_network_keeps_its_summary():
    assert _failure("#7 [runtime 2/9] RUN apt-get install nope\n#7 ERROR: exit code: 100\n") is None
