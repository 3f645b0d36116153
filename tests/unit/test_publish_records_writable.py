"""Publish records and release tags agree whatever fails: a promotion whose records cannot be written is
not started, and one whose record fails once the tags moved puts them back (the same class as deploy's
records, `tests/cli/test_deploy_store_trust.py`)."""

from __future__ import annotations

import pytest
from promotion_fixtures import HASH, IMMUTABLE, MOVING, NEW, REPO, promotion_registry, released_stack

from sglstack.core.safefiles import OutputNotWritable
from sglstack.publish import promotion
from sglstack.publish.promotion import PromotionError, promote_recorded


@pytest.fixture
def registry():
    return promotion_registry()


@pytest.fixture(scope="module")
def stack(repo_root):
    return released_stack(repo_root)


def _promote(registry, stack, records):
    return promote_recorded(registry, REPO, stack, NEW.digest, config_hash=HASH, immutable=IMMUTABLE,
                            moving=MOVING, event="published", records=records)  # type: ignore[arg-type]


def test_a_promotion_whose_records_lead_out_of_the_build_folder_moves_no_tag(
        stack, registry, tmp_path, monkeypatch) -> None:
    root = tmp_path / "build"
    root.mkdir()
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(root))
    (tmp_path / "outside").mkdir()
    (root / "publish").symlink_to(tmp_path / "outside")
    before = dict(registry.tags)
    with pytest.raises(OutputNotWritable) as info:
        _promote(registry, stack, root / "publish" / "records.jsonl")
    assert str(info.value) == (
        f"{root / 'publish'}: a link to {tmp_path / 'outside'}, outside {root}: not followed (nothing under the "
        "build folder is written through a link out of it; remove the link)")
    assert registry.tags == before and registry.calls.get("put", 0) == 0
    assert list((tmp_path / "outside").iterdir()) == []


def test_a_promotion_whose_record_cannot_be_written_puts_the_tags_back(
        stack, registry, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path))
    records = tmp_path / "publish" / "records.jsonl"

    def full(path, rows):
        raise OutputNotWritable(f"{path}: the record was not written (No space left on device); the file is as "
                                "it was")

    monkeypatch.setattr(promotion, "append_records", full)  # the disk filled after the probe
    before = dict(registry.tags)
    with pytest.raises(PromotionError):
        _promote(registry, stack, records)
    assert registry.tags == before  # the tags are where the records (which never moved) say
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {records}: the record was not written (No space left on device); the file is as it was: this "
        "outcome is not recorded"]
