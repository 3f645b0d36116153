"""What a tool's failure output says about the network, and what the user can do about it.

BuildKit, pip, uv, apt and curl each word an unreachable host their own way, and print it more than once
(the failed step, then "failed to solve" around the same text). A user needs one line: which host, what
went wrong (its name did not resolve, its TLS certificate is not trusted, it refused or timed out) and the
fix. One home for the reading (`network_problem`) and for the advice (`network_advice`), so every task
that reaches an index or registry says the same thing. Standard library only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

DNS, TLS, REFUSED, TIMEOUT = "dns", "tls", "refused", "timeout"

# Most specific first: a TLS failure's text also holds a URL, a DNS failure's may say "timeout".
_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (TLS, re.compile(r"x509: certificate|CERTIFICATE_VERIFY_FAILED|certificate verify failed|invalid peer "
                     r"certificate|SSL certificate problem|self[- ]signed certificate", re.I)),
    (DNS, re.compile(r"no such host|name resolution|Name or service not known|nodename nor servname|"
                     r"Could not resolve host|Temporary failure resolving|failed to lookup address|"
                     r"server misbehaving|dns error|resolving DNS", re.I)),
    (REFUSED, re.compile(r"connection refused|Errno 111", re.I)),
    (TIMEOUT, re.compile(r"i/o timeout|timed out|Connection timeout|operation timed out", re.I)),
)
# Where each tool names the host, in the order tried.
_HOSTS = (
    re.compile(r"lookup ([A-Za-z0-9.-]+)"),  # Go: lookup HOST on 10.0.0.53:53: no such host
    re.compile(r"host='([^']+)'"),  # urllib3 (pip, requests): HTTPSConnectionPool(host='pypi.org', ...)
    re.compile(r"Could not resolve host: ([A-Za-z0-9.-]+)"),  # curl
    re.compile(r"resolving '([^']+)'"),  # apt
    re.compile(r"\bhttps?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])"),  # any URL in the text
)
# The variables a user's tools read a CA bundle from: a TLS failure with one set and no `--ca-bundle`
# means the bundle this machine trusts did not reach the build.
CA_BUNDLE_VARIABLES = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


@dataclass(frozen=True)
class NetworkProblem:
    kind: str  # DNS, TLS, REFUSED or TIMEOUT
    host: str | None  # None: the tool did not name it

    def describe(self) -> str:
        what = self.host or "a host"
        return {
            DNS: f"cannot reach {what}: its name does not resolve (DNS)",
            TLS: f"cannot reach {what}: its TLS certificate is not trusted",
            REFUSED: f"cannot reach {what}: the connection was refused",
            TIMEOUT: f"cannot reach {what}: the connection timed out",
        }[self.kind]


def network_problem(lines: Iterable[str]) -> NetworkProblem | None:
    """The network failure `lines` (a tool's output) report, if any: the first line that names one decides
    its kind; the host is the first one named by a line of that kind (pip's retry warnings name none)."""
    found = [(kind, line) for line in lines for kind, pattern in _KINDS if pattern.search(line)]
    if not found:
        return None
    kind = found[0][0]
    hosts = (_host(line) for k, line in found if k == kind)
    return NetworkProblem(kind, next((h for h in hosts if h), None))


def _host(line: str) -> str | None:
    for pattern in _HOSTS:
        if m := pattern.search(line):
            return m.group(1)
    return None


def network_advice(problem: NetworkProblem, *, ca_option: str | None, ca_given: bool,
                   env: Mapping[str, str] | None = None) -> str:
    """What to do about `problem`: for a TLS failure the CA bundle to pass with `ca_option` (naming the
    variable that holds its path, never the file's contents); otherwise the network, DNS or proxy."""
    env = os.environ if env is None else env
    if problem.kind != TLS:
        return ("check this machine's network, DNS and proxy settings (HTTPS_PROXY, NO_PROXY), or run "
                "where the host can be reached")
    if ca_given:
        return "the CA bundle given does not trust it: pass the bundle of the proxy or CA that signs it"
    if ca_option is None:
        return "make the CA that signs it trusted (the proxy's CA bundle)"
    named = next((name for name in CA_BUNDLE_VARIABLES if env.get(name)), None)
    if named:
        return f"pass {ca_option} ${named} (the CA bundle this machine trusts, from {named}, did not reach the build)"
    return f"pass {ca_option} FILE, the CA bundle of the proxy or CA that signs it"


def explained(text: str, *, ca_option: str | None = None, ca_given: bool = False) -> str | None:
    """"cannot reach HOST: why; what to do" for a failure `text` that is the network's; None otherwise (the
    caller keeps the tool's own words)."""
    problem = network_problem(text.splitlines())
    if problem is None:
        return None
    return f"{problem.describe()}; {network_advice(problem, ca_option=ca_option, ca_given=ca_given)}"
