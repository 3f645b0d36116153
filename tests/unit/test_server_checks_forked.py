"""The server's --help and argv checks run in the import closure's process, after its imports
(`importcheck.server_help`: the entry point run as `__main__` in a forked child), on a small real package:
SGLang is imported once instead of twice, and the report and its verdict are the ones a check run alone gives;
a closure that gives no answer for them has them run alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglstack.imagebuild.judge import image_check_problems

TOOLS = Path(__file__).resolve().parents[2] / "sglstack" / "inimage" / "incontainer"
SERVER_ARGS = """
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", required=True)
        parser.add_argument("--tp-size", type=int, default=1)
"""
LAUNCH = """
import argparse, os, time
from sglang.srt.server_args import ServerArgs
if __name__ == "__main__":
    if os.environ.get("FAKE_SGLANG_MAIN") == "broken":
        raise ImportError("no flashinfer")
    if os.environ.get("FAKE_SGLANG_MAIN") == "hangs":
        time.sleep(60)
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    parser.parse_args()
"""
COUNTS = "import os\nwith open(os.environ['FAKE_SGLANG_IMPORTS'], 'a') as f:\n    f.write(f'{os.getpid()}\\n')\n"
ARGVS = [["--model-path", "m", "--tp-size", "2"], ["--model-path", "m", "--tp-sise", "2"]]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    for rel, text in {"sglang/__init__.py": COUNTS, "sglang/srt/__init__.py": "",
                      "sglang/srt/server_args.py": SERVER_ARGS, "sglang/launch_server.py": LAUNCH}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def _imagecheck(site: Path, *args: str, main: str = "", closure: list[str] | None = None) -> tuple[dict, list[str]]:
    imports = site.parent / f"imports-{len(list(site.parent.glob('imports-*')))}.txt"
    env = {**os.environ, "PYTHONPATH": str(site), "FAKE_SGLANG_IMPORTS": str(imports), "FAKE_SGLANG_MAIN": main}
    extra = [f"--import-closure={json.dumps(closure)}"] if closure is not None else []
    proc = subprocess.run([sys.executable, str(TOOLS / "imagecheck.py"), "--no-shared-libraries", "--server-help",
                           *(f"--argv={json.dumps(a)}" for a in ARGVS), *args, *extra],
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    pids = imports.read_text(encoding="utf-8").split() if imports.exists() else []
    return json.loads(proc.stdout), pids


def _same(report: dict) -> dict:
    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if k != "seconds"}
        return [strip(x) for x in v] if isinstance(v, list) else v
    return {k: strip(report[k]) for k in ("server_help", "serving_argv")}


@pytest.mark.parametrize("main", ["", "broken"])
def test_in_the_closures_process_sglang_is_imported_once_and_the_report_is_the_one_alone(site, main):
    alone, alone_pids = _imagecheck(site, main=main)
    together, pids = _imagecheck(site, main=main, closure=["--module=sglang.launch_server", f"--site={site}"])
    assert len(set(alone_pids)) == 2 and len(pids) == 1  # alone: --help's interpreter and the argv's; then once
    assert together["import_closure"]["modules"] == [{"module": "sglang.launch_server", "ok": True}]
    assert "server_help" not in together["import_closure"]
    assert image_check_problems(together) == image_check_problems(alone)
    if not main:
        assert _same(together) == _same(alone)
        assert together["server_help"]["returncode"] == 0 and together["server_help"]["lists_model_path"]
        assert [r["ok"] for r in together["serving_argv"]["results"]] == [True, False]
    else:  # the traceback's frames differ (runpy from a fork, not -m); its last line, and so the verdict, do not
        helped = together["server_help"]
        assert (helped["returncode"], helped["lists_model_path"]) == (1, False)
        assert helped["error"].strip().splitlines()[-1] == "ImportError: no flashinfer"
        assert alone["server_help"]["error"].strip().splitlines()[-1] == "ImportError: no flashinfer"


def test_a_forked_help_that_hangs_is_ended_at_its_limit_and_run_alone_to_judge_it(site):
    """A fork can hang on a lock another thread held: not the image's finding; run alone, a real hang is."""
    together, pids = _imagecheck(site, "--help-timeout=1", main="hangs", closure=["--module=sglang.launch_server",
                                                                                   f"--site={site}"])
    assert together["server_help"] == {"returncode": None, "error": "no answer within 1 s", "seconds": 1.0}
    assert len(set(pids)) == 2  # the closure's process, then --help's own interpreter


def test_a_closure_that_gives_no_answer_has_the_server_checks_run_alone(site):
    report, pids = _imagecheck(site, closure=["--no-such-option"])
    assert report["import_closure"]["error"].startswith("exit 2: ")
    assert report["server_help"]["returncode"] == 0 and len(set(pids)) == 2  # run alone, as before
    assert [r["ok"] for r in report["serving_argv"]["results"]] == [True, False]
