"""The docker runner's seam for in-process smoke tests: a double of what the server module reads of docker's SDK
(`running_container`'s container: `attrs` with its state and published port, `reload`, `logs`, `wait`), whose
command is served by the SGLang double on a thread (`inthread_sglang.ThreadServers`), parsed by its own flag parser.

The container's file system is this machine's, seen through its binds: an environment value under a bind's
target names the same file under the bind's source (the kernel caches a smoke binds into the container are the
folders it packs). A command other than the server's (DeepGEMM's pre-compiler) runs to its end; `wait` gives its code.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from inthread_sglang import ThreadProc, ThreadServers

from sglstack.adapters.process import free_tcp_port


class Container:
    """A running container as the SDK shows it: its state, the port it publishes, its log with engine stamps."""

    def __init__(self, container_port: int, host_port: int | None, log_path: Path, proc: ThreadProc | None = None):
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        ports = {f"{container_port}/tcp": [{"HostPort": str(host_port)}]} if host_port else {}
        self.attrs: dict[str, Any] = {"State": {"Status": "running", "StartedAt": now},
                                      "NetworkSettings": {"Ports": ports}}
        self.log_path, self.stamp, self.proc = log_path, now, proc

    def reload(self) -> None:
        """The state as the engine would say it now: exited, with its code, once the server's "process" ended."""
        if self.proc is not None and self.proc.returncode is not None:
            self.attrs["State"] = {**self.attrs["State"], "Status": "exited", "ExitCode": self.proc.returncode}

    def logs(self, stdout: bool, stderr: bool, timestamps: bool = False, tail: int | None = None) -> bytes:
        lines = self.log_path.read_text().splitlines()
        lines = [line.split("] ", 1)[-1] for line in lines][-(tail or len(lines)):]
        return "".join(f"{self.stamp + ' ' if timestamps else ''}{line}\n" for line in lines).encode()

    def wait(self, timeout: float) -> dict[str, int]:
        assert self.proc is not None
        return {"StatusCode": self.proc.wait(timeout)}


def _through_binds(env: Mapping[str, str], volumes: Sequence[str]) -> dict[str, str]:
    """The environment with each value under a bind's target pointed at the bind's source on this machine."""
    out = dict(env)
    for volume in volumes:
        source, target = volume.split(":")[:2]
        for key, value in env.items():
            if value == target or value.startswith(target + "/"):
                out[key] = source + value[len(target):]
    return out


class Engine:
    """The containers started, each with the keyword arguments the SDK's `containers.run` would get."""

    def __init__(self, tmp_path: Path, threads: ThreadServers | None = None, *, listen: str | None = None) -> None:
        self.tmp_path, self.threads = tmp_path, threads or ThreadServers()
        self.listen = listen  # the address the servers listen on, for the container's --host (a remote node's)
        self.runs: list[dict[str, Any]] = []
        self.opened: list[tuple[Any, ...]] = []

    @contextlib.contextmanager
    def running_container(self, engine: Any, image: str, *, command: list[str], name_prefix: str,
                          labels: Mapping[str, str], **kwargs: Any) -> Iterator[Container]:
        self.runs.append({"engine": engine, "image": image, "command": command, "name_prefix": name_prefix,
                          "labels": labels, **kwargs})
        (container_port, _none), = [(int(k.split("/")[0]), v) for k, v in kwargs["ports"].items()]
        env = _through_binds(kwargs["environment"], kwargs.get("volumes") or [])
        log_path = self.tmp_path / f"container-{len(self.runs)}.log"
        if command[1:3] != ["-m", "sglang.launch_server"]:  # a one-off: run to its end before its container is seen
            with self.threads.running_in_thread(command, env=env, log_path=log_path) as proc:
                yield Container(container_port, None, log_path, proc)
            return
        port = free_tcp_port()
        argv = [*command[:command.index("--port") + 1], str(port), *command[command.index("--port") + 2:]]
        if self.listen:
            argv[argv.index("--host") + 1] = self.listen
        with self.threads.running_in_thread(argv, env=env, log_path=log_path) as proc:
            yield Container(container_port, port, log_path, proc)
