"""The built image checks itself (stdlib only): run by `invoke build` in a container of the image, with the
network off, after the image is exported and before it is tagged. Prints one JSON object; the host judges it
(`sglstack/build/verify.py`), so a failure fails the build, not the first deploy. (`pip check` runs in every
verified image, from `imageinfo.py`, and is judged with the stack's declared overrides.)

- shared libraries: every DT_NEEDED of every compiled file in site-packages exists in the image
  (`elfdeps.py`), except the driver's, which the host provides;
- the server: `python -m sglang.launch_server --help` answers, and each serving argv the stack runs (smoke,
  compose, manifests: the same flags) parses with the image's own SGLang argument parser, so a flag renamed
  upstream is named here.

    python imagecheck.py [--server-help] [--argv JSON_LIST ...] [--site DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import sysconfig
import time

from elfdeps import check_needs  # its sibling in the image's tools folder (on sys.path as the script's dir)

SERVER_MODULE = "sglang.launch_server"
OUTPUT_TAIL = 4000  # characters of a failing command's output kept in the report


def _tail(text: str) -> str:
    return text[-OUTPUT_TAIL:]


def shared_libraries(sites: list[str]) -> dict:
    start = time.monotonic()
    report = check_needs(sites, machine=platform.machine(), ld_library_path=os.environ.get("LD_LIBRARY_PATH", ""))
    return {**report.to_dict(), "folders": sites, "seconds": round(time.monotonic() - start, 2)}


def server_help(timeout: float) -> dict:
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", SERVER_MODULE, "--help"], capture_output=True, text=True,
                              check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"returncode": None, "error": f"no answer within {timeout:.0f} s", "seconds": timeout}
    ok = proc.returncode == 0 and "--model-path" in proc.stdout
    return {"returncode": proc.returncode, "lists_model_path": "--model-path" in proc.stdout,
            "error": None if ok else _tail(proc.stderr or proc.stdout), "seconds": round(time.monotonic() - start, 2)}


class _Refused(Exception):
    pass


def parse_argv(argvs: list[list[str]]) -> dict:
    """Each argv through SGLang's own parser (ServerArgs.add_cli_args), as the server would parse it."""
    start = time.monotonic()
    try:
        from sglang.srt.server_args import ServerArgs  # the image's SGLang: only this check needs it
    except Exception as exc:  # an import that crashes is the finding
        return {"error": f"cannot import sglang.srt.server_args: {type(exc).__name__}: {exc}", "results": []}

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            raise _Refused(message)

    results = []
    for argv in argvs:
        parser = Parser(prog=SERVER_MODULE, add_help=False)
        ServerArgs.add_cli_args(parser)
        try:
            parser.parse_args(argv)
            results.append({"argv": argv, "ok": True, "error": None})
        except _Refused as exc:
            results.append({"argv": argv, "ok": False, "error": str(exc)})
    return {"error": None, "results": results, "seconds": round(time.monotonic() - start, 2)}


def main(args: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server-help", action="store_true")
    ap.add_argument("--help-timeout", type=float, default=600)
    ap.add_argument("--argv", action="append", default=[], help="a JSON list: one serving argv (after the module)")
    ap.add_argument("--site", action="append", default=[], help="folders to check the shared libraries of")
    opts = ap.parse_args(args)
    paths = sysconfig.get_paths()
    sites = opts.site or list(dict.fromkeys([paths["purelib"], paths["platlib"]]))
    out: dict = {"python": platform.python_version(), "shared_libraries": shared_libraries(sites)}
    if opts.server_help:
        out["server_help"] = server_help(opts.help_timeout)
    if opts.argv:
        out["serving_argv"] = parse_argv([json.loads(a) for a in opts.argv])
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
