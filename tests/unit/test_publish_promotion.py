"""All-or-nothing promotion, without Docker: `promote` against an in-memory registry that speaks the
client's interface (tags -> manifest bytes), with failures and real signals injected at chosen calls."""

from __future__ import annotations

import contextlib
import json
import os
import signal

import pytest

from sglstack.config.imageref import parse_repository
from sglstack.core.errors import RegistryError
from sglstack.core.signals import Interrupted, signals_raise
from sglstack.publish import PromotionError, promote
from sglstack.registry.client import DOCKER_MANIFEST, Manifest, ManifestNotFound, compute_digest

REPO = parse_repository("127.0.0.1:5000/team/app")
IMMUTABLE, MOVING = "0.5.9-app-20261202-1a2b3c4d", ("0.5.9-app", "app")


def _manifest(name: str) -> Manifest:
    body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {"digest": name}, "layers": []})
    return Manifest(media_type=DOCKER_MANIFEST, body=body.encode(), digest=compute_digest(body.encode()))


class MemoryRegistry:
    """Tags and manifests in a dict; `fail(call, n)` makes the n-th such call raise (or run a callable)."""

    timeout_s = 5.0

    def __init__(self, *manifests: Manifest) -> None:
        self.manifests = {m.digest: m for m in manifests}
        self.tags: dict[str, str] = {}
        self.calls: dict[str, int] = {}
        self.faults: dict[tuple[str, int], object] = {}

    def fail(self, call: str, nth: int, what: object = None) -> None:
        self.faults[(call, nth)] = what or RegistryError("registry 127.0.0.1:5000: PUT manifest: HTTP 500")

    def _count(self, call: str) -> None:
        self.calls[call] = self.calls.get(call, 0) + 1
        what = self.faults.get((call, self.calls[call]))
        if callable(what):
            what()
        elif isinstance(what, BaseException):
            raise what

    @contextlib.contextmanager
    def budget(self, seconds: float):
        yield

    def get_manifest(self, repo: str, reference: str) -> Manifest:
        self._count("get")
        digest = self.tags.get(reference, reference)
        if digest not in self.manifests:
            raise ManifestNotFound(f"{reference} not found")
        return self.manifests[digest]

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        self._count("head")
        return self.tags.get(reference)

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        self._count("put")
        self.tags[reference] = compute_digest(body)
        return compute_digest(body)

    def untag(self, repo: str, tag: str) -> None:
        self._count("untag")
        del self.tags[tag]


OLD, NEW, OTHER = _manifest("old"), _manifest("new"), _manifest("other")


@pytest.fixture
def registry():
    reg = MemoryRegistry(OLD, NEW, OTHER)
    reg.tags.update({"0.5.9-app-20261201-00000000": OLD.digest, "0.5.9-app": OLD.digest, "app": OLD.digest})
    return reg


def _promote(reg, **kw):
    return promote(reg, REPO, NEW.digest, immutable=IMMUTABLE, moving=MOVING, stack="app", **kw)  # type: ignore[arg-type]


def test_success_returns_what_each_tag_had_and_records_once(registry):
    recorded, failed = [], []
    previous = _promote(registry, on_promoted=recorded.append, on_failed=failed.append)
    assert previous == {IMMUTABLE: None, "0.5.9-app": OLD.digest, "app": OLD.digest}
    assert all(registry.tags[t] == NEW.digest for t in (IMMUTABLE, *MOVING))
    assert recorded == [previous] and failed == []


def test_a_failed_third_put_puts_the_two_moved_tags_back(registry):
    registry.fail("put", 3)
    failed = []
    with pytest.raises(PromotionError) as err:
        _promote(registry, on_promoted=lambda p: pytest.fail("recorded a failed promotion"), on_failed=failed.append)
    assert IMMUTABLE not in registry.tags  # created by the promotion: removed again
    assert registry.tags["0.5.9-app"] == registry.tags["app"] == OLD.digest
    assert failed == [err.value] and err.value.reverted and err.value.moved == (IMMUTABLE, "0.5.9-app")
    assert "failed at 127.0.0.1:5000/team/app:app: PUT manifest: HTTP 500" in str(err.value)


def test_an_existing_immutable_tag_is_neither_rewritten_nor_removed(registry):
    registry.tags[IMMUTABLE] = NEW.digest  # published before: this is a re-promotion of the same digest
    registry.fail("put", 2)
    with pytest.raises(PromotionError) as err:
        _promote(registry)
    assert registry.tags[IMMUTABLE] == NEW.digest and registry.tags["app"] == registry.tags["0.5.9-app"] == OLD.digest
    assert registry.calls.get("untag") is None
    assert err.value.moved == ("0.5.9-app",)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_during_a_put_puts_everything_back_and_still_ends_the_task(registry, sig):
    registry.fail("put", 3, lambda: os.kill(os.getpid(), sig))
    failed = []
    with signals_raise(), pytest.raises(Interrupted) as raised:
        _promote(registry, on_failed=failed.append)
    assert raised.value.signum == sig
    assert IMMUTABLE not in registry.tags and registry.tags["app"] == registry.tags["0.5.9-app"] == OLD.digest
    assert failed and failed[0].reverted and failed[0].cause == f"interrupted by {sig.name}"


def test_a_signal_while_recording_waits_until_the_record_is_written(registry):
    rows = []

    def record(previous):
        os.kill(os.getpid(), signal.SIGTERM)  # held: the record must be written whole
        rows.append(previous)

    with signals_raise(), pytest.raises(Interrupted):
        _promote(registry, on_promoted=record, on_failed=lambda e: pytest.fail("reverted a recorded promotion"))
    assert len(rows) == 1 and all(registry.tags[t] == NEW.digest for t in (IMMUTABLE, *MOVING))


def test_a_signal_while_putting_back_does_not_cut_it_short(registry):
    registry.fail("put", 3)
    registry.fail("put", 4, lambda: os.kill(os.getpid(), signal.SIGTERM))  # the first put-back PUT
    with signals_raise(), pytest.raises(Interrupted):
        _promote(registry)
    assert IMMUTABLE not in registry.tags and registry.tags["app"] == registry.tags["0.5.9-app"] == OLD.digest


def test_a_registry_that_refuses_to_be_put_back_is_reported_partial(registry):
    registry.fail("put", 3)
    registry.fail("put", 4)  # putting 0.5.9-app back fails too
    with pytest.raises(PromotionError) as err:
        _promote(registry)
    assert not err.value.reverted
    states = {s.tag: s for s in err.value.states}
    assert states["0.5.9-app"].now == NEW.digest and states["0.5.9-app"].before == OLD.digest
    assert states[IMMUTABLE].put_back and states["app"].put_back and not states["app"].moved
    line = str(err.value)
    assert f"NOT put back: 0.5.9-app -> {NEW.digest[:19]} (was {OLD.digest[:19]})" in line
    assert f"`invoke publish --stack app --digest {NEW.digest}` finishes it" in line


def test_a_tag_another_writer_moved_meanwhile_is_left_to_them(registry):
    def other_writer():
        registry.tags["0.5.9-app"] = OTHER.digest
        raise RegistryError("registry 127.0.0.1:5000: PUT manifest: HTTP 500")

    registry.fail("put", 3, other_writer)
    with pytest.raises(PromotionError) as err:
        _promote(registry)
    assert registry.tags["0.5.9-app"] == OTHER.digest  # not clobbered with ours or the old one
    assert {s.tag: s.error for s in err.value.states}["0.5.9-app"] == "moved by another writer"
    assert not err.value.reverted
