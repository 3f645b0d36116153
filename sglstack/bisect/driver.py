"""The bisect loop: build the stack at the ref the planner asks for, smoke it, record, repeat.

Build and Smoke are used as they are, through their public entry points only
(`build.build_stack(stack, BuildSettings)`, `smoke.smoke_options(stack, **overrides)`,
`smoke.run_smoke(stack, image, options)`); this module is the one place that knows them, so it is the
one place to adapt when they change. A step whose image exists (same config hash) is not rebuilt:
Build itself skips it, and the step records `built: false`.

Per step:
- the stack variant at the ref: a release is `sglang.version`, a commit is `sglang.git.ref`;
- the patches are tried on the host first, on that ref's own source (the wheel of a release, the
  exported tree of a commit), with the stack's policy: a patch that does not apply makes the step a
  skip (git bisect's 125) before any build is spent on it;
- one batch is one server start: warm-up, then `--runs` measured runs with the radix cache flushed
  before each (`SmokeOptions.runs`, `flush_cache`); `--metric baseline` starts only the baseline server
  (`SmokeOptions.kinds`), so no draft model is needed and SGLang from before EAGLE-3 can be tested.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.matrix import DEFAULT_PATCHES_DIR, DEFAULT_STACKS_FILE, load_matrix
from ..config.schema import Stack
from ..core.console import printable_lines
from ..core.errors import BuildError, ConfigError, SmokeError
from ..core.records import BISECT_DIR, build_root, stack_dir, stack_lock
from ..imagebuild.flow import build_stack
from ..imagebuild.plan import BuildSettings, resolve_ca_bundle
from ..smoke import SmokeOptions, run_smoke, smoke_options
from ..smoke.options import SmokeOptionError
from ..smoke.options import smoke_overrides as smoke_option_overrides
from . import metrics as metrics_mod
from .log import BisectLog, builds_by_ref, check_events, replay
from .planner import FOUND, Measure, Outcome, Planner, PlannerConfig
from .refs import (
    MODE_GIT,
    BisectInputError,
    mode_of,
    patch_skip,
    refs_between,
    resolve_endpoint,
    source_of,
    source_version,
    stack_at,
    subjects_of,
)
from .report import build_report, short, write_reports

EXIT_FOUND = 0
EXIT_UNDECIDED = 1

Log = Callable[[str], None]



@dataclass(frozen=True)
class BisectRequest:
    stack: str
    good: str
    bad: str
    stacks_file: str | Path = DEFAULT_STACKS_FILE
    metric: str = "baseline"
    repeats: int = 5  # measured runs per server start
    threshold_pct: float = 5.0
    max_batches: int = 4  # server starts per ref, at most
    ca_bundle: str | None = None
    docker_cli: str | None = None
    docker_host: str | None = None
    patches_dir: Path | None = None
    smoke: Mapping[str, Any] = field(default_factory=dict)  # smoke option overrides (gpus, timeout, ...)


@dataclass(frozen=True)
class BisectResult:
    exit_code: int
    outcome: Outcome | None
    report: Path
    data: Mapping[str, Any]


# ---- the key of a bisect -----------------------------------------------------------------------


def stack_fingerprint(stack: Stack) -> str:
    """Everything of the stack but the SGLang ref: another pin is another bisect."""
    data = stack.model_dump(mode="json")
    data["sglang"].pop("version", None)
    (data["sglang"].get("git") or {}).pop("ref", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def bisect_key(stack: Stack, good: str, bad: str, metric: metrics_mod.Metric, config: PlannerConfig,
               options: SmokeOptions) -> dict[str, Any]:
    return {
        "stack": stack.name,
        "stack_fingerprint": stack_fingerprint(stack),
        "mode": mode_of(stack),
        "source": source_of(stack),
        "good": good,
        "bad": bad,
        "metric": metric.name,
        "threshold": config.threshold,
        "runs_per_batch": config.runs_per_batch,
        "max_batches": config.max_batches,
        "smoke": options.fingerprint(),
    }


# ---- the loop ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepImage:
    tag: str
    image_id: str
    config_hash: str


class Session:
    """One run of one bisect: replays its log, then builds and smokes until the planner answers."""

    def __init__(self, request: BisectRequest, stack: Stack, metric: metrics_mod.Metric, config: PlannerConfig,
                 overrides: Mapping[str, Any], log: Log) -> None:
        self.request, self.stack, self.metric, self.config = request, stack, metric, config
        self.overrides = dict(overrides)
        self.say = log
        self.folder = stack_dir(stack.name) / BISECT_DIR
        self.log = BisectLog(self.folder)
        self.patches_dir = request.patches_dir or DEFAULT_PATCHES_DIR
        self.images: dict[str, StepImage | None] = {}
        self.timing = {"build_s": 0.0, "smoke_s": 0.0}
        self.started = time.monotonic()
        self.preflight_done = False
        self.key: dict[str, Any] = {}
        self.events: list[dict[str, Any]] = []
        self.subjects: dict[str, str] = {}

    # -- records --

    def event(self, event: dict[str, Any]) -> None:
        self.events.append(self.log.append(event))

    def report(self, planner: Planner, outcome: Outcome | None, *, chart: bool) -> dict[str, Any]:
        total = time.monotonic() - self.started
        timing = {**self.timing, "total_s": total,
                  "overhead_s": max(0.0, total - self.timing["build_s"] - self.timing["smoke_s"])}
        data = build_report(planner=planner, outcome=outcome, metric=self.metric, key=self.key,
                            builds=builds_by_ref(self.events), subjects=self.subjects, timing=timing,
                            log_path=self.log.path)
        write_reports(data, self.folder, chart=chart)
        return data

    # -- one step --

    def image_for(self, planner: Planner, ref: str) -> StepImage | None:
        if ref in self.images:
            return self.images[ref]
        variant = stack_at(self.stack, ref)
        skipped = patch_skip(variant, ref, self.patches_dir)
        if skipped:
            kind, reason = skipped
            self.say(f"bisect: {short(ref)}: skip ({reason})")
            self.event({"event": "skip", "ref": ref, "kind": kind, "reason": reason})
            planner.record_skip(ref, reason)
            self.images[ref] = None
            return None
        options = BuildSettings(ca_bundle=self.request.ca_bundle, docker_cli=self.request.docker_cli,
                               docker_host=self.request.docker_host, show_progress=False,
                               out_dir=self.folder / "steps" / short(ref), patches_dir=self.request.patches_dir)
        start = time.monotonic()
        try:
            result = build_stack(variant, options)
        except BuildError as exc:
            reason = f"the build failed: {exc}"
            self.say(f"bisect: {short(ref)}: skip ({reason}); a new run retries it")
            self.event({"event": "skip", "ref": ref, "kind": "build", "reason": reason})
            planner.record_skip(ref, reason)
            self.images[ref] = None
            return None
        finally:
            self.timing["build_s"] += time.monotonic() - start
        seconds = round(time.monotonic() - start, 3)
        self.event({"event": "build", "ref": ref, "built": not result.skipped, "config_hash": result.config_hash,
                    "image": result.image_id, "tag": result.tag, "seconds": seconds})
        image = StepImage(result.tag, result.image_id, result.config_hash)
        self.images[ref] = image
        return image

    def measure(self, planner: Planner, action: Measure) -> None:
        ref = action.ref
        self.say(f"bisect: ref {action.index}/{len(planner.refs) - 1} {short(ref)} "
                 f"({self.subjects.get(ref) or ''}): {action.why}")
        image = self.image_for(planner, ref)
        if image is None:
            return
        batch = planner.batches(ref) + 1
        report_path = self.folder / "smoke" / f"{short(ref)}-{batch}.json"
        options = smoke_options(stack_at(self.stack, ref), **{
            **self.overrides, "report": str(report_path), "skip_preflight": self.overrides.get("skip_preflight")
            or self.preflight_done or None})
        start = time.monotonic()
        try:
            smoke = run_smoke(stack_at(self.stack, ref), image.tag, options)
        finally:
            self.timing["smoke_s"] += time.monotonic() - start
        self.preflight_done = True
        values = metrics_mod.samples(smoke.data, self.metric)
        if not values:
            reason = metrics_mod.why_no_samples(smoke.data, self.metric)
            self.say(f"bisect: {short(ref)}: skip ({reason}); a new run retries it")
            self.event({"event": "skip", "ref": ref, "kind": "serve", "reason": reason, "report": str(report_path)})
            planner.record_skip(ref, reason)
            return
        self.event({"event": "batch", "ref": ref, "batch": batch, "samples": values, "image": image.image_id,
                    "digest": (smoke.data.get("image") or {}).get("digest"), "report": str(report_path),
                    "seconds": round(time.monotonic() - start, 3)})
        planner.record_batch(ref, values)
        cls = planner.classification(ref)
        median = sorted(values)[len(values) // 2]
        self.say(f"bisect: {short(ref)}: batch {batch}: median {median:.2f} {self.metric.unit} -> "
                 f"{planner.status(ref)}" + (f" (vs good p={cls.vs_good.p_value:.3g}, vs bad "
                                             f"p={cls.vs_bad.p_value:.3g})" if cls and cls.vs_good.p_value is not None
                                             and cls.vs_bad.p_value is not None else ""))

    # -- the whole run --

    def run(self, key: dict[str, Any]) -> BisectResult:
        self.key = key
        events = self.log.read()
        check_events(self.log.path, events)  # a sample that is not a number is refused, not replayed
        start = events[0] if events else {}
        if start.get("event") == "start" and start.get("key") == key:
            refs = list(start["refs"])
        else:
            refs = refs_between(self.stack, key["good"], key["bad"])
        resumed = self.log.open(key, refs)
        self.events = list(resumed.events)
        self.subjects = subjects_of(self.stack, refs)
        planner = Planner(refs, self.config)
        finished = resumed.done
        replay(planner, self.events, lasting_only=finished is None)
        if finished is not None:
            outcome = planner.next()
            final = outcome if isinstance(outcome, Outcome) else None
            self.say(f"bisect: {self.stack.name}: finished before ({finished.get('time')}): nothing to build")
            return self.finish(planner, final)
        if resumed.resumed:
            measured = sum(1 for e in self.events if e.get("event") == "batch")
            self.say(f"bisect: {self.stack.name}: continuing ({measured} batches in {self.log.path})")
        else:
            kind = "commits" if key["mode"] == MODE_GIT else "releases"
            self.say(f"bisect: {self.stack.name}: {len(refs) - 1} {kind}"
                     f" after {short(refs[0])} up to {short(refs[-1])}; metric {self.metric.name}"
                     + (f" (previous log kept as {resumed.archived})" if resumed.archived else ""))
        while True:
            action = planner.next()
            if isinstance(action, Outcome):
                self.event({"event": "done", "status": action.status, "first_bad": action.first_bad,
                            "last_good": action.last_good, "reason": action.reason})
                return self.finish(planner, action)
            self.measure(planner, action)
            self.report(planner, None, chart=False)

    def finish(self, planner: Planner, outcome: Outcome | None) -> BisectResult:
        data = self.report(planner, outcome, chart=True)
        path = self.folder / "report.json"
        if outcome is not None and outcome.found:
            self.say(f"bisect: first bad {'commit' if self.key['mode'] == MODE_GIT else 'release'}: "
                     f"{outcome.first_bad} ({self.subjects.get(outcome.first_bad or '', '')}); "
                     f"last good {outcome.last_good}")
            code = EXIT_FOUND
        else:
            self.say(f"bisect: undecided: {outcome.reason if outcome else 'not finished'}")
            code = EXIT_UNDECIDED
        for note in outcome.notes if outcome else ():
            self.say(f"bisect: note: {note}")
        self.say(f"bisect: report {path} ({data['builds']} builds, {data['steps_tested']} refs tested)")
        return BisectResult(code, outcome, path, data)


def prepare(request: BisectRequest) -> tuple[Stack, metrics_mod.Metric, PlannerConfig, dict[str, Any], SmokeOptions]:
    """Check every input before anything long starts; BisectInputError (exit 2) names the bad one."""
    try:
        stack = load_matrix(request.stacks_file, patches_dir=request.patches_dir).get(request.stack)
    except ConfigError as exc:
        raise BisectInputError(str(exc)) from None
    try:
        metric = metrics_mod.metric_named(request.metric)
    except ValueError as exc:
        raise BisectInputError(f"--metric: {exc}") from None
    try:
        repeats, max_batches = int(request.repeats), int(request.max_batches)
    except (TypeError, ValueError):
        raise BisectInputError("--runs and --max-batches take whole numbers") from None
    try:  # the wording of smoke --bisect-exit's --threshold (bisect.gitexit): one option, one refusal
        threshold = float(request.threshold_pct)
    except (TypeError, ValueError):
        raise BisectInputError(f"--threshold '{request.threshold_pct}': not a number (a percentage, 5 = 5%)") from None
    if repeats < 1:
        raise BisectInputError(f"--runs {repeats}: at least 1 run per server start")
    if not 0 < threshold < 100:
        raise BisectInputError(f"--threshold {threshold:g}: a percentage between 0 and 100 (5 = 5%)")
    try:
        config = PlannerConfig(runs_per_batch=repeats, max_batches=max_batches, threshold=threshold / 100,
                               higher_is_better=metric.higher_is_better)
    except ValueError as exc:
        raise BisectInputError(f"--max-batches {max_batches}: {exc}") from None
    overrides = {
        **{k: v for k, v in request.smoke.items() if v is not None},
        "kinds": metric.kinds,
        "runs": repeats,
        "flush_cache": True,
        # A bisect's runs at old refs must not become the stack's "last passing run" for the regression gate.
        "no_history": True,
        "build_dir": str(build_root()),
    }
    overrides.setdefault("concurrency", 1)
    if request.docker_host:
        overrides.setdefault("docker_host", request.docker_host)
    try:
        options = smoke_options(stack, **overrides)
        resolve_ca_bundle(request.ca_bundle)
    except (SmokeError, BuildError) as exc:
        raise BisectInputError(str(exc)) from None
    return stack, metric, config, overrides, options


def run_bisect(request: BisectRequest, *, log: Log | None = None) -> BisectResult:
    say = log or _stdout
    stack, metric, config, overrides, options = prepare(request)
    good = resolve_endpoint(stack, request.good, "good")
    bad = resolve_endpoint(stack, request.bad, "bad")
    # One bisect of a stack at a time, and no build or deploy of it meanwhile: a second bisect would move
    # this one's log aside and both would write one build folder. Refused with one line, before the log.
    with stack_lock(stack.name, "bisect"):
        session = Session(request, stack, metric, config, overrides, say)
        return session.run(bisect_key(stack, good, bad, metric, config, options))


def smoke_overrides(pairs: list[str], **named: Any) -> dict[str, Any]:
    """The task's smoke flags plus `--smoke-opt KEY=VALUE` pairs, read by smoke's one parser; None = not given."""
    try:
        return smoke_option_overrides(pairs, **named)
    except SmokeOptionError as exc:
        raise BisectInputError(str(exc)) from None


def _stdout(message: str) -> None:
    print(printable_lines(message), file=sys.stdout, flush=True)


__all__ = ["FOUND", "BisectInputError", "BisectRequest", "BisectResult", "patch_skip",
           "refs_between", "run_bisect", "smoke_overrides", "source_version", "stack_at"]
