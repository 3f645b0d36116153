"""`invoke upgrade` recommends the last smoke sweep's speculative setting (issue 42, item 4): shown in the report,
written into the stack's serving.speculative only with --write (through the byte-stable editor, that stack only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from upgrade_fixtures import World, lock_of

from sglstack.cli.upgrade import upgrade_command
from sglstack.config.matrix import load_matrix
from sglstack.lockfile.model import lock_path
from sglstack.upgrade import speculative
from sglstack.upgrade import world as upgrade_world
from sglstack.upgrade.speculative import sweep_advice

STACKS = """\
# the matrix
defaults:
  python: "3.12"
  serving:
    model: org/model
    speculative:
      draft_model: org/draft   # the draft
      num_steps: 3
      eagle_topk: 1
      num_draft_tokens: 4

stacks:
  s1:
    description: SGLang 0.5.9 on Debian
    base_image: debian:bookworm-slim
    sglang:
      version: 0.5.9

  s2:
    description: the other one
    base_image: debian:bookworm-slim
    sglang:
      version: 0.5.9
"""


def _row(level: int, setting: str | None, speedup: float | None, pays: bool = True) -> dict[str, Any]:
    return {"concurrency": level, "setting": setting, "speedup": speedup, "pays": pays}


def sweep_report(stack: str = "s1", recommended: str | None = "7:1:8") -> dict[str, Any]:
    """A smoke report with a sweep, as fields.sweep_fields writes it (the issue's table: 7 steps pays at 1 and 4)."""
    rec = None
    if recommended is not None:
        steps, topk, tokens = (int(n) for n in recommended.split(":"))
        rec = {"setting": recommended, "num_steps": steps, "eagle_topk": topk, "num_draft_tokens": tokens,
               "configured": recommended == "3:1:4", "worst_speedup": 1.84}
    return {"stack": stack, "time": "2026-12-05T04:00:00Z",
            "sweep": {"levels": [1, 4], "recommended": rec,
                      "best": [_row(1, "7:1:8", 3.17), _row(4, "7:1:8", 1.84)], "settings": []}}


@pytest.fixture()
def repo(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path / "build"))
    (tmp_path / "stacks.yaml").write_text(STACKS)
    return tmp_path / "stacks.yaml"


def _stack(repo: Path, name: str = "s1"):
    return load_matrix(repo).get(name)


def test_the_advice_names_the_recommended_setting_and_the_edit(repo):
    advice = sweep_advice(_stack(repo), sweep_report(), "build/s1/smoke-report.json")
    assert advice["current"] == "3:1:4" and advice["found"] is True
    assert advice["edits"] == {"serving": {"speculative": {"num_steps": 7, "eagle_topk": 1, "num_draft_tokens": 8}}}
    assert advice["lines"][-1] == ("Recommended: 7:1:8 instead of the stack's 3:1:4 (1.84x at its worst level); "
                                   "`--write` writes it into the entry's serving.speculative with the upgrade.")
    assert "| concurrency 4 | 7:1:8 | 1.84x |" in advice["lines"]


def test_no_edit_when_the_stack_already_has_it_none_passes_or_no_sweep_is_recorded(repo):
    stack = _stack(repo)
    same = sweep_advice(stack, sweep_report(recommended="3:1:4"), "r.json")
    assert same["edits"] == {} and same["lines"][-1].startswith("The stack's setting 3:1:4 is the recommended one")
    none = sweep_advice(stack, sweep_report(recommended=None), "r.json")
    assert none["edits"] == {} and none["lines"][-1] == (
        "No setting passed every gate at every level: the stack keeps 3:1:4.")
    for report in (None, sweep_report(stack="s2"), {"stack": "s1", "verdict": "pass"}):
        missing = sweep_advice(stack, report, "build/s1/smoke-report.json")
        assert missing["found"] is False and missing["edits"] == {}
        assert missing["lines"] == ["No sweep recorded for stack 's1' (`build/s1/smoke-report.json`): `invoke smoke "
                                    "--stack s1 --sweep 3:1:4,7:1:8` measures the settings and names the best per "
                                    "level."]


def _world(tmp_path: Path, report: dict[str, Any] | None) -> upgrade_world.Engines:
    world = World(tmp_path, lock=lock_of("s1", sglang="0.5.10"))
    return world.engines(sweep_report=lambda stack: (report, f"build/{stack.name}/smoke-report.json"))


def test_without_write_the_report_recommends_and_nothing_is_written(repo, tmp_path):
    code = upgrade_command(str(repo), "s1", "0.5.10", engines=_world(tmp_path, sweep_report()))
    assert code == 0 and repo.read_text() == STACKS
    out = tmp_path / "build" / "s1" / "upgrade"
    doc = json.loads((out / "report.json").read_text())
    assert doc["speculative"]["recommended"]["setting"] == "7:1:8" and doc["speculative"]["current"] == "3:1:4"
    md = (out / "report.md").read_text()
    assert "\n## Speculative settings\n\n" in md
    assert "Recommended: 7:1:8 instead of the stack's 3:1:4" in md


def test_write_puts_it_into_that_stack_only_byte_for_byte_elsewhere(repo, tmp_path):
    code = upgrade_command(str(repo), "s1", "0.5.10", write=True, engines=_world(tmp_path, sweep_report()))
    assert code == 0
    text = repo.read_text()
    assert text == STACKS.replace(
        "    sglang:\n      version: 0.5.9\n\n  s2:",
        "    sglang:\n      version: 0.5.10\n    serving:\n      speculative:\n        num_steps: 7\n"
        "        eagle_topk: 1\n        num_draft_tokens: 8\n\n  s2:").replace(
        "description: SGLang 0.5.9 on Debian", "description: SGLang 0.5.10 on Debian")
    s1, s2 = _stack(repo), _stack(repo, "s2")
    assert (s1.serving.speculative.num_steps, s1.serving.speculative.num_draft_tokens) == (7, 8)
    assert s1.serving.speculative.draft_model == "org/draft"  # merged over the defaults, not replacing them
    assert (s2.serving.speculative.num_steps, s2.serving.speculative.num_draft_tokens) == (3, 4)
    assert lock_path(repo, "s1").is_file()


def test_the_default_engine_reads_the_stacks_own_smoke_report(repo, tmp_path):
    stack = _stack(repo)
    assert speculative.last_sweep_report(stack) == (None, str(tmp_path / "build" / "s1" / "smoke-report.json"))
    path = tmp_path / "build" / "s1" / "smoke-report.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(sweep_report()))
    assert speculative.last_sweep_report(stack) == (sweep_report(), str(path))
    path.write_text("{not json")  # unreadable: the upgrade says how to make one, it does not fail
    assert speculative.last_sweep_report(stack)[0] is None


@pytest.mark.parametrize(("change", "problem"), [
    (lambda sweep: sweep.update(recommended="7:1:8"), "'recommended' is not a setting"),
    (lambda sweep: sweep["recommended"].pop("num_steps"), "'recommended.num_steps' is not a whole number from 1"),
    (lambda sweep: sweep["recommended"].update(eagle_topk="1\nx: 2"),
     "'recommended.eagle_topk' is not a whole number from 1"),
    (lambda sweep: sweep["recommended"].update(worst_speedup=None), "'recommended' has no setting or no worst_speedup"),
    (lambda sweep: sweep.update(best="7:1:8"), "'best' is not a list"),
    (lambda sweep: sweep.update(best=[{}]), "a row of 'best' is not a concurrency, a setting and a speedup"),
    (lambda sweep: sweep.update(best=[_row(1, "7:1:8", "fast")]),
     "a row of 'best' is not a concurrency, a setting and a speedup"),
    (lambda sweep: sweep.update(levels=4), "'levels' is not a list"),
], ids=["recommended-text", "no-steps", "topk-text", "no-worst", "best-text", "best-row-empty", "speedup-text",
        "levels-number"])
def test_a_sweep_not_as_the_smoke_writes_it_is_said_in_one_line_and_never_written(repo, tmp_path, change, problem):
    """A smoke report edited by hand, cut short or of another version: a line saying so, not a traceback."""
    report = sweep_report()
    change(report["sweep"])
    advice = sweep_advice(_stack(repo), report, "build/s1/smoke-report.json")
    assert advice["found"] is False and advice["edits"] == {}
    assert advice["lines"] == [f"The sweep recorded for stack 's1' (`build/s1/smoke-report.json`) cannot be read "
                               f"({problem}): `invoke smoke --stack s1 --sweep 3:1:4,7:1:8` measures the settings "
                               f"again."]
    code = upgrade_command(str(repo), "s1", "0.5.10", write=True, engines=_world(tmp_path, report))
    assert code == 0 and "serving:" not in repo.read_text().split("stacks:")[1]
