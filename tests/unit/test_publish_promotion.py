"""All-or-nothing promotion, without Docker: `promote` against an in-memory registry that speaks the
client's interface (tags -> manifest bytes), with failures and real signals injected at chosen calls."""

from __future__ import annotations

import io
import json
import os
import signal

import pytest
from promotion_fixtures import (
    HTTP_500,
    IMMUTABLE,
    MOVING,
    NEW,
    OLD,
    OTHER,
    REPO,
    PromotionRegistry,
    named_manifest,
    promotion_registry,
    released_stack,
)
from rich.console import Console

from sglstack.core.errors import RegistryError
from sglstack.core.signals import Interrupted, signals_raise
from sglstack.publish import PromotionError, PublishError, promote, promotion
from sglstack.publish.promotion import (
    ImmutableTagCollision,
    TagState,
    describe_failure,
)
from sglstack.registry.client import OCI_INDEX, Manifest, compute_digest


@pytest.fixture
def registry():
    return promotion_registry()


@pytest.fixture(scope="module")
def stack(repo_root):
    return released_stack(repo_root)


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


# ---- whole states and whole lines ---------------------------------------------------------------------

LINE = f"stack 'app': registry 127.0.0.1:5000: promotion of {REPO.ref(NEW.digest)} failed"


def test_a_reverted_promotion_says_which_tags_moved_word_for_word(registry):
    registry.fail("put", 3)
    with pytest.raises(PromotionError) as err:
        _promote(registry)
    assert str(err.value) == (
        f"{LINE} at {REPO.ref('app')}: {HTTP_500}; {IMMUTABLE}, 0.5.9-app had moved and were put back "
        "(removed again where they were new): every release tag is unchanged (recorded as reverted)"
    )
    assert err.value.states == (
        TagState(IMMUTABLE, "immutable", None, None, moved=True),
        TagState("0.5.9-app", "moving", OLD.digest, OLD.digest, moved=True),
        TagState("app", "moving", OLD.digest, OLD.digest, moved=False),
    )
    assert err.value.digest == NEW.digest and err.value.cause == HTTP_500
    assert registry.budgets == [PromotionRegistry.timeout_s]  # one deadline for all of the putting back


def test_a_failure_before_any_tag_moved_says_nothing_moved(registry):
    registry.fail("put", 1)
    with pytest.raises(PromotionError) as err:
        _promote(registry)
    assert str(err.value) == (
        f"{LINE} at {REPO.ref(IMMUTABLE)}: {HTTP_500}; no tag had moved, every release tag is unchanged "
        "(recorded as reverted)"
    )
    assert err.value.reverted and err.value.moved == ()
    assert IMMUTABLE not in registry.tags and registry.tags["app"] == OLD.digest


def test_a_partial_promotion_names_each_stuck_tag_and_how_to_finish(registry):
    registry.fail("put", 3)
    registry.fail("put", 4)  # putting 0.5.9-app back
    registry.fail("untag", 1, RegistryError("registry 127.0.0.1:5000: DELETE manifest: HTTP 405"))
    with pytest.raises(PromotionError) as err:
        _promote(registry)
    assert err.value.states == (
        TagState(IMMUTABLE, "immutable", None, NEW.digest, moved=True, error="DELETE manifest: HTTP 405"),
        TagState("0.5.9-app", "moving", OLD.digest, NEW.digest, moved=True, error=HTTP_500),
        TagState("app", "moving", OLD.digest, OLD.digest, moved=False),
    )
    assert str(err.value) == (
        f"{LINE} at {REPO.ref('app')}: {HTTP_500}; moved {IMMUTABLE}, 0.5.9-app; NOT put back: "
        f"{IMMUTABLE} -> {NEW.digest[:19]} (was absent); 0.5.9-app -> {NEW.digest[:19]} (was {OLD.digest[:19]}); "
        f"the release tags disagree (recorded as partial); `invoke publish --stack app --digest {NEW.digest}` "
        "finishes it"
    )


def test_describe_failure_without_a_stack_or_a_failed_tag_ends_cleanly():
    stuck = TagState("app", "moving", None, None, moved=True, known=False, error="HEAD manifest: HTTP 503")
    assert describe_failure(REPO, NEW.digest, None, "interrupted", [stuck]) == (
        f"registry 127.0.0.1:5000: promotion of {REPO.ref(NEW.digest)} failed: interrupted; moved app; "
        "NOT put back: app -> unknown (was absent); the release tags disagree (recorded as partial)"
    )
    back = TagState("app", "moving", OLD.digest, OLD.digest, moved=True)
    assert describe_failure(REPO, NEW.digest, "", "boom", [back, back]) == (
        f"registry 127.0.0.1:5000: promotion of {REPO.ref(NEW.digest)} failed: boom; app, app had moved and "
        "were put back (removed again where they were new): every release tag is unchanged (recorded as reverted)"
    )


def test_a_tag_already_at_the_digest_is_left_alone_and_reported_unmoved(registry):
    registry.tags[IMMUTABLE] = NEW.digest
    registry.fail("put", 2)  # app, after 0.5.9-app moved
    with pytest.raises(PromotionError) as err:
        _promote(registry)
    assert err.value.states == (
        TagState(IMMUTABLE, "immutable", NEW.digest, NEW.digest, moved=False),
        TagState("0.5.9-app", "moving", OLD.digest, OLD.digest, moved=True),
        TagState("app", "moving", OLD.digest, OLD.digest, moved=False),
    )
    assert registry.tags == {"0.5.9-app-20261201-00000000": OLD.digest, IMMUTABLE: NEW.digest,
                             "0.5.9-app": OLD.digest, "app": OLD.digest}


def test_a_tag_another_writer_moved_is_left_and_the_rest_still_go_back(registry):
    def other_writer():
        registry.tags["app"] = OTHER.digest
        raise RegistryError("registry 127.0.0.1:5000: PUT manifest: HTTP 500")

    registry.fail("put", 3, other_writer)  # app comes first in putting back: the others must still go back
    with pytest.raises(PromotionError) as err:
        _promote(registry)
    assert err.value.states == (
        TagState(IMMUTABLE, "immutable", None, None, moved=True),
        TagState("0.5.9-app", "moving", OLD.digest, OLD.digest, moved=True),
        TagState("app", "moving", OLD.digest, OTHER.digest, moved=True, error="moved by another writer"),
    )
    assert registry.tags == {"0.5.9-app-20261201-00000000": OLD.digest, "0.5.9-app": OLD.digest,
                             "app": OTHER.digest}


def test_a_tag_whose_state_cannot_be_read_counts_as_maybe_moved(registry):
    registry.fail("put", 3)
    registry.fail("head", 4, RegistryError("registry 127.0.0.1:5000: HEAD manifest: HTTP 502\nbody"))
    with pytest.raises(PromotionError) as err:
        _promote(registry)
    assert err.value.states[2] == TagState("app", "moving", OLD.digest, OLD.digest, moved=True,
                                           error="HEAD manifest: HTTP 502")
    assert err.value.moved == (IMMUTABLE, "0.5.9-app", "app") and err.value.reverted


def test_a_tag_that_cannot_be_read_back_is_unknown_with_the_first_error(registry):
    registry.fail("put", 3)
    registry.fail("head", 4, RegistryError("registry 127.0.0.1:5000: HEAD manifest: HTTP 502"))
    registry.fail("head", 5, RegistryError("registry 127.0.0.1:5000: HEAD manifest: HTTP 503"))
    registry.fail("head", 7, RegistryError("registry 127.0.0.1:5000: HEAD manifest: HTTP 504"))
    with pytest.raises(PromotionError) as err:
        _promote(registry)
    assert err.value.states == (
        TagState(IMMUTABLE, "immutable", None, None, moved=True),
        TagState("0.5.9-app", "moving", OLD.digest, None, moved=True, known=False, error="HEAD manifest: HTTP 504"),
        TagState("app", "moving", OLD.digest, None, moved=True, known=False, error="HEAD manifest: HTTP 502"),
    )
    assert not err.value.reverted
    assert "NOT put back: 0.5.9-app -> unknown (was sha256:" in str(err.value)
    assert registry.tags["0.5.9-app"] == OLD.digest  # it did go back: only reading it failed


@pytest.mark.parametrize(
    ("raised", "cause"),
    [(RegistryError(), "RegistryError"), (KeyboardInterrupt(), "interrupted"),
     (RegistryError("registry 127.0.0.1:5000: PUT manifest: HTTP 500\ndetails"), HTTP_500)],
)
def test_the_cause_is_the_first_line_without_the_registry_or_the_error_type(registry, raised, cause):
    registry.fail("put", 2, raised)
    failed = []
    with pytest.raises((PromotionError, KeyboardInterrupt)):
        _promote(registry, on_failed=failed.append)
    assert [e.cause for e in failed] == [cause]


def test_a_tag_that_resolves_elsewhere_after_promotion_fails_it(registry):
    registry.fail("head", 5, lambda: registry.tags.update({"0.5.9-app": OTHER.digest}))  # the check of 0.5.9-app
    with pytest.raises(PromotionError) as err:
        _promote(registry)
    assert err.value.cause == (
        f"{REPO.ref('0.5.9-app')} resolves to {OTHER.digest} after promotion, not the tested {NEW.digest}"
    )
    assert str(err.value).startswith(f"{LINE} at {REPO.ref('0.5.9-app')}: {err.value.cause}; moved ")


def test_promotion_without_an_immutable_tag_moves_only_the_moving_tags(registry):
    previous = promote(registry, REPO, NEW.digest, immutable=None, moving=MOVING)  # type: ignore[arg-type]
    assert previous == {"0.5.9-app": OLD.digest, "app": OLD.digest}
    assert registry.tags == {"0.5.9-app-20261201-00000000": OLD.digest, "0.5.9-app": NEW.digest, "app": NEW.digest}


def test_an_immutable_tag_of_another_digest_is_refused_before_anything_moves(registry):
    registry.tags[IMMUTABLE] = OTHER.digest
    with pytest.raises(ImmutableTagCollision) as err:
        _promote(registry)
    assert str(err.value) == (
        f"registry 127.0.0.1:5000: immutable tag {REPO.ref(IMMUTABLE)} already points to {OTHER.digest}, "
        f"not {NEW.digest}; immutable tags are never overwritten"
    )
    assert registry.calls.get("put") is None


def _index(*children: Manifest) -> Manifest:
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX,
                       "manifests": [{"digest": c.digest, "mediaType": c.media_type} for c in children]}).encode()
    return Manifest(media_type=OCI_INDEX, body=body, digest=compute_digest(body))


def test_an_index_is_promoted_only_when_the_repository_has_every_manifest_it_lists(registry):
    amd64, arm64 = named_manifest("amd64"), named_manifest("arm64")
    index = _index(amd64, arm64)
    registry.manifests.update({index.digest: index, amd64.digest: amd64})
    with pytest.raises(PublishError) as err:
        promote(registry, REPO, index.digest, immutable=IMMUTABLE, moving=MOVING)  # type: ignore[arg-type]
    assert str(err.value) == (
        f"registry 127.0.0.1:5000: index {REPO.ref(index.digest)} lists {arm64.digest}, "
        "which the repository does not have"
    )
    assert registry.calls.get("put") is None
    registry.manifests[arm64.digest] = arm64
    promote(registry, REPO, index.digest, immutable=IMMUTABLE, moving=MOVING)  # type: ignore[arg-type]
    assert registry.tags[IMMUTABLE] == registry.tags["app"] == index.digest


class _Stop(BaseException):
    """Neither an Exception nor a signal: promote says what moved on stderr and re-raises it."""


@pytest.fixture
def consoles(monkeypatch):
    made = {flag: Console(file=io.StringIO(), force_terminal=True, color_system="standard", width=1000)
            for flag in (False, True)}
    monkeypatch.setattr(promotion, "console", lambda stderr=False: made[stderr])
    return {flag: c.file for flag, c in made.items()}


def test_an_abort_is_put_back_and_said_plainly_on_stderr(registry, consoles):
    registry.fail("put", 2, _Stop("[bold]stop[/bold]"))
    failed = []
    with pytest.raises(_Stop):
        _promote(registry, on_failed=failed.append)
    assert consoles[True].getvalue() == str(failed[0]) + "\n"  # no markup, no colour: the line as it is
    assert consoles[False].getvalue() == ""
    assert failed[0].cause == "[bold]stop[/bold]"


def test_a_failed_request_is_raised_not_printed(registry, consoles):
    registry.fail("put", 2)
    with pytest.raises(PromotionError):
        _promote(registry)
    assert consoles[True].getvalue() == consoles[False].getvalue() == ""
