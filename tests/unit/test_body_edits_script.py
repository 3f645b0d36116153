"""importcheck.py's body-edit protocol, run as the image runs it (a script beside its siblings, in a child):
`--code-map` and `--record-digest` keep what the verified import ran; `--body-edits` with those maps keeps the
outcome where only unstarted bodies changed (those files scanned again), and otherwise runs the whole closure
in the same process, saying why."""

from __future__ import annotations

import json
from pathlib import Path

from importcheck_child import importcheck_report

PLUG = '''\
import os


def configure():
    return os.sep


SEP = configure()


class Engine:
    def run(self):
        return 1
'''


def _importcheck(site: Path, *args: str) -> dict:
    return importcheck_report(site, ["--module=plug", f"--site={site}", *args])


def _site(root: Path) -> tuple[Path, Path, Path]:
    (root / "plug").mkdir(parents=True)
    plug = root / "plug" / "__init__.py"
    plug.write_text(PLUG)
    record = root / "plug-1.0.dist-info" / "RECORD"
    record.parent.mkdir()
    record.write_text("plug/__init__.py,sha256=AAAA,100\nplug-1.0.dist-info/RECORD,,\n")
    return root, plug.resolve(), record


def _request(report: dict, plug: Path, record: Path) -> dict:
    return {"code": {str(plug): report["code_maps"][str(plug)]}, "bytecode": {},
            "records": {str(record): report["record_digests"][str(record)]}}


def test_a_verified_import_keeps_its_maps_and_an_unstarted_body_edit_keeps_its_outcome(tmp_path):
    site, plug, record = _site(tmp_path / "site")
    first = _importcheck(site, f"--code-map={plug}", f"--record-digest={record}")
    assert [m["ok"] for m in first["modules"]] == [True]
    started = {e[0].split(":", 1)[1]: e[-1] for e in first["code_maps"][str(plug)]["code"]}
    assert started == {"<module>": True, "configure": True, "Engine": True, "Engine.run": False}

    plug.write_text(PLUG.replace("return 1", "import missing_anywhere\n        return 2"))
    record.write_text("plug/__init__.py,sha256=BBBB,120\nplug-1.0.dist-info/RECORD,,\n")
    (tmp_path / "request.json").write_text(json.dumps(_request(first, plug, record)))
    kept = _importcheck(site, f"--code-map={plug}", f"--body-edits={tmp_path / 'request.json'}")
    assert kept["body_edits"] == {"reused": True, "changed": {str(plug): ["Engine.run"]}}
    assert "modules" not in kept  # nothing imported
    assert kept["facts"]["files"] == 1 and kept["facts"]["derived"] == 1  # the edited file scanned again
    assert [e[-1] for e in kept["code_maps"][str(plug)]["code"]] == [True, True, True, False]


def test_an_edit_the_import_runs_or_a_record_listing_other_files_runs_the_closure_saying_why(tmp_path):
    site, plug, record = _site(tmp_path / "site")
    first = _importcheck(site, f"--code-map={plug}", f"--record-digest={record}")
    request = tmp_path / "request.json"
    request.write_text(json.dumps(_request(first, plug, record)))

    plug.write_text(PLUG.replace("return os.sep", "import missing_anywhere\n    return os.sep"))
    ran = _importcheck(site, f"--code-map={plug}", f"--body-edits={request}")
    assert ran["body_edits"] == {"reused": False, "why": f"{plug}: configure ran during the verified import and "
                                                         "changed"}
    assert ran["modules"][0]["ok"] is False and ran["modules"][0]["missing"] == "missing_anywhere"

    plug.write_text(PLUG.replace("return 1", "return 2"))
    record.write_text(record.read_text() + "plug/extra.py,sha256=CCCC,1\n")
    ran = _importcheck(site, f"--body-edits={request}")
    assert ran["body_edits"] == {"reused": False, "why": f"{record} lists other files"}
    assert [m["ok"] for m in ran["modules"]] == [True]
