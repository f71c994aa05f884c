"""How a finished run becomes a status: the fork server's verdict on one child.

The server knows what it did (killed the run for its wall clock, memory or output) and what the kernel says
(exit code or signal, CPU time, peak memory); the child's own status frames are untrusted once user code has
run, so they can only make a result worse (a ``MemoryError`` it reports), never better. Standard library
only: this runs in the fork server.
"""

from __future__ import annotations

import json
import math
import os
import signal
from typing import Any

from toolgym.sandbox.child_setup import SETUP_TIMEOUT_S

#: the share of its CPU limit a run killed by SIGKILL must have used to be reported as past that limit. The
#: kernel kills at RLIMIT_CPU on its tick-sampled CPU clock (a whole tick charged to the task running at each
#: tick), while ``wait4`` reports the precise time; on a busy machine the two part: a ``while True: pass``
#: killed at a 1-s limit had used 0.874 s (CI, two cores, other processes pinned beside it). A SIGKILL the
#: program sends itself after half its budget is called a timeout, which is no better a verdict.
CPU_KILL_SHARE = 0.5


def classify_run(
    wait_status: int,
    usage: Any,
    wall: float,
    reason: str | None,
    limits: dict,
    timeout: float,
    frames: list[bytes],
) -> dict:
    """The reply for one finished run: its status, detail, exit code or signal, and resource use.

    ``wait_status``/``usage`` come from ``os.wait4``; ``reason`` is why the server stopped the run itself
    (``timeout``: the program ran past ``timeout``; ``starved``: with ``clock="program"``, the machine kept
    it from a CPU past the clock's cap; ``setup_timeout``: the child's setup past
    ``SETUP_TIMEOUT_S``; ``memory``, ``disk``, ``output_limit``) or None; ``frames`` are the child's status
    frames: first its setup report, then (if it raised) the name of the uncaught exception.
    """
    result = {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_memory_bytes": usage.ru_maxrss * 1024,
        "exit_code": None,
        "signal": None,
        "detail": "",
    }
    parsed = []
    for raw in frames[:4]:
        try:
            parsed.append(json.loads(raw))
        except ValueError:
            parsed.append({})
    first = parsed[0] if parsed else {}
    if os.WIFSIGNALED(wait_status):
        result["signal"] = os.WTERMSIG(wait_status)
    else:
        result["exit_code"] = os.WEXITSTATUS(wait_status)
    if not isinstance(first, dict) or not first.get("ready"):
        why = first.get("setup_error") if isinstance(first, dict) else None
        if reason == "setup_timeout":
            why = f"setup did not finish within {SETUP_TIMEOUT_S:g} s"
        result.update(status="sandbox_error", detail=f"sandbox setup failed: {why or wait_status}")
        return result
    exc = next((p.get("exc") for p in parsed[1:] if isinstance(p, dict) and p.get("exc")), None)
    sig = result["signal"]
    cpu_limit = math.ceil(limits["cpu_s"])  # RLIMIT_CPU is whole seconds (child_setup rounds up)
    if reason == "timeout":
        clock = "time limit" if limits.get("clock") == "program" else "wall-clock limit"
        result.update(status="timeout", detail=f"{clock} of {timeout:g} s exceeded; process tree killed")
    elif reason == "starved":  # clock="program": the machine kept it from a CPU (toolgym.util.program_clock)
        result.update(status="sandbox_error", detail="not timed: the machine is too busy")
    elif reason == "memory":
        result.update(
            status="memory",
            detail=f"its processes together held more than {limits['memory_bytes']} bytes; killed",
        )
    elif reason == "disk":
        result.update(
            status="killed",
            detail=f"its files took more than disk_bytes={limits['disk_bytes']} bytes; killed",
        )
    elif reason == "output_limit":
        result.update(
            status="output_limit",
            detail=f"output exceeded {limits['max_output_total_bytes']} bytes on one stream; killed",
        )
    elif sig in (signal.SIGKILL, signal.SIGXCPU) and result["cpu_s"] >= cpu_limit * CPU_KILL_SHARE:
        result.update(status="timeout", detail=f"CPU time limit of {limits['cpu_s']:g} s exceeded")
    elif (exc == "MemoryError" and result["exit_code"] != 0) or (
        sig is not None and result["peak_memory_bytes"] >= 0.9 * limits["memory_bytes"]
    ):  # the program's own report can only make its result worse, never better
        result.update(status="memory", detail=f"memory limit of {limits['memory_bytes']} bytes reached")
    elif sig is not None:
        result.update(status="killed", detail=f"killed by signal {signal.Signals(sig).name}")
    else:
        result.update(status="ok" if result["exit_code"] == 0 else "error")
    return result
