"""What `invoke upgrade` says moved in kernel coverage, and every reason it gives for review: whole, exact."""

from __future__ import annotations

from sglstack.upgrade import plan as planner

BEFORE = {"complete": False, "label": "sglang 0.5.9", "violations": [
    {"extension": "old.so", "capability": "9.0", "cell": "ptx"}], "packages": [
    {"package": "sgl-kernel", "version": "0.3.21", "checked": True},
    {"package": "flashinfer-python", "version": "0.6.4", "checked": False}], "extensions": [
    {"name": "k.so", "cells": {"10.0": "ptx", "9.0": "native", "12.0": "native"}},
    # the same extension twice (a package's alias): the better cell counts
    {"name": "k.so", "cells": {"10.0": "native", "9.0": "missing", "12.0": "ptx"}},
    {"name": "old.so", "cells": {"9.0": "ptx"}}]}
AFTER = {"complete": True, "label": "sglang 0.5.10", "violations": [
    {"extension": "old.so", "capability": "9.0", "cell": "ptx"},
    {"extension": "k.so", "capability": "12.0", "cell": "ptx"},
    {"extension": "new.so", "capability": "10.0", "cell": "missing"}], "packages": [
    {"package": "sgl-kernel", "version": "0.3.22", "checked": False},
    {"package": "flashinfer-python", "version": "0.6.4", "checked": False},
    {"package": "torch", "version": "2.9.1", "checked": True}], "extensions": [
    {"name": "k.so", "cells": {"9.0": "native", "12.0": "ptx", "10.0": "native"}},
    {"name": "new.so", "cells": {"10.0": "missing"}},
    {"name": "old.so", "cells": {"9.0": "ptx"}}]}


def _cell(ext, cap, before, after):
    return {"extension": ext, "capability": cap, "before": before, "after": after}


def test_coverage_change_whole() -> None:
    assert planner.coverage_change(BEFORE, AFTER) == {
        "checked": True,
        # by extension, then capability as numbers: 10.0 before 12.0 (as text, "10.0" < "12.0" < "9.0")
        "changes": [_cell("k.so", "12.0", "native", "ptx"), _cell("new.so", "10.0", None, "missing")],
        "lost": [_cell("k.so", "12.0", "native", "ptx")],
        "new_violations": [{"extension": "k.so", "capability": "12.0", "cell": "ptx"},
                           {"extension": "new.so", "capability": "10.0", "cell": "missing"}],
        "complete": True, "was_complete": False, "label_before": "sglang 0.5.9", "label_after": "sglang 0.5.10",
        "unchecked": ["sgl-kernel", "flashinfer-python"],
        "unchecked_changed": ["sgl-kernel 0.3.22"],
    }


def test_capabilities_are_ordered_as_numbers_within_an_extension() -> None:
    before = {"extensions": [{"name": "a.so", "cells": {}}]}
    after = {"extensions": [{"name": "b.so", "cells": {"12.0": "ptx", "9.0": "ptx", "10.3": "ptx", "10.0": "ptx"}},
                            {"name": "a.so", "cells": {"9.0": "native"}}]}
    change = planner.coverage_change(before, after)
    assert [(c["extension"], c["capability"]) for c in change["changes"]] == [
        ("a.so", "9.0"), ("b.so", "9.0"), ("b.so", "10.0"), ("b.so", "10.3"), ("b.so", "12.0")]
    assert change["lost"] == [] and change["complete"] is False and change["was_complete"] is False
    assert change["unchecked"] == [] and change["label_before"] is None


def test_a_cell_that_got_better_or_left_is_no_loss() -> None:
    before = {"extensions": [{"name": "a.so", "cells": {"9.0": "ptx", "10.0": "native"}}]}
    after = {"extensions": [{"name": "a.so", "cells": {"9.0": "native"}}]}
    change = planner.coverage_change(before, after)
    assert change["changes"] == [_cell("a.so", "9.0", "ptx", "native"), _cell("a.so", "10.0", "native", None)]
    assert change["lost"] == []
    assert planner.coverage_change({"extensions": []}, {"extensions": [
        {"name": "a.so", "cells": {"9.0": "unknown-kind"}}]})["lost"] == []


def test_without_a_report_on_either_side_nothing_is_checked() -> None:
    unchecked = {"checked": False, "changes": [], "lost": [], "new_violations": [], "complete": False}
    assert planner.coverage_change(None, AFTER) == unchecked == planner.coverage_change(BEFORE, None)


def test_every_review_reason_in_order_and_exact() -> None:
    derivation = planner.Derivation({}, (), (), None, "2.39", review=("the base's glibc is unknown",))
    coverage = planner.coverage_change(BEFORE, AFTER)
    argv = {"unknown": {"--old-flag": "--new-flag", "--gone": None}, "errors": ["--tp-size: expected int"],
            "skipped": "no image"}
    assert planner.review_reasons(derivation, ["pins x==1 but ..."], coverage, argv, "no solution") == (
        "the base's glibc is unknown",
        "needs an override: pins x==1 but ...",
        "the lock does not resolve: no solution",
        "kernel coverage lost: k.so on 12.0 (native -> ptx)",
        # k.so 12.0 is said once, as a loss; new.so's violation is new
        "kernel coverage below the policy: new.so on 10.0 (missing)",
        "kernel coverage could not be checked for what changed: sgl-kernel 0.3.22",
        "serving flag --gone is not accepted by sglang's parser (removed)",
        "serving flag --old-flag is not accepted by sglang's parser (renamed to --new-flag?)",
        "serving argv: --tp-size: expected int",
        "serving argv not checked: no image",
    )
    assert planner.review_reasons(planner.Derivation({}, (), (), None, "2.39"), [], {}, {}, None) == ()


def test_the_bisect_invocation_names_the_two_releases() -> None:
    assert planner.bisect_invocation("cu130", "v0.5.9", "v0.5.10") == (
        "invoke bisect --stack cu130 --good v0.5.9 --bad v0.5.10")


def test_a_new_violation_is_said_unless_that_very_cell_was_lost() -> None:
    coverage = {"lost": [_cell("a.so", "9.0", "native", "ptx")], "unchecked_changed": ["x 1", "y 2"],
                "new_violations": [{"extension": "a.so", "capability": "9.0", "cell": "ptx"},
                                   {"extension": "a.so", "capability": "10.0", "cell": "ptx"},
                                   {"extension": "b.so", "capability": "9.0", "cell": "missing"}]}
    derivation = planner.Derivation({}, (), (), None, "2.39")
    assert planner.review_reasons(derivation, [], coverage, {}, None) == (
        "kernel coverage lost: a.so on 9.0 (native -> ptx)",
        "kernel coverage below the policy: a.so on 10.0 (ptx)",
        "kernel coverage below the policy: b.so on 9.0 (missing)",
        "kernel coverage could not be checked for what changed: x 1, y 2")
    assert planner.review_reasons(derivation, [], {"new_violations": coverage["new_violations"][2:]}, {}, None) == (
        "kernel coverage below the policy: b.so on 9.0 (missing)",)


def test_a_package_checked_before_and_unchecked_now_is_a_changed_unknown() -> None:
    before = {"complete": True, "packages": [{"package": "torch", "version": "2.9.1", "checked": True}]}
    after = {"complete": False, "packages": [{"package": "torch", "version": "2.9.1", "checked": False}]}
    change = planner.coverage_change(before, after)  # neither has an `extensions` list: no cell moved
    assert change["changes"] == [] and change["unchecked_changed"] == ["torch 2.9.1"]
    assert (change["complete"], change["was_complete"]) == (False, True)
