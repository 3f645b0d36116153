"""A sampling profiler for the field run's processes (put first on the server's PYTHONPATH on the GPU node, never
shipped in an image): while ~/prof exists, every 10 ms each process's main-thread stack is counted per second
since the process started, appended to ~/prof/PID.jsonl every few seconds (summarize.py reads them). It found
the warm start's FlashInfer rebuild (benchmarks/RESULTS.md, the H200 warm start of the sixth session)."""

import atexit
import json
import os
import sys
import threading
import time


def _stack(frame) -> str:
    out: list[str] = []
    while frame is not None and len(out) < 40:
        code = frame.f_code
        out.append(f"{os.path.basename(code.co_filename)}:{code.co_name}" + ("" if out else f":{frame.f_lineno}"))
        frame = frame.f_back
    return ";".join(reversed(out))


def _start() -> None:
    folder = os.path.join(os.path.expanduser("~"), "prof")
    if not os.path.isdir(folder):
        return
    pid, started = os.getpid(), time.time()
    ids: dict[str, int] = {}
    pending: list[tuple[str, int]] = []
    counts: dict[int, dict[int, int]] = {}
    main_id = threading.main_thread().ident
    lock = threading.Lock()

    def dump(final: bool = False) -> None:
        with lock:
            lines = [json.dumps({"new": s, "id": i}) for s, i in pending]
            lines += [json.dumps({"sec": sec, "c": counts[sec]}) for sec in sorted(counts)]
            pending.clear()
            counts.clear()
        if not (final or lines):
            return
        try:
            with open(os.path.join(folder, f"{pid}.jsonl"), "a") as fh:
                fh.write(json.dumps({"pid": pid, "t0": started, "argv": " ".join(sys.argv)[:300]}) + "\n")
                fh.write("".join(line + "\n" for line in lines))
        except OSError:
            pass

    def sample() -> None:
        last = time.time()
        while True:
            time.sleep(0.01)
            now = time.time()
            frame = sys._current_frames().get(main_id)
            if frame is not None:
                stack = _stack(frame)
                with lock:
                    if stack not in ids:
                        ids[stack] = len(ids)
                        pending.append((stack, ids[stack]))
                    second = counts.setdefault(int(now - started), {})
                    second[ids[stack]] = second.get(ids[stack], 0) + 1
            if now - last > 4:
                last = now
                dump()

    threading.Thread(target=sample, daemon=True, name="fieldprof").start()
    atexit.register(dump, True)


_start()
