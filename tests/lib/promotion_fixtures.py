"""The promotion tests' registry and stack (tests/unit/test_publish_promotion.py and
test_publish_records_writable.py): a stand-in for the calls `promote` makes (tags -> manifest bytes) with
failures injected at chosen calls, the release tags, and the stack the records name."""

from __future__ import annotations

import contextlib
import json

from sglstack.config.imageref import parse_repository
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import RegistryError
from sglstack.registry.client import DOCKER_MANIFEST, Manifest, ManifestNotFound, compute_digest

REPO = parse_repository("127.0.0.1:5000/team/app")
IMMUTABLE, MOVING = "0.5.9-app-20261202-1a2b3c4d", ("0.5.9-app", "app")
HTTP_500 = "PUT manifest: HTTP 500"


def named_manifest(name: str) -> Manifest:
    body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {"digest": name}, "layers": []})
    return Manifest(media_type=DOCKER_MANIFEST, body=body.encode(), digest=compute_digest(body.encode()))


class PromotionRegistry:
    """Tags and manifests in a dict; `fail(call, n)` makes the n-th such call raise (or run a callable)."""

    timeout_s = 5.0

    def __init__(self, *manifests: Manifest) -> None:
        self.manifests = {m.digest: m for m in manifests}
        self.tags: dict[str, str] = {}
        self.calls: dict[str, int] = {}
        self.faults: dict[tuple[str, int], object] = {}
        self.ghosts: list[str] = []  # listed by list_tags, yet gone by the time they are read
        self.budgets: list[float] = []

    def fail(self, call: str, nth: int, what: object = None) -> None:
        self.faults[(call, nth)] = what or RegistryError("registry 127.0.0.1:5000: PUT manifest: HTTP 500")

    def _count(self, call: str, repo: str = REPO.path) -> None:
        if repo != REPO.path:  # every request names the repository it is about
            raise AssertionError(f"{call} asked about repository {repo!r}")
        self.calls[call] = self.calls.get(call, 0) + 1
        what = self.faults.get((call, self.calls[call]))
        if callable(what):
            what()
        elif isinstance(what, BaseException):
            raise what

    @contextlib.contextmanager
    def budget(self, seconds: float):
        self.budgets.append(seconds)
        yield

    def get_manifest(self, repo: str, reference: str) -> Manifest:
        self._count("get", repo)
        digest = self.tags.get(reference, reference)
        if digest not in self.manifests:
            raise ManifestNotFound(f"{reference} not found")
        return self.manifests[digest]

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        self._count("head", repo)
        return reference if reference in self.manifests else self.tags.get(reference)

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        self._count("put", repo)
        if media_type != self.manifests[compute_digest(body)].media_type:
            raise AssertionError(f"PUT of {reference} as {media_type}")
        self.tags[reference] = compute_digest(body)
        return compute_digest(body)

    def untag(self, repo: str, tag: str) -> None:
        self._count("untag", repo)
        del self.tags[tag]

    def list_tags(self, repo: str) -> list[str]:
        self._count("list", repo)
        return [*self.tags, *self.ghosts]


OLD, NEW, OTHER = named_manifest("old"), named_manifest("new"), named_manifest("other")


def promotion_registry() -> PromotionRegistry:
    """The registry before a promotion: OLD behind the last release's tags (the tests' `registry` fixture)."""
    reg = PromotionRegistry(OLD, NEW, OTHER)
    reg.tags.update({"0.5.9-app-20261201-00000000": OLD.digest, "0.5.9-app": OLD.digest, "app": OLD.digest})
    return reg


HASH = "1a2b3c4d5e6f77889900aabbccddeeff00112233445566778899aabbccddeeff"


def released_stack(repo_root):
    """The stack the records name (the tests' `stack` fixture)."""
    return load_matrix(repo_root / "stacks.yaml").get("cu130")
