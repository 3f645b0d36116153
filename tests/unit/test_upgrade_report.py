"""The upgrade's review report, word for word: every section's text in each of its forms (pure, in process)."""

from __future__ import annotations

from typing import Any

from sglstack.upgrade import plan as planner
from sglstack.upgrade.report import MAX_PACKAGE_ROWS, to_json, to_markdown

BISECT = "invoke bisect --stack cu130 --good 0.5.9 --bad 0.5.10"
TAIL = ["## If the new image is slower", "",
        f"Search the release range with `{BISECT}` (every release between the two is built and smoke-tested "
        "until the first slower one is named).", ""]


def _plan(**kw: Any) -> planner.Plan:
    args: dict[str, Any] = {
        "stack": "cu130", "new_stack": "cu130", "from_version": "0.5.9", "to_version": "0.5.10",
        "pins_before": {"sglang": "0.5.9"}, "pins": {"sglang": "0.5.9"},
        "derivation": planner.Derivation({}, (), (), "manylinux_2_28_x86_64", "2.28"),
        "patches": {}, "patch_details": {}, "conflicts": (), "closure": {}, "coverage": {}, "argv": {},
        "lock_error": None, "bisect_command": BISECT}
    args.update(kw)
    return planner.Plan(**args)


def _review_plan() -> planner.Plan:
    """Every section in its fullest form: a new name, reasons, overrides, conflicts, notes, tables."""
    decision = planner.OverrideDecision("x==1", "x==2", "a reason", "kept", "sglang 0.5.10 still | requires it")
    derivation = planner.Derivation({"sglang": {"version": "0.5.10"}}, (decision,), ("p-up",), None, "2.34",
                                    notes=("a derivation note",), review=("r",))
    return _plan(
        new_stack="cu130-next", reasons=("first | reason\nwrapped", "second"),
        pins_before={"torch": "2.9.1", "sgl-kernel": "0.3.21"}, pins={"torch": "2.9.1", "sglang-kernel": "0.4.1"},
        derivation=derivation, patches={"p-up": "upstream", "a-drift": "drifted"},
        patch_details={"a-drift": "hunk 2 | failed"}, conflicts=("pins y==1 | but",),
        argv={"checked": True, "argv": ["--tp-size", "8", "--old"], "flags": 300, "accepted": False,
              "unknown": {"--old": "--new", "--gone": None}, "errors": ["bad\nvalue"]},
        coverage={"checked": True, "label_before": "9.0:native", "label_after": "9.0:ptx", "complete": False,
                  "unchecked": ["pkg-a", "pkg-b"],
                  "changes": [{"extension": "e.so", "capability": "9.0", "before": "native", "after": None},
                              {"extension": "e.so", "capability": "10.0", "before": None, "after": "ptx"}]},
        closure={"before_count": 3, "after_count": 4, "counts": {"added": 1, "removed": 2, "changed": 3},
                 "lock_path": "locks/cu130-next.txt",
                 "packages": [{"name": "new", "before": None, "after": "1.0"},
                              {"name": "old", "before": "2.0", "after": None}]},
        notes=("a plan note",))


def test_the_fullest_report_word_for_word() -> None:
    assert to_markdown(_review_plan()).split("\n") == [
        "# Upgrade cu130: SGLang 0.5.9 -> 0.5.10 (as `cu130-next`)", "",
        "**Verdict: review**", "",
        "Needs review:", "- first \\| reason wrapped", "- second", "",
        "## Pins", "", "| package | before | after |", "| --- | --- | --- |",
        "| sgl-kernel | 0.3.21 | - * |", "| sglang-kernel | - | 0.4.1 * |", "| torch | 2.9.1 | 2.9.1 |", "",
        "Platform: the release's wheel is `none`; the lock resolves for glibc 2.34.", "",
        "## Overrides", "",
        "- `x==1` -> `x==2`: **kept** (sglang 0.5.10 still \\| requires it)", "",
        "Conflicts with the release's requirements:", "- pins y==1 \\| but", "",
        "## Patches", "",
        "- `a-drift`: **drifted**: hunk 2 \\| failed",
        "- `p-up`: **upstream**:  (retired from `patches:`)", "",
        "## Serving argv", "",
        "`--tp-size 8 --old` against sglang 0.5.10's own parser (300 flags): **not accepted**.",
        "- `--gone`: removed", "- `--old`: renamed to `--new`?", "- bad value", "",
        "## Kernel coverage", "",
        "label: `9.0:native` -> `9.0:ptx`; not checked: pkg-a, pkg-b", "",
        "| extension | capability | before | after |", "| --- | --- | --- | --- |",
        "| e.so | 9.0 | native | - |", "| e.so | 10.0 | - | ptx |", "",
        "## Closure (the lock)", "",
        "3 -> 4 packages: 1 added, 2 removed, 3 moved; lock: `locks/cu130-next.txt`.", "",
        "| package | before | after |", "| --- | --- | --- |", "| new | - | 1.0 |", "| old | 2.0 | - |", "",
        "## Notes", "", "- a derivation note", "- a plan note", "",
        *TAIL]


def test_the_plainest_report_word_for_word() -> None:
    """Nothing to review, nothing decided: each section says so in its own words."""
    plan = _plan(argv={"checked": True, "argv": ["--tp-size", "8"], "flags": 12, "accepted": True},
                 coverage={"checked": True, "label_before": "a", "label_after": "a", "complete": True,
                           "changes": []},
                 closure={"before_count": None, "after_count": 2, "packages": [], "lock_path": "x.txt", "counts": {}})
    assert to_markdown(plan).split("\n") == [
        "# Upgrade cu130: SGLang 0.5.9 -> 0.5.10", "",
        "**Verdict: ready** (nothing needs a reviewer's decision)", "",
        "## Pins", "", "| package | before | after |", "| --- | --- | --- |", "| sglang | 0.5.9 | 0.5.9 |", "",
        "Platform: the release's wheel is `manylinux_2_28_x86_64`; the lock resolves for glibc 2.28.", "",
        "## Overrides", "", "- none", "",
        "## Patches", "", "- none", "",
        "## Serving argv", "",
        "`--tp-size 8` against sglang 0.5.10's own parser (12 flags): accepted.", "",
        "## Kernel coverage", "", "label: `a` -> `a`", "no cell changed.", "",
        "## Closure (the lock)", "", "None -> 2 packages: 0 added, 0 removed, 0 moved; lock: `x.txt`.", "",
        *TAIL]


def _section(md: str, title: str) -> list[str]:
    """The lines of one `## title` section, up to the next one (its blank lines kept)."""
    after = md.split(f"\n## {title}\n\n", 1)[1]
    return after.split("\n## ", 1)[0].split("\n")


def test_what_was_not_checked_says_why() -> None:
    md = to_markdown(_plan(argv={"checked": False, "skipped": "sglang's parser | could not\nbe loaded"},
                           coverage={"checked": False, "why": "no | cuobjdump"}, lock_error="x | y\nz",
                           closure={"packages": [{"name": "a", "before": "1", "after": "2"}]}))
    assert _section(md, "Serving argv") == ["not checked: sglang's parser \\| could not be loaded", ""]
    assert _section(md, "Kernel coverage") == ["not checked: no \\| cuobjdump", ""]
    assert _section(md, "Closure (the lock)") == ["not resolved: x \\| y z", ""]  # the error wins over packages
    bare = to_markdown(_plan())
    assert _section(bare, "Serving argv") == ["not checked: unknown", ""]
    assert _section(bare, "Kernel coverage") == ["not checked: no report", ""]
    assert _section(bare, "Closure (the lock)") == [""]  # no lock, no error: nothing to say
    assert "## Notes" not in bare
    # a coverage report that names nothing unchecked, a closure without counts
    md = to_markdown(_plan(coverage={"checked": True, "label_before": "a", "label_after": "b", "changes": []},
                           closure={"before_count": 1, "after_count": 1, "lock_path": "l.txt", "packages": []}))
    assert _section(md, "Kernel coverage") == ["label: `a` -> `b`; not checked: ", "no cell changed.", ""]
    assert _section(md, "Closure (the lock)") == ["1 -> 1 packages: 0 added, 0 removed, 0 moved; lock: `l.txt`.", ""]


def test_the_closure_table_stops_at_its_row_limit() -> None:
    rows = [{"name": f"p{i:03}", "before": "1", "after": "2"} for i in range(MAX_PACKAGE_ROWS + 1)]
    md = to_markdown(_plan(closure={"before_count": 401, "after_count": 401, "counts": {"changed": 401},
                                    "lock_path": "l.txt", "packages": rows}))
    lines = _section(md, "Closure (the lock)")
    assert lines[:4] == ["401 -> 401 packages: 0 added, 0 removed, 401 moved; lock: `l.txt`.", "",
                         "| package | before | after |", "| --- | --- | --- |"]
    assert lines[4:-1] == [f"| p{i:03} | 1 | 2 |" for i in range(MAX_PACKAGE_ROWS)] and lines[-1] == ""
    assert MAX_PACKAGE_ROWS == 400


def test_the_json_document_whole() -> None:
    plan = _review_plan()
    assert to_json(plan) == {
        "from": {"stack": "cu130", "sglang": "0.5.9", "pins": {"torch": "2.9.1", "sgl-kernel": "0.3.21"}},
        "to": {"stack": "cu130-next", "sglang": "0.5.10", "edits": {"sglang": {"version": "0.5.10"}}},
        "pins": {"torch": "2.9.1", "sglang-kernel": "0.4.1"},
        "patches": {"p-up": "upstream", "a-drift": "drifted"},
        "patch_details": {"a-drift": "hunk 2 | failed"},
        "overrides": {"x==1": {"replaces": "x==1", "pin": "x==2", "status": "kept",
                               "why": "sglang 0.5.10 still | requires it"}},
        "platform": {"wheel": None, "glibc": "2.34"},
        "coverage": plan.coverage, "closure": plan.closure, "argv": plan.argv,
        "conflicts": ["pins y==1 | but"], "lock_error": None, "bisect": BISECT,
        "notes": ["a derivation note", "a plan note"], "guesses": {}, "speculative": {},
        "reasons": ["first | reason\nwrapped", "second"], "verdict": "review"}
    assert to_json(_plan(lock_error="no"))["lock_error"] == "no"
    assert to_json(_plan())["verdict"] == "ready"
