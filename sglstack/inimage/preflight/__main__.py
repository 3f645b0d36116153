"""`python3 -m sglstack.preflight`: the node-side entry point (standard library and torch only).

The host's `invoke preflight` passes the stack's requirements as options; on a node without sglstack's
dependencies (or inside a stack image) this runs as is, with `PYTHONPATH` pointing at the copy.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .checks import Requirements, parse_size
from .node import format_table, inspect_node

REPORT_BEGIN = "----- sglstack-preflight-report-begin -----"
REPORT_END = "----- sglstack-preflight-report-end -----"


def _sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(parse_size(s) for s in text.split(",") if s.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m sglstack.preflight", description=__doc__)
    ap.add_argument("--stack-name", default="", help="the stack's name, for the report")
    ap.add_argument("--cuda", default=None, help="the stack's CUDA toolkit version, e.g. 13.0.1")
    ap.add_argument("--tp", type=int, default=1, help="GPUs the stack's server needs")
    ap.add_argument("--arch", default="", help="the image's cuda_arch_list, comma-separated, e.g. 9.0,10.0")
    ap.add_argument("--shm-size", type=_size, default="32g", help="the /dev/shm the stack needs")
    ap.add_argument("--sizes", type=_sizes, default="1M,64M,1G", help="all-reduce sizes, e.g. 1M,64M,1G")
    ap.add_argument("--json", type=Path, default=None, help="write the report as JSON here")
    ap.add_argument("--raw-dir", type=Path, default=None, help="keep the raw nvidia-smi / NVML outputs here")
    ap.add_argument("--emit-json", action="store_true", help="print the JSON report between markers")
    args = ap.parse_args(argv)

    req = Requirements(
        stack=args.stack_name,
        cuda=args.cuda,
        tp=args.tp,
        arch_list=tuple(a for a in args.arch.split(",") if a),
        shm_bytes=args.shm_size,
        sizes=args.sizes,
    )
    report = inspect_node(
        req, raw_dir=args.raw_dir, progress=lambda msg: print(f"preflight: {msg}", file=sys.stderr, flush=True)
    )
    data = report.to_dict()
    if args.json:
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    if args.emit_json:
        print(REPORT_BEGIN, json.dumps(data), REPORT_END, sep="\n")
    elif report.fatal:
        print(f"preflight FAIL: {report.fatal}", file=sys.stderr)
    else:
        print(format_table(report))
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
