"""Wheel plumbing for the `sglang-src` build stage (stdlib only: it runs before anything is installed).

    python3 wheelkit.py unpack WHEEL DIR
    python3 wheelkit.py requirements WHEEL STACK_JSON OUT      # SGLang's requirements, overrides applied
    python3 wheelkit.py overlay DIR ORIGINAL_WHEEL OUT_DIR    # the files of DIR that differ from the wheel
    python3 wheelkit.py refresh-record SITE_PACKAGES DIST     # installed RECORD rows of changed files
    python3 wheelkit.py keep-only SITE_PACKAGES NAME==VERSION # drop every other install of NAME
    python3 wheelkit.py version DIR                           # the unpacked distribution's version

Overrides are applied here, in the open, rather than by a resolver flag: the rewritten requirements file
is a build artifact that the image keeps, so anyone can see what was replaced and why.

`requirement_key` is the one rule for "this override replaces that requirement": `sglstack stacks
--check` (conflicts.py) calls it too, so the check and the build cannot disagree.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import re
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")
_EXTRA = re.compile(r"\bextra\s*==")


class WheelKitError(Exception):
    pass


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def specifier_key(spec: str) -> str:
    """One spelling per specifier set: `>=1, <2`, `(<2,>=1)` and `<2,>=1` are all `<2,>=1`.

    The clauses of a set are unordered, so they are sorted; whitespace and the old parenthesised form
    are dropped. Versions are compared as written (`1.0` is not `1`): an override names what SGLang's
    METADATA says, copied from it.
    """
    clauses = {c for c in re.sub(r"\s+", "", spec).strip("()").split(",") if c}
    return ",".join(sorted(clauses))


def split_requirement(req: str) -> tuple[str, str, str]:
    """'flashinfer_python==0.6.3; marker' -> ('flashinfer-python', '==0.6.3', 'marker'); the specifier
    in `specifier_key` form."""
    body, _, marker = req.partition(";")
    m = _NAME.match(body)
    if not m:
        raise WheelKitError(f"cannot parse requirement '{req}'")
    return canonical(m.group(1)), specifier_key(m.group(3)), marker.strip()


def requirement_key(req: str) -> tuple[str, str]:
    """(canonical name, specifier_key): two requirements with the same key are the same requirement,
    whatever their markers."""
    name, spec, _ = split_requirement(req)
    return name, spec


def unpack(wheel: Path, dest: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            target = (dest / info.filename).resolve()
            if not str(target).startswith(str(dest.resolve()) + os.sep):
                raise WheelKitError(f"{wheel.name}: unsafe path {info.filename}")
        zf.extractall(dest)


def _dist_info(root: Path) -> Path:
    found = sorted(p for p in root.glob("*.dist-info") if p.is_dir())
    if len(found) != 1:
        raise WheelKitError(f"expected one .dist-info folder in {root}, found {len(found)}")
    return found[0]


def requirements(wheel: Path, stack: dict, out: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        meta = Parser().parsestr(zf.read(meta_name).decode("utf-8"))
    # Requirements behind an extra are not installed by a plain install, so they are not ours to pin.
    reqs = [r for r in meta.get_all("Requires-Dist") or [] if not _EXTRA.search(r.partition(";")[2])]
    overrides = {canonical(split_requirement(o["replaces"])[0]): o for o in stack.get("overrides", [])}
    used: set[str] = set()
    lines = [f"# {meta['Name']} {meta['Version']} requirements, as built by sglstack for stack "
             f"'{stack['name']}'"]
    for req in reqs:
        name, spec, marker = split_requirement(req)
        override = overrides.get(name)
        if override is None:
            lines.append(req)
            continue
        _, want_spec, _ = split_requirement(override["replaces"])
        if spec != want_spec:
            raise WheelKitError(
                f"stack '{stack['name']}': override replaces '{override['replaces']}' but "
                f"{meta['Name']} {meta['Version']} requires '{req}': update the override"
            )
        used.add(name)
        suffix = f"; {marker}" if marker else ""
        replaced = req.split(";")[0].strip()
        lines.append(f"{override['pin']}{suffix}  # override of {replaced}: {override['reason']}")
    missing = sorted(set(overrides) - used)
    if missing:
        raise WheelKitError(
            f"stack '{stack['name']}': override(s) for {', '.join(missing)} match no requirement of "
            f"{meta['Name']} {meta['Version']}: remove them"
        )
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def overlay(root: Path, original: Path, out: Path) -> list[str]:
    """Copy into `out` the files of the unpacked tree `root` that differ from (or are not in) the wheel.

    The image installs the pristine wheel in one layer and this overlay on top, so that a patch change
    rebuilds a layer of a few kilobytes instead of reinstalling the whole package.
    """
    out.mkdir(parents=True, exist_ok=True)
    changed = []
    with zipfile.ZipFile(original) as zf:
        pristine = {info.filename: info for info in zf.infolist() if not info.is_dir()}
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            rel = path.relative_to(root).as_posix()
            if rel.endswith(".dist-info/RECORD"):
                continue  # the installed RECORD is pip's; refresh-record updates it in place
            data = path.read_bytes()
            if rel in pristine and zf.read(pristine[rel]) == data:
                continue
            target = out / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            changed.append(rel)
    return changed


def refresh_record(site: Path, dist: str) -> list[str]:
    """Rewrite the RECORD rows of installed files whose content changed after pip installed them."""
    infos = [p for p in site.glob("*.dist-info")
             if canonical(p.name.removesuffix(".dist-info").rsplit("-", 1)[0]) == canonical(dist)]
    if len(infos) != 1:
        raise WheelKitError(f"expected one installed {dist} in {site}, found {len(infos)}")
    record = infos[0] / "RECORD"
    # RECORD is CSV: paths with commas are quoted, so it is read and written with the csv module.
    with open(record, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    updated = []
    for row in rows:
        if len(row) != 3 or not row[1]:
            continue
        target = site / row[0]
        if target.is_file():
            data = target.read_bytes()
            new_hash = _record_hash(data)
            if new_hash != row[1]:
                row[1], row[2] = new_hash, str(len(data))
                updated.append(row[0])
    if updated:
        with open(record, "w", newline="", encoding="utf-8") as fh:
            csv.writer(fh, lineterminator="\n").writerows(rows)
    return updated


def _installs(site: Path, name: str) -> list[tuple[str, Path]]:
    """(version, dist-info folder) of each install of `name` in `site`, by its METADATA."""
    out = []
    for info in sorted(site.glob("*.dist-info")):
        try:
            text = (info / "METADATA").read_text(encoding="utf-8", errors="replace")
            meta = Parser().parsestr(text, headersonly=True)
        except OSError:
            continue
        if meta["Name"] and canonical(meta["Name"]) == canonical(name):
            out.append((str(meta["Version"]), info))
    return out


def _record_files(site: Path, info: Path) -> set[Path]:
    """The files a dist-info's RECORD names, as absolute paths (rows are relative to site-packages)."""
    with open(info / "RECORD", newline="", encoding="utf-8") as fh:
        return {Path(os.path.normpath(site / row[0])) for row in csv.reader(fh) if row}


def keep_only(site: Path, pin: str) -> list[str]:
    """Remove every install of NAME but the pinned one: its files that the kept install does not name, then its
    dist-info. A part unpacked in the wheels stage is copied over the venv, and a copy cannot remove what pip
    would have replaced (the venv's own setuptools under the lock's); this does, from the RECORDs."""
    name, sep, version = pin.partition("==")
    found = _installs(site, name)
    keep = [info for v, info in found if v == version]
    if not sep or len(keep) != 1:
        raise WheelKitError(f"keep-only {pin}: installed {', '.join(v for v, _ in found) or 'nothing'} in {site}")
    kept = _record_files(site, keep[0])
    removed = []
    for v, info in found:
        if info == keep[0]:
            continue
        for path in sorted(_record_files(site, info) - kept, reverse=True):
            if path.is_file() or path.is_symlink():
                path.unlink()
                folder = path.parent
                while folder != site and folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
                    folder = folder.parent
        if info.exists():
            for leftover in sorted(info.rglob("*"), reverse=True):
                leftover.rmdir() if leftover.is_dir() else leftover.unlink()
            info.rmdir()
        removed.append(f"{canonical(name)} {v}")
    return removed


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["unpack"] and len(argv) == 3:
            unpack(Path(argv[1]), Path(argv[2]))
        elif argv[:1] == ["requirements"] and len(argv) == 4:
            stack = json.loads(Path(argv[2]).read_text(encoding="utf-8"))
            for line in requirements(Path(argv[1]), stack, Path(argv[3])):
                if "# override" in line:
                    print(f"override: {line}")
        elif argv[:1] == ["version"] and len(argv) == 2:
            print(_dist_info(Path(argv[1])).name.removesuffix(".dist-info").split("-", 1)[1])
        elif argv[:1] == ["overlay"] and len(argv) == 4:
            for rel in overlay(Path(argv[1]), Path(argv[2]), Path(argv[3])):
                print(f"overlay: {rel}")
        elif argv[:1] == ["keep-only"] and len(argv) >= 3:
            for pin in argv[2:]:
                for gone in keep_only(Path(argv[1]), pin):
                    print(f"removed {gone}: {pin} replaces it")
        elif argv[:1] == ["refresh-record"] and len(argv) == 3:
            for rel in refresh_record(Path(argv[1]), argv[2]):
                print(f"RECORD updated: {rel}")
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (WheelKitError, OSError, zipfile.BadZipFile) as exc:
        print(f"wheelkit: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
