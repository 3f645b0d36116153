"""Run the node-side preflight inside a stack image on a Docker host, with the host's GPUs.

The node-side modules are copied into the container (`put_archive`) before it starts and run with the
image's own python3 and torch; the report comes back as JSON between markers in the container's log.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import docker
import docker.errors
from docker.types import DeviceRequest, Ulimit

from ..adapters.docker import OWNER_LABEL, docker_client, engine_image, remove_container, unique_name
from ..core.errors import first_line, last_line
from ..core.inputs import loads
from ..core.labels import COVERAGE_LABEL, parse_coverage_label
from ..inimage.preflight.__main__ import REPORT_BEGIN, REPORT_END
from ..inimage.preflight.allreduce import MULTICAST_OFF_ENV
from ..inimage.preflight.checks import FAIL, Check, GpuInfo, Requirements, check_kernel_coverage
from ..inimage.preflight.node import NodeReport
from .errors import PreflightUnavailable

IN_IMAGE_PARENT = "/opt"  # exists in every Debian/Ubuntu-based image; the archive adds its own folder
# What runs in the image: in-image code, the standard library and torch only (tests/unit/test_preflight_remote.py).
NODE_DIR = Path(__file__).resolve().parents[1] / "inimage" / "preflight"
CONTAINER_TIMEOUT_S = 900
GPU_RUNTIME_CHECK = "gpu runtime"
# dockerd's answer to a GPU device request when no GPU runtime (nvidia-container-toolkit) is installed.
NO_GPU_RUNTIME = "could not select device driver"


def node_package_archive() -> bytes:
    """A tar of the node side (every module of `sglstack.inimage.preflight`) as the package
    `sglstack.preflight` under a stub `sglstack` package: `python3 -m sglstack.preflight` in the image."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"sglstack-preflight/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))

        add("sglstack/__init__.py", b'"""The preflight part of sglstack, copied in by `invoke preflight`."""\n')
        for module in sorted(NODE_DIR.glob("*.py")):
            add(f"sglstack/preflight/{module.name}", module.read_bytes())
    return buf.getvalue()


def node_arguments(req: Requirements) -> list[str]:
    args = [
        "--stack-name",
        req.stack,
        "--tp",
        str(req.tp),
        "--arch",
        ",".join(req.arch_list),
        "--shm-size",
        str(req.shm_bytes),
        "--sizes",
        ",".join(str(s) for s in req.sizes),
        "--emit-json",
    ]
    return [*args, "--cuda", req.cuda] if req.cuda else args


def extract_report(log: str) -> NodeReport | None:
    begin, end = log.rfind(REPORT_BEGIN), log.rfind(REPORT_END)
    if begin < 0 or end < begin:
        return None
    return NodeReport.from_dict(loads(log[begin + len(REPORT_BEGIN) : end]))


def run_in_image(
    docker_host: str | None, image: str, req: Requirements, *, shm_size: str, timeout: float = CONTAINER_TIMEOUT_S
) -> NodeReport:
    """The same checks as on the node, inside `image` on `docker_host`, with every GPU requested."""
    where = docker_host or "the default Docker engine"
    client = docker_client(docker_host)
    name = unique_name("sglstack-preflight")
    try:
        # Removed by name in `finally`: also when a signal cuts the create call itself short.
        try:
            container = client.containers.create(
                image,
                entrypoint=["python3", "-m", "sglstack.preflight"],
                command=node_arguments(req),
                name=name,
                labels={OWNER_LABEL: "sglstack-preflight"},
                environment={**MULTICAST_OFF_ENV, "PYTHONPATH": f"{IN_IMAGE_PARENT}/sglstack-preflight"},
                device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])],
                shm_size=shm_size,
                ulimits=[Ulimit(name="memlock", soft=-1, hard=-1)],
            )
        except docker.errors.ImageNotFound:
            raise PreflightUnavailable(f"image {image} is not on {where}") from None
        except docker.errors.APIError as exc:
            raise PreflightUnavailable(f"{where} cannot create the preflight container: {_reason(exc)}") from None
        if not container.put_archive(IN_IMAGE_PARENT, node_package_archive()):
            raise PreflightUnavailable(f"cannot copy preflight into {image} on {where}")
        try:
            container.start()
        except docker.errors.APIError as exc:
            if NO_GPU_RUNTIME in _reason(exc):
                return no_gpu_runtime_report(req, f"{where} cannot start {image} with GPUs: {_reason(exc)}")
            raise PreflightUnavailable(f"{where} cannot start {image} with GPUs: {_reason(exc)}") from None
        status = container.wait(timeout=timeout)
        log = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
    finally:
        remove_container(client, name)
    report = extract_report(log)
    if report is None:
        raise PreflightUnavailable(
            f"preflight in {image} exited {status.get('StatusCode')} without a report: {last_line(log)}"
        )
    if not report.fatal:
        report.checks.append(image_coverage_check(engine_image(client, image).labels or {}, report))
    return report


def no_gpu_runtime_report(req: Requirements, reason: str) -> NodeReport:
    """The node's engine cannot hand GPUs to a container at all: the first check fails, nothing else runs."""
    check = Check(GPU_RUNTIME_CHECK, FAIL, "none", "a GPU runtime in Docker (NVIDIA Container Toolkit)", reason)
    return NodeReport(req, checks=[check], node={}, fatal=reason)
def image_coverage_check(labels: dict[str, str], report: NodeReport) -> Check:
    """The node's GPUs (from the report) against the image's coverage label, if it has one."""
    gpus = [GpuInfo(index=g.get("index", i), name=g.get("name", ""), compute_cap=g.get("compute_cap", ""))
            for i, g in enumerate(report.node.get("gpus") or [])]
    value = labels.get(COVERAGE_LABEL)
    if value is None:
        return check_kernel_coverage(gpus, None)
    try:
        return check_kernel_coverage(gpus, parse_coverage_label(value))
    except ValueError as exc:
        return check_kernel_coverage(gpus, None, f"the image's {COVERAGE_LABEL} label is unreadable: {exc}")


def _reason(exc: docker.errors.APIError) -> str:
    text = exc.explanation if isinstance(exc.explanation, str) else str(exc)
    return first_line(text)
