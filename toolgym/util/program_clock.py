"""A program's own time: the clock a time limit is judged on when a busy machine must not change the verdict.

A limit on the wall clock fails a fast program on a loaded machine: on two busy cores an honest ``add`` in
the code verifier took more than its 1-s limit waiting for a CPU (a CI run). ``ProgramClock`` is the larger
of

- the CPU time of the program's process group (every thread, and every process it starts in the group),
- the wall time less what the watched threads spent runnable but waiting for a CPU (the kernel's
  ``/proc/<pid>/schedstat``, second field).

A program that sleeps or blocks is timed as on a wall clock; one that computes, as on a CPU clock; one that
spins threads or processes, at the rate of all of them together. A program that has not used its limit by
``STARVED_FACTOR`` times the limit on the wall clock is *starved*: the machine kept it from a CPU, and its
outcome is the sandbox's error, never a fail. That factor also bounds what a program gains by loading the
machine itself with processes that leave its group. Where ``schedstat`` cannot be read (no ``/proc``,
another kernel), the clock is the wall clock.

Standard library only, and no imports from toolgym: the code verifier ships this file's source into its
sandbox session ahead of its harness (``toolgym.rewards.code.runner``), as it does the harness itself; the
fork server imports it (``clock="program"`` in ``toolgym.sandbox.limits.Limits``).
"""

from __future__ import annotations

import contextlib
import os
import time

STARVED_FACTOR = 10.0
#: the least time between two looks at the clock (each may scan ``/proc`` for the group's processes)
CHECK_INTERVAL_S = 0.05
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def run_delay(path):
    """Seconds the thread of a ``schedstat`` file spent runnable but waiting for a CPU (None: unknown)."""
    data = _read(path)
    try:
        return int(data.split()[1]) / 1e9 if data else None
    except (IndexError, ValueError):
        return None


def group_cpu(pgid):
    """CPU seconds of every process in the process group ``pgid``, all their threads (None: no ``/proc``)."""
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return None
    total = 0.0
    for entry in entries:
        data = _read(f"/proc/{entry}/stat")
        if not data:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        with contextlib.suppress(IndexError, ValueError):
            if int(fields[2]) == pgid:
                total += (int(fields[11]) + int(fields[12])) / _TICKS
    return total


class ProgramClock:
    """The own time of the program whose process group is ``pgid``, from ``start`` (a ``time.monotonic()``;
    default now), against ``limit`` seconds.

    ``waiters`` are the ``schedstat`` files of the threads whose waits for a CPU are not the program's time
    (its main thread; the code harness adds its driver, which takes turns with the program).
    """

    def __init__(self, pgid, limit, waiters, start=None):
        self.pgid, self.limit, self.waiters = pgid, limit, tuple(waiters)
        self.wall0 = time.monotonic() if start is None else start
        self.cap = self.wall0 + limit * STARVED_FACTOR
        self.delay0 = self._delays()

    def _delays(self):
        total = 0.0
        for path in self.waiters:
            delay = run_delay(path)
            if delay is None:
                return None
            total += delay
        return total

    def used(self, scan=True):
        """(own seconds, wall seconds) so far; ``scan=False`` leaves out the other processes of the group
        (for a program that ended on its own: they are killed with it)."""
        wall = time.monotonic() - self.wall0
        delays = self._delays()
        own = wall if delays is None or self.delay0 is None else wall - max(0.0, delays - self.delay0)
        if scan and own < self.limit:  # the scan only when the wall clock alone would have ended it
            own = max(own, group_cpu(self.pgid) or 0.0)
        return own, wall

    def next_check(self):
        """Seconds until the limit could be reached (or the cap); 0.0: time is up (``starved`` says how)."""
        own = self.used()[0]
        now = time.monotonic()
        if own >= self.limit or now >= self.cap:
            return 0.0
        return max(CHECK_INTERVAL_S, min(self.limit - own, self.cap - now))

    def starved(self):
        """Why the time is up without the program having used it, or None when it used its limit."""
        own, wall = self.used()
        if own >= self.limit:
            return None
        got = f"{own:.2f} s of its {self.limit:g} s in {wall:.1f} s"
        return f"the machine is too busy (the program got {got})"
