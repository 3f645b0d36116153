"""The records a promotion writes (`promote_recorded`), `--registry`, and what is already published: against the
in-memory registry of tests/lib/promotion_fixtures, failures injected at chosen calls."""

from __future__ import annotations

import pytest
from promotion_fixtures import (
    HASH,
    HTTP_500,
    IMMUTABLE,
    MOVING,
    NEW,
    OLD,
    OTHER,
    REPO,
    PromotionRegistry,
    promotion_registry,
    released_stack,
)

from sglstack.core.errors import ConfigError, RegistryError
from sglstack.publish import PromotionError, target_repository
from sglstack.publish.history import read_records
from sglstack.publish.promotion import (
    already_published,
    promote_recorded,
)


@pytest.fixture
def registry():
    return promotion_registry()


@pytest.fixture(scope="module")
def stack(repo_root):
    return released_stack(repo_root)


# ---- --registry, already published, and the records promotion writes ------------------------------

def _with_repository(stack, repository):
    return stack.model_copy(update={"publish": stack.publish.model_copy(update={"repository": repository})})


INVALID = "is not a valid repository (lowercase path components like 'host:port/team/name')"


@pytest.mark.parametrize(
    ("repository", "registry", "message"),
    [
        ("Bad/Name", None, f"stack 'cu130': key 'publish.repository': 'Bad/Name' {INVALID}"),
        ("127.0.0.1:5000/sglstack/sglang", "ghcr.io/Team/x",
         f"stack 'cu130': key '--registry': 'ghcr.io/Team/x' {INVALID}"),
        ("127.0.0.1:5000/sglstack/sglang", "bad_host!",
         f"stack 'cu130': key '--registry': 'bad_host!/sglstack/sglang' {INVALID}"),
    ],
)
def test_a_bad_repository_names_the_stack_and_where_it_came_from(stack, repository, registry, message):
    with pytest.raises(ConfigError) as err:
        target_repository(_with_repository(stack, repository), registry)
    assert str(err.value) == message


def test_already_published_finds_the_first_immutable_tag_of_this_config_on_any_date(stack):
    reg = PromotionRegistry(OLD, NEW, OTHER)
    reg.tags.update({"0.5.9-cu130-20261201-1a2b3c4d": OTHER.digest, "0.5.9-cu130-20261130-1a2b3c4d": NEW.digest,
                     "0.5.9-cu130-20261129-ffffffff": OLD.digest, "cu130": NEW.digest})
    reg.ghosts.append("0.5.9-cu130-20261128-1a2b3c4d")  # listed, but deleted before it was read
    assert already_published(reg, REPO, stack, HASH) == ("0.5.9-cu130-20261130-1a2b3c4d", NEW.digest)
    del reg.tags["0.5.9-cu130-20261130-1a2b3c4d"], reg.tags["0.5.9-cu130-20261201-1a2b3c4d"]
    assert already_published(reg, REPO, stack, HASH) is None


def _rows(path):
    return [{k: v for k, v in row.items() if k != "time"} for row in read_records(path)]


def _row(event, tag, kind, **extra):
    return {"event": event, "stack": "cu130", "repository": str(REPO), "tag": tag, "kind": kind,
            "digest": NEW.digest, "config_hash": HASH, **extra}


def test_promote_recorded_writes_one_line_per_tag_with_the_real_previous_digest(stack, registry, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path))
    records, report = tmp_path / "publish" / "records.jsonl", tmp_path / "smoke.json"
    report.write_text("{}")
    registry.tags.update({IMMUTABLE: NEW.digest, "0.5.9-app": NEW.digest})  # an earlier promotion got this far
    hint = {"0.5.9-app": OLD.digest, "app": OTHER.digest}
    previous = promote_recorded(registry, REPO, stack, NEW.digest, config_hash=HASH, immutable=IMMUTABLE,
                                moving=MOVING, event="published", records=records, smoke_report=str(report),
                                previous_hint=hint)  # type: ignore[arg-type]
    assert previous == {IMMUTABLE: NEW.digest, "0.5.9-app": NEW.digest, "app": OLD.digest}
    sha = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    extra = {"smoke_report": str(report), "smoke_report_sha256": sha}
    assert _rows(records) == [
        _row("published", IMMUTABLE, "immutable", previous=NEW.digest, **extra),
        _row("published", "0.5.9-app", "moving", previous=OLD.digest, **extra),
        _row("published", "app", "moving", previous=OLD.digest, **extra),
    ]


def test_promote_recorded_without_a_hint_or_report(stack, registry, tmp_path, monkeypatch):
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path))
    records = tmp_path / "publish" / "records.jsonl"
    promote_recorded(registry, REPO, stack, NEW.digest, config_hash=HASH, immutable=IMMUTABLE, moving=("app",),
                     event="rollback", records=records)  # type: ignore[arg-type]
    extra = {"smoke_report": None, "smoke_report_sha256": None}
    assert _rows(records) == [_row("rollback", IMMUTABLE, "immutable", previous=None, **extra),
                              _row("rollback", "app", "moving", previous=OLD.digest, **extra)]


def _failed_row(outcome, tag, kind, previous, now, *, known=True, moved, put_back, error=None, cause=HTTP_500):
    return _row(outcome, tag, kind, previous=previous, now=now, now_known=known, moved=moved, put_back=put_back,
                error=error, cause=cause, smoke_report="smoke.json")


def test_a_reverted_promotion_records_every_tag_as_reverted(stack, registry, tmp_path, monkeypatch):
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path))
    records = tmp_path / "publish" / "records.jsonl"
    registry.fail("put", 3)
    with pytest.raises(PromotionError) as err:
        promote_recorded(registry, REPO, stack, NEW.digest, config_hash=HASH, immutable=IMMUTABLE, moving=MOVING,
                         event="published", records=records, smoke_report="smoke.json")  # type: ignore[arg-type]
    assert str(err.value) == (
        f"stack 'cu130': registry 127.0.0.1:5000: promotion of {REPO.ref(NEW.digest)} failed at {REPO.ref('app')}: "
        f"{HTTP_500}; {IMMUTABLE}, 0.5.9-app had moved and were put back (removed again where they were new): "
        "every release tag is unchanged (recorded as reverted)"
    )
    assert _rows(records) == [
        _failed_row("reverted", IMMUTABLE, "immutable", None, None, moved=True, put_back=True),
        _failed_row("reverted", "0.5.9-app", "moving", OLD.digest, OLD.digest, moved=True, put_back=True),
        _failed_row("reverted", "app", "moving", OLD.digest, OLD.digest, moved=False, put_back=True),
    ]


def test_a_partial_promotion_records_where_each_tag_was_left(stack, registry, tmp_path, monkeypatch):
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path))
    records = tmp_path / "publish" / "records.jsonl"
    registry.fail("put", 3)
    registry.fail("put", 4)  # putting 0.5.9-app back
    # reading IMMUTABLE back, after it was removed again:
    registry.fail("head", 9, RegistryError("registry 127.0.0.1:5000: HEAD manifest: HTTP 503"))
    with pytest.raises(PromotionError):
        promote_recorded(registry, REPO, stack, NEW.digest, config_hash=HASH, immutable=IMMUTABLE, moving=MOVING,
                         event="published", records=records, smoke_report="smoke.json")  # type: ignore[arg-type]
    assert _rows(records) == [
        _failed_row("partial", IMMUTABLE, "immutable", None, None, known=False, moved=True, put_back=False,
                    error="HEAD manifest: HTTP 503"),
        _failed_row("partial", "0.5.9-app", "moving", OLD.digest, NEW.digest, moved=True, put_back=False,
                    error=HTTP_500),
        _failed_row("partial", "app", "moving", OLD.digest, OLD.digest, moved=False, put_back=True),
    ]
