"""The uv adapter: its output and error parsing (from uv's real formats); real `uv pip compile` runs are
tests/e2e/test_lock_resolver_uv.py."""

from __future__ import annotations

import pytest

from sglstack.adapters.uv import (
    ResolutionConflict,
    ResolveRequest,
    ResolverError,
    SourceUnreachable,
    classify_failure,
    compile_many,
    conflict_sides,
    parse_compiled,
)
from sglstack.core.credentials import public_url

# uv 0.13's output with --generate-hashes --emit-index-annotation (split annotations), abridged hashes.
UV_OUTPUT = """\
certifi==2024.8.30 \\
    --hash=sha256:922820b53db7a7257ffbda3f597266d435245903d80737e34f8a45ff3e3230d8 \\
    --hash=sha256:bec941d2aa8195e248a60b31ff9f0558284cf01a52591ceda73ea9afffd69fd9
    # via requests
    # from https://pypi.org/simple
requests==2.32.3 \\
    --hash=sha256:55365417734eb18255590a9ff9eb97e9e1da868d4ccd6402399eaf68af20a760
    # via
    #   -r requirements.in
    #   huggingface-hub
    # from https://user:secret@mirror.example/simple
sgl-kernel @ https://example.invalid/sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl \\
    --hash=sha256:70e6a4cc56e8e1a8d65a3dbb5d1fd2d2f6b63dc8fb63fdd2bc8a4c2ed7c1d1ef
    # via -r requirements.in
"""


def test_uv_output_becomes_typed_packages():
    certifi, requests, kernel = parse_compiled(UV_OUTPUT)
    assert certifi.name == "certifi" and certifi.version == "2024.8.30" and len(certifi.hashes) == 2
    assert certifi.required_by == ("requests",) and not certifi.direct
    assert requests.direct and requests.required_by == ("huggingface-hub",)
    assert requests.index == "https://mirror.example/simple"  # credentials never leave the adapter
    assert kernel.url.endswith("x86_64.whl") and kernel.version == "" and kernel.direct


def test_public_url_keeps_everything_but_credentials():
    assert public_url("https://u:p@host:8443/simple") == "https://host:8443/simple"
    assert public_url("https://pypi.org/simple") == "https://pypi.org/simple"


def test_an_unreachable_index_is_told_apart_from_a_missing_pin():
    unreachable = classify_failure(
        "warning: The requested Python version 3.12 is not available; 3.11.7 will be used to build dependencies "
        "instead.\nerror: Request failed after 3 retries in 5.1s\n"
        "  Caused by: Failed to fetch: `https://download.pytorch.org/whl/cu130/torch/`\n"
        "  cause: error sending request for url (https://download.pytorch.org/whl/cu130/torch/)\n"
        "  cause: client error (Connect)\n  cause: dns error\n")
    assert isinstance(unreachable, SourceUnreachable)
    assert unreachable.url == "https://download.pytorch.org/whl/cu130/torch/"
    assert unreachable.cause == "dns error"
    missing = classify_failure("error: No solution found when resolving dependencies\n  cause: Because there is no "
                               "version of requests==99.0 and you require requests==99.0, we can conclude that your "
                               "requirements are unsatisfiable.\n")
    assert isinstance(missing, ResolutionConflict)
    assert [str(s) for s in missing.sides] == ["no release matches requests==99.0",
                                               "the stack requires requests==99.0"]
    other = classify_failure("error: Failed to parse `requirements.in`\n  cause: bad line\n")
    assert type(other) is ResolverError and "\n" not in str(other)


@pytest.mark.parametrize(("explanation", "sides"), [
    ("Because typing-inspection==0.4.0 depends on typing-extensions>=4.12.0 and you require typing-extensions==4.0.0, "
     "we can conclude that your requirements and typing-inspection==0.4.0 are incompatible. And because you require "
     "typing-inspection==0.4.0, we can conclude that your requirements are unsatisfiable.",
     ["typing-inspection==0.4.0 requires typing-extensions>=4.12.0", "the stack requires typing-extensions==4.0.0"]),
    ("Because transformers==4.57.1 depends on huggingface-hub>=0.34.0,<1.0 and sglang==0.5.9 depends on "
     "transformers==4.57.1, we can conclude that sglang==0.5.9 depends on huggingface-hub>=0.34.0,<1.0. And because "
     "you require sglang==0.5.9 and huggingface-hub==0.20.0, we can conclude that your requirements are "
     "unsatisfiable.",
     ["transformers==4.57.1 (needed by sglang==0.5.9) requires huggingface-hub>=0.34.0,<1.0",
      "the stack requires huggingface-hub==0.20.0"]),
])
def test_conflict_sides_are_the_two_requirements_on_one_package(explanation, sides):
    assert [str(s) for s in conflict_sides(explanation)] == sides








def test_each_failed_resolution_is_redacted_with_its_own_logins(monkeypatch):
    # uv echoing a request's password in its error: the first request's must be cut with the first's logins,
    # not with those of the last request started (the bug: the loop variable of the start loop was reused).
    import sys

    from sglstack.adapters import uv as resolver
    from sglstack.core.credentials import HostLogin

    def failing_argv(request, workdir):
        secret = request.logins[0].password
        return [sys.executable, "-c", f"import sys; sys.stderr.write('error: login refused, password {secret}\\n'); "
                                      "sys.exit(1)"]

    monkeypatch.setattr(resolver, "compile_argv", failing_argv)
    base = {"requirements": ("idna",), "python_version": "3.11", "python_platform": "x86_64-manylinux_2_28"}
    first = ResolveRequest(**base, logins=(HostLogin("a.example", "u", "first-secret-1"),))
    second = ResolveRequest(**base, logins=(HostLogin("b.example", "u", "second-secret-2"),))
    results = compile_many([first, second])
    assert all(isinstance(r, ResolverError) for r in results)
    texts = [str(r) for r in results]
    assert "first-secret-1" not in texts[0] and "second-secret-2" not in texts[1]
