"""A start by phase is read from the server's own log lines, worded as SGLang 0.5.17 and 0.5.23 word them; a
milestone whose line is missing is unknown (None), and so is each phase that starts or ends there."""

from __future__ import annotations

import time

from sglstack.serving.phases import (
    LogLine,
    docker_log_lines,
    phases_line,
    process_log_lines,
    start_phases,
)

T0 = 1_800_000_000.0  # the process start, epoch seconds


def stamp(offset: float, ms: bool = False, prefix: str = "") -> str:
    """SGLang's `[%Y-%m-%d %H:%M:%S(.mmm)( TP0)]` in this machine's local time, as `configure_logger` writes."""
    at = T0 + offset
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    if ms:
        text += f".{round((at % 1) * 1000):03d}"
    return f"[{text}{prefix}]"


# The lines of a real 0.5.17 EAGLE-3 start (tests/data/field/h200-eagle3.json), at made-up offsets.
REAL_START = [
    (37.0, "server_args=ServerArgs(model_path='/models/field/target', tokenizer_path='/models/field/target')"),
    (40.0, "Load weight begin. avail mem=139.09 GB"),
    (41.0, "Load weight end. elapsed=0.09 s, type=LlamaForCausalLM, avail mem=139.09 GB, mem usage=0.00 GB."),
    (42.0, "Load weight end. elapsed=0.01 s, type=LlamaForCausalLMEagle3, avail mem=139.07 GB, mem usage=0.00 GB."),
    (44.0, "Capture target prefill CUDA graph end. elapsed=2.57 s, mem usage=0.19 GB, avail mem=96.11 GB."),
    (47.0, "Capture target verify CUDA graph end. elapsed=3.05 s, mem usage=0.04 GB, avail mem=96.07 GB."),
    (58.0, "Capture draft extend CUDA graph end. elapsed=1.43 s, mem usage=0.04 GB, avail mem=95.89 GB."),
    (61.0, "The server is fired up and ready to roll!"),
]


def log_text(lines, ms=False):
    return "\n".join(f"{stamp(at, ms, ' TP0' if 'Capture' in text else '')} {text}" for at, text in lines) + "\n"


def test_each_milestone_is_its_sglang_line_and_each_phase_the_time_between():
    lines, resolution = process_log_lines(log_text(REAL_START))
    got = start_phases(lines, T0, first_token_s=62.5, resolution_s=resolution)
    assert got == {
        "milestones_s": {"imports_done": 37.0, "weights_loaded": 42.0, "cuda_graphs_captured": 58.0,
                         "healthy": 61.0, "first_token": 62.5},
        "phases_s": {"imports": 37.0, "weights": 5.0, "cuda_graphs": 16.0, "to_healthy": 3.0, "first_token": 1.5},
        "unknown": [], "resolution_s": 1.0,
    }


def test_a_missing_line_is_unknown_never_guessed():
    # --disable-cuda-graph: no capture line. The graph phase and the one after it are unknown, the rest known.
    no_graphs = [(at, text) for at, text in REAL_START if "Capture" not in text]
    lines, _ = process_log_lines(log_text(no_graphs))
    got = start_phases(lines, T0, first_token_s=None)
    assert got["milestones_s"]["cuda_graphs_captured"] is None
    assert got["phases_s"] == {"imports": 37.0, "weights": 5.0, "cuda_graphs": None, "to_healthy": None,
                               "first_token": None}
    assert got["unknown"] == ["cuda_graphs_captured", "first_token"]
    assert phases_line("baseline", got) == ("smoke: baseline: start by phase: imports 37.0s, weights 5.0s, "
                                            "cuda_graphs unknown, to_healthy unknown, first_token unknown")


def test_a_log_without_stamps_or_without_a_start_time_knows_nothing_but_the_first_token():
    unstamped = [LogLine(None, text) for _, text in REAL_START]
    got = start_phases(unstamped, T0, first_token_s=70.0)
    assert got["unknown"] == ["imports_done", "weights_loaded", "cuda_graphs_captured", "healthy"]
    assert got["phases_s"]["imports"] is None and got["milestones_s"]["first_token"] == 70.0


def test_milliseconds_and_a_stamp_a_little_before_the_start():
    lines, resolution = process_log_lines(log_text([(0.25, "server_args=ServerArgs()"),
                                                    (1.5, "Load weight end. elapsed=0.10 s")], ms=True))
    got = start_phases(lines, T0 + 0.5, first_token_s=None, resolution_s=resolution)
    # 0.25 s is before the start (stamps and the start are read on different sides): it counts as 0, not -0.25.
    assert got["milestones_s"]["imports_done"] == 0.0 and got["milestones_s"]["weights_loaded"] == 1.0
    assert resolution == 0.001


def test_the_docker_runner_reads_the_engine_stamps():
    text = ("2027-01-15T08:00:37.250000000Z [2027-01-15 08:00:37] server_args=ServerArgs()\n"
            "2027-01-15T08:01:00.500000000Z [2027-01-15 08:01:00] Capture target decode CUDA graph end. elapsed=3 s\n"
            "2027-01-15T08:01:02Z [2027-01-15 08:01:02] The server is fired up and ready to roll!\n")
    lines = docker_log_lines(text)
    assert lines[0].text == "[2027-01-15 08:00:37] server_args=ServerArgs()"
    started = lines[0].at - 37.25  # 08:00:00 UTC that day
    got = start_phases(lines, started, first_token_s=63.0)
    assert got["milestones_s"] == {"imports_done": 37.25, "weights_loaded": None, "cuda_graphs_captured": 60.5,
                                   "healthy": 62.0, "first_token": 63.0}


def test_the_cpu_double_logs_the_same_lines():
    """tests/doubles/sglang-double prints each milestone line as SGLang words it (the smoke tests read them)."""
    from pathlib import Path

    source = (Path(__file__).resolve().parents[1] / "doubles" / "sglang-double" / "sglang" / "srt" / "entrypoints"
              / "http_server.py").read_text()
    for words in ("server_args=", "Load weight end. elapsed=", "CUDA graph end. elapsed=",
                  "The server is fired up and ready to roll!"):
        assert words in source
