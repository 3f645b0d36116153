"""A scripted resolver that answers as uv does (`Uv`), over a small dependency graph: the lock tests' double,
shared with the upgrade's per-platform tests."""

from __future__ import annotations

from packaging.requirements import Requirement

from sglstack.adapters.uv import Resolution, ResolvedPackage, ResolveRequest, ResolverError

HASH_A = "sha256:" + "a" * 64
GRAPH = {"sglang": ["requests", "sglang-kernel"], "requests": ["idna"], "sglang-kernel": ["numpy"], "six": []}
VERSIONS = {"sglang": "0.5.23", "requests": "2.32.5", "idna": "3.11", "sglang-kernel": "0.4.10", "numpy": "2.3.4",
            "six": "1.16.0", "nvcc-tool": "13.0.88"}


class Uv:
    """Resolves GRAPH like uv (every package hashed), or fails as told; records every request."""

    def __init__(self, *answers: Resolution | ResolverError, platforms_differ: bool = False) -> None:
        self.answers = list(answers)  # main resolutions, in order; then GRAPH
        self.requests: list[ResolveRequest] = []
        self.platforms_differ = platforms_differ

    def __call__(self, requests):
        out = []
        for request in requests:
            self.requests.append(request)
            if not request.no_deps and self.answers:
                out.append(self.answers.pop(0))
                continue
            out.append(self.resolve(request))
        return out

    def resolve(self, request: ResolveRequest) -> Resolution:
        roots = [Requirement(r).name for r in request.requirements]
        by: dict[str, set[str]] = {n: set() for n in roots}
        todo = [] if request.no_deps else list(roots)
        while todo:
            name = todo.pop()
            for child in GRAPH.get(name, ()):
                if child not in request.excludes:
                    todo += [] if child in by else [child]
                    by.setdefault(child, set()).add(name)
        arm = request.python_platform.startswith("aarch64")
        version = {**VERSIONS, "idna": "3.10"} if self.platforms_differ and arm else VERSIONS
        return Resolution(packages=tuple(
            ResolvedPackage(name=n, version=version.get(n, "1.0"), hashes=(HASH_A,), required_by=tuple(sorted(b)),
                            index="https://pypi.org/simple") for n, b in sorted(by.items())),
            uv_version="0.13.9", seconds=0.1)
