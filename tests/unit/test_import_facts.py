"""The import closure's fact cache (issue 38): what a file imports is kept by its sha256 and namespace (the
interpreter and filefacts.py's own text) and reused; each import is resolved again on every run, so a module
removed fails as with no cache. The in-image scan runs here on small trees in a child interpreter (as in the
image); the host's store (`imagebuild/importfacts.py`) is read and appended as the verify does."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from pathlib import Path

from importcheck_child import importcheck_report

from sglstack.config.schema import Stack
from sglstack.imagebuild import importfacts
from sglstack.imagebuild.checkparts import JIT, SERVER, SHARED_LIBRARIES, imagecheck_argvs
from sglstack.imagebuild.importfacts import (
    FACTS_IN_IMAGE,
    facts_note,
    facts_payload,
    for_python,
    load_facts,
    new_rows,
    select,
)
from sglstack.inimage.incontainer import filefacts, importcheck

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "sglstack" / "inimage" / "incontainer" / "importcheck.py"
FILES = {
    "plug/__init__.py": "import os\nfrom plug import net\n",
    "plug/net.py": "import json\nimport helper\n",
    "plug-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: plug\nVersion: 1.0\n",
    "plug-1.0.dist-info/RECORD": "plug/__init__.py,,\nplug/net.py,,\n",
    "helper.py": "import json\n",
    "side/__init__.py": "import cachetools_missing\n",
}


def _site(root: Path) -> Path:
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _scan(site: Path, facts: dict | None = None) -> dict:
    """importcheck.py's report on `site` (serving path: `plug`), given `facts` as the host sends them."""
    args = ["--module=plug", "--site", str(site)]
    if facts is not None:
        (site.parent / "facts.json").write_text(json.dumps(facts))
        args.append(f"--facts={site.parent / 'facts.json'}")
    return importcheck_report(site, args)


def _found(report: dict) -> list[tuple[str, str, bool]]:
    return sorted((u["module"], Path(u["importer"]).name, u["serving"]) for u in report["unprovided"])


def _cache_of(report: dict) -> dict:
    """What the host sends next time: the store's rows of this report, selected for this interpreter."""
    return json.loads(facts_payload(select(((r["namespace"], r["sha256"], r) for r in new_rows(report)),
                                           f"{sys.version_info[0]}.{sys.version_info[1]}")))


def test_a_rerun_reuses_every_files_facts_and_finds_the_same(tmp_path):
    site = _site(tmp_path / "site")
    first = _scan(site)
    assert first["facts"]["reused"] == 0 and first["facts"]["derived"] == first["scanned_files"] == 4
    assert first["facts"]["beside"] is True  # derived in a process beside the serving path's imports
    again = _scan(site, _cache_of(first))
    assert again["facts"] == {**first["facts"], "reused": 4, "derived": 0, "parsed": 0, "not_given": None}
    assert again["new_facts"] == {}
    assert _found(again) == _found(first) == [("cachetools_missing", "__init__.py", False)]


def test_facts_derived_beside_the_imports_are_those_the_scan_derives_itself(tmp_path):
    site = _site(tmp_path / "site")
    files = sorted(str(f) for f in site.rglob("*.py"))
    alone = importcheck.scan(files, set(), {})
    beside = importcheck.scan(files, set(), {}, importcheck.derive_facts(files, {}))
    assert beside["unprovided"] == alone["unprovided"] and beside["new_facts"] == alone["new_facts"]
    assert beside["facts"] == {**alone["facts"], "beside": True} and alone["facts"]["beside"] is False
    half = importcheck.derive_facts(files[:2], {})  # what it did not reach is derived by the scan
    assert importcheck.scan(files, set(), {}, half)["new_facts"] == alone["new_facts"]


def test_facts_are_keyed_by_the_files_sha256_and_a_changed_file_is_derived_again(tmp_path):
    site = _site(tmp_path / "site")
    cache = _cache_of(_scan(site))
    (site / "helper.py").write_text("import json\nimport gone_now\n")  # same path, other bytes
    report = _scan(site, cache)
    assert (report["facts"]["reused"], report["facts"]["derived"], report["facts"]["parsed"]) == (3, 1, 1)
    assert ("gone_now", "helper.py", True) in _found(report)  # the old facts of helper.py were not used
    assert _found(report) == _found(_scan(site))


def test_each_import_is_resolved_again_a_removed_module_fails_as_with_no_cache(tmp_path):
    site = _site(tmp_path / "site")
    cache = _cache_of(_scan(site))
    (site / "helper.py").unlink()  # plug/net.py is unchanged (its facts reused); what it imports is gone
    cached, uncached = _scan(site, cache), _scan(site)
    assert cached["facts"]["derived"] == 0 and cached["facts"]["parsed"] == 1  # parsed: its import now unprovided
    assert cached["modules"] == uncached["modules"] and cached["modules"][0]["missing"] == "helper"
    assert _found(cached) == _found(uncached) == [("cachetools_missing", "__init__.py", False),
                                                  ("helper", "net.py", True)]


def test_facts_of_another_interpreter_or_program_are_not_used(tmp_path):
    site = _site(tmp_path / "site")
    first = _scan(site)
    namespace = first["facts"]["namespace"]
    assert namespace.startswith(f"{sys.implementation.name}-{sys.version.split()[0]}-")
    lying = {d: {"mentioned": [], "imports": []} for d in first["new_facts"]}  # would hide every finding
    report = _scan(site, {"namespaces": {namespace.replace(sys.version.split()[0], "3.0.1"): lying}})
    assert report["facts"]["reused"] == 0 and report["facts"]["not_given"].startswith("no facts for ")
    assert _found(report) == _found(first)
    assert select([("cpython-3.12.3-abc-1", "a" * 64, {"mentioned": [], "imports": None}),
                   ("cpython-3.11.2-abc-1", "b" * 64, {"mentioned": [], "imports": None})], "3.12") == {
        "cpython-3.12.3-abc-1": {"a" * 64: {"mentioned": [], "imports": None}}}
    assert for_python("cpython-3.12.3-abc-1", "3.12") and not for_python("cpython-3.12.3-abc-1", "3.1")


def test_a_corrupt_fact_is_ignored_and_derived_again(tmp_path):
    site = _site(tmp_path / "site")
    first = _scan(site)
    namespace, facts = first["facts"]["namespace"], _cache_of(first)["namespaces"][first["facts"]["namespace"]]
    broken = {d: ({"mentioned": "json"} if i % 2 else {"mentioned": ["json"], "imports": [["x", "1", False]]})
              for i, d in enumerate(sorted(facts))}
    report = _scan(site, {"namespaces": {namespace: broken}})
    assert report["facts"]["reused"] == 0 and _found(report) == _found(first)
    assert _scan(site, {"namespaces": "not a mapping"})["facts"]["not_given"].startswith("no facts for ")


def test_the_store_skips_bad_lines_and_keeps_the_parsed_fact(tmp_path, monkeypatch):
    monkeypatch.setenv("SGLSTACK_CACHE", str(tmp_path / "cache"))
    ns = "cpython-3.12.3-abc-1"
    importfacts.store_facts([{"namespace": ns, "sha256": "a" * 64, "mentioned": ["x"], "imports": None},
                             {"namespace": ns, "sha256": "a" * 64, "mentioned": ["x"], "imports": [["x", 1, False]]},
                             {"namespace": ns, "sha256": "a" * 64, "mentioned": ["x"], "imports": None}])
    with importfacts.facts_path().open("a") as f:
        f.write('{"namespace": "cpython-3.12.3-abc-1", "sha256": "bad", "mentioned": []}\nnot json\n')
    importfacts.store_facts([{"namespace": ns, "sha256": "c" * 64, "mentioned": [], "imports": None}])
    assert load_facts("3.12") == {ns: {"a" * 64: {"mentioned": ["x"], "imports": [["x", 1, False]]},
                                       "c" * 64: {"mentioned": [], "imports": None}}}
    assert load_facts("3.11") == {}


def _append(cache: str, worker: int) -> None:
    import os
    os.environ["SGLSTACK_CACHE"] = cache
    rows = [{"namespace": "cpython-3.12.3-abc-1", "sha256": f"{worker:02x}{n:062x}", "mentioned": ["m" * 50],
             "imports": None} for n in range(300)]
    for start in range(0, 300, 30):
        importfacts.store_facts(rows[start:start + 30])


def test_concurrent_writers_leave_whole_lines_and_every_fact(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SGLSTACK_CACHE", str(cache))
    procs = [multiprocessing.get_context("fork").Process(target=_append, args=(str(cache), w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    lines = importfacts.facts_path().read_text().splitlines()
    assert len(lines) == 1200 and all(json.loads(line)["mentioned"] == ["m" * 50] for line in lines)
    assert len(load_facts("3.12")["cpython-3.12.3-abc-1"]) == 1200


def test_the_record_says_what_was_reused_and_derived():
    note = facts_note({"facts": {"files": 30754, "reused": 30700, "derived": 54, "parsed": 3,
                                 "namespace": "cpython-3.11.2-abc-1", "not_given": None}})
    assert note == {"check": "import_closure_facts", "ran": True, "fingerprint": "cpython-3.11.2-abc-1",
                    "files": 30754, "reused": 30700, "derived": 54, "parsed": 3,
                    "why": "facts of 30700 of 30754 files reused (by sha256, cpython-3.11.2-abc-1); 54 derived "
                           "(3 parsed); every import resolved again against this image's files"}
    assert facts_note({"error": "no answer within 900 s"}) is None
    assert new_rows({"error": "exit 1", "facts": {"namespace": "x"}, "new_facts": {"a" * 64: {}}}) == []
    full = facts_note({"facts": {"files": 3, "reused": 0, "derived": 3, "parsed": 1, "namespace": "n",
                                 "not_given": "no fact cache given"}}, full=True)
    assert full is not None and full["why"] == ("facts of 0 of 3 files reused (by sha256, n); 3 derived (1 parsed): "
                                                "--full-verify reuses none; every import resolved again against this "
                                                "image's files")


def test_only_the_parts_that_must_run_are_asked_for_and_the_closure_is_given_the_facts():
    stack = Stack.model_validate({"name": "s", "base_image": "debian:bookworm-slim", "python": "3.11",
                                  "sglang": {"version": "0.5.9"}, "serving": {"model": "m", "gpus": 0}})
    [server] = imagecheck_argvs(stack, {SERVER}, facts=True)  # the server part alone: one container
    assert server[2:4] == ["--no-shared-libraries", "--server-help"] and server[4].startswith("--argv=")
    assert json.loads(server[-1].removeprefix("--import-closure="))[-1] == f"--facts={FACTS_IN_IMAGE}"
    checks, closure = imagecheck_argvs(stack, {SERVER, SHARED_LIBRARIES})
    assert checks == ["python", "/opt/sglstack/tools/imagecheck.py"]  # --help and the argv go with the closure
    assert "--server-help" in closure and not [a for a in closure if "--facts" in a]
    assert imagecheck_argvs(stack, {JIT}) == [["python", "/opt/sglstack/tools/imagecheck.py", "--no-shared-libraries"]]


def test_imagecheck_leaves_the_shared_libraries_out_when_told(tmp_path):
    code = (f"import sys; sys.path.insert(0, {str(SCRIPT.parent)!r}); import imagecheck; "
            f"sys.exit(imagecheck.main(['--no-shared-libraries', '--site', {str(tmp_path)!r}]))")
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"python": sys.version.split()[0]}


def test_the_derivation_in_two_processes_is_the_one_in_one(tmp_path):
    site = _site(tmp_path / "site")
    results = []
    for processes in (1, 2):
        (tmp_path / str(processes)).mkdir()
        with filefacts.derived_beside(importcheck.__file__, [str(site)], None, str(tmp_path / str(processes)),
                                      processes=processes) as beside:
            results.append(beside())
    assert results[0] is not None and len(results[0]["digests"]) == 4 and results[0]["parsed"] >= 1
    assert results[1] == results[0]  # every other file each, merged: the same digests, facts and parses
