"""The in-image checks of a verify, as the containers that run the parts that must run (`incremental` decides
which): imagecheck.py for the shared libraries and the JIT toolchain, and the server part (the import closure,
given the fact cache (`importfacts`) of the files seen before, then the server's --help and argv in the same
process) in a container of its own."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from ..config.schema import Stack
from .bodyedits import BASIS, BODY_EDITS_IN_IMAGE, basis, body_edit_plan, kept_server_report, kept_why, watched_files
from .emulation import time_scale, timeout_options
from .importclosure import import_closure_args
from .importfacts import FACTS_IN_IMAGE, facts_note, facts_payload, load_facts, new_rows, store_facts, without_new_facts
from .verify import IMAGECHECK, image_check_report, serving_argvs
from .verifyplan import CheckSpec, Decision, Pass

SHARED_LIBRARIES, SERVER, JIT = "shared_libraries", "server", "jit_toolchain"


def imagecheck_argvs(stack: Stack, run: set[str], scale: int = 1, *, facts: bool = False,
                     watched: tuple[list[str], list[str]] = ([], []), body_edits: bool = False) -> list[list[str]]:
    """The in-image checks of the parts that must run, as the containers that run them at once: imagecheck.py
    with the shared-library part where it must run and the JIT part; and the server part in a container of its
    own (the longest piece): the import closure of the serving path, reading the fact cache at FACTS_IN_IMAGE
    where `facts`, with the server's --help and argv run in the closure's process after its imports (SGLang
    and torch imported once); the code maps of the `watched` .py files and RECORDs kept, and a body edit's
    request read at BODY_EDITS_IN_IMAGE where `body_edits` (`bodyedits`). Together they make the report
    `verify.image_check_argv`'s one run makes."""
    command = ["python", IMAGECHECK, *timeout_options(scale)]
    argvs = []
    if SHARED_LIBRARIES in run or JIT in run:
        argvs.append([*command, *([] if SHARED_LIBRARIES in run else ["--no-shared-libraries"]),
                      *(f"--jit-arch={arch}" for arch in stack.cuda_arch_list if JIT in run)])
    if SERVER in run:
        closure = import_closure_args(stack) + ([f"--facts={FACTS_IN_IMAGE}"] if facts else []) + \
            [f"--code-map={p}" for p in watched[0]] + [f"--record-digest={p}" for p in watched[1]] + \
            ([f"--body-edits={BODY_EDITS_IN_IMAGE}"] if body_edits else [])
        argvs.append([*command, "--no-shared-libraries", "--server-help",
                      *(f"--argv={json.dumps(a)}" for a in serving_argvs(stack)),
                      f"--import-closure={json.dumps(closure)}"])
    return argvs


def run_parts(client: Any, image_id: str, stack: Stack, run: set[str], seconds: dict[str, float],
              notes: list[dict[str, Any]], *, full: bool, watched: tuple[list[str], list[str]] = ([], []),
              body_edits: bytes | None = None) -> dict[str, Any]:
    """imagecheck.py's report of the parts in `run`; the import closure's container is given the facts of the
    files seen before (by sha256; none under --full-verify) and a body edit's request, and the facts it derived
    are stored, not reported."""
    start = time.monotonic()
    scale = time_scale(client, stack)  # a foreign platform's checks run under QEMU: more time
    argvs = imagecheck_argvs(stack, run, scale, facts=SERVER in run and not full, watched=watched,
                             body_edits=body_edits is not None)
    given = {FACTS_IN_IMAGE: facts_payload(load_facts(stack.python))} if SERVER in run and not full else {}
    given.update({BODY_EDITS_IN_IMAGE: body_edits} if body_edits is not None else {})
    files = [given if any(a.startswith("--import-closure=") for a in argv) else {} for argv in argvs]
    fresh: dict[str, Any] = {}
    with ThreadPoolExecutor(max_workers=len(argvs), thread_name_prefix="sglstack-imagecheck") as pool:
        for part_report in pool.map(lambda a, f: image_check_report(client, image_id, stack, a, scale, f),
                                    argvs, files):
            fresh.update(part_report)
    seconds["image_checks"] = round(time.monotonic() - start, 2)
    closure = fresh.get("import_closure")
    store_facts(new_rows(closure))  # a file's facts are its bytes', whatever the verdict
    note = facts_note(closure, full=full)
    if note is not None and isinstance(closure, dict):
        notes.append(note)
        seconds["import_closure"] = closure.get("seconds") or 0.0
    return without_new_facts(fresh)


def run_parts_keeping(client: Any, image_id: str, stack: Stack, specs: Sequence[CheckSpec],
                      decisions: dict[str, Decision],
                      layout: tuple[Sequence[str], Mapping[str, tuple[str, str]] | None, Sequence[Pass]],
                      seconds: dict[str, float], notes: list[dict[str, Any]], *,
                      full: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """`run_parts` of the parts `decisions` runs, the server part asked to keep an earlier pass's outcome where
    only bodies its import never ran changed (`bodyedits`; its decision in `decisions` is then replaced); and
    what the server's new pass keeps beside its result for a later edit (its basis)."""
    diff_ids, files, passes = layout
    run = {s.name for s in specs if decisions[s.name].run}
    server = next((s for s in specs if s.name == SERVER), None)
    edit = body_edit_plan(server, diff_ids, files, passes) if server and SERVER in run and not full else None
    watched = watched_files(server, files) if server and SERVER in run else ([], [])
    fresh = run_parts(client, image_id, stack, run, seconds, notes, full=full, watched=watched,
                      body_edits=edit.payload() if edit else None)
    closure: dict[str, Any] = fresh["import_closure"] if isinstance(fresh.get("import_closure"), dict) else {}
    maps, digests = closure.pop("code_maps", None) or {}, closure.pop("record_digests", None) or {}
    answer = closure.get("body_edits") or {}
    if edit is not None and answer.get("reused") is True:
        fresh = {**fresh, **kept_server_report(edit.kept.result, fresh)}
        maps, digests = {**edit.kept.result[BASIS]["code_maps"], **maps}, edit.kept.result[BASIS]["record_digests"]
        decisions[SERVER] = replace(decisions[SERVER], run=False, why=kept_why(edit, answer))
    elif edit is not None:
        decisions[SERVER] = replace(decisions[SERVER], why=f"{decisions[SERVER].why}; not only bodies its import "
                                    f"never ran changed since the pass in image {edit.kept.image_id[7:19]}: "
                                    f"{answer.get('why')}")
    kept = {BASIS: basis(server, files, maps, digests)} if server and SERVER in run and files is not None else {}
    return fresh, kept
