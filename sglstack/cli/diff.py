"""`invoke diff BEFORE AFTER`: its options, and the diff of the two snapshots printed (or as JSON)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.jsonreport import NO_JSON
from ..core.options import ReportOptions, docker_host_option, required
from .options import command

if TYPE_CHECKING:
    from ..core.jsonreport import JsonReport


@dataclass(frozen=True)
class DiffOptions(ReportOptions):
    # Names of more than one letter: invoke would make `-a` and `-b` short flags of these (one meaning per letter).
    before: str = required("the first argument: an image (tag, id, repo@sha256:...), a build record, or a lock")
    after: str = required("the second argument: the same kinds")
    docker_host: str | None = docker_host_option("Docker engine URL to read images from (default: DOCKER_HOST / "
                                                 "local socket)")


@command(DiffOptions, positional=("before", "after"))
def diff(o: DiffOptions, as_json: JsonReport) -> int:
    """invoke diff BEFORE AFTER [--json]: what changed (base image, pins, packages, patches, SGLang, labels); an
    index on either side: platform by platform, and the platforms added or removed."""
    return diff_command(o.before, o.after, as_json=as_json, docker_host=o.docker_host)


def diff_command(a: str, b: str, *, as_json: JsonReport = NO_JSON, docker_host: str | None = None) -> int:
    """Print what changed from A to B (a table, and/or the JSON report); exit 0 either way: a difference is
    an answer."""
    # at call time: the Docker SDK and the registry client would slow `invoke --list`
    from ..core.console import console as make_console
    from ..diff.compare import diff_to_json, print_diff
    from ..diff.platforms import index_diff, index_diff_to_json, print_index_diff, single_diff
    from ..diff.sources import load_side

    before, after = load_side(a, docker_host=docker_host), load_side(b, docker_host=docker_host)
    if before.index or after.index:  # platform by platform, and which platforms came or went
        by_platform = index_diff(before, after)
        as_json.emit(index_diff_to_json(by_platform))
        if not as_json.stdout:
            print_index_diff(by_platform, make_console())
        return 0
    changes = single_diff(before, after)
    as_json.emit(diff_to_json(changes))
    if not as_json.stdout:
        print_diff(changes, make_console())
    return 0
