"""The process runner's kept server log has the server's secrets hidden on every way out of a run: a run that
measured, and one ended by a signal or an error while measuring (the log is kept either way). No timing."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest
from waits import wait_for_line

from sglstack.core.signals import Interrupted
from sglstack.smoke import server as server_mod
from sglstack.smoke.launch import ProcessPlan
from sglstack.smoke.measure import ServerRun

KEY = "sk-live-7d1e"


def _serve(tmp_path, monkeypatch, measured):
    """serve_process_and_measure over a shell 'server' that logs its arguments (the key among them) and
    stays up; `measured` stands in for the measuring once that line is in the log."""
    log_path = tmp_path / "build" / "smoke" / "baseline.log"
    log_path.parent.mkdir(parents=True)
    script = f"echo \"server_args=ServerArgs(api_key='{KEY}')\"; exec sleep 60"
    plan = ProcessPlan(kind="baseline", argv=("/bin/sh", "-c", script), environment={"PATH": "/usr/bin:/bin"},
                       port=1, python="/bin/sh", secrets=(KEY,))

    def measure(server, api_key, options, log):
        wait_for_line(log_path, "server_args")
        return measured()

    monkeypatch.setattr(server_mod, "measure_server", measure)
    options = SimpleNamespace(build_dir=str(tmp_path / "build"))
    return (lambda: server_mod.serve_process_and_measure(plan, options, log_path, lambda _m: None),  # type: ignore[arg-type]
            log_path)


def test_a_run_that_measured_keeps_its_log_with_the_key_hidden(tmp_path, monkeypatch):
    run, log_path = _serve(tmp_path, monkeypatch, lambda: ServerRun(kind="baseline", started=True))
    assert run().started
    assert log_path.read_text() == "server_args=ServerArgs(api_key='***')\n"


@pytest.mark.parametrize("stop", [Interrupted(signal.SIGTERM), RuntimeError("the client broke")])
def test_a_run_ended_while_measuring_keeps_its_log_with_the_key_hidden(tmp_path, monkeypatch, stop):
    def measured():
        raise stop

    run, log_path = _serve(tmp_path, monkeypatch, measured)
    with pytest.raises(type(stop)):
        run()
    assert log_path.read_text() == "server_args=ServerArgs(api_key='***')\n"
