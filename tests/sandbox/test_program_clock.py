"""``toolgym.util.program_clock`` and ``Limits(clock="program")``: a time limit on the program's own time.

A wall-clock limit fails a fast program on a busy machine; the program clock does not, and it still ends a
program that sleeps (as the wall clock would), one that computes (as a CPU clock would) and one that hands
its work to processes it starts (their CPU is on its clock).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from toolgym.sandbox.run_status import classify_run
from toolgym.util.program_clock import STARVED_FACTOR, ProgramClock, group_cpu

PROGRAM = {"clock": "program"}


def _cpu_of(pid):
    with open(f"/proc/{pid}/stat", "rb") as fh:
        fields = fh.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_clock_counts_every_process_of_the_group():
    """A program cannot do its work in processes it starts while it waits: their CPU is on its clock."""
    leader = "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
    proc = subprocess.Popen([sys.executable, "-c", leader + "time.sleep(60)\n"], process_group=0)
    try:
        clock = ProgramClock(proc.pid, 0.3, (f"/proc/{proc.pid}/schedstat",))
        for _ in range(600):  # the spinner's first 0.3 s of CPU (a loop guard, not a time bound)
            if (group_cpu(proc.pid) or 0.0) >= 0.3:
                break
            time.sleep(0.05)
        assert group_cpu(proc.pid) >= _cpu_of(proc.pid) + 0.25  # the spinner's time, beside the leader's own
        assert clock.used()[0] >= 0.3 and clock.next_check() == 0.0 and clock.starved() is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_without_schedstat_the_clock_is_the_wall_clock():
    clock = ProgramClock(os.getpid(), 0.2, ("/proc/no-such-process/schedstat",))
    time.sleep(0.25)
    own, wall = clock.used(scan=False)
    assert own == wall >= 0.25 and clock.starved() is None


def test_a_starved_run_is_the_sandboxs_error_never_a_timeout():
    class Usage:
        ru_utime = ru_stime = 0.01
        ru_maxrss = 1000

    limits = {"cpu_s": 1, "memory_bytes": 1 << 30, **PROGRAM}
    ready = [b'{"ready": true}']
    starved = classify_run(9, Usage(), 5.0, "starved", limits, 0.5, ready)
    assert starved["status"] == "sandbox_error" and starved["detail"].startswith("not timed: the machine")
    timeout = classify_run(9, Usage(), 5.0, "timeout", limits, 0.5, ready)
    assert timeout["status"] == "timeout"
    assert timeout["detail"] == "time limit of 0.5 s exceeded; process tree killed"


def test_a_program_that_sleeps_or_spins_is_ended_at_its_limit(sb):
    limits = sb.limits.model_copy(update={"timeout_s": 0.5, **PROGRAM})
    for code in ("import time\ntime.sleep(30)\n", "while True:\n    pass\n"):
        res = sb.run(code, limits=limits)
        assert res.status == "timeout", (code, res)
        assert res.detail == "time limit of 0.5 s exceeded; process tree killed"
        assert 0.5 <= res.program_s < 0.5 * STARVED_FACTOR, res
    fast = sb.run("print(sum(range(1000)))", limits=limits)
    assert fast.ok and fast.stdout == "499500\n" and 0 < fast.program_s <= fast.wall_s
    assert sb.run("print(1)").program_s is None  # the wall clock: no program clock


def test_a_busy_machine_does_not_time_out_a_fast_program(sb):
    """Beside six CPU-bound processes per core, a program needing 0.15 s of CPU takes longer than its 0.5-s
    limit on the wall clock, and is not timed out; on the wall clock it is."""
    calibration = "import time\nt = time.process_time()\nn = 0\nfor _ in range(1 << 20):\n    n += 1\n"
    res = sb.run(calibration + "print(time.process_time() - t)")
    rounds = int((1 << 20) * 0.15 / max(float(res.stdout), 1e-3))
    busy = f"n = 0\nfor _ in range({rounds}):\n    n += 1\nprint('done')\n"
    # each in a session of its own: the kernel shares the CPU between sessions first (autogroup)
    spin = [sys.executable, "-c", "while True: pass"]
    spinners = [subprocess.Popen(spin, start_new_session=True) for _ in range(6 * (os.cpu_count() or 1))]
    try:
        own = sb.run(busy, limits=sb.limits.model_copy(update={"timeout_s": 0.5, "cpu_s": 5, **PROGRAM}))
        wall = sb.run(busy, limits=sb.limits.model_copy(update={"timeout_s": 0.5, "cpu_s": 5}))
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
    assert own.ok and own.stdout == "done\n" and own.program_s < 0.5, own
    assert wall.status == "timeout", wall  # the control: the load is real
