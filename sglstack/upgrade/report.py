"""The upgrade's review report: Markdown for a reviewer, JSON for a machine (pure)."""

from __future__ import annotations

from typing import Any

from .plan import Plan

MAX_PACKAGE_ROWS = 400  # a closure diff is ~200 packages; a file this long is still one a reviewer reads


def to_json(plan: Plan) -> dict[str, Any]:
    d = plan.derivation
    return {
        "from": {"stack": plan.stack, "sglang": plan.from_version, "pins": plan.pins_before},
        "to": {"stack": plan.new_stack, "sglang": plan.to_version, "edits": d.edits},
        "pins": plan.pins,
        "patches": plan.patches,
        "patch_details": plan.patch_details,
        "overrides": {o.replaces: o.to_dict() for o in d.overrides},
        "platform": {"wheel": d.wheel_tag, "glibc": d.glibc},
        "coverage": plan.coverage,
        "closure": plan.closure,
        **({"platform_closures": plan.platform_closures} if plan.platform_closures else {}),
        **({"platform_coverage": plan.platform_coverage} if plan.platform_coverage else {}),
        "argv": plan.argv,
        "conflicts": list(plan.conflicts),
        "lock_error": plan.lock_error,
        "bisect": plan.bisect_command,
        "notes": [*d.notes, *plan.notes],
        "guesses": dict(plan.guesses),
        "speculative": {k: v for k, v in plan.speculative.items() if k != "lines"},
        "reasons": list(plan.reasons),
        "verdict": plan.verdict,
    }


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


# long: the report's text, one section after another, in the order it reads
def to_markdown(plan: Plan) -> str:
    d = plan.derivation
    out = [f"# Upgrade {plan.stack}: SGLang {plan.from_version} -> {plan.to_version}"
           + (f" (as `{plan.new_stack}`)" if plan.new_stack != plan.stack else ""), "",
           f"**Verdict: {plan.verdict}**" + ("" if plan.reasons else " (nothing needs a reviewer's decision)"), ""]
    if plan.reasons:
        out += ["Needs review:", *[f"- {_cell(r)}" for r in plan.reasons], ""]
    out += ["## Pins", "", "| package | before | after |", "| --- | --- | --- |"]
    for name in sorted(set(plan.pins_before) | set(plan.pins)):
        before, after = plan.pins_before.get(name, "-"), plan.pins.get(name, "-")
        mark = "" if before == after else " *"
        guess = f" (guess: {_cell(plan.guesses[name])})" if name in plan.guesses else ""
        out.append(f"| {name} | {before} | {after}{mark}{guess} |")
    out += ["", f"Platform: the release's wheel is `{d.wheel_tag or 'none'}`; the lock resolves for glibc "
                f"{d.glibc}.", ""]
    out += ["## Overrides", ""]
    out += [f"- `{o.replaces}` -> `{o.pin}`: **{o.status}** ({_cell(o.why)})" for o in d.overrides] or ["- none"]
    if plan.conflicts:
        out += ["", "Conflicts with the release's requirements:", *[f"- {_cell(c)}" for c in plan.conflicts]]
    out += ["", "## Patches", ""]
    out += [f"- `{p}`: **{s}**: {_cell(plan.patch_details.get(p, ''))}"
            + (" (retired from `patches:`)" if p in d.retired_patches else "")
            for p, s in sorted(plan.patches.items())] or ["- none"]
    out += ["", "## Serving argv", ""]
    a = plan.argv
    if a.get("checked"):
        out.append(f"`{' '.join(a['argv'])}` against sglang {plan.to_version}'s own parser ({a['flags']} flags): "
                   + ("accepted." if a.get("accepted") else "**not accepted**."))
        out += [f"- `{flag}`: " + (f"renamed to `{hint}`?" if hint else "removed")
                for flag, hint in sorted(a.get("unknown", {}).items())]
        out += [f"- {_cell(e)}" for e in a.get("errors", [])]
    else:
        out.append(f"not checked: {_cell(a.get('skipped', 'unknown'))}")
    out += ["", "## Kernel coverage", "", *_coverage_lines(plan.coverage)]
    for platform, change in plan.platform_coverage.items():  # a stack of several platforms: each one's wheels
        out += ["", f"## Kernel coverage ({platform})", "", *_coverage_lines(change)]
    out += ["", "## Closure (the lock)", ""]
    if plan.lock_error:
        out.append(f"not resolved: {_cell(plan.lock_error)}")
    else:
        out += _closure_lines(plan.closure)
    for platform, cl in plan.platform_closures.items():  # a stack of several platforms: each further lock
        out += ["", f"## Closure (the lock of {platform})", "", *_closure_lines(cl)]
    notes = [*d.notes, *plan.notes]
    if notes:
        out += ["", "## Notes", "", *[f"- {_cell(n)}" for n in notes]]
    if plan.speculative.get("lines"):
        out += ["", "## Speculative settings", "", *plan.speculative["lines"]]
    out += ["", "## If the new image is slower", "",
            f"Search the release range with `{plan.bisect_command}` (every release between the two is built and "
            f"smoke-tested until the first slower one is named).", ""]
    return "\n".join(out)


def _coverage_lines(c: dict[str, Any]) -> list[str]:
    """One coverage change: the label before and after, and a row per cell that moved."""
    if not c.get("checked"):
        return [f"not checked: {_cell(c.get('why', 'no report'))}"]
    out = [f"label: `{c.get('label_before')}` -> `{c.get('label_after')}`"
           + ("" if c.get("complete") else f"; not checked: {', '.join(c.get('unchecked', []))}")]
    if not c["changes"]:
        return [*out, "no cell changed."]
    out += ["", "| extension | capability | before | after |", "| --- | --- | --- | --- |"]
    return out + [f"| {x['extension']} | {x['capability']} | {x['before'] or '-'} | {x['after'] or '-'} |"
                  for x in c["changes"]]


def _closure_lines(cl: dict[str, Any]) -> list[str]:
    """What one lock changes: the counts, where the lock is, and a row per package that moved."""
    if cl.get("packages") is None:
        return []
    counts = cl.get("counts", {})
    out = [f"{cl.get('before_count')} -> {cl.get('after_count')} packages: {counts.get('added', 0)} added, "
           f"{counts.get('removed', 0)} removed, {counts.get('changed', 0)} moved; lock: `{cl.get('lock_path')}`."]
    rows = cl["packages"][:MAX_PACKAGE_ROWS]
    if rows:
        out += ["", "| package | before | after |", "| --- | --- | --- |"]
        out += [f"| {r['name']} | {r['before'] or '-'} | {r['after'] or '-'} |" for r in rows]
    return out
