"""`python3 -m patchkit apply|verify|list`: the engine as a command, for build stages and the host.

Exit 0 on success; on failure one line on stderr (patch, file, class, reason) and a non-zero exit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .engine import POLICIES, apply_patches, read_manifest, resolve_version, verify_patches
from .errors import PatchError, PatchUsageError
from .spec import load_patch, patch_ids

EXIT_FAILED = 1
EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 -m patchkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    apply = sub.add_parser("apply", help="insert the patches' methods into their classes, then verify")
    verify = sub.add_parser("verify", help="check that the patches are in place (no changes)")
    for p in (apply, verify):
        p.add_argument("--root", required=True, type=Path, help="folder holding the sglang/ package")
        p.add_argument("--patches-dir", required=True, type=Path, help="folder of <id>/patch.toml")
        p.add_argument("ids", nargs="+", metavar="ID", help="patch ids")
    apply.add_argument("--sglang-version", help="default: read from ROOT/sglang-*.dist-info")
    apply.add_argument(
        "--policy",
        choices=POLICIES,
        default="notice",
        help="a patch already upstream: 'notice' skips it, 'error' fails",
    )
    apply.add_argument("--manifest", type=Path, help="write what was applied to this JSON file")
    verify.add_argument("--manifest", type=Path, help="also check the sha256 recorded by apply")
    lister = sub.add_parser("list", help="print the patches and their version ranges")
    lister.add_argument("--patches-dir", required=True, type=Path)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            for pid in patch_ids(args.patches_dir):
                spec = load_patch(args.patches_dir, pid)
                print(f"{spec.id}\t{spec.applies_to}\t{spec.file}\t{spec.class_name}\t{','.join(spec.method_names)}")
            return 0
        if not (args.root / "sglang").is_dir():
            raise PatchUsageError(f"{args.root} holds no sglang/ package")
        if args.command == "apply":
            version = resolve_version(args.root, args.sglang_version)
            if version is None:
                print(
                    f"notice: no sglang-*.dist-info under {args.root} and no --sglang-version: the "
                    "version range and per-version hashes are not checked",
                    file=sys.stderr,
                )
            results = apply_patches(args.root, args.patches_dir, args.ids, version, args.policy, args.manifest)
        else:
            manifest = read_manifest(args.manifest) if args.manifest else None
            results = verify_patches(args.root, args.patches_dir, args.ids, manifest)
    except PatchError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, PatchUsageError) else EXIT_FAILED
    for r in results:
        detail = f" (inserted {', '.join(r.inserted)})" if r.inserted else ""
        print(f"patch '{r.id}': {r.file}: class {r.class_name}: {r.status}{detail} sha256 {r.sha256_after}")
        if r.notice:
            print(f"notice: {r.notice}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
