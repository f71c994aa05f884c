"""A watch on a long test run (a real verl run: Ray, vLLM, the trainer) that ends it as soon as it stops
making progress, instead of letting it hang to its time limit, and says where it stood.

A run makes progress when it prints a line of a shape it has not printed before (digits and hex ids left
out: start-up goes through many such lines; a paused rollouter repeating its statistics does not), prints a
training step (verl's ``step:N -`` line), or writes a trace event (``toolgym.testing.verl_trace``: each
generation, episode, update and sync). A run silent for ``stall_s`` in that sense is stalled: its session is
ended and ``RunStalled`` says how long it was silent, the last lines of the trainer and of the rollouter, the
trace's last events and the end of the log. A ``force_failed`` trace event (a forced partial rollout that
cannot happen) ends the run at once, with its reason.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: what a line's shape leaves out: numbers (pids, timings, counts) and hex ids (request ids, addresses)
_VARIABLE = re.compile(r"0x[0-9a-f]+|[0-9a-f]{8,}|\d+(?:\.\d+)?")
_STEP = re.compile(r"\bstep:\d+ - ")
#: the bound for a real verl run in a test on two cores: a run silent this long has stalled. The longest
#: silences of passing runs (the sync, one-step-off and fully-async CPU runs, one core kept busy beside
#: them) were 20-21 s: in start-up, and while the fully-async rollouter waits for the first sync. Seven
#: times that leaves room for a busier machine; a stalled run is ended 150 s after its last progress, not at
#: its overall limit (900 s)
VERL_STALL_S = 150.0
#: the roles whose last lines a stalled run's report shows
ROLES = ("FullyAsyncTrainer", "FullyAsyncRollouter", "OneStepOff", "TaskRunner", "step:")


class RunStalled(AssertionError):
    """A watched run stopped making progress (or could not do what it was forced to); the message says
    where it stood."""


def line_shape(line: str) -> str:
    """A log line without its numbers and ids: two lines of one shape say the same thing."""
    return _VARIABLE.sub("#", line.strip())


@dataclass
class Progress:
    """What the watch has seen of a run: its log, the line shapes printed so far, and when it last moved."""

    trace: Path | None = None
    lines: list[str] = field(default_factory=list)
    shapes: set[str] = field(default_factory=set)
    last: float = field(default_factory=time.monotonic)
    #: the longest silence so far, in seconds (what ``stall_s`` must stay above), and the last line before it
    longest_silence: float = 0.0
    longest_after: str = ""
    _trace_size: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def moved(self) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self.last > self.longest_silence:
                self.longest_silence = now - self.last
                self.longest_after = self.lines[-2].strip()[:200] if len(self.lines) > 1 else ""
            self.last = now

    def saw_line(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)
            shape = line_shape(line)
            new = shape not in self.shapes
            self.shapes.add(shape)
        if new or _STEP.search(line):
            self.moved()

    def summary(self) -> str:
        """The longest silence and what came before it: a line for the log, to size ``stall_s`` by. The line
        before it is quoted with its `` - `` separators as `` | ``: a quoted ``step:N - ...`` line, cut at 200
        characters, would otherwise read as that step's metrics to ``step_metrics``, which keeps a step's last
        line (the tests read every metric of the run's steps from its log; a run whose longest silence came
        after step 1's line lost them)."""
        quoted = self.longest_after.replace(" - ", " | ")
        return f"longest silence {self.longest_silence:.0f} s, after: {quoted}"

    def trace_events(self) -> list[dict]:
        if self.trace is None or not self.trace.is_dir():
            return []
        events = []
        for path in self.trace.glob("*.jsonl"):
            for text in path.read_text(errors="replace").splitlines():
                try:
                    events.append(json.loads(text))
                except ValueError:  # a line being written
                    continue
        return sorted(events, key=lambda event: event.get("time", 0))

    def poll_trace(self) -> str | None:
        """Count a grown trace as progress; the reason of a ``force_failed`` event, if one was written."""
        if self.trace is None or not self.trace.is_dir():
            return None
        paths = list(self.trace.glob("*.jsonl"))
        size = sum(path.stat().st_size for path in paths if path.exists())
        if size != self._trace_size:
            self._trace_size = size
            self.moved()
        for path in paths:
            if path.name.startswith("force_failed-"):
                return path.read_text(errors="replace").strip()
        return None

    def silent_for(self) -> float:
        with self._lock:
            return time.monotonic() - self.last

    def report(self, why: str) -> str:
        """Where the run stood: ``why``, each role's last lines, the trace's last events, the log's end."""
        with self._lock:
            lines = list(self.lines)
        parts = [why]
        for role in ROLES:
            last = [line.rstrip() for line in lines if role in line][-2:]
            if last:
                parts.append(f"last {role} lines:\n" + "\n".join(line[:600] for line in last))
        events = [
            {k: v for k, v in event.items() if k not in ("samples", "parameters", "prompt_ids", "log_probs")}
            for event in self.trace_events()[-12:]
        ]
        if events:
            shown = "\n".join(json.dumps(event)[:400] for event in events)
            parts.append(f"the trace's last events:\n{shown}")
        parts.append("the end of the log:\n" + "".join(lines)[-6000:])
        return "\n\n".join(parts)


def watch(
    proc: subprocess.Popen,
    timeout_s: float,
    stall_s: float | None,
    trace: Path | None,
    end: Callable[[], None],
    poll_s: float = 0.5,
) -> tuple[int | None, str, Progress]:
    """Read ``proc``'s output (text, one stream) until it exits; ``end()`` it on a stall (``RunStalled``),
    a ``force_failed`` event (``RunStalled``) or past ``timeout_s`` (status None)."""
    progress = Progress(trace=trace)
    stdout = proc.stdout
    assert stdout is not None

    def read() -> None:
        for line in stdout:
            progress.saw_line(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    start = time.monotonic()
    stalled = None
    while proc.poll() is None:
        time.sleep(poll_s)
        forced = progress.poll_trace()
        if forced:
            stalled = f"the run could not be forced as asked, and was ended: {forced}"
        elif stall_s is not None and progress.silent_for() > stall_s:
            stalled = (
                f"the run made no progress for {progress.silent_for():.0f} s (no new kind of log line, no "
                f"step, no trace event; the bound is {stall_s:.0f} s) and was ended"
            )
        elif time.monotonic() - start > timeout_s:
            break
        if stalled:
            break
    running = proc.poll() is None
    if running:
        end()
    reader.join(30)
    if stalled:
        raise RunStalled(progress.report(stalled))
    return (None if running else proc.returncode), "".join(progress.lines), progress


def run_watched(
    command: Sequence[str],
    timeout_s: float,
    *,
    env: dict[str, str] | None = None,
    stall_s: float | None = None,
    trace: Path | None = None,
    end: Callable[[int], None] | None = None,
) -> tuple[int | None, str, Progress]:
    """Run ``command`` in a session of its own under ``watch``; ``end(pid)`` ends its session."""
    proc = subprocess.Popen(
        list(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
        env=env,
    )

    def ending() -> None:
        if end is not None:
            end(proc.pid)
        else:
            proc.kill()

    try:
        return watch(proc, timeout_s, stall_s, trace, ending)
    finally:
        ending()
        proc.wait()
