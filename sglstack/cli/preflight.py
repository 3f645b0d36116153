"""`invoke preflight`: is a GPU node fit for the expensive run (its options, and the report it prints)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config.imageref import not_an_image
from ..core.options import ReportOptions, docker_host_option, option, stacks_file_option
from .cmdoptions import stack_option
from .options import command

if TYPE_CHECKING:
    from ..core.jsonreport import JsonReport


@dataclass(frozen=True)
class PreflightOptions(ReportOptions):
    stack: str = stack_option()
    stacks_file: str = stacks_file_option()
    docker_host: str | None = docker_host_option("run the checks inside --image on this Docker engine (ssh://, "
                                                 "tcp://, unix://)")
    image: str | None = option("the stack image to run the checks in (with every GPU requested)",
                               check=not_an_image)
    sizes: str | None = option("all-reduce message sizes (default: 1M,64M,1G)")


@command(PreflightOptions)
def preflight(o: PreflightOptions, as_json: JsonReport) -> int:
    """Check a GPU node before the expensive run: driver, GPUs, topology, copy and NCCL bandwidth, limits."""
    # at call time: rich and the matrix are slow to import
    from ..config.matrix import load_matrix
    from ..core.console import console as make_console
    from ..preflight.errors import PreflightUnavailable
    from ..preflight.gate import parse_sizes, run_preflight
    from ..preflight.report import render_report

    console = make_console()
    stack = load_matrix(o.stacks_file).get(o.stack)
    report = run_preflight(stack, docker_host=o.docker_host, image=o.image,
                           sizes=parse_sizes(o.sizes) if o.sizes else None, console=console)
    as_json.emit(report.to_dict())
    if report.fatal:
        where = f" in {o.image}" if o.image else ""
        raise PreflightUnavailable(f"preflight for stack '{o.stack}'{where}: {report.fatal}")
    render_report(report, console, where=f"{o.image} on {o.docker_host or 'the local engine'}" if o.image
                  else report.node.get("hostname") or "this node")
    return report.exit_code
